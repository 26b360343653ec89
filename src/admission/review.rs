//! Reading an AdmissionReview body in one pass, keeping only what the decision reads.
//!
//! The Pod in `request.object` is most of the body (a 250 KB review is 50 containers'
//! env, images, probes...), and the decision reads little of it: the apiVersion and kind,
//! metadata's annotations and labels, and of the spec the containers' names, mounts and
//! ports, the volumes and the image pull secrets. Everything else is skipped while
//! parsing — validated as JSON, never allocated. What is kept keeps its exact shape
//! (absent, `null`, empty, wrong type, list indices), which is all the JSON Patch's paths
//! and the engine's error messages depend on.

use kube::core::GroupVersionKind;
use kube::core::admission::Operation;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use super::RequestError;
use crate::inject::pod::{Keep, POD};

/// The request fields this webhook reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestIn {
    #[serde(default)]
    pub uid: String,
    pub kind: GroupVersionKind,
    pub operation: Operation,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// The Pod, pruned to what the decision reads (see the module docs).
    #[serde(default, deserialize_with = "pruned_pod")]
    pub object: Option<Value>,
}

/// The whole review, parsed in one pass.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    request: Option<RequestIn>,
}

/// Only for telling apart what is wrong with a body that failed to parse: apiVersion and
/// kind are checked before the request is looked at.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOutline {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    request: Option<Box<serde_json::value::RawValue>>,
}

/// Parses an AdmissionReview v1 body into its request.
pub(super) fn parse(body: &[u8]) -> Result<RequestIn, RequestError> {
    // One pass for every well-formed review; a failure is worked out from the outline.
    let Ok(review) = serde_json::from_slice::<ReviewIn>(body) else {
        return Err(explain(body));
    };
    check_version(review.api_version, review.kind)?;
    let request = review.request.ok_or(RequestError::NoRequest)?;
    if request.uid.is_empty() {
        return Err(RequestError::NoUid);
    }
    Ok(request)
}

fn check_version(api_version: String, kind: String) -> Result<(), RequestError> {
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(RequestError::WrongVersion { api_version, kind });
    }
    Ok(())
}

/// The error for a body the one-pass parse refused, in the order a reader would check:
/// JSON at all, then the review's apiVersion and kind, then its request.
fn explain(body: &[u8]) -> RequestError {
    let outline: ReviewOutline = match serde_json::from_slice(body) {
        Ok(outline) => outline,
        Err(e) => {
            return match e.classify() {
                serde_json::error::Category::Data => RequestError::NotAReview(e.to_string()),
                _ => RequestError::NotJson(e.to_string()),
            };
        }
    };
    if let Err(wrong) = check_version(outline.api_version, outline.kind) {
        return wrong;
    }
    let Some(raw) = outline.request.filter(|r| r.get() != "null") else {
        return RequestError::NoRequest;
    };
    match serde_json::from_str::<RequestIn>(raw.get()) {
        Err(e) => RequestError::NotAReview(format!("request: {e}")),
        // Not expected: the one-pass parse refused what the outline accepts.
        Ok(_) => RequestError::NotAReview("request: unreadable".into()),
    }
}

fn pruned_pod<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    let value = Pruned(POD).deserialize(deserializer)?;
    Ok((!value.is_null()).then_some(value))
}

/// Prunes `value` as the admission path parses it (for tests and benchmarks: the pruned
/// Pod must get the same decision and patch as the whole one).
pub fn prune_pod(value: &Value) -> Value {
    // A `Value` always deserializes into a `Value`.
    Pruned(POD).deserialize(value).unwrap_or(Value::Null)
}

struct Pruned(Keep);

impl<'de> DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.0 {
            Keep::All => Value::deserialize(deserializer),
            keep => deserializer.deserialize_any(PrunedVisitor(keep)),
        }
    }
}

struct PrunedVisitor(Keep);

/// Matches an object key against the kept fields without allocating it.
struct Field(&'static [(&'static str, Keep)]);

impl<'de> DeserializeSeed<'de> for Field {
    type Value = Option<(&'static str, Keep)>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Field {
    type Value = Option<(&'static str, Keep)>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().find(|(name, _)| *name == key).copied())
    }
}

impl<'de> Visitor<'de> for PrunedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        match self.0 {
            Keep::Fields(fields) => {
                while let Some(field) = map.next_key_seed(Field(fields))? {
                    match field {
                        Some((name, keep)) => {
                            let value = map.next_value_seed(Pruned(keep))?;
                            out.insert(name.to_string(), value);
                        }
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
            }
            // An object where an array belongs: kept whole, the engine names the mistake.
            Keep::All | Keep::Each(_) => {
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    out.insert(key, value);
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let item = match self.0 {
            Keep::Each(item) => *item,
            // An array where an object belongs: kept whole.
            Keep::All | Keep::Fields(_) => Keep::All,
        };
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(value) = seq.next_element_seed(Pruned(item))? {
            out.push(value);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Pruned(self.0).deserialize(deserializer)
    }
}

/// The response on the wire, as the API server reads it (`admission.k8s.io/v1`).
///
/// `patch` is a base64 string (Go `[]byte`), as the API documents; kube's
/// `AdmissionResponse` would send a JSON array of numbers, three times larger.
#[derive(Serialize)]
struct WireReview<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    response: WireResponse<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<WireStatus<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct WireStatus<'a> {
    code: u16,
    reason: &'static str,
    message: &'a str,
}

/// What a response says, for [`encode`].
pub(super) struct Reply<'a> {
    pub uid: &'a str,
    pub allowed: bool,
    /// Why, when denied.
    pub message: Option<&'a str>,
    pub patch: Option<&'a json_patch::Patch>,
    pub warnings: &'a [String],
}

thread_local! {
    /// The patch's JSON before base64, reused: it is as large as what is injected.
    static PATCH_JSON: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The response body: an AdmissionReview v1 with `response` only.
pub(super) fn encode(reply: &Reply<'_>) -> Vec<u8> {
    use base64::Engine as _;
    let patch = reply.patch.map(|patch| {
        PATCH_JSON.with_borrow_mut(|json| {
            json.clear();
            // A Patch is plain data: serialising it into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *json, patch);
            base64::engine::general_purpose::STANDARD.encode(json.as_slice())
        })
    });
    let wire = WireReview {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: WireResponse {
            uid: reply.uid,
            allowed: reply.allowed,
            status: reply.message.map(|message| WireStatus {
                code: 403,
                reason: "Forbidden",
                message,
            }),
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch: patch.as_deref(),
            warnings: reply.warnings,
        },
    };
    let mut out = Vec::with_capacity(patch.as_ref().map_or(0, String::len) + 256);
    // Plain structs of strings and bools always serialise.
    let _ = serde_json::to_writer(&mut out, &wire);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_what_the_decision_reads_is_kept_in_its_exact_shape() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"a": "b"}, "labels": null,
                         "managedFields": [{"manager": "kubectl"}], "uid": "x"},
            "spec": {
                "containers": [
                    {"name": "app", "image": "nginx", "env": [{"name": "E", "value": "v"}],
                     "ports": [{"containerPort": 80}], "volumeMounts": []},
                    "not an object"
                ],
                "initContainers": null,
                "volumes": [{"name": "v", "configMap": {"name": "c", "defaultMode": 420}}],
                "nodeName": "n"
            },
            "status": {"phase": "Pending"}
        });
        assert_eq!(
            prune_pod(&pod),
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "annotations": {"a": "b"}, "labels": null},
                "spec": {
                    "containers": [
                        {"name": "app", "ports": [{"containerPort": 80}], "volumeMounts": []},
                        "not an object"
                    ],
                    "initContainers": null,
                    "volumes": [{"name": "v", "configMap": {"name": "c", "defaultMode": 420}}]
                }
            })
        );
        // Wrong types stay wrong, for the engine to name.
        let odd = json!({"metadata": [1], "spec": {"containers": {"name": "x"}}});
        assert_eq!(prune_pod(&odd), odd);
        assert_eq!(prune_pod(&json!("pod")), json!("pod"));
    }

    #[test]
    fn a_body_that_does_not_parse_is_explained_in_reading_order() {
        let err = |body: &str| parse(body.as_bytes()).err().unwrap();
        assert!(matches!(err("{"), RequestError::NotJson(_)));
        assert!(matches!(err("1"), RequestError::NotAReview(_)));
        assert!(matches!(
            err(r#"{"apiVersion":"v1","kind":"AdmissionReview","request":{"kind":1}}"#),
            RequestError::WrongVersion { .. }
        ));
        assert!(matches!(
            err(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#),
            RequestError::NoRequest
        ));
        match err(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}"#) {
            RequestError::NotAReview(message) => assert!(message.starts_with("request: "), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
