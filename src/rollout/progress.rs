//! What counts as done for a restarted workload: its controller has seen the restart and
//! rolled every replica (as `kubectl rollout status` judges it), and every Pod it has now
//! is Ready and carries the live revision of its template. Pure: the workload and its
//! Pods, read after the restart, come in as data.

use k8s_openapi::api::core::v1::Pod;

use super::plan::Object;
use crate::stale::{injected, is_stale};
use crate::template::TemplateSet;

/// Where a restarted workload's rollout is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Done,
    /// Not yet, and what it waits for.
    Waiting(String),
    /// It will not complete: its controller said so.
    Failed(String),
}

/// The progress of `object`, restarted at `generation`, whose Pods (not being deleted)
/// are `pods`.
pub fn progress(object: &Object, generation: i64, pods: &[Pod], live: &TemplateSet) -> Progress {
    let controller = match object {
        Object::Deployment(d) => {
            let status = d.status.clone().unwrap_or_default();
            let failed = status.conditions.iter().flatten().find(|c| {
                c.type_ == "Progressing"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
            });
            if let Some(condition) = failed {
                return Progress::Failed(format!(
                    "its progress deadline passed ({})",
                    condition.message.as_deref().unwrap_or("ProgressDeadlineExceeded")
                ));
            }
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let updated = status.updated_replicas.unwrap_or(0);
            let total = status.replicas.unwrap_or(0);
            let available = status.available_replicas.unwrap_or(0);
            seen(status.observed_generation, generation).or_else(|| {
                if updated < want {
                    Some(format!("{updated} of {want} Pod(s) updated"))
                } else if total > updated {
                    Some(format!("{} old Pod(s) still to go", total - updated))
                } else if available < updated {
                    Some(format!("{available} of {updated} updated Pod(s) available"))
                } else {
                    None
                }
            })
        }
        Object::StatefulSet(s) => {
            let status = s.status.clone().unwrap_or_default();
            let want = s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let updated = status.updated_replicas.unwrap_or(0);
            let ready = status.ready_replicas.unwrap_or(0);
            seen(status.observed_generation, generation).or_else(|| {
                if updated < want || status.update_revision != status.current_revision {
                    Some(format!("{updated} of {want} Pod(s) updated"))
                } else if ready < want {
                    Some(format!("{ready} of {want} Pod(s) Ready"))
                } else {
                    None
                }
            })
        }
        Object::DaemonSet(d) => {
            let status = d.status.clone().unwrap_or_default();
            let want = status.desired_number_scheduled;
            let updated = status.updated_number_scheduled.unwrap_or(0);
            let available = status.number_available.unwrap_or(0);
            seen(status.observed_generation, generation).or_else(|| {
                if updated < want {
                    Some(format!("{updated} of {want} Pod(s) updated"))
                } else if available < want {
                    Some(format!("{available} of {want} updated Pod(s) available"))
                } else {
                    None
                }
            })
        }
    };
    let stale = |pod: &Pod| injected(&pod.metadata).filter(|(template, revision)| is_stale(template, revision, live));
    // A new Pod that is not Ready says most about a rollout that does not finish.
    let unready = pods
        .iter()
        .filter_map(|pod| Some((stale(pod).is_some(), pod, not_ready(pod)?)))
        .min_by_key(|(old, _, _)| *old)
        .map(|(_, pod, why)| {
            format!(
                "Pod {} is not Ready: {why}",
                pod.metadata.name.as_deref().unwrap_or_default()
            )
        });
    if let Some(waiting) = controller {
        return Progress::Waiting(match unready {
            Some(pod) => format!("{waiting}; {pod}"),
            None => waiting,
        });
    }
    if let Some(pod) = unready {
        return Progress::Waiting(pod);
    }
    if let Some((pod, (template, revision))) = pods.iter().find_map(|pod| Some((pod, stale(pod)?))) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let live = live
            .get(&template)
            .map_or("(template removed)", |t| t.revision.as_str());
        return Progress::Waiting(format!(
            "Pod {name} carries template `{template}` revision {revision}, live {live}"
        ));
    }
    Progress::Done
}

/// Waiting, when the controller has not yet seen `generation`.
fn seen(observed: Option<i64>, generation: i64) -> Option<String> {
    (observed.unwrap_or(0) < generation).then(|| String::from("its controller has not seen the restart yet"))
}

/// Why a Pod is not Ready, from its status; `None` when it is.
pub fn not_ready(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    if conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True") {
        return None;
    }
    if let Some(unscheduled) = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        return Some(format!(
            "not scheduled: {}",
            unscheduled.message.as_deref().unwrap_or("no node")
        ));
    }
    let containers = status.into_iter().flat_map(|s| {
        s.init_container_statuses
            .iter()
            .flatten()
            .chain(s.container_statuses.iter().flatten())
    });
    let mut running = Vec::new();
    for container in containers {
        let state = container.state.as_ref();
        if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
            let reason = waiting.reason.as_deref().unwrap_or("waiting");
            let message = waiting.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
            return Some(format!("container {} {reason}{message}", container.name));
        }
        if let Some(terminated) = state.and_then(|s| s.terminated.as_ref())
            && terminated.exit_code != 0
        {
            return Some(format!(
                "container {} exited with code {}",
                container.name, terminated.exit_code
            ));
        }
        if state.and_then(|s| s.running.as_ref()).is_some() && !container.ready {
            running.push(container.name.clone());
        }
    }
    Some(match running.as_slice() {
        [] => format!("phase {}", status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending")),
        names => format!(
            "container(s) {} running but not Ready (their readiness probe fails, or a startup probe has not passed yet)",
            names.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests;
