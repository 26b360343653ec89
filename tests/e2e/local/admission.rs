//! The admission steps of tier `local`: the webhook registered, opt-in and plain Pods,
//! joining a Network and its denials, the namespace label, hot reload, an invalid template
//! edit.

use super::*;

impl<'a> Ctx<'a> {
    // ---- admission ----------------------------------------------------------------------

    /// Registers the webhook for Pod CREATE in the test namespace only, then waits until the
    /// API server actually calls it (dry-run creates, which persist nothing).
    pub(super) async fn register_webhook(&self, host: &str, webhook: &Webhook) {
        let name = format!("envoy-injector-e2e-{}", self.ns.trim_start_matches("ei-e2e-"));
        let url = format!("https://{}/mutate", host_port(host, webhook.port));
        let config = webhook_configuration(&name, &self.ns, &url, &webhook.ca_pem);
        let configs: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        configs
            .create(&PostParams::default(), &config)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "expected to create MutatingWebhookConfiguration {name}, found: {}",
                    api_error(&e)
                )
            });
        self.scope
            .delete_later(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, &name);
        step!("registered MutatingWebhookConfiguration {name} -> {url}");

        let probe = pod("e2e-probe", &[(INJECT, "true")], &self.settings.app_image);
        let what = format!(
            "the API server to call {url} and inject `{SIDECAR_V1}` (if this times out with a connection error, \
             E2E_WEBHOOK_HOST={host} is not reachable from the API server: check the address and the host firewall)"
        );
        wait_for(&what, Duration::from_secs(60), async || {
            let admitted = self.space.create_pod(&probe, true).await.map_err(|e| api_error(&e))?;
            if container(&admitted, SIDECAR_V1).is_some() {
                Ok(())
            } else {
                Err(describe_pod(&admitted))
            }
        })
        .await;
    }

    /// Dry-run creates of `pod` until `check` passes `self.in_a_row` times in a row (caches
    /// and reloads are eventually consistent, on every replica), bounded.
    pub(super) async fn eventually_admitted(&self, what: &str, pod: &Pod, check: impl Fn(&Pod) -> Result<(), String>) {
        let streak = std::cell::Cell::new(0usize);
        wait_for(what, PATIENCE, async || {
            let outcome = match self.space.create_pod(pod, true).await {
                Ok(admitted) => check(&admitted).map_err(|e| format!("{e}; {}", describe_pod(&admitted))),
                Err(e) => Err(format!("create refused: {}", api_error(&e))),
            };
            match outcome {
                Ok(()) => {
                    streak.set(streak.get() + 1);
                    if streak.get() >= self.in_a_row {
                        Ok(())
                    } else {
                        Err(format!("passed {} of {} times in a row", streak.get(), self.in_a_row))
                    }
                }
                Err(e) => {
                    streak.set(0);
                    Err(e)
                }
            }
        })
        .await;
    }

    /// A create the webhook must deny with a message naming `needle`.
    pub(super) async fn expect_denied(&self, pod: &Pod, needle: &str) -> String {
        let name = pod.metadata.name.clone().unwrap_or_default();
        match self.space.create_pod(pod, false).await {
            Ok(admitted) => {
                let _ = self.space.pods.delete(&name, &DeleteParams::default().grace_period(0)).await;
                panic!(
                    "expected Pod {name} to be denied with a message naming `{needle}`, but it was admitted: {}",
                    describe_pod(&admitted)
                )
            }
            Err(kube::Error::Api(status)) => {
                assert!(
                    status.message.contains(needle),
                    "expected the denial of Pod {name} to name `{needle}`, found HTTP {} {}: {}",
                    status.code,
                    status.reason,
                    status.message
                );
                status.message
            }
            Err(e) => panic!(
                "expected Pod {name} to be denied by the webhook, found: {}",
                api_error(&e)
            ),
        }
    }

    /// Step: an opted-in Pod is stored with the sidecar and the status annotation; a plain
    /// Pod (no annotations at all) is stored untouched although the webhook is called.
    pub(super) async fn opted_in_and_plain_pods(&self) {
        let image = &self.settings.app_image;
        let stored = self
            .space
            .create_stored(&pod("e2e-opted-in", &[(INJECT, "true")], image))
            .await;
        let sidecar = container(&stored, SIDECAR_V1).unwrap_or_else(|| {
            panic!(
                "expected container {SIDECAR_V1} in the stored Pod, found: {}",
                describe_pod(&stored)
            )
        });
        assert_eq!(
            sidecar.image.as_deref(),
            Some(self.settings.sidecar_image.as_str()),
            "expected the template's image on {SIDECAR_V1}, found: {}",
            describe_pod(&stored)
        );
        let status = annotation(&stored, STATUS).unwrap_or_else(|| {
            panic!(
                "expected annotation {STATUS} on the stored Pod, found: {}",
                describe_pod(&stored)
            )
        });
        let parsed: Value = serde_json::from_str(status)
            .unwrap_or_else(|e| panic!("expected annotation {STATUS} to be JSON, found {status:?}: {e}"));
        assert!(
            parsed.is_object() && status.contains(SIDECAR_V1),
            "expected annotation {STATUS} to be a JSON object naming {SIDECAR_V1}, found {status}"
        );
        let app_count = stored
            .spec
            .as_ref()
            .map_or(0, |s| s.containers.iter().filter(|c| c.name == "app").count());
        assert_eq!(
            app_count,
            1,
            "expected the app container once, found: {}",
            describe_pod(&stored)
        );
        step!("opted-in Pod stored with {SIDECAR_V1} and {STATUS}: {status}");

        let stored = self.space.create_stored(&pod("e2e-plain", &[], image)).await;
        let spec = stored.spec.as_ref().expect("a stored Pod has a spec");
        let untouched = spec.containers.iter().map(|c| c.name.as_str()).eq(["app"])
            && spec.init_containers.as_ref().is_none_or(Vec::is_empty)
            && spec.volumes.as_ref().is_none_or(Vec::is_empty)
            && stored.metadata.annotations.as_ref().is_none_or(BTreeMap::is_empty)
            && stored.metadata.labels
                == Some(BTreeMap::from([(
                    "app.kubernetes.io/name".to_string(),
                    "e2e".to_string(),
                )]));
        assert!(
            untouched,
            "expected the plain Pod stored exactly as sent (container app, no annotations, label app.kubernetes.io/name=e2e), \
             found: {}",
            describe_pod(&stored)
        );
        step!("plain Pod stored untouched");
    }

    /// Step: a Pod joining the Ready seed Network gets the Multus annotation, the label and
    /// the env; the Network counts it; missing and not-Ready Networks are denied by name.
    /// Returns whether a Pod joined (not when the backend leaves every Network not Ready).
    pub(super) async fn network_join(&self) -> bool {
        let image = &self.settings.app_image;
        let joined = match self.backend {
            Backend::Ready { .. } => {
                self.join_seed_network().await;
                true
            }
            Backend::Unavailable => {
                skipped(
                    &format!("e2e tier local's step: a Pod joining {SEED_NETWORK}"),
                    &format!(
                        "the deployed backend cannot make it Ready ({NAD_CRD} is not installed; `make e2e \
                         E2E_MULTUS=1` installs Multus on kind); a Pod naming it is checked to be denied instead"
                    ),
                );
                let denied = pod(
                    "e2e-join-unavailable",
                    &[(INJECT, "true"), (NETWORK, SEED_NETWORK)],
                    image,
                );
                let message = self.expect_denied(&denied, SEED_NETWORK).await;
                step!("Pod naming the BackendUnavailable Network denied: {message}");
                false
            }
        };
        self.denials_by_network_name().await;
        joined
    }

    pub(super) async fn join_seed_network(&self) {
        let image = &self.settings.app_image;
        let joining = pod("e2e-join", &[(INJECT, "true"), (NETWORK, SEED_NETWORK)], image);
        let joined = |p: &Pod| -> Result<(), String> {
            let sidecar = container(p, SIDECAR_V1).ok_or(format!("no container {SIDECAR_V1}"))?;
            let cidr = env_value(sidecar, "NETWORK_CIDR");
            let gateway = env_value(sidecar, "NETWORK_GATEWAY");
            if cidr != Some(SEED_CIDR) || gateway != Some(SEED_GATEWAY) {
                return Err(format!(
                    "expected NETWORK_CIDR={SEED_CIDR} NETWORK_GATEWAY={SEED_GATEWAY} in {SIDECAR_V1}, found {cidr:?} {gateway:?}"
                ));
            }
            if !annotation(p, MULTUS).is_some_and(|v| v.contains(SEED_NETWORK)) {
                return Err(format!("expected annotation {MULTUS} containing {SEED_NETWORK}"));
            }
            if label(p, NETWORK) != Some(SEED_NETWORK) {
                return Err(format!("expected label {NETWORK}={SEED_NETWORK}"));
            }
            Ok(())
        };
        // The webhook's cache follows the Network's status by watch: let it catch up.
        self.eventually_admitted(
            &format!("a Pod joining {SEED_NETWORK} to be admitted joined"),
            &joining,
            joined,
        )
        .await;
        let stored = self.space.create_stored(&joining).await;
        if let Err(e) = joined(&stored) {
            panic!("stored Pod e2e-join: {e}; {}", describe_pod(&stored));
        }
        step!(
            "Pod joined {SEED_NETWORK}: {MULTUS}={:?}",
            annotation(&stored, MULTUS).unwrap_or_default()
        );
        self.space.attached_pods(SEED_NETWORK, 1).await;
    }

    pub(super) async fn denials_by_network_name(&self) {
        let image = &self.settings.app_image;
        let missing = pod(
            "e2e-join-missing",
            &[(INJECT, "true"), (NETWORK, MISSING_NETWORK)],
            image,
        );
        let message = self.expect_denied(&missing, MISSING_NETWORK).await;
        step!("Pod naming a missing Network denied: {message}");
        let not_ready = pod("e2e-join-not-ready", &[(INJECT, "true"), (NETWORK, OVERLAP_B.0)], image);
        let message = self.expect_denied(&not_ready, OVERLAP_B.0).await;
        step!("Pod naming a not-Ready Network denied: {message}");
    }

    /// Step: the namespace label opts every Pod in; `inject: "false"` still opts out.
    pub(super) async fn namespace_label_opt_in(&self) {
        let image = &self.settings.app_image;
        let bare = pod("e2e-ns-label", &[], image);
        self.space.set_label(NAMESPACE_OPT_IN.0, json!(NAMESPACE_OPT_IN.1)).await;
        let what = format!("a Pod without annotations to be injected once the namespace has {INJECT}=enabled");
        self.eventually_admitted(&what, &bare, |p| {
            container(p, SIDECAR_V1)
                .map(drop)
                .ok_or(format!("no container {SIDECAR_V1}"))
        })
        .await;
        let opted_out = self
            .space
            .create_pod(&pod("e2e-opt-out", &[(INJECT, "false")], image), true)
            .await
            .unwrap_or_else(|e| panic!("expected an opted-out Pod to be admitted, found: {}", api_error(&e)));
        assert!(
            container(&opted_out, SIDECAR_V1).is_none() && annotation(&opted_out, STATUS).is_none(),
            "expected `{INJECT}: \"false\"` to win over the namespace label, found: {}",
            describe_pod(&opted_out)
        );
        self.space.set_label(NAMESPACE_OPT_IN.0, Value::Null).await;
        let what = "a Pod without annotations to be left alone once the namespace label is removed";
        self.eventually_admitted(what, &bare, |p| match container(p, SIDECAR_V1) {
            None => Ok(()),
            Some(_) => Err(format!("container {SIDECAR_V1} was injected")),
        })
        .await;
        step!("namespace label opts in; the Pod annotation opts out");
    }

    /// Step: a ConfigMap edit is live for the next admission (bounded wait; time printed).
    pub(super) async fn hot_reload(&self) {
        let start = Instant::now();
        self.set_template(&template(SIDECAR_V2, &self.settings.sidecar_image))
            .await;
        let opted_in = pod("e2e-reload", &[(INJECT, "true")], &self.settings.app_image);
        let what = format!("the edited template (container {SIDECAR_V2}) to be injected");
        self.eventually_admitted(&what, &opted_in, |p| {
            match (container(p, SIDECAR_V2).is_some(), container(p, SIDECAR_V1).is_some()) {
                (true, false) => Ok(()),
                _ => Err(format!("expected {SIDECAR_V2} and not {SIDECAR_V1}")),
            }
        })
        .await;
        let elapsed = start.elapsed();
        let stored = self.space.create_stored(&opted_in).await;
        assert!(
            container(&stored, SIDECAR_V2).is_some() && container(&stored, SIDECAR_V1).is_none(),
            "expected the stored Pod to carry {SIDECAR_V2} only, found: {}",
            describe_pod(&stored)
        );
        step!("template edit live after {elapsed:?} (bounded by {PATIENCE:?})");
    }

    /// Step: an invalid edit records an Event on the ConfigMap naming the error, readiness
    /// holds, and (with admission) the next Pod still gets the last good template.
    pub(super) async fn invalid_template_edit(&self, live_sidecar: Option<&str>) {
        // A deployed copy's ConfigMap may carry such Events from earlier runs: only a new
        // Event, or a repeat of one (its count or time moves on), counts.
        let naming_bad_field = |e: &Event| e.message.as_deref().is_some_and(|m| m.contains(BAD_FIELD));
        let before: Vec<String> = self
            .configmap_events()
            .await
            .unwrap_or_else(|e| panic!("expected to list Events in {}, found: {e}", self.config_ns))
            .iter()
            .filter(|e| naming_bad_field(e))
            .map(event_fingerprint)
            .collect();
        self.set_template(&bad_template(&self.settings.sidecar_image)).await;
        let what = format!(
            "a new Event on ConfigMap {}/{CONFIGMAP} naming the unknown field `{BAD_FIELD}`",
            self.config_ns
        );
        let event = wait_for(&what, PATIENCE, async || {
                let events = self.configmap_events().await?;
                events
                    .iter()
                    .find(|e| naming_bad_field(e) && !before.contains(&event_fingerprint(e)))
                    .cloned()
                    .ok_or_else(|| {
                        format!(
                            "Events about it: {:?}",
                            events
                                .iter()
                                .map(|e| format!("{:?} {:?}", e.reason, e.message))
                                .collect::<Vec<_>>()
                        )
                    })
            })
            .await;
        assert_eq!(
            event.type_.as_deref(),
            Some("Warning"),
            "expected the bad-template Event to be a Warning, found {event:?}"
        );
        step!(
            "bad template reported: {} {}",
            event.reason.as_deref().unwrap_or_default(),
            event.message.as_deref().unwrap_or_default()
        );
        if let Err(e) = self.readyz().await {
            panic!("expected /readyz to stay 200 with the last good template live, found {e}");
        }
        let Some(live) = live_sidecar else {
            return;
        };
        let stored = self
            .space
            .create_stored(&pod(
                "e2e-after-bad-edit",
                &[(INJECT, "true")],
                &self.settings.app_image,
            ))
            .await;
        assert!(
            container(&stored, live).is_some() && container(&stored, SIDECAR_BAD).is_none(),
            "expected the last good template ({live}) after the invalid edit, found: {}",
            describe_pod(&stored)
        );
        step!("next Pod still injected with the last good template ({live})");
    }
}
