//! Alert rules among the examples (PrometheusRule, Prometheus Operator): no k8s-openapi
//! type exists for them, so their shape is checked here, and every `envoy_injector_*`
//! metric an expression reads must be one the binary registers.

use serde_json::Value;

use crate::support::*;

/// Metric names the binary exposes. A labelled family shows nothing until it has a series,
/// so each gets one first; a family added later and not listed here makes an alert on it
/// fail this check (naming what is exposed), never pass unseen.
fn registered_metrics() -> Vec<String> {
    use envoy_injector::metrics::*;
    let mut registry = prometheus_client::registry::Registry::default();
    let m = Metrics::register(&mut registry);
    let template = TemplateLabels { template: "t".into() };
    let listener = ListenerLabels { listener: "webhook" };
    let load = LoadLabels {
        result: LoadResult::Success,
    };
    let _ = m.admission_requests.get_or_create(&OutcomeLabels {
        outcome: Outcome::Injected,
        dry_run: false,
    });
    let _ = m.injections.get_or_create(&template);
    let _ = m.template_loads.get_or_create(&load);
    let _ = m.tls_reloads.get_or_create(&load);
    let _ = m.reconciles.get_or_create(&ReconcileLabels {
        result: ReconcileResult::Changed,
    });
    let _ = m.store_objects.get_or_create(&StoreLabels { store: "namespaces" });
    let _ = m.pods_stale.get_or_create(&template);
    let _ = m
        .pods_uninjected
        .get_or_create(&NamespaceLabels { namespace: "ns".into() });
    let _ = m.connections_open.get_or_create(&listener);
    let _ = m.connections_rejected.get_or_create(&listener);
    let _ = m.connection_timeouts.get_or_create(&TimeoutLabels {
        listener: "webhook",
        phase: "idle",
    });
    let _ = m.accept_errors.get_or_create(&listener);
    let _ = m.api_requests.get_or_create(&ApiLabels {
        verb: "get",
        resource: "pods".into(),
    });
    envoy_injector::metrics::encode(&registry)
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        // Counters' samples carry `_total`.
        .map(|(name, kind)| match kind {
            "counter" => format!("{name}_total"),
            _ => name.to_string(),
        })
        .collect()
}

fn unknown_keys(value: &Value, allowed: &[&str], at: &str, problems: &mut Vec<String>) {
    for key in value.as_object().into_iter().flat_map(|m| m.keys()) {
        if !allowed.contains(&key.as_str()) {
            problems.push(format!("field {at}.{key} is not a PrometheusRule field"));
        }
    }
}

/// Problems of a `monitoring.coreos.com/v1` PrometheusRule: unknown fields, rules without
/// `alert`/`record` and `expr`, metrics of ours the binary does not register.
pub(crate) fn check_prometheus_rule(doc: &Doc) -> Vec<String> {
    let mut problems = Vec::new();
    let value = &doc.value;
    unknown_keys(value, &["apiVersion", "kind", "metadata", "spec"], "", &mut problems);
    unknown_keys(&value["spec"], &["groups"], ".spec", &mut problems);
    let registered = registered_metrics();
    let ours = regex::Regex::new(r"envoy_injector_[a-z_]+").expect("a valid pattern");
    let groups = value["spec"]["groups"].as_array().cloned().unwrap_or_default();
    if groups.is_empty() {
        problems.push("expected .spec.groups to hold at least one group".into());
    }
    for (g, group) in groups.iter().enumerate() {
        let at = format!(".spec.groups[{g}]");
        unknown_keys(
            group,
            &["name", "interval", "rules", "limit", "partial_response_strategy"],
            &at,
            &mut problems,
        );
        for (r, rule) in group["rules"].as_array().into_iter().flatten().enumerate() {
            let at = format!("{at}.rules[{r}]");
            unknown_keys(
                rule,
                &[
                    "alert",
                    "record",
                    "expr",
                    "for",
                    "keep_firing_for",
                    "labels",
                    "annotations",
                ],
                &at,
                &mut problems,
            );
            if rule["alert"].as_str().or(rule["record"].as_str()).is_none() {
                problems.push(format!("{at}: expected `alert` or `record`"));
            }
            let expr = rule["expr"].as_str().unwrap_or_default();
            if expr.is_empty() {
                problems.push(format!("{at}: expected `expr`"));
            }
            for metric in ours.find_iter(expr).map(|m| m.as_str()) {
                if !registered.iter().any(|name| name == metric) {
                    problems.push(format!(
                        "{at}: expr reads {metric}, which the binary does not expose (it has: {})",
                        registered.join(", ")
                    ));
                }
            }
        }
    }
    problems
}

pub fn the_uninjected_pods_alert_fires_when_the_gauge_stays_above_zero_for_ten_minutes() {
    let path = "manifests/examples/uninjected-pods-alert.yaml";
    let text = std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let docs = parse_stream(path, &text);
    assert_eq!(docs.len(), 1, "one PrometheusRule");
    assert_eq!(check_prometheus_rule(&docs[0]), Vec::<String>::new());
    let rules = docs[0].value["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .clone();
    let firing = rules
        .iter()
        .find(|r| r["alert"] == "EnvoyInjectorPodsUninjected")
        .expect("the EnvoyInjectorPodsUninjected alert");
    assert_eq!(
        firing["expr"], "max by (namespace) (envoy_injector_pods_uninjected) > 0",
        "replicas count the same Pods: max, not sum"
    );
    assert_eq!(firing["for"], "10m");
    let absent = rules
        .iter()
        .find(|r| r["alert"] == "EnvoyInjectorUninjectedGaugeAbsent")
        .expect("an alert when the gauge has no series (--watch-uninjected=false)");
    assert_eq!(absent["expr"], "absent(envoy_injector_pods_uninjected)");
}

pub fn an_alert_on_a_metric_the_binary_does_not_expose_is_caught() {
    let doc = Doc {
        origin: "inline".into(),
        value: serde_json::json!({
            "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": { "name": "x" },
            "spec": { "groups": [{ "name": "g", "rules": [
                { "alert": "A", "expr": "envoy_injector_pods_uninjectd > 0", "for": "10m" },
                { "alert": "B", "expr": "envoy_injector_pods_uninjected > 0", "fro": "10m" },
            ] }] },
        }),
    };
    let problems = check_prometheus_rule(&doc);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("envoy_injector_pods_uninjectd"), "{problems:?}");
    assert!(problems[1].contains(".spec.groups[0].rules[1].fro"), "{problems:?}");
}
