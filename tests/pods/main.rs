//! Pods that actually run: the injector deployed from `manifests/` with its image, on a
//! cluster with a node, and injected Pods whose sidecars start, stop and restart as a
//! kubelet runs them. Checked through the Kubernetes API and `kubectl exec`.
//!
//! Where `tests/e2e` proves admission and the controller through the API alone (Pods stay
//! Pending there), this set needs a kubelet: `E2E_NODE_KUBECONFIG` names a cluster with a
//! Ready node, where `E2E_IMAGE` (the injector image) is already on the node (`make
//! image-local NODE_SH=...` here, `make image kind-load` on kind). Without
//! `E2E_NODE_KUBECONFIG` every tier is reported `ignored`, and one loud line says how to run them.
//!
//! The tiers share one installation (the injector in namespace `envoy-injector`, with the
//! stand-in template below, pinned to `--injection=webhook` but in tier `independence`;
//! tier `envoy` makes the shipped default `config` while it runs) and run one at a time, in
//! this order:
//!
//! | tier | proves |
//! |---|---|
//! | `installed` | `make deploy IMAGE=$E2E_IMAGE` applies `manifests/` as they are; both replicas Ready through their real probes with the shipped securityContext; the TLS Secret and both `caBundle`s written by the running Pods; the API server reaches the webhook through the Service: a Pod created afterwards is injected and its sidecar runs; `/validate` refuses a broken ConfigMap; `check` from outside reports the installation healthy |
//! | `sidecars` | a Deployment of 2 opted-in replicas Available with the sidecar running in each; native sidecar with a startupProbe: the app starts only after the sidecar has started; the app sees the sidecar's shared volume; a sidecar that exits is restarted without restarting the app; deleting a Pod stops both well within its grace period |
//! | `native` | the default shape, through the webhook and then the compiled policies: an opted-in Pod with an init container of its own gets the proxy as a native sidecar before it; the Pod's init container and the app start only after the proxy's startupProbe passed, and on delete the proxy exits after the app has drained (the kubelet's container statuses); with `native-sidecar: "false"` the regular proxy exits while the app still drains |
//! | `jobs` | an opted-in Job and a CronJob's Job reach `Complete` with the sidecar injected by default (native) |
//! | `envoy` | the default template's own sidecar (a stand-in image of the Envoy 1.40 release binary, `make envoy-image-local`): an opted-in app on port 80 injected by the deployed injector is Ready through Envoy's `/ready`; in the Pod, 15006 reaches the app through Envoy, metrics answer, admin on 127.0.0.1 only; a Job completes with Envoy as its native sidecar, which exits 0; deleting the Pod stops both well within the grace period. Skipped without `E2E_ENVOY_IMAGE_LOADED` |
//! | `network` | on a node where every Pod goes through Multus: without the NetworkAttachmentDefinition CRD a Network reports `BackendUnavailable` and the injector counts it in `envoy_injector_reconcile_errors_total{reason="backend_unavailable"}`; with it, Pods that join a Network run with `net1` in its CIDR (inside the Pod and in Multus's network-status), reach its gateway and each other, while a Pod of another Network and one of none reach neither; the sidecar has `NETWORK_CIDR`/`NETWORK_GATEWAY`; `attachedPods` counts them; an overlapping Network in another namespace is `Overlaps` with no NAD and denies its Pods; the Network in use, deleted, stays Terminating (`InUse`, an Event naming its Pods, new Pods denied) until its Pods are gone, then the overlapping one is promoted and its Pod reaches the same gateway; at every step, no Running Pod of a Ready Network fails to reach its gateway |
//! | `rollouts` | while opted-in Pods are created every ~50 ms: `kubectl rollout restart` of the injector, deleting one injector Pod, a rolling update to `E2E_IMAGE_NEXT`: each with 0 failed creates and 0 Pods without the sidecar; the slowest create of each is printed |
//! | `template_rollout` | a template edit brought to running Pods (the injector deployed with `make deploy AUTO_ROLLOUT=1`): `rollout` brings two Deployments, a StatefulSet and a DaemonSet to the new revision, Ready, never more Pods unavailable than each strategy allows (sampled every 200 ms), after a `--dry-run` that changed nothing; a Deployment whose new Pods fail readiness stops the run (exit 1) and the one after it stays on the old revision, untouched; the automatic mode restarts a labelled namespace's two Deployments one at a time, the interval apart (Events, `envoy_injector_rollouts_total`), and nothing elsewhere; `check --drift` names a Pod whose app lost the sidecar's mount |
//! | `independence` | policy mode as deployed (`make deploy INJECTION=policy`): with the injector's Deployment deleted, 150 opted-in Pods created one every ~50 ms: 0 failed creates, 0 without the sidecar, all Running; a template edit made meanwhile changes nothing until a replica is back, which catches up; the same loop in webhook mode, printed for contrast |
//! | `helm` | the chart with the real Helm v4 engine, after `make undeploy` of the others' installation: packaged, pushed to an OCI registry on loopback (Debian's `docker-registry`) and installed from it in policy mode: an opted-in Pod runs with the sidecar; an upgrade changing the template: the next Pod gets the new revision from the admission policy (webhook not called) and from the webhook (the binding deleted); a rollback: the old revision again, both ways; `helm uninstall`: within 60 s no policy, binding or webhook configuration of ours, an opted-in Pod stored as written, the CRD kept; installed again with `tls.mode: secret`: injected through the webhook with that CA, nothing of either webhook configuration or the Secret written by the injector. Skipped, loudly, without the engine (`make helm-sdk`) |
//!
//! Environment (besides `E2E_TIERS`, as in `tests/e2e`):
//!
//! | env | effect |
//! |---|---|
//! | `E2E_NODE_KUBECONFIG` | the cluster with a node; unset or empty: every tier is skipped (one loud line) |
//! | `E2E_IMAGE` | the injector image, already on the node (required) |
//! | `E2E_IMAGE_NEXT` | a second tag of an injector image on the node, for the rolling update of tier `rollouts`; unset: that step is skipped, loudly |
//! | `E2E_ENVOY_IMAGE_LOADED` | set (to anything): the default template's Envoy image is on the node (`make envoy-image-local NODE_SH=...`); unset: tier `envoy` is skipped, loudly |
//! | `E2E_SHELL_IMAGE` | a busybox image on the node (or pullable): the stand-in proxy and the apps; default `localhost/busybox:local` |
//!
//! The set leaves nothing installed when tier `helm` runs (it ends with `helm uninstall`
//! and the namespace deleted; the Network CRD stays); run without it, it leaves the
//! injector installed (with the shipped template put back): `make undeploy` removes it. Each test namespace is `ei-e2e-<tier>-<random>` and is deleted at
//! the end, also when a tier fails.

#[path = "../common/kit.rs"]
mod common;
// The tier plumbing of tests/e2e, shared as it is; this set uses part of it.
#[allow(dead_code, unused_imports)]
#[path = "../e2e/support/mod.rs"]
mod support;

mod node;

macro_rules! tiers {
    ($($tier:ident),* $(,)?) => {
        $(mod $tier;)*
        /// Every tier, in the order they run.
        const TIERS: &[support::Tier] = &[$($tier::TIER),*];
    };
}

tiers![
    installed,
    sidecars,
    native,
    jobs,
    envoy,
    network,
    rollouts,
    template_rollout,
    independence,
    helm
];

fn main() -> std::process::ExitCode {
    support::harness::main(&support::TierSet {
        name: "pods",
        kubeconfig_var: "E2E_NODE_KUBECONFIG",
        how_to_run: "These tiers need a cluster with a node and the injector image on it: `make image-local \
                     NODE_SH=/path/to/node.sh IMAGE=envoy-injector:e2e`, then `E2E_NODE_KUBECONFIG=/path/to/kubeconfig \
                     E2E_IMAGE=envoy-injector:e2e make test`; on kind, `make e2e` runs them",
        tiers: TIERS,
        checks: &[],
    })
}
