//! Tier `network`: a Pod that joins a Network runs, with what the join adds visible inside
//! it. The deployed controller uses the Multus backend: without the
//! NetworkAttachmentDefinition CRD, a Network reports `BackendUnavailable` (and the injector's
//! Pods count it under `reconcile_errors_total{reason="backend_unavailable"}`); once the CRD is
//! there (installed by the tier when the cluster has none, removed at the end) the Network
//! becomes Ready, and an opted-in Pod naming it is admitted with the Multus annotation,
//! runs, and `kubectl exec ... env` shows `NETWORK_CIDR` and `NETWORK_GATEWAY` in its
//! sidecar. No Multus runs here, so no interface is added: the CIDR is only data.


use crate::common::crd::{self, NAD_CRD};
use crate::common::metrics::metric_sum;
use crate::common::process::Admin;
use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "network",
    run: |suite| Box::pin(run(suite)),
};

const MULTUS: &str = "k8s.v1.cni.cncf.io/networks";
const NET: &str = "lan";
/// In the benchmarking range of the node's own bridge; never put on an interface.
const CIDR: &str = "198.18.128.0/24";
const GATEWAY: &str = "198.18.128.1";
/// The admin listener's port in `manifests/deployment.yaml`.
const ADMIN_PORT: u16 = 9090;

async fn run(suite: &Suite) -> TierResult {
    let (installation, images) = installation(suite).await?;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "network", &[NAMESPACE_OPT_IN]).await;
    let had_crd = crd::installed(&suite.client, NAD_CRD)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    ns.create_network(NET, CIDR, GATEWAY).await;
    if had_crd {
        shout(&format!(
            "NOTE pods tier network: CRD {NAD_CRD} is installed, so the BackendUnavailable step is SKIPPED"
        ));
    } else {
        let reason = wait_for("the Network to report BackendUnavailable without the NAD CRD", PATIENCE, async || {
            let obj = ns.network(NET).await?;
            match ready_condition(&obj) {
                Some(c) if c["status"] == "False" && c["reason"] == "BackendUnavailable" => Ok(c["message"].to_string()),
                _ => Err(network_summary(&obj)),
            }
        })
        .await;
        step!("Network {NET} without the NAD CRD: Ready=False, BackendUnavailable: {reason}");
        let errors = wait_for(
            "the injector to count the reconcile error under reason backend_unavailable",
            PATIENCE,
            async || {
                let errors = reconcile_errors(&installation, "backend_unavailable").await?;
                if errors >= 1.0 { Ok(errors) } else { Err(format!("{errors} counted")) }
            },
        )
        .await;
        step!("envoy_injector_reconcile_errors_total{{reason=\"backend_unavailable\"}} {errors} across the injector's Pods");
        suite.install_nad_crd().await;
    }
    ns.network_ready(NET, RUN_PATIENCE).await;
    step!("Network {NET} Ready");

    let stored = ns.create_stored(&app_pod("joined", &[(NETWORK, NET)], &images)).await;
    let multus = annotation(&stored, MULTUS).unwrap_or_default().to_string();
    assert!(
        multus.contains(NET),
        "expected the Multus annotation naming {NET} on the joined Pod, found {}",
        describe_pod(&stored)
    );
    wait_for("the joined Pod to run", RUN_PATIENCE, async || {
        let p = ns.pods.get("joined").await.map_err(|e| api_error(&e))?;
        running(&p, &["app", SIDECAR])
    })
    .await;
    let env = exec(&ns.name, "joined", SIDECAR, &["env"]).await;
    let text = String::from_utf8_lossy(&env.stdout);
    let cidr = format!("NETWORK_CIDR={CIDR}");
    let gateway = format!("NETWORK_GATEWAY={GATEWAY}");
    assert!(
        env.status.success() && text.lines().any(|l| l == cidr) && text.lines().any(|l| l == gateway),
        "expected {cidr} and {gateway} in the environment of the running sidecar, found {}",
        describe_output(&env)
    );
    step!("Pod joined runs; `kubectl exec joined -c {SIDECAR} -- env` shows {cidr}, {gateway}; {MULTUS}={multus}");
    ns.attached_pods(NET, 1).await;
    Ok(format!("{cidr} and {gateway} inside the running sidecar"))
}

/// `envoy_injector_reconcile_errors_total{reason}` summed over the injector's live Pods,
/// read from their admin port on the node's Pod network (only the Lease holder reconciles).
async fn reconcile_errors(installation: &Installation, reason: &str) -> Result<f64, String> {
    let mut total = 0.0;
    for pod in installation.live_pods().await {
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).ok_or("a Pod without an IP")?;
        let addr = format!("{ip}:{ADMIN_PORT}").parse().map_err(|e| format!("{ip}: {e}"))?;
        let text = Admin::new(addr, PATIENCE).metrics().await?;
        total += metric_sum(&text, "envoy_injector_reconcile_errors_total", &[("reason", reason)]);
    }
    Ok(total)
}
