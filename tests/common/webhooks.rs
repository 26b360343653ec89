//! A shipped webhook configuration made local: every webhook sent to a `url:` with a
//! `caBundle`, narrowed to chosen namespaces. For the e2e tiers and
//! `examples/bench_admission.rs`.

use serde_json::{Value, json};

/// Standard base64, as a `caBundle` or a Secret's `data` holds bytes.
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `config` (a webhook configuration of `manifests/`, as JSON) with `metadata` replaced,
/// each of its webhooks sent to `url` (its path included) with `ca_pem` as the `caBundle`
/// and narrowed to `namespaces`: a `matchLabels` (the shipped one names the injector's
/// namespace) is replaced by a `kubernetes.io/metadata.name In namespaces` expression;
/// every other selector and the CEL `matchConditions` stay as shipped, ANDed with it.
pub fn local_webhooks(mut config: Value, metadata: Value, url: &str, ca_pem: &[u8], namespaces: &[&str]) -> Value {
    config["metadata"] = metadata;
    let hooks = config["webhooks"]
        .as_array_mut()
        .expect("a webhook configuration has webhooks");
    for hook in hooks {
        hook["clientConfig"] = json!({ "url": url, "caBundle": base64(ca_pem) });
        let selector = hook["namespaceSelector"]
            .as_object_mut()
            .expect("each shipped webhook has a namespaceSelector");
        selector.remove("matchLabels");
        let expressions = selector.entry("matchExpressions").or_insert_with(|| json!([]));
        expressions
            .as_array_mut()
            .expect("matchExpressions is a list")
            .push(json!({ "key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces }));
    }
    config
}
