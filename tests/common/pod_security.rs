//! The cases of `tests/fixtures/pod-security.yaml`: each template, the controls its author
//! expects it to break at each `LEVEL:VERSION`, the injector's findings, and the Pod that
//! holds it as the API server's Pod Security admission sees it (the e2e tier
//! `pod_security` dry-runs that).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use envoy_injector::template::pod_security::{self, Level, LevelVersion, PodLevel, PolicyVersion};
use envoy_injector::template::{KubeVersion, Template};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    #[serde(default)]
    template: Option<String>,
    /// A template of the repository instead, by path.
    #[serde(default)]
    file: Option<String>,
    /// The Pod's own fields (its `spec`), beside what the template adds.
    #[serde(default)]
    pod: Option<Value>,
    /// `LEVEL:VERSION` → the controls broken there.
    pub expect: BTreeMap<String, BTreeSet<String>>,
}

impl Case {
    fn text(&self) -> String {
        match (&self.template, &self.file) {
            (Some(text), None) => text.clone(),
            (None, Some(file)) => {
                let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
                std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
            }
            _ => panic!("case {}: expected one of `template` or `file`", self.name),
        }
    }

    /// The injector's findings at `at` (`LEVEL:VERSION`), by control name, in the Pod of
    /// `pod` if the case gives one, else judged alone.
    pub fn ours(&self, at: &str) -> BTreeSet<String> {
        let template = Template::parse("t", &self.text(), KubeVersion::NEWEST)
            .unwrap_or_else(|e| panic!("case {}: expected a valid template, found: {e}", self.name));
        let pod = self
            .pod
            .as_ref()
            .map(|spec| PodLevel::from_pod(&json!({ "spec": spec })));
        pod_security::judge("t", &template.spec, level_version(at), pod.as_ref())
            .into_iter()
            .map(|finding| control_name(&finding.control))
            .collect()
    }

    /// The Pod the API server is asked about: one app container that meets restricted
    /// (with the template's app mounts), the template's containers, init containers and
    /// volumes, and the case's own Pod fields.
    pub fn pod(&self, image: &str) -> Value {
        let template: Value = serde_yaml_ng::from_str(&self.text())
            .unwrap_or_else(|e| panic!("case {}: the template is not YAML: {e}", self.name));
        let list = |key: &str| template.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
        let mut app = json!({
            "name": "app",
            "image": image,
            "securityContext": {
                "runAsNonRoot": true,
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        });
        if let Some(mounts) = template.get("volumeMounts") {
            app["volumeMounts"] = mounts.clone();
        }
        let mut spec = json!({
            "containers": std::iter::once(app).chain(list("containers")).collect::<Vec<_>>(),
            "initContainers": list("initContainers"),
            "volumes": list("volumes"),
        });
        for (key, value) in self.pod.iter().flat_map(|p| p.as_object()).flatten() {
            spec[key] = value.clone();
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "pod-security-"},
            "spec": spec,
        })
    }
}

/// `LEVEL:VERSION` read as the labels' values are.
pub fn level_version(at: &str) -> LevelVersion {
    let (level, version) = at
        .split_once(':')
        .unwrap_or_else(|| panic!("expected LEVEL:VERSION, found {at:?}"));
    LevelVersion::new(
        Level::parse(level).unwrap_or_else(|| panic!("expected a level, found {level:?}")),
        PolicyVersion::parse(version).unwrap_or_else(|| panic!("expected a version, found {version:?}")),
    )
}

fn control_name(control: &pod_security::Control) -> String {
    serde_json::to_value(control)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The controls a Pod Security admission refusal names, by the injector's names: the API
/// server writes each as `REASON (DETAIL)`, joined by `, `.
pub fn controls_in(message: &str) -> BTreeSet<String> {
    const REASONS: [(&str, &str); 16] = [
        ("privileged", "privileged"),
        ("hostProcess", "hostProcess"),
        ("hostPort", "hostPorts"),
        ("hostPath volumes", "hostPathVolumes"),
        ("non-default capabilities", "capabilities"),
        ("unrestricted capabilities", "capabilities"),
        ("forbidden AppArmor profile", "appArmor"),
        ("forbidden AppArmor profiles", "appArmor"),
        ("seLinuxOptions", "seLinux"),
        ("procMount", "procMount"),
        ("seccompProfile", "seccomp"),
        ("probe or lifecycle host", "probeHost"),
        ("restricted volume types", "volumeTypes"),
        ("allowPrivilegeEscalation != false", "allowPrivilegeEscalation"),
        ("runAsNonRoot != true", "runAsNonRoot"),
        ("runAsUser=0", "runAsUser"),
    ];
    REASONS
        .iter()
        .filter(|(reason, _)| message.contains(&format!("{reason} (")))
        .map(|(_, control)| control.to_string())
        .collect()
}

/// Every case of the fixture.
pub fn cases() -> Vec<Case> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pod-security.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
