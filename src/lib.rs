//! envoy-injector: a mutating admission webhook that injects sidecars from templates.

// The engine and the YAML layer are crates of their own (ARCHITECTURE.md); the
// application names them as modules of its own.
pub use envoy_injector_engine::{NAME, inject, policies, template};
pub use envoy_injector_yaml as yaml;

pub mod admission;
pub mod backoff;
pub mod cache;
pub mod check;
pub mod client;
pub mod cluster;
pub mod controller;
pub mod duration;
pub mod events;
pub mod leader;
pub mod live;
pub mod metrics;
pub mod network;
pub mod offline;
pub mod policy_sync;
pub mod relist;
pub mod rollout;
pub mod server;
pub mod shutdown;
pub mod stale;
pub mod tls;
pub mod uninjected;
