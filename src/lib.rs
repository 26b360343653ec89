//! envoy-injector: a mutating admission webhook that injects sidecars from templates.

pub mod admission;
pub mod cache;
pub mod cli;
pub mod commands;
pub mod config;
pub mod duration;
pub mod inject;
pub mod leader;
pub mod metrics;
pub mod network;
pub mod offline;
pub mod reload;
pub mod server;
pub mod templates;
pub mod tls;
