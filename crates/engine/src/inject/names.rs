//! The names the cluster sees: the annotations and labels a Pod opts in, picks, joins
//! and is marked with, and the Namespace labels.

pub const INJECT_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/inject";
/// The Pod label that opts a Pod in (`"true"`) or out (`"false"`), the same key as
/// [`INJECT_ANNOTATION`]: label selectors select it, so a Pod that did not opt in costs
/// the API server no CEL.
pub const INJECT_LABEL: &str = INJECT_ANNOTATION;
pub const TEMPLATE_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/template";
pub const NETWORK_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/network";
pub const STATUS_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/status";
/// Label set next to the status annotation: the template revision, so that injected Pods
/// can be selected server-side (annotations cannot be).
pub const REVISION_LABEL: &str = "sidecar.samplecrd.k8s.io/revision";
pub const NATIVE_SIDECAR_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/native-sidecar";
/// Label and annotation the compiled admission policies mark a Pod they refuse with (the
/// annotation holds the webhook's words): the label selects the validating policy that
/// denies it. A Pod never keeps them: it is denied, or the webhook injects it and takes
/// them out.
pub const REFUSED_LABEL: &str = "sidecar.samplecrd.k8s.io/refused";
pub const REFUSED_ANNOTATION: &str = REFUSED_LABEL;
/// The legacy opt-in (an Initializer annotation, from before admission webhooks), still honoured.
pub const LEGACY_INJECT_ANNOTATION: &str = "initializer.kubernetes.io/envoy";
/// Namespace label naming the template for every Pod of the namespace (cluster mode); a
/// Pod's own [`TEMPLATE_ANNOTATION`] wins over it.
pub const NAMESPACE_TEMPLATE_LABEL: &str = "sidecar.samplecrd.k8s.io/template";
/// Namespace label (value [`NAMESPACE_OPT_IN`]) for namespace-wide opt-in.
pub const NAMESPACE_LABEL: &str = "sidecar.samplecrd.k8s.io/inject";
/// The value of [`NAMESPACE_LABEL`] that opts a Namespace's Pods in.
pub const NAMESPACE_OPT_IN: &str = "enabled";
/// The value of [`NAMESPACE_LABEL`] that keeps a Namespace's Pods from every injection:
/// the shipped webhook entries and the compiled policies' bindings select none of them.
pub const NAMESPACE_OPT_OUT: &str = "disabled";
