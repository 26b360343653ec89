//! Who gets injected: Pod annotations and labels and, in cluster mode, the Namespace label.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{
    INJECT_ANNOTATION, INJECT_LABEL, LEGACY_INJECT_ANNOTATION, NAMESPACE_LABEL, NAMESPACE_OPT_IN, STATUS_ANNOTATION,
    TEMPLATE_ANNOTATION,
};

/// Why a Pod is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptIn {
    Annotation,
    LegacyAnnotation,
    /// The Pod label [`INJECT_LABEL`]: selectable by the API server without any CEL.
    Label,
    NamespaceLabel,
}

/// Why a Pod is left as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    NotOptedIn,
    /// An annotation `key` (or, `label`, the label) says `"false"`.
    OptedOut {
        key: &'static str,
        label: bool,
    },
    AlreadyInjected {
        evidence: String,
    },
    /// `hostNetwork: true`, and the template the Pod names by annotation (`None`: it names
    /// none) does not allow it (`inject::decide::host_network`).
    HostNetwork {
        template: Option<String>,
    },
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NotOptedIn => write!(
                f,
                "not opted in: no `{INJECT_LABEL}: \"true\"` label or annotation and no opted-in namespace"
            ),
            Skip::OptedOut { key, label } => {
                let what = if *label { "label" } else { "annotation" };
                write!(f, "opted out by {what} `{key}: \"false\"`")
            }
            Skip::AlreadyInjected { evidence } => write!(f, "already injected ({evidence})"),
            Skip::HostNetwork { template: None } => write!(
                f,
                "on the node's network (`hostNetwork: true`) and naming no template by annotation `{TEMPLATE_ANNOTATION}`: left alone, as the sidecar's ports would be the node's (only a template the Pod names that sets `allowHostNetwork: true` is injected into it)"
            ),
            Skip::HostNetwork { template: Some(name) } => write!(
                f,
                "on the node's network (`hostNetwork: true`), and template `{name}` does not set `allowHostNetwork: true`: left alone, as the sidecar's ports would be the node's"
            ),
        }
    }
}

/// Where namespace-wide opt-in is known: cluster mode reads the Namespace from the
/// shared cache; standalone mode cannot see Namespaces and uses the Pod's own metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceOptIn {
    Labeled,
    NotLabeled,
    Unknown,
}

/// Whether a Pod's annotations opt it in (`serve --annotation-opt-in`). Its label and its
/// namespace's label always do; an opt-out annotation always wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AnnotationOptIn {
    #[default]
    On,
    Off,
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

/// A value of a Pod's annotations or labels as the rules read it.
pub enum Flag<'v> {
    Text(&'v str),
    /// Not a string: how to name what was found instead.
    Other(String),
}

/// A string map of a Pod's metadata, its annotations or its labels, wherever it is held (a
/// parsed Pod, a review's borrowed view of one, a metadata watch).
pub trait MetaMap {
    fn flag(&self, key: &str) -> Option<Flag<'_>>;
}

impl MetaMap for Map<String, Value> {
    fn flag(&self, key: &str) -> Option<Flag<'_>> {
        Some(match self.get(key)? {
            Value::String(text) => Flag::Text(text),
            other => Flag::Other(other.to_string()),
        })
    }
}

/// As Pod metadata holds them (a metadata-only watch or list).
impl MetaMap for BTreeMap<String, String> {
    fn flag(&self, key: &str) -> Option<Flag<'_>> {
        self.get(key).map(|text| Flag::Text(text))
    }
}

/// What the rules read of a Pod: its annotations and its labels.
#[derive(Clone, Copy, Default)]
pub struct PodMeta<'a> {
    pub annotations: Option<&'a dyn MetaMap>,
    pub labels: Option<&'a dyn MetaMap>,
}

impl<'a> PodMeta<'a> {
    pub fn new(annotations: Option<&'a dyn MetaMap>, labels: Option<&'a dyn MetaMap>) -> PodMeta<'a> {
        PodMeta { annotations, labels }
    }

    /// An annotation `"true"`/`"false"`, read case-insensitively and trimmed.
    fn annotation(&self, key: &str) -> Option<Result<bool, String>> {
        Some(match self.annotations?.flag(key)? {
            Flag::Text(text) => match text.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(Value::from(text).to_string()),
            },
            Flag::Other(found) => Err(found),
        })
    }

    /// The label `"true"`/`"false"`, exactly: what a label selector matches.
    fn label(&self) -> Option<Result<bool, String>> {
        Some(match self.labels?.flag(INJECT_LABEL)? {
            Flag::Text("true") => Ok(true),
            Flag::Text("false") => Ok(false),
            Flag::Text(text) => Err(Value::from(text).to_string()),
            Flag::Other(found) => Err(found),
        })
    }
}

/// Decides from the Pod's metadata (and the namespace label when known). Opt-out wins over
/// every opt-in; an unreadable value opts nothing in.
pub fn decide(pod: PodMeta<'_>, namespace: NamespaceOptIn, annotations: AnnotationOptIn) -> Result<OptIn, Skip> {
    if pod.annotations.is_some_and(|a| a.flag(STATUS_ANNOTATION).is_some()) {
        return Err(Skip::AlreadyInjected {
            evidence: format!("annotation `{STATUS_ANNOTATION}` is present"),
        });
    }
    opted_in(pod, namespace, annotations)
}

/// Whether the Pod opted in and not out, whatever it already carries: for the join of a
/// Pod a compiled admission policy injected.
pub fn opted_in(pod: PodMeta<'_>, namespace: NamespaceOptIn, annotations: AnnotationOptIn) -> Result<OptIn, Skip> {
    if let Some(opt_out) = opted_out(pod) {
        return Err(opt_out);
    }
    if annotations == AnnotationOptIn::On {
        if matches!(pod.annotation(INJECT_ANNOTATION), Some(Ok(true))) {
            return Ok(OptIn::Annotation);
        }
        if matches!(pod.annotation(LEGACY_INJECT_ANNOTATION), Some(Ok(true))) {
            return Ok(OptIn::LegacyAnnotation);
        }
    }
    if matches!(pod.label(), Some(Ok(true))) {
        return Ok(OptIn::Label);
    }
    if namespace == NamespaceOptIn::Labeled {
        return Ok(OptIn::NamespaceLabel);
    }
    Err(Skip::NotOptedIn)
}

/// The opt-out, when an annotation or the label says `"false"`: it wins over every opt-in,
/// including the offline `inject` command, where asking for injection is the opt-in.
pub fn opted_out(pod: PodMeta<'_>) -> Option<Skip> {
    if let Some(key) = [INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION]
        .into_iter()
        .find(|key| matches!(pod.annotation(key), Some(Ok(false))))
    {
        return Some(Skip::OptedOut { key, label: false });
    }
    matches!(pod.label(), Some(Ok(false))).then_some(Skip::OptedOut {
        key: INJECT_LABEL,
        label: true,
    })
}

/// Values that opt nothing in though they look meant to: neither "true" nor "false", or an
/// opt-in annotation where annotations do not opt in. Worth a warning to the user.
pub fn unreadable_flags(pod: PodMeta<'_>, annotations: AnnotationOptIn) -> Vec<String> {
    let mut out: Vec<String> = [INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION]
        .into_iter()
        .filter_map(|key| match pod.annotation(key) {
            Some(Err(found)) => Some(format!(
                "annotation `{key}` is {found}, expected \"true\" or \"false\"; it is ignored"
            )),
            Some(Ok(true)) if annotations == AnnotationOptIn::Off => Some(format!(
                "annotation `{key}: \"true\"` opts nothing in here (annotation opt-in is off): label the Pod `{INJECT_LABEL}: \"true\"` instead"
            )),
            _ => None,
        })
        .collect();
    if let Some(Err(found)) = pod.label() {
        out.push(format!(
            "label `{INJECT_LABEL}` is {found}, expected \"true\" or \"false\" (exactly, as label selectors match it); it is ignored"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// A Pod's metadata with these annotations and labels.
    fn pod<'a>(annotations: &'a Map<String, Value>, labels: &'a Map<String, Value>) -> PodMeta<'a> {
        PodMeta::new(Some(annotations), Some(labels))
    }

    const ON: AnnotationOptIn = AnnotationOptIn::On;

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
        let none = map(json!({}));
        let yes = map(json!({INJECT_ANNOTATION: "true"}));
        assert_eq!(
            decide(pod(&yes, &none), NamespaceOptIn::Unknown, ON),
            Ok(OptIn::Annotation)
        );
        let no = map(json!({INJECT_ANNOTATION: "False"}));
        let out = decide(pod(&no, &none), NamespaceOptIn::Labeled, ON);
        assert_eq!(
            out,
            Err(Skip::OptedOut {
                key: INJECT_ANNOTATION,
                label: false
            })
        );
        assert_eq!(
            out.unwrap_err().to_string(),
            "opted out by annotation `sidecar.samplecrd.k8s.io/inject: \"false\"`"
        );
    }

    #[test]
    fn the_label_opts_in_and_out_exactly_as_a_selector_matches_it() {
        let none = map(json!({}));
        let label = |value: &str| map(json!({INJECT_LABEL: value}));
        assert_eq!(
            decide(pod(&none, &label("true")), NamespaceOptIn::NotLabeled, ON),
            Ok(OptIn::Label)
        );
        assert!(matches!(
            decide(pod(&none, &label("false")), NamespaceOptIn::Labeled, ON),
            Err(Skip::OptedOut { label: true, .. })
        ));
        // "True" is what no selector `In [true]` matches: it opts nothing in, and says so.
        let odd = label("True");
        assert_eq!(
            decide(pod(&none, &odd), NamespaceOptIn::NotLabeled, ON),
            Err(Skip::NotOptedIn)
        );
        assert_eq!(unreadable_flags(pod(&none, &odd), ON).len(), 1);
        // An opt-out annotation wins over the label.
        let out = map(json!({INJECT_ANNOTATION: "false"}));
        assert!(matches!(
            decide(pod(&out, &label("true")), NamespaceOptIn::NotLabeled, ON),
            Err(Skip::OptedOut { label: false, .. })
        ));
    }

    #[test]
    fn with_annotation_opt_in_off_only_labels_opt_in_and_the_annotation_is_named() {
        let none = map(json!({}));
        let yes = map(json!({INJECT_ANNOTATION: "true"}));
        let off = AnnotationOptIn::Off;
        assert_eq!(
            decide(pod(&yes, &none), NamespaceOptIn::NotLabeled, off),
            Err(Skip::NotOptedIn)
        );
        assert_eq!(
            decide(pod(&yes, &none), NamespaceOptIn::Labeled, off),
            Ok(OptIn::NamespaceLabel)
        );
        let warnings = unreadable_flags(pod(&yes, &none), off);
        assert!(warnings[0].contains("annotation opt-in is off"), "{warnings:?}");
        // The opt-out annotation still wins.
        let no = map(json!({INJECT_ANNOTATION: "false"}));
        assert!(matches!(
            decide(pod(&no, &none), NamespaceOptIn::Labeled, off),
            Err(Skip::OptedOut { .. })
        ));
    }

    #[test]
    fn legacy_annotation_is_honoured() {
        let none = map(json!({}));
        let legacy = map(json!({LEGACY_INJECT_ANNOTATION: "true"}));
        assert_eq!(
            decide(pod(&legacy, &none), NamespaceOptIn::Unknown, ON),
            Ok(OptIn::LegacyAnnotation)
        );
        let both = map(json!({LEGACY_INJECT_ANNOTATION: "true", INJECT_ANNOTATION: "false"}));
        assert!(matches!(
            decide(pod(&both, &none), NamespaceOptIn::Unknown, ON),
            Err(Skip::OptedOut { .. })
        ));
    }

    #[test]
    fn namespace_label_opts_in_only_when_known() {
        let none = PodMeta::default();
        assert_eq!(decide(none, NamespaceOptIn::Labeled, ON), Ok(OptIn::NamespaceLabel));
        assert_eq!(decide(none, NamespaceOptIn::Unknown, ON), Err(Skip::NotOptedIn));
        assert_eq!(decide(none, NamespaceOptIn::NotLabeled, ON), Err(Skip::NotOptedIn));
    }

    #[test]
    fn status_annotation_means_already_injected() {
        let none = map(json!({}));
        let done = map(json!({STATUS_ANNOTATION: "{}", INJECT_ANNOTATION: "true"}));
        assert!(matches!(
            decide(pod(&done, &none), NamespaceOptIn::Labeled, ON),
            Err(Skip::AlreadyInjected { .. })
        ));
    }

    #[test]
    fn unreadable_value_opts_nothing_in_and_is_reported() {
        let none = map(json!({}));
        let odd = map(json!({INJECT_ANNOTATION: "yes"}));
        assert_eq!(
            decide(pod(&odd, &none), NamespaceOptIn::Unknown, ON),
            Err(Skip::NotOptedIn)
        );
        assert_eq!(unreadable_flags(pod(&odd, &none), ON).len(), 1);
    }
}
