//! The one decision, in the one order every path takes: the Pod's opt-in, the join of a
//! Pod a compiled policy already injected, a Pod on the node's network its template does
//! not allow, the Network it names, the template, the
//! template's own faults before the Network's, then the plan. The webhook answers with it,
//! `check` explains with it, offline `inject` (where asking is the opt-in) takes it from
//! the template on, and the compiled admission policies ask the same questions in CEL
//! (`policies::plan`). What it needs of the cluster comes in through [`ClusterView`], as
//! data: no I/O.

use std::ops::Deref;
use std::sync::Arc;

use super::join::{self, JoinError, Lookup};
use super::policy::{self, AnnotationOptIn, NamespaceOptIn, OptIn, Skip};
use super::{Decision, Extras, InjectError, PodView, STATUS_ANNOTATION, TEMPLATE_ANNOTATION, plan};
use crate::template::{DEFAULT_TEMPLATE, Template, TemplateSet};

/// The cluster facts the decision reads: Namespace labels and Networks. The webhook reads
/// them from the shared cache, `check` from what it listed, `--standalone` has none.
pub trait ClusterView: Send + Sync {
    fn namespace_opt_in(&self, namespace: &str) -> NamespaceOptIn;
    fn network(&self, namespace: &str, name: &str) -> Lookup;
    /// The template the Namespace's label names for its Pods; none where Namespaces are
    /// not visible.
    fn namespace_template(&self, _namespace: &str) -> Option<String> {
        None
    }
}

/// No cluster (`serve --standalone`, offline `inject`): Namespaces and Networks are not
/// visible, only the Pod's own annotations count.
pub struct Standalone;

impl ClusterView for Standalone {
    fn namespace_opt_in(&self, _namespace: &str) -> NamespaceOptIn {
        NamespaceOptIn::Unknown
    }

    fn network(&self, _namespace: &str, _name: &str) -> Lookup {
        Lookup::Unsupported
    }
}

/// What the decision makes of a Pod being created.
#[derive(Debug)]
pub enum Decided {
    /// Admitted as it is: not opted in, opted out, or already injected.
    Skip(Skip),
    /// Injected by a compiled admission policy (which cannot see Networks) and naming a
    /// Network it has not joined: only the join is added, or refused.
    JoinOnly {
        network: String,
        join: Result<Extras, JoinError>,
    },
    /// Opted in: the template chosen for it and the Network it joins, or why none.
    OptedIn(OptIn, Result<Chosen, NotChosen>),
}

/// Why an opted-in Pod has no template.
#[derive(Debug)]
pub enum NotChosen {
    /// No template is loaded (yet): the live ConfigMap never parsed.
    NoTemplates,
    /// The template it names (by annotation or its namespace's label) does not exist.
    Unknown(InjectError),
}

/// The template chosen for an opted-in Pod, and what joining its Network adds.
#[derive(Debug)]
pub struct Chosen {
    pub template: Arc<Template>,
    join: Join,
}

#[derive(Debug)]
enum Join {
    None,
    /// Named, but Networks cannot be seen here (no cluster): nothing is added.
    Unseen(String),
    Joins(Extras),
    Refused(JoinError),
}

/// Why a chosen template is not injected: the Pod's own fault with the template, or the
/// Network's (named only when the template finds no fault).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Pod(#[from] InjectError),
    #[error(transparent)]
    Network(#[from] JoinError),
}

impl Chosen {
    /// The Network the Pod names where Networks cannot be seen: it is not joined here.
    pub fn unseen_network(&self) -> Option<&str> {
        match &self.join {
            Join::Unseen(name) => Some(name),
            _ => None,
        }
    }

    /// The plan, the join included: the template's own fault comes first, then the
    /// Network's refusal, so every path (the compiled policies, which cannot see
    /// Networks, among them) names the same fault.
    pub fn plan(&self, pod: &PodView<'_>) -> Result<Decision<'_>, Refused> {
        let extras = match &self.join {
            Join::Joins(extras) => extras,
            Join::Refused(err) => {
                plan(pod, &self.template, &Extras::default())?;
                return Err(Refused::Network(err.clone()));
            }
            Join::None | Join::Unseen(_) => &Extras::default(),
        };
        Ok(plan(pod, &self.template, extras)?)
    }

    /// The plan without the join: what a compiled admission policy injects.
    pub fn plan_without_join(&self, pod: &PodView<'_>) -> Result<Decision<'_>, InjectError> {
        plan(pod, &self.template, &Extras::default())
    }
}

/// Decides for a Pod created in `namespace`, its annotations opting it in or not as
/// `annotations` says. `templates` is asked only for an opted-in Pod (the live set, or
/// `None` before one is loaded).
pub fn decide<S: Deref<Target = TemplateSet>>(
    pod: &PodView<'_>,
    namespace: &str,
    annotations: AnnotationOptIn,
    templates: impl FnOnce() -> Option<S>,
    cluster: &dyn ClusterView,
) -> Decided {
    if let Some(join_only) = join_only(pod, namespace, annotations, cluster) {
        return join_only;
    }
    match policy::decide(pod.meta(), cluster.namespace_opt_in(namespace), annotations) {
        Err(skip) => Decided::Skip(skip),
        Ok(opt_in) if pod.host_network() => {
            let set = templates();
            if let Some(skip) = host_network(pod, set.as_deref()) {
                return Decided::Skip(skip);
            }
            Decided::OptedIn(opt_in, choose(pod, namespace, move || set, cluster))
        }
        Ok(opt_in) => Decided::OptedIn(opt_in, choose(pod, namespace, templates, cluster)),
    }
}

/// A Pod on the node's network (`hostNetwork: true`) is left alone unless the template it
/// names by its own annotation sets `allowHostNetwork: true`: the API server makes each
/// port of such a Pod a host port, so the sidecar's ports would be the node's and a second
/// such Pod on a node would stay Pending. By its own annotation only (not its namespace's
/// label, not the default): what the webhook entries' conditions see of a Pod, so they
/// send none of the others, whatever the ConfigMap holds. `None`: not left alone for it.
pub fn host_network(pod: &PodView<'_>, templates: Option<&TemplateSet>) -> Option<Skip> {
    if !pod.host_network() {
        return None;
    }
    let Some(name) = named_template(pod) else {
        return Some(Skip::HostNetwork { template: None });
    };
    match templates.and_then(|set| set.get(name)) {
        Some(template) if template.spec.allow_host_network => None,
        _ => Some(Skip::HostNetwork {
            template: Some(name.to_string()),
        }),
    }
}

/// A Pod carrying the status annotation (a compiled policy injected it) that names a
/// Network it has not joined, opted in and not out: the webhook adds only the join.
/// `None` for any other Pod, and where Networks cannot be seen.
fn join_only(
    pod: &PodView<'_>,
    namespace: &str,
    opt_in: AnnotationOptIn,
    cluster: &dyn ClusterView,
) -> Option<Decided> {
    // Not sent by the webhook entries (see `host_network`); never injected by a policy.
    if pod.host_network() && named_template(pod).is_none() {
        return None;
    }
    let annotations = pod.annotations_for_policy();
    annotations?.flag(STATUS_ANNOTATION)?;
    let name = join::network_name(annotations)?;
    if join::joined(pod, name) {
        return None;
    }
    policy::opted_in(pod.meta(), cluster.namespace_opt_in(namespace), opt_in).ok()?;
    let join = match join::extras(name, namespace, cluster.network(namespace, name), annotations) {
        Ok(Some(extras)) => Ok(extras),
        Ok(None) => return None,
        Err(err) => Err(err),
    };
    Some(Decided::JoinOnly {
        network: name.to_string(),
        join,
    })
}

/// The template for an opted-in Pod and the Network it joins. The Network is looked up
/// first, but a refusal of it is held until the template is known: the template's own
/// fault is named before it ([`Chosen::plan`]).
pub fn choose<S: Deref<Target = TemplateSet>>(
    pod: &PodView<'_>,
    namespace: &str,
    templates: impl FnOnce() -> Option<S>,
    cluster: &dyn ClusterView,
) -> Result<Chosen, NotChosen> {
    let annotations = pod.annotations_for_policy();
    let join = match join::network_name(annotations) {
        None => Join::None,
        Some(name) => match join::extras(name, namespace, cluster.network(namespace, name), annotations) {
            Ok(Some(extras)) => Join::Joins(extras),
            Ok(None) => Join::Unseen(name.to_string()),
            Err(err) => Join::Refused(err),
        },
    };
    let templates = templates().ok_or(NotChosen::NoTemplates)?;
    let template = select_template(&templates, pod, namespace, || cluster.namespace_template(namespace))
        .map_err(NotChosen::Unknown)?;
    Ok(Chosen { template, join })
}

/// The template the Pod names with its own annotation, if it names one.
fn named_template<'p>(pod: &'p PodView<'_>) -> Option<&'p str> {
    pod.annotations()
        .and_then(|a| a.text(TEMPLATE_ANNOTATION))
        .map(str::trim)
        .filter(|n| !n.is_empty())
}

/// Picks the template the Pod names, else the one `namespace`'s
/// [`super::NAMESPACE_TEMPLATE_LABEL`] names (`namespace_template`, asked only then: the Pod's
/// own annotation wins), else the default.
pub fn select_template(
    templates: &TemplateSet,
    pod: &PodView<'_>,
    namespace: &str,
    namespace_template: impl FnOnce() -> Option<String>,
) -> Result<Arc<Template>, InjectError> {
    let available = || {
        templates
            .names()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let unknown = |name: &str| InjectError::UnknownTemplate {
        name: name.to_string(),
        available: available(),
    };
    if let Some(name) = named_template(pod) {
        return templates.get(name).cloned().ok_or_else(|| unknown(name));
    }
    if let Some(name) = namespace_template() {
        return match templates.get(&name) {
            Some(template) => Ok(template.clone()),
            None => Err(InjectError::UnknownNamespaceTemplate {
                name,
                namespace: namespace.to_string(),
                available: available(),
            }),
        };
    }
    templates
        .get(DEFAULT_TEMPLATE)
        .cloned()
        .ok_or_else(|| InjectError::NoDefaultTemplate { available: available() })
}

#[cfg(test)]
mod tests;
