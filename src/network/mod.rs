//! The `Network` custom resource: spec validation and its Multus backend state.

pub mod backend;
pub mod controller;
pub mod crd;
pub mod index;
pub mod join;
pub mod members;
pub mod nad;
pub mod owned;
pub mod subnet;
