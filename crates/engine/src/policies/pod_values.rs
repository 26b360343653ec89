//! A template's `fromPod` values in CEL: what `inject::pod_values` sets for the webhook,
//! set by the compiled patch. The one function the patch calls, [`additions`], returns the
//! operations for one template's scope.

use super::cel;
use super::ops::{container_path, op};
use super::variables::{ANNOTATIONS, APP_TCP_PORTS, Scope};
use crate::inject::OVERRIDE_PREFIX;
use crate::template::{PodValueKind, Target, Template};

/// (whether the Pod gives a value, the value) of `kind`, in CEL.
fn value_of(kind: PodValueKind) -> (String, String) {
    match kind {
        PodValueKind::AppPort => (
            format!("(size({APP_TCP_PORTS}) > 0 && {APP_TCP_PORTS}.all(p, p == {APP_TCP_PORTS}[0]))"),
            format!("string({APP_TCP_PORTS}[0])"),
        ),
    }
}

/// The operations setting each `fromPod` value of `template` the Pod gives, unless the Pod
/// asks an override of the same env var (which the patch applies instead): a `replace` of
/// the env var's value, which the template's container has (checked at load).
pub fn additions(template: &Template, scope: &Scope) -> String {
    let mut parts = Vec::new();
    for decl in &template.spec.from_pod {
        let container = template.spec.container(&decl.container);
        let Some(index) = container.and_then(|c| c.env.iter().flatten().position(|v| v.name == decl.env)) else {
            continue;
        };
        let (gives, value) = value_of(decl.value);
        let overridden: Vec<String> = template
            .overrides
            .iter()
            .filter(|o| o.container == decl.container && o.target == Target::Env(decl.env.clone()))
            .map(|o| {
                format!(
                    "!({} in {ANNOTATIONS})",
                    cel::string(&format!("{OVERRIDE_PREFIX}{}", o.name))
                )
            })
            .collect();
        let guard = std::iter::once(gives)
            .chain(overridden)
            .collect::<Vec<_>>()
            .join(" && ");
        let path = format!(
            "{} + {}",
            container_path(template, scope, &decl.container),
            cel::string(&format!("/env/{index}/value"))
        );
        parts.push(format!("({guard} ? [{}] : [])", op("replace", &path, &value)));
    }
    if parts.is_empty() {
        return String::from("[]");
    }
    format!("({})", parts.join(" + "))
}
