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

/// The bridge of a Network, named after the first address of its range: `ei-` + 12 hex
/// digits of SHA-256 of that address as Rust prints it (`198.18.64.0`, `fd00::`). Stable
/// across restarts and within Linux's 15 bytes.
///
/// Why the range's address and not the Network: the bridge CNI plugin never removes a
/// bridge, so a node keeps a Network's bridge, with the gateway address and the route to its
/// range, after the Network is gone. Two live Networks never start at the same address (they
/// would overlap, and the junior gets no NAD), so a Network that takes the place of a gone
/// one on the same range (whatever its gateway), or on a wider one from the same address,
/// gets that same bridge on each node, and `forceAddress` puts its own gateway and prefix on
/// it: no stale route into the range is left behind to take its Pods' traffic.
pub fn bridge_name(cidr: &str) -> String {
    let first = cidr.trim().split('/').next().unwrap_or_default();
    let canonical = first
        .parse::<std::net::IpAddr>()
        .map_or_else(|_| cidr.trim().to_string(), |ip| ip.to_string());
    let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes());
    let hex: String = digest.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("ei-{hex}")
}

/// The CNI configuration (a JSON string in the NAD's `spec.config`).
pub fn cni_config(namespace: &str, name: &str, cidr: &str, gateway: &str) -> String {
    let config = json!({
        "cniVersion": "0.3.1",
        "name": format!("{namespace}-{name}"),
        "type": "bridge",
        "bridge": bridge_name(cidr),
        "isGateway": true,
        "forceAddress": true,
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

/// What drift detection compares of a NAD: its CNI config text and the uid of its first
/// owner.
fn drift_fields(nad: &Value) -> (Option<&str>, Option<&str>) {
    let config = nad.pointer("/spec/config").and_then(Value::as_str);
    let owner_uid = nad.pointer("/metadata/ownerReferences/0/uid").and_then(Value::as_str);
    (config, owner_uid)
}

/// The config parsed, so formatting and key order do not count.
fn parsed(config: Option<&str>) -> Option<Value> {
    config.and_then(|text| serde_json::from_str(text).ok())
}

/// True when a live NAD differs from what it should be (edited config, lost owner).
pub fn drifted(live: &Value, desired: &Value) -> bool {
    let ((live_config, live_owner), (desired_config, desired_owner)) = (drift_fields(live), drift_fields(desired));
    parsed(live_config) != parsed(desired_config) || live_owner != desired_owner
}

/// [`drifted`]'s comparison as a 64-bit hash, so the controller can keep it per NAD (instead
/// of the NAD) and compare with the desired NAD in memory: equal fingerprints mean "not
/// drifted" (up to a 2^-64 collision).
pub fn fingerprint(nad: &Value) -> u64 {
    let (config, owner_uid) = drift_fields(nad);
    fingerprint_fields(config, owner_uid)
}

/// [`fingerprint`] from the two fields it compares (`spec.config`, the first owner's uid).
pub fn fingerprint_fields(config: Option<&str>, owner_uid: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    // A fixed-key SipHash: the same value hashes the same in every run of this binary.
    let mut hasher = std::hash::DefaultHasher::new();
    match &parsed(config) {
        Some(value) => hash_value(value, &mut hasher),
        None => 0u8.hash(&mut hasher),
    }
    owner_uid.hash(&mut hasher);
    hasher.finish()
}

/// Hashes a JSON value with object keys in sorted order, whatever the map's own order.
fn hash_value(value: &Value, hasher: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    match value {
        Value::Null => 1u8.hash(hasher),
        Value::Bool(b) => (2u8, b).hash(hasher),
        Value::Number(n) => (3u8, n.to_string()).hash(hasher),
        Value::String(s) => (4u8, s).hash(hasher),
        Value::Array(items) => {
            (5u8, items.len()).hash(hasher);
            items.iter().for_each(|item| hash_value(item, hasher));
        }
        Value::Object(map) => {
            (6u8, map.len()).hash(hasher);
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                key.hash(hasher);
                hash_value(&map[key], hasher);
            }
        }
    }
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
    fn bridge_names_fit_and_follow_the_first_address_of_the_range() {
        for cidr in [
            "198.18.64.0/24",
            "fd00:ffff:ffff:ffff:ffff:ffff:ffff:0/112",
            "not a cidr",
        ] {
            let bridge = bridge_name(cidr);
            assert!(bridge.len() <= MAX_BRIDGE_NAME, "{bridge}");
        }
        assert_ne!(bridge_name("198.18.64.0/24"), bridge_name("198.18.65.0/24"));
        assert_eq!(
            bridge_name(" 198.18.64.0/24"),
            bridge_name("198.18.64.0/23"),
            "one first address, one bridge"
        );
        assert_eq!(bridge_name("fd00::/64"), bridge_name("fd00:0::0/48"));
        // Networks on one range, in any namespaces, with any gateways, share the bridge;
        // their NADs differ in name (host-local keeps its leases per name).
        let config = |namespace: &str, name: &str, cidr: &str, gateway: &str| -> Value {
            serde_json::from_str(&cni_config(namespace, name, cidr, gateway)).unwrap()
        };
        let first = config("a", "blue", "198.18.64.0/24", "198.18.64.1");
        let later = config("b", "wide", "198.18.64.0/23", "198.18.65.1");
        assert_eq!(first["bridge"], later["bridge"]);
        assert_eq!(
            later["forceAddress"], true,
            "the later gateway and prefix replace the gone one's"
        );
        assert_ne!(first["name"], later["name"]);
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
        assert_eq!(fingerprint(&live), fingerprint(&desired));
        live["spec"]["config"] = json!("{\"type\":\"macvlan\"}");
        assert!(drifted(&live, &desired));
        assert_ne!(fingerprint(&live), fingerprint(&desired));
        let mut orphan = desired.clone();
        orphan["metadata"]["ownerReferences"][0]["uid"] = json!("u-2");
        assert!(drifted(&orphan, &desired));
        assert_ne!(fingerprint(&orphan), fingerprint(&desired));
        let reordered = |text: &str| fingerprint_fields(Some(text), Some("u"));
        assert_eq!(
            reordered(r#"{"a":1,"b":[true,null]}"#),
            reordered(r#"{ "b": [true, null], "a": 1 }"#)
        );
    }
}
