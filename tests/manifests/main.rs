//! The install manifests, checked everywhere (`make test`; no cluster needed):
//!
//! - `kubectl kustomize manifests/` renders (skipped, loudly, without kubectl; a failure
//!   under CI, see `tests/common/kubectl.rs`);
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
//! - every shell script passes shellcheck (skipped, loudly, without shellcheck).

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
