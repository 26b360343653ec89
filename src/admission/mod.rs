//! AdmissionReview v1 in, AdmissionReview v1 out. No I/O: the HTTP layer hands over the
//! body bytes and sends back what this returns.
//!
//! The body is parsed once, into only the fields this webhook reads (`review`): of the
//! Pod, only what the decision reads, in the exact shape the API server sent, which is
//! what the patch must address. Going through kube's `AdmissionReview<DynamicObject>`
//! instead cost 20x the engine's time per request (its flattened fields make serde buffer
//! the whole object, then it has to be re-serialised).

use std::sync::Arc;
use std::time::Instant;

use kube::core::admission::Operation;
use tracing::{debug, info_span, warn};

use crate::inject::join::JoinError;
use crate::inject::{
    self, AnnotationOptIn, ClusterView, Decided, Decision, Extras, NETWORK_ANNOTATION, NotChosen, PodView,
};
use crate::live::LiveTemplates;
use crate::metrics::{Metrics, Outcome, OutcomeLabels, TemplateLabels};

mod answer;
mod cluster;
mod review;
pub mod validate;

use answer::Answer;
pub use review::RequestError;
use review::RequestIn;
pub use validate::TemplateValidation;

/// The admission handler: templates and cluster views in, reviews out.
pub struct Admission {
    templates: Arc<LiveTemplates>,
    cluster: Arc<dyn ClusterView>,
    metrics: Metrics,
    /// Whether Pods' annotations opt them in (`serve --annotation-opt-in`).
    annotations: AnnotationOptIn,
}

impl Admission {
    pub fn new(templates: Arc<LiveTemplates>, cluster: Arc<dyn ClusterView>, metrics: Metrics) -> Admission {
        Admission {
            templates,
            cluster,
            metrics,
            annotations: AnnotationOptIn::On,
        }
    }

    /// Pods' annotations opt them in or not, as `annotations` says (on by default).
    pub fn with_annotation_opt_in(self, annotations: AnnotationOptIn) -> Admission {
        Admission { annotations, ..self }
    }

    /// Answers one HTTP body. `Ok` is a JSON AdmissionReview to send with status 200.
    pub fn handle(&self, body: &[u8]) -> Result<Vec<u8>, RequestError> {
        let started = Instant::now();
        let (outcome, dry_run, reply) = match self.review(body) {
            Ok((reply, outcome, dry_run)) => (outcome, dry_run, Ok(reply)),
            Err(err) => {
                warn!(error = %err, "bad admission request");
                (Outcome::Invalid, false, Err(err))
            }
        };
        self.metrics
            .admission_requests
            .get_or_create(&OutcomeLabels { outcome, dry_run })
            .inc();
        self.metrics.admission_duration.observe(started.elapsed().as_secs_f64());
        reply
    }

    /// The encoded response, what to count it as, and whether it was a dry run.
    fn review(&self, body: &[u8]) -> Result<(Vec<u8>, Outcome, bool), RequestError> {
        let request = review::parse(body)?;
        let dry_run = request.dry_run.unwrap_or(false);
        let span = info_span!(
            "admission",
            uid = %request.uid,
            namespace = request.namespace.as_deref().unwrap_or(""),
            name = request.name.as_deref().unwrap_or(""),
            dry_run,
        );
        let _entered = span.enter();
        let answer = self.decide(&request, dry_run);
        Ok((answer.encode(&request.uid), answer.outcome, dry_run))
    }

    fn decide(&self, request: &RequestIn<'_>, dry_run: bool) -> Answer {
        let is_pod = request.kind.group.is_empty() && request.kind.kind == "Pod";
        if !is_pod || request.operation != Operation::Create || request.sub_resource.is_some() {
            debug!(
                operation = ?request.operation,
                kind = %request.kind.kind,
                sub_resource = request.sub_resource.as_deref().unwrap_or(""),
                "passing through: not a Pod CREATE"
            );
            return Answer::allow(Vec::new());
        }
        let Some(pod) = request.object.as_ref().filter(|o| !o.is_none()) else {
            return Answer::deny("expected `request.object` to hold the Pod being created, found none".into());
        };
        // Before anything reads it as a Pod (the Network join included): a review that
        // says Pod but carries another object must not get a Pod's patch.
        if let Err(reason) = object_is_pod(pod) {
            return Answer::deny(reason);
        }
        let namespace = request.namespace.as_deref().unwrap_or_default();
        let mut warnings = inject::policy::unreadable_flags(pod.meta(), self.annotations);
        let templates = || self.templates.current();
        let chosen = match inject::decide(pod, namespace, self.annotations, templates, &*self.cluster) {
            Decided::Skip(skip) => {
                debug!(reason = %skip, "not injecting");
                return Answer::allow(warnings);
            }
            Decided::JoinOnly { network, join } => return join_only(pod, &network, join),
            Decided::OptedIn(_, Err(NotChosen::NoTemplates)) => {
                return Answer::deny("no injection template is loaded yet; retry shortly".into());
            }
            Decided::OptedIn(_, Err(NotChosen::Unknown(err))) => return Answer::deny(err.to_string()),
            Decided::OptedIn(_, Ok(chosen)) => chosen,
        };
        if let Some(name) = chosen.unseen_network() {
            warnings.push(format!(
                "annotation `{NETWORK_ANNOTATION}: {name}` is ignored: this injector runs without a cluster (--standalone) and cannot see Networks"
            ));
        }
        let template = &chosen.template;
        let plan = match chosen.plan(pod) {
            Ok(Decision::Inject(plan)) => plan,
            Ok(Decision::Skip(skip)) => {
                debug!(reason = %skip, "not injecting");
                return Answer::allow(warnings);
            }
            Err(err) => return Answer::deny(err.to_string()),
        };
        warnings.extend(plan.pod_values.iter().filter_map(|v| v.warning(template)));
        let patch = match inject::jsonpatch::render_ops(&plan, pod) {
            Ok(ops) => review::patch_base64(&ops),
            Err(err) => return Answer::deny(err.to_string()),
        };
        if !dry_run {
            self.metrics
                .injections
                .get_or_create(&TemplateLabels {
                    template: template.name.clone(),
                })
                .inc();
        }
        // Per request, so DEBUG: INFO must not grow with traffic (the periodic summary counts).
        debug!(template = %template.name, revision = %template.revision, containers = ?plan.status.containers, "injecting");
        Answer {
            allowed: true,
            message: None,
            patch: Some(patch),
            warnings,
            outcome: Outcome::Injected,
        }
    }
}

/// A Pod a compiled admission policy injected that names a Network it has not joined:
/// the policy cannot see Networks, so the webhook adds the join alone.
fn join_only(pod: &PodView<'_>, network: &str, join: Result<Extras, JoinError>) -> Answer {
    let extras = match join {
        Ok(extras) => extras,
        Err(err) => return Answer::deny(err.to_string()),
    };
    match inject::join::render(pod, &extras) {
        Ok(ops) => {
            debug!(network, "joining a Network after the injection");
            Answer {
                allowed: true,
                message: None,
                patch: Some(review::patch_base64(&ops)),
                warnings: Vec::new(),
                outcome: Outcome::Injected,
            }
        }
        Err(err) => Answer::deny(err.to_string()),
    }
}

/// The object's own apiVersion and kind must be the Pod's that `request.kind` named.
fn object_is_pod(object: &PodView<'_>) -> Result<(), String> {
    let api_version = object.api_version();
    let kind = object.kind();
    if api_version == Some("v1") && kind == Some("Pod") {
        return Ok(());
    }
    let found = |field: &str, value: Option<&str>| match value {
        Some(value) => format!("{field} {value:?}"),
        None => format!("no {field}"),
    };
    Err(format!(
        "expected `request.object` to be apiVersion v1, kind Pod (as `request.kind` says), found {} and {}",
        found("apiVersion", api_version),
        found("kind", kind)
    ))
}
