//! `POST /validate` over the real HTTPS listener (HTTP/1.1 and HTTP/2): a template
//! ConfigMap that does not parse is denied with the field and line, a good one allowed,
//! a dry run answered alike; the route takes the body limits and methods of `/mutate`; a
//! template that breaks the Pod Security level a namespace enforces is admitted with a
//! warning naming it.

use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::*;

fn review(uid: &str, template: &str, dry_run: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "operation": "UPDATE",
            "namespace": "envoy-injector",
            "name": "envoy-injector",
            "dryRun": dry_run,
            "object": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "envoy-injector", "namespace": "envoy-injector"},
                "data": {"config": template},
            },
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_answers_over_https_like_mutate() {
    let certs = service_certs();
    let mut config = test_config();
    config.max_body_bytes = 4096;
    let server = start(config, pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    let url = format!("https://{HOST}:{}/validate?timeout=10s", addr.port());
    for protocol in [Protocol::Http1, Protocol::Alpn] {
        let client = client(addr, &[&certs.ca.cert_pem], protocol);
        for (uid, template, dry_run, allowed) in [
            ("bad", "containers:\n- name: envoy\n  imag: envoy\n", false, false),
            ("bad-dry", "containers:\n- name: envoy\n  imag: envoy\n", true, false),
            ("good", "containers:\n- name: envoy\n  image: envoy\n", false, true),
        ] {
            let response = client
                .post(&url)
                .body(review(uid, template, dry_run))
                .send()
                .await
                .unwrap();
            assert_eq!(response.version(), protocol.expected_version());
            assert_eq!(response.status(), StatusCode::OK);
            let answer: Value = response.json().await.unwrap();
            assert_eq!(answer["response"]["uid"], uid);
            assert_eq!(answer["response"]["allowed"], allowed, "{answer}");
            if !allowed {
                let message = answer["response"]["status"]["message"].as_str().unwrap();
                assert!(
                    message.contains("unknown field `containers[0].imag` at line 3"),
                    "{message}"
                );
            }
        }
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        let response = client.post(&url).body(vec![b' '; 8192]).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let response = client.post(&url).body("not json").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
}

/// Over HTTPS, a ConfigMap holding `classic` is admitted with the Pod Security warning
/// naming the namespace that enforces restricted; the default template alone, without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_warns_of_a_template_that_breaks_an_enforced_level() {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use envoy_injector::admission::TemplateValidation;
    use envoy_injector::template::{EMBEDDED_CLASSIC, EMBEDDED_DEFAULT, KubeVersion};

    let certs = service_certs();
    let namespaces: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::from([
        (
            "apps".to_string(),
            BTreeMap::from([(
                "pod-security.kubernetes.io/enforce".to_string(),
                "restricted".to_string(),
            )]),
        ),
        ("plain".to_string(), BTreeMap::new()),
    ]);
    let mut state = app_state(None);
    state.validation = TemplateValidation::new(KubeVersion::NEWEST).with_namespaces(Arc::new(namespaces));
    let server = start_with(test_config(), pem_source(&certs), state).await;
    let addr = server.server.webhook_addr();
    let url = format!("https://{HOST}:{}/validate?timeout=10s", addr.port());
    let client = client(addr, &[&certs.ca.cert_pem], Protocol::Http1);
    for (uid, template, warned) in [
        ("classic", EMBEDDED_CLASSIC, true),
        ("default", EMBEDDED_DEFAULT, false),
    ] {
        let answer: Value = client
            .post(&url)
            .body(review(uid, template, false))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        let warnings = answer["response"]["warnings"].as_array().cloned().unwrap_or_default();
        if warned {
            assert_eq!(warnings.len(), 1, "{answer}");
            let warning = warnings[0].as_str().unwrap();
            assert!(
                warning.starts_with(
                    "template `config` breaks Pod Security restricted:latest, enforced in namespace `apps`: a Pod there that gets it is refused (capabilities, allowPrivilegeEscalation;"
                ),
                "{warning}"
            );
        } else {
            assert!(warnings.is_empty(), "{answer}");
        }
    }
}
