//! `envoy-injector uninject`: `inject | uninject` gives back the input on the offline
//! corpus, byte for byte as the writer writes an untouched manifest; a manifest without a
//! status annotation is written unchanged with a note.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_envoy-injector");

/// The corpus files that are valid manifests throughout (as in tests/offline_corpus.rs).
const VALID: &[&str] = &[
    "scalars.yaml",
    "anchors-and-blocks.yaml",
    "list-and-json.yaml",
    "comments.yaml",
    "custom-resources.yaml",
];

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(out: Output) -> Vec<u8> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn inject_then_uninject_gives_back_the_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/offline");
    let mounts = "initContainers:\n- {name: setup, image: busybox}\ncontainers:\n- {name: proxy, image: envoy}\nvolumes:\n- {name: certs, emptyDir: {}}\nvolumeMounts:\n- {name: certs, mountPath: /etc/certs}\nimagePullSecrets:\n- name: registry\n";
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), mounts).unwrap();
    let config = config.path().to_str().unwrap().to_string();
    for name in VALID {
        let original = std::fs::read(dir.join(name)).unwrap();
        for format in ["yaml", "json"] {
            // The untouched manifest as the writer writes it: uninject leaves it unchanged.
            let untouched = ok(run(&["uninject", "-f", "-", "-o", format], &original));
            for template in [&[][..], &["--config", config.as_str()][..]] {
                let injected = ok(run(
                    &[&["inject", "-f", "-", "-o", format], template].concat(),
                    &original,
                ));
                if *name != "custom-resources.yaml" {
                    let text = String::from_utf8_lossy(&injected);
                    assert!(
                        text.contains("sidecar.samplecrd.k8s.io/status"),
                        "{name}: something was injected"
                    );
                }
                let back = ok(run(&["uninject", "-f", "-", "-o", format], &injected));
                assert_eq!(
                    String::from_utf8(back).unwrap(),
                    String::from_utf8(untouched.clone()).unwrap(),
                    "{name} -o {format} {template:?}"
                );
            }
        }
    }
}

#[test]
fn a_manifest_never_injected_is_written_unchanged_with_a_note() {
    let pod = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: web # mine\nspec:\n  containers:\n  - name: app\n    image: nginx\n";
    let out = run(&["uninject", "-f", "-"], pod);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(pod.to_vec()).unwrap()
    );
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "note: document 1 (Pod web) at line 1: left unchanged: no `sidecar.samplecrd.k8s.io/status` annotation: it was not injected, or not by this injector\n"
    );
}

#[test]
fn jsonpatch_output_removes_only_and_a_bad_status_is_named() {
    let pod = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: app}]}\n";
    let injected = ok(run(&["inject", "-f", "-"], pod));
    let patch = String::from_utf8(ok(run(&["uninject", "-f", "-", "-o", "jsonpatch"], &injected))).unwrap();
    let ops: Vec<serde_json::Value> = serde_json::from_str(patch.trim()).unwrap();
    assert!(!ops.is_empty());
    assert!(ops.iter().all(|op| op["op"] == "remove"), "{patch}");

    let bad = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  annotations:\n    sidecar.samplecrd.k8s.io/status: 'not json'\nspec: {containers: [{name: app}]}\n";
    let out = run(&["uninject", "-f", "-"], bad);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("document 1 (Pod web) at line 1: annotation `sidecar.samplecrd.k8s.io/status`: expected the JSON the injector writes, found \"not json\""),
        "{stderr}"
    );
    let out = run(&["uninject", "-f", "-", "-o", "strategic"], pod);
    assert!(
        !out.status.success(),
        "a strategic merge patch cannot say what uninject does"
    );
}
