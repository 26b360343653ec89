//! Network controller scenarios against a mocked API server (tower-test), in the style of
//! kube-rs' own controller tests: `reconcile` runs against a `kube::Client` whose transport
//! is a scripted fake; every request's method, path (and body where it matters) is
//! asserted and answered in order, and after the reconcile no further request may arrive.
//!
//! Events go through the real `events::Publisher`, so the script answers its
//! `POST /apis/events.k8s.io/v1/namespaces/default/events` like any other request.
//!
//! The overlap scenarios (chains, a deleted winner, CIDR edits) are in `controller/overlaps.rs`.

use std::sync::Arc;
use std::time::Duration;

use envoy_injector::controller::Indexes;
use envoy_injector::controller::{self, Context, Error};
use envoy_injector::events::Publisher;
use envoy_injector::metrics::{Metrics, ReconcileLabels, ReconcileResult};
use envoy_injector::network::backend::{Backend, MultusBackend, NoBackend};
use envoy_injector::network::crd::{FINALIZER, Network, NetworkCondition, NetworkStatus, READY};
use envoy_injector::network::nad;
use envoy_injector::shutdown::CancellationToken;
use http::Method;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::time::timeout;

mod mock_api;
use mock_api::{ApiServer, PATIENCE};

#[path = "common/builders.rs"]
mod builders;
use builders::{NetworkBuilder, at, member_pod};

/// A Network of namespace `default` at generation 2 that already carries the finalizer.
fn network(name: &str, cidr: &str, gateway: &str) -> Network {
    NetworkBuilder::new(name)
        .namespace(NS)
        .cidr(cidr, gateway)
        .generation(2)
        .resource_version("100")
        .finalized()
        .build()
}

#[path = "controller/overlaps.rs"]
mod overlaps;

const NS: &str = "default";
const NAME: &str = "example-network";
const NAD_REF: &str = "NetworkAttachmentDefinition/default/example-network";
const READY_MESSAGE: &str = "multus backend: NetworkAttachmentDefinition/default/example-network is in place";

// ---------------------------------------------------------------- fixtures

fn example() -> Network {
    network(NAME, "192.168.0.0/16", "192.168.0.1")
}

fn ready_condition(message: &str) -> NetworkCondition {
    NetworkCondition {
        type_: READY.into(),
        status: "True".into(),
        reason: "Ready".into(),
        message: message.into(),
        last_transition_time: "2024-01-01T00:00:05Z".into(),
        observed_generation: Some(2),
    }
}

fn with_status(mut n: Network, status: NetworkStatus) -> Network {
    n.status = Some(status);
    n
}

fn ready_status(attached_pods: i64) -> NetworkStatus {
    NetworkStatus {
        conditions: vec![ready_condition(READY_MESSAGE)],
        observed_generation: Some(2),
        attached_pods,
        backend_ref: Some(NAD_REF.into()),
    }
}

/// The NAD as the API server would store it for `n`.
fn live_nad(n: &Network) -> Value {
    let owner = nad::Owner {
        api_version: "samplecrd.k8s.io/v1",
        kind: "Network",
        name: n.metadata.name.as_deref().unwrap(),
        uid: n.metadata.uid.as_deref().unwrap(),
    };
    let mut value = nad::render(NS, &owner, &n.spec.cidr, &n.spec.gateway);
    value["metadata"]["uid"] = json!("nad-uid");
    value["metadata"]["resourceVersion"] = json!("5");
    value
}

struct Fixture {
    ctx: Arc<Context>,
    networks: Writer<Network>,
}

impl Fixture {
    /// As the cache would on a Network watch event: store first, then the overlap index
    /// (whose requests go to the pending set while a controller runs).
    fn network_event(&mut self, event: watcher::Event<Network>) {
        self.networks.apply_watcher_event(&event);
        let indexes = &self.ctx.indexes;
        indexes.pending.push(indexes.overlaps.apply(&event));
    }

    /// As the cache would on a member-Pod watch event.
    fn pod_event(&self, event: watcher::Event<PartialObjectMeta<Pod>>) {
        let indexes = &self.ctx.indexes;
        indexes.pending.push(indexes.members.apply(&event));
    }
}

/// A controller context whose every request goes to the returned scripted API server, with
/// the backend `backend` makes and the caches listing `networks` and `pods`. The test keeps
/// no Client of its own: once the fixture is dropped, the server can tell that no further
/// request was made.
fn scripted(
    backend: impl FnOnce(&Client) -> Arc<dyn Backend>,
    networks: &[&Network],
    pods: &[PartialObjectMeta<Pod>],
) -> (Fixture, ApiServer) {
    let (client, server) = mock_api::mock_client(NS);
    let backend = backend(&client);
    let (network_store, network_writer) = reflector::store::<Network>();
    let ctx = Context::new(
        client.clone(),
        backend,
        Arc::new(Publisher::new(client, "controller-test")),
        network_store,
        Indexes::default(),
        Metrics::unregistered(),
    );
    let mut fx = Fixture {
        ctx: Arc::new(ctx),
        networks: network_writer,
    };
    // As the watches' initial lists: Init, InitApply per object, InitDone (the store is
    // swapped in and marked ready at InitDone).
    fx.network_event(watcher::Event::Init);
    for n in networks {
        fx.network_event(watcher::Event::InitApply((*n).clone()));
    }
    fx.network_event(watcher::Event::InitDone);
    fx.pod_event(watcher::Event::Init);
    for p in pods {
        fx.pod_event(watcher::Event::InitApply(p.clone()));
    }
    fx.pod_event(watcher::Event::InitDone);
    (fx, server)
}

/// A Multus backend whose NAD index has listed `nads` (as the controller's watch would).
fn multus_listed(client: &Client, nads: &[Value]) -> Arc<dyn Backend> {
    let backend = MultusBackend::new(client.clone());
    let index = backend.nad_index().expect("multus keeps a NAD index");
    index.apply(&watcher::Event::Init);
    for nad in nads {
        index.apply(&watcher::Event::InitApply(serde_json::from_value(nad.clone()).unwrap()));
    }
    index.apply(&watcher::Event::InitDone);
    Arc::new(backend)
}

/// The requeue delay of `action`. kube-runtime keeps it private; its `Debug` form is
/// `Action { requeue_after: Some(1.5s) }` with `Duration`'s own formatting.
fn requeue_after(action: &Action) -> Option<Duration> {
    let text = format!("{action:?}");
    let inner = text.split_once("Some(")?.1.split_once(')')?.0;
    let unit_at = inner.find(|c: char| c.is_alphabetic() || c == 'µ')?;
    let (number, unit) = inner.split_at(unit_at);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => number,
        "ms" => number / 1e3,
        "µs" => number / 1e6,
        "ns" => number / 1e9,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

/// `action` retries after a jittered `base`: between half of it and all of it.
fn jittered(action: &Action, base: Duration) -> bool {
    // Debug output rounds to the nanosecond; allow that much.
    let slack = Duration::from_micros(1);
    requeue_after(action).is_some_and(|d| d + slack >= base / 2 && d <= base + slack)
}

fn multus(client: &Client) -> Arc<dyn Backend> {
    Arc::new(MultusBackend::new(client.clone()))
}

fn no_backend(_: &Client) -> Arc<dyn Backend> {
    Arc::new(NoBackend)
}

fn count(ctx: &Context, result: ReconcileResult) -> u64 {
    ctx.metrics.reconciles.get_or_create(&ReconcileLabels { result }).get()
}

/// Runs `reconcile` and the server script side by side, under the safety bound.
async fn exchange<S>(network: &Network, ctx: &Arc<Context>, script: S) -> Result<Action, Error>
where
    S: Future<Output = ()>,
{
    let (result, ()) = timeout(
        PATIENCE,
        futures::future::join(controller::reconcile(Arc::new(network.clone()), ctx.clone()), script),
    )
    .await
    .expect("the scripted exchange did not finish");
    result
}

fn ready_of(status_patch: &Value) -> &Value {
    let conditions = status_patch["status"]["conditions"]
        .as_array()
        .expect("conditions sent whole");
    conditions
        .iter()
        .find(|c| c["type"] == READY)
        .expect("a Ready condition")
}

// ---------------------------------------------------------------- scenarios

/// (1) create: the finalizer comes first (server-side apply), then in the same pass NAD
/// GET 404 → NAD created → status Ready=True with observedGeneration, attachedPods and
/// backendRef → Event `Ready`.
#[tokio::test]
async fn create_adds_finalizer_then_nad_then_ready_status_and_event() {
    let mut fresh = example();
    fresh.metadata.finalizers = None;
    let pods = [
        member_pod(NS, "p1", NAME),
        member_pod(NS, "p2", "other-network"),
        member_pod("elsewhere", "p3", NAME),
    ];
    let (fx, mut server) = scripted(multus, &[&fresh], &pods);

    let action = exchange(&fresh, &fx.ctx, async {
        let call = server.expect_finalizer_apply(NS, NAME).await;
        assert_eq!(
            call.body,
            json!({
                "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
                "metadata": {"name": NAME, "uid": "uid-example-network", "finalizers": [FINALIZER]}
            })
        );
        let mut applied = serde_json::to_value(example()).unwrap();
        applied["metadata"]["resourceVersion"] = json!("101");
        call.reply(200, &applied);

        server.expect_nad_get(NS, NAME).await.reply_not_found();

        let create = server.expect_nad_create(NS).await;
        let nad = create.body.clone();
        assert_eq!(nad["kind"], "NetworkAttachmentDefinition");
        assert_eq!(nad["metadata"]["name"], NAME);
        assert_eq!(nad["metadata"]["ownerReferences"][0]["uid"], "uid-example-network");
        assert_eq!(nad["metadata"]["ownerReferences"][0]["kind"], "Network");
        let config: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
        assert_eq!(config["type"], "bridge");
        assert_eq!(config["ipam"]["ranges"][0][0]["subnet"], "192.168.0.0/16");
        assert_eq!(config["ipam"]["ranges"][0][0]["gateway"], "192.168.0.1");
        create.echo(201);

        let patch = server.expect_status_patch(NS, NAME).await;
        let ready = ready_of(&patch.body);
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], "Ready");
        assert_eq!(ready["observedGeneration"], 2);
        assert!(ready["lastTransitionTime"].as_str().unwrap().ends_with('Z'));
        assert_eq!(patch.body["status"]["observedGeneration"], 2);
        assert_eq!(patch.body["status"]["attachedPods"], 1, "only p1 is a member");
        assert_eq!(patch.body["status"]["backendRef"], NAD_REF);
        patch.reply_merged(&example(), Some("102"));

        let event = server.expect_network_event(NS, "Normal", "Ready").await;
        assert_eq!(event["regarding"]["name"], NAME);
    })
    .await
    .expect("one pass adds the finalizer and applies");
    assert_eq!(action, Action::requeue(controller::RESYNC));
    assert_eq!(count(&fx.ctx, ReconcileResult::Changed), 1);
    assert_eq!(count(&fx.ctx, ReconcileResult::Error), 0);

    // The store still holds the copy without finalizer (the watch lags): the next pass
    // works on what the API server returned and writes nothing.
    exchange(&fresh, &fx.ctx, async {
        server.expect_nad_get(NS, NAME).await.reply(200, &live_nad(&example()));
    })
    .await
    .expect("a stale store copy is not drift");
    assert_eq!(count(&fx.ctx, ReconcileResult::Unchanged), 1);

    drop(fx);
    server.assert_no_more_requests().await;
}

/// A finalizer write on a stale copy (409: gone since, 422: recreated under the same
/// name) is a conflict retried shortly, not a failure.
#[tokio::test]
async fn stale_copy_on_finalizer_writes_is_a_conflict_not_a_failure() {
    let mut fresh = example();
    fresh.metadata.finalizers = None;
    let mut deleting = example();
    deleting.metadata.deletion_timestamp = Some(at(100));
    let (fx, mut server) = scripted(no_backend, &[&fresh], &[]);

    let action = exchange(&fresh, &fx.ctx, async {
        server
            .expect_finalizer_apply(NS, NAME)
            .await
            .reply_status(409, "Conflict", "uid mismatch");
    })
    .await
    .expect("a conflict is not an error");
    assert!(jittered(&action, Duration::from_secs(1)), "{action:?}");

    exchange(&deleting, &fx.ctx, async {
        server.expect_network_pods(NS, NAME, &[]).await;
        server.expect_network_event(NS, "Normal", "Cleanup").await;
        let patch = server.expect_finalizer_removal(NS, NAME).await;
        patch.reply_status(422, "Invalid", "test operation failed");
    })
    .await
    .expect("a failed test op is a conflict too");
    assert_eq!(count(&fx.ctx, ReconcileResult::Conflict), 2);
    assert_eq!(count(&fx.ctx, ReconcileResult::Error), 0);
    assert_eq!(fx.ctx.failures(&ObjectRef::from_obj(&fresh)), 0, "no backoff streak");

    drop(fx);
    server.assert_no_more_requests().await;
}

/// A restart with everything converged: the NAD index has listed the NAD, the status says
/// what the controller would write: no request at all (no read either).
#[tokio::test]
async fn converged_network_makes_no_request() {
    let current = with_status(example(), ready_status(1));
    let (fx, server) = scripted(
        |client| multus_listed(client, &[live_nad(&current)]),
        &[&current],
        &[member_pod(NS, "p1", NAME)],
    );

    let action = exchange(&current, &fx.ctx, async {}).await.expect("nothing to do");
    assert_eq!(action, Action::requeue(controller::RESYNC));
    assert_eq!(count(&fx.ctx, ReconcileResult::Unchanged), 1);

    drop(fx);
    server.assert_no_more_requests().await;
}

/// A NAD the listed index does not have is created at once, without a GET first.
#[tokio::test]
async fn nad_absent_from_the_index_is_created_without_a_read() {
    let current = with_status(example(), ready_status(0));
    let (fx, mut server) = scripted(|client| multus_listed(client, &[]), &[&current], &[]);

    exchange(&current, &fx.ctx, async {
        let create = server.expect_nad_create(NS).await;
        let mut stored = create.body.clone();
        stored["metadata"]["uid"] = json!("nad-uid");
        stored["metadata"]["resourceVersion"] = json!("7");
        create.reply(201, &stored);
    })
    .await
    .expect("created");
    // Recorded on the spot: the next pass knows it is in place.
    exchange(&current, &fx.ctx, async {}).await.expect("in place");

    drop(fx);
    server.assert_no_more_requests().await;
}

/// (2) a resync that changes nothing: status and NAD already match → one GET, no write.
#[tokio::test]
async fn noop_resync_only_reads() {
    let current = with_status(example(), ready_status(1));
    let pods = [member_pod(NS, "p1", NAME)];
    let (fx, mut server) = scripted(multus, &[&current], &pods);

    let action = exchange(&current, &fx.ctx, async {
        server.expect_nad_get(NS, NAME).await.reply(200, &live_nad(&current));
    })
    .await
    .expect("no-op reconcile succeeds");
    assert_eq!(action, Action::requeue(controller::RESYNC));
    assert_eq!(count(&fx.ctx, ReconcileResult::Unchanged), 1);
    assert_eq!(count(&fx.ctx, ReconcileResult::Changed), 0);

    drop(fx);
    // No PATCH, POST, PUT or DELETE followed the GET.
    server.assert_no_more_requests().await;
}

/// (3) gateway outside the cidr: Ready=False InvalidSpec, Warning Event, no NAD (the listed
/// index knows there is none: no request for it).
#[tokio::test]
async fn invalid_spec_reports_condition_and_holds_no_nad() {
    let bad = network(NAME, "10.0.0.0/24", "10.0.1.1");
    let (fx, mut server) = scripted(|client| multus_listed(client, &[]), &[&bad], &[]);

    let action = exchange(&bad, &fx.ctx, async {
        let patch = server.expect_status_patch(NS, NAME).await;
        let ready = ready_of(&patch.body).clone();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "InvalidSpec");
        assert_eq!(ready["message"], "gateway 10.0.1.1 is not inside cidr 10.0.0.0/24");
        assert_eq!(patch.body["status"]["backendRef"], Value::Null);
        assert_eq!(patch.body["status"]["observedGeneration"], 2);
        patch.reply_ok(&bad);

        let event = server.expect_network_event(NS, "Warning", "InvalidSpec").await;
        assert_eq!(event["note"], "gateway 10.0.1.1 is not inside cidr 10.0.0.0/24");
    })
    .await
    .expect("an invalid spec is reported, not an error");
    assert_eq!(action, Action::requeue(controller::RESYNC));

    drop(fx);
    server.assert_no_more_requests().await;
}

/// (4) the NAD CRD is missing (404 without an object name, then a plain-text 404):
/// Ready=False BackendUnavailable once, retried with growing backoff without further
/// writes; when the CRD appears the NAD is created and the Network turns Ready.
#[tokio::test]
async fn backend_missing_reports_unavailable_and_backs_off() {
    let n = example();
    let (fx, mut server) = scripted(multus, &[&n], &[]);
    let object = ObjectRef::from_obj(&n);

    let mut reported = None;
    let result = exchange(&n, &fx.ctx, async {
        server
            .expect_nad_get(NS, NAME)
            .await
            .reply_unknown_resource();
        let patch = server.expect_status_patch(NS, NAME).await;
        let ready = ready_of(&patch.body).clone();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "BackendUnavailable");
        assert_eq!(
            ready["message"],
            "NetworkAttachmentDefinition CRD (k8s.cni.cncf.io/v1) is not installed; install Multus or run with --network-backend none"
        );
        assert_eq!(patch.body["status"]["backendRef"], Value::Null);
        reported = Some(patch.body["status"].clone());
        patch.reply_ok(&n);
        server.expect_network_event(NS, "Warning", "BackendUnavailable").await;
    })
    .await;
    let error = result.expect_err("an unavailable backend is retried");
    assert!(matches!(error, Error::BackendUnavailable { .. }), "{error}");
    assert!(error.to_string().contains("is not installed"), "{error}");
    let first = controller::error_policy(Arc::new(n.clone()), &error, fx.ctx.clone());
    assert!(jittered(&first, Duration::from_secs(1)), "{first:?}");

    // Retry with the reported status in the store; the whole API group is unknown now
    // (plain-text 404): still unavailable, nothing written, no second Event.
    let reported: NetworkStatus = serde_json::from_value(reported.unwrap()).unwrap();
    let retried = with_status(n.clone(), reported);
    let error = exchange(&retried, &fx.ctx, async {
        server
            .expect_nad_get(NS, NAME)
            .await
            .reply_text(404, "404 page not found");
    })
    .await
    .expect_err("still unavailable");
    assert!(matches!(error, Error::BackendUnavailable { .. }), "{error}");
    let second = controller::error_policy(Arc::new(retried.clone()), &error, fx.ctx.clone());
    assert!(jittered(&second, Duration::from_secs(2)), "backoff grows: {second:?}");
    assert_eq!(fx.ctx.failures(&object), 2);
    assert_eq!(count(&fx.ctx, ReconcileResult::Error), 2);

    // Multus gets installed: the NAD is created, Ready flips, the backoff resets.
    let action = exchange(&retried, &fx.ctx, async {
        server.expect_nad_get(NS, NAME).await.reply_not_found();
        server.expect_nad_create(NS).await.echo(201);
        let patch = server.expect_status_patch(NS, NAME).await;
        assert_eq!(ready_of(&patch.body)["status"], "True");
        assert_eq!(patch.body["status"]["backendRef"], NAD_REF);
        patch.reply_ok(&retried);
        server.expect_network_event(NS, "Normal", "Ready").await;
    })
    .await
    .expect("ready once the CRD exists");
    assert_eq!(action, Action::requeue(controller::RESYNC));
    assert_eq!(fx.ctx.failures(&object), 0);

    drop(fx);
    server.assert_no_more_requests().await;
}

/// (5) drift: the NAD was edited → replaced (PUT, resourceVersion kept) → the status
/// already says Ready, so no status write and no Event.
#[tokio::test]
async fn drifted_nad_is_replaced() {
    let current = with_status(example(), ready_status(0));
    let (fx, mut server) = scripted(multus, &[&current], &[]);
    let mut edited = live_nad(&current);
    edited["spec"]["config"] = json!("{\"cniVersion\":\"0.3.1\",\"type\":\"macvlan\"}");
    edited["metadata"]["annotations"] = json!({"note": "hand edited"});

    let action = exchange(&current, &fx.ctx, async {
        server.expect_nad_get(NS, NAME).await.reply(200, &edited);
        let put = server.expect_nad_replace(NS, NAME).await;
        let body = put.body.clone();
        assert!(
            !nad::drifted(&body, &live_nad(&current)),
            "replaced with the desired config: {body}"
        );
        assert_eq!(body["metadata"]["resourceVersion"], "5", "optimistic concurrency");
        assert_eq!(
            body["metadata"]["annotations"]["note"], "hand edited",
            "foreign metadata kept"
        );
        put.echo(200);
    })
    .await
    .expect("drift repaired");
    assert_eq!(action, Action::requeue(controller::RESYNC));
    assert_eq!(count(&fx.ctx, ReconcileResult::Changed), 1);

    drop(fx);
    server.assert_no_more_requests().await;
}

/// A NAD of the same name that is not ours is never overwritten: BackendConflict.
#[tokio::test]
async fn foreign_nad_is_left_alone() {
    let n = example();
    let (fx, mut server) = scripted(multus, &[&n], &[]);
    let foreign = json!({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": NAME, "namespace": NS, "uid": "theirs", "resourceVersion": "1"},
        "spec": {"config": "{\"type\":\"macvlan\"}"}
    });

    let error = exchange(&n, &fx.ctx, async {
        server.expect_nad_get(NS, NAME).await.reply(200, &foreign);
        let patch = server.expect_status_patch(NS, NAME).await;
        let ready = ready_of(&patch.body).clone();
        assert_eq!(ready["reason"], "BackendConflict");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("not managed by envoy-injector")
        );
        patch.reply_ok(&n);
        server.expect_network_event(NS, "Warning", "BackendConflict").await;
    })
    .await
    .expect_err("retried with backoff");
    assert!(matches!(error, Error::BackendConflict { .. }), "{error}");

    drop(fx);
    server.assert_no_more_requests().await;
}

/// (6) deletion through the finalizer: NAD deleted (uid precondition) → Event `Cleanup` →
/// finalizer removed by JSON patch.
#[tokio::test]
async fn delete_removes_nad_then_finalizer() {
    let mut deleting = with_status(example(), ready_status(0));
    deleting.metadata.deletion_timestamp = Some(at(100));
    let (fx, mut server) = scripted(multus, &[&deleting], &[]);

    let action = exchange(&deleting, &fx.ctx, async {
        server.expect_network_pods(NS, NAME, &[]).await;
        server.expect_nad_get(NS, NAME).await.reply(200, &live_nad(&deleting));
        let delete = server.expect_nad_delete(NS, NAME).await;
        assert_eq!(delete.body["preconditions"]["uid"], "nad-uid", "{}", delete.body);
        delete.reply(200, &live_nad(&deleting));

        let event = server.expect_network_event(NS, "Normal", "Cleanup").await;
        assert!(event["note"].as_str().unwrap().contains(NAD_REF), "{event}");

        let patch = server.expect_finalizer_removal(NS, NAME).await;
        assert_eq!(
            patch.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/0"}
            ])
        );
        let mut gone = deleting.clone();
        gone.metadata.finalizers = None;
        patch.reply_ok(&gone);
    })
    .await
    .expect("cleanup succeeds");
    assert_eq!(action, Action::await_change());
    assert_eq!(count(&fx.ctx, ReconcileResult::Changed), 1);

    drop(fx);
    server.assert_no_more_requests().await;
}

/// With the NAD index listed, deletion needs no read: DELETE with the listed uid.
#[tokio::test]
async fn delete_with_a_listed_nad_deletes_without_a_read() {
    let mut deleting = with_status(example(), ready_status(0));
    deleting.metadata.deletion_timestamp = Some(at(100));
    let (fx, mut server) = scripted(
        |client| multus_listed(client, &[live_nad(&deleting)]),
        &[&deleting],
        &[],
    );

    exchange(&deleting, &fx.ctx, async {
        server.expect_network_pods(NS, NAME, &[]).await;
        let delete = server.expect_nad_delete(NS, NAME).await;
        assert_eq!(delete.body["preconditions"]["uid"], "nad-uid", "{}", delete.body);
        delete.reply(200, &live_nad(&deleting));
        server.expect_network_event(NS, "Normal", "Cleanup").await;
        server.expect_finalizer_removal(NS, NAME).await.reply_ok(&deleting);
    })
    .await
    .expect("cleanup succeeds");

    drop(fx);
    server.assert_no_more_requests().await;
}

/// Deleting while the NAD CRD is missing must not get stuck: nothing to remove.
#[tokio::test]
async fn delete_without_nad_crd_still_releases_the_finalizer() {
    let mut deleting = example();
    deleting.metadata.deletion_timestamp = Some(at(100));
    let (fx, mut server) = scripted(multus, &[&deleting], &[]);

    exchange(&deleting, &fx.ctx, async {
        server.expect_network_pods(NS, NAME, &[]).await;
        server.expect_nad_get(NS, NAME).await.reply_unknown_resource();
        let event = server.expect_network_event(NS, "Normal", "Cleanup").await;
        assert!(event["note"].as_str().unwrap().contains("nothing to remove"), "{event}");
        let patch = server.expect_finalizer_removal(NS, NAME).await;
        assert_eq!(patch.body[1], json!({"op": "remove", "path": "/metadata/finalizers/0"}));
        patch.reply_ok(&deleting);
    })
    .await
    .expect("cleanup succeeds");

    drop(fx);
    server.assert_no_more_requests().await;
}

/// (7) two overlapping Networks: the later one gets Overlaps naming the other and both
/// cidrs, and loses the NAD it held (one left from a version that judged overlaps per
/// namespace); the earlier one stays Ready untouched.
#[tokio::test]
async fn overlap_goes_to_the_later_network_which_holds_no_nad() {
    let mut first = with_status(
        network("a", "10.0.0.0/16", "10.0.0.1"),
        NetworkStatus {
            conditions: vec![ready_condition(
                "multus backend: NetworkAttachmentDefinition/default/a is in place",
            )],
            observed_generation: Some(2),
            attached_pods: 0,
            backend_ref: Some("NetworkAttachmentDefinition/default/a".into()),
        },
    );
    first.metadata.creation_timestamp = Some(at(0));
    let mut later = network("b", "10.0.5.0/24", "10.0.5.1");
    later.metadata.creation_timestamp = Some(at(60));
    let (fx, mut server) = scripted(
        |client| multus_listed(client, &[live_nad(&first), live_nad(&later)]),
        &[&first, &later],
        &[],
    );

    exchange(&later, &fx.ctx, async {
        let delete = server.expect_nad_delete(NS, "b").await;
        assert_eq!(delete.body["preconditions"]["uid"], "nad-uid", "{}", delete.body);
        delete.reply(200, &live_nad(&later));
        let patch = server.expect_status_patch(NS, "b").await;
        let ready = ready_of(&patch.body).clone();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "Overlaps");
        let message = ready["message"].as_str().unwrap();
        for part in ["Network default/a", "10.0.0.0/16", "10.0.5.0/24"] {
            assert!(message.contains(part), "{part} missing from {message}");
        }
        assert_eq!(patch.body["status"]["backendRef"], Value::Null);
        patch.reply_ok(&later);
        server.expect_network_event(NS, "Warning", "Overlaps").await;
    })
    .await
    .expect("overlap is a condition, not an error");

    // The earlier Network: its NAD is in place (the index says so), nothing is written.
    exchange(&first, &fx.ctx, async {})
        .await
        .expect("earlier network stays ready");
    assert_eq!(count(&fx.ctx, ReconcileResult::Unchanged), 1);

    drop(fx);
    server.assert_no_more_requests().await;
}

/// Overlaps are cluster-wide: a Network of another namespace with an overlapping cidr is
/// `Overlaps` naming the earlier one by namespace and name; it stays so while the earlier
/// one is being deleted, and turns Ready (its NAD created) once that one is gone.
#[tokio::test]
async fn an_overlap_across_namespaces_holds_until_the_earlier_network_is_gone() {
    let mut first = NetworkBuilder::new("blue")
        .namespace("team-a")
        .cidr("198.18.64.0/24", "198.18.64.1")
        .generation(2)
        .created(0)
        .finalized()
        .build();
    first.status = Some(NetworkStatus {
        conditions: vec![ready_condition(
            "multus backend: NetworkAttachmentDefinition/team-a/blue is in place",
        )],
        observed_generation: Some(2),
        attached_pods: 1,
        backend_ref: Some("NetworkAttachmentDefinition/team-a/blue".into()),
    });
    let mut later = network("blue", "198.18.64.0/23", "198.18.64.1");
    later.metadata.creation_timestamp = Some(at(60));
    let (mut fx, mut server) = scripted(|client| multus_listed(client, &[]), &[&first, &later], &[]);

    let overlapping = |fx: &Fixture| {
        let stored = fx.ctx.networks.get(&ObjectRef::from_obj(&later)).unwrap();
        stored.ready_condition().map(|c| (c.reason.clone(), c.message.clone()))
    };
    let reconcile_later = async |fx: &mut Fixture, server: &mut ApiServer| {
        let stored = (*fx.ctx.networks.get(&ObjectRef::from_obj(&later)).unwrap()).clone();
        let mut patched = None;
        exchange(&stored, &fx.ctx, async {
            let patch = server.expect_status_patch(NS, "blue").await;
            let ready = ready_of(&patch.body).clone();
            patched = Some(patch.reply_merged(&stored, Some("101")));
            let reason = ready["reason"].as_str().unwrap();
            let warning = if reason == "Overlaps" { "Warning" } else { "Normal" };
            server.expect_network_event(NS, warning, reason).await;
        })
        .await
        .expect("a verdict, not an error");
        fx.network_event(watcher::Event::Apply(patched.unwrap()));
    };

    reconcile_later(&mut fx, &mut server).await;
    let (reason, message) = overlapping(&fx).unwrap();
    assert_eq!(reason, "Overlaps");
    assert!(
        message.contains("cidr 198.18.64.0/24 of Network team-a/blue") && message.contains("any namespace"),
        "{message}"
    );

    // The earlier one is being deleted: it still holds its range, nothing is requeued.
    let mut going = first.clone();
    going.metadata.deletion_timestamp = Some(at(120));
    let requests = fx.ctx.indexes.pending.start();
    fx.network_event(watcher::Event::Apply(going.clone()));
    assert!(
        fx.ctx.indexes.pending.is_empty(),
        "a deletion that waits moves no verdict"
    );
    // Gone: the later one is requeued, and turns Ready with a NAD of its own.
    fx.network_event(watcher::Event::Delete(going));
    futures::pin_mut!(requests);
    let requeued = futures::StreamExt::next(&mut requests).await.unwrap();
    assert_eq!(requeued, ObjectRef::from_obj(&later));
    let stored = (*fx.ctx.networks.get(&ObjectRef::from_obj(&later)).unwrap()).clone();
    exchange(&stored, &fx.ctx, async {
        let create = server.expect_nad_create(NS).await;
        let config: Value = serde_json::from_str(create.body["spec"]["config"].as_str().unwrap()).unwrap();
        assert_eq!(config["ipam"]["ranges"][0][0]["subnet"], "198.18.64.0/23");
        assert_eq!(
            config["bridge"],
            nad::bridge_name("198.18.64.0/24"),
            "the gone one's bridge: its range starts at the same address"
        );
        create.echo_at(201, "7");
        let patch = server.expect_status_patch(NS, "blue").await;
        assert_eq!(ready_of(&patch.body)["status"], "True");
        patch.reply_merged(&stored, Some("102"));
        server.expect_network_event(NS, "Normal", "Ready").await;
    })
    .await
    .expect("promoted");
    fx.ctx.indexes.pending.stop();

    drop(fx);
    server.assert_no_more_requests().await;
}

/// A Network that Pods use is protected as `kubernetes.io/pvc-protection` protects a
/// claim: deleted, it stays (NAD and finalizer in place) with an `InUse` condition counting
/// the Pods that are not Succeeded or Failed (terminating ones too) and one Event naming
/// the first ten and how many more; when the last one is gone, the API server is asked
/// once more, then the NAD and the finalizer go.
#[tokio::test]
async fn a_network_in_use_waits_for_its_pods_before_it_goes() {
    let mut deleting = with_status(example(), ready_status(12));
    deleting.metadata.deletion_timestamp = Some(at(100));
    let mut pods: Vec<_> = (1..=12).map(|i| member_pod(NS, &format!("pod-{i:02}"), NAME)).collect();
    pods[11].metadata.deletion_timestamp = Some(at(101));
    pods.push(member_pod(NS, "elsewhere", "other-network"));
    let (fx, mut server) = scripted(
        |client| multus_listed(client, &[live_nad(&deleting)]),
        &[&deleting],
        &pods,
    );

    let mut waiting = None;
    let action = exchange(&deleting, &fx.ctx, async {
        let patch = server.expect_status_patch(NS, NAME).await;
        let conditions = patch.body["status"]["conditions"].as_array().unwrap().clone();
        assert_eq!(conditions[0]["type"], READY, "Ready kept: {conditions:?}");
        assert_eq!(conditions[0]["status"], "True");
        let in_use = &conditions[1];
        assert_eq!(
            (in_use["type"].as_str(), in_use["status"].as_str()),
            (Some("InUse"), Some("True"))
        );
        assert_eq!(in_use["reason"], "PodsAttached");
        assert!(
            in_use["message"].as_str().unwrap().contains("waits for 12 Pods"),
            "{in_use}"
        );
        assert_eq!(
            patch.body["status"]["attachedPods"], 11,
            "the terminating one is no longer attached"
        );
        waiting = Some(patch.reply_merged(&deleting, Some("101")));
        let event = server.expect_network_event(NS, "Normal", "InUse").await;
        let note = event["note"].as_str().unwrap();
        assert!(note.contains("12 Pods") && note.contains("pod-01, pod-02"), "{note}");
        assert!(note.contains("pod-10 and 2 more") && !note.contains("pod-11"), "{note}");
    })
    .await
    .expect("waiting is not an error");
    assert_eq!(action, Action::requeue(controller::RESYNC));
    let waiting = waiting.unwrap();

    // Nothing moved: no write, no second Event.
    exchange(&waiting, &fx.ctx, async {}).await.expect("still waiting");
    // Eleven leave: the count follows, no second Event.
    for i in 1..=11 {
        fx.pod_event(watcher::Event::Delete(member_pod(NS, &format!("pod-{i:02}"), NAME)));
    }
    let mut last = None;
    exchange(&waiting, &fx.ctx, async {
        let patch = server.expect_status_patch(NS, NAME).await;
        let in_use = &patch.body["status"]["conditions"][1];
        assert!(
            in_use["message"].as_str().unwrap().contains("waits for 1 Pod "),
            "{in_use}"
        );
        last = Some(patch.reply_merged(&waiting, Some("102")));
    })
    .await
    .expect("still waiting");
    let last = last.unwrap();

    // The last one goes, but the API server still lists one the watch has not shown yet:
    // retried shortly, nothing removed.
    fx.pod_event(watcher::Event::Delete(member_pod(NS, "pod-12", NAME)));
    let action = exchange(&last, &fx.ctx, async {
        server.expect_network_pods(NS, NAME, &["pod-13"]).await;
    })
    .await
    .expect("waits for the watch");
    assert!(jittered(&action, Duration::from_secs(1)), "{action:?}");
    // None anywhere: the NAD goes, then the finalizer.
    exchange(&last, &fx.ctx, async {
        server.expect_network_pods(NS, NAME, &[]).await;
        server.expect_nad_delete(NS, NAME).await.reply(200, &live_nad(&last));
        server.expect_network_event(NS, "Normal", "Cleanup").await;
        server.expect_finalizer_removal(NS, NAME).await.reply_ok(&last);
    })
    .await
    .expect("released");

    drop(fx);
    server.assert_no_more_requests().await;
}

/// `run` wiring with `--network-backend none`: a Network from the trigger stream is
/// reconciled (status only, backendRef `none`, no NAD watch); the echo of our own status
/// write triggers nothing; a member Pod in the index re-triggers its Network
/// (attachedPods); shutdown ends `run`.
#[tokio::test]
async fn run_reconciles_triggers_and_stops_on_shutdown() {
    let n = example();
    let (mut fx, mut server) = scripted(no_backend, &[&n], &[]);
    let (network_tx, network_rx) = futures::channel::mpsc::unbounded::<Arc<Network>>();
    let stop = CancellationToken::new();
    let running = tokio::spawn(controller::run(fx.ctx.clone(), network_rx, stop.clone()));

    timeout(PATIENCE, async {
        network_tx.unbounded_send(Arc::new(n.clone())).unwrap();
        let patch = server.expect_status_patch(NS, NAME).await;
        assert_eq!(ready_of(&patch.body)["status"], "True");
        assert_eq!(patch.body["status"]["backendRef"], "none");
        assert_eq!(patch.body["status"]["attachedPods"], 0);
        let stored = patch.reply_merged(&n, Some("101"));
        server.expect_network_event(NS, "Normal", "Ready").await;

        // The watch now delivers the patched Network: our own echo, no reconcile (a
        // reconcile here would make no request either; the metric tells).
        fx.network_event(watcher::Event::Apply(stored.clone()));
        network_tx.unbounded_send(Arc::new(stored.clone())).unwrap();
        // Then a Pod joins: the member index requeues the Network.
        fx.pod_event(watcher::Event::Apply(member_pod(NS, "p1", NAME)));
        let patch = server.expect_status_patch(NS, NAME).await;
        assert_eq!(patch.body["status"]["attachedPods"], 1);
        assert_eq!(ready_of(&patch.body)["status"], "True");
        patch.reply_merged(&stored, Some("102"));
        // Ready did not change: no Event follows (checked by assert_no_more_requests).

        stop.cancel();
        running.await.unwrap();
    })
    .await
    .expect("run reconciled both triggers and stopped");
    let total: u64 = [ReconcileResult::Changed, ReconcileResult::Unchanged]
        .into_iter()
        .map(|r| count(&fx.ctx, r))
        .sum();
    assert_eq!(total, 2, "one reconcile per trigger, none for the echo");
    assert!(fx.ctx.indexes.pending.is_empty(), "stopped: nothing collected");

    drop(network_tx);
    drop(fx);
    server.assert_no_more_requests().await;
}

/// `run` with the Multus backend while the NAD CRD is missing: the NAD watch keeps failing
/// and backs off with growing delays (virtual time: the runtime clock is paused and
/// advanced only when everything waits), the controller keeps running and reconciling,
/// the Network reports BackendUnavailable exactly once (retries write nothing), and
/// shutdown still ends `run`.
#[tokio::test(start_paused = true)]
async fn missing_nad_crd_watch_backs_off_and_never_stops_the_controller() {
    let n = example();
    let (mut fx, mut server) = scripted(multus, &[&n], &[]);
    let (network_tx, network_rx) = futures::channel::mpsc::unbounded::<Arc<Network>>();
    let stop = CancellationToken::new();
    let running = tokio::spawn(controller::run(fx.ctx.clone(), network_rx, stop.clone()));
    network_tx.unbounded_send(Arc::new(n.clone())).unwrap();

    let cluster_wide = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions";
    let mut watch_attempts = Vec::new();
    let (mut status_patches, mut events, mut nad_gets) = (0, 0, 0);
    timeout(Duration::from_secs(3600), async {
        while watch_attempts.len() < 5 || nad_gets < 3 {
            let call = server.next().await;
            match (call.method.clone(), call.path.as_str()) {
                (Method::GET, path) if path == cluster_wide => {
                    watch_attempts.push(tokio::time::Instant::now());
                    call.reply_unknown_resource();
                }
                (Method::GET, path) if path == mock_api::nad(NS, NAME) => {
                    nad_gets += 1;
                    call.reply_unknown_resource();
                }
                (Method::PATCH, path) if path == format!("{}/status", mock_api::network(NS, NAME)) => {
                    status_patches += 1;
                    assert_eq!(ready_of(&call.body)["reason"], "BackendUnavailable");
                    let stored = call.merged(&n, None);
                    // As the Network watch would deliver the patched object.
                    fx.network_event(watcher::Event::Apply(stored.clone()));
                    call.reply_ok(&stored);
                }
                (Method::POST, path) if path == mock_api::events(NS) => {
                    events += 1;
                    call.echo(201);
                }
                (method, path) => panic!("unexpected request {method} {path}"),
            }
        }
    })
    .await
    .expect("the watch retried and the Network was retried (virtual time)");

    assert_eq!(
        status_patches, 1,
        "BackendUnavailable is written once, not on every retry"
    );
    assert_eq!(events, 1, "one Warning Event, not one per retry");
    let gaps: Vec<Duration> = watch_attempts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[0] >= Duration::from_secs(1), "the watch backs off: {gaps:?}");
    assert!(gaps.windows(2).all(|g| g[1] > g[0]), "and the backoff grows: {gaps:?}");
    assert!(!running.is_finished(), "watch errors never end the controller");

    // Graceful shutdown lets reconciles in flight finish: keep answering until `run` ends.
    stop.cancel();
    let mut running = running;
    timeout(PATIENCE, async {
        loop {
            tokio::select! {
                finished = &mut running => break finished.unwrap(),
                call = server.next() => {
                    assert_eq!(call.method, Method::GET, "only reads may be in flight: {}", call.path);
                    call.reply_unknown_resource();
                }
            }
        }
    })
    .await
    .expect("run stopped");
    drop(network_tx);
    drop(fx);
    server.assert_no_more_requests().await;
}

#[test]
fn backends_name_themselves() {
    assert_eq!(NoBackend.name(), "none");
    assert!(NoBackend.owned_resource().is_none());
}
