//! The `Network` custom resource: spec validation and its Multus backend state.

pub mod nad;
pub mod subnet;
