//! The parts of `tests/common` that any binary can include, tests or not (each file stands
//! alone): `mod common;` gets them here, and `tests/e2e`, `tests/pods`, `tests/scale`,
//! `examples/bench_scale.rs` and `examples/bench_admission.rs` include this file with `#[path]`.
#![allow(dead_code)]

#[path = "crd.rs"]
pub mod crd;
#[path = "harness.rs"]
pub mod harness;
#[path = "helm.rs"]
pub mod helm;
#[path = "kubectl.rs"]
pub mod kubectl;
#[path = "metrics.rs"]
pub mod metrics;
#[path = "policies.rs"]
pub mod policies;
#[path = "poll.rs"]
pub mod poll;
#[path = "process.rs"]
pub mod process;
#[path = "webhooks.rs"]
pub mod webhooks;
