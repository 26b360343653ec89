//! The parts of `tests/common` that any binary can include, tests or not (each file stands
//! alone): `mod common;` gets them here, and `tests/e2e`, `tests/pods`, `tests/scale` and
//! `examples/bench_scale.rs` include this file with `#[path]`.
#![allow(dead_code)]

#[path = "crd.rs"]
pub mod crd;
#[path = "kubectl.rs"]
pub mod kubectl;
#[path = "metrics.rs"]
pub mod metrics;
#[path = "poll.rs"]
pub mod poll;
#[path = "process.rs"]
pub mod process;
