//! What `check` reports: the whole [`Report`] (`-o json` is its serde form, `render`
//! its text) and, per Pod, the verdict and the rule that decided it ([`PodReport`]).
//! The types and what follows from them alone (`healthy`, `is_problem`): `decision` fills
//! them, `render` writes them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use crate::cluster::drift::{Difference, DriftedPod};
use crate::cluster::health::{Check, Status};
use crate::cluster::stale::StaleGroup;
use crate::policies::Path;
use crate::template::pod_security::{Finding, Level, ModePolicy};

/// Everything `check` found. `-o json` prints exactly this.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The injector's namespace.
    pub namespace: String,
    /// False when a check failed or a Pod would be denied; the exit code follows it.
    pub healthy: bool,
    pub checks: Vec<Check>,
    pub pods: Vec<PodReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<Vec<StaleGroup>>,
    /// `--missing`: opted-in Pods without the sidecar, by workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<MissingGroup>>,
    /// `--drift`: injected Pods whose sidecar was changed after injection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<Vec<DriftedPod>>,
    /// Set when no cluster was consulted: what the report could not know, said once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offline: Option<String>,
    /// Documents of `-f` that `inject` refuses too (not an object, no `kind`, a Pod
    /// template that is not an object), each named with why; any makes the report unhealthy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

impl Report {
    /// Puts the parts together; `healthy` follows from them.
    pub fn new(namespace: String, checks: Vec<Check>, pods: Vec<PodReport>, stale: Option<Vec<StaleGroup>>) -> Report {
        let healthy = !checks.iter().any(|c| c.status == Status::Fail) && !pods.iter().any(PodReport::is_problem);
        Report {
            namespace,
            healthy,
            checks,
            pods,
            stale,
            missing: None,
            drift: None,
            offline: None,
            unreadable: Vec::new(),
        }
    }

    /// Adds the documents of `-f` that could not be explained, as `inject` refuses them.
    pub fn with_unreadable(mut self, unreadable: Vec<String>) -> Report {
        self.healthy &= unreadable.is_empty();
        self.unreadable = unreadable;
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Would be injected.
    Inject,
    /// Would be admitted unchanged.
    Skip,
    /// Would be refused.
    Deny,
    /// Cannot be told: the ConfigMap does not parse, so the injector runs on its last good
    /// templates, which only it can see.
    Unknown,
}

/// The rule that decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    Annotation,
    LegacyAnnotation,
    Label,
    NamespaceLabel,
    OptedOut,
    NotOptedIn,
    AlreadyInjected,
    /// On the node's network, and its template does not allow it.
    HostNetwork,
    WebhookAbsent,
    WebhookNotCalled,
    WebhookError,
    NoTemplates,
    UnknownTemplate,
    Network,
    Collision,
    InvalidPod,
    /// An override annotation the template refuses.
    Override,
    /// A Guaranteed Pod that an added container without cpu or memory would make Burstable.
    QosClass,
}

/// What the API server does with one webhook entry for this Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Call {
    Called,
    NotCalled,
    /// A matchCondition cannot be evaluated: the entry's failurePolicy decides.
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebhookMatch {
    pub name: String,
    pub call: Call,
    pub reason: String,
    /// The entry's failurePolicy (`Fail` when unset, as the API server defaults it).
    #[serde(skip)]
    pub fail_closed: bool,
}

/// The template a Pod got or would get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRef {
    pub name: String,
    pub revision: String,
    /// The live template's revision, when it differs (or `None` when it is the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_revision: Option<String>,
    /// True when the Pod carries an older revision than the live template (or a template
    /// that no longer exists).
    pub stale: bool,
}

/// One override annotation of the Pod: applied, or why it is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OverrideReport {
    pub name: String,
    pub value: String,
    pub applied: bool,
    /// Where it lands (`resources.requests.cpu of container envoy`), or why it is refused.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodReport {
    pub subject: String,
    pub verdict: Verdict,
    pub rule: Rule,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<TemplateRef>,
    /// What the injection adds (`container envoy`, `volume envoy-conf`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub adds: Vec<String>,
    /// The values the injected containers take from the Pod (`fromPod`), and where from:
    /// `env APP_PORT of container envoy: "80", the one TCP port ...`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// What the injection does to resources: each Pod-level value it writes and why
    /// (`pod-level cpu request 200m → 300m: the sidecar's 100m added`), then the Pod's QoS
    /// class and how it is kept (`QoS Guaranteed kept: envoy's cpu request set to its limit 1`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// The Pod's override annotations, each applied or refused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OverrideReport>,
    pub webhooks: Vec<WebhookMatch>,
    /// Which path acts on an opted-in Pod (none when not opted in, or not known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathReport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// An injected Pod at the live revision: each field of its sidecar that differs from
    /// what the template makes of it (filled in by `check` from the stored Pod).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Difference>,
    /// The Pod Security its namespace asks for and whether what the template adds meets
    /// it (a Pod that would be injected, or is, by a template the injector has).
    #[serde(rename = "podSecurity", skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<PodSecurityReport>,
}

impl PodReport {
    /// A Pod that would be refused is something wrong, by the injector or, once injected,
    /// by the level its namespace enforces; one that is simply not injected is not.
    pub fn is_problem(&self) -> bool {
        self.verdict == Verdict::Deny || (self.verdict == Verdict::Inject && self.refused_by_pod_security())
    }

    /// Whether the API server's Pod Security admission refuses the Pod once the template's
    /// additions are in it.
    pub fn refused_by_pod_security(&self) -> bool {
        self.pod_security.as_ref().is_some_and(PodSecurityReport::refused)
    }
}

/// What is known of a namespace's labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamespaceLabels {
    /// Read from the cluster or declared in the file.
    Known,
    /// The namespace was not found in the cluster: the labels it is created with decide.
    NotFound,
    /// No cluster consulted and the file does not declare it.
    Unknown,
}

/// The Pod Security level a Pod's namespace asks for, per mode, and whether what its
/// template adds meets it, field by field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSecurityReport {
    pub namespace: String,
    pub labels: NamespaceLabels,
    /// `enforce`, `warn` and `audit`, each with whether the additions meet it (none when
    /// the labels are not known).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modes: Vec<ModeReport>,
    pub template: String,
    /// The strictest level the additions meet, at the version `enforce` pins.
    pub meets: Level,
}

impl PodSecurityReport {
    /// Whether the level `enforce` applies is broken: the API server refuses the Pod.
    pub fn refused(&self) -> bool {
        self.modes
            .iter()
            .any(|m| m.policy.mode == crate::template::pod_security::Mode::Enforce && !m.met)
    }
}

/// One mode of the namespace and what the template's additions do to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModeReport {
    #[serde(flatten)]
    pub policy: ModePolicy,
    pub met: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// Which path acts on an opted-in Pod: the policy and its binding, or the webhook and why
/// no policy acts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathReport {
    pub via: Path,
    /// The policy's kind (`MutatingAdmissionPolicy` injects, `ValidatingAdmissionPolicy`
    /// denies), its name and its binding's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    /// Policy: what the webhook adds after it (the join of a Network), if anything;
    /// webhook: why no policy acts.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When the policy or its binding, the later, was created (`--missing` reads it).
    #[serde(skip)]
    pub since: Option<(String, Time)>,
}

impl PathReport {
    pub fn webhook(why: String) -> PathReport {
        PathReport {
            via: Path::Webhook,
            kind: None,
            policy: None,
            binding: None,
            reason: why,
            since: None,
        }
    }
}

/// Why a Pod was most likely not injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The MutatingWebhookConfiguration does not exist now.
    NoWebhookConfiguration,
    /// The injector would refuse the Pod now: recreating it fails until that is fixed.
    WouldBeDenied,
    /// Created before its Namespace's opt-in label was set.
    BeforeNamespaceLabel,
    /// Created before the admission policy that injects it now, or its binding, existed.
    BeforePolicies,
    /// A policy injects it now and predates it: cannot be told why it was missed.
    PolicyUnknown,
    /// Created before the MutatingWebhookConfiguration: the injector was not installed, or
    /// was being reinstalled.
    BeforeWebhookConfiguration,
    /// The configuration does not send this Pod to the injector now (selectors, rules,
    /// matchConditions).
    NotSentToWebhook,
    /// Sent to a webhook with `failurePolicy: Ignore`: the injector was unreachable or too
    /// slow then, and the API server admitted the Pod unchanged.
    FailurePolicyIgnore,
    /// None of the above can be told.
    Unknown,
}

/// One reason, worded with its evidence, and how many of a workload's Pods it explains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missed {
    pub reason: Reason,
    pub detail: String,
    pub pods: usize,
}

/// Pods of one workload that should carry the sidecar and do not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MissingGroup {
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `ReplicaSet`, `Job`, ... or `Pod` for a
    /// Pod nothing owns.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub pods: Vec<String>,
    /// Why they were missed, most Pods first.
    pub reasons: Vec<Missed>,
    /// What replaces the Pods with injected ones.
    pub fix: String,
}

impl MissingGroup {
    pub fn workload(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}
