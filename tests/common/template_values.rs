//! The value-rule cases of `tests/fixtures/template-values.yaml`: each template, the
//! verdict its author expects, the injector's verdict, and the Pods that hold it, as the
//! API server sees them (the e2e tier `values` dry-runs those).

use std::path::Path;

use envoy_injector::template::{KubeVersion, Template};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    /// `admitted` or `refused`.
    pub expect: String,
    #[serde(default)]
    template: Option<String>,
    /// A template of the repository instead, by path.
    #[serde(default)]
    file: Option<String>,
}

impl Case {
    pub fn expects_refusal(&self) -> bool {
        match self.expect.as_str() {
            "refused" => true,
            "admitted" => false,
            other => panic!("case {}: expected `admitted` or `refused`, found {other:?}", self.name),
        }
    }

    pub fn text(&self) -> String {
        match (&self.template, &self.file) {
            (Some(text), None) => text.clone(),
            (None, Some(file)) => {
                let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
                std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
            }
            _ => panic!("case {}: expected one of `template` or `file`", self.name),
        }
    }

    /// The injector's verdict for `version`: `Err` with its message when refused.
    pub fn verdict(&self, version: KubeVersion) -> Result<(), String> {
        Template::parse("config", &self.text(), version)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The Pods the API server is asked about, as JSON: one app container (image `image`)
    /// with the template's `volumeMounts`, plus its containers (as regular containers, and
    /// in a second Pod as native sidecars, as the injection may add them), init containers,
    /// volumes and pull secrets, written exactly as the template writes them.
    pub fn pods(&self, image: &str) -> Vec<Value> {
        let template: Value = serde_yaml_ng::from_str(&self.text())
            .unwrap_or_else(|e| panic!("case {}: the template is not YAML: {e}", self.name));
        let list = |key: &str| template.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
        let mut app = json!({"name": "app", "image": image});
        if let Some(mounts) = template.get("volumeMounts") {
            app["volumeMounts"] = mounts.clone();
        }
        let pod = |containers: Vec<Value>, init: Vec<Value>| {
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"generateName": "values-"},
                "spec": {
                    "containers": containers,
                    "initContainers": init,
                    "volumes": list("volumes"),
                    "imagePullSecrets": list("imagePullSecrets"),
                },
            })
        };
        let sidecars = list("containers");
        let regular = pod(
            std::iter::once(app.clone()).chain(sidecars.iter().cloned()).collect(),
            list("initContainers"),
        );
        if sidecars.is_empty() {
            return vec![regular];
        }
        let native = sidecars.iter().map(|c| {
            let mut c = c.clone();
            c["restartPolicy"] = json!("Always");
            c
        });
        vec![
            regular,
            pod(vec![app], list("initContainers").into_iter().chain(native).collect()),
        ]
    }
}

/// Every case of the fixture.
pub fn cases() -> Vec<Case> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/template-values.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
