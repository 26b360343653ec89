//! A Pod joining a Network at admission: what the injection adds for it. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use serde_json::Value;

use crate::inject::policy::{Annotations, Flag};
use crate::inject::{Extras, NETWORK_ANNOTATION};

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

/// The Network a Pod asks to join: its annotation's text, trimmed; blank asks for none.
pub fn network_name(annotations: Option<&dyn Annotations>) -> Option<&str> {
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
    annotations: Option<&dyn Annotations>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_name_is_trimmed_text_and_blank_is_none() {
        let annotations = |value: Value| serde_json::Map::from_iter([(NETWORK_ANNOTATION.to_string(), value)]);
        let name = |value: Value| network_name(Some(&annotations(value))).map(str::to_string);
        assert_eq!(name(Value::from(" net1 ")), Some("net1".to_string()));
        assert_eq!(name(Value::from("  ")), None);
        assert_eq!(name(Value::from(1)), None);
        assert_eq!(network_name(None), None);
    }
    use serde_json::json;

    fn ready() -> Lookup {
        Lookup::Found(NetworkView {
            cidr: "10.1.0.0/16".into(),
            gateway: "10.1.0.1".into(),
            ready: Ok(()),
            deleting: false,
        })
    }

    #[test]
    fn join_adds_env_label_and_multus_annotation() {
        let extras = extras("net1", "default", ready(), None).unwrap().unwrap();
        assert_eq!(extras.sidecar_env[0].value.as_deref(), Some("10.1.0.0/16"));
        assert_eq!(extras.sidecar_env[1].name, "NETWORK_GATEWAY");
        assert_eq!(extras.annotations[MULTUS_ANNOTATION], "net1");
        assert_eq!(extras.labels[NETWORK_LABEL], "net1");
    }

    #[test]
    fn missing_or_unready_networks_are_named() {
        let err = extras("nope", "team-a", Lookup::Missing, None).unwrap_err().to_string();
        assert!(err.contains("`nope`") && err.contains("`team-a`"), "{err}");
        let unready = Lookup::Found(NetworkView {
            cidr: "10.0.0.0/8".into(),
            gateway: "10.0.0.1".into(),
            ready: Err("Overlaps: overlaps Network `a`".into()),
            deleting: false,
        });
        let err = extras("b", "ns", unready, None).unwrap_err().to_string();
        assert!(
            err.contains("`b`") && err.contains("is not Ready") && err.contains("Overlaps"),
            "{err}"
        );
        assert_eq!(extras("x", "ns", Lookup::Unsupported, None), Ok(None));
        // Ready but being deleted: denied, saying so.
        let Lookup::Found(mut going) = ready() else {
            unreachable!()
        };
        going.deleting = true;
        let err = extras("old", "ns", Lookup::Found(going), None).unwrap_err().to_string();
        assert!(err.contains("`old`") && err.contains("is being deleted"), "{err}");
    }

    #[test]
    fn multus_annotation_is_merged_in_either_form() {
        assert_eq!(merge_multus(None, "n", "ns").unwrap(), "n");
        assert_eq!(merge_multus(Some("a, b"), "n", "ns").unwrap(), "a, b,n");
        assert_eq!(merge_multus(Some("a,n"), "n", "ns").unwrap(), "a,n");
        assert_eq!(merge_multus(Some("n@eth1"), "n", "ns").unwrap(), "n@eth1");
        let merged: Value = serde_json::from_str(&merge_multus(Some(r#"[{"name":"a"}]"#), "n", "ns").unwrap()).unwrap();
        assert_eq!(merged, json!([{"name": "a"}, {"name": "n"}]));
        let same = r#"[{"name":"n","namespace":"ns"}]"#;
        assert_eq!(
            merge_multus(Some(same), "n", "ns").unwrap(),
            r#"[{"name":"n","namespace":"ns"}]"#
        );
        assert!(merge_multus(Some("[oops"), "n", "ns").is_err());
    }

    #[test]
    fn over_long_names_cannot_be_labels() {
        let name = "n".repeat(64);
        assert!(matches!(
            extras(&name, "ns", ready(), None),
            Err(JoinError::NameTooLong { .. })
        ));
    }
}
