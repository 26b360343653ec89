//! Who gets injected: Pod annotations and, in cluster mode, the Namespace label.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION, NAMESPACE_LABEL, NAMESPACE_OPT_IN, STATUS_ANNOTATION};

/// Why a Pod is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptIn {
    Annotation,
    LegacyAnnotation,
    NamespaceLabel,
}

/// Why a Pod is left as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    NotOptedIn,
    OptedOut { annotation: &'static str },
    AlreadyInjected { evidence: String },
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NotOptedIn => write!(
                f,
                "not opted in: no `{INJECT_ANNOTATION}: \"true\"` annotation and no opted-in namespace"
            ),
            Skip::OptedOut { annotation } => write!(f, "opted out by `{annotation}: \"false\"`"),
            Skip::AlreadyInjected { evidence } => write!(f, "already injected ({evidence})"),
        }
    }
}

/// Where namespace-wide opt-in is known: cluster mode reads the Namespace from the
/// shared cache; standalone mode cannot see Namespaces and uses annotations only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceOptIn {
    Labeled,
    NotLabeled,
    Unknown,
}

/// A Namespace's opt-in from its labels; `None` (a Namespace not known) opts nothing in.
pub fn namespace_opt_in(labels: Option<&BTreeMap<String, String>>) -> NamespaceOptIn {
    match labels.and_then(|l| l.get(NAMESPACE_LABEL)) {
        Some(value) if value == NAMESPACE_OPT_IN => NamespaceOptIn::Labeled,
        _ => NamespaceOptIn::NotLabeled,
    }
}

/// The template a Namespace's labels name for its Pods (empty or absent: none).
pub fn namespace_template(labels: Option<&BTreeMap<String, String>>) -> Option<&str> {
    labels?
        .get(super::NAMESPACE_TEMPLATE_LABEL)
        .map(|name| name.trim())
        .filter(|name| !name.is_empty())
}

/// An annotation's value as the policy reads it.
pub enum Flag<'v> {
    Text(&'v str),
    /// Not a string: how to name what was found instead.
    Other(String),
}

/// A Pod's annotations, wherever they are held (a parsed Pod, or a review's borrowed
/// view of one).
pub trait Annotations {
    fn flag(&self, key: &str) -> Option<Flag<'_>>;
}

impl Annotations for Map<String, Value> {
    fn flag(&self, key: &str) -> Option<Flag<'_>> {
        Some(match self.get(key)? {
            Value::String(text) => Flag::Text(text),
            other => Flag::Other(other.to_string()),
        })
    }
}

/// Annotations as Pod metadata holds them (a metadata-only watch or list).
impl Annotations for BTreeMap<String, String> {
    fn flag(&self, key: &str) -> Option<Flag<'_>> {
        self.get(key).map(|text| Flag::Text(text))
    }
}

/// A parsed boolean-ish annotation value: "true"/"false", case-insensitive.
fn flag(annotations: Option<&dyn Annotations>, key: &str) -> Option<Result<bool, String>> {
    Some(match annotations?.flag(key)? {
        Flag::Text(text) => match text.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(Value::from(text).to_string()),
        },
        Flag::Other(found) => Err(found),
    })
}

/// Decides from the Pod's annotations (and the namespace label when known).
/// Opt-out wins over every opt-in; an unreadable value opts nothing in.
pub fn decide(annotations: Option<&dyn Annotations>, namespace: NamespaceOptIn) -> Result<OptIn, Skip> {
    if annotations.is_some_and(|a| a.flag(STATUS_ANNOTATION).is_some()) {
        return Err(Skip::AlreadyInjected {
            evidence: format!("annotation `{STATUS_ANNOTATION}` is present"),
        });
    }
    opted_in(annotations, namespace)
}

/// Whether the Pod opted in and not out, whatever it already carries: for the join of a
/// Pod a compiled admission policy injected.
pub fn opted_in(annotations: Option<&dyn Annotations>, namespace: NamespaceOptIn) -> Result<OptIn, Skip> {
    if let Some(opt_out) = opted_out(annotations) {
        return Err(opt_out);
    }
    if matches!(flag(annotations, INJECT_ANNOTATION), Some(Ok(true))) {
        return Ok(OptIn::Annotation);
    }
    if matches!(flag(annotations, LEGACY_INJECT_ANNOTATION), Some(Ok(true))) {
        return Ok(OptIn::LegacyAnnotation);
    }
    if namespace == NamespaceOptIn::Labeled {
        return Ok(OptIn::NamespaceLabel);
    }
    Err(Skip::NotOptedIn)
}

/// The opt-out, when an annotation says `"false"`: it wins over every opt-in, including
/// the offline `inject` command, where asking for injection is the opt-in.
pub fn opted_out(annotations: Option<&dyn Annotations>) -> Option<Skip> {
    [INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION]
        .into_iter()
        .find(|key| matches!(flag(annotations, key), Some(Ok(false))))
        .map(|annotation| Skip::OptedOut { annotation })
}

/// Annotation values that are neither "true" nor "false": worth a warning to the user,
/// since they opt nothing in.
pub fn unreadable_flags(annotations: Option<&dyn Annotations>) -> Vec<String> {
    [INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION]
        .into_iter()
        .filter_map(|key| match flag(annotations, key) {
            Some(Err(found)) => Some(format!(
                "annotation `{key}` is {found}, expected \"true\" or \"false\"; it is ignored"
            )),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ann(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn some(map: &Map<String, Value>) -> Option<&dyn Annotations> {
        Some(map)
    }

    #[test]
    fn only_the_enabled_label_opts_a_namespace_in() {
        let labels = |value: &str| BTreeMap::from([(NAMESPACE_LABEL.to_string(), value.to_string())]);
        assert_eq!(namespace_opt_in(Some(&labels("enabled"))), NamespaceOptIn::Labeled);
        assert_eq!(namespace_opt_in(Some(&labels("Enabled"))), NamespaceOptIn::NotLabeled);
        assert_eq!(namespace_opt_in(Some(&BTreeMap::new())), NamespaceOptIn::NotLabeled);
        assert_eq!(namespace_opt_in(None), NamespaceOptIn::NotLabeled);
    }

    #[test]
    fn annotation_opts_in_and_out() {
        let yes = ann(json!({INJECT_ANNOTATION: "true"}));
        assert_eq!(decide(some(&yes), NamespaceOptIn::Unknown), Ok(OptIn::Annotation));
        let no = ann(json!({INJECT_ANNOTATION: "False"}));
        assert_eq!(
            decide(some(&no), NamespaceOptIn::Labeled),
            Err(Skip::OptedOut {
                annotation: INJECT_ANNOTATION
            })
        );
    }

    #[test]
    fn legacy_annotation_is_honoured() {
        let legacy = ann(json!({LEGACY_INJECT_ANNOTATION: "true"}));
        assert_eq!(
            decide(some(&legacy), NamespaceOptIn::Unknown),
            Ok(OptIn::LegacyAnnotation)
        );
        let both = ann(json!({LEGACY_INJECT_ANNOTATION: "true", INJECT_ANNOTATION: "false"}));
        assert!(matches!(
            decide(some(&both), NamespaceOptIn::Unknown),
            Err(Skip::OptedOut { .. })
        ));
    }

    #[test]
    fn namespace_label_opts_in_only_when_known() {
        assert_eq!(decide(None, NamespaceOptIn::Labeled), Ok(OptIn::NamespaceLabel));
        assert_eq!(decide(None, NamespaceOptIn::Unknown), Err(Skip::NotOptedIn));
        assert_eq!(decide(None, NamespaceOptIn::NotLabeled), Err(Skip::NotOptedIn));
    }

    #[test]
    fn status_annotation_means_already_injected() {
        let done = ann(json!({STATUS_ANNOTATION: "{}", INJECT_ANNOTATION: "true"}));
        assert!(matches!(
            decide(some(&done), NamespaceOptIn::Labeled),
            Err(Skip::AlreadyInjected { .. })
        ));
    }

    #[test]
    fn unreadable_value_opts_nothing_in_and_is_reported() {
        let odd = ann(json!({INJECT_ANNOTATION: "yes"}));
        assert_eq!(decide(some(&odd), NamespaceOptIn::Unknown), Err(Skip::NotOptedIn));
        assert_eq!(unreadable_flags(some(&odd)).len(), 1);
    }
}
