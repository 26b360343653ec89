//! The install manifests, checked everywhere (`make test`; no cluster needed):
//!
//! - `kubectl kustomize manifests/` renders (without kubectl the tests that need it are
//!   reported `ignored` by this binary's harness, `tests/common/harness.rs`; under CI that
//!   fails, see `tests/common/kubectl.rs`);
//! - every rendered document, and every example, parses into its k8s-openapi type and
//!   re-serialises to the same JSON: a misspelt or misplaced field is dropped by the typed
//!   parse and fails here, naming the document and the field path;
//! - RBAC: no `*` anywhere, and exactly the permissions the process needs;
//! - the automatic rollout's component (`manifests/auto-rollout/`) through an overlay: exactly
//!   what `serve --auto-rollout` uses, and the flag on; none of it without the component;
//! - the policy guard for the API server (`manifests/apiserver/`): loadable from disk
//!   (names, no parameters), about the shipped ServiceAccount alone, covering exactly the
//!   admission-policy resources the RBAC grants, and not part of the kustomization;
//! - the MutatingWebhookConfiguration: two entries, `Fail`, `None`, 5 s, `IfNeeded`,
//!   Service clientConfig, kube-system and the injector's namespace excluded; its
//!   namespace selectors send no Pod twice, and its CEL `matchConditions` (evaluated with
//!   kube's CEL engine) select exactly the Pods the injector's own policy would inject;
//! - the Deployment's replicas, probes, resources and security context, and the wiring
//!   between Deployment, Service, PodDisruptionBudget and ServiceAccount;
//! - the ConfigMap's `config` is `crates/engine/src/template/default-template.yaml`, byte for byte;
//! - the example alert rules (PrometheusRule) read only metrics the binary exposes;
//! - every shell script passes shellcheck (`ignored` without shellcheck; a failure under CI).

#[path = "../common/kit.rs"]
mod common;
mod support;

mod alerts;
mod auto_rollout;
mod configmap;
mod deployment;
mod guard;
mod rbac;
mod round_trip;
mod scripts;
mod webhook;

fn main() -> std::process::ExitCode {
    common::harness::main(
        "manifests",
        common::harness::tests![
            alerts::the_uninjected_pods_alert_fires_when_the_gauge_stays_above_zero_for_ten_minutes,
            alerts::an_alert_on_a_metric_the_binary_does_not_expose_is_caught,
            auto_rollout::the_component_grants_what_the_automatic_rollout_uses_and_turns_it_on,
            auto_rollout::the_default_manifests_neither_grant_it_nor_turn_it_on,
            configmap::configmap_holds_the_embedded_templates_verbatim,
            deployment::deployment_is_hardened_and_wired_to_service_and_pdb,
            guard::the_guard_is_a_policy_the_api_server_can_load_from_disk,
            guard::the_guard_covers_what_the_rbac_grants_and_only_for_the_shipped_service_account,
            guard::the_guard_is_no_object_of_the_kustomization,
            guard::the_admission_configuration_loads_the_guard_directory,
            guard::the_documented_webhook_only_overlay_removes_exactly_the_policy_rule,
            rbac::rbac_is_least_privilege_without_wildcards,
            round_trip::the_round_trip_check_catches_a_misspelt_field,
            round_trip::rendered_manifests_round_trip_through_their_types,
            round_trip::examples_round_trip_through_their_types,
            scripts::shell_scripts_pass_shellcheck,
            webhook::webhook_configuration_has_the_designed_properties,
            webhook::namespace_selectors_send_no_pod_twice_and_never_the_injectors_own,
            webhook::match_conditions_select_exactly_the_pods_the_injector_injects,
            webhook::validating_configuration_checks_only_the_template_configmap,
        ],
    )
}
