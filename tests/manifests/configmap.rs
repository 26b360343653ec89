//! The ConfigMap ships the embedded templates byte for byte: `config` (the default) and
//! `classic` (the previous default), and nothing else.

use k8s_openapi::api::core::v1::ConfigMap;

use crate::support::*;

/// Each key the ConfigMap ships, the file it must equal and the embedded text.
const SHIPPED: [(&str, &str, &str); 2] = [
    (
        "config",
        "crates/engine/src/template/default-template.yaml",
        envoy_injector::template::EMBEDDED_DEFAULT,
    ),
    (
        "classic",
        "crates/engine/src/template/classic-template.yaml",
        envoy_injector::template::EMBEDDED_CLASSIC,
    ),
];

pub fn configmap_holds_the_embedded_templates_verbatim() -> Outcome {
    // Straight from the file too, so the check holds without kubectl.
    let text = std::fs::read_to_string(repo("manifests/configmap.yaml")).expect("read manifests/configmap.yaml");
    let docs = parse_stream("manifests/configmap.yaml", &text);
    let mut candidates = vec![docs.first().expect("one document").clone()];
    // Without kubectl the file is checked and the test still reports the render not run.
    let rendered = rendered();
    if let Ok(docs) = rendered {
        candidates.push(one(docs, "ConfigMap"));
    }
    for doc in candidates {
        let cm: ConfigMap = doc.typed();
        assert_eq!(cm.metadata.name.as_deref(), Some(NAME), "{}", doc.label());
        let data = cm.data.unwrap_or_default();
        for (key, file, embedded) in SHIPPED {
            let path = repo(file);
            let template =
                std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let shipped = data.get(key).map(String::as_str);
            assert!(
                shipped == Some(template.as_str()),
                "{}: data.{key} must equal {file} byte for byte; found:\n{}",
                doc.label(),
                shipped.unwrap_or("<missing>")
            );
            assert_eq!(template, embedded, "the embedded `{key}` is {file}");
        }
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["classic", "config"],
            "{}: only the embedded templates ship",
            doc.label()
        );
    }
    rendered.map(|_| ())
}
