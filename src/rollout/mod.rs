//! Template changes brought to running Pods: the workloads whose Pods run a stale
//! sidecar are restarted as `kubectl rollout restart` does, one after the other (or a few
//! at once), each waited for until every new Pod is Ready with the live revision; the
//! first failure stops the run. The `rollout` command runs it as the user; [`auto`] runs
//! it on the Lease holder for the namespaces labelled [`AUTO_LABEL`]`=auto`.
//!
//! | module | does |
//! |---|---|
//! | `plan` | pure: the stale Pods by workload (`cluster::stale`) and the workloads read → which to restart, in which order, and which to leave with what to do (bare Pods, Jobs, OnDelete, paused, a partition) |
//! | `progress` | pure: what counts as done for a restarted workload, from it and its Pods |
//! | `in_step` | pure: whether the live templates are in step where they are served (the compiled policies, each replica's reload) |
//! | `cluster` | every API request: the live templates, the serving replicas' `/metrics`, the workloads, their Pods, the restart patch |
//! | `run` | the run itself: wait until in step, restart and wait, stop at the first failure; [`run::roll`], one workload |
//! | `report` | what a run did: `-o json` is its serde form, and as text |
//! | `auto` | the automatic mode, a task of the Lease holder |
//! | `bound` | the automatic mode's bound (the policy shipped with its rights) read and judged before anything is restarted |

pub mod auto;
pub mod bound;
pub mod cluster;
pub mod in_step;
pub mod plan;
pub mod progress;
pub mod report;
pub mod run;

pub use report::Report;
pub use run::{Settings, Step, run};

/// The Namespace label that opts a namespace into the automatic rollout (value `auto`).
pub const AUTO_LABEL: &str = "sidecar.samplecrd.k8s.io/rollout";
/// The value of [`AUTO_LABEL`] that turns it on.
pub const AUTO_VALUE: &str = "auto";

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("cannot {action}: {message}")]
    Api { action: String, message: String },
    #[error("no live templates to roll out: {0}")]
    Templates(String),
    #[error("the selector of {what} cannot be used: {message}")]
    Selector { what: String, message: String },
    #[error("{0} was deleted during its rollout")]
    Gone(String),
    #[error(transparent)]
    Read(#[from] crate::cluster::ReadError),
}
