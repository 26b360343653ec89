//! The Helm chart `charts/envoy-injector`, checked with the real Helm v4 engine (no
//! cluster needed; the install, upgrade, rollback and uninstall on a cluster are tier
//! `helm` of `tests/pods`):
//!
//! - `Chart.yaml`: apiVersion v2, appVersion the crate's; `crds/` is `manifests/crd.yaml`;
//!   the `templates` value is the embedded `config` and `classic`, byte for byte;
//! - `helm lint --strict` is clean, with the defaults and with every option turned on;
//! - `values.schema.json` refuses a bad value, naming it, and checks every value; every
//!   value is documented in `values.yaml` and `docs/install.md`;
//! - with default values the chart renders the objects `kubectl kustomize manifests/`
//!   renders, object by object, but for the differences Helm imposes (listed in
//!   [`render::HELM_IMPOSES`] and in docs/install.md);
//! - each value renders what it promises (image digest, injection mode, Networks off, the
//!   three TLS modes with the RBAC they need, the PodDisruptionBudget at one replica, the
//!   ServiceMonitor, scheduling, extra labels and args, templates, another namespace
//!   templated into every selector).
//!
//! cert-manager and the Prometheus Operator cannot run here: their objects are proven by
//! render, lint and schema only.
//!
//! The engine is PyPI's helm-python-sdk behind `scripts/helm.py` (`make helm-sdk`);
//! without it the tests that need it are reported `ignored`, with why and how to install
//! it, by this binary's own harness (`harness = false`, `tests/common/harness.rs`), except
//! under CI, where they fail.

#[path = "../common/kit.rs"]
mod common;
mod options;
mod render;
mod values;

fn main() -> std::process::ExitCode {
    common::harness::main(
        "chart",
        common::harness::tests![
            values::chart_metadata_and_crds_follow_the_crate,
            values::the_templates_value_is_the_embedded_config_and_classic,
            values::every_value_is_in_the_schema_and_documented_in_docs_install,
            values::lint_strict_is_clean_with_the_defaults_and_every_option,
            values::a_bad_value_is_refused_naming_it,
            options::image_injection_networks_scheduling_and_extras_render_as_set,
            options::templates_replace_or_drop_the_shipped_ones,
            options::the_pod_disruption_budget_never_blocks_a_drain_at_one_replica,
            options::each_tls_mode_renders_its_certificate_wiring_and_only_the_rights_it_needs,
            options::the_service_monitor_scrapes_the_admin_port,
            options::the_release_namespace_is_templated_into_every_selector,
            options::without_annotation_opt_in_no_webhook_entry_reads_annotations,
            options::auto_rollout_is_off_unless_enabled_and_passes_its_interval_and_timeout,
            render::default_values_render_the_objects_of_the_kustomization,
            render::auto_rollout_renders_the_kustomize_component,
            render::helm_labels_are_on_every_object_and_the_selectors_are_the_kustomization_s,
        ],
    )
}
