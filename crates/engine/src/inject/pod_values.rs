//! A template's `fromPod` values read from one Pod: what each env var it names becomes,
//! and why (for the warnings of the webhook and `inject`, and `check`'s report).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Container;

use super::OVERRIDE_PREFIX;
use super::overrides::Applied;
use super::pod::Checked;
use crate::template::{PodValue, PodValueKind, Target, Template};

/// What one `fromPod` entry gives the injected container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// The Pod's value.
    FromPod(String),
    /// An override the Pod asks for sets the same env var, and wins: its name and value.
    Overridden { name: String, value: String },
    /// The Pod has none to give: the template's value stays, for the reason said.
    Default { value: String, why: String },
}

/// One `fromPod` entry, resolved for a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved<'t> {
    pub decl: &'t PodValue,
    pub taken: Taken,
}

impl Resolved<'_> {
    /// The value the env var holds in the injected container.
    pub fn value(&self) -> &str {
        match &self.taken {
            Taken::FromPod(value) | Taken::Default { value, .. } | Taken::Overridden { value, .. } => value,
        }
    }

    /// `check`'s line: `env APP_PORT of container envoy: "80", the one TCP port ...`.
    pub fn describe(&self) -> String {
        let value = serde_json::Value::from(self.value());
        let from = match &self.taken {
            Taken::FromPod(_) => self.decl.value.describe().to_string(),
            Taken::Overridden { name, .. } => format!("from annotation `{OVERRIDE_PREFIX}{name}`"),
            Taken::Default { why, .. } => format!("the template's: {why}"),
        };
        format!(
            "env {} of container {}: {value}, {from}",
            self.decl.env, self.decl.container
        )
    }

    /// The warning of a Pod that had no value to give, if this is one.
    pub fn warning(&self, template: &Template) -> Option<String> {
        let Taken::Default { value, why } = &self.taken else {
            return None;
        };
        let pick = template
            .overrides
            .iter()
            .find(|o| o.container == self.decl.container && o.target == Target::Env(self.decl.env.clone()))
            .map(|o| format!("; annotation `{OVERRIDE_PREFIX}{}` sets it", o.name))
            .unwrap_or_default();
        Some(format!(
            "env `{}` of container `{}` keeps the template's value {}: {why}{pick}",
            self.decl.env,
            self.decl.container,
            serde_json::Value::from(value.as_str()),
        ))
    }
}

/// The distinct TCP ports the Pod's own containers declare, in order.
pub fn app_ports(view: &Checked<'_, '_>) -> Vec<i64> {
    let ports: BTreeSet<i64> = view
        .containers
        .items()
        .flat_map(|c| {
            c.ports()
                .filter(|(_, protocol)| *protocol == "TCP")
                .map(|(p, _)| p)
                .collect::<Vec<_>>()
        })
        .collect();
    ports.into_iter().collect()
}

/// Every `fromPod` entry of `template`, resolved for the Pod `view`, with the overrides the
/// Pod asks for (which win on their env var).
pub fn resolve<'t>(view: &Checked<'_, '_>, template: &'t Template, overrides: &[Applied<'_, '_>]) -> Vec<Resolved<'t>> {
    template
        .spec
        .from_pod
        .iter()
        .map(|decl| {
            let overridden = overrides
                .iter()
                .find(|o| o.decl.container == decl.container && o.decl.target == Target::Env(decl.env.clone()));
            let taken = match overridden {
                Some(o) => Taken::Overridden {
                    name: o.decl.name.clone(),
                    value: o.value.to_string(),
                },
                None => match decl.value {
                    PodValueKind::AppPort => match app_ports(view).as_slice() {
                        [one] => Taken::FromPod(one.to_string()),
                        ports => Taken::Default {
                            value: default_value(template, decl),
                            why: match ports {
                                [] => String::from("the Pod's app containers declare no TCP port"),
                                _ => format!(
                                    "the Pod's app containers declare several TCP ports ({})",
                                    ports.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
                                ),
                            },
                        },
                    },
                },
            };
            Resolved { decl, taken }
        })
        .collect()
}

/// The template's own value of the env var (checked present at load).
fn default_value(template: &Template, decl: &PodValue) -> String {
    template
        .spec
        .container(&decl.container)
        .and_then(|c| c.env.iter().flatten().find(|v| v.name == decl.env))
        .and_then(|v| v.value.clone())
        .unwrap_or_default()
}

/// Sets in `container` the values taken from the Pod (those on another container, or
/// not taken from it, change nothing).
pub fn apply(container: &mut Container, resolved: &[Resolved<'_>]) {
    for entry in resolved.iter().filter(|r| r.decl.container == container.name) {
        let Taken::FromPod(value) = &entry.taken else { continue };
        if let Some(var) = container.env.iter_mut().flatten().find(|v| v.name == entry.decl.env) {
            var.value = Some(value.clone());
        }
    }
}

/// Whether `resolved` changes `container`.
pub fn changes(container: &str, resolved: &[Resolved<'_>]) -> bool {
    resolved
        .iter()
        .any(|r| r.decl.container == container && matches!(r.taken, Taken::FromPod(_)))
}

#[cfg(test)]
mod tests;
