//! Short-lived commands a tier runs to their end: kubectl (for the steps that are about
//! what kubectl itself does, `kubectl apply` refused by a webhook for one) and one-shot
//! subcommands of the binary. They run on a blocking thread, off the async workers.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::core::ApiResource;

use super::{Scope, Skip, shipped_webhooks_at};

/// Runs `command` to its end with `stdin` written to it (nothing when `None`).
pub async fn run_command(mut command: Command, stdin: Option<&str>) -> Output {
    let stdin = stdin.map(str::to_string);
    let shown = format!("{command:?}");
    tokio::task::spawn_blocking(move || {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
        let mut pipe = child.stdin.take().expect("a piped stdin");
        if let Some(text) = stdin {
            pipe.write_all(text.as_bytes())
                .unwrap_or_else(|e| panic!("cannot write the stdin of {shown}: {e}"));
        }
        drop(pipe);
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("{shown} did not finish: {e}"))
    })
    .await
    .expect("the thread running a command")
}

/// `kubectl ARGS` against the cluster of `KUBECONFIG`.
pub async fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new("kubectl");
    command.args(args);
    run_command(command, stdin).await
}

/// `Ok` when a kubectl client is installed; tiers that drive it skip, loudly, without.
pub fn require_kubectl() -> Result<(), Skip> {
    let found = Command::new("kubectl").args(["version", "--client"]).output();
    if found.is_ok_and(|o| o.status.success()) {
        Ok(())
    } else {
        Err(Skip("kubectl is not installed, and this tier drives it".into()))
    }
}

/// Exit status, stdout and stderr of a finished command, for failure messages.
pub fn describe_output(output: &Output) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `kubectl apply --server-side` of `objects` (JSON, each with its namespace) as one List;
/// panics unless it succeeds. `--validate=false`: kubectl may be older than the API server,
/// whose own validation still applies.
pub async fn kubectl_apply(objects: &[Value]) {
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": objects });
    let out = kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--validate=false",
            "-f",
            "-",
        ],
        Some(&list.to_string()),
    )
    .await;
    assert!(
        out.status.success(),
        "expected kubectl apply to succeed, found: {}",
        describe_output(&out)
    );
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
