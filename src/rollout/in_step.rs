//! Whether the live templates are in step everywhere they are served, so that the Pods a
//! restart creates get them: the compiled admission policies (judged as `check`'s
//! `admission-policies` line judges them) and every Ready replica of the injector's
//! Deployment (each shows the revisions it injects with in `envoy_injector_template_revision`
//! on its `/metrics`). Pure: what was read comes in as data.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cluster::injection::{Policies, health};
use crate::policies::Path;
use crate::stale::is_stale;
use crate::template::TemplateSet;

/// The metric every replica shows its live templates' revisions in.
pub const REVISION_METRIC: &str = "envoy_injector_template_revision";

/// What a replica's `/metrics` show: template → revision, or why they could not be read.
pub type Shown = Result<BTreeMap<String, String>, String>;

/// One Ready replica and what its `/metrics` show: template → revision, or why they could
/// not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    pub name: String,
    pub shown: Shown,
}

/// The injector's replicas, as far as they could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replicas {
    /// No Deployment to read them from (`--deployment ""`).
    NotChecked,
    /// The Ready replicas of this Deployment.
    Read { deployment: String, ready: Vec<Replica> },
    /// Why they could not be listed.
    Unreadable(String),
}

/// The verdict, and what it rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InStep {
    pub ready: bool,
    /// What is in step (when `ready`), or what is not.
    pub because: Vec<String>,
}

/// Whether `live` is in step on the compiled policies and the replicas.
pub fn judge(live: &TemplateSet, policies: &Policies, replicas: &Replicas) -> InStep {
    let want: BTreeMap<String, String> = live
        .names()
        .filter_map(|name| Some((name.to_string(), live.get(name)?.revision.clone())))
        .collect();
    let mut lagging = Vec::new();
    let mut fine = Vec::new();
    match health::lagging(policies) {
        Some(why) => lagging.push(format!("admission policies: {why}")),
        None => fine.push(match policies.expectation.expected {
            Some(Path::Policy) => String::from("the compiled admission policies are at the live revisions"),
            _ => String::from("no compiled admission policy acts with another revision"),
        }),
    }
    match replicas {
        Replicas::NotChecked => fine.push(String::from(
            "replicas not checked (no injector Deployment given: --deployment \"\")",
        )),
        Replicas::Unreadable(why) => lagging.push(format!("replicas: {why}")),
        Replicas::Read { deployment, ready } if ready.is_empty() => {
            if policies.expectation.expected == Some(Path::Policy) {
                fine.push(format!(
                    "no Ready replica of Deployment {deployment}: the compiled policies inject without one"
                ));
            } else {
                lagging.push(format!(
                    "no Ready replica of Deployment {deployment} serves the webhook: new Pods would be refused"
                ));
            }
        }
        Replicas::Read { deployment, ready } => {
            let mut behind = Vec::new();
            for replica in ready {
                match &replica.shown {
                    Err(why) => behind.push(format!("{}: {why}", replica.name)),
                    Ok(shown) if *shown != want => behind.push(format!("{}: {}", replica.name, differs(shown, &want))),
                    Ok(_) => {}
                }
            }
            if behind.is_empty() {
                let names: Vec<&str> = ready.iter().map(|r| r.name.as_str()).collect();
                fine.push(format!(
                    "every Ready replica of Deployment {deployment} ({}) injects with the live revisions",
                    names.join(", ")
                ));
            } else {
                lagging.push(format!(
                    "replicas of Deployment {deployment} not yet reloaded: {}",
                    behind.join("; ")
                ));
            }
        }
    }
    InStep {
        ready: lagging.is_empty(),
        because: if lagging.is_empty() { fine } else { lagging },
    }
}

/// What a server-side dry run of a workload's Pod template came back with: what a Pod it
/// creates now would get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Injected {
        template: String,
        revision: String,
    },
    NotInjected,
    /// Refused at admission, with the API server's words.
    Refused(String),
    /// The dry run is not permitted (RBAC: `create` on Pods): not checked.
    NotPermitted(String),
}

/// Whether the Pods the workloads (named) would create now get the live revisions, from
/// a dry run of each one's Pod template: the last word on where a template is served (the
/// API server applies a changed admission policy a moment after it is written).
pub fn judge_probes(live: &TemplateSet, probes: &[(String, Probe)]) -> InStep {
    let mut lagging = Vec::new();
    let mut fine = Vec::new();
    for (workload, probe) in probes {
        match probe {
            Probe::Injected { template, revision } if is_stale(template, revision, live) => {
                let live = live.get(template).map_or("(template removed)", |t| t.revision.as_str());
                lagging.push(format!(
                    "a Pod {workload} creates now gets template `{template}` revision {revision}, live {live}: the live one is not served there yet"
                ));
            }
            Probe::Refused(why) => lagging.push(format!("a Pod {workload} creates now is refused: {why}")),
            Probe::NotPermitted(why) => fine.push(format!(
                "what a Pod {workload} creates now gets is not checked (no dry run allowed: {why})"
            )),
            Probe::Injected { .. } | Probe::NotInjected => {}
        }
    }
    let checked = probes
        .iter()
        .filter(|(_, p)| !matches!(p, Probe::NotPermitted(_)))
        .count();
    if checked > 0 {
        fine.insert(
            0,
            format!("a Pod each of {checked} workload(s) creates now gets the live revision (server-side dry run)"),
        );
    }
    InStep {
        ready: lagging.is_empty(),
        because: if lagging.is_empty() { fine } else { lagging },
    }
}

impl InStep {
    /// Both verdicts: ready when both are; what lags of either, else what both rest on.
    pub fn and(self, other: InStep) -> InStep {
        let because = match (self.ready, other.ready) {
            (true, true) => [self.because, other.because].concat(),
            (true, false) => other.because,
            (false, true) => self.because,
            (false, false) => [self.because, other.because].concat(),
        };
        InStep {
            ready: self.ready && other.ready,
            because,
        }
    }
}

/// How the revisions a replica shows differ from the live ones.
fn differs(shown: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> String {
    let mut parts = Vec::new();
    for (template, revision) in want {
        match shown.get(template) {
            Some(found) if found == revision => {}
            Some(found) => parts.push(format!("`{template}` at {found}, live {revision}")),
            None => parts.push(format!("no `{template}` (live {revision})")),
        }
    }
    for template in shown.keys().filter(|t| !want.contains_key(*t)) {
        parts.push(format!("`{template}`, which the ConfigMap no longer has"));
    }
    parts.join(", ")
}

/// The template revisions a replica's `/metrics` text shows, or why none are shown.
pub fn shown_revisions(metrics: &str) -> Shown {
    let mut out = BTreeMap::new();
    let mut registered = false;
    for line in metrics.lines() {
        if line.starts_with(&format!("# TYPE {REVISION_METRIC} ")) {
            registered = true;
        }
        let Some(labels) = line
            .strip_prefix(REVISION_METRIC)
            .and_then(|rest| rest.strip_prefix('{'))
            .and_then(|rest| rest.split_once('}'))
            .filter(|(_, value)| value.trim() == "1")
            .map(|(labels, _)| labels)
        else {
            continue;
        };
        let labels = parse_labels(labels);
        if let (Some(template), Some(revision)) = (labels.get("template"), labels.get("revision")) {
            out.insert(template.clone(), revision.clone());
        }
    }
    if out.is_empty() && !registered {
        return Err(format!(
            "its /metrics show no {REVISION_METRIC} (an injector version without it)"
        ));
    }
    Ok(out)
}

/// `k="v",k2="v2"` → map (values with `\"` and `\\` unescaped).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((index, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => {
                    end = index + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

#[cfg(test)]
mod tests;
