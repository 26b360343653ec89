//! `resources`: resource names, quantities as the API server parses them, requests not
//! above limits, extended resources whole and requested exactly at their limit, hugepages
//! in whole pages next to cpu or memory.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::names;
use super::walk::{Walk, quoted};
use crate::template::quantity::{Quantity, QuantityError};

pub const QUANTITY: &str =
    "a quantity: a number with an optional suffix (n u m k M G T P E, Ki Mi Gi Ti Pi Ei) or exponent (e3)";

/// A quantity as the API server decodes it: `Ok(None)` for one too large to compare here
/// (the API server takes it), `Err` with what was expected for one it refuses to decode.
pub fn parse(text: &str) -> Result<Option<Quantity>, &'static str> {
    match Quantity::parse(text) {
        Ok(q) => Ok(Some(q)),
        Err(QuantityError::TooLarge { .. }) => Ok(None),
        Err(QuantityError::Empty | QuantityError::Syntax { .. }) => Err(QUANTITY),
    }
}

/// A quantity that must parse and not be negative; its value when it can be compared.
pub fn non_negative(walk: &mut Walk, key: &str, text: &str) -> Option<Quantity> {
    match parse(text) {
        Err(expected) => {
            walk.fail_at(key, expected, quoted(text));
            None
        }
        Ok(Some(q)) if q.nanos() < 0 => {
            walk.fail_at(key, "a quantity of 0 or more", quoted(text));
            None
        }
        Ok(q) => q,
    }
}

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// A resource of the Kubernetes namespace: unprefixed, or prefixed `kubernetes.io/`.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Extended and hugepages resources cannot be overcommitted: request = limit.
fn overcommits(name: &str) -> bool {
    is_native(name) && !is_hugepages(name)
}

fn name_fault(name: &str) -> Option<&'static str> {
    const EXPECTED: &str = "a container resource: cpu, memory, ephemeral-storage, hugepages-SIZE, or an extended resource such as example.com/gpu";
    if !names::is_qualified_name(name) {
        return Some(EXPECTED);
    }
    if !name.contains('/') {
        let standard = matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_hugepages(name);
        return (!standard).then_some(EXPECTED);
    }
    let extended = !is_native(name) && names::is_qualified_name(&format!("requests.{name}"));
    (!is_native(name) && !extended).then_some(EXPECTED)
}

/// Checks one list (`limits` or `requests`); the values it could read, by resource.
fn list(walk: &mut Walk, key: &str, list: Option<&BTreeMap<String, K8sQuantity>>) -> BTreeMap<String, Quantity> {
    let mut values = BTreeMap::new();
    walk.key(key, |walk| {
        for (name, quantity) in list.into_iter().flatten() {
            if let Some(expected) = name_fault(name) {
                walk.fail_at(name, expected, quoted(name));
                continue;
            }
            let Some(value) = non_negative(walk, name, &quantity.0) else {
                continue;
            };
            if !is_native(name) && !value.is_whole() {
                walk.fail_at(
                    name,
                    "a whole number (an extended resource counts units)",
                    quoted(&quantity.0),
                );
                continue;
            }
            if is_hugepages(name) {
                let page = name
                    .strip_prefix("hugepages-")
                    .and_then(|size| Quantity::parse(size).ok());
                let divisible = page
                    .filter(|p| p.nanos() > 0 && p.is_whole())
                    .is_some_and(|p| value.ceil_units() % p.ceil_units() == 0);
                if !divisible {
                    walk.fail_at(name, format!("a whole number of pages of {name}"), quoted(&quantity.0));
                    continue;
                }
            }
            values.insert(name.clone(), value);
        }
    });
    values
}

pub fn requirements(walk: &mut Walk, r: &ResourceRequirements) {
    let limits = list(walk, "limits", r.limits.as_ref());
    let requests = list(walk, "requests", r.requests.as_ref());
    let written =
        |map: &Option<BTreeMap<String, K8sQuantity>>, name: &str| map.as_ref().is_some_and(|m| m.contains_key(name));
    for (name, request) in &requests {
        match limits.get(name) {
            Some(limit) if !overcommits(name) && request != limit => walk.key("requests", |walk| {
                walk.fail_at(
                    name,
                    format!("{limit}, the limit ({name} is requested at its limit)"),
                    quoted(request.as_str()),
                );
            }),
            Some(limit) if request > limit => walk.key("requests", |walk| {
                walk.fail_at(name, format!("at most the limit {limit}"), quoted(request.as_str()));
            }),
            None if !overcommits(name) && !written(&r.limits, name) => walk.key("limits", |walk| {
                walk.fail_at(name, format!("a limit for {name}, equal to its request"), "none");
            }),
            _ => {}
        }
    }
    let names = || r.limits.iter().chain(r.requests.iter()).flat_map(|m| m.keys());
    if names().any(|n| is_hugepages(n)) && !names().any(|n| n == "cpu" || n == "memory") {
        walk.fail("a cpu or memory request or limit next to hugepages", "hugepages alone");
    }
    if walk.version.resource_claims() {
        walk.list("claims", r.claims.as_deref().unwrap_or_default(), |walk, claim| {
            let expected = "a claim of the Pod's spec.resourceClaims, which a template cannot add";
            let found = if claim.name.is_empty() {
                String::from("an empty name")
            } else {
                quoted(&claim.name)
            };
            walk.fail_at("name", expected, found);
        });
    }
}
