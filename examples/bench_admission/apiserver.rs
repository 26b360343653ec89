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
    // (metric, its label naming the thing timed, only ours, the line's words, its width)
    let timings: [(&str, &str, bool, &str, &str, usize); 5] = [
        (
            "apiserver_admission_controller_admission_duration_seconds",
            "name",
            false,
            "plugin",
            "calls",
            32,
        ),
        (
            "apiserver_mutating_admission_policy_check_duration_seconds",
            "policy",
            true,
            "mutating policy",
            "mutations",
            36,
        ),
        (
            "apiserver_validating_admission_policy_check_duration_seconds",
            "policy",
            true,
            "validating policy",
            "checks",
            34,
        ),
        (
            "apiserver_admission_webhook_admission_duration_seconds",
            "name",
            true,
            "webhook",
            "calls",
            44,
        ),
        (
            "apiserver_admission_match_condition_evaluation_seconds",
            "name",
            true,
            "match conditions of",
            "evaluations",
            32,
        ),
    ];
    for (metric, key, ours, what, counted, width) in timings {
        for name in values(after, metric, key, ours) {
            let (sum, count) = delta(before, after, metric, key, &name);
            if count > 0.0 {
                println!(
                    "  {what} {name:<width$} {count:>7} {counted}, mean {:>7.3} ms",
                    sum / count * 1e3
                );
            }
        }
    }
    let cel = "apiserver_cel_evaluation_duration_seconds";
    let sum = after.sum(&format!("{cel}_sum"), &[]) - before.sum(&format!("{cel}_sum"), &[]);
    let count = after.sum(&format!("{cel}_count"), &[]) - before.sum(&format!("{cel}_count"), &[]);
    if count > 0.0 {
        println!("  CEL evaluations (all): {count} , mean {:.3} ms", sum / count * 1e3);
    }
}
