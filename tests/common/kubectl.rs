//! kubectl, run from the tests: whether it is there (and the one rule for when it is not),
//! `kubectl kustomize`, and commands run to their end off the async workers.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use super::harness::Skip;

/// Whether a kubectl client is installed (`kubectl version --client` succeeds).
pub fn client_found() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

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

/// The one rule for tests that drive kubectl: installed → `Ok`; missing under CI (`CI`
/// set, as CI systems do) → panics, so a CI run cannot pass by skipping `what`; missing
/// elsewhere → `Err`, which the test returns: its harness (`harness.rs`) reports it
/// `ignored` with why. Tests that need a cluster keep their own rule for `KUBECONFIG`: CI
/// starts the cluster for them.
pub fn required(what: &str) -> Result<(), Skip> {
    if client_found() {
        return Ok(());
    }
    refuse_to_skip_in_ci(what);
    Err(Skip(format!(
        "{what} drives kubectl, which is not installed: {INSTALL_KUBECTL}"
    )))
}

/// The file `make test` collects every skip in (`TEST_SKIP_REPORT`), to end its run with
/// one summary of them.
pub const SKIP_REPORT_VAR: &str = "TEST_SKIP_REPORT";

/// Says `SKIPPED {what}: {why}` straight to stderr, past any capture, and notes it, one
/// line, in the file `TEST_SKIP_REPORT` names, when it names one. The harness
/// (`harness.rs`) calls it for a test or tier that returns `Skip`; a tier that skips one
/// part and runs the rest calls it for that part.
pub fn skipped(what: &str, why: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "SKIPPED {what}: {why}");
    let _ = stderr.flush();
    if let Some(path) = std::env::var_os(SKIP_REPORT_VAR).filter(|p| !p.is_empty()) {
        // One short append per line: test binaries running side by side do not interleave.
        let line = format!("{what}: {}\n", why.replace('\n', " "));
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = written {
            let _ = writeln!(stderr, "cannot note the skip in {}: {e}", path.to_string_lossy());
        }
    }
}

/// Under CI, panics saying that `what` needs kubectl and how to get it; elsewhere returns,
/// and the caller skips loudly.
pub fn refuse_to_skip_in_ci(what: &str) {
    if in_ci() {
        panic!(
            "{what} needs kubectl, which is required when CI is set (CI={:?}), but it is not on PATH: {INSTALL_KUBECTL}",
            std::env::var("CI").unwrap_or_default()
        );
    }
}

/// `kubectl kustomize DIR`: the rendered YAML stream; `Err` when kubectl cannot run.
/// Panics when it runs and fails: the manifests are broken.
pub fn kustomize(dir: &Path) -> Result<String, String> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(|e| format!("kubectl is needed to render {} (kubectl kustomize): {e}", dir.display()))?;
    assert!(
        output.status.success(),
        "expected `kubectl kustomize {}` to render, found {}: {}",
        dir.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout).expect("kustomize prints UTF-8"))
}

/// Runs `command` to its end with `stdin` written to it (nothing when `None`), on a
/// blocking thread.
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
