//! The `Network` custom resource: spec validation and its Multus backend state.

pub mod backend;
pub mod controller;
pub mod crd;
pub mod join;
pub mod nad;
pub mod subnet;
