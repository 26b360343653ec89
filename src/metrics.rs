//! Prometheus metrics, served as text on the admin listener's `/metrics`.

use std::collections::{BTreeMap, HashSet};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// How one admission request ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed with a patch that injects the template.
    Injected,
    /// Allowed unchanged (not opted in, opted out, already injected, not a Pod CREATE).
    Skipped,
    /// Denied with a reason (collision, unknown template, unreadable Pod).
    Denied,
    /// Answered with an HTTP error (malformed body, oversize, not a review).
    Invalid,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: Outcome,
    pub dry_run: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TemplateLabels {
    pub template: String,
}

/// A live template and its revision (`template_revision`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TemplateRevisionLabels {
    pub template: String,
    pub revision: String,
}

/// How one automatic rollout of a workload ended: `completed` or `failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    pub result: &'static str,
}

/// The values of [`RolloutLabels::result`].
pub const ROLLOUT_RESULTS: [&str; 2] = ["completed", "failed"];

/// How Pods are injected (`serve --injection`): `policy` or `webhook`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    pub mode: String,
}

/// What the policy sync did to one compiled object: `apply` or `delete`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyWriteLabels {
    pub action: String,
}

/// A namespace, for the per-namespace gauges (`pods_uninjected`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabels {
    pub namespace: String,
}

/// How one reconcile of a Network ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Reconciled; something was written (status, backend object, finalizer).
    Changed,
    /// Reconciled; the cluster already matched, nothing was written.
    Unchanged,
    /// A write met a stale copy (HTTP 409/422); requeued shortly, not a failure.
    Conflict,
    /// Failed; requeued with backoff.
    Error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub result: ReconcileResult,
}

/// Why a reconcile of a Network failed: one per variant of
/// `controller::Error`, a fixed set so the label's cardinality is too.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReconcileErrorReason {
    /// `no_namespace`: the Network came without `metadata.namespace`.
    NoNamespace,
    /// `finalizer`: adding or removing the finalizer failed (an API error).
    Finalizer,
    /// `backend_unavailable`: the backend is missing from the cluster (the NAD CRD).
    BackendUnavailable,
    /// `backend_conflict`: the backend object belongs to someone else.
    BackendConflict,
    /// `backend`: an API call of the backend failed (transient or permission error).
    Backend,
    /// `status`: patching the Network's status failed (an API error).
    Status,
    /// `pods`: listing the Pods that use a Network being deleted failed (an API error).
    Pods,
}

impl ReconcileErrorReason {
    /// Every reason, each shown (at 0) from the start.
    pub const ALL: [ReconcileErrorReason; 7] = [
        ReconcileErrorReason::NoNamespace,
        ReconcileErrorReason::Finalizer,
        ReconcileErrorReason::BackendUnavailable,
        ReconcileErrorReason::BackendConflict,
        ReconcileErrorReason::Backend,
        ReconcileErrorReason::Status,
        ReconcileErrorReason::Pods,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileErrorReason::NoNamespace => "no_namespace",
            ReconcileErrorReason::Finalizer => "finalizer",
            ReconcileErrorReason::BackendUnavailable => "backend_unavailable",
            ReconcileErrorReason::BackendConflict => "backend_conflict",
            ReconcileErrorReason::Backend => "backend",
            ReconcileErrorReason::Status => "status",
            ReconcileErrorReason::Pods => "pods",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileErrorLabels {
    pub reason: ReconcileErrorReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    /// `configmap`, `namespaces`, `networks`, `member_pods`.
    pub store: &'static str,
}

/// Which listener a connection metric is about: `webhook` or `admin`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: &'static str,
}

/// A connection closed by the server because a phase took too long.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TimeoutLabels {
    pub listener: &'static str,
    /// `tls_handshake`, `first_request` or `idle`.
    pub phase: &'static str,
}

/// One request to the Kubernetes API, as `crate::client` classifies it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: &'static str,
    /// The resource's plural, with its subresource: `networks`, `networks/status`,
    /// `network-attachment-definitions`, `events`, `leases`, ...
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum LoadResult {
    Success,
    Error,
}

// Label values are lowercase, as Prometheus convention has it (the derive would keep
// the variant's case).
impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let value = match self {
            Outcome::Injected => "injected",
            Outcome::Skipped => "skipped",
            Outcome::Denied => "denied",
            Outcome::Invalid => "invalid",
        };
        EncodeLabelValue::encode(&value, encoder)
    }
}

impl EncodeLabelValue for ReconcileResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let value = match self {
            ReconcileResult::Changed => "changed",
            ReconcileResult::Unchanged => "unchanged",
            ReconcileResult::Conflict => "conflict",
            ReconcileResult::Error => "error",
        };
        EncodeLabelValue::encode(&value, encoder)
    }
}

impl EncodeLabelValue for ReconcileErrorReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

impl EncodeLabelValue for LoadResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let value = match self {
            LoadResult::Success => "success",
            LoadResult::Error => "error",
        };
        EncodeLabelValue::encode(&value, encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoadLabels {
    pub result: LoadResult,
}

/// A label set of one name (`template`, `namespace`), for [`ShownSeries`].
pub trait NameLabel: Clone + std::hash::Hash + Eq {
    fn named(name: &str) -> Self;
}

impl NameLabel for TemplateLabels {
    fn named(name: &str) -> Self {
        TemplateLabels {
            template: name.to_string(),
        }
    }
}

impl NameLabel for NamespaceLabels {
    fn named(name: &str) -> Self {
        NamespaceLabels {
            namespace: name.to_string(),
        }
    }
}

/// A gauge family whose series follow values computed elsewhere, by name (`pods_stale` by
/// template, `pods_uninjected` by namespace): set whole, when a name no longer has a value
/// its series is removed (a deleted template or an empty namespace does not linger), or
/// one name at a time, exactly as setting the whole would.
pub struct ShownSeries<L> {
    family: Family<L, Gauge>,
    shown: HashSet<String>,
}

impl<L: NameLabel> ShownSeries<L> {
    pub fn new(family: Family<L, Gauge>) -> ShownSeries<L> {
        ShownSeries {
            family,
            shown: HashSet::new(),
        }
    }

    /// Sets the family to `values`; the names shown before and absent now lose their series.
    pub fn show_all(&mut self, values: &BTreeMap<String, i64>) {
        for name in self.shown.iter().filter(|n| !values.contains_key(*n)) {
            self.family.remove(&L::named(name));
        }
        for (name, value) in values {
            self.family.get_or_create(&L::named(name)).set(*value);
        }
        self.shown = values.keys().cloned().collect();
    }

    /// Sets one name's series (`None`: removes it), as [`ShownSeries::show_all`] would.
    pub fn show_one(&mut self, name: &str, value: Option<i64>) {
        match value {
            Some(value) => {
                self.family.get_or_create(&L::named(name)).set(value);
                self.shown.insert(name.to_string());
            }
            None => {
                if self.shown.remove(name) {
                    self.family.remove(&L::named(name));
                }
            }
        }
    }

    /// The names that have a series now.
    pub fn shown(&self) -> &HashSet<String> {
        &self.shown
    }
}

/// All metrics of the process. Cheap to clone: every field is an `Arc` inside.
#[derive(Clone)]
pub struct Metrics {
    pub admission_requests: Family<OutcomeLabels, Counter>,
    pub admission_duration: Histogram,
    pub injections: Family<TemplateLabels, Counter>,
    pub template_loads: Family<LoadLabels, Counter>,
    pub templates_loaded: Gauge,
    /// 1 for each live template at its revision: what this replica injects with now (read
    /// by `rollout` from every replica before it restarts anything).
    pub template_revision: Family<TemplateRevisionLabels, Gauge>,
    /// Live templates with values the API server refuses, served because they were live
    /// before the injector checked values (`live::reload`); 0 normally.
    pub templates_refused_values: Gauge,
    pub tls_reloads: Family<LoadLabels, Counter>,
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Failed reconciles by reason (each also counted as `reconciles{result="error"}`).
    pub reconcile_errors: Family<ReconcileErrorLabels, Counter>,
    pub reconcile_duration: Histogram,
    /// 1 while this replica holds the controller Lease (or leader election is off).
    pub leader: Gauge,
    pub store_objects: Family<StoreLabels, Gauge>,
    /// Injected Pods whose template revision is older than the live template's
    /// (`crate::stale`).
    pub pods_stale: Family<TemplateLabels, Gauge>,
    /// Opted-in Pods without the sidecar, per namespace (`crate::uninjected`); no series
    /// at all when `serve --watch-uninjected=false`.
    pub pods_uninjected: Family<NamespaceLabels, Gauge>,
    /// Connections open now, per listener.
    pub connections_open: Family<ListenerLabels, Gauge>,
    /// Connections accepted and closed at once because the listener was at its cap.
    pub connections_rejected: Family<ListenerLabels, Counter>,
    /// Connections the server closed because a phase timed out.
    pub connection_timeouts: Family<TimeoutLabels, Counter>,
    /// Failed `accept(2)` calls (EMFILE, ENFILE, ...), each followed by a backoff.
    pub accept_errors: Family<ListenerLabels, Counter>,
    /// Request body bytes reserved in the global in-flight budget now.
    pub body_budget_bytes: Gauge,
    /// Requests answered 503 because the body budget had no room within the wait.
    pub body_budget_rejections: Counter,
    pub api_requests: Family<ApiLabels, Counter>,
    /// 1 for the injection mode this replica runs in, 0 for the other.
    pub injection_mode: Family<ModeLabels, Gauge>,
    /// Compiled admission policies written by the Lease holder (`policy_sync`).
    pub policy_writes: Family<PolicyWriteLabels, Counter>,
    /// Passes of the policy sync that failed (each retried with backoff).
    pub policy_sync_errors: Counter,
    /// 1 while the Lease holder's compiled policies match the live templates.
    pub policies_in_step: Gauge,
    /// Workloads the automatic rollout restarted, by how their rollout ended.
    pub rollouts: Family<RolloutLabels, Counter>,
    /// Workloads the automatic rollout has restarted and is waiting for now.
    pub rollouts_in_progress: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them under the `envoy_injector` prefix.
    pub fn register(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            admission_requests: Family::default(),
            // 50 µs .. ~1.6 s: admission is expected to sit in the sub-millisecond buckets.
            admission_duration: Histogram::new([
                0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1.0,
            ]),
            injections: Family::default(),
            template_loads: Family::default(),
            templates_loaded: Gauge::default(),
            template_revision: Family::default(),
            templates_refused_values: Gauge::default(),
            tls_reloads: Family::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            // 1 ms .. ~16 s: a reconcile makes a few API calls.
            reconcile_duration: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                0.001, 2.0, 15,
            )),
            leader: Gauge::default(),
            store_objects: Family::default(),
            pods_stale: Family::default(),
            pods_uninjected: Family::default(),
            connections_open: Family::default(),
            connections_rejected: Family::default(),
            connection_timeouts: Family::default(),
            accept_errors: Family::default(),
            body_budget_bytes: Gauge::default(),
            body_budget_rejections: Counter::default(),
            api_requests: Family::default(),
            injection_mode: Family::default(),
            policy_writes: Family::default(),
            policy_sync_errors: Counter::default(),
            policies_in_step: Gauge::default(),
            rollouts: Family::default(),
            rollouts_in_progress: Gauge::default(),
        };
        let registry = registry.sub_registry_with_prefix("envoy_injector");
        registry.register(
            "admission_requests",
            "Admission requests by outcome (injected, skipped, denied, invalid) and dry-run",
            metrics.admission_requests.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Time to answer one admission request, from body read to response encoded",
            metrics.admission_duration.clone(),
        );
        registry.register(
            "injections",
            "Pods injected, by template name",
            metrics.injections.clone(),
        );
        registry.register(
            "template_loads",
            "Template configuration loads by result (success, error)",
            metrics.template_loads.clone(),
        );
        registry.register(
            "templates_loaded",
            "Number of templates in the live configuration",
            metrics.templates_loaded.clone(),
        );
        registry.register(
            "templates_refused_values",
            "Live templates with values the API server refuses, served because they were live before the injector checked values",
            metrics.templates_refused_values.clone(),
        );
        registry.register(
            "template_revision",
            "1 for each live template (label template) at its revision (label revision): what this replica injects with",
            metrics.template_revision.clone(),
        );
        registry.register(
            "tls_reloads",
            "Serving certificate reloads by result (success, error)",
            metrics.tls_reloads.clone(),
        );
        registry.register(
            "reconciles",
            "Network reconciles by result (changed, unchanged, conflict, error)",
            metrics.reconciles.clone(),
        );
        for reason in ReconcileErrorReason::ALL {
            let _ = metrics.reconcile_errors.get_or_create(&ReconcileErrorLabels { reason });
        }
        registry.register(
            "reconcile_errors",
            "Failed Network reconciles by reason (no_namespace, finalizer, backend_unavailable, backend_conflict, backend, status)",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time to reconcile one Network",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica runs the Network controller (holds the Lease), else 0",
            metrics.leader.clone(),
        );
        registry.register(
            "store_objects",
            "Objects in each shared cache store",
            metrics.store_objects.clone(),
        );
        registry.register(
            "pods_stale",
            "Injected Pods whose template revision is older than the live template's, by template",
            metrics.pods_stale.clone(),
        );
        registry.register(
            "pods_uninjected",
            "Pods opted in (by annotation, or by namespace label and not opted out) that carry no sidecar status annotation, by namespace",
            metrics.pods_uninjected.clone(),
        );
        registry.register(
            "connections_open",
            "Connections open now, by listener (webhook, admin)",
            metrics.connections_open.clone(),
        );
        registry.register(
            "connections_rejected",
            "Connections accepted and closed at once because the listener had --max-connections open",
            metrics.connections_rejected.clone(),
        );
        registry.register(
            "connection_timeouts",
            "Connections closed by the server because a phase timed out, by listener and phase (tls_handshake, first_request, idle)",
            metrics.connection_timeouts.clone(),
        );
        registry.register(
            "accept_errors",
            "Failed accepts (out of file descriptors, ...), by listener; each is followed by a backoff",
            metrics.accept_errors.clone(),
        );
        registry.register(
            "body_budget_bytes",
            "Request body bytes reserved now in the in-flight budget (--max-inflight-body-bytes)",
            metrics.body_budget_bytes.clone(),
        );
        registry.register(
            "body_budget_rejections",
            "Requests answered 503 because the in-flight body budget had no room within 1 s",
            metrics.body_budget_rejections.clone(),
        );
        registry.register(
            "api_requests",
            "Requests sent to the Kubernetes API, by verb and resource (after the client-side rate limit)",
            metrics.api_requests.clone(),
        );
        registry.register(
            "injection_mode",
            "1 for the injection mode this replica runs in (policy: compiled admission policies; webhook), 0 for the other",
            metrics.injection_mode.clone(),
        );
        registry.register(
            "policy_writes",
            "Compiled admission policies written by the Lease holder, by action (apply, delete)",
            metrics.policy_writes.clone(),
        );
        registry.register(
            "policy_sync_errors",
            "Passes of the admission-policy sync that failed (each retried with backoff)",
            metrics.policy_sync_errors.clone(),
        );
        registry.register(
            "policies_in_step",
            "1 while this replica holds the Lease in policy mode and the compiled admission policies match the live templates, else 0",
            metrics.policies_in_step.clone(),
        );
        for result in ROLLOUT_RESULTS {
            let _ = metrics.rollouts.get_or_create(&RolloutLabels { result });
        }
        registry.register(
            "rollouts",
            "Workloads restarted by the automatic rollout (namespaces labelled sidecar.samplecrd.k8s.io/rollout=auto), by result (completed, failed)",
            metrics.rollouts.clone(),
        );
        registry.register(
            "rollouts_in_progress",
            "Workloads the automatic rollout has restarted and waits for now",
            metrics.rollouts_in_progress.clone(),
        );
        metrics
    }

    /// Counts one template load; `Some(n)` is a success leaving `n` templates live.
    pub fn template_load(&self, loaded: Option<usize>) {
        let result = if loaded.is_some() {
            LoadResult::Success
        } else {
            LoadResult::Error
        };
        self.template_loads.get_or_create(&LoadLabels { result }).inc();
        if let Some(count) = loaded {
            self.templates_loaded.set(count as i64);
        }
    }

    /// Shows the live templates' revisions (template → revision) in `template_revision`,
    /// and only those.
    pub fn templates_live<'t>(&self, revisions: impl IntoIterator<Item = (&'t str, &'t str)>) {
        self.template_revision.clear();
        for (template, revision) in revisions {
            self.template_revision
                .get_or_create(&TemplateRevisionLabels {
                    template: template.to_string(),
                    revision: revision.to_string(),
                })
                .set(1);
        }
    }

    /// Metrics registered in a throwaway registry, for tests and offline commands.
    pub fn unregistered() -> Metrics {
        Metrics::register(&mut Registry::default())
    }
}

/// Encodes a registry in the Prometheus/OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}
