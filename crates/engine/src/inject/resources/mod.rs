//! What an injection does to resources, by the API server's own rules: the Pod-level
//! `spec.resources` raised by what the added containers take, so that the API server's
//! checks of it still hold (`pod_level`), and the added containers' own resources changed
//! so that the Pod keeps its QoS class (`qos`). The rules they follow: the API server's
//! defaulting of a container (`lists`) and its aggregate of container requests
//! (`aggregate`); `plan` puts them together for one Pod.

mod aggregate;
mod lists;
mod plan;
mod pod_level;
mod qos;

pub use plan::{Resourcing, plan};
pub use pod_level::{PodLevel, PodLevelChange};
pub use qos::{QosClass, QosEdit};

#[cfg(test)]
mod tests;
