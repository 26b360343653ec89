//! The API server's aggregate of a Pod's container requests (component-helpers'
//! `AggregateContainerRequests`), which the Pod-level requests default to and must be at
//! least: the regular containers and the native sidecars run together, and each init
//! container runs alone beside the native sidecars started before it.

use super::lists::Amounts;

/// Adds `more` into `sum`, as the API server's `addResourceList`.
fn add(sum: &mut Amounts, more: &Amounts) {
    for (resource, amount) in more {
        sum.entry(resource.clone())
            .and_modify(|s| *s = s.plus(*amount))
            .or_insert(*amount);
    }
}

/// Keeps in `max` the larger of each, as the API server's `maxResourceList`.
fn max(max: &mut Amounts, other: &Amounts) {
    for (resource, amount) in other {
        max.entry(resource.clone())
            .and_modify(|m| *m = m.larger(*amount))
            .or_insert(*amount);
    }
}

/// The aggregate requests of `regular` containers and `init` containers (each with
/// whether it is a native sidecar, `restartPolicy: Always`), in the Pod's order: max(sum
/// of the regular containers and the native sidecars, for each other init container its
/// request plus the native sidecars before it). The arithmetic is the API server's in its
/// order, so a sum keeps the format its text will have there.
pub fn aggregate<'l>(
    regular: impl IntoIterator<Item = &'l Amounts>,
    init: impl IntoIterator<Item = (bool, &'l Amounts)>,
) -> Amounts {
    let mut sum = Amounts::new();
    for requests in regular {
        add(&mut sum, requests);
    }
    let mut sidecars = Amounts::new();
    let mut inits = Amounts::new();
    for (restartable, requests) in init {
        if restartable {
            add(&mut sum, requests);
            add(&mut sidecars, requests);
            max(&mut inits, &sidecars);
        } else {
            let mut alone = Amounts::new();
            add(&mut alone, requests);
            add(&mut alone, &sidecars);
            max(&mut inits, &alone);
        }
    }
    max(&mut sum, &inits);
    sum
}
