//! The resources part of one injection: the Pod's QoS class and how each added container
//! keeps it, then what the Pod level becomes.

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use serde_json::Value;

use super::aggregate::aggregate;
use super::lists::{Amounts, Lists};
use super::pod_level::{self, Defaulted, PodLevel};
use super::qos::{self, QosClass, QosEdit};
use crate::inject::InjectError;
use crate::inject::pod::Checked;

/// What an injection does to resources.
#[derive(Debug, Clone, PartialEq)]
pub struct Resourcing {
    /// The Pod's QoS class, which the injection keeps.
    pub qos: QosClass,
    /// The added containers whose resources change (by index in the template's init
    /// containers, then the sidecars), with their new resources.
    pub changed: Vec<(usize, Option<ResourceRequirements>)>,
    pub edits: Vec<QosEdit>,
    /// What the injection writes into `spec.resources`, when anything.
    pub pod_level: Option<PodLevel>,
    /// The Pod's own `spec.resources` as it wrote it (its `requests` and `limits`), when
    /// the injection changes it: what the status records for `uninject`.
    pub record: Option<Value>,
}

impl Resourcing {
    /// In words, a line each: every Pod-level value written and why, then the QoS class
    /// and what keeping it changed (`check` shows them).
    pub fn describe(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .pod_level
            .iter()
            .flat_map(|p| &p.changes)
            .map(ToString::to_string)
            .collect();
        let class = self.qos;
        match (class, self.edits.is_empty()) {
            (_, false) => lines.extend(self.edits.iter().map(|edit| format!("QoS {class} kept: {edit}"))),
            (QosClass::Guaranteed, true) => lines.push(format!(
                "QoS {class} kept: the added containers' cpu and memory requests equal their limits"
            )),
            (QosClass::BestEffort, true) => lines.push(format!(
                "QoS {class} kept: the added containers ask for no cpu or memory"
            )),
            (QosClass::Burstable, true) => lines.push(format!(
                "QoS {class} kept: the added containers' resources as the template sets them"
            )),
        }
        lines
    }
}

/// The resources part of injecting `inits` (the template's init containers) and
/// `sidecars` (as native sidecars when `native`) into the Pod of `view`, the containers as
/// this Pod gets them (overrides applied).
pub fn plan(
    view: &Checked<'_, '_>,
    template: &str,
    inits: &[&Container],
    sidecars: &[&Container],
    native: bool,
) -> Result<Resourcing, InjectError> {
    let mut regular = Vec::new();
    for (index, container) in view.containers.items().enumerate() {
        regular.push(Lists::of_pod(
            &container.resource_lists(&format!("spec.containers[{index}]"))?,
        ));
    }
    let mut pod_inits = Vec::new();
    for (index, container) in view.init_containers.items().enumerate() {
        let lists = Lists::of_pod(&container.resource_lists(&format!("spec.initContainers[{index}]"))?);
        pod_inits.push((container.restartable(), lists));
    }
    let before = aggregate(
        regular.iter().map(requests),
        pod_inits
            .iter()
            .map(|(restartable, lists)| (*restartable, &lists.requests)),
    );

    let pod = view.pod_resources()?;
    let defaulted = pod.as_ref().map(|pod| pod_level::defaulted(pod, &before));
    let qos = match &defaulted {
        Some(pod) => qos::of_pod_level(&Defaulted::amounts(&pod.requests), &Defaulted::amounts(&pod.limits)),
        None => qos::of_containers(regular.iter().chain(pod_inits.iter().map(|(_, lists)| lists))),
    };

    // Each added container as the Pod gets it: its resources changed for the class.
    let mut changed = Vec::new();
    let mut edits = Vec::new();
    let mut added_lists = Vec::new();
    for (index, container) in inits.iter().chain(sidecars).enumerate() {
        let kept = qos::keep(qos, defaulted.is_none(), template, container)?;
        let lists = match kept {
            Some(kept) => {
                let lists = Lists::of_template(kept.resources.as_ref());
                changed.push((index, kept.resources));
                edits.extend(kept.edits);
                lists
            }
            None => Lists::of_template(container.resources.as_ref()),
        };
        added_lists.push(lists);
    }

    let applies = pod.as_ref().is_some_and(|p| {
        [&p.requests, &p.limits]
            .iter()
            .any(|m| m.as_ref().is_some_and(|m| !m.is_empty()))
    });
    let pod_level = match (applies, &defaulted) {
        (true, Some(held)) => {
            let (init_lists, sidecar_lists) = added_lists.split_at(inits.len());
            let mut after_regular: Vec<&Amounts> = regular.iter().map(requests).collect();
            let mut after_inits: Vec<(bool, &Amounts)> = init_lists.iter().map(|l| (false, &l.requests)).collect();
            match native {
                true => after_inits.extend(sidecar_lists.iter().map(|l| (true, &l.requests))),
                false => after_regular.extend(sidecar_lists.iter().map(requests)),
            }
            after_inits.extend(
                pod_inits
                    .iter()
                    .map(|(restartable, lists)| (*restartable, &lists.requests)),
            );
            let after = aggregate(after_regular, after_inits);
            let sidecars_named: Vec<(&str, &Lists)> = sidecars.iter().map(name).zip(sidecar_lists).collect();
            let added_named: Vec<(&str, &Lists)> = inits
                .iter()
                .map(name)
                .zip(init_lists)
                .chain(sidecars_named.iter().copied())
                .collect();
            let changes = pod_level::raise(
                held,
                &before,
                &after,
                &sidecars_named,
                &added_named,
                qos == QosClass::Guaranteed,
            );
            (!changes.is_empty()).then(|| PodLevel {
                changes,
                has_requests: pod.as_ref().is_some_and(|p| p.requests.is_some()),
                has_limits: pod.as_ref().is_some_and(|p| p.limits.is_some()),
            })
        }
        _ => None,
    };
    let record = pod_level.as_ref().and_then(|_| view.pod_resources_json());
    Ok(Resourcing {
        qos,
        changed,
        edits,
        pod_level,
        record,
    })
}

fn requests(lists: &Lists) -> &Amounts {
    &lists.requests
}

fn name<'c>(container: &&'c Container) -> &'c str {
    container.name.as_str()
}
