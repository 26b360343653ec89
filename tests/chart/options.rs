//! Each value renders what it promises.

use serde_json::{Value, json};

use crate::common::harness::Outcome;
use crate::common::helm::{Engine, engine};

fn render(helm: &Engine, namespace: &str, values: Value) -> Vec<Value> {
    helm.render(namespace, &values.to_string())
        .unwrap_or_else(|e| panic!("expected the chart to render with {values}, found: {e}"))
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn get<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(objects, kind, name).unwrap_or_else(|| panic!("expected {kind} {name} in the render"))
}

fn container(objects: &[Value]) -> &Value {
    &get(objects, "Deployment", "envoy-injector")["spec"]["template"]["spec"]["containers"][0]
}

fn args(objects: &[Value]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap_or_default().to_string())
        .collect()
}

/// The rules the ClusterRole grants on `resource`.
fn verbs(objects: &[Value], kind: &str, resource: &str) -> Vec<String> {
    get(objects, kind, "envoy-injector")["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == resource))
        })
        .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect()
}

fn webhooks(objects: &[Value]) -> Vec<&Value> {
    ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
        .iter()
        .flat_map(|kind| {
            get(objects, kind, "envoy-injector")["webhooks"]
                .as_array()
                .expect("webhooks")
        })
        .collect()
}

pub fn image_injection_networks_scheduling_and_extras_render_as_set() -> Outcome {
    let helm = engine("the chart's values")?;
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let objects = render(
        &helm,
        "envoy-injector",
        json!({
            "image": {"repository": "registry.example.com/envoy-injector", "tag": "0.2.0", "pullPolicy": "Always"},
            "injection": "webhook", "networks": {"enabled": false}, "replicas": 3,
            "resources": {"limits": {"memory": "256Mi"}},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "priorityClassName": "system-cluster-critical",
            "podLabels": {"team": "platform"}, "podAnnotations": {"example.com/a": "b"},
            "extraArgs": ["--api-qps=100", "--watch-uninjected=false"]
        }),
    );
    let c = container(&objects);
    assert_eq!(c["image"], "registry.example.com/envoy-injector:0.2.0");
    assert_eq!(c["imagePullPolicy"], "Always");
    // Maps merge with the defaults, as Helm merges values (`null` drops a default key).
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}})
    );
    assert_eq!(
        args(&objects),
        [
            "serve",
            "--log-format",
            "json",
            "--injection=webhook",
            "--networks=false",
            "--api-qps=100",
            "--watch-uninjected=false"
        ]
    );
    let deployment = get(&objects, "Deployment", "envoy-injector");
    let pod = &deployment["spec"]["template"];
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(pod["spec"]["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(
        pod["spec"]["tolerations"],
        json!([{"key": "dedicated", "operator": "Exists"}])
    );
    assert_eq!(pod["spec"]["affinity"]["nodeAffinity"], json!({}));
    assert!(
        pod["spec"]["affinity"]["podAntiAffinity"].is_object(),
        "the default spread stays unless set to null"
    );
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    assert_eq!(pod["metadata"]["annotations"], json!({"example.com/a": "b"}));

    let pinned = render(&helm, "envoy-injector", json!({"image": {"digest": digest}}));
    assert_eq!(
        container(&pinned)["image"],
        format!("envoy-injector@{digest}"),
        "a digest wins over the tag"
    );
    Ok(())
}

pub fn templates_replace_or_drop_the_shipped_ones() -> Outcome {
    let helm = engine("the chart's templates value")?;
    let mine = "containers:\n- name: proxy\n  image: registry.example.com/proxy:1\n";
    let objects = render(
        &helm,
        "envoy-injector",
        json!({"templates": {"config": mine, "classic": null, "canary": mine}}),
    );
    let data = &get(&objects, "ConfigMap", "envoy-injector")["data"];
    assert_eq!(
        data,
        &json!({"canary": mine, "config": mine}),
        "classic dropped, config replaced, canary added"
    );
    Ok(())
}

pub fn the_pod_disruption_budget_never_blocks_a_drain_at_one_replica() -> Outcome {
    let helm = engine("the chart's PodDisruptionBudget")?;
    let two = render(&helm, "envoy-injector", json!({}));
    assert_eq!(
        get(&two, "PodDisruptionBudget", "envoy-injector")["spec"]["minAvailable"],
        1
    );
    let one = render(&helm, "envoy-injector", json!({"replicas": 1}));
    let spec = &get(&one, "PodDisruptionBudget", "envoy-injector")["spec"];
    assert_eq!(
        (spec.get("minAvailable"), &spec["maxUnavailable"]),
        (None, &json!(1)),
        "at one replica the budget lets it go: {spec}"
    );
    let none = render(
        &helm,
        "envoy-injector",
        json!({"podDisruptionBudget": {"enabled": false}}),
    );
    assert!(find(&none, "PodDisruptionBudget", "envoy-injector").is_none());
    Ok(())
}

/// Self-managed TLS (the default): the injector writes its Secret and both caBundles, so
/// it has those rights and nothing is mounted. cert-manager and an existing Secret: the
/// certificate is mounted, the injector runs with `--tls-cert/--tls-key`, and it has no
/// right to write a Secret or patch a webhook configuration: it writes into no object the
/// chart (or a GitOps tool) owns.
pub fn each_tls_mode_renders_its_certificate_wiring_and_only_the_rights_it_needs() -> Outcome {
    let helm = engine("the chart's TLS modes")?;
    let own = render(&helm, "envoy-injector", json!({}));
    assert_eq!(
        verbs(&own, "ClusterRole", "validatingwebhookconfigurations"),
        ["get", "patch"]
    );
    assert_eq!(
        verbs(&own, "Role", "secrets"),
        ["create", "get", "list", "watch", "update"]
    );
    assert!(
        webhooks(&own)
            .iter()
            .all(|w| w["clientConfig"].get("caBundle").is_none())
    );
    assert!(container(&own).get("volumeMounts").is_none());

    let files = ["--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key"];
    let managed = render(&helm, "envoy-injector", json!({"tls": {"mode": "certManager"}}));
    let certificate = get(&managed, "Certificate", "envoy-injector");
    assert_eq!(certificate["spec"]["secretName"], "envoy-injector-tls");
    assert_eq!(
        certificate["spec"]["dnsNames"],
        json!([
            "envoy-injector",
            "envoy-injector.envoy-injector",
            "envoy-injector.envoy-injector.svc",
            "envoy-injector.envoy-injector.svc.cluster.local"
        ])
    );
    assert_eq!(certificate["spec"]["issuerRef"]["name"], "envoy-injector-selfsigned");
    assert!(find(&managed, "Issuer", "envoy-injector-selfsigned").is_some());
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        assert_eq!(
            get(&managed, kind, "envoy-injector")["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "envoy-injector/envoy-injector",
            "{kind}: cainjector fills its caBundle"
        );
    }
    let theirs = render(
        &helm,
        "envoy-injector",
        json!({"tls": {"mode": "certManager", "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}}}),
    );
    assert!(
        find(&theirs, "Issuer", "envoy-injector-selfsigned").is_none(),
        "no Issuer of ours with one given"
    );
    assert_eq!(
        get(&theirs, "Certificate", "envoy-injector")["spec"]["issuerRef"]["kind"],
        "ClusterIssuer"
    );

    let ca = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t";
    let existing = render(
        &helm,
        "envoy-injector",
        json!({"tls": {"mode": "secret", "secret": {"name": "my-tls", "caBundle": ca}}}),
    );
    assert!(
        webhooks(&existing).iter().all(|w| w["clientConfig"]["caBundle"] == ca),
        "every webhook trusts the given CA"
    );
    assert!(find(&existing, "Certificate", "envoy-injector").is_none());

    for (mode, objects, secret) in [
        ("certManager", &managed, "envoy-injector-tls"),
        ("secret", &existing, "my-tls"),
    ] {
        let arguments = args(objects);
        assert!(
            files.iter().all(|f| arguments.iter().any(|a| a == f)),
            "{mode}: {arguments:?}"
        );
        let pod = &get(objects, "Deployment", "envoy-injector")["spec"]["template"]["spec"];
        assert_eq!(
            pod["volumes"],
            json!([{"name": "tls", "secret": {"secretName": secret}}]),
            "{mode}"
        );
        assert_eq!(
            container(objects)["volumeMounts"],
            json!([{"name": "tls", "mountPath": "/tls", "readOnly": true}])
        );
        for config in ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"] {
            assert_eq!(
                verbs(objects, "ClusterRole", config),
                ["get"],
                "{mode}: no caBundle patch on {config}"
            );
        }
        assert!(
            verbs(objects, "Role", "secrets").is_empty(),
            "{mode}: no right on Secrets"
        );
    }
    Ok(())
}

pub fn the_service_monitor_scrapes_the_admin_port() -> Outcome {
    let helm = engine("the chart's ServiceMonitor")?;
    assert!(
        find(
            &render(&helm, "envoy-injector", json!({})),
            "ServiceMonitor",
            "envoy-injector"
        )
        .is_none()
    );
    let objects = render(
        &helm,
        "envoy-injector",
        json!({"serviceMonitor": {"enabled": true, "labels": {"release": "prometheus"}, "interval": "15s"}}),
    );
    let monitor = get(&objects, "ServiceMonitor", "envoy-injector");
    let service = get(&objects, "Service", "envoy-injector-metrics");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        monitor["spec"]["endpoints"],
        json!([{"port": "admin", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}])
    );
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("a selector")
    {
        assert_eq!(
            &service["metadata"]["labels"][key], value,
            "the ServiceMonitor selects the metrics Service"
        );
    }
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "admin", "port": 9090, "targetPort": "admin", "protocol": "TCP"}])
    );
    Ok(())
}

/// Another release namespace reaches every reference and selector: the Service the
/// webhooks call, the namespaces they never target, the ConfigMap check's namespace,
/// RBAC subjects, the certificate's names.
pub fn the_release_namespace_is_templated_into_every_selector() -> Outcome {
    let helm = engine("the chart's namespace")?;
    let objects = render(&helm, "mesh-system", json!({"tls": {"mode": "certManager"}}));
    let text = serde_json::to_string(&objects).unwrap();
    for reference in [
        "\"namespace\":\"envoy-injector\"",
        "\"kube-system\",\"envoy-injector\"",
        "\"kubernetes.io/metadata.name\":\"envoy-injector\"",
        "\"envoy-injector/envoy-injector\"",
    ] {
        assert!(
            !text.contains(reference),
            "no reference to the default namespace left: {reference}"
        );
    }
    for hook in webhooks(&objects) {
        assert_eq!(
            hook["clientConfig"]["service"]["namespace"], "mesh-system",
            "{}",
            hook["name"]
        );
    }
    let mutating = get(&objects, "MutatingWebhookConfiguration", "envoy-injector");
    for hook in mutating["webhooks"].as_array().unwrap() {
        let excluded = hook["namespaceSelector"]["matchExpressions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == "kubernetes.io/metadata.name")
            .expect("the namespace exclusion");
        assert_eq!(
            excluded["values"],
            json!(["kube-system", "mesh-system"]),
            "{}",
            hook["name"]
        );
    }
    let validating = get(&objects, "ValidatingWebhookConfiguration", "envoy-injector");
    assert_eq!(
        validating["webhooks"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "mesh-system"
    );
    assert_eq!(
        validating["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "mesh-system/envoy-injector"
    );
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        assert_eq!(
            get(&objects, kind, "envoy-injector")["subjects"][0]["namespace"],
            "mesh-system"
        );
    }
    for object in objects.iter().filter(|o| o["metadata"].get("namespace").is_some()) {
        assert_eq!(object["metadata"]["namespace"], "mesh-system", "{}", object["kind"]);
    }
    assert!(
        get(&objects, "Certificate", "envoy-injector")["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .contains(&json!("envoy-injector.mesh-system.svc"))
    );
    Ok(())
}

/// `annotationOptIn: false`: `serve` is told so, and the webhook configuration has no
/// annotation entry (its one condition is what every Pod would pay): only selectors send
/// Pods.
pub fn without_annotation_opt_in_no_webhook_entry_reads_annotations() -> Outcome {
    let helm = engine("the chart's values")?;
    let names = |objects: &[Value]| -> Vec<String> {
        let config = get(objects, "MutatingWebhookConfiguration", "envoy-injector");
        config["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_string())
            .collect()
    };
    let shipped = render(&helm, "envoy-injector", json!({}));
    assert_eq!(
        names(&shipped),
        [
            "namespace.sidecar.samplecrd.k8s.io",
            "label.sidecar.samplecrd.k8s.io",
            "pod.sidecar.samplecrd.k8s.io"
        ]
    );
    assert!(!args(&shipped).contains(&String::from("--annotation-opt-in=false")));
    let labels_only = render(&helm, "envoy-injector", json!({"annotationOptIn": false}));
    assert_eq!(
        names(&labels_only),
        ["namespace.sidecar.samplecrd.k8s.io", "label.sidecar.samplecrd.k8s.io"]
    );
    assert!(args(&labels_only).contains(&String::from("--annotation-opt-in=false")));
    Ok(())
}

/// `autoRollout`: off by default (no flag, no rights beyond the shipped ones); on, the
/// flag, its interval and timeout when they are not `serve`'s defaults, and the rights.
pub fn auto_rollout_is_off_unless_enabled_and_passes_its_interval_and_timeout() -> Outcome {
    let helm = engine("the chart's autoRollout")?;
    let rollout_rbac = |objects: &[Value]| -> Vec<String> {
        objects
            .iter()
            .filter(|o| o["metadata"]["name"] == "envoy-injector-rollout")
            .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let shipped = render(&helm, "envoy-injector", json!({}));
    assert!(
        !args(&shipped).iter().any(|a| a.starts_with("--auto-rollout")),
        "expected no --auto-rollout flag by default, found {:?}",
        args(&shipped)
    );
    assert_eq!(rollout_rbac(&shipped), Vec::<String>::new());
    let on = render(
        &helm,
        "tools",
        json!({"autoRollout": {"enabled": true, "interval": "2m", "timeout": "20m"}}),
    );
    let flags: Vec<String> = args(&on)
        .into_iter()
        .filter(|a| a.starts_with("--auto-rollout"))
        .collect();
    assert_eq!(
        flags,
        [
            "--auto-rollout=true",
            "--auto-rollout-interval=2m",
            "--auto-rollout-timeout=20m"
        ]
    );
    assert_eq!(
        rollout_rbac(&on),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    // The bound names the release namespace's ServiceAccount as its parameter.
    let bound = get(&on, "ValidatingAdmissionPolicyBinding", "envoy-injector-rollout");
    assert_eq!(
        bound["spec"]["paramRef"],
        json!({"name": "envoy-injector", "namespace": "tools", "parameterNotFoundAction": "Allow"})
    );
    let binding = get(&on, "ClusterRoleBinding", "envoy-injector-rollout");
    assert_eq!(binding["subjects"][0]["namespace"], "tools");
    Ok(())
}
