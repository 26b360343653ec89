//! The `Network` custom resource: spec validation and its Multus backend state.

pub mod backend;
pub mod crd;
pub mod members;
pub mod nad;
pub mod nad_index;
pub mod overlaps;
pub mod subnet;
