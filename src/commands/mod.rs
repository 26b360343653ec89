//! One module per subcommand; each returns a typed error that `main` reports.

pub mod certs;
pub mod check;
pub mod crd;
mod flags;
pub mod inject;
mod kubeconfig;
pub mod policies;
pub mod rollout;
pub mod serve;
