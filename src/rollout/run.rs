//! The run: the plan, the wait until the live templates are in step where they are
//! served, then each workload restarted and waited for, at most `max_parallel` at once,
//! none started after a failure. [`roll`], one workload restarted and waited for, is what
//! the automatic mode does too.

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::cluster;
use super::error::RolloutError;
use super::in_step::InStep;
use super::plan::{self, Plan, Target};
use super::progress::{self, Progress};
use super::report::{Ended, Outcome, Report};
use crate::template::TemplateSet;

/// The plain settings the `rollout` flags map to.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A namespace, or `None` for every namespace.
    pub scope: Option<String>,
    /// A label selector the workloads must match (`--selector`).
    pub selector: Option<String>,
    pub dry_run: bool,
    /// Workloads rolling at once (at least 1).
    pub max_parallel: usize,
    /// How long each workload may take to roll out, and the templates to get in step.
    pub timeout: Duration,
    /// Where the injector's ConfigMap and Deployment are.
    pub injector_namespace: String,
    /// The injector's Deployment, whose replicas must have reloaded; `None`: not checked.
    pub deployment: Option<String>,
    /// How often progress is read.
    pub poll: Duration,
}

/// What the run tells as it goes (text output prints each).
#[derive(Debug)]
pub enum Step<'a> {
    /// The templates are not in step yet: waiting, and why.
    Waiting(&'a InStep),
    Started(&'a Target),
    Finished(&'a Outcome),
}

/// The live templates and the plan made against them.
struct Planned {
    live: TemplateSet,
    plan: Plan,
}

async fn planned(client: &kube::Client, settings: &Settings) -> Result<Planned, RolloutError> {
    let live = cluster::live_templates(client, &settings.injector_namespace)
        .await
        .map_err(RolloutError::Templates)?;
    let scope = settings.scope.as_deref();
    let groups = crate::cluster::stale_groups(client, scope, &live).await?;
    let objects = cluster::objects(client, &groups, scope, settings.selector.as_deref()).await?;
    let plan = plan::plan(&groups, &objects, settings.selector.is_none());
    Ok(Planned { live, plan })
}

/// Waits until the live templates are in step where they are served, at most `timeout`
/// (not at all for a dry run or when there is nothing to restart); the live set is read again on each try and the plan made again when it changed.
/// Returns the last verdict and the seconds waited.
async fn wait_in_step(
    client: &kube::Client,
    settings: &Settings,
    planned: &mut Planned,
    observe: &mut (dyn FnMut(Step<'_>) + Send),
) -> Result<(InStep, f64), RolloutError> {
    let started = Instant::now();
    let mut told = false;
    loop {
        let verdict = cluster::in_step(
            client,
            &settings.injector_namespace,
            settings.deployment.as_deref(),
            &planned.live,
            &planned.plan.restart,
        )
        .await;
        let waited = started.elapsed().as_secs_f64();
        // Nothing to restart, or only the plan asked for: the verdict as it is now.
        let now = settings.dry_run || planned.plan.restart.is_empty();
        if verdict.ready || now || started.elapsed() >= settings.timeout {
            return Ok((verdict, if told { waited } else { 0.0 }));
        }
        if !told {
            observe(Step::Waiting(&verdict));
            told = true;
        }
        tokio::time::sleep(settings.poll).await;
        let live = cluster::live_templates(client, &settings.injector_namespace)
            .await
            .map_err(RolloutError::Templates)?;
        if live != planned.live {
            *planned = self::planned(client, settings).await?;
        }
    }
}

/// Runs a rollout as `settings` say; `observe` hears each step as it happens.
pub async fn run(
    client: &kube::Client,
    settings: &Settings,
    observe: &mut (dyn FnMut(Step<'_>) + Send),
) -> Result<Report, RolloutError> {
    let mut planned = planned(client, settings).await?;
    let (in_step, waited) = wait_in_step(client, settings, &mut planned, observe).await?;
    let Planned { live, plan } = planned;
    let outcome = |target: &Target, result, reason: Option<String>| Outcome {
        workload: target.workload.clone(),
        stale: target.stale.clone(),
        result,
        seconds: None,
        reason,
    };
    let mut workloads = Vec::new();
    if settings.dry_run {
        workloads = plan.restart.iter().map(|t| outcome(t, Ended::Planned, None)).collect();
    } else if !in_step.ready {
        let why = format!(
            "the live templates were not in step within {} s, so no restarted Pod would be sure to get them",
            settings.timeout.as_secs()
        );
        workloads = plan
            .restart
            .iter()
            .map(|t| outcome(t, Ended::NotStarted, Some(why.clone())))
            .collect();
    } else {
        let mut ended: Vec<Option<Outcome>> = vec![None; plan.restart.len()];
        let mut in_flight = FuturesUnordered::new();
        let mut next = 0;
        let mut failed = false;
        loop {
            while !failed && next < plan.restart.len() && in_flight.len() < settings.max_parallel.max(1) {
                let target = &plan.restart[next];
                observe(Step::Started(target));
                let index = next;
                let live = &live;
                in_flight
                    .push(async move { (index, roll(client, target, live, settings.timeout, settings.poll).await) });
                next += 1;
            }
            let Some((index, done)) = in_flight.next().await else {
                break;
            };
            observe(Step::Finished(&done));
            failed |= done.failed();
            ended[index] = Some(done);
        }
        let first_failure = ended
            .iter()
            .flatten()
            .find(|o| o.failed())
            .map(|o| o.workload.to_string())
            .unwrap_or_default();
        for (target, ended) in plan.restart.iter().zip(ended) {
            workloads.push(ended.unwrap_or_else(|| {
                let why = format!("the rollout of {first_failure} failed before it");
                outcome(target, Ended::NotStarted, Some(why))
            }));
        }
    }
    let healthy = (in_step.ready || settings.dry_run || workloads.is_empty()) && !workloads.iter().any(Outcome::failed);
    Ok(Report {
        dry_run: settings.dry_run,
        scope: settings
            .scope
            .as_ref()
            .map_or_else(|| String::from("every namespace"), |ns| format!("namespace {ns}")),
        templates: live
            .names()
            .filter_map(|name| Some((name.to_string(), live.get(name)?.revision.clone())))
            .collect(),
        in_step,
        waited_seconds: waited,
        workloads,
        left: plan.left,
        healthy,
    })
}

/// Restarts one workload and waits, at most `timeout`, until its rollout is done
/// ([`progress::progress`]) or failed.
pub async fn roll(
    client: &kube::Client,
    target: &Target,
    live: &TemplateSet,
    timeout: Duration,
    poll: Duration,
) -> Outcome {
    let started = Instant::now();
    let ended = |result, reason: Option<String>| Outcome {
        workload: target.workload.clone(),
        stale: target.stale.clone(),
        result,
        seconds: Some(started.elapsed().as_secs_f64()),
        reason,
    };
    let (namespace, name) = (&target.workload.namespace, &target.workload.name);
    let generation = match cluster::restart(client, target.kind, namespace, name).await {
        Ok(generation) => generation,
        Err(err) => return ended(Ended::Failed, Some(err.to_string())),
    };
    loop {
        let read = async {
            let object = cluster::read(client, target.kind, namespace, name)
                .await?
                .ok_or_else(|| RolloutError::Gone(target.workload.to_string()))?;
            let pods = cluster::pods_of(client, &object).await?;
            Ok::<_, RolloutError>(progress::progress(&object, generation, &pods, live))
        };
        let last = match read.await {
            Ok(Progress::Done) => return ended(Ended::Completed, None),
            Ok(Progress::Failed(why)) => return ended(Ended::Failed, Some(why)),
            Ok(Progress::Waiting(why)) => why,
            Err(err @ RolloutError::Gone(_)) => return ended(Ended::Failed, Some(err.to_string())),
            // A failed read is retried: the rollout goes on without us.
            Err(err) => err.to_string(),
        };
        if started.elapsed() >= timeout {
            return ended(Ended::TimedOut, Some(last));
        }
        tokio::time::sleep(poll).await;
    }
}
