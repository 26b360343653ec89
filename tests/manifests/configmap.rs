//! The ConfigMap's `config` is the embedded default template, byte for byte.

use k8s_openapi::api::core::v1::ConfigMap;

use crate::support::*;

#[test]
fn configmap_holds_the_default_template_verbatim() {
    let path = repo("src/template/default-template.yaml");
    let template = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    // Straight from the file too, so the check holds without kubectl.
    let text = std::fs::read_to_string(repo("manifests/configmap.yaml")).expect("read manifests/configmap.yaml");
    let docs = parse_stream("manifests/configmap.yaml", &text);
    let mut candidates = vec![docs.first().expect("one document").clone()];
    if let Some(docs) = rendered() {
        candidates.push(one(docs, "ConfigMap"));
    }
    for doc in candidates {
        let cm: ConfigMap = doc.typed();
        assert_eq!(cm.metadata.name.as_deref(), Some(NAME), "{}", doc.label());
        let data = cm.data.unwrap_or_default();
        let config = data.get("config").map(String::as_str);
        assert!(
            config == Some(template.as_str()),
            "{}: data.config must equal src/config/default-template.yaml byte for byte; found:\n{}",
            doc.label(),
            config.unwrap_or("<missing>")
        );
        assert_eq!(data.len(), 1, "{}: only the default template ships", doc.label());
    }
    assert_eq!(
        template,
        envoy_injector::template::EMBEDDED_DEFAULT,
        "the embedded default is the file"
    );
}
