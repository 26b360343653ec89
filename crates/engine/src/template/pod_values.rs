//! A template's `fromPod`: values an injected container takes from the Pod it is
//! injected into, checked at load. Each names what of the Pod (`value`) and where it goes
//! (`container`, `env`: an env var of a container the template adds, whose own value is
//! the default when the Pod has none to give):
//!
//! ```yaml
//! fromPod:
//! - {value: appPort, container: envoy, env: APP_PORT}
//! ```
//!
//! An override a Pod asks for on the same env var wins over it. Applying one to a Pod is
//! the engine's (`inject::pod_values`) and the compiled policies' (`policies::pod_values`).

use super::error::Fault;
use super::spec::TemplateSpec;
use super::yaml_locate::{Lines, Segment, render_path};

/// Checks each entry against the template: its container is one the template adds, whose
/// env var `env` has a plain `value` (the default), and no two entries set one env var.
/// An entry's first mistake is its fault; every entry is checked.
pub fn check(spec: &TemplateSpec, lines: &Lines) -> Vec<Fault> {
    let mut faults = Vec::new();
    for (index, entry) in spec.from_pod.iter().enumerate() {
        let mut fault = |key: &str, message: String| {
            let path = [
                Segment::Key(String::from("fromPod")),
                Segment::Index(index),
                Segment::Key(key.to_string()),
            ];
            faults.push(Fault::Override {
                path: render_path(&path),
                line: lines.line_near(&path),
                message,
            });
        };
        let Some(container) = spec.container(&entry.container) else {
            fault(
                "container",
                format!(
                    "expected a container the template adds ({}), found `{}`",
                    spec.container_list(),
                    entry.container
                ),
            );
            continue;
        };
        let default = container
            .env
            .iter()
            .flatten()
            .find(|v| v.name == entry.env)
            .filter(|v| v.value_from.is_none() && v.value.is_some());
        if default.is_none() {
            fault(
                "env",
                format!(
                    "expected an env var of container `{}` with a `value`, the default when the Pod has none to give, found no such var `{}`",
                    entry.container, entry.env
                ),
            );
            continue;
        }
        let twice = spec.from_pod[..index]
            .iter()
            .any(|other| other.container == entry.container && other.env == entry.env);
        if twice {
            fault(
                "env",
                format!(
                    "expected each env var set from the Pod once, found `{}` of container `{}` again",
                    entry.env, entry.container
                ),
            );
        }
    }
    faults
}
