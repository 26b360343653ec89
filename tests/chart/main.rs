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
//! without it each test prints SKIPPED and passes, except under CI, where it fails.

#[path = "../common/kit.rs"]
mod common;
mod options;
mod render;
mod values;
