//! `envoy-injector policies -f` as a user runs it: the YAML opens with a comment that says
//! what it is, the Kubernetes it needs and what it binds, and stays YAML kubectl applies.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_envoy-injector");

#[test]
fn the_output_says_what_it_is_needs_and_binds() {
    let out = Command::new(BIN)
        .args(["policies", "-f", "manifests/configmap.yaml", "--namespace", "mesh"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let (header, objects) = text.split_once("\n---\n").expect("a header, then the documents");
    assert!(header.lines().all(|l| l.starts_with("# ")), "{header}");
    for expected in [
        "compiled by `envoy-injector policies` from manifests/configmap.yaml, templates classic, config",
        "Needs Kubernetes 1.36 or later",
        "# Binding envoy-injector-inject-namespace: namespaces ",
        "kubernetes.io/metadata.name notin (kube-system,mesh)",
    ] {
        assert!(header.contains(expected), "expected {expected:?} in:\n{header}");
    }
    let documents: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    let bindings = documents
        .iter()
        .filter(|d| d["kind"].as_str().unwrap_or_default().ends_with("Binding"));
    assert_eq!(bindings.count(), header.matches("# Binding ").count(), "{header}");
    assert!(
        objects.starts_with("apiVersion: admissionregistration.k8s.io/v1"),
        "{objects}"
    );
}

/// `--kube-version` from the oldest supported on: a release newer than the rules known is
/// taken with the newest rules and one warning, the same policies out; older is refused.
#[test]
fn kube_version_takes_newer_releases_with_a_warning_and_refuses_older_ones() {
    let run = |version: &str| {
        Command::new(BIN)
            .args(["policies", "-f", "manifests/configmap.yaml", "--kube-version", version])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("the binary runs")
    };
    let newest = run("1.36");
    assert!(newest.status.success(), "{}", String::from_utf8_lossy(&newest.stderr));
    for version in ["1.37", "1.40", "1.31"] {
        let out = run(version);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{version}: expected accepted, found: {stderr}");
        assert_eq!(out.stdout, newest.stdout, "{version}: expected the policies of 1.36");
        let warning = format!(
            "Kubernetes {version} is newer than the rules this injector knows: template values are checked with the rules of 1.36"
        );
        let warnings = stderr.matches(&warning).count();
        let expected = usize::from(version != "1.31");
        assert_eq!(
            warnings, expected,
            "{version}: expected {expected} warning {warning:?}, found: {stderr}"
        );
    }
    let out = run("1.30");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "1.30: expected refused, found accepted");
    assert!(
        stderr.contains("Kubernetes 1.30 is not supported: expected 1.31 or later"),
        "1.30: expected the refusal's words, found: {stderr}"
    );
}
