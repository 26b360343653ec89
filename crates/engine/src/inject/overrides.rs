//! The Pod's `sidecar.samplecrd.k8s.io/override.NAME` annotations, checked against what
//! its template declares (`template::overrides`). Reading them allocates nothing when a
//! Pod has none: the admission hot path pays only a scan of its annotation keys.

use super::pod::{Dict, Text};
pub use super::refused::{Outside, Reason, Refused};
use crate::template::{Override, Target, Template};

/// The prefix of every override annotation; the override's name follows it.
pub const OVERRIDE_PREFIX: &str = "sidecar.samplecrd.k8s.io/override.";

/// An override the Pod asks for that its template allows: set `value` where `decl` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied<'t, 'v> {
    pub decl: &'t Override,
    pub value: &'v str,
}

/// Where an override lands, as the template wrote it (`resources.requests.cpu`).
pub fn target_name(target: &Target) -> String {
    match target {
        Target::Resource { limits: true, resource } => format!("resources.limits.{resource}"),
        Target::Resource {
            limits: false,
            resource,
        } => format!("resources.requests.{resource}"),
        Target::Env(name) => format!("env {name}"),
        Target::ImageTag => String::from("the image's tag"),
    }
}

/// The override annotations of a Pod, as (name, value), in the Pod's order.
pub fn asked<'v, 'a>(annotations: Option<&'v Dict<'a>>) -> impl Iterator<Item = (&'v str, &'v Text<'a>)> {
    annotations
        .into_iter()
        .flat_map(|dict| dict.0.iter())
        .filter_map(|(key, value)| Some((key.strip_prefix(OVERRIDE_PREFIX)?, value)))
}

/// Each override the Pod asks for, allowed or refused by `template`, in the Pod's order.
pub fn evaluate<'t, 'v>(
    annotations: Option<&'v Dict<'_>>,
    template: &'t Template,
) -> Vec<Result<Applied<'t, 'v>, Refused>> {
    asked(annotations)
        .map(|(name, value)| {
            let refused = |value: String, reason| Refused {
                name: name.to_string(),
                value,
                template: template.name.clone(),
                reason,
            };
            let value = match value {
                Text::Str(text) => text.as_ref(),
                Text::Other(json) => return Err(refused(json.clone(), Reason::NotAString)),
            };
            let Some(decl) = template.overrides.get(name) else {
                let declared = template.overrides.iter().map(|o| o.name.clone()).collect();
                return Err(refused(value.to_string(), Reason::Undeclared { declared }));
            };
            decl.check(value).map(|()| Applied { decl, value }).map_err(|why| {
                refused(
                    value.to_string(),
                    Reason::OutOfBounds(Box::new(Outside {
                        why,
                        target: target_name(&decl.target),
                        container: decl.container.clone(),
                    })),
                )
            })
        })
        .collect()
}

/// The overrides to apply, or every refusal: a Pod gets all it asked for or none.
pub fn applied<'t, 'v>(
    annotations: Option<&'v Dict<'_>>,
    template: &'t Template,
) -> Result<Vec<Applied<'t, 'v>>, Vec<Refused>> {
    let mut applied = Vec::new();
    let mut refused = Vec::new();
    for outcome in evaluate(annotations, template) {
        match outcome {
            Ok(one) => applied.push(one),
            Err(one) => refused.push(one),
        }
    }
    if refused.is_empty() { Ok(applied) } else { Err(refused) }
}

#[cfg(test)]
mod tests;
