//! Requests and limits as exact amounts, defaulted as the API server defaults a
//! container: a resource it limits but does not request is requested at its limit.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::inject::pod::ResourceLists;
use crate::template::quantity::{Amount, Quantity};

/// Amounts by resource name.
pub type Amounts = BTreeMap<String, Amount>;

/// One container's requests (defaulted) and limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lists {
    pub requests: Amounts,
    pub limits: Amounts,
}

impl Lists {
    /// Requests defaulted from the limits, as the API server does before anything reads them.
    fn defaulted(mut requests: Amounts, limits: Amounts) -> Lists {
        for (resource, limit) in &limits {
            requests.entry(resource.clone()).or_insert(*limit);
        }
        Lists { requests, limits }
    }

    /// A container of the Pod.
    pub fn of_pod(lists: &ResourceLists) -> Lists {
        let amounts = |map: &Option<BTreeMap<String, Quantity>>| -> Amounts {
            map.iter()
                .flatten()
                .map(|(resource, quantity)| (resource.clone(), quantity.amount()))
                .collect()
        };
        Lists::defaulted(amounts(&lists.requests), amounts(&lists.limits))
    }

    /// A container the template adds, as this Pod gets it.
    pub fn of_template(resources: Option<&ResourceRequirements>) -> Lists {
        let amounts = |map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            map.into_iter()
                .flatten()
                // Every value parses: the template's were checked when it was loaded, an
                // override's when the Pod asked for it.
                .filter_map(|(resource, quantity)| {
                    Some((resource.clone(), Quantity::parse(&quantity.0).ok()?.amount()))
                })
                .collect()
        };
        let requests = amounts(resources.and_then(|r| r.requests.as_ref()));
        let limits = amounts(resources.and_then(|r| r.limits.as_ref()));
        Lists::defaulted(requests, limits)
    }
}
