//! `envoy-injector crd`: prints the Network CRD generated from the Rust type.

use std::io::Write;

pub fn run() -> std::io::Result<()> {
    std::io::stdout()
        .lock()
        .write_all(envoy_injector::network::crd::crd_yaml().as_bytes())
}
