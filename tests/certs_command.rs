//! `envoy-injector certs`: the files it writes serve the webhook for the Service names.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::*;
use envoy_injector::tls::TlsSource;

fn certs_command(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_envoy-injector"))
        .arg("certs")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run envoy-injector certs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_files_serve_the_service_names_and_extra_sans() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/certs");
    let out_str = out.to_str().unwrap();
    // An existing, world-readable key file must end up private too.
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("tls.key"), "old").unwrap();
    std::fs::set_permissions(out.join("tls.key"), std::fs::Permissions::from_mode(0o644)).unwrap();

    let output = certs_command(&[
        "--service",
        SERVICE,
        "--namespace",
        NAMESPACE,
        "--out-dir",
        out_str,
        "--san",
        "127.0.0.1",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "one line per file written: {stdout}");
    for name in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(
            stdout.contains(&out.join(name).display().to_string()),
            "{name} in {stdout}"
        );
    }
    let mode = std::fs::metadata(out.join("tls.key")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "tls.key must be private, found {mode:o}");

    let source = TlsSource::Files {
        cert: out.join("tls.crt"),
        key: out.join("tls.key"),
        reload_interval: Duration::from_secs(1),
    };
    let server = start(test_config(), source).await;
    let addr = server.server.webhook_addr();
    let ca = std::fs::read_to_string(out.join("ca.crt")).unwrap();

    // By the Service DNS name, as the API server dials it...
    let by_name = client(addr, &[&ca], Protocol::Alpn);
    let response = post_review(&by_name, addr, fixture("dry-run.json")).await;
    assert_eq!(response.status(), 200);
    // ...and by the extra IP SAN.
    let by_ip = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .timeout(PATIENCE)
        .build()
        .unwrap();
    let response = by_ip
        .post(format!("https://127.0.0.1:{}/mutate", addr.port()))
        .headers(apiserver_headers())
        .body(fixture("dry-run.json"))
        .send()
        .await
        .expect("the IP SAN is accepted");
    assert_eq!(response.status(), 200);
}

#[test]
fn invalid_arguments_fail_with_a_message_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let out_str = out.to_str().unwrap();
    for (args, says) in [
        (vec!["--service", "Webhook", "--namespace", "ns"], "--service"),
        (
            vec!["--service", "webhook", "--namespace", "ns", "--days", "0"],
            "--days",
        ),
        (
            vec!["--service", "webhook", "--namespace", "ns", "--san", "not a host"],
            "not a host",
        ),
    ] {
        let mut args = args;
        args.extend(["--out-dir", out_str]);
        let output = certs_command(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} should fail");
        assert!(stderr.contains(says), "{args:?}: expected {says:?} in {stderr}");
        assert!(!out.exists(), "{args:?}: nothing may be written");
    }
}
