//! The Pod-level `spec.resources` after an injection: its requests defaulted as the API
//! server defaults them, then each raised by what the added containers add to the
//! aggregate of container requests, each limit by what the sidecars may use, so that the
//! API server's checks still hold (the Pod's requests at least that aggregate and at most
//! its limits, each regular container's limit within the Pod's).

use std::collections::BTreeMap;
use std::fmt;

use super::lists::{Amounts, Lists};
use super::qos::QOS_RESOURCES;
use crate::inject::pod::ResourceLists;
use crate::template::quantity::Amount;

/// Where a Pod-level request the Pod does not write comes from, as the API server
/// defaults it (only when the Pod level has limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Default {
    /// cpu or memory: the aggregate of the containers' requests, when they ask for it.
    Aggregate,
    /// Otherwise (and hugepages always): the Pod-level limit.
    Limit,
}

/// A Pod-level value as the API server holds it: the Pod's own text, or its default.
#[derive(Debug, Clone)]
pub struct Held {
    pub amount: Amount,
    pub own: Option<String>,
    pub default: Option<Default>,
}

/// The Pod level as the API server holds it after defaulting.
#[derive(Debug, Clone, std::default::Default)]
pub struct Defaulted {
    pub requests: BTreeMap<String, Held>,
    pub limits: BTreeMap<String, Held>,
}

impl Defaulted {
    pub fn amounts(map: &BTreeMap<String, Held>) -> Amounts {
        map.iter().map(|(r, held)| (r.clone(), held.amount)).collect()
    }
}

/// The API server's defaulting of the Pod level (`defaultPodRequests`), given the
/// aggregate of the containers' requests: with limits, each of cpu and memory not
/// requested defaults to that aggregate where the containers ask for it, else to its
/// limit; hugepages to their limit.
pub fn defaulted(pod: &ResourceLists, aggregate: &Amounts) -> Defaulted {
    let own = |map: &Option<BTreeMap<String, crate::template::quantity::Quantity>>| -> BTreeMap<String, Held> {
        map.iter()
            .flatten()
            .map(|(resource, quantity)| {
                let held = Held {
                    amount: quantity.amount(),
                    own: Some(quantity.as_str().to_string()),
                    default: None,
                };
                (resource.clone(), held)
            })
            .collect()
    };
    let mut requests = own(&pod.requests);
    let limits = own(&pod.limits);
    if !limits.is_empty() {
        let default = |amount: Amount, from: Default| Held {
            amount,
            own: None,
            default: Some(from),
        };
        for resource in QOS_RESOURCES {
            if requests.contains_key(resource) {
                continue;
            }
            if let Some(sum) = aggregate.get(resource) {
                requests.insert(resource.to_string(), default(*sum, Default::Aggregate));
            } else if let Some(limit) = limits.get(resource) {
                requests.insert(resource.to_string(), default(limit.amount, Default::Limit));
            }
        }
        for (resource, limit) in &limits {
            if resource.starts_with("hugepages-") && !requests.contains_key(resource) {
                requests.insert(resource.clone(), default(limit.amount, Default::Limit));
            }
        }
    }
    Defaulted { requests, limits }
}

/// One Pod-level value the injection writes: `spec.resources.{requests,limits}.<resource>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLevelChange {
    /// `limits` (else `requests`).
    pub limits: bool,
    pub resource: String,
    /// The Pod's own value as written; `None` where it wrote none and the API server's
    /// default stood for it (only offline: admission sees the Pod defaulted).
    pub old: Option<String>,
    /// The default that stood for it, written (with `old` none).
    pub default: Option<(String, Default)>,
    pub new: String,
    /// Why, in words (`the sidecar's 100m added`).
    pub why: String,
}

impl fmt::Display for PodLevelChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = if self.limits { "limit" } else { "request" };
        write!(f, "pod-level {} {field} ", self.resource)?;
        match (&self.old, &self.default) {
            (Some(old), _) => write!(f, "{old}")?,
            (None, Some((value, Default::Aggregate))) => write!(f, "{value} (defaulted to the containers' requests)")?,
            (None, Some((value, Default::Limit))) => write!(f, "{value} (defaulted to its limit)")?,
            (None, None) => f.write_str("(unset)")?,
        }
        write!(f, " → {}: {}", self.new, self.why)
    }
}

/// What the injection writes into `spec.resources`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLevel {
    pub changes: Vec<PodLevelChange>,
    /// Whether the Pod has a `requests` map to set keys in (else the map is written whole).
    pub has_requests: bool,
    pub has_limits: bool,
}

/// An added container by name and its lists (as the Pod gets it).
pub type Named<'l> = (&'l str, &'l Lists);

fn written(amount: Amount) -> String {
    amount.write_like(&amount)
}

/// `the sidecar's 100m` for one, `envoy's 100m and proxy's 50m` for several.
fn whose(parts: &[(&str, String)]) -> String {
    match parts {
        [(_, value)] => format!("the sidecar's {value}"),
        _ => parts
            .iter()
            .map(|(name, value)| format!("{name}'s {value}"))
            .collect::<Vec<_>>()
            .join(" and "),
    }
}

/// The Pod level raised for the added containers: `before` and `after` are the aggregates
/// of the containers' requests without and with them; `sidecars` are the long-running
/// ones, `added` all of them (the template's init containers too); `guaranteed` keeps a
/// Guaranteed Pod level's cpu and memory requests equal to their limits.
pub fn raise(
    pod: &Defaulted,
    before: &Amounts,
    after: &Amounts,
    sidecars: &[Named<'_>],
    added: &[Named<'_>],
    guaranteed: bool,
) -> Vec<PodLevelChange> {
    let zero = Amount::ZERO;
    let mut requests: BTreeMap<&str, (Amount, String)> = BTreeMap::new();
    for (resource, held) in &pod.requests {
        let (was, now) = (
            *before.get(resource).unwrap_or(&zero),
            *after.get(resource).unwrap_or(&zero),
        );
        let grown = now.minus(was);
        let asked: Vec<(&str, Amount)> = sidecars
            .iter()
            .filter_map(|(name, lists)| Some((*name, *lists.requests.get(resource)?)))
            .collect();
        let asked_sum = asked.iter().fold(zero, |sum, (_, a)| sum.plus(*a));
        let why = if grown == asked_sum && !grown.is_zero() {
            let parts: Vec<(&str, String)> = asked.iter().map(|(name, a)| (*name, written(*a))).collect();
            format!("{} added", whose(&parts))
        } else if grown.is_zero() && now.is_zero() {
            String::from("the added containers ask for none")
        } else {
            format!(
                "the aggregate of the containers' requests goes from {} to {}: an init container asks more than the containers running beside it",
                written(was),
                written(now)
            )
        };
        requests.insert(resource, (held.amount.plus(grown), why));
    }

    let mut limits: BTreeMap<&str, (Amount, String)> = BTreeMap::new();
    for (resource, held) in &pod.limits {
        let mut parts = Vec::new();
        let mut sum = held.amount;
        for (name, lists) in sidecars {
            if let Some(limit) = lists.limits.get(resource) {
                sum = sum.plus(*limit);
                parts.push((*name, format!("limit {}", written(*limit))));
            } else if let Some(request) = lists.requests.get(resource) {
                // Without a limit the sidecar may use what the app does not: it gets at
                // least the room it asks for, so the app keeps its own budget.
                sum = sum.plus(*request);
                parts.push((
                    *name,
                    format!("request {} (it sets no {resource} limit)", written(*request)),
                ));
            }
        }
        let mut why = match parts.is_empty() {
            true => String::from("the sidecars set none"),
            false => format!("{} added", whose(&parts)),
        };
        for (name, lists) in added {
            if let Some(limit) = lists.limits.get(resource).filter(|l| **l > sum) {
                sum = *limit;
                why = format!("{why}; raised to {name}'s own limit {}", written(*limit));
            }
        }
        if let Some((request, _)) = requests.get(resource.as_str()).filter(|(r, _)| *r > sum) {
            sum = *request;
            why = format!("{why}; raised to the request {}", written(*request));
        }
        limits.insert(resource, (sum, why));
    }

    if guaranteed {
        // A Guaranteed Pod level stays so: its request and limit equal, the larger of the two.
        for resource in QOS_RESOURCES {
            if let (Some(request), Some(limit)) = (requests.get(resource).cloned(), limits.get(resource).cloned()) {
                if request.0 < limit.0 {
                    let why = format!("{}; raised to the limit, so the Pod stays Guaranteed", request.1);
                    requests.insert(resource, (limit.0, why));
                } else if limit.0 < request.0 {
                    let why = format!("{}; raised to the request, so the Pod stays Guaranteed", limit.1);
                    limits.insert(resource, (request.0, why));
                }
            }
        }
    }

    let mut changes = Vec::new();
    for (is_limit, held, new) in [(false, &pod.requests, requests), (true, &pod.limits, limits)] {
        for (resource, (amount, why)) in new {
            let old = &held[resource];
            if old.own.is_some() && amount == old.amount {
                continue;
            }
            changes.push(PodLevelChange {
                limits: is_limit,
                resource: resource.to_string(),
                old: old.own.clone(),
                default: old.default.map(|from| (written(old.amount), from)),
                new: amount.write_like(&old.amount),
                why,
            });
        }
    }
    changes
}
