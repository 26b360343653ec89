//! Checks of tier `local` that run everywhere, no cluster needed.

use super::*;

/// Runs everywhere, no cluster needed: what the cluster steps send is well-formed for the
/// API types, the repository manifests are the ones the steps expect, and the test
/// templates are accepted (or, the bad one, refused naming its field) by the real parser
/// through `envoy-injector inject`. A cluster run then fails only on the cluster's answers.
pub fn cluster_inputs_are_well_formed() {
    let url = format!("https://{}/mutate", host_port("172.18.0.1", 8443));
    let config = webhook_configuration("envoy-injector-e2e-x", "ei-e2e-x", &url, b"PEM BYTES");
    let hooks = config.webhooks.as_deref().unwrap_or_default();
    assert_eq!(hooks.len(), 1, "{config:?}");
    let hook = &hooks[0];
    assert_eq!(
        hook.client_config.url.as_deref(),
        Some("https://172.18.0.1:8443/mutate")
    );
    assert_eq!(
        hook.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
        Some(&b"PEM BYTES"[..])
    );
    assert_eq!(
        (
            hook.failure_policy.as_deref(),
            hook.side_effects.as_str(),
            hook.reinvocation_policy.as_deref()
        ),
        (Some("Fail"), "None", Some("IfNeeded"))
    );
    assert_eq!(
        (hook.timeout_seconds, hook.admission_review_versions.as_slice()),
        (Some(5), &["v1".to_string()][..])
    );
    let selector = hook.namespace_selector.as_ref().and_then(|s| s.match_labels.as_ref());
    assert_eq!(
        selector
            .and_then(|l| l.get("kubernetes.io/metadata.name"))
            .map(String::as_str),
        Some("ei-e2e-x")
    );
    let rule = &hook.rules.as_deref().unwrap_or_default()[0];
    assert_eq!(
        (rule.operations.as_deref(), rule.resources.as_deref()),
        (Some(&["CREATE".to_string()][..]), Some(&["pods".to_string()][..]))
    );
    assert_eq!(host_port("fd00::1", 8443), "[fd00::1]:8443");

    assert_eq!(namespace_object("ei-e2e-x", &[]).metadata.name.as_deref(), Some("ei-e2e-x"));
    assert_eq!(
        service_account_object("default").metadata.name.as_deref(),
        Some("default")
    );
    let cm = configmap_object(CONFIGMAP, "containers: []\n");
    assert_eq!(
        cm.data.unwrap_or_default().get("config").map(String::as_str),
        Some("containers: []\n")
    );
    let net = network(OVERLAP_A.0, OVERLAP_A.1, OVERLAP_A.2);
    assert_eq!(net.data["spec"], json!({ "cidr": OVERLAP_A.1, "gateway": OVERLAP_A.2 }));
    assert_eq!(
        read_manifest("manifests/crd.yaml")["metadata"]["name"],
        "networks.samplecrd.k8s.io"
    );
    let seed = read_manifest("manifests/examples/example-network.yaml");
    assert_eq!(seed["metadata"]["name"], SEED_NETWORK);
    assert_eq!(seed["spec"], json!({ "cidr": SEED_CIDR, "gateway": SEED_GATEWAY }));

    let dir = tempfile::tempdir().expect("temporary directory");
    let pod_file = dir.path().join("pod.json");
    let opted_in = pod("e2e-offline", &[(INJECT, "true")], DEFAULT_IMAGE);
    std::fs::write(&pod_file, serde_json::to_vec(&opted_in).expect("Pod JSON")).expect("write the Pod");
    let inject = |template_text: &str| {
        let template_file = dir.path().join("template.yaml");
        std::fs::write(&template_file, template_text).expect("write the template");
        std::process::Command::new(env!("CARGO_BIN_EXE_envoy-injector"))
            .args(["inject", "-o", "json", "-f"])
            .arg(&pod_file)
            .arg("--config")
            .arg(&template_file)
            .output()
            .expect("run envoy-injector inject")
    };
    for sidecar in [SIDECAR_V1, SIDECAR_V2] {
        let output = inject(&template(sidecar, DEFAULT_IMAGE));
        assert!(
            output.status.success(),
            "expected the test template ({sidecar}) to be accepted, found {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let injected: Pod = serde_json::from_slice(&output.stdout).expect("inject -o json prints the Pod");
        let found = container(&injected, sidecar).and_then(|c| c.image.as_deref());
        assert_eq!(found, Some(DEFAULT_IMAGE), "{}", describe_pod(&injected));
    }
    let output = inject(&bad_template(DEFAULT_IMAGE));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains(BAD_FIELD),
        "expected the bad test template to be refused naming `{BAD_FIELD}`, found {}: {stderr}",
        output.status
    );
}

/// Runs everywhere: the in-cluster mode's inputs and parsers.
pub fn in_cluster_inputs_are_well_formed() {
    assert_eq!(Mode::parse(None), Ok(Mode::Local));
    assert_eq!(Mode::parse(Some("local")), Ok(Mode::Local));
    assert_eq!(Mode::parse(Some(" in-cluster ")), Ok(Mode::InCluster));
    assert!(Mode::parse(Some("incluster")).unwrap_err().contains("in-cluster"));

    let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    assert_eq!(network_backend_arg(&args(&["serve", "--log-format", "json"])), "multus");
    assert_eq!(
        network_backend_arg(&args(&["serve", "--network-backend", "none"])),
        "none"
    );
    assert_eq!(network_backend_arg(&args(&["serve", "--network-backend=none"])), "none");

    // The shipped Deployment is what the in-cluster mode reads its backend from.
    let shipped = read_manifest("manifests/deployment.yaml");
    assert_eq!(shipped["metadata"]["name"], INJECTOR_NAME);
    assert_eq!(shipped["metadata"]["namespace"], INJECTOR_NAMESPACE);
    let shipped: Deployment = serde_json::from_value(shipped).expect("manifests/deployment.yaml is a Deployment");
    let shipped_args = shipped
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].args.clone().unwrap_or_default());
    assert_eq!(network_backend_arg(&shipped_args.unwrap_or_default()), "multus");

    assert_eq!(ip_in_cidr("198.18.72.4", SEED_CIDR), Some(true));
    assert_eq!(ip_in_cidr("198.18.72.4/24", SEED_CIDR), Some(true));
    assert_eq!(ip_in_cidr("10.244.0.5", SEED_CIDR), Some(false));
    assert_eq!(ip_in_cidr("198.18.73.1", SEED_CIDR), Some(false));
    assert_eq!(ip_in_cidr("0.0.0.1", "0.0.0.0/0"), Some(true));
    assert_eq!(ip_in_cidr("fd00::5", "fd00::/64"), Some(true));
    assert_eq!(ip_in_cidr("fd01::5", "fd00::/64"), Some(false));
    assert_eq!(ip_in_cidr("fd00::5", SEED_CIDR), Some(false));
    assert_eq!(ip_in_cidr("nonsense", SEED_CIDR), None);

    // As Multus writes it: the cluster network first, then one entry per attachment.
    let status = r#"[
        {"name": "kindnet", "interface": "eth0", "ips": ["10.244.0.7"], "mac": "aa:bb:cc:dd:ee:01", "default": true, "dns": {}},
        {"name": "ei-e2e-x/example-network", "interface": "net1", "ips": ["198.18.72.2"], "mac": "aa:bb:cc:dd:ee:02", "dns": {}}
    ]"#;
    assert_eq!(
        attachment_ips(status, "ei-e2e-x", SEED_NETWORK),
        Ok(vec!["198.18.72.2".to_string()])
    );
    assert!(
        attachment_ips(status, "other", "net-x")
            .unwrap_err()
            .contains("other/net-x")
    );
    assert!(attachment_ips("not json", "ns", SEED_NETWORK).is_err());

    let web = deployment("e2e-web", 2, &[(INJECT, "true")], DEFAULT_IMAGE);
    let spec = web.spec.expect("a Deployment spec");
    assert_eq!(spec.replicas, Some(2));
    let template_meta = spec.template.metadata.expect("template metadata");
    assert_eq!(
        template_meta
            .annotations
            .unwrap_or_default()
            .get(INJECT)
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        spec.selector.match_labels, template_meta.labels,
        "the test Deployment's selector matches its template"
    );

    let pod_json = |phase: &str, running_names: &[&str]| -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": "p" },
            "status": {
                "phase": phase,
                "containerStatuses": running_names.iter().map(|n| json!({
                    "name": n, "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                    "state": { "running": {} },
                })).collect::<Vec<_>>(),
            },
        }))
        .expect("a Pod status")
    };
    assert_eq!(
        running(&pod_json("Running", &["app", SIDECAR_V2]), &["app", SIDECAR_V2]),
        Ok(())
    );
    assert!(running(&pod_json("Running", &["app"]), &["app", SIDECAR_V2]).is_err());
    assert!(
        running(&pod_json("Pending", &[]), &["app"])
            .unwrap_err()
            .contains("Pending")
    );

    let event = |count: i32| -> Event {
        serde_json::from_value(json!({
            "metadata": { "name": "envoy-injector.1" },
            "involvedObject": { "kind": "ConfigMap", "name": CONFIGMAP },
            "count": count,
        }))
        .expect("an Event")
    };
    assert_eq!(event_fingerprint(&event(1)), event_fingerprint(&event(1)));
    assert_ne!(event_fingerprint(&event(1)), event_fingerprint(&event(2)));
}
