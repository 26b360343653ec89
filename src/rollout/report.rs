//! What a rollout did, for `-o json` (its serde form) and as text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::in_step::InStep;
use super::plan::{Left, StalePods, WorkloadRef};

/// How one workload's part of the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ended {
    /// `--dry-run`: it would be restarted.
    Planned,
    /// Restarted; every Pod Ready at the live revision.
    Completed,
    /// Restarted; its controller says it will not complete, or the restart was refused.
    Failed,
    /// Restarted; not done within `--timeout`.
    TimedOut,
    /// Not restarted: a workload before it failed (or the templates never got in step).
    NotStarted,
}

/// One workload of the plan and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    #[serde(flatten)]
    pub workload: WorkloadRef,
    pub stale: Vec<StalePods>,
    pub result: Ended,
    /// From the restart to the end, for a restarted one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Why it failed, timed out or was not started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Outcome {
    pub fn failed(&self) -> bool {
        matches!(self.result, Ended::Failed | Ended::TimedOut)
    }
}

/// Everything a rollout found and did. `-o json` prints exactly this.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub dry_run: bool,
    /// `namespace apps`, or `every namespace`.
    pub scope: String,
    /// The live templates: name → revision.
    pub templates: BTreeMap<String, String>,
    /// Whether the live templates were in step where they are served (last read).
    pub in_step: InStep,
    /// How long the run waited for them to be.
    pub waited_seconds: f64,
    /// The workloads to restart, in the order taken, each with its result.
    pub workloads: Vec<Outcome>,
    /// The workloads with stale Pods that rollout leaves alone, each with what to do.
    pub left: Vec<Left>,
    /// False when a rollout failed or timed out, or the templates never got in step; the
    /// exit code follows it.
    pub healthy: bool,
}

/// `N Pod(s) on `template` revision OLD -> LIVE`, for each template.
pub fn stale_line(stale: &[StalePods]) -> String {
    stale
        .iter()
        .map(|s| {
            format!(
                "{} Pod(s) on `{}` revision {} -> {}",
                s.pods.len(),
                s.template,
                s.revisions.join(", "),
                s.live_revision.as_deref().unwrap_or("(template removed)")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The line of one workload's outcome.
pub fn outcome_line(outcome: &Outcome) -> String {
    let seconds = outcome.seconds.map(|s| format!("{s:.1} s")).unwrap_or_default();
    let reason = outcome.reason.as_deref().unwrap_or_default();
    let what = match outcome.result {
        Ended::Planned => String::from("would be restarted"),
        Ended::Completed => format!("rolled out in {seconds}"),
        Ended::Failed => format!("FAILED after {seconds}: {reason}"),
        Ended::TimedOut => format!("TIMED OUT after {seconds}: {reason}"),
        Ended::NotStarted => format!("not started: {reason}"),
    };
    format!("  {}: {}: {what}", outcome.workload, stale_line(&outcome.stale))
}

/// The in-step line.
pub fn in_step_line(in_step: &InStep, waited: f64) -> String {
    let verdict = if in_step.ready { "in step" } else { "NOT in step" };
    let waited = if waited > 0.0 {
        format!(" (after {waited:.1} s)")
    } else {
        String::new()
    };
    format!("Live templates {verdict}{waited}: {}", in_step.because.join("; "))
}

/// The whole report as text.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let templates: Vec<String> = report
        .templates
        .iter()
        .map(|(name, revision)| format!("`{name}` {revision}"))
        .collect();
    let _ = writeln!(out, "Templates: {} ({})", templates.join(", "), report.scope);
    let _ = writeln!(out, "{}", in_step_line(&report.in_step, report.waited_seconds));
    if report.workloads.is_empty() {
        let _ = writeln!(
            out,
            "\nNothing to restart: no Deployment, StatefulSet or DaemonSet runs a stale sidecar."
        );
    } else {
        let heading = if report.dry_run {
            "Would restart, in this order"
        } else {
            "Restarted, in this order"
        };
        let _ = writeln!(out, "\n{heading}:");
        for outcome in &report.workloads {
            let _ = writeln!(out, "{}", outcome_line(outcome));
        }
    }
    if !report.left.is_empty() {
        let _ = writeln!(out, "\nLeft to you (rollout does not restart these):");
        for left in &report.left {
            let _ = writeln!(out, "  {}: {}: {}", left.workload, stale_line(&left.stale), left.reason);
            let _ = writeln!(out, "      what to do: {}", left.fix);
        }
    }
    let count = |result: Ended| report.workloads.iter().filter(|o| o.result == result).count();
    let summary = if report.dry_run {
        format!("dry run, nothing changed: {} to restart", count(Ended::Planned))
    } else {
        format!(
            "{} rolled out, {} failed, {} timed out, {} not started",
            count(Ended::Completed),
            count(Ended::Failed),
            count(Ended::TimedOut),
            count(Ended::NotStarted)
        )
    };
    let result = if report.healthy { "ok" } else { "FAILED" };
    let _ = writeln!(out, "\nResult: {result} ({summary}; {} left to you)", report.left.len());
    out
}
