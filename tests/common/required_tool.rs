//! The one rule for tests that drive kubectl without a cluster: kubectl installed → they
//! run; missing under CI (`CI` set, as CI systems do) → they fail, so a CI run cannot pass
//! by skipping them; missing elsewhere → a loud SKIPPED line and they pass. Tests that need
//! a cluster (`KUBECONFIG`) keep their own rule: CI starts the cluster for them.
#![allow(dead_code)]

use std::io::Write as _;
use std::process::Command;

/// Where to get kubectl, named in the failure.
const INSTALL_KUBECTL: &str = "install kubectl (https://kubernetes.io/docs/tasks/tools/, or the `kubectl` \
     package of the Kubernetes apt repository pkgs.k8s.io) and put it on PATH";

/// `CI` is set to anything but empty, `false` or `0`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| ci_value_means_ci(&value))
}

/// How CI systems spell "this is CI": anything but empty, `false` or `0`.
pub fn ci_value_means_ci(value: &str) -> bool {
    let value = value.trim();
    !(value.is_empty() || value == "0" || value.eq_ignore_ascii_case("false"))
}

pub fn have_kubectl() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether `what` (a test, or the part of one that needs kubectl) runs. Without kubectl:
/// panics under CI, else prints `SKIPPED {what}: kubectl is not installed` and says no.
pub fn kubectl_or_skip(what: &str) -> bool {
    if have_kubectl() {
        return true;
    }
    if in_ci() {
        panic!(
            "{what} needs kubectl, which is required when CI is set (CI={:?}), but it is not on PATH: {INSTALL_KUBECTL}",
            std::env::var("CI").unwrap_or_default()
        );
    }
    // Straight to stderr, past the test harness's capture: a skip is seen without --nocapture.
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "SKIPPED {what}: kubectl is not installed");
    false
}
