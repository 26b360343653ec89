//! The steps of tier `local` that need nodes (`E2E_RUN_PODS=1`): injected Pods run, a
//! Deployment's rollout is injected, and with Multus a Pod gets an interface on its Network.

use super::*;

impl<'a> Ctx<'a> {
    // ---- second tier: Pods that run -----------------------------------------------------

    pub(super) async fn running_tier_enabled(&self, admission: bool) -> bool {
        if !self.settings.run_pods {
            skipped(
                "e2e tier local's running-Pod steps",
                "E2E_RUN_PODS is not 1: on a cluster with nodes set E2E_RUN_PODS=1 to check that an injected Pod \
                 runs (`make e2e-local` and `make e2e-incluster` set it)",
            );
            return false;
        }
        if !admission {
            skipped(
                "e2e tier local's running-Pod steps",
                "E2E_RUN_PODS=1 but the admission steps did not run: set E2E_WEBHOOK_HOST too",
            );
            return false;
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        match nodes.list(&ListParams::default().limit(1)).await {
            Ok(list) if !list.items.is_empty() => true,
            Ok(_) => {
                skipped(
                    "e2e tier local's running-Pod steps",
                    "E2E_RUN_PODS=1 but the cluster has no nodes: run on a cluster with a Ready node (kind: `make e2e-local`)",
                );
                false
            }
            Err(e) => panic!(
                "expected to list Nodes for the running-Pod tier, found: {}",
                api_error(&e)
            ),
        }
    }

    /// Step (tier 2): an opted-in Pod is scheduled and runs, its sidecar container running.
    pub(super) async fn injected_pod_runs(&self, sidecar: &str) {
        let name = "e2e-running";
        self.space.create_stored(&pod(name, &[(INJECT, "true")], &self.settings.app_image))
            .await;
        self.pod_runs(name, &["app", sidecar]).await;
        step!("Pod {name} runs with its sidecar {sidecar}");
    }

    /// Waits until Pod `name` is Running with every container of `containers` running.
    pub(super) async fn pod_runs(&self, name: &str, containers: &[&str]) -> Pod {
        let what = format!("Pod {name} Running with containers {containers:?} running (images may need pulling)");
        wait_for(&what, RUN_PATIENCE, async || {
            let p = self.space.pods.get(name).await.map_err(|e| api_error(&e))?;
            match running(&p, containers) {
                Ok(()) => Ok(p),
                Err(e) => Err(format!("{e}; {}", self.pod_events(name).await)),
            }
        })
        .await
    }

    /// The Warning Events about a Pod, for failure messages (sandbox and pull errors).
    pub(super) async fn pod_events(&self, name: &str) -> String {
        match self.events_about("Pod", name).await {
            Ok(events) => format!(
                "Warning Events {:?}",
                events
                    .iter()
                    .filter(|e| e.type_.as_deref() == Some("Warning"))
                    .map(|e| format!(
                        "{} {}",
                        e.reason.as_deref().unwrap_or_default(),
                        e.message.as_deref().unwrap_or_default()
                    ))
                    .collect::<Vec<_>>()
            ),
            Err(e) => format!("(Events unreadable: {e})"),
        }
    }

    /// Step (tier 2): a Deployment whose Pod template opts in rolls out with every Pod
    /// (created by a ReplicaSet, `generateName` only) injected and running; so does a second
    /// rollout of it.
    pub(super) async fn deployment_rollout_is_injected(&self, sidecar: &str) {
        let name = "e2e-web";
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
        let web = deployment(name, 2, &[(INJECT, "true")], &self.settings.app_image);
        deployments
            .create(
                &PostParams {
                    dry_run: false,
                    field_manager: Some(FIELD_MANAGER.to_string()),
                },
                &web,
            )
            .await
            .unwrap_or_else(|e| panic!("expected to create Deployment {name}, found: {}", api_error(&e)));
        self.rollout_is_injected(&deployments, name, "1", sidecar).await;

        let patch = json!({ "spec": { "template": { "metadata": { "annotations": { ROLLOUT: "2" } } } } });
        deployments
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("expected to update Deployment {name}, found: {}", api_error(&e)));
        self.rollout_is_injected(&deployments, name, "2", sidecar).await;
    }

    /// Waits for the rollout of Deployment `name` to finish, then checks that each of its
    /// Pods of revision `revision` (the ROLLOUT annotation; "1" when absent) carries and
    /// runs `sidecar`.
    pub(super) async fn rollout_is_injected(&self, deployments: &Api<Deployment>, name: &str, revision: &str, sidecar: &str) {
        let what =
            format!("Deployment {name} rollout {revision} complete (2 updated, available replicas, no old ones)");
        wait_for(&what, RUN_PATIENCE, async || {
            let d = deployments.get(name).await.map_err(|e| api_error(&e))?;
            let status = d.status.clone().unwrap_or_default();
            let counts = (
                status.replicas.unwrap_or(0),
                status.updated_replicas.unwrap_or(0),
                status.available_replicas.unwrap_or(0),
            );
            let observed = status.observed_generation.is_some() && status.observed_generation == d.metadata.generation;
            if observed && counts == (2, 2, 2) {
                Ok(())
            } else {
                let pods = self.deployment_pods(name).await.unwrap_or_default();
                Err(format!(
                    "(replicas, updated, available) = {counts:?}, generation observed={observed}; Pods: {:?}",
                    pods.iter().map(describe_pod).collect::<Vec<_>>()
                ))
            }
        })
        .await;
        let pods: Vec<Pod> = self
            .deployment_pods(name)
            .await
            .unwrap_or_else(|e| panic!("expected to list the Pods of Deployment {name}, found: {e}"))
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| annotation(p, ROLLOUT).unwrap_or("1") == revision)
            .collect();
        assert_eq!(
            pods.len(),
            2,
            "expected 2 Pods of Deployment {name} rollout {revision}, found: {:?}",
            pods.iter().map(describe_pod).collect::<Vec<_>>()
        );
        for p in &pods {
            let pod_name = p.metadata.name.clone().unwrap_or_default();
            assert!(
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&format!("{name}-")))
                    && container(p, sidecar).is_some()
                    && annotation(p, STATUS).is_some(),
                "expected Pod {pod_name} of Deployment {name} injected with {sidecar} and {STATUS}, found: {}",
                describe_pod(p)
            );
            if let Err(e) = running(p, &["app", sidecar]) {
                panic!("expected Pod {pod_name} of Deployment {name} running: {e}");
            }
        }
        step!(
            "Deployment {name} rollout {revision}: Pods {:?} injected with {sidecar} and running",
            pods.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>()
        );
    }

    pub(super) async fn deployment_pods(&self, name: &str) -> Result<Vec<Pod>, String> {
        self.space.pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .map(|list| list.items)
            .map_err(|e| api_error(&e))
    }

    /// Whether the Multus tier applies: in-cluster, multus backend, NAD CRD installed.
    pub(super) async fn multus_tier_enabled(&self) -> bool {
        match (self.settings.mode, self.backend) {
            (Mode::InCluster, Backend::Ready { multus: true }) => true,
            (Mode::Local, _) => {
                skipped(
                    "e2e tier local's Multus step",
                    "local mode runs `serve --network-backend none`: `make e2e E2E_MULTUS=1` (in-cluster, Multus \
                     installed) checks the interface",
                );
                false
            }
            _ => {
                skipped(
                    "e2e tier local's Multus step",
                    &format!(
                        "expected the deployed copy's multus backend with {NAD_CRD} installed, found neither: \
                         `make e2e E2E_MULTUS=1` installs Multus on kind"
                    ),
                );
                false
            }
        }
    }

    /// Step (tier 2, Multus): a Pod joining the seed Network runs, and Multus reports an
    /// interface for that Network with an address inside its CIDR.
    pub(super) async fn network_pod_gets_an_interface(&self) {
        let name = "e2e-multus";
        let joining = pod(
            name,
            &[(INJECT, "true"), (NETWORK, SEED_NETWORK)],
            &self.settings.app_image,
        );
        self.space.create_stored(&joining).await;
        self.pod_runs(name, &["app", SIDECAR_V2]).await;
        let what = format!("Multus to report the {SEED_NETWORK} interface of Pod {name} in {NETWORK_STATUS}");
        let ips = wait_for(&what, PATIENCE, async || {
                let p = self.space.pods.get(name).await.map_err(|e| api_error(&e))?;
                let status = annotation(&p, NETWORK_STATUS).ok_or_else(|| {
                    format!(
                        "no {NETWORK_STATUS} annotation (is Multus running?): {}",
                        describe_pod(&p)
                    )
                })?;
                let ips = attachment_ips(status, &self.ns, SEED_NETWORK)?;
                if ips.iter().any(|ip| ip_in_cidr(ip, SEED_CIDR) == Some(true)) {
                    Ok(ips)
                } else {
                    Err(format!(
                        "no address in {SEED_CIDR} among {ips:?}; {NETWORK_STATUS}={status}"
                    ))
                }
            })
            .await;
        step!("Pod {name} has an interface on {SEED_NETWORK} with {ips:?} (in {SEED_CIDR})");
    }
}
