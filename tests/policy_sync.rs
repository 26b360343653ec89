//! The Lease holder's admission-policy sync (`policy_sync`) against a scripted API
//! server: the mode an API server without MutatingAdmissionPolicy gets, the order of its
//! writes (the denial before the policies that mark Pods for it, each policy before its
//! binding; bindings deleted before their policies; the objects of the previous layout
//! removed once the present one is written, hand-applied ones too), no write over
//! converged state, and
//! every object owned by the ValidatingWebhookConfiguration: its uid read before each
//! pass, objects owned anew when it is re-created or were written before ownership, none
//! written while it is absent. Tier `policy_mode` proves the same against the real API
//! server, tier `removal` the garbage collection.

// Its named steps are the controller's and the TLS bootstrap's; this file scripts its own.
#[allow(unused_imports)]
mod mock_api;

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_injector::live::LiveTemplates;
use envoy_injector::metrics::Metrics;
use envoy_injector::policies::{self, Options, PolicyObject};
use envoy_injector::policies::{Mode, Path};
use envoy_injector::policy_sync::{self, HASH_ANNOTATION};
use envoy_injector::shutdown::CancellationToken;
use envoy_injector::template::TemplateSet;
use http::Method;
use mock_api::{ApiServer, Call};
use serde_json::{Value, json};
use tokio::sync::watch;

const GROUP: &str = "/apis/admissionregistration.k8s.io/v1";
/// The owner every object written is given (`serve --policy-owner`).
const OWNER: &str = "envoy-injector";
const KINDS: [&str; 4] = [
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicybindings",
    "validatingadmissionpolicies",
    "mutatingadmissionpolicies",
];

fn discovery(with_policies: bool) -> Value {
    let mut resources = vec![
        json!({"name": "validatingadmissionpolicies", "singularName": "", "namespaced": false, "kind": "ValidatingAdmissionPolicy", "verbs": ["get"]}),
    ];
    if with_policies {
        resources.push(json!({"name": "mutatingadmissionpolicies", "singularName": "", "namespaced": false, "kind": "MutatingAdmissionPolicy", "verbs": ["get"]}));
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "admissionregistration.k8s.io/v1", "resources": resources})
}

fn templates(keys: &[&str]) -> TemplateSet {
    let data: BTreeMap<String, String> = keys
        .iter()
        .map(|k| {
            (
                k.to_string(),
                format!("containers: [{{name: side-{k}, image: busybox}}]\n"),
            )
        })
        .collect();
    TemplateSet::from_data("test", &data, envoy_injector::template::KubeVersion::NEWEST).unwrap()
}

fn list_reply(items: Vec<Value>) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {}, "items": items})
}

/// The owner's read that starts a pass, answered with the owner at `uid` (`None`: absent).
async fn answer_owner(server: &mut ApiServer, uid: Option<&str>) {
    let call = server
        .expect(Method::GET, &format!("{GROUP}/validatingwebhookconfigurations/{OWNER}"))
        .await;
    match uid {
        Some(uid) => call.reply(
            200,
            &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                    "metadata": {"name": OWNER, "uid": uid}}),
        ),
        None => call.reply_not_found(),
    }
}

/// The ownerReferences every object written carries: the owner at `uid`, no
/// `blockOwnerDeletion` (deleting the owner never waits on them).
fn owned_by(uid: &str) -> Value {
    json!([{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "name": OWNER, "uid": uid}])
}

/// The hash of `object` as compiled, owned by the owner at `uid` (`None`: as written
/// before ownership).
fn hash_of(object: &PolicyObject, uid: Option<&str>) -> String {
    let mut body = serde_json::to_value(object).unwrap();
    if let Some(uid) = uid {
        body["metadata"]["ownerReferences"] = owned_by(uid);
    }
    envoy_injector::template::content_revision(&body.to_string())
}

/// Every object of `compiled` as listed, at its hash for the owner at `uid`.
fn listed_as(compiled: &policies::Compiled, uid: Option<&str>) -> BTreeMap<&'static str, Vec<Value>> {
    KINDS
        .iter()
        .map(|kind| {
            let items = compiled
                .objects
                .iter()
                .filter(|o| path_of(o).starts_with(&format!("{GROUP}/{kind}/")))
                .map(|o| listed(o.name(), &hash_of(o, uid), "envoy-injector"))
                .collect();
            (*kind, items)
        })
        .collect()
}

/// The lists of one pass, each answered with `existing` of its kind.
async fn answer_lists(server: &mut ApiServer, existing: &BTreeMap<&str, Vec<Value>>) {
    for kind in KINDS {
        let call = server.expect(Method::GET, &format!("{GROUP}/{kind}")).await;
        assert!(
            call.query
                .contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Denvoy-injector"),
            "lists only ours: {}",
            call.query
        );
        call.reply(200, &list_reply(existing.get(kind).cloned().unwrap_or_default()));
    }
}

/// The path of a compiled object.
fn path_of(object: &PolicyObject) -> String {
    let kind = match object {
        PolicyObject::Mutating(_) => "mutatingadmissionpolicies",
        PolicyObject::MutatingBinding(_) => "mutatingadmissionpolicybindings",
        PolicyObject::Validating(_) => "validatingadmissionpolicies",
        PolicyObject::ValidatingBinding(_) => "validatingadmissionpolicybindings",
    };
    format!("{GROUP}/{kind}/{}", object.name())
}

/// Metadata of an object as the sync lists it: ours, at `hash`, written by `manager`.
fn listed(name: &str, hash: &str, manager: &str) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": "envoy-injector"},
        "annotations": {HASH_ANNOTATION: hash},
        "managedFields": [{"manager": manager, "operation": "Apply", "apiVersion": "admissionregistration.k8s.io/v1"}],
    }})
}

fn applied(call: Call) -> Value {
    assert!(
        call.query.contains("fieldManager=envoy-injector") && call.query.contains("force=true"),
        "server-side apply as envoy-injector: {}",
        call.query
    );
    assert_eq!(call.content_type, "application/apply-patch+yaml");
    let body = call.body.clone();
    call.echo(200);
    body
}

/// The Lease holder's sync in policy mode over `keys`, owned by [`OWNER`]: the live
/// templates to edit, the scripted server, the stop token and the task.
fn start_policy_mode(
    keys: &[&str],
) -> (
    Arc<LiveTemplates>,
    ApiServer,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let (client, server) = mock_api::mock_client("default");
    let live = Arc::new(LiveTemplates::new(Some(templates(keys))));
    let (_publish, mode) = watch::channel(Some(Path::Policy));
    let stop = CancellationToken::new();
    let running = tokio::spawn(policy_sync::run(
        client,
        live.clone(),
        mode,
        Options::default(),
        OWNER.to_string(),
        Metrics::unregistered(),
        stop.clone(),
    ));
    (live, server, stop, running)
}

/// Each object of `objects` server-side applied in order, owned by the owner at `uid`,
/// its hash covering that ownerReference.
async fn expect_owned_applies(server: &mut ApiServer, objects: &[PolicyObject], uid: &str) {
    for object in objects {
        let body = applied(server.expect(Method::PATCH, &path_of(object)).await);
        assert_eq!(
            body["metadata"]["ownerReferences"],
            owned_by(uid),
            "{}",
            path_of(object)
        );
        assert_eq!(
            body["metadata"]["annotations"][HASH_ANNOTATION],
            json!(hash_of(object, Some(uid))),
            "the hash covers the ownerReference"
        );
    }
}

#[tokio::test]
async fn an_api_server_without_mutating_admission_policy_gets_the_webhook_and_nothing_to_remove() {
    let (client, mut server) = mock_api::mock_client("default");
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let (publish, mut mode) = watch::channel(None);
    let stop = CancellationToken::new();
    let deciding = tokio::spawn(policy_sync::decide_path(
        client.clone(),
        Mode::Auto,
        metrics.clone(),
        stop.clone(),
        publish,
    ));
    server.expect(Method::GET, GROUP).await.reply(200, &discovery(false));
    deciding.await.unwrap();
    assert_eq!(*mode.borrow_and_update(), Some(Path::Webhook));
    let text = envoy_injector::metrics::encode(&registry);
    assert!(
        text.contains("envoy_injector_injection_mode{mode=\"webhook\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("envoy_injector_injection_mode{mode=\"policy\"} 0"),
        "{text}"
    );

    // The Lease holder in webhook mode: the lists answer 404 (not served), and it stops.
    let running = tokio::spawn(policy_sync::run(
        client,
        Arc::new(LiveTemplates::new(Some(templates(&["config"])))),
        mode,
        Options::default(),
        OWNER.to_string(),
        metrics,
        stop,
    ));
    server
        .expect(Method::GET, &format!("{GROUP}/{}", KINDS[0]))
        .await
        .reply_unknown_resource();
    running.await.unwrap();
    server.assert_no_more_requests().await;
}

#[tokio::test]
async fn writes_go_in_a_safe_order_and_converged_state_is_left_alone() {
    let (live, mut server, stop, running) = start_policy_mode(&["canary", "config"]);

    // First pass over a cluster with the previous layout (one pair of policies per template:
    // written by us, or applied by hand with kubectl) and an object of ours applied by hand
    // under another name: every compiled object in the compiler's order.
    let expected = policies::compile(&templates(&["canary", "config"]), &Options::default());
    let mut existing: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    existing.insert(
        KINDS[0],
        vec![listed("envoy-injector-template-old", "x", "envoy-injector")],
    );
    existing.insert(
        KINDS[2],
        vec![
            listed("envoy-injector-template-old", "x", "envoy-injector"),
            listed("envoy-injector-known-templates", "x", "kubectl"),
        ],
    );
    existing.insert(
        KINDS[3],
        vec![
            listed("envoy-injector-template-hand", "x", "kubectl"),
            listed("envoy-injector-custom", "x", "kubectl"),
        ],
    );
    answer_owner(&mut server, Some("uid-1")).await;
    answer_lists(&mut server, &existing).await;
    expect_owned_applies(&mut server, &expected.objects, "uid-1").await;
    // Then the previous layout, binding before policy, hand-applied or not; the object
    // applied by hand under a name of neither layout stays.
    for (kind, name) in [
        (KINDS[0], "envoy-injector-template-old"),
        (KINDS[2], "envoy-injector-template-old"),
        (KINDS[2], "envoy-injector-known-templates"),
        (KINDS[3], "envoy-injector-template-hand"),
    ] {
        server
            .expect(Method::DELETE, &format!("{GROUP}/{kind}/{name}"))
            .await
            .reply(200, &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
    }

    // A template removed: only the mutating policies, which hold the templates, change;
    // what is converged is not written.
    live.replace(templates(&["config"]));
    answer_owner(&mut server, Some("uid-1")).await;
    let converged = listed_as(&expected, Some("uid-1"));
    answer_lists(&mut server, &converged).await;
    let after = policies::compile(&templates(&["config"]), &Options::default());
    let changed: Vec<String> = after
        .objects
        .iter()
        .filter(|o| !expected.objects.iter().any(|e| e.name() == o.name() && e == *o))
        .map(path_of)
        .collect();
    assert_eq!(
        changed,
        [
            format!("{GROUP}/mutatingadmissionpolicies/envoy-injector-inject"),
            format!("{GROUP}/mutatingadmissionpolicies/envoy-injector-inject-annotated"),
        ],
        "only the policies that hold the templates change when a template goes"
    );
    for path in &changed {
        applied(server.expect(Method::PATCH, path).await);
    }

    // Converged: a pass (here, the same set again) lists and writes nothing.
    live.replace(templates(&["config"]));
    answer_owner(&mut server, Some("uid-1")).await;
    let now = listed_as(&after, Some("uid-1"));
    answer_lists(&mut server, &now).await;
    stop.cancel();
    running.await.unwrap();
    server.assert_no_more_requests().await;
}

#[tokio::test]
async fn every_object_follows_its_owner_and_none_is_written_without_it() {
    let (live, mut server, stop, running) = start_policy_mode(&["config"]);
    let compiled = policies::compile(&templates(&["config"]), &Options::default());

    // Objects written before ownership (their hash covers no ownerReference): each is
    // applied again, owned; none is deleted.
    answer_owner(&mut server, Some("uid-1")).await;
    answer_lists(&mut server, &listed_as(&compiled, None)).await;
    expect_owned_applies(&mut server, &compiled.objects, "uid-1").await;

    // The owner deleted and created again (a new uid): every object is owned anew, none
    // deleted.
    live.replace(templates(&["config"]));
    answer_owner(&mut server, Some("uid-2")).await;
    answer_lists(&mut server, &listed_as(&compiled, Some("uid-1"))).await;
    expect_owned_applies(&mut server, &compiled.objects, "uid-2").await;

    // The owner gone (the installation being removed while this replica still runs):
    // nothing is listed or written, and the owner is asked again after a backoff; once it
    // is back, as the objects are, the pass writes nothing.
    live.replace(templates(&["config"]));
    answer_owner(&mut server, None).await;
    answer_owner(&mut server, Some("uid-2")).await;
    answer_lists(&mut server, &listed_as(&compiled, Some("uid-2"))).await;
    stop.cancel();
    running.await.unwrap();
    server.assert_no_more_requests().await;
}
