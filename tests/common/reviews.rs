//! The captured AdmissionReviews (`tests/fixtures/admission/`), the headers and path the
//! API server sent with them, and the check of an answered review.

use std::path::{Path, PathBuf};

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::STATUS_ANNOTATION;

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission")
}

/// Every captured AdmissionReview (file name, bytes), `_`-prefixed helpers excluded.
pub fn fixtures() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(fixtures_dir())
        .expect("read fixtures dir")
        .map(|entry| entry.expect("fixture entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .filter(|path| !path.file_name().unwrap().to_string_lossy().starts_with('_'))
        .map(|path| {
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert!(
        out.len() >= 8,
        "expected the captured reviews in {}, found {}",
        fixtures_dir().display(),
        out.len()
    );
    out
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(name)).unwrap_or_else(|e| panic!("read fixture {name}: {e}"))
}

/// The headers kube-apiserver sent with the captured reviews, minus the ones the HTTP
/// client derives itself (Host, Content-Length).
pub fn apiserver_headers() -> HeaderMap {
    let raw: Value = serde_json::from_slice(&fixture("_request-headers.json")).unwrap();
    let mut headers = HeaderMap::new();
    for (name, value) in raw["headers"].as_object().expect("headers object") {
        if name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        headers.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value.as_str().unwrap()).unwrap(),
        );
    }
    headers
}

/// The path and query the API server posts to.
pub fn apiserver_path() -> String {
    let raw: Value = serde_json::from_slice(&fixture("_request-headers.json")).unwrap();
    raw["path"].as_str().unwrap().to_string()
}

/// Fixtures the standalone webhook must inject (annotation opt-in); the others must be
/// allowed unchanged.
pub fn expects_injection(fixture: &str) -> bool {
    matches!(
        fixture,
        "seed-initializer-annotation.json"
            | "dry-run.json"
            | "replicaset-generatename-init-volumes.json"
            | "network-annotation.json"
    )
}

/// Checks one answered review against the request it answers: uid echoed, allowed, and
/// — when injection is expected — a JSON Patch that applies to the Pod and yields a Pod
/// with the sidecar, the volumes its status records (the embedded default adds none) and
/// the status annotation, everything else kept.
pub fn check_review(fixture: &str, request: &[u8], response: &[u8]) {
    let request: Value = serde_json::from_slice(request).unwrap();
    let review: Value = serde_json::from_slice(response).unwrap_or_else(|e| {
        panic!(
            "{fixture}: response is not JSON ({e}): {}",
            String::from_utf8_lossy(response)
        )
    });
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{fixture}: {review}");
    assert_eq!(review["kind"], "AdmissionReview", "{fixture}: {review}");
    let answer = &review["response"];
    assert_eq!(
        answer["uid"], request["request"]["uid"],
        "{fixture}: uid must be echoed"
    );
    assert_eq!(answer["allowed"], true, "{fixture}: expected allowed, found {answer}");

    let original = request["request"]["object"].clone();
    let original_pod: Pod = serde_json::from_value(original.clone()).unwrap();
    if !expects_injection(fixture) {
        assert!(
            answer.get("patch").is_none(),
            "{fixture}: expected no patch, found {answer}"
        );
        return;
    }
    assert_eq!(answer["patchType"], "JSONPatch", "{fixture}: {answer}");
    let encoded = answer["patch"]
        .as_str()
        .unwrap_or_else(|| panic!("{fixture}: expected a patch, found {answer}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("patch is base64");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("patch is a JSON Patch");
    let mut object = original;
    json_patch::patch(&mut object, &patch.0).unwrap_or_else(|e| panic!("{fixture}: patch does not apply: {e}"));
    let status = injection_status(&object);
    let pod: Pod = serde_json::from_value(object).unwrap_or_else(|e| panic!("{fixture}: patched Pod invalid: {e}"));

    let spec = pod.spec.as_ref().expect("spec");
    let before = original_pod.spec.as_ref().expect("spec");
    let names = |containers: &[k8s_openapi::api::core::v1::Container]| {
        containers.iter().map(|c| c.name.clone()).collect::<Vec<_>>()
    };
    // The default's sidecar goes in native: first among the init containers, the Pod's
    // own containers and init containers kept, in their order.
    let containers = names(&spec.containers);
    assert_eq!(
        containers,
        names(&before.containers),
        "{fixture}: app containers must be kept"
    );
    let mut expected_inits = vec!["envoy".to_string()];
    expected_inits.extend(names(before.init_containers.as_deref().unwrap_or_default()));
    assert_eq!(
        names(spec.init_containers.as_deref().unwrap_or_default()),
        expected_inits,
        "{fixture}: the native sidecar first, the Pod's init containers kept"
    );
    let volumes = |pod: &Pod| {
        pod.spec
            .as_ref()
            .unwrap()
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect::<Vec<_>>()
    };
    // The Pod's own volumes, in their order, then those the injection recorded adding.
    let mut expected_volumes = volumes(&original_pod);
    expected_volumes.extend(
        status["volumes"]
            .as_array()
            .unwrap_or_else(|| panic!("{fixture}: status without `volumes`: {status}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_string()),
    );
    assert_eq!(volumes(&pod), expected_volumes, "{fixture}: volumes");
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations.contains_key(STATUS_ANNOTATION),
        "{fixture}: annotations {annotations:?}"
    );
    for (key, value) in original_pod.metadata.annotations.iter().flatten() {
        assert_eq!(
            annotations.get(key),
            Some(value),
            "{fixture}: annotation {key} must be kept"
        );
    }
    assert_eq!(
        pod.metadata.name, original_pod.metadata.name,
        "{fixture}: name must not change"
    );
    assert_eq!(
        pod.metadata.generate_name, original_pod.metadata.generate_name,
        "{fixture}: generateName kept"
    );
}

/// The status annotation of an injected Pod, parsed.
pub fn injection_status(pod: &Value) -> Value {
    let text = pod["metadata"]["annotations"][STATUS_ANNOTATION]
        .as_str()
        .unwrap_or_else(|| panic!("expected annotation {STATUS_ANNOTATION}: {pod}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{STATUS_ANNOTATION} is not JSON ({e}): {text}"))
}
