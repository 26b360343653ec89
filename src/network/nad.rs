//! The Multus NetworkAttachmentDefinition that materialises one Network: a bridge CNI
//! config with host-local IPAM over the Network's `cidr` and `gateway`.

use serde_json::{Value, json};

pub const NAD_GROUP: &str = "k8s.cni.cncf.io";
pub const NAD_VERSION: &str = "v1";
pub const NAD_KIND: &str = "NetworkAttachmentDefinition";
pub const NAD_PLURAL: &str = "network-attachment-definitions";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = crate::NAME;

/// Linux interface names hold at most 15 bytes (IFNAMSIZ 16 with the NUL).
pub const MAX_BRIDGE_NAME: usize = 15;

/// A bridge name unique per Network and stable across restarts: `ei-` + 12 hex digits
/// of SHA-256("namespace/name"). Network names can be 253 bytes; bridges cannot.
pub fn bridge_name(namespace: &str, name: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{namespace}/{name}").as_bytes());
    let hex: String = digest.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("ei-{hex}")
}

/// The CNI configuration (a JSON string in the NAD's `spec.config`).
pub fn cni_config(namespace: &str, name: &str, cidr: &str, gateway: &str) -> String {
    let config = json!({
        "cniVersion": "0.3.1",
        "name": format!("{namespace}-{name}"),
        "type": "bridge",
        "bridge": bridge_name(namespace, name),
        "isGateway": true,
        "ipMasq": false,
        "ipam": {
            "type": "host-local",
            "ranges": [[{ "subnet": cidr, "gateway": gateway }]],
        },
    });
    config.to_string()
}

/// Identity of the owning Network, for the NAD's ownerReference.
pub struct Owner<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// The whole NAD object, owned by its Network (so it is garbage-collected with it even if
/// the finalizer is bypassed).
pub fn render(namespace: &str, owner: &Owner<'_>, cidr: &str, gateway: &str) -> Value {
    json!({
        "apiVersion": format!("{NAD_GROUP}/{NAD_VERSION}"),
        "kind": NAD_KIND,
        "metadata": {
            "name": owner.name,
            "namespace": namespace,
            "labels": { MANAGED_BY_LABEL: MANAGER },
            "ownerReferences": [{
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": { "config": cni_config(namespace, owner.name, cidr, gateway) },
    })
}

/// True when a live NAD differs from what it should be (edited config, lost owner).
pub fn drifted(live: &Value, desired: &Value) -> bool {
    let config = |v: &Value| -> Option<Value> {
        v.pointer("/spec/config")
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str(s).ok())
    };
    let owner_uid = |v: &Value| v.pointer("/metadata/ownerReferences/0/uid").cloned();
    config(live) != config(desired) || owner_uid(live) != owner_uid(desired)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner<'static> {
        Owner {
            api_version: "samplecrd.k8s.io/v1",
            kind: "Network",
            name: "example-network",
            uid: "u-1",
        }
    }

    #[test]
    fn bridge_names_fit_and_differ() {
        let long = "n".repeat(253);
        for (ns, name) in [("default", "example-network"), ("a", &long[..]), ("kube-system", "x")] {
            let bridge = bridge_name(ns, name);
            assert!(bridge.len() <= MAX_BRIDGE_NAME, "{bridge}");
        }
        assert_ne!(bridge_name("a", "b"), bridge_name("b", "a"));
        assert_eq!(bridge_name("a", "b"), bridge_name("a", "b"));
    }

    #[test]
    fn nad_carries_bridge_and_host_local_ipam() {
        let nad = render("default", &owner(), "192.168.0.0/16", "192.168.0.1");
        assert_eq!(nad["metadata"]["ownerReferences"][0]["controller"], true);
        let config: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
        assert_eq!(config["type"], "bridge");
        assert_eq!(config["ipam"]["type"], "host-local");
        assert_eq!(config["ipam"]["ranges"][0][0]["subnet"], "192.168.0.0/16");
        assert_eq!(config["ipam"]["ranges"][0][0]["gateway"], "192.168.0.1");
    }

    #[test]
    fn drift_is_a_config_or_owner_change_not_formatting() {
        let desired = render("default", &owner(), "10.0.0.0/24", "10.0.0.1");
        let mut live = desired.clone();
        // Re-indented but equal JSON is not drift.
        let pretty = serde_json::to_string_pretty(
            &serde_json::from_str::<Value>(desired["spec"]["config"].as_str().unwrap()).unwrap(),
        )
        .unwrap();
        live["spec"]["config"] = Value::String(pretty);
        live["metadata"]["resourceVersion"] = json!("42");
        assert!(!drifted(&live, &desired));
        live["spec"]["config"] = json!("{\"type\":\"macvlan\"}");
        assert!(drifted(&live, &desired));
    }
}
