//! Tier `deployed`: `manifests/` itself, server-side applied, and the binary run as the
//! Deployment's ServiceAccount with the Deployment's arguments, listening on the Service's
//! ClusterIP: the API server reaches it through `clientConfig.service`, as it would reach a
//! Pod. Proves that
//! - the self-managed TLS works: the binary creates the Secret and fills every webhook's
//!   `caBundle` with its CA, and the API server trusts the serving certificate;
//! - the shipped `matchConditions` select the right Pods: the webhook is called (its own
//!   request counter moves) exactly for the Pods that opted in and were not injected yet;
//! - the shipped templates as the API server stores their Pods: apps on ports 80, 443,
//!   8080 and 9090 get the default sidecar (its probes, ports and securityContext pass the
//!   API server's validation, and Pod Security `restricted` in a namespace that enforces
//!   it); `classic`, asked for by name, still gets a legacy Pod its old sidecar and volume,
//!   and still denies an app on its port 80;
//! - RBAC is sufficient (the controller realises a Network as a NetworkAttachmentDefinition,
//!   counts its member Pods, removes it through the finalizer, and the log has no
//!   `forbidden`) and each rule is there for a reason: without the `networks/status` rule
//!   the Network never gets its status, and the log says why.

use std::collections::BTreeMap;

use envoy_injector::inject::TEMPLATE_ANNOTATION as TEMPLATE;
use envoy_injector::template::{CLASSIC_TEMPLATE, DEFAULT_TEMPLATE};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ContainerPort, Secret};
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "deployed",
    run: |suite| Box::pin(run(suite)),
};

/// The legacy opt-in annotation the seed used.
const LEGACY: &str = "initializer.kubernetes.io/envoy";
const NAD_GROUP: (&str, &str, &str, &str) = (
    "k8s.cni.cncf.io",
    "v1",
    "NetworkAttachmentDefinition",
    "network-attachment-definitions",
);
/// Namespace label: the API server refuses Pods that break Pod Security `restricted`.
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");
/// The rule the RBAC step takes away.
const TAKEN_RULE: &str = "networks/status";

async fn run(suite: &Suite) -> TierResult {
    let install = suite.install().await?;
    let scope = Scope::new(suite.settings.mode);
    let plain = TestNs::create(&suite.client, &scope, "deployed", &[]).await;
    let labelled = TestNs::create(&suite.client, &scope, "deployed-label", &[NAMESPACE_OPT_IN]).await;
    let restricted = TestNs::create(&suite.client, &scope, "deployed-restricted", &[RESTRICTED]).await;
    let injector = install.start("envoy-injector-e2e-0", false).await;
    injector.wait_ready().await;

    self_managed_tls(suite, &install).await;
    match_conditions(&install, &injector, &plain, &labelled).await;
    shipped_templates(&install, &plain, &restricted).await;
    network_realised(suite, &injector, &plain).await;
    let forbidden = rbac_denials(&injector);
    assert!(
        forbidden.is_empty(),
        "expected no RBAC `forbidden` in the log of a process running with the shipped RBAC, found:\n{}",
        forbidden.join("\n")
    );
    step!("no `forbidden` in the log: the shipped RBAC is sufficient");
    let without = missing_rule_fails(suite, &install, &injector, &plain).await;
    // The summary keeps the part that names the permission.
    let denial = without
        .find("cannot ")
        .map(|at| without[at..].split(" in API group").next().unwrap_or_default())
        .unwrap_or(&without);
    Ok(format!("no denial with the shipped RBAC; without the {TAKEN_RULE} rule: {denial}"))
}

/// Log lines about a request RBAC refused: `forbidden` naming this ServiceAccount (other
/// `forbidden`s, such as "namespace is being terminated", are not about permissions).
fn rbac_denials(injector: &Injector) -> Vec<String> {
    injector
        .log_lines_with("forbidden")
        .into_iter()
        .filter(|l| l.contains("system:serviceaccount:"))
        .collect()
}

/// The self-managed TLS: the Secret exists with a CA, and every webhook's `caBundle` is that CA.
async fn self_managed_tls(suite: &Suite, install: &Install) {
    let secrets: Api<Secret> = Api::namespaced(suite.client.clone(), &install.namespace);
    let secret = secrets
        .get(&install.tls_secret)
        .await
        .unwrap_or_else(|e| panic!("expected the binary to create Secret {}, found: {}", install.tls_secret, api_error(&e)));
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"), "{:?}", secret.metadata);
    let keys: Vec<String> = secret.data.clone().unwrap_or_default().into_keys().collect();
    for key in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(keys.iter().any(|k| k == key), "expected {key} in Secret {}, found {keys:?}", install.tls_secret);
    }
    let ca = install.ca_pem(&suite.client).await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(suite.client.clone());
    let what = format!(
        "every webhook of MutatingWebhookConfiguration {} to carry the Secret's CA as caBundle",
        install.webhook_config
    );
    let hooks = wait_for(&what, PATIENCE, async || {
        let config = configs.get(&install.webhook_config).await.map_err(|e| api_error(&e))?;
        let hooks = config.webhooks.unwrap_or_default();
        let wrong: Vec<&str> = hooks
            .iter()
            .filter(|h| h.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca.as_slice()))
            .map(|h| h.name.as_str())
            .collect();
        if hooks.is_empty() || !wrong.is_empty() {
            Err(format!("webhooks without that caBundle: {wrong:?} (of {})", hooks.len()))
        } else {
            Ok(hooks.len())
        }
    })
    .await;
    step!(
        "Secret {}/{} holds the CA; the {hooks} webhooks of {} carry it",
        install.namespace,
        install.tls_secret,
        install.webhook_config
    );
}

/// One Pod, where it is created, and what must happen to it.
struct Case {
    what: &'static str,
    annotations: &'static [(&'static str, &'static str)],
    in_labelled_namespace: bool,
    /// Sent to the webhook (and so injected).
    sent: bool,
}

const CASES: &[Case] = &[
    Case {
        what: "opted in by annotation",
        annotations: &[(INJECT, "true")],
        in_labelled_namespace: false,
        sent: true,
    },
    Case {
        what: "opted in by the legacy annotation",
        annotations: &[(LEGACY, "true")],
        in_labelled_namespace: false,
        sent: true,
    },
    Case {
        what: "without annotations",
        annotations: &[],
        in_labelled_namespace: false,
        sent: false,
    },
    Case {
        what: "opted out",
        annotations: &[(INJECT, "false")],
        in_labelled_namespace: false,
        sent: false,
    },
    Case {
        what: "opted in and already carrying the status annotation",
        annotations: &[(INJECT, "true"), (STATUS, "{}")],
        in_labelled_namespace: false,
        sent: false,
    },
    Case {
        what: "without annotations in a labelled namespace",
        annotations: &[],
        in_labelled_namespace: true,
        sent: true,
    },
    Case {
        what: "opted out in a labelled namespace",
        annotations: &[(INJECT, "false")],
        in_labelled_namespace: true,
        sent: false,
    },
];

/// The API server calls the webhook exactly for the Pods the `matchConditions` and
/// `namespaceSelector`s select: the process's request counter tells.
async fn match_conditions(install: &Install, injector: &Injector, plain: &TestNs, labelled: &TestNs) {
    let image = DEFAULT_IMAGE;
    for (i, case) in CASES.iter().enumerate() {
        let ns = if case.in_labelled_namespace { labelled } else { plain };
        let before = injector.admissions().await;
        let stored = ns.create_stored(&pod(&format!("e2e-case-{i}"), case.annotations, image)).await;
        let calls = injector.admissions().await - before;
        let injected = container(&stored, &install.sidecar).is_some();
        assert_eq!(
            (calls, injected),
            (f64::from(u8::from(case.sent)), case.sent),
            "a Pod {}: expected the webhook called {} and the Pod {}injected; found (calls, injected) = \
             ({calls}, {injected}): {}",
            case.what,
            u8::from(case.sent),
            if case.sent { "" } else { "not " },
            describe_pod(&stored)
        );
    }
    step!(
        "matchConditions: {} cases, the webhook called for exactly the opted-in Pods",
        CASES.len()
    );
}

/// The app's own container ports, TCP.
fn with_ports(mut p: k8s_openapi::api::core::v1::Pod, ports: &[i32]) -> k8s_openapi::api::core::v1::Pod {
    let spec = p.spec.as_mut().expect("a spec");
    spec.containers[0].ports = Some(
        ports
            .iter()
            .map(|&port| ContainerPort {
                container_port: port,
                ..ContainerPort::default()
            })
            .collect(),
    );
    p
}

/// What the shipped ConfigMap's templates do to Pods the API server stores: the default
/// sidecar beside apps on the ports apps use, and in a namespace enforcing Pod Security
/// `restricted`; `classic` for a legacy Pod that asks for it, and `classic`'s real port
/// clash denied.
async fn shipped_templates(install: &Install, ns: &TestNs, restricted: &TestNs) {
    let (default_image, classic_image) = (
        Some(embedded_image(DEFAULT_TEMPLATE)),
        Some(embedded_image(CLASSIC_TEMPLATE)),
    );
    for port in [80, 443, 8080, 9090] {
        let stored = ns
            .create_stored(&with_ports(
                pod(&format!("e2e-app-on-{port}"), &[(INJECT, "true")], DEFAULT_IMAGE),
                &[port],
            ))
            .await;
        let sidecar = container(&stored, &install.sidecar)
            .unwrap_or_else(|| panic!("expected the app on port {port} injected, found {}", describe_pod(&stored)));
        let sidecar_ports: Vec<i32> = sidecar.ports.iter().flatten().map(|p| p.container_port).collect();
        assert!(
            sidecar.image == default_image && sidecar_ports == [15006, 15021, 15090],
            "expected the default sidecar ({default_image:?}, ports 15006, 15021, 15090) beside the app on {port}, found {}",
            describe_pod(&stored)
        );
        assert!(
            sidecar.startup_probe.is_some() && sidecar.readiness_probe.is_some() && sidecar.security_context.is_some(),
            "expected the stored sidecar with its probes and securityContext, found {}",
            describe_pod(&stored)
        );
    }
    step!("apps on ports 80, 443, 8080 and 9090: each stored with the default sidecar on 15006, 15021, 15090");

    // Pod Security admission judges the Pod after the webhook: the sidecar must pass too.
    let mut app = pod("e2e-restricted", &[(INJECT, "true")], DEFAULT_IMAGE);
    app.spec.as_mut().expect("a spec").containers[0].security_context = Some(
        serde_json::from_value(serde_json::json!({
            "runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        }))
        .expect("a securityContext"),
    );
    let stored = restricted.create_stored(&app).await;
    assert!(
        container(&stored, &install.sidecar).is_some_and(|s| s.image == default_image),
        "expected the Pod in a `restricted` namespace stored with the default sidecar, found {}",
        describe_pod(&stored)
    );
    step!("namespace enforcing Pod Security `restricted`: the injected Pod is admitted");

    let legacy = ns
        .create_stored(&pod(
            "e2e-legacy-classic",
            &[(LEGACY, "true"), (TEMPLATE, CLASSIC_TEMPLATE)],
            DEFAULT_IMAGE,
        ))
        .await;
    let sidecar = container(&legacy, &install.sidecar);
    let volumes: Vec<&str> = legacy
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| v.name.as_str())
        .collect();
    assert!(
        sidecar.is_some_and(|s| s.image == classic_image) && volumes == ["envoy-conf"],
        "expected the legacy Pod asking for `classic` to get its sidecar ({classic_image:?}) and volume `envoy-conf`, found {}",
        describe_pod(&legacy)
    );
    step!("legacy opt-in with template `classic`: the previous sidecar and its volume, as before");

    let clash = with_ports(
        pod("e2e-classic-on-80", &[(INJECT, "true"), (TEMPLATE, CLASSIC_TEMPLATE)], DEFAULT_IMAGE),
        &[80],
    );
    let refused = ns
        .create_pod(&clash, false)
        .await
        .map(|p| describe_pod(&p))
        .expect_err("an app on port 80 with `classic` is denied");
    let message = api_error(&refused);
    let expected = "port 80/TCP of template `classic` container `envoy` is already used by Pod container `app`";
    assert!(
        message.contains("denied the request") && message.contains(expected),
        "expected the API server's refusal to carry `{expected}`, found: {message}"
    );
    step!("denied through the API server: {expected}");
}

/// A Network is realised as a NAD it owns, counts a member Pod, waits for that Pod when
/// deleted, and goes through the finalizer (the NAD with it): every controller permission
/// used for real (the list of its Pods before it goes included).
async fn network_realised(suite: &Suite, injector: &Injector, ns: &TestNs) {
    let (group, version, kind, plural) = NAD_GROUP;
    let nads: Api<DynamicObject> = Api::namespaced_with(
        suite.client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
    );
    let name = "e2e-net";
    ns.create_network(name, "198.18.84.0/24", "198.18.84.1").await;
    let network = ns.network_ready(name, PATIENCE).await;
    assert!(
        network.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER),
        "expected finalizer {FINALIZER}: {}",
        network_summary(&network)
    );
    let nad = nads
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("expected NetworkAttachmentDefinition {name}, found: {}", api_error(&e)));
    let owned = nad
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Network" && o.name == name);
    assert!(owned, "expected NAD {name} owned by its Network, found {:?}", nad.metadata);
    let reporters = ns.network_reporters(name).await;
    assert!(
        reporters.iter().all(|r| *r == injector.name),
        "expected Events reported by {}, found {reporters:?}",
        injector.name
    );

    let member = ns
        .create_stored(&pod("e2e-member", &[(INJECT, "true"), (NETWORK, name)], DEFAULT_IMAGE))
        .await;
    assert_eq!(
        label(&member, NETWORK),
        Some(name),
        "expected the joining Pod labelled, found: {}",
        describe_pod(&member)
    );
    ns.attached_pods(name, 1).await;

    ns.networks
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("expected to delete Network {name}, found: {}", api_error(&e)));
    // Its Pod still uses it: it waits, saying so, until the Pod is gone.
    wait_for(&format!("Network {name} Terminating with InUse counting its Pod"), PATIENCE, async || {
        let network = ns.network(name).await?;
        let in_use = network.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "InUse" && c["status"] == "True");
        if network.metadata.deletion_timestamp.is_some() && in_use {
            Ok(())
        } else {
            Err(network_summary(&network))
        }
    })
    .await;
    ns.pods
        .delete("e2e-member", &DeleteParams::default().grace_period(0))
        .await
        .unwrap_or_else(|e| panic!("expected to delete Pod e2e-member, found: {}", api_error(&e)));
    let what = format!("Network {name} and its NAD to be gone once its Pod is (finalizer removed by the controller)");
    wait_for(&what, PATIENCE, async || {
        let network = ns.networks.get_opt(name).await.map_err(|e| api_error(&e))?;
        let nad = nads.get_opt(name).await.map_err(|e| api_error(&e))?;
        match (network, nad) {
            (None, None) => Ok(()),
            (network, nad) => Err(format!(
                "Network {:?}, NAD present: {}",
                network.as_ref().map(network_summary),
                nad.is_some()
            )),
        }
    })
    .await;
    step!(
        "Network {name}: Ready, NAD owned by it, 1 member Pod counted, deleted: InUse until the Pod was gone, then through \
         the finalizer (NAD too)"
    );
}

/// Without the `networks/status` rule the controller cannot write status: the Network stays
/// without one and the log names the missing permission. With the rule back it recovers.
/// Returns the logged error.
async fn missing_rule_fails(suite: &Suite, install: &Install, injector: &Injector, ns: &TestNs) -> String {
    let taken = install.remove_cluster_role_rule(&suite.client, TAKEN_RULE).await;
    step!("ClusterRole without the rule {taken:?}");
    let name = "e2e-net-no-status";
    ns.create_network(name, "198.18.85.0/24", "198.18.85.1").await;
    let what = format!("a `forbidden` error naming {TAKEN_RULE} in the log of {}", injector.name);
    let line = wait_for(&what, PATIENCE, async || {
        rbac_denials(injector)
            .into_iter()
            .find(|l| l.contains(TAKEN_RULE))
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    let network = ns.network(name).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        ready_condition(&network).is_none(),
        "expected no status without the {TAKEN_RULE} rule, found: {}",
        network_summary(&network)
    );
    let error = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(&line)
        .ok()
        .and_then(|fields| fields.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| line.clone());
    // The Debug form of the API status that follows repeats the message.
    let error = error.split(": Forbidden (Status").next().unwrap_or_default().to_string();
    step!("without {TAKEN_RULE}: {error}");

    install.restore_cluster_role(&suite.client).await;
    ns.network_ready(name, PATIENCE * 2).await;
    let others: Vec<String> = rbac_denials(injector)
        .into_iter()
        .filter(|l| !l.contains(TAKEN_RULE))
        .collect();
    assert!(
        others.is_empty(),
        "expected the only `forbidden` errors to name {TAKEN_RULE}, found:\n{}",
        others.join("\n")
    );
    step!("with the rule restored, Network {name} is Ready");
    error
}
