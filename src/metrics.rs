//! Prometheus metrics, served as text on the admin listener's `/metrics`.

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

/// All metrics of the process. Cheap to clone: every field is an `Arc` inside.
#[derive(Clone)]
pub struct Metrics {
    pub admission_requests: Family<OutcomeLabels, Counter>,
    pub admission_duration: Histogram,
    pub injections: Family<TemplateLabels, Counter>,
    pub template_loads: Family<LoadLabels, Counter>,
    pub templates_loaded: Gauge,
    pub tls_reloads: Family<LoadLabels, Counter>,
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
            tls_reloads: Family::default(),
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
            "tls_reloads",
            "Serving certificate reloads by result (success, error)",
            metrics.tls_reloads.clone(),
        );
        metrics
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
