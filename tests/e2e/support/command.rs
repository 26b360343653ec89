//! kubectl in the tiers (for the steps that are about what kubectl itself does, `kubectl
//! apply` refused by a webhook for one): a skip without it, and the shipped webhooks
//! registered through it; and the binary's own commands run as a user runs them. Running
//! commands is `tests/common/kubectl.rs`.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::core::ApiResource;

use super::{Scope, Skip, shipped_webhooks_at};
use crate::common::kubectl::{describe_output, kubectl_apply, required, run_command};

/// `Ok` when a kubectl client is installed; tiers that drive it skip, loudly, without (and
/// fail under CI, `common::kubectl::required`'s rule).
pub fn require_kubectl() -> Result<(), Skip> {
    required("this tier")
}

/// Registers the shipped MutatingWebhookConfiguration (`manifests/webhook.yaml`) as `name`,
/// calling `url` for `namespaces` only and trusting `ca_pem`; `scope` deletes it.
pub async fn register_shipped_webhooks(scope: &Scope, name: &str, url: &str, ca_pem: &[u8], namespaces: &[&str]) {
    scope.delete_later(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, name);
    kubectl_apply(&[shipped_webhooks_at(
        "manifests/webhook.yaml",
        name,
        url,
        ca_pem,
        namespaces,
    )])
    .await;
}

/// What a command of the binary answered.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `envoy-injector COMMAND ARGS` (the binary cargo built for the tests, against the
/// set's `KUBECONFIG`), which must answer with exit code 0 or 1.
pub async fn envoy_injector(command: &str, args: &[&str]) -> Ran {
    let mut cli = std::process::Command::new(env!("CARGO_BIN_EXE_envoy-injector"));
    cli.arg(command).args(args);
    let out = run_command(cli, None).await;
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 1),
        "expected `envoy-injector {command}` to answer (exit 0 or 1), found: {}",
        describe_output(&out)
    );
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
