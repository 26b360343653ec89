//! Where each kind holds its Pod: the JSON Pointer to its Pod template, and an object
//! built around a Pod at that place.

use serde_json::{Map, Value};

/// Where the Pod spec lives in an object of this kind, as a JSON Pointer.
pub fn pod_path(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some(""),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" | "ReplicationController" => {
            Some("/spec/template")
        }
        "CronJob" => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// Nests `inner` under the object keys of `pointer` (`/spec/template` → {spec:{template:inner}}).
pub fn nest(pointer: &str, inner: Value) -> Value {
    pointer
        .split('/')
        .filter(|k| !k.is_empty())
        .rev()
        .fold(inner, |acc, key| {
            let mut map = Map::new();
            map.insert(key.to_string(), acc);
            Value::Object(map)
        })
}
