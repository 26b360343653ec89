//! A template's values checked as the API server checks a Pod's: quantities, names, port
//! numbers and names, enums, one probe handler, requests not above limits, extended
//! resources, volume sources, mounts of volumes the Pod will have. Pure: a parsed template
//! (and the lines of its text) in, every value the API server would refuse out, each with
//! its field path, what was expected, what was found and its line.
//!
//! The rules are those of `ValidatePodCreate` for a Pod that holds the template's
//! additions, after the API server's defaulting (an empty `protocol` is `TCP`, an empty
//! probe `successThreshold` is 1, a volume without a source an `emptyDir`), and they follow
//! the Kubernetes version ([`KubeVersion`]) where its feature gates moved them. What depends
//! on the Pod (its `terminationGracePeriodSeconds`, its own containers' ports) is left to
//! the injection, which sees the Pod.

mod container;
mod env;
pub mod names;
mod probes;
mod resources;
mod security;
mod version;
mod volumes;
mod walk;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Volume;

pub use version::{KubeVersion, NATIVE_SIDECAR_KUBELET_MINOR, VersionError};
pub use walk::ValueError;
use walk::Walk;

use super::spec::TemplateSpec;
use super::yaml_locate::{Lines, render_path};

/// Every value of `spec` the API server of `version` would refuse; `lines` are the
/// template's, read only when something is refused.
pub fn check(spec: &TemplateSpec, version: KubeVersion, lines: &Lines) -> Vec<ValueError> {
    let mut walk = Walk::new(version);
    let volumes: BTreeMap<&str, &Volume> = spec.volumes.iter().map(|v| (v.name.as_str(), v)).collect();
    walk.list("volumes", &spec.volumes, volumes::volume);
    walk.list("initContainers", &spec.init_containers, |walk, c| {
        container::container(walk, c, container::Role::Init, &volumes);
    });
    walk.list("containers", &spec.containers, |walk, c| {
        container::container(walk, c, container::Role::Sidecar, &volumes);
    });
    container::host_ports(&mut walk, spec);
    walk.list("volumeMounts", &spec.volume_mounts, |walk, mount| {
        container::mount(walk, mount, None);
    });
    walk.into_found()
        .into_iter()
        .map(|(path, expected, found)| ValueError {
            line: lines.line_near(&path),
            path: render_path(&path),
            expected,
            found,
        })
        .collect()
}

#[cfg(test)]
mod tests;
