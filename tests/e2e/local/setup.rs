//! Set-up of tier `local`: the CRD, the ConfigMap and `serve` here (local mode), or the
//! deployed copy's readiness, template and webhook (in-cluster mode).

use super::*;

impl<'a> Ctx<'a> {
    // ---- set-up -------------------------------------------------------------------------

    /// Step: the CRD from `manifests/crd.yaml` applies (server-side) and is served.
    pub(super) async fn install_crd(&self) {
        self.suite.install_network_crd().await;
    }

    pub(super) async fn create_configmap(&self, config: &str) {
        let cm = configmap_object(CONFIGMAP, config);
        self.configmaps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_or_else(|e| panic!("expected to create ConfigMap {CONFIGMAP}, found: {}", api_error(&e)));
    }

    pub(super) async fn set_template(&self, config: &str) {
        let patch = json!({ "data": { "config": config } });
        self.configmaps
            .patch(CONFIGMAP, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("expected to update ConfigMap {CONFIGMAP}, found: {}", api_error(&e)));
    }

    /// Step: `envoy-injector certs` for `host`, then `serve` in cluster mode on `host` (all
    /// addresses when it is a name, or not one of this machine's) at a free port; it turns
    /// ready (caches synced, template loaded).
    pub(super) async fn start_server(&mut self, host: &str) -> Webhook {
        let bin = env!("CARGO_BIN_EXE_envoy-injector");
        let dir = temp_dir("envoy-injector-e2e");
        let certs = dir.path().join("certs");
        let output = std::process::Command::new(bin)
            .args(["certs", "--service", "envoy-injector", "--namespace", &self.ns, "--out-dir"])
            .arg(&certs)
            .args(["--san", host])
            .output()
            .expect("run envoy-injector certs");
        assert!(
            output.status.success(),
            "expected `envoy-injector certs --san {host}` to succeed, found {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let ca_pem = std::fs::read(certs.join("ca.crt")).expect("certs wrote ca.crt");
        let listen = match std::net::TcpListener::bind((host, 0)) {
            Ok(_) => host,
            Err(_) => "0.0.0.0",
        };
        let mut args: Vec<std::ffi::OsString> = [
            "serve",
            "--namespace",
            &self.ns,
            "--network-backend",
            "none",
            "--leader-elect",
            "false",
            "--log-format",
            "json",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.extend(listen_args(
            &host_port(listen, 0),
            ANY_LOOPBACK_PORT,
            &certs.join("tls.crt"),
            &certs.join("tls.key"),
        ));
        let server = Injector::spawn("serve", args, Vec::new(), dir).await;
        let port = server.webhook.port();
        server.wait_ready().await;
        self.server = Some(server);
        Webhook { port, ca_pem }
    }

    /// Local: `/readyz` of the `serve` child. In-cluster: every replica of the Deployment
    /// Ready (their readiness probe is `/readyz`).
    pub(super) async fn readyz(&self) -> Result<(), String> {
        match &self.server {
            Some(server) => server.readyz().await,
            None => self.deployment_ready().await.map(drop),
        }
    }

    // ---- in-cluster set-up --------------------------------------------------------------

    pub(super) fn injector_deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.settings.injector_namespace)
    }

    /// `Ok(Deployment)` when the deployed copy is rolled out: current generation observed,
    /// every replica updated, Ready and Available; `Err` says what is missing.
    pub(super) async fn deployment_ready(&self) -> Result<Deployment, String> {
        let ns = &self.settings.injector_namespace;
        let deployment = self
            .injector_deployments()
            .get_opt(INJECTOR_NAME)
            .await
            .map_err(|e| api_error(&e))?
            .ok_or_else(|| format!("no Deployment {ns}/{INJECTOR_NAME}: run `make deploy` first"))?;
        let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let status = deployment.status.clone().unwrap_or_default();
        let available = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Available" && c.status == "True");
        let observed =
            status.observed_generation.is_some() && status.observed_generation == deployment.metadata.generation;
        let counts = (
            status.replicas.unwrap_or(0),
            status.updated_replicas.unwrap_or(0),
            status.ready_replicas.unwrap_or(0),
            status.available_replicas.unwrap_or(0),
        );
        if available && observed && counts == (wanted, wanted, wanted, wanted) {
            Ok(deployment)
        } else {
            Err(format!(
                "Deployment {ns}/{INJECTOR_NAME}: want {wanted} replicas; (replicas, updated, ready, available) = \
                 {counts:?}, Available={available}, generation observed={observed}, conditions {:?}",
                conditions_summary(status.conditions.as_deref())
            ))
        }
    }

    /// Step (in-cluster): the Deployment is rolled out, its webhook configuration carries the
    /// CA the binary wrote, the CRD is served; and what the deployed backend can do.
    pub(super) async fn deployed_copy_is_ready(&mut self) {
        let ns = self.settings.injector_namespace.clone();
        let deployment = wait_for(
                &format!("Deployment {ns}/{INJECTOR_NAME} to be Available with every replica Ready (make deploy)"),
                Duration::from_secs(180),
                async || self.deployment_ready().await,
            )
            .await;
        step!("Deployment {ns}/{INJECTOR_NAME} Available");

        let configs: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let what = format!(
            "MutatingWebhookConfiguration {INJECTOR_NAME} with a caBundle in every webhook (written by the binary)"
        );
        let hooks = wait_for(&what, Duration::from_secs(90), async || {
                let config = configs
                    .get_opt(INJECTOR_NAME)
                    .await
                    .map_err(|e| api_error(&e))?
                    .ok_or_else(|| {
                        format!("no MutatingWebhookConfiguration {INJECTOR_NAME}: run `make deploy` first")
                    })?;
                let hooks = config.webhooks.unwrap_or_default();
                let empty: Vec<&str> = hooks
                    .iter()
                    .filter(|h| h.client_config.ca_bundle.as_ref().is_none_or(|b| b.0.is_empty()))
                    .map(|h| h.name.as_str())
                    .collect();
                if hooks.is_empty() || !empty.is_empty() {
                    return Err(format!("webhooks without a caBundle: {empty:?} (of {})", hooks.len()));
                }
                Ok(hooks.iter().map(|h| h.name.clone()).collect::<Vec<_>>())
            })
            .await;
        step!("webhooks {hooks:?} carry a caBundle");

        self.suite.network_crd_served("networks.samplecrd.k8s.io").await;

        let args = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.args.clone())
            .unwrap_or_default();
        let backend = network_backend_arg(&args);
        self.backend = if backend == "none" {
            Backend::Ready { multus: false }
        } else {
            match crd::installed(&self.client, NAD_CRD).await {
                Ok(true) => Backend::Ready { multus: true },
                Ok(false) => Backend::Unavailable,
                Err(e) => panic!("{e}"),
            }
        };
        step!(
            "deployed network backend `{backend}`: Networks expected {:?}",
            self.backend
        );
        if self.backend == Backend::Unavailable {
            shout(&format!(
                "NOTE e2e: CRD {NAD_CRD} is not installed, so the deployed multus backend cannot realise \
                 Networks: they must report BackendUnavailable, and the steps that need a Ready Network are \
                 SKIPPED. Install Multus (`make e2e E2E_MULTUS=1` on kind) to run them."
            ));
        }
    }

    /// Step (in-cluster): the deployed ConfigMap's `config` becomes the test template; the
    /// original is put back by the cleanup, whatever happens.
    pub(super) async fn take_over_template(&self, config: &str) {
        let ns = &self.config_ns;
        let current = self
            .configmaps
            .get_opt(CONFIGMAP)
            .await
            .unwrap_or_else(|e| panic!("expected to read ConfigMap {ns}/{CONFIGMAP}, found: {}", api_error(&e)))
            .unwrap_or_else(|| {
                panic!("expected ConfigMap {ns}/{CONFIGMAP} of the deployed copy: run `make deploy` first")
            });
        let original = current.data.unwrap_or_default().get("config").cloned();
        self.scope.restore_template(ns, CONFIGMAP, original);
        self.set_template(config).await;
        step!("ConfigMap {ns}/{CONFIGMAP}: `config` replaced by the test template (restored at the end)");
    }

    /// Step (in-cluster): the API server calls the deployed webhook through its Service and
    /// the shipped configuration, and the test template is live on every replica asked.
    pub(super) async fn deployed_webhook_injects(&self) {
        let probe = pod("e2e-probe", &[(INJECT, "true")], &self.settings.app_image);
        let what = format!(
            "the deployed webhook (Service {}/{INJECTOR_NAME}) to inject `{SIDECAR_V1}` into an opted-in Pod",
            self.settings.injector_namespace
        );
        self.eventually_admitted(&what, &probe, |p| {
            container(p, SIDECAR_V1)
                .map(drop)
                .ok_or(format!("no container {SIDECAR_V1}"))
        })
        .await;
        step!("the deployed webhook injects the test template");
    }
}
