//! Cluster end-to-end suite: the real `envoy-injector` binary (the one cargo built for the
//! tests) against whatever cluster `KUBECONFIG` names, checked through the Kubernetes API
//! alone (Pods need not run). Without `KUBECONFIG` every tier is reported `ignored` with
//! why, and one `SKIPPED e2e tiers` line says how to run them.
//!
//! The tiers share one API server and cluster-wide objects (webhook configurations, the
//! `envoy-injector` namespace and Lease, all Networks), so this binary's own harness
//! (`support::harness`, `harness = false`) runs them as one test each, one at a time, in
//! this order, the API-outage tier last, after the set's checks that need no cluster. Each is a file of this directory (`local`
//! a directory, one file per capability):
//!
//! | tier | proves |
//! |---|---|
//! | `local` | `serve` here behind a `url:` webhook: controller and admission (see the file) |
//! | `validate` | the shipped validating webhook at `kubectl apply` time: a broken template ConfigMap refused with the reload path's message, a good one admitted, the webhook down lets applies through |
//! | `values` | the value rules against the API server: for each template of `tests/fixtures/template-values.yaml`, the injector's verdict equals a server-side dry run's of a Pod holding it |
//! | `pod_security` | the Pod Security rules against the API server: for each template of `tests/fixtures/pod-security.yaml` and each level and version it names, the controls the injector finds in the template's additions equal those Pod Security admission names for a server-side dry run of a Pod holding them, in a namespace enforcing that level |
//! | `check` | `envoy-injector check` on scenarios built in the cluster (every decision rule, injected Pods, the upgrade of the default template: new Pods get the new sidecar and `--stale` lists the Deployment on the old one, a foreign `caBundle`, an expired certificate, a Service without endpoints; the compiled admission policies applied: the path of each Pod, `--missing`, a policy deleted or out of step) against `tests/golden/check/` |
//! | `missing` | opted-in Pods created while no webhook configuration exists (and before their namespace's label): counted by `envoy_injector_pods_uninjected` of a running `serve`, listed by `check --missing` (JSON, text, exit 1) with the reason and the fix; the printed fixes run: the gauge drops to 0, exit 0; `--watch-uninjected=false`: no series |
//! | `overrides` | `serve` here in cluster mode: a namespace's template label picks the template; a Deployment's `override.memory-limit` lands on each Pod and in the status; `override.cpu-request: "8"` denied with annotation, value, bound and template; a label naming no template denies |
//! | `policies` | the compiled admission policies store the Pod the webhook stores and deny with its words: a corpus of Pod shapes, the captured fixtures and workloads' Pods, each created through both paths, compared |
//! | `policy_mode` | `serve --injection=policy` keeps the compiled policies in step with the ConfigMap: Pods injected with the webhook not called, an edit to the next Pod under a Pod loop, a bad edit kept out, a deleted template's objects gone, a restart writes nothing, no replica: Pods still injected and an edit caught up later, `--injection=webhook` removes them |
//! | `rollout` | template changes brought to running Pods, on the API alone: the automatic rollout in a labelled namespace restarts the first stale Deployment, fails (no node), stops for that revision (Event, metric) and touches nothing else; `rollout --dry-run` plans and lists what it leaves, changing nothing; the real run times out on the first Deployment and leaves the next untouched; `check --drift` names Pods whose sidecar was changed after injection |
//! | `controller` | 300 Networks created in one burst: every verdict right, at most 3 reconciles each; a restart writes nothing |
//! | `deployed` | `manifests/` applied, the binary run as its ServiceAccount behind the Service: RBAC sufficient (and what one missing rule breaks), self-managed TLS Secret and `caBundle`, the `matchConditions`, the shipped templates (apps on 80/443/8080/9090 stored with the default sidecar, `classic` for a legacy Pod that asks, `classic` on port 80 denied) |
//! | `guard` | policy mode's power bounded: as the ServiceAccount, the compiled policies of the shipped ConfigMap are applied, read and deleted (RBAC); with `manifests/apiserver/policy-guard.yaml` loaded by the API server from disk (`make apiserver-guard`), every write outside them is refused with the guard's words (skips, loudly, after the RBAC part where none is loaded) |
//! | `bound` | the automatic rollout's rights bounded, tried as an attacker with the ServiceAccount's token: with `manifests/` + `manifests/auto-rollout/` through an overlay into another namespace, and with the chart (`autoRollout.enabled`) in another release namespace: a real Pod, a privileged `hostPID` Pod in `kube-system`, an image change, an added container, a scale to zero, a restart where the namespace did not opt in and in `kube-system`, deleting or changing the bound or its binding: refused, each with its rule's words; a dry-run Pod and a restart in a labelled namespace allowed |
//! | `replicas` | two processes on one ClusterIP (`--reuse-port`): one Lease holder reconciles; SIGKILL of it: takeover within the bound, every opted-in Pod injected |
//! | `upgrade` | a rolling upgrade as the Deployment does it (`maxUnavailable: 0`) under a Pod loop: 0 failed, 0 uninjected; the Lease handed over within 5 s of its holder's SIGTERM |
//! | `workloads` | a Deployment's Pods, namespace-label opt-in, opt-out, `dryRun=All`, template edit to next Pod latency |
//! | `removal` | nothing acts on Pods after the installation goes: `manifests/` applied, a replica in the shipped mode writes the compiled policies, each owned by the ValidatingWebhookConfiguration; removed while it runs by `kubectl delete -k manifests/`, then (installed again and taken over by a Helm release, every uid kept) by `helm uninstall`: each time within 60 s no policy, binding or webhook configuration of ours is left, and an opted-in Pod is stored as written |
//! | `outage` | `$CONTROLPLANE_SH restart-apiserver` (`DOWN_S=15`): alive, `/readyz`, serving from cache, watches resume |
//!
//! Environment:
//!
//! | env | effect |
//! |---|---|
//! | `KUBECONFIG` | unset or empty: every tier is reported `ignored` (one loud line says how to run them) |
//! | `E2E_TIERS` | comma list: run only these tiers (still in the order above) |
//! | `E2E_MODE` | `local` (default); `in-cluster`: tier `local` checks the copy `make deploy` installed, the others skip |
//! | `E2E_WEBHOOK_HOST` | tier `local`: where the API server reaches this machine (default 127.0.0.1 when the API server is on loopback) |
//! | `UPDATE_GOLDEN=1` | tier `check` rewrites `tests/golden/check/` instead of comparing (review the diff) |
//! | `CONTROLPLANE_SH` | the control-plane script whose `restart-apiserver` the `outage` tier runs (its settings come from the environment too); unset: that tier skips, loudly |
//! | `E2E_RUN_PODS=1` | with nodes: tier `local` also checks that injected Pods run (else those steps are skipped, with a line in `make test`'s summary) |
//! | `E2E_SIDECAR_IMAGE`, `E2E_APP_IMAGE` | images of the test sidecar and app container (default `registry.k8s.io/pause:3.10`) |
//! | `E2E_INJECTOR_NAMESPACE` | in-cluster: namespace of the deployed copy (default `envoy-injector`) |
//!
//! The tiers `validate`, `check`, `missing` and `overrides` register webhooks on 127.0.0.1,
//! so they need an API server on this machine; `validate`, `check`, `missing`, `overrides`
//! and `controller` start processes of their own, so they skip with `E2E_MODE=in-cluster`.
//! The tiers `deployed`, `guard`, `replicas`,
//! `upgrade`, `workloads`, `removal` and `outage` need Service ClusterIPs that are loopback addresses of
//! this machine (see `support/install.rs`) and may bind port 443. Each skips, loudly, where
//! it cannot run. Each test namespace is `ei-e2e-<tier>-<random>` (tier `check`'s are
//! `ei-check-<random>[-labelled|-plain]`, as its golden files show them) and is deleted at
//! the end, as is everything else the suite installed (the Network CRD stays), also when a
//! tier fails; a failure prints the last log lines of every injector process of the tier.
//!
//! A new tier is a file `tests/e2e/<name>.rs` with `pub const TIER: Tier` and its name in
//! the list below.

#[path = "../common/kit.rs"]
mod common;
#[path = "../scale/mod.rs"]
mod scale;
mod support;

macro_rules! tiers {
    ($($tier:ident),* $(,)?) => {
        $(mod $tier;)*
        /// Every tier, in the order they run.
        const TIERS: &[support::Tier] = &[$($tier::TIER),*];
    };
}

tiers![
    local,
    validate,
    values,
    pod_security,
    check,
    missing,
    overrides,
    policies,
    policy_mode,
    rollout,
    controller,
    deployed,
    guard,
    bound,
    replicas,
    upgrade,
    workloads,
    removal,
    outage
];

fn main() -> std::process::ExitCode {
    support::harness::main(&support::TierSet {
        name: "e2e",
        kubeconfig_var: "KUBECONFIG",
        how_to_run: "Run them against any cluster with `KUBECONFIG=/path/to/kubeconfig make test`; on kind: \
                     `make kind-up`, then `make e2e-local` (this machine's binary) or `make e2e` (the deployed image)",
        tiers: TIERS,
        checks: common::harness::tests![
            local::inputs::cluster_inputs_are_well_formed,
            local::inputs::in_cluster_inputs_are_well_formed,
            check::normalise_hides_what_changes_from_run_to_run,
            common::harness::filters_select_as_libtest_s_do,
        ],
    })
}
