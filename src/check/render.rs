//! The report as text: one line per check, a paragraph per Pod, one per stale workload,
//! one per workload with Pods that escaped injection, one per drifted Pod, then the result. `-o json` is the report's serde form instead.

use std::fmt::Write as _;

use super::Report;
use super::report::{Call, NamespaceLabels, PathReport, PodReport, PodSecurityReport, Verdict};
use crate::cluster::health::Status;
use crate::cluster::injection::VALIDATING;
use crate::policies::Path;
use crate::template::pod_security::{Level, Mode};

fn status(status: Status) -> &'static str {
    match status {
        Status::Ok => "[ok]  ",
        Status::Warn => "[warn]",
        Status::Fail => "[FAIL]",
    }
}

fn verdict(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Inject => "would be injected",
        Verdict::Skip => "would not be injected",
        Verdict::Deny => "would be DENIED",
        Verdict::Unknown => "cannot tell",
    }
}

fn pod(out: &mut String, report: &PodReport) {
    let rule = serde_json::to_value(report.rule)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let _ = writeln!(out, "  {}: {} [rule: {rule}]", report.subject, verdict(report.verdict));
    let _ = writeln!(out, "      why: {}", report.reason);
    if let Some(template) = &report.template {
        let mut line = format!("template `{}` revision {}", template.name, template.revision);
        if template.stale {
            let live = template.live_revision.as_deref().unwrap_or("?");
            let _ = write!(line, " (STALE: the live template is {live})");
        }
        let _ = writeln!(out, "      {line}");
    }
    if !report.adds.is_empty() {
        let _ = writeln!(out, "      adds: {}", report.adds.join(", "));
    }
    for line in &report.resources {
        let _ = writeln!(out, "      {line}");
    }
    for value in &report.values {
        let _ = writeln!(out, "      value: {value}");
    }
    if let Some(security) = &report.pod_security {
        pod_security(out, security);
    }
    for asked in &report.overrides {
        let verdict = if asked.applied { "applied" } else { "REFUSED" };
        let _ = writeln!(
            out,
            "      override {}={:?}: {verdict}: {}",
            asked.name, asked.value, asked.detail
        );
    }
    if let Some(path) = &report.path {
        let _ = writeln!(out, "      path: {}", path_line(path));
    }
    for hook in &report.webhooks {
        let call = match hook.call {
            Call::Called => "called",
            Call::NotCalled => "not called",
            Call::Error => "ERROR",
        };
        let _ = writeln!(out, "      webhook {}: {call}: {}", hook.name, hook.reason);
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "      warning: {warning}");
    }
    for difference in &report.drift {
        let _ = writeln!(out, "      DRIFT: {difference}");
    }
}

/// The namespace's Pod Security modes and what the template's additions do to them: one
/// line when nothing is broken, else each broken mode with its fields (a mode at the level
/// and version of one above is not listed twice).
fn pod_security(out: &mut String, report: &PodSecurityReport) {
    let namespace = &report.namespace;
    let asks = match report.labels {
        NamespaceLabels::Unknown => {
            format!("namespace `{namespace}` is not declared in the file (its labels are the cluster's)")
        }
        NamespaceLabels::NotFound => {
            format!("namespace `{namespace}` is not found (the Pod Security labels it is created with decide)")
        }
        NamespaceLabels::Known
            if report
                .modes
                .iter()
                .all(|m| !m.policy.labelled && m.policy.unreadable.is_empty()) =>
        {
            format!(
                "namespace `{namespace}` sets no Pod Security label (enforce privileged, the API server's default unless its AdmissionConfiguration sets another)"
            )
        }
        NamespaceLabels::Known => {
            let modes: Vec<String> = report
                .modes
                .iter()
                .map(|m| match m.policy.labelled {
                    true => format!("{} {}", m.policy.mode, m.policy.applied),
                    false => format!("{} not set", m.policy.mode),
                })
                .collect();
            format!("namespace `{namespace}`: {}", modes.join(", "))
        }
    };
    let meets = match report.meets {
        Level::Restricted => String::from("restricted"),
        Level::Baseline => String::from("baseline, not restricted"),
        Level::Privileged => String::from("neither baseline nor restricted"),
    };
    let _ = writeln!(
        out,
        "      pod security: {asks}; what template `{}` adds meets {meets}",
        report.template
    );
    for mode in &report.modes {
        for unreadable in &mode.policy.unreadable {
            let _ = writeln!(out, "      pod security: {unreadable}");
        }
    }
    let mut listed = Vec::new();
    for mode in report.modes.iter().filter(|m| !m.met) {
        let does = match mode.policy.mode {
            Mode::Enforce => "the API server refuses the injected Pod",
            Mode::Warn => "the API server warns whoever creates it",
            Mode::Audit => "the API server notes it in its audit log",
        };
        let applied = mode.policy.applied;
        let again = listed.contains(&applied);
        let _ = writeln!(
            out,
            "      pod security: it breaks {} {applied}: {does}{}",
            mode.policy.mode,
            if again { " (the fields above)" } else { ":" }
        );
        if !again {
            for finding in &mode.findings {
                let _ = writeln!(out, "        {finding}");
            }
            listed.push(applied);
        }
    }
}

/// `policy NAME (binding NAME)`, `validating policy NAME (binding NAME) denies it`, or
/// `webhook, since WHY`.
fn path_line(path: &PathReport) -> String {
    match path.via {
        Path::Webhook => format!("webhook, since {}", path.reason),
        Path::Policy => {
            let policy = path.policy.as_deref().unwrap_or_default();
            let binding = path.binding.as_deref().unwrap_or_default();
            let mut line = if path.kind == Some(VALIDATING) {
                format!("validating policy {policy} (binding {binding}) denies it")
            } else {
                format!("policy {policy} (binding {binding})")
            };
            if !path.reason.is_empty() {
                let _ = write!(line, "; {}", path.reason);
            }
            line
        }
    }
}

/// The whole report as text.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    match &report.offline {
        Some(unknown) => {
            let _ = writeln!(out, "Offline: {unknown}.");
        }
        None => {
            let _ = writeln!(out, "Installation (namespace {})", report.namespace);
            for check in &report.checks {
                let _ = writeln!(out, "  {} {}: {}", status(check.status), check.check, check.message);
            }
        }
    }
    if !report.unreadable.is_empty() {
        let _ = writeln!(out, "\nDocuments not explained (`inject` refuses them too)");
        for why in &report.unreadable {
            let _ = writeln!(out, "  {why}");
        }
    }
    if report.offline.is_some() && report.pods.is_empty() {
        let _ = writeln!(
            out,
            "\nPods\n  none: the file holds no Pod and no workload with a Pod template"
        );
    }
    if !report.pods.is_empty() {
        let _ = writeln!(out, "\nPods");
        for report in &report.pods {
            pod(&mut out, report);
        }
    }
    if let Some(groups) = report.stale.as_ref().filter(|g| !g.is_empty()) {
        let _ = writeln!(out, "\nStale sidecars");
        for group in groups {
            let live = group.live_revision.as_deref().unwrap_or("(template removed)");
            let _ = writeln!(
                out,
                "  {}: {} Pod(s) on template `{}` revision {}, live {live}",
                group.workload(),
                group.pods.len(),
                group.template,
                group.revisions.join(", ")
            );
            let _ = writeln!(out, "      pods: {}", group.pods.join(", "));
            let _ = writeln!(out, "      fix: {}", group.fix);
        }
    }
    if let Some(groups) = report.missing.as_ref().filter(|g| !g.is_empty()) {
        let _ = writeln!(out, "\nOpted-in Pods without the sidecar");
        for group in groups {
            let _ = writeln!(out, "  {}: {} Pod(s)", group.workload(), group.pods.len());
            let _ = writeln!(out, "      pods: {}", group.pods.join(", "));
            for missed in &group.reasons {
                let _ = writeln!(out, "      why ({} Pod(s)): {}", missed.pods, missed.detail);
            }
            let _ = writeln!(out, "      fix: {}", group.fix);
        }
    }
    if let Some(drifted) = report.drift.as_ref().filter(|d| !d.is_empty()) {
        let _ = writeln!(out, "\nSidecar drift (at the live revision, changed after injection)");
        for pod in drifted {
            let of = pod.workload.as_ref().map(|w| format!(" of {w}")).unwrap_or_default();
            let _ = writeln!(
                out,
                "  Pod {}/{}{of}: template `{}` revision {}",
                pod.namespace, pod.name, pod.template, pod.revision
            );
            for difference in &pod.differences {
                let _ = writeln!(out, "      {difference}");
            }
            if let Some(why) = &pod.unknown {
                let _ = writeln!(out, "      not compared: {why}");
            }
        }
    }
    let failed = report.checks.iter().filter(|c| c.status == Status::Fail).count();
    let warned = report.checks.iter().filter(|c| c.status == Status::Warn).count();
    let denied = report.pods.iter().filter(|p| p.is_problem()).count();
    let by_pod_security = report
        .pods
        .iter()
        .filter(|p| p.verdict == Verdict::Inject && p.refused_by_pod_security())
        .count();
    let denied = match by_pod_security {
        0 => format!("{denied} Pod(s) would be denied"),
        n => format!("{denied} Pod(s) would be denied, {n} of them by Pod Security once injected"),
    };
    let result = if report.healthy { "healthy" } else { "UNHEALTHY" };
    let unreadable = match report.unreadable.len() {
        0 => String::new(),
        n => format!(", {n} document(s) not explained"),
    };
    let _ = if report.offline.is_some() {
        writeln!(out, "\nResult: {result} ({denied}{unreadable})")
    } else {
        writeln!(
            out,
            "\nResult: {result} ({failed} check(s) failed, {warned} warning(s), {denied}{unreadable})"
        )
    };
    out
}
