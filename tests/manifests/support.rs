//! Rendering and parsing the manifests, shared by every check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub(crate) use crate::common::harness::{Outcome, Skip};
use crate::common::kubectl;

pub(crate) const NAMESPACE: &str = "envoy-injector";
pub(crate) const NAME: &str = "envoy-injector";
pub(crate) const INJECT: &str = "sidecar.samplecrd.k8s.io/inject";
pub(crate) const LEGACY: &str = "initializer.kubernetes.io/envoy";
pub(crate) const STATUS: &str = "sidecar.samplecrd.k8s.io/status";
pub(crate) const NETWORK: &str = "sidecar.samplecrd.k8s.io/network";

pub(crate) fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

pub(crate) fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One YAML document of a stream, as JSON, with where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Doc {
    pub(crate) origin: String,
    pub(crate) value: Value,
}

impl Doc {
    pub(crate) fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or("?")
    }
    pub(crate) fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or("?")
    }
    pub(crate) fn label(&self) -> String {
        format!("{} ({} {})", self.origin, self.kind(), self.name())
    }
    pub(crate) fn typed<T: DeserializeOwned>(&self) -> T {
        serde_json::from_value(self.value.clone())
            .unwrap_or_else(|e| panic!("{} does not parse as its k8s-openapi type: {e}", self.label()))
    }
}

pub(crate) fn parse_stream(origin: &str, text: &str) -> Vec<Doc> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .enumerate()
        .filter_map(|(i, de)| {
            let value =
                Value::deserialize(de).unwrap_or_else(|e| panic!("{origin}: document {} is not YAML: {e}", i + 1));
            (!value.is_null()).then(|| Doc {
                origin: format!("{origin} document {}", i + 1),
                value,
            })
        })
        .collect()
}

/// `kubectl kustomize manifests/`, once per test binary; without kubectl, why the test
/// cannot run (`kubectl::required`).
pub(crate) fn rendered() -> Result<&'static [Doc], Skip> {
    static RENDERED: OnceLock<Result<Vec<Doc>, String>> = OnceLock::new();
    RENDERED
        .get_or_init(|| {
            kubectl::required("rendering manifests/ (`kubectl kustomize manifests/`)").map_err(|Skip(why)| why)?;
            let text = kubectl::kustomize(&repo("manifests")).unwrap_or_else(|e| panic!("{e}"));
            Ok(parse_stream("kubectl kustomize manifests/", &text))
        })
        .as_deref()
        .map_err(|why| Skip(why.clone()))
}

/// Exactly one rendered document of `kind`.
pub(crate) fn one(docs: &[Doc], kind: &str) -> Doc {
    let found: Vec<&Doc> = docs.iter().filter(|d| d.kind() == kind).collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind} in the rendered manifests, found {:?}",
        found.iter().map(|d| d.label()).collect::<Vec<_>>()
    );
    found[0].clone()
}

/// Whether a label selector selects `labels`, as the API server decides (the library's
/// own, which `check` uses): an unknown operator fails the test.
pub(crate) fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    envoy_injector::cluster::selector::selects(selector, labels).unwrap_or_else(|e| panic!("{e}"))
}

/// `overlay` (a kustomization whose base is `../envoy-injector/manifests`, as the docs lay
/// it out: beside a checkout `envoy-injector/`) rendered by kustomize against this
/// checkout; kustomize takes no absolute base, so the checkout is linked beside it.
pub(crate) fn render_overlay(overlay: &str, what: &str) -> Vec<Doc> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::os::unix::fs::symlink(repo(""), dir.path().join("envoy-injector")).expect("link the checkout");
    let overlay_dir = dir.path().join("my-injector");
    std::fs::create_dir(&overlay_dir).expect("the overlay's directory");
    std::fs::write(overlay_dir.join("kustomization.yaml"), overlay).expect("write the overlay");
    let rendered = crate::common::kubectl::kustomize(&overlay_dir).unwrap_or_else(|e| panic!("{e}"));
    parse_stream(what, &rendered)
}
