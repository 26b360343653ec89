//! The real Helm v4 engine, driven through `scripts/helm.py` (PyPI's helm-python-sdk,
//! installed by `make helm-sdk` into `target/helm-sdk/`, or `HELM_SDK_DIR`): lint, schema,
//! render for `tests/chart`, install to uninstall for tier `helm` of `tests/pods`. Without
//! it a test returns [`Skip`] (its harness reports it `ignored`), except under CI, where it
//! fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::harness::Skip;
use super::kubectl::in_ci;

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn chart_dir() -> PathBuf {
    repo().join("charts/envoy-injector")
}

/// Where `make helm-sdk` puts the engine.
fn sdk_dir() -> PathBuf {
    std::env::var_os("HELM_SDK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/helm-sdk"))
}

/// The engine, or why `what` cannot run without it; under CI its absence fails.
pub fn engine(what: &str) -> Result<Engine, Skip> {
    let dir = sdk_dir();
    if dir.join("helm_python").is_dir() {
        return Ok(Engine { sdk: dir });
    }
    let why = format!(
        "expected the Helm engine in {}, found none: run `make helm-sdk` (PyPI helm-python-sdk) or set HELM_SDK_DIR",
        dir.display()
    );
    assert!(
        !in_ci(),
        "{what} needs the Helm engine, which is required when CI is set: {why}"
    );
    Err(Skip(why))
}

pub struct Engine {
    sdk: PathBuf,
}

/// What `helm.py` answered: its JSON, or Helm's error words.
pub type Answer = Result<Value, String>;

impl Engine {
    /// `helm.py ARGS...`: its JSON on success, its stderr (Helm's words) on failure.
    pub fn run(&self, args: &[&str]) -> Answer {
        let output = Command::new("python3")
            .arg(repo().join("scripts/helm.py"))
            .args(args)
            .env("HELM_SDK_DIR", &self.sdk)
            .output()
            .unwrap_or_else(|e| panic!("expected python3 to run scripts/helm.py: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            return Err(format!("{}{}", String::from_utf8_lossy(&output.stderr), stdout));
        }
        Ok(serde_json::from_str(&stdout).unwrap_or(Value::String(stdout)))
    }

    /// The chart rendered as `helm template envoy-injector charts/envoy-injector -n
    /// NAMESPACE` with `values` (JSON) over the defaults: every object of its templates and
    /// of `crds/`, as JSON values in file order.
    pub fn render(&self, namespace: &str, values: &str) -> Result<Vec<Value>, String> {
        let chart = chart_dir().display().to_string();
        let answer = self.run(&["render", &chart, "-n", namespace, "--set-json", values])?;
        let mut objects = Vec::new();
        let manifests = answer["manifests"].as_object().expect("render answers its manifests");
        let crds = answer["crds"].as_array().expect("render answers the chart's CRDs");
        let texts = manifests
            .iter()
            .filter(|(path, _)| path.ends_with(".yaml"))
            .map(|(_, text)| text.as_str().unwrap_or_default())
            .chain(crds.iter().map(|crd| crd["data"].as_str().unwrap_or_default()));
        for text in texts {
            objects.extend(yaml_documents(text));
        }
        Ok(objects)
    }

    /// `helm lint --strict` with `values`: `Err` holds its findings.
    pub fn lint(&self, values: &str) -> Result<String, String> {
        let chart = chart_dir().display().to_string();
        self.run(&["lint", &chart, "--set-json", values]).map(|v| v.to_string())
    }

    /// The chart's schema against `values` over the defaults.
    pub fn schema(&self, values: &str) -> Answer {
        let chart = chart_dir().display().to_string();
        self.run(&["schema", &chart, "--set-json", values])
    }
}

/// The objects of a YAML stream (empty documents skipped).
pub fn yaml_documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("rendered YAML parses"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}
