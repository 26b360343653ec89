//! The QoS class as the API server computes it (`ComputePodQOS`), and what keeping it asks
//! of each container an injection adds: a Guaranteed Pod's get requests equal to their
//! limits, a BestEffort Pod's go in without cpu and memory, a Burstable Pod's as they are.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::lists::{Amounts, Lists};
use crate::inject::InjectError;
use crate::template::quantity::Quantity;
use crate::template::without_qos_resources;

/// The resources a QoS class is computed from.
pub const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    BestEffort,
    Burstable,
    Guaranteed,
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QosClass::BestEffort => "BestEffort",
            QosClass::Burstable => "Burstable",
            QosClass::Guaranteed => "Guaranteed",
        })
    }
}

/// Adds the cpu and memory of `from` that are above zero (the only ones counted) into
/// `sum`; whether both were there.
fn counted(sum: &mut Amounts, from: &Amounts) -> bool {
    let mut found = 0;
    for resource in QOS_RESOURCES {
        if let Some(amount) = from.get(resource).filter(|a| a.nanos() > 0) {
            sum.entry(resource.to_string())
                .and_modify(|s| *s = s.plus(*amount))
                .or_insert(*amount);
            found += 1;
        }
    }
    found == QOS_RESOURCES.len()
}

/// The class of the counted requests and limits; `limited` false when a container (or the
/// Pod level) has limits without both cpu and memory.
fn class(requests: &Amounts, limits: &Amounts, limited: bool) -> QosClass {
    if requests.is_empty() && limits.is_empty() {
        QosClass::BestEffort
    } else if limited && requests.len() == limits.len() && requests.iter().all(|(r, q)| limits.get(r) == Some(q)) {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The class by the Pod level, which the API server takes whenever `spec.resources` is
/// set (even empty: then BestEffort, whatever the containers ask): `requests` as
/// defaulted. Limits that name neither cpu nor memory leave it BestEffort or Burstable.
pub fn of_pod_level(requests: &Amounts, limits: &Amounts) -> QosClass {
    let (mut counted_requests, mut counted_limits) = (Amounts::new(), Amounts::new());
    counted(&mut counted_requests, requests);
    let both = counted(&mut counted_limits, limits);
    class(&counted_requests, &counted_limits, limits.is_empty() || both)
}

/// The class by every container of the Pod, init containers included.
pub fn of_containers<'l>(containers: impl IntoIterator<Item = &'l Lists>) -> QosClass {
    let (mut requests, mut limits) = (Amounts::new(), Amounts::new());
    let mut limited = true;
    for container in containers {
        counted(&mut requests, &container.requests);
        limited &= counted(&mut limits, &container.limits);
    }
    class(&requests, &limits, limited)
}

/// One change to an added container's resources that keeps the Pod's QoS class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QosEdit {
    /// Guaranteed: the request set to the limit.
    RequestToLimit {
        container: String,
        resource: &'static str,
        limit: String,
    },
    /// Guaranteed: the limit set to the request.
    LimitToRequest {
        container: String,
        resource: &'static str,
        request: String,
    },
    /// BestEffort: the container goes in without cpu and memory.
    LeftOut { container: String },
}

impl fmt::Display for QosEdit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QosEdit::RequestToLimit {
                container,
                resource,
                limit,
            } => write!(f, "{container}'s {resource} request set to its limit {limit}"),
            QosEdit::LimitToRequest {
                container,
                resource,
                request,
            } => write!(f, "{container}'s {resource} limit set to its request {request}"),
            QosEdit::LeftOut { container } => {
                write!(f, "{container} goes in without its cpu and memory requests and limits")
            }
        }
    }
}

/// An added container's resources changed for the class, and what changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub resources: Option<ResourceRequirements>,
    pub edits: Vec<QosEdit>,
}

fn same(a: &K8sQuantity, b: &K8sQuantity) -> bool {
    matches!((Quantity::parse(&a.0), Quantity::parse(&b.0)), (Ok(a), Ok(b)) if a == b)
}

/// `container` as the Pod of `class` gets it, or `None` when it goes in as it is.
/// `by_containers`: the class is the containers' (not the Pod level's), so that a
/// Guaranteed Pod cannot take a container without a cpu or memory request or limit.
pub fn keep(
    class: QosClass,
    by_containers: bool,
    template: &str,
    container: &Container,
) -> Result<Option<Kept>, InjectError> {
    let mut resources = container.resources.clone().unwrap_or_default();
    let mut edits = Vec::new();
    match class {
        QosClass::Burstable => return Ok(None),
        QosClass::BestEffort => {
            return Ok(without_qos_resources(&resources).map(|resources| Kept {
                resources,
                edits: vec![QosEdit::LeftOut {
                    container: container.name.clone(),
                }],
            }));
        }
        QosClass::Guaranteed => {
            for resource in QOS_RESOURCES {
                let get = |map: &Option<BTreeMap<String, K8sQuantity>>| map.as_ref()?.get(resource).cloned();
                match (get(&resources.requests), get(&resources.limits)) {
                    // A limit alone: the API server sets the request to it.
                    (Some(request), Some(limit)) if same(&request, &limit) => {}
                    (None, Some(_)) => {}
                    (Some(_), Some(limit)) => {
                        edits.push(QosEdit::RequestToLimit {
                            container: container.name.clone(),
                            resource,
                            limit: limit.0.clone(),
                        });
                        resources
                            .requests
                            .get_or_insert_default()
                            .insert(resource.to_string(), limit);
                    }
                    (Some(request), None) => {
                        edits.push(QosEdit::LimitToRequest {
                            container: container.name.clone(),
                            resource,
                            request: request.0.clone(),
                        });
                        resources
                            .limits
                            .get_or_insert_default()
                            .insert(resource.to_string(), request);
                    }
                    (None, None) if by_containers => {
                        return Err(InjectError::GuaranteedLost {
                            template: template.to_string(),
                            container: container.name.clone(),
                            resource,
                        });
                    }
                    (None, None) => {}
                }
            }
        }
    }
    if edits.is_empty() {
        return Ok(None);
    }
    for map in [&mut resources.requests, &mut resources.limits] {
        if map.as_ref().is_some_and(BTreeMap::is_empty) {
            *map = None;
        }
    }
    let resources = (resources != ResourceRequirements::default()).then_some(resources);
    Ok(Some(Kept { resources, edits }))
}
