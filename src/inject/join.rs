//! Joining a Network after the injection: a Pod that a compiled admission policy injected
//! (the API server itself, which cannot see Networks) and that names a Network gets from
//! the webhook only what joining adds, exactly as if the webhook had injected it whole.

use serde_json::{Map, Value};

use super::jsonpatch::{OpValue, Ops, pointer};
use super::pod::PodView;
use super::{Extras, InjectError, InjectionStatus, STATUS_ANNOTATION};

/// Whether the Pod already carries the join: the label joining sets, naming `network`.
pub fn joined(pod: &PodView<'_>, network: &str) -> bool {
    let Ok(view) = pod.check() else { return false };
    view.labels
        .and_then(|labels| labels.text(crate::network::join::NETWORK_LABEL))
        .is_some_and(|value| value == network)
}

/// The operations that add `extras` to a Pod already injected: each injected container
/// (as the status annotation records them) gets the env as the webhook sets it (a var of
/// the same name moved to the end with the new value), the Pod the annotations and labels.
pub fn render<'p>(pod: &PodView<'_>, extras: &Extras) -> Result<Ops<'p>, InjectError> {
    let whole = pod.whole.pod().ok_or_else(|| InjectError::Unreadable {
        what: String::from("the injected Pod's containers"),
    })?;
    let status: InjectionStatus = whole
        .pointer(&pointer(&["metadata", "annotations", STATUS_ANNOTATION]))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or_else(|| InjectError::Unreadable {
            what: format!("annotation `{STATUS_ANNOTATION}` as the injection's status"),
        })?;
    let mut ops = Ops(Vec::new());
    for (list, injected) in [
        ("initContainers", &status.init_containers),
        ("containers", &status.containers),
    ] {
        let containers = whole
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for (index, container) in containers.iter().enumerate() {
            let name = container.get("name").and_then(Value::as_str).unwrap_or_default();
            if injected.iter().any(|n| n == name) {
                env_ops(&mut ops, list, index, container, extras);
            }
        }
    }
    metadata_ops(&mut ops, &whole, "annotations", &extras.annotations);
    metadata_ops(&mut ops, &whole, "labels", &extras.labels);
    Ok(ops)
}

fn env_ops(ops: &mut Ops<'_>, list: &str, index: usize, container: &Value, extras: &Extras) {
    if extras.sidecar_env.is_empty() {
        return;
    }
    let index = index.to_string();
    let env = |tail: &[&str]| pointer(&[&["spec", list, &index, "env"][..], tail].concat());
    let value = |var: &k8s_openapi::api::core::v1::EnvVar| OpValue::Json(serde_json::to_value(var).unwrap_or_default());
    let Some(existing) = container.get("env").and_then(Value::as_array) else {
        let all = extras
            .sidecar_env
            .iter()
            .map(|var| serde_json::to_value(var).unwrap_or_default())
            .collect();
        ops.add(env(&[]), OpValue::Json(Value::Array(all)));
        return;
    };
    // Same-named vars leave their place (last first, so the indexes hold) ...
    for (at, _) in existing.iter().enumerate().rev().filter(|(_, var)| {
        let name = var.get("name").and_then(Value::as_str).unwrap_or_default();
        extras.sidecar_env.iter().any(|e| e.name == name)
    }) {
        ops.remove(env(&[&at.to_string()]));
    }
    // ... and every var of the join goes at the end.
    for var in &extras.sidecar_env {
        ops.add(env(&["-"]), value(var));
    }
}

fn metadata_ops(ops: &mut Ops<'_>, whole: &Value, field: &str, entries: &std::collections::BTreeMap<String, String>) {
    if entries.is_empty() {
        return;
    }
    if whole.pointer(&pointer(&["metadata", field])).is_none_or(Value::is_null) {
        ops.add(pointer(&["metadata", field]), OpValue::Json(Value::Object(Map::new())));
    }
    for (key, value) in entries {
        ops.add(
            pointer(&["metadata", field, key]),
            OpValue::Json(Value::String(value.clone())),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::EnvVar;
    use serde_json::json;

    use super::*;
    use crate::inject::{Decision, jsonpatch, plan};
    use crate::template::Template;

    fn extras() -> Extras {
        let env = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        };
        Extras {
            sidecar_env: vec![
                env("NETWORK_CIDR", "198.18.64.0/24"),
                env("NETWORK_GATEWAY", "198.18.64.1"),
            ],
            annotations: BTreeMap::from([("k8s.v1.cni.cncf.io/networks".into(), "blue".into())]),
            labels: BTreeMap::from([("sidecar.samplecrd.k8s.io/network".into(), "blue".into())]),
        }
    }

    fn injected(pod: &Value, template: &Template, extras: &Extras) -> Value {
        let view = PodView::read(pod);
        let Decision::Inject(plan) = plan(&view, template, extras).unwrap() else {
            panic!("expected an injection")
        };
        let mut out = pod.clone();
        json_patch::patch(&mut out, &jsonpatch::render(&plan, &view).unwrap()).unwrap();
        out
    }

    /// Injected without the join, then joined: the Pod the webhook makes in one pass.
    #[test]
    fn the_join_after_an_injection_gives_the_pod_of_one_pass() {
        for (template, pod) in [
            (
                "containers: [{name: proxy, image: envoy, env: [{name: A, value: a}, {name: NETWORK_CIDR, value: old}]}]\ninitContainers: [{name: init, image: busybox}]\n",
                json!({"metadata": {"annotations": {"x": "y"}}, "spec": {"containers": [{"name": "app"}]}}),
            ),
            (
                "nativeSidecar: true\ncontainers: [{name: proxy, image: envoy}]\n",
                json!({"metadata": {"labels": {"app": "web"}, "annotations": {"k8s.v1.cni.cncf.io/networks": "blue"}},
                       "spec": {"initContainers": [{"name": "own"}], "containers": [{"name": "app", "env": [{"name": "NETWORK_CIDR", "value": "app's"}]}]}}),
            ),
        ] {
            let template = Template::parse("config", template).unwrap();
            let extras = extras();
            let one_pass = injected(&pod, &template, &extras);
            let policy = injected(&pod, &template, &Extras::default());
            let view = PodView::read(&policy).within(crate::inject::pod::Whole::Value(&policy));
            assert!(!joined(&view, "blue"));
            let mut joined_pod = policy.clone();
            json_patch::patch(&mut joined_pod, &render(&view, &extras).unwrap().into_patch().unwrap()).unwrap();
            assert_eq!(joined_pod, one_pass);
            assert!(joined(&PodView::read(&joined_pod), "blue"));
        }
    }
}
