//! Reading an AdmissionReview body in one pass, keeping only what the decision reads.
//!
//! The Pod in `request.object` is most of the body (a 250 KB review is 50 containers'
//! env, images, probes...), and the decision reads little of it: the apiVersion and kind,
//! metadata's annotations and labels, and of the spec the containers' names, mounts and
//! ports, the volumes and the image pull secrets. Everything else is skipped while
//! parsing — validated as JSON, never allocated — and what is kept is borrowed from the
//! body ([`PodView`], the engine's own reading of a Pod, so the same code reads a Pod
//! here and in `inject`/`check`). It keeps its exact shape (absent, `null`, empty, wrong
//! type, list indices), which is all the JSON Patch's paths and the engine's error
//! messages depend on.

use std::borrow::Cow;

use kube::core::admission::Operation;
use serde::{Deserialize, Serialize};

use crate::inject::PodView;
use crate::inject::jsonpatch::Ops;
use crate::inject::pod::Whole;

/// A request that is not a readable AdmissionReview v1: answered with HTTP 400, since
/// there is no uid to answer a review for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("expected a JSON AdmissionReview body, found invalid JSON: {0}")]
    NotJson(String),
    #[error("expected an AdmissionReview (admission.k8s.io/v1), found JSON that is not one: {0}")]
    NotAReview(String),
    #[error(
        "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, found apiVersion {api_version:?} kind {kind:?}"
    )]
    WrongVersion { api_version: String, kind: String },
    #[error("expected the AdmissionReview to carry a `request`, found none")]
    NoRequest,
    #[error("expected `request.uid` to be set, found it empty")]
    NoUid,
}

/// The request fields this webhook reads, borrowed from the body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestIn<'a> {
    #[serde(borrow, default)]
    pub uid: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: KindIn<'a>,
    pub operation: Operation,
    #[serde(borrow, default)]
    pub sub_resource: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Of the Pod, only what the decision reads (see the module docs).
    #[serde(borrow, default)]
    pub object: Option<PodView<'a>>,
}

/// `request.kind`: the group and kind this webhook decides on.
#[derive(Deserialize)]
pub(super) struct KindIn<'a> {
    #[serde(borrow, default)]
    pub group: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
}

/// The whole review, parsed in one pass.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<'a> {
    #[serde(borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    request: Option<RequestIn<'a>>,
}

/// Only for telling apart what is wrong with a body that failed to parse: apiVersion and
/// kind are checked before the request is looked at.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOutline<'a> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(borrow, default)]
    request: Option<&'a serde_json::value::RawValue>,
}

/// Parses an AdmissionReview v1 body into its request.
pub(super) fn parse(body: &[u8]) -> Result<RequestIn<'_>, RequestError> {
    // JSON is UTF-8: checked once for the whole body (a fast scan), so the parse does not
    // check each string it reads again.
    let text = simdutf8::compat::from_utf8(body).map_err(|e| {
        RequestError::NotJson(format!(
            "expected UTF-8, found an invalid byte at offset {}",
            e.valid_up_to()
        ))
    })?;
    // One pass for every well-formed review; a failure is worked out from the outline.
    let Ok(review) = serde_json::from_str::<ReviewIn<'_>>(text) else {
        return Err(explain(body));
    };
    check_version(&review.api_version, &review.kind)?;
    let mut request = review.request.ok_or(RequestError::NoRequest)?;
    if request.uid.is_empty() {
        return Err(RequestError::NoUid);
    }
    request.object = request.object.map(|pod| {
        pod.within(Whole::Text {
            json: body,
            pointer: "/request/object",
        })
    });
    Ok(request)
}

fn check_version(api_version: &str, kind: &str) -> Result<(), RequestError> {
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(RequestError::WrongVersion {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    }
    Ok(())
}

/// The error for a body the one-pass parse refused, in the order a reader would check:
/// JSON at all, then the review's apiVersion and kind, then its request.
fn explain(body: &[u8]) -> RequestError {
    let outline: ReviewOutline<'_> = match serde_json::from_slice(body) {
        Ok(outline) => outline,
        Err(e) => {
            return match e.classify() {
                serde_json::error::Category::Data => RequestError::NotAReview(e.to_string()),
                _ => RequestError::NotJson(e.to_string()),
            };
        }
    };
    if let Err(wrong) = check_version(&outline.api_version, &outline.kind) {
        return wrong;
    }
    let Some(raw) = outline.request.filter(|r| r.get() != "null") else {
        return RequestError::NoRequest;
    };
    match serde_json::from_str::<RequestIn<'_>>(raw.get()) {
        Err(e) => RequestError::NotAReview(format!("request: {e}")),
        // Not expected: the one-pass parse refused what the outline accepts.
        Ok(_) => RequestError::NotAReview("request: unreadable".into()),
    }
}

/// A denied response's `status`, as the API server reads it.
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
    /// The JSON Patch, base64 ([`patch_base64`]).
    pub patch: Option<&'a str>,
    pub warnings: &'a [String],
}

thread_local! {
    /// The patch's JSON before base64, reused: it is as large as what is injected.
    static PATCH_JSON: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The patch as the response's `patch` field carries it: its JSON, base64-encoded.
pub(super) fn patch_base64(ops: &Ops<'_>) -> String {
    PATCH_JSON.with_borrow_mut(|json| {
        json.clear();
        // Operations of strings and JSON text: serialising them into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *json, ops);
        base64_simd::STANDARD.encode_to_string(json.as_slice())
    })
}

/// The response body: an AdmissionReview v1 (`admission.k8s.io/v1`) with `response`
/// only, written field by field so the patch's base64 is copied rather than scanned for
/// characters to escape (base64 has none).
///
/// `patch` is a base64 string (Go `[]byte`), as the API documents; kube's
/// `AdmissionResponse` would send a JSON array of numbers, three times larger.
pub(super) fn encode(reply: &Reply<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(reply.patch.map_or(0, str::len) + 256);
    out.extend_from_slice(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#);
    json(&mut out, reply.uid);
    out.extend_from_slice(if reply.allowed {
        br#","allowed":true"#
    } else {
        br#","allowed":false"#
    });
    if let Some(message) = reply.message {
        out.extend_from_slice(br#","status":"#);
        let status = WireStatus {
            code: 403,
            reason: "Forbidden",
            message,
        };
        json(&mut out, &status);
    }
    if let Some(patch) = reply.patch {
        out.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
        out.extend_from_slice(patch.as_bytes());
        out.push(b'"');
    }
    if !reply.warnings.is_empty() {
        out.extend_from_slice(br#","warnings":"#);
        json(&mut out, reply.warnings);
    }
    out.extend_from_slice(b"}}");
    out
}

/// Appends `value` as JSON.
fn json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Strings and plain structs of them always serialise into a Vec.
    let _ = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an attacker would send is an error or a skip, never a crash: 100,000 nested
    /// arrays where the review is skipped and where it is kept, bad UTF-8 and escapes,
    /// trailing bytes. (A SIMD parser tried here overflowed the stack on the first.)
    #[test]
    fn hostile_bodies_are_errors_not_crashes() {
        let review = |object: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"","version":"v1","kind":"Pod"}},"operation":"CREATE","object":{object}}}}}"#
            )
            .into_bytes()
        };
        let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let nested = |depth: usize| {
            [
                review(&format!(r#"{{"spec":{{"affinity":{}}}}}"#, deep(depth))),
                review(&format!(r#"{{"metadata":{{"annotations":{{"a":{}}}}}}}"#, deep(depth))),
                review(&format!(
                    r#"{{"spec":{{"volumes":[{{"name":"v","x":{}}}]}}}}"#,
                    deep(depth)
                )),
            ]
        };
        for body in nested(50) {
            assert!(parse(&body).is_ok());
        }
        // Skipped nesting is walked without recursion; kept nesting is refused.
        let [skipped, kept_annotation, skipped_in_volume] = nested(100_000);
        assert!(parse(&skipped).is_ok());
        assert!(parse(&skipped_in_volume).is_ok());
        let err = parse(&kept_annotation).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("recursion limit"), "{err}");
        let mut invalid_utf8 = review(r#"{"metadata":{"annotations":{"a":"XX"}}}"#);
        let at = invalid_utf8.windows(2).position(|w| w == b"XX").unwrap();
        invalid_utf8[at] = 0xff;
        // Also where the review is skipped: JSON is UTF-8 throughout.
        let mut skipped_invalid = review(r#"{"spec":{"nodeName":"XX"}}"#);
        let skipped_at = skipped_invalid.windows(2).position(|w| w == b"XX").unwrap();
        skipped_invalid[skipped_at] = 0xc3;
        match parse(&skipped_invalid) {
            Err(RequestError::NotJson(message)) => {
                assert!(message.contains(&format!("offset {skipped_at}")), "{message}")
            }
            other => panic!("expected invalid UTF-8 to be refused, got {:?}", other.err()),
        }
        for body in [
            invalid_utf8,
            review(r#"{"metadata":{"annotations":{"a":"\ud800"}}}"#),
            review(r#"{"metadata":{"annotations":{"a":"\x"}}}"#),
            review(r#"{"spec":{"containers":[{"ports":[{"containerPort":1e400}]}]}}"#),
            review(r#"{"metadata":{}}}"#),
        ] {
            assert!(parse(&body).is_err(), "{}", String::from_utf8_lossy(&body));
        }
        let escaped = review(r#"{"metadata":{"annotations":{"a":"\u00e9\n\"q"}}}"#);
        let request = parse(&escaped).unwrap();
        let pod = request.object.as_ref().unwrap();
        assert_eq!(pod.annotations().unwrap().text("a"), Some("é\n\"q"));
    }

    #[test]
    fn the_response_is_one_json_document_whatever_its_strings_hold() {
        use base64::Engine as _;
        let patch = base64::engine::general_purpose::STANDARD.encode(br#"[{"op":"add","path":"/a","value":"\"x/"}]"#);
        let warnings = [String::from("odd \"value\"\n"), String::from("second")];
        for (allowed, message, patch, warnings) in [
            (true, None, Some(patch.as_str()), &warnings[..]),
            (false, Some("denied: \"quote\" and \\ backslash"), None, &[][..]),
            (true, None, None, &[][..]),
        ] {
            let body = encode(&Reply {
                uid: "u\"1",
                allowed,
                message,
                patch,
                warnings,
            });
            let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let response = &review["response"];
            assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
            assert_eq!(review["kind"], "AdmissionReview");
            assert_eq!(response["uid"], "u\"1");
            assert_eq!(response["allowed"], allowed);
            assert_eq!(response["status"]["message"].as_str(), message);
            assert_eq!(response["patch"].as_str(), patch);
            assert_eq!(response["patchType"].as_str(), patch.map(|_| "JSONPatch"));
            let sent: Vec<String> = serde_json::from_value(response["warnings"].clone()).unwrap_or_default();
            assert_eq!(sent, warnings);
        }
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
