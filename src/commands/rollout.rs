//! `envoy-injector rollout`: maps the flags onto [`Settings`], runs the rollout against
//! the current kubeconfig's cluster (as the user, as kubectl does) and prints the report;
//! each step is told on stderr as it happens. Returns whether it went well.

use std::io::Write;
use std::time::Duration;

use super::flags::non_empty;
use super::kubeconfig::{self, KubeconfigError};
use crate::cli::{RolloutArgs, RolloutOutput};
use envoy_injector::rollout::report::{self, Report};
use envoy_injector::rollout::{self, RolloutError, Settings, Step};

#[derive(Debug, thiserror::Error)]
pub enum RolloutCommandError {
    #[error(transparent)]
    NoKubeconfig(#[from] KubeconfigError),
    #[error("cannot use the kubeconfig: {0}")]
    Client(#[from] kube::Error),
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    #[error("cannot write the report: {0}")]
    Write(#[from] std::io::Error),
}

/// How often a rollout reads progress.
const POLL: Duration = Duration::from_secs(1);

/// The settings `args` ask for; `default_namespace` is the kubeconfig context's.
pub fn settings(args: &RolloutArgs, default_namespace: &str) -> Settings {
    Settings {
        scope: (!args.all_namespaces).then(|| args.namespace.clone().unwrap_or_else(|| default_namespace.to_string())),
        selector: args.selector.clone().filter(|s| !s.is_empty()),
        dry_run: args.dry_run,
        max_parallel: usize::from(args.max_parallel),
        timeout: args.timeout,
        injector_namespace: args.injector_namespace.clone(),
        deployment: non_empty(&args.deployment),
        poll: POLL,
    }
}

/// Tells one step on stderr.
fn tell(step: Step<'_>) {
    let line = match step {
        Step::Waiting(in_step) => format!(
            "waiting for the live templates to be in step: {}",
            in_step.because.join("; ")
        ),
        Step::Started(target) => format!("{}: restarting", target.workload),
        Step::Finished(outcome) => report::outcome_line(outcome).trim_start().to_string(),
    };
    eprintln!("{line}");
}

pub async fn run(args: RolloutArgs) -> Result<bool, RolloutCommandError> {
    kubeconfig::find()?;
    let client = kube::Client::try_default().await?;
    let settings = settings(&args, client.default_namespace());
    let report = rollout::run(&client, &settings, &mut tell).await?;
    print(&report, args.output)?;
    Ok(report.healthy)
}

fn print(report: &Report, output: RolloutOutput) -> Result<(), RolloutCommandError> {
    let text = match output {
        RolloutOutput::Text => report::text(report),
        // Plain data of strings, numbers and bools: serialising cannot fail.
        RolloutOutput::Json => serde_json::to_string_pretty(report).unwrap_or_default() + "\n",
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
