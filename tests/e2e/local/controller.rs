//! The Network controller steps of tier `local`: the seed example, CEL refusals, an
//! overlap, deletion through the finalizer.

use super::*;

impl<'a> Ctx<'a> {
    // ---- controller ---------------------------------------------------------------------

    pub(super) async fn network(&self, name: &str) -> Result<DynamicObject, String> {
        self.space.network(name).await
    }

    pub(super) async fn events_about(&self, kind: &str, name: &str) -> Result<Vec<Event>, String> {
        self.space.events_about(kind, name).await
    }

    /// Events about the `envoy-injector` ConfigMap (in `config_ns`).
    pub(super) async fn configmap_events(&self) -> Result<Vec<Event>, String> {
        list_events_about(&self.config_events, "ConfigMap", CONFIGMAP).await
    }

    /// Whether a reconciled Network has the Ready condition the backend calls for:
    /// Ready=True, or (multus without the NAD CRD) Ready=False reason BackendUnavailable.
    pub(super) fn reconciled_as_expected(&self, obj: &DynamicObject) -> bool {
        let observed = obj.data["status"]["observedGeneration"].as_i64();
        let current = observed.is_some() && observed == obj.metadata.generation;
        current
            && ready_condition(obj).is_some_and(|c| match self.backend {
                Backend::Ready { .. } => c["status"] == "True",
                Backend::Unavailable => c["status"] == "False" && c["reason"] == "BackendUnavailable",
            })
    }

    /// Step: the seed example applies unchanged; Ready=True for the current generation,
    /// finalizer in place, no Pods attached, and an Event about it. (Multus backend without
    /// the NAD CRD: Ready=False BackendUnavailable for the current generation instead.)
    pub(super) async fn seed_network_reconciled(&self) {
        let seed = read_manifest("manifests/examples/example-network.yaml");
        assert_eq!(seed["metadata"]["name"], SEED_NETWORK, "the seed example's name");
        assert_eq!(
            seed["spec"],
            json!({ "cidr": SEED_CIDR, "gateway": SEED_GATEWAY }),
            "the seed example's spec"
        );
        self.space.networks
            .patch(SEED_NETWORK, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&seed))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "expected manifests/examples/example-network.yaml to apply unchanged, found: {}",
                    api_error(&e)
                )
            });
        let expected = match self.backend {
            Backend::Ready { .. } => "Ready=True",
            Backend::Unavailable => "Ready=False reason BackendUnavailable",
        };
        let what = format!("Network {SEED_NETWORK} {expected} with status.observedGeneration == metadata.generation");
        let obj = wait_for(&what, PATIENCE, async || {
                let obj = self.network(SEED_NETWORK).await?;
                if self.reconciled_as_expected(&obj) {
                    Ok(obj)
                } else {
                    Err(network_summary(&obj))
                }
            })
            .await;
        assert!(
            obj.finalizers().iter().any(|f| f == FINALIZER),
            "expected finalizer {FINALIZER} on a reconciled Network, found: {}",
            network_summary(&obj)
        );
        if self.backend == Backend::Unavailable {
            let message = ready_condition(&obj)
                .map(|c| c["message"].to_string())
                .unwrap_or_default();
            step!("Network {SEED_NETWORK} reports BackendUnavailable: {message}");
            return;
        }
        let ready = ready_condition(&obj).expect("checked above");
        assert_eq!(
            ready["reason"],
            "Ready",
            "expected Ready=True to have reason Ready, found: {}",
            network_summary(&obj)
        );
        assert_eq!(
            obj.data["status"]["attachedPods"],
            json!(0),
            "expected status.attachedPods 0 before any Pod joined, found: {}",
            network_summary(&obj)
        );
        let events = wait_for(
                &format!("an Event about Network {SEED_NETWORK}"),
                PATIENCE,
                async || {
                    let events = self.events_about("Network", SEED_NETWORK).await?;
                    if events.is_empty() {
                        Err("no Events about it".to_string())
                    } else {
                        Ok(events)
                    }
                },
            )
            .await;
        let reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
        step!(
            "Network {SEED_NETWORK} Ready (generation {:?}), Events {reasons:?}",
            obj.metadata.generation
        );
    }

    /// Step: CEL in the CRD refuses a gateway outside the cidr and a malformed cidr at create,
    /// and any edit of the seed Network's cidr or gateway.
    pub(super) async fn invalid_specs_are_refused(&self) {
        let cases = [
            ("e2e-bad-gateway", "198.18.76.0/24", "198.18.77.1", "gateway"),
            ("e2e-bad-cidr", "198.18.76.0/33", "198.18.76.1", "cidr"),
        ];
        for (name, cidr, gateway, field) in cases {
            match self
                .space
                .networks
                .create(&PostParams::default(), &network(name, cidr, gateway))
                .await
            {
                Ok(_) => panic!(
                    "expected the API server to refuse Network {name} (cidr {cidr}, gateway {gateway}), but it was created"
                ),
                Err(kube::Error::Api(status)) => {
                    assert!(
                        status.is_invalid() && status.message.contains(field),
                        "expected 422 Invalid naming `{field}` for Network {name} (cidr {cidr}, gateway {gateway}), \
                         found HTTP {} {}: {}",
                        status.code,
                        status.reason,
                        status.message
                    );
                    step!("refused {name}: {}", status.message);
                }
                Err(e) => panic!("expected a 422 for Network {name}, found: {}", api_error(&e)),
            }
        }
        // A Network's addressing cannot change: its Pods keep what they got.
        for (field, value) in [("cidr", "198.18.72.0/23"), ("gateway", "198.18.72.2")] {
            let edit = json!({ "spec": { field: value } });
            match self
                .space
                .networks
                .patch(SEED_NETWORK, &PatchParams::default(), &Patch::Merge(&edit))
                .await
            {
                Err(kube::Error::Api(status))
                    if status.is_invalid()
                        && status.message.contains(&format!("{field} is immutable"))
                        && status.message.contains("create a new Network") =>
                {
                    step!("refused an edit of {SEED_NETWORK}'s {field}: {}", status.message);
                }
                other => panic!(
                    "expected 422 `{field} is immutable ... create a new Network` for an edit of {SEED_NETWORK}, found {:?}",
                    other.map(|obj| network_summary(&obj)).map_err(|e| api_error(&e))
                ),
            }
        }
    }

    /// Step: two overlapping Networks in one namespace: the later reports Ready=False Overlaps.
    pub(super) async fn overlap_is_reported(&self) {
        for (name, cidr, gateway) in [OVERLAP_A, OVERLAP_B] {
            self.space.networks
                .create(&PostParams::default(), &network(name, cidr, gateway))
                .await
                .unwrap_or_else(|e| panic!("expected to create Network {name}, found: {}", api_error(&e)));
            if name == OVERLAP_A.0 {
                // Reconciled first, so B is unambiguously the newcomer.
                wait_for(
                    &format!("Network {name} reconciled ({:?})", self.backend),
                    PATIENCE,
                    async || {
                        let obj = self.network(name).await?;
                        if self.reconciled_as_expected(&obj) {
                            Ok(())
                        } else {
                            Err(network_summary(&obj))
                        }
                    },
                )
                .await;
            }
        }
        let (b, b_cidr, _) = OVERLAP_B;
        let what = format!(
            "Network {b} ({b_cidr}, inside {}) Ready=False reason Overlaps",
            OVERLAP_A.1
        );
        let message = wait_for(&what, PATIENCE, async || {
                let obj = self.network(b).await?;
                match ready_condition(&obj) {
                    Some(c) if c["status"] == "False" && c["reason"] == "Overlaps" => {
                        Ok(c["message"].as_str().unwrap_or_default().to_string())
                    }
                    _ => Err(network_summary(&obj)),
                }
            })
            .await;
        step!("Network {b} reports Overlaps: {message}");

        // Overlaps are cluster-wide: a node holds the bridges of every namespace's Networks.
        let elsewhere = TestNs::create(&self.client, self.scope, "local-b", &[]).await;
        let (c, c_cidr, c_gateway) = OVERLAP_ELSEWHERE;
        elsewhere
            .networks
            .create(&PostParams::default(), &network(c, c_cidr, c_gateway))
            .await
            .unwrap_or_else(|e| panic!("expected to create Network {c}, found: {}", api_error(&e)));
        let senior = format!("Network {}/{SEED_NETWORK},", self.ns);
        let what = format!("Network {}/{c} ({c_cidr}, inside {SEED_CIDR}) Overlaps naming {senior}", elsewhere.name);
        let message = wait_for(&what, PATIENCE, async || {
            let obj = elsewhere.network(c).await?;
            match ready_condition(&obj) {
                Some(cond)
                    if cond["reason"] == "Overlaps" && cond["message"].as_str().is_some_and(|m| m.contains(&senior)) =>
                {
                    Ok(cond["message"].as_str().unwrap_or_default().to_string())
                }
                _ => Err(network_summary(&obj)),
            }
        })
        .await;
        step!("Network {}/{c} in another namespace reports Overlaps: {message}", elsewhere.name);
    }

    /// Step: a Network that Pods use is protected: deleted, it stays Terminating with an
    /// `InUse` condition counting its Pods that are not Succeeded or Failed (here Pending
    /// or running ones), an Event names the first ten and how many more, and a new Pod
    /// naming it is denied as being deleted. (Its Pods are deleted in the next step, and it
    /// goes then.)
    pub(super) async fn network_protected_while_in_use(&self) {
        let image = &self.settings.app_image;
        // Twelve at least, so the Event has more than it names.
        let joined = self
            .space
            .pods
            .list(&ListParams::default().labels(&format!("{NETWORK}={SEED_NETWORK}")))
            .await
            .unwrap_or_else(|e| panic!("expected to list the Pods of {SEED_NETWORK}, found: {}", api_error(&e)))
            .items
            .len();
        for i in joined..12 {
            let joining = pod(&format!("e2e-user-{i:02}"), &[(INJECT, "true"), (NETWORK, SEED_NETWORK)], image);
            self.space.create_stored(&joining).await;
        }
        let users = joined.max(12);
        self.space.attached_pods(SEED_NETWORK, users as i64).await;
        self.space
            .networks
            .delete(SEED_NETWORK, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("expected to delete Network {SEED_NETWORK}, found: {}", api_error(&e)));
        let counted = format!("waits for {users} Pods");
        let what = format!("Network {SEED_NETWORK} Terminating with InUse counting {users} Pods");
        let message = wait_for(&what, PATIENCE, async || {
            let obj = self.network(SEED_NETWORK).await?;
            let in_use = obj.data["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "InUse"))
                .and_then(|c| c["message"].as_str())
                .unwrap_or_default()
                .to_string();
            if obj.metadata.deletion_timestamp.is_some() && in_use.contains(&counted) {
                Ok(in_use)
            } else {
                Err(network_summary(&obj))
            }
        })
        .await;
        step!("Network {SEED_NETWORK} deleted while {users} Pods use it: Terminating, InUse: {message}");
        let more = format!("and {} more", users - 10);
        let note = wait_for(&format!("an InUse Event naming 10 Pods {more}"), PATIENCE, async || {
            let events = self.events_about("Network", SEED_NETWORK).await?;
            events
                .iter()
                .filter(|e| e.reason.as_deref() == Some("InUse"))
                .filter_map(|e| e.message.clone())
                .find(|m| m.contains(&more))
                .ok_or_else(|| format!("{} Events, none InUse saying {more:?}", events.len()))
        })
        .await;
        step!("Event InUse: {note}");
        let late = pod("e2e-join-late", &[(INJECT, "true"), (NETWORK, SEED_NETWORK)], image);
        let denied = wait_for("a Pod naming the deleted Network to be denied", PATIENCE, async || {
            match self.space.create_pod(&late, true).await {
                Ok(_) => Err("admitted".to_string()),
                Err(kube::Error::Api(status)) if status.message.contains("is being deleted") => Ok(status.message),
                Err(e) => Err(api_error(&e)),
            }
        })
        .await;
        step!("a new Pod naming {SEED_NETWORK} is denied: {denied}");
    }

    /// Step: when every Network is deleted, each one disappears: the controller removed its
    /// finalizer. Member Pods go first; a Network already deleted while they used it
    /// (`joined`: the seed) goes as soon as they are gone.
    pub(super) async fn networks_deleted_through_finalizer(&self, joined: bool) {
        self.space.pods
            .delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("expected to delete the test Pods, found: {}", api_error(&e)));
        let names = [SEED_NETWORK, OVERLAP_A.0, OVERLAP_B.0];
        for name in names {
            if joined && name == SEED_NETWORK {
                continue;
            }
            let obj = self
                .network(name)
                .await
                .unwrap_or_else(|found| panic!("expected Network {name} before deleting it, found: {found}"));
            assert!(
                obj.finalizers().iter().any(|f| f == FINALIZER),
                "expected finalizer {FINALIZER} on Network {name} before deletion, found: {}",
                network_summary(&obj)
            );
            self.space.networks
                .delete(name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("expected to delete Network {name}, found: {}", api_error(&e)));
        }
        wait_for(
            "every deleted Network to disappear (finalizer removed by the controller)",
            PATIENCE,
            async || {
                let mut left = Vec::new();
                for name in names {
                    match self.space.networks.get_opt(name).await {
                        Ok(None) => {}
                        Ok(Some(obj)) => left.push(network_summary(&obj)),
                        Err(e) => left.push(format!("{name}: {}", api_error(&e))),
                    }
                }
                if left.is_empty() { Ok(()) } else { Err(left.join("; ")) }
            },
        )
        .await;
        step!("Networks {names:?} deleted through the finalizer");
    }
}
