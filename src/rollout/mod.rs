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
mod error;
pub mod in_step;
mod label;
pub mod plan;
pub mod progress;
pub mod report;
pub mod run;

pub use error::RolloutError;
pub use label::{AUTO_LABEL, AUTO_VALUE};
pub use report::Report;
pub use run::{Settings, Step, run};
