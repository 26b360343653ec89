//! Where the API server spent the time: its own admission metrics, read before and after
//! the measured rounds — per admission plugin (the mutating and validating policy plugins,
//! the webhook plugin), per compiled or hand-written policy (its mutation checks and match
//! conditions), and CEL evaluation as a whole.

use kube::Client;

use crate::common::metrics::Samples;
use crate::objects::PREFIX;
use crate::scale::Result;

pub async fn scrape(client: &Client) -> Result<Samples> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let text = client
        .request_text(request)
        .await
        .map_err(|e| format!("cannot read the API server's /metrics: {e}"))?;
    Ok(Samples::parse(&text))
}

/// (sum, count) of a histogram's series whose `key` label is `value`, between two scrapes.
fn delta(before: &Samples, after: &Samples, name: &str, key: &str, value: &str) -> (f64, f64) {
    let of = |samples: &Samples, suffix: &str| {
        samples.sum_where(&format!("{name}_{suffix}"), |labels| {
            labels.get(key).is_some_and(|v| v == value)
        })
    };
    (
        of(after, "sum") - of(before, "sum"),
        of(after, "count") - of(before, "count"),
    )
}

/// The distinct values of `key` on `name`'s series; with `ours`, those of the benchmark's
/// objects (its policies, and the webhooks it registers).
fn values(samples: &Samples, name: &str, key: &str, ours: bool) -> Vec<String> {
    let mut out: Vec<String> = samples
        .0
        .iter()
        .filter(|s| s.name == format!("{name}_count"))
        .filter_map(|s| s.labels.get(key).cloned())
        .filter(|v| !ours || v.starts_with(PREFIX) || v.ends_with(".sidecar.samplecrd.k8s.io") || v.contains("bench"))
        .collect();
    out.sort();
    out.dedup();
    out
}

pub fn report(before: &Samples, after: &Samples, pods: usize) {
    println!();
    println!("where the API server spent the time over the measured rounds ({pods} Pods a route):");
    let plugins = "apiserver_admission_controller_admission_duration_seconds";
    for plugin in values(after, plugins, "name", false) {
        let (sum, count) = delta(before, after, plugins, "name", &plugin);
        if count > 0.0 {
            println!(
                "  plugin {plugin:<32} {count:>7} calls, mean {:>7.3} ms",
                sum / count * 1e3
            );
        }
    }
    let checks = "apiserver_mutating_admission_policy_check_duration_seconds";
    for policy in values(after, checks, "policy", true) {
        let (sum, count) = delta(before, after, checks, "policy", &policy);
        if count > 0.0 {
            println!(
                "  mutating policy {policy:<36} {count:>7} mutations, mean {:>7.3} ms",
                sum / count * 1e3
            );
        }
    }
    let validations = "apiserver_validating_admission_policy_check_duration_seconds";
    for policy in values(after, validations, "policy", true) {
        let (sum, count) = delta(before, after, validations, "policy", &policy);
        if count > 0.0 {
            println!(
                "  validating policy {policy:<34} {count:>7} checks, mean {:>7.3} ms",
                sum / count * 1e3
            );
        }
    }
    let webhooks = "apiserver_admission_webhook_admission_duration_seconds";
    for name in values(after, webhooks, "name", true) {
        let (sum, count) = delta(before, after, webhooks, "name", &name);
        if count > 0.0 {
            println!(
                "  webhook {name:<44} {count:>7} calls, mean {:>7.3} ms",
                sum / count * 1e3
            );
        }
    }
    let conditions = "apiserver_admission_match_condition_evaluation_seconds";
    for name in values(after, conditions, "name", true) {
        let (sum, count) = delta(before, after, conditions, "name", &name);
        if count > 0.0 {
            println!(
                "  match conditions of {name:<32} {count:>7} evaluations, mean {:>7.3} ms",
                sum / count * 1e3
            );
        }
    }
    let cel = "apiserver_cel_evaluation_duration_seconds";
    let sum = after.sum(&format!("{cel}_sum"), &[]) - before.sum(&format!("{cel}_sum"), &[]);
    let count = after.sum(&format!("{cel}_count"), &[]) - before.sum(&format!("{cel}_count"), &[]);
    if count > 0.0 {
        println!("  CEL evaluations (all): {count} , mean {:.3} ms", sum / count * 1e3);
    }
}
