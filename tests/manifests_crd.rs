//! The CRD in manifests/ is exactly what `envoy-injector crd` generates from the Rust type.

use std::process::Command;

use envoy_injector::network::crd::Network;

#[test]
fn manifests_crd_matches_the_generated_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_envoy-injector"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let generated = String::from_utf8(out.stdout).unwrap();
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/crd.yaml")).unwrap();
    assert!(
        generated == committed,
        "manifests/crd.yaml is stale: regenerate it with `cargo run -- crd > manifests/crd.yaml`"
    );
}

#[test]
fn seed_example_network_parses_and_passes_the_crd_rules() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/examples/example-network.yaml"
    ))
    .unwrap();
    let network: Network = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(network.spec.cidr, "198.18.72.0/24");
    let spec = serde_json::to_value(&network.spec).unwrap();
    envoy_injector::network::crd::NetworkSpec::validate_cel(&spec, None).unwrap();
}
