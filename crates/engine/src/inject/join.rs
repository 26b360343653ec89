//! A Pod joining a Network: the Network it names, what admission knows of that Network
//! (from the shared cache, handed in as data), what joining adds (env in the sidecar, the
//! Multus annotation, the member label) and, for a Pod a compiled admission policy already
//! injected (the API server cannot see Networks), the operations that add only the join,
//! exactly as if the webhook had injected it whole. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use serde_json::{Map, Value};

use super::jsonpatch::{OpValue, Ops, pointer};
use super::pod::PodView;
use super::policy::{Flag, MetaMap};
use super::{Extras, InjectError, InjectionStatus, NETWORK_ANNOTATION, STATUS_ANNOTATION};

/// Multus reads the networks a Pod attaches to from this annotation.
pub const MULTUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
/// Label on member Pods (same key as the annotation): lets the controller watch only them.
pub const NETWORK_LABEL: &str = NETWORK_ANNOTATION;

/// What admission knows of a Network, from the shared cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkView {
    pub cidr: String,
    pub gateway: String,
    /// `Err(reason)` when the Network is not Ready for its current generation.
    pub ready: Result<(), String>,
    /// It has a deletionTimestamp: it stays while Pods use it, but no Pod may join.
    pub deleting: bool,
}

/// Whether the injector can see Networks at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// `--standalone`: no cluster, no Networks.
    Unsupported,
    Missing,
    Found(NetworkView),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    #[error("Network `{name}` named by annotation `{NETWORK_ANNOTATION}` does not exist in namespace `{namespace}`")]
    Missing { name: String, namespace: String },
    #[error(
        "Network `{name}` in namespace `{namespace}` is being deleted: no Pod may join it any more (it goes when the Pods that use it are gone); name another Network"
    )]
    Deleting { name: String, namespace: String },
    #[error("Network `{name}` in namespace `{namespace}` is not Ready: {reason}")]
    NotReady {
        name: String,
        namespace: String,
        reason: String,
    },
    #[error(
        "Network name `{name}` cannot be used as the value of label `{NETWORK_LABEL}`: expected at most 63 characters, found {length}"
    )]
    NameTooLong { name: String, length: usize },
    #[error(
        "annotation `{MULTUS_ANNOTATION}` holds {found}, expected a comma-separated list or a JSON array of network selections"
    )]
    BadMultusAnnotation { found: String },
}

/// What a path that sees no Networks (`inject`, `check -f`) says of a Pod that names one:
/// the join is the webhook's, in the cluster. `namespace`: where the Pod will be, if known.
pub fn offline_warning(name: &str, namespace: Option<&str>) -> String {
    let namespace = namespace.map_or_else(|| String::from("the Pod's namespace"), |n| format!("namespace {n}"));
    format!(
        "joins Network `{name}`: the join (the Multus annotation, NETWORK_CIDR and NETWORK_GATEWAY in the sidecar) happens only in the cluster, when the injector admits the Pod; whether the Network exists in {namespace} and is Ready is not known offline (the injector denies the Pod if not)"
    )
}

/// The Network a Pod asks to join: its annotation's text, trimmed; blank asks for none.
pub fn network_name(annotations: Option<&dyn MetaMap>) -> Option<&str> {
    match annotations?.flag(NETWORK_ANNOTATION)? {
        Flag::Text(text) => Some(text.trim()).filter(|name| !name.is_empty()),
        Flag::Other(_) => None,
    }
}

/// The additions for a Pod joining `name` (already looked up as `lookup`).
/// `annotations` are the Pod's (its Multus networks annotation is kept and added to).
pub fn extras(
    name: &str,
    namespace: &str,
    lookup: Lookup,
    annotations: Option<&dyn MetaMap>,
) -> Result<Option<Extras>, JoinError> {
    let network = match lookup {
        Lookup::Unsupported => return Ok(None),
        Lookup::Missing => {
            return Err(JoinError::Missing {
                name: name.into(),
                namespace: namespace.into(),
            });
        }
        Lookup::Found(network) => network,
    };
    if network.deleting {
        return Err(JoinError::Deleting {
            name: name.into(),
            namespace: namespace.into(),
        });
    }
    if let Err(reason) = network.ready {
        return Err(JoinError::NotReady {
            name: name.into(),
            namespace: namespace.into(),
            reason,
        });
    }
    if name.len() > 63 {
        return Err(JoinError::NameTooLong {
            name: name.into(),
            length: name.len(),
        });
    }
    let existing = match annotations.and_then(|a| a.flag(MULTUS_ANNOTATION)) {
        Some(Flag::Text(text)) => Some(text),
        _ => None,
    };
    let env = |key: &str, value: &str| EnvVar {
        name: key.into(),
        value: Some(value.into()),
        value_from: None,
    };
    Ok(Some(Extras {
        sidecar_env: vec![
            env("NETWORK_CIDR", &network.cidr),
            env("NETWORK_GATEWAY", &network.gateway),
        ],
        annotations: BTreeMap::from([(MULTUS_ANNOTATION.to_string(), merge_multus(existing, name, namespace)?)]),
        labels: BTreeMap::from([(NETWORK_LABEL.to_string(), name.to_string())]),
    }))
}

/// Adds `name` to a Multus networks annotation, keeping its form (a comma-separated list
/// or a JSON array of selections) and whatever it already names.
pub fn merge_multus(existing: Option<&str>, name: &str, namespace: &str) -> Result<String, JoinError> {
    let existing = existing.map(str::trim).filter(|e| !e.is_empty());
    let Some(existing) = existing else {
        return Ok(name.to_string());
    };
    if existing.starts_with('[') {
        let mut selections: Vec<Value> =
            serde_json::from_str(existing).map_err(|e| JoinError::BadMultusAnnotation {
                found: format!("invalid JSON ({e})"),
            })?;
        let present = selections.iter().any(|s| {
            s.get("name").and_then(Value::as_str) == Some(name)
                && s.get("namespace")
                    .and_then(Value::as_str)
                    .is_none_or(|ns| ns == namespace)
        });
        if !present {
            selections.push(serde_json::json!({ "name": name }));
        }
        return Ok(Value::Array(selections).to_string());
    }
    let present = existing
        .split(',')
        .map(str::trim)
        .any(|entry| entry == name || entry.split('@').next() == Some(name));
    Ok(if present {
        existing.to_string()
    } else {
        format!("{existing},{name}")
    })
}

/// Whether the Pod already carries the join: the label joining sets, naming `network`.
pub fn joined(pod: &PodView<'_>, network: &str) -> bool {
    let Ok(view) = pod.check() else { return false };
    view.labels
        .and_then(|labels| labels.text(NETWORK_LABEL))
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
mod tests;
