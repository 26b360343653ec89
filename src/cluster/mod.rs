//! What the cluster's installation and workloads are, read on demand: the facts `check`
//! explains and reports, and `rollout` acts on. GET and LIST only, never on the admission
//! path (which reads the cache). Every part but [`fetch`] and the lookups below is pure:
//! the cluster comes in as data.
//!
//! | module | does |
//! |---|---|
//! | `fetch` | the API reads that fill the rest: the installation's objects, Pods (cluster-wide lists paged), Namespaces, Networks, ReplicaSets' owners, discovery |
//! | `health` | pure: the installation's facts → `ok`/`warn`/`fail` lines |
//! | `injection` | pure: which path `serve` sets up (`--injection`, discovery), the compiled admission policies found against the live ConfigMap's, and the route of a Pod through them |
//! | `snapshot` | pure: the Pods to explain, and the Namespace labels and Networks they name, as listed |
//! | `selector` | pure: label selectors as the API server applies them |
//! | `workload` | pure: a Pod's owning workload and the command that replaces its Pods |
//! | `stale` | pure: injected Pods → stale ones grouped by workload, with the fix |
//! | `drift` | pure: an injected Pod at the live revision whose sidecar differs from what the template makes of it, field by field |
//!
//! `check` (the command and its report) and `rollout` (which restarts the stale workloads)
//! sit above it; it imports neither.

pub mod drift;
mod error;
pub mod fetch;
pub mod health;
pub mod injection;
pub mod selector;
pub mod snapshot;
pub mod stale;
pub mod workload;

use crate::template::TemplateSet;
use stale::StaleGroup;

pub use error::ReadError;

/// The injected Pods in `scope` (or everywhere) that run a stale revision of `live`,
/// grouped by workload, as `--stale` lists them (`rollout` restarts from this list).
pub async fn stale_groups(
    client: &kube::Client,
    scope: Option<&str>,
    live: &TemplateSet,
) -> Result<Vec<StaleGroup>, ReadError> {
    let (pods, owners) = fetch::injected_pods(client, scope).await?;
    Ok(stale::group(&pods, &owners, live))
}

/// The compiled admission policies against `templates`, judged by the mode the injector's
/// `deployment` (in `injector_namespace`) runs with, as the `admission-policies` line
/// judges them; and that Deployment, as read.
pub async fn policies(
    client: &kube::Client,
    injector_namespace: &str,
    deployment: Option<&str>,
    templates: &Result<TemplateSet, String>,
) -> (
    injection::Policies,
    Option<health::Fetched<k8s_openapi::api::apps::v1::Deployment>>,
) {
    let facts = fetch::policy_facts(client, injector_namespace, deployment).await;
    let policies = injection::Policies::new(&facts, templates, injector_namespace);
    (policies, facts.deployment.map(|(_, read)| read))
}
