//! Admission over filled shared-cache stores: namespace label opt-in, network join,
//! hot-reloaded templates, and no API call on the admission path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use envoy_injector::admission::Admission;
use envoy_injector::cache::{self, Stores};
use envoy_injector::live::LiveTemplates;
use envoy_injector::metrics::Metrics;
use envoy_injector::network::crd::Network;
use http::{Request, Response};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::ObjectMeta;
use kube::client::Body;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

mod common;

use common::builders::{NetworkBuilder, ReviewBuilder, namespace};

fn fixture(name: &str) -> Value {
    ReviewBuilder::fixture(name).build()
}

/// The seed's example Network at generation 2, Ready (or not, with an overlap) as of
/// generation `observed`.
fn network(name: &str, ready: bool, observed: i64) -> Network {
    let (reason, message) = if ready {
        ("Ready", "ready")
    } else {
        ("Overlaps", "overlaps Network `other` (192.168.0.0/24)")
    };
    NetworkBuilder::new(name)
        .generation(2)
        .ready(ready, reason, message, observed)
        .build()
}

/// Stores filled by hand, as the reflectors would fill them.
fn stores(namespaces: Vec<PartialObjectMeta<Namespace>>, networks: Vec<Network>) -> Stores {
    let (configmap, _) = reflector::store::<ConfigMap>();
    let (namespace_store, mut namespace_writer) = reflector::store();
    for ns in namespaces {
        namespace_writer.apply_watcher_event(&Event::Apply(ns));
    }
    let (network_store, mut network_writer) = reflector::store();
    for n in networks {
        network_writer.apply_watcher_event(&Event::Apply(n));
    }
    // Writers dropped: the stores stay readable with what they hold.
    Stores {
        configmap,
        namespaces: namespace_store,
        networks: network_store,
    }
}

fn admission(stores: Stores, template: &str) -> (Admission, Arc<LiveTemplates>) {
    let mut data = BTreeMap::new();
    data.insert("config".to_string(), template.to_string());
    let live = Arc::new(LiveTemplates::new(Some(
        envoy_injector::template::TemplateSet::from_data("t", &data, envoy_injector::template::KubeVersion::NEWEST)
            .unwrap(),
    )));
    (
        Admission::new(live.clone(), Arc::new(stores), Metrics::unregistered()),
        live,
    )
}

const SIDECAR: &str = "containers:\n- name: proxy\n  image: envoy\n";

fn respond(admission: &Admission, review: &Value) -> Value {
    let bytes = admission.handle(&serde_json::to_vec(review).unwrap()).unwrap();
    serde_json::from_slice::<Value>(&bytes).unwrap()["response"].clone()
}

fn patched(review: &Value, response: &Value) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().expect("a patch"))
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).unwrap();
    serde_json::from_value::<Pod>(pod.clone()).unwrap();
    pod
}

#[test]
fn namespace_label_opts_in_and_pod_opt_out_still_wins() {
    let review = fixture("namespace-labeled.json");
    let (labeled, _) = admission(stores(vec![namespace("mesh", true)], vec![]), SIDECAR);
    let pod = patched(&review, &respond(&labeled, &review));
    assert_eq!(pod["spec"]["initContainers"][0]["name"], "proxy");

    let (unlabeled, _) = admission(stores(vec![namespace("mesh", false)], vec![]), SIDECAR);
    assert!(respond(&unlabeled, &review).get("patch").is_none());

    let opted_out = ReviewBuilder::fixture("namespace-labeled.json")
        .annotations(&[("sidecar.samplecrd.k8s.io/inject", "false")])
        .build();
    assert!(respond(&labeled, &opted_out).get("patch").is_none());
}

#[test]
fn joining_a_ready_network_adds_multus_annotation_label_and_env() {
    let review = fixture("network-annotation.json");
    let (admission, _) = admission(stores(vec![], vec![network("example-network", true, 2)]), SIDECAR);
    let response = respond(&admission, &review);
    assert_eq!(response["allowed"], true, "{response}");
    let pod = patched(&review, &response);
    assert_eq!(
        pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"],
        "example-network"
    );
    assert_eq!(
        pod["metadata"]["labels"]["sidecar.samplecrd.k8s.io/network"],
        "example-network"
    );
    let env = &pod["spec"]["initContainers"][0]["env"];
    assert_eq!(
        env,
        &json!([{"name": "NETWORK_CIDR", "value": "192.168.0.0/16"}, {"name": "NETWORK_GATEWAY", "value": "192.168.0.1"}])
    );
    // The app container is not given the env: only the injected sidecar is.
    assert!(pod["spec"]["containers"][0].get("env").is_none());
}

/// A review that says Pod but carries another object is denied for that, before the
/// Network join reads it, and no Network state is given to it.
#[test]
fn a_non_pod_object_joining_a_network_is_denied_for_its_kind() {
    let mut review = fixture("network-annotation.json");
    review["request"]["object"]["kind"] = json!("ConfigMap");
    let (admission, _) = admission(stores(vec![], vec![network("example-network", true, 2)]), SIDECAR);
    let response = respond(&admission, &review);
    assert_eq!(response["allowed"], false, "{response}");
    assert!(response.get("patch").is_none(), "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("apiVersion v1, kind Pod") && message.contains("kind \"ConfigMap\""),
        "{message}"
    );
}

#[test]
fn missing_unready_or_stale_networks_are_denied_by_name() {
    let review = fixture("network-annotation.json");
    let (none, _) = admission(stores(vec![], vec![]), SIDECAR);
    let response = respond(&none, &review);
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("`example-network`") && message.contains("does not exist"),
        "{message}"
    );

    let (unready, _) = admission(stores(vec![], vec![network("example-network", false, 2)]), SIDECAR);
    let message = respond(&unready, &review)["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("is not Ready") && message.contains("Overlaps"),
        "{message}"
    );

    // Ready, but for an older generation: the new spec is not checked yet.
    let (stale, _) = admission(stores(vec![], vec![network("example-network", true, 1)]), SIDECAR);
    let message = respond(&stale, &review)["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("not processed its latest spec"), "{message}");

    // Ready, but being deleted: the Pods already there keep it, a new one may not join.
    let mut going = network("example-network", true, 2);
    going.metadata.deletion_timestamp = going.metadata.creation_timestamp.clone();
    let (deleting, _) = admission(stores(vec![], vec![going]), SIDECAR);
    let response = respond(&deleting, &review);
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("`example-network`") && message.contains("is being deleted"),
        "{message}"
    );
}

#[tokio::test]
async fn hot_reloaded_template_serves_the_next_admission() {
    let review = fixture("seed-initializer-annotation.json");
    let (admission, live) = admission(stores(vec![], vec![]), SIDECAR);
    let first = patched(&review, &respond(&admission, &review));
    assert_eq!(first["spec"]["initContainers"][0]["name"], "proxy");

    let mut configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some("envoy-injector".into()),
            namespace: Some("ei".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "config".to_string(),
            "containers:\n- name: proxy-v2\n  image: envoy:2\n".to_string(),
        )])),
        ..Default::default()
    };
    struct Quiet;
    impl envoy_injector::events::EventSink for Quiet {
        fn publish(
            &self,
            _: k8s_openapi::api::core::v1::ObjectReference,
            _: kube::runtime::events::Event,
        ) -> futures::future::BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }
    let metrics = Metrics::unregistered();
    let reloader = |metrics| envoy_injector::live::reload::Reloader {
        version: envoy_injector::template::KubeVersion::NEWEST,
        metrics,
        events: &Quiet,
    };
    assert!(envoy_injector::live::reload::apply(Some(&configmap), &live, &reloader(&metrics)).await);
    let second = patched(&review, &respond(&admission, &review));
    assert_eq!(second["spec"]["initContainers"][0]["name"], "proxy-v2");

    // A bad edit: the last good template stays live.
    configmap.data = Some(BTreeMap::from([(
        "config".to_string(),
        "containers:\n- nme: broken\n".to_string(),
    )]));
    assert!(!envoy_injector::live::reload::apply(Some(&configmap), &live, &reloader(&metrics)).await);
    let third = patched(&review, &respond(&admission, &review));
    assert_eq!(third["spec"]["initContainers"][0]["name"], "proxy-v2");
}

type ApiHandle = tower_test::mock::Handle<Request<Body>, Response<Body>>;
type Held = Vec<tower_test::mock::SendResponse<Response<Body>>>;

/// A list answer of `kind` with `items`, at resourceVersion 1.
fn list_of(kind: &str, items: Value) -> Value {
    json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items})
}

/// The ConfigMap `ei/envoy-injector` with template [`SIDECAR`], as its list answers it.
fn configmap_list() -> Value {
    list_of(
        "ConfigMapList",
        json!([{"metadata": {"name": "envoy-injector", "namespace": "ei", "resourceVersion": "1"},
        "data": {"config": SIDECAR}}]),
    )
}

/// Answers the cache's first `count` LISTs with `answer(uri)`, holding every WATCH open
/// (the returned senders); then waits until every store counts as synced.
async fn serve_initial_lists(
    handle: &mut ApiHandle,
    cache: &cache::Cache,
    count: usize,
    answer: impl Fn(&str) -> Value,
) -> Held {
    let mut held = Vec::new();
    let mut lists = 0;
    tokio::time::timeout(Duration::from_secs(10), async {
        while lists < count {
            let (request, send) = handle.next_request().await.expect("the cache asks for its lists");
            let uri = request.uri().to_string();
            if uri.contains("watch=true") {
                held.push(send);
                continue;
            }
            lists += 1;
            let body = answer(&uri);
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
        }
    })
    .await
    .expect("the cache listed every kind");
    tokio::time::timeout(Duration::from_secs(10), async {
        while cache.synced.check().is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("all stores synced");
    held
}

/// The next request that is not a WATCH the cache keeps (`kept(uri)`: held), if one comes
/// within 300 ms: admission must make none.
async fn further_request(handle: &mut ApiHandle, held: &mut Held, kept: impl Fn(&str) -> bool) -> Option<String> {
    tokio::time::timeout(Duration::from_millis(300), async {
        loop {
            let (request, send) = handle.next_request().await?;
            let uri = request.uri().to_string();
            if uri.contains("watch=true") && kept(&uri) {
                held.push(send);
                continue;
            }
            return Some(uri);
        }
    })
    .await
    .ok()
    .flatten()
}

/// Answers the cache's initial LISTs from a mocked API server, then holds every WATCH
/// open. After the stores sync, admission runs while the mock records any further
/// request: there must be none.
#[tokio::test]
async fn admission_makes_no_api_call_once_the_cache_has_synced() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let indexes = envoy_injector::controller::Indexes::default();
    let followers = Some(indexes.followers());
    let (cache, mut configmap_feed) = cache::start(client, "ei", Metrics::unregistered(), followers);

    let mut held_watches = serve_initial_lists(&mut handle, &cache, 4, |uri| {
        if uri.contains("/configmaps") {
            configmap_list()
        } else if uri.contains("/namespaces") {
            list_of(
                "PartialObjectMetadataList",
                json!([{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": "mesh", "resourceVersion": "1", "labels": {"sidecar.samplecrd.k8s.io/inject": "enabled"}}}]),
            )
        } else if uri.contains("/networks") {
            let mut n = serde_json::to_value(network("example-network", true, 2)).unwrap();
            n["metadata"]["resourceVersion"] = json!("1");
            list_of("NetworkList", json!([n]))
        } else if uri.contains("/pods") {
            assert!(
                uri.contains("labelSelector=sidecar.samplecrd.k8s.io"),
                "member Pods only: {uri}"
            );
            assert!(
                uri.contains("fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed"),
                "only Pods that may still hold an interface: {uri}"
            );
            list_of("PartialObjectMetadataList", json!([]))
        } else {
            panic!("unexpected request {uri}");
        }
    })
    .await;
    let configmap = configmap_feed.recv().await.unwrap().expect("the ConfigMap was listed");
    let live = Arc::new(LiveTemplates::new(None));
    let data = configmap.data.clone().unwrap();
    live.replace(
        envoy_injector::template::TemplateSet::from_data(
            "ei/envoy-injector",
            &data,
            envoy_injector::template::KubeVersion::NEWEST,
        )
        .unwrap(),
    );

    let admission = Admission::new(live, Arc::new(cache.stores.clone()), Metrics::unregistered());
    for name in [
        "network-annotation.json",
        "namespace-labeled.json",
        "plain-no-annotation.json",
    ] {
        let review = fixture(name);
        let response = respond(&admission, &review);
        assert_eq!(response["allowed"], true, "{name}: {response}");
    }
    assert!(
        respond(&admission, &fixture("namespace-labeled.json"))
            .get("patch")
            .is_some()
    );
    // Anything admission asked of the API server would be waiting here now.
    let extra = further_request(&mut handle, &mut held_watches, |_| true).await;
    assert!(extra.is_none(), "admission made an API call: {extra:?}");
}

/// `serve --networks=false`: the cache lists only the ConfigMap and Namespaces (no
/// Network CRD is needed), syncs on them, and a Pod naming a Network is refused naming it.
#[tokio::test]
async fn without_networks_the_cache_needs_no_network_and_refuses_a_pod_that_names_one() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let (cache, mut configmap_feed) = cache::start(client, "ei", Metrics::unregistered(), None);
    let mut held_watches = serve_initial_lists(&mut handle, &cache, 2, |uri| {
        if uri.contains("/configmaps") {
            configmap_list()
        } else if uri.contains("/namespaces") {
            list_of("PartialObjectMetadataList", json!([]))
        } else {
            panic!("expected only the ConfigMap and Namespaces to be listed, found {uri}");
        }
    })
    .await;
    let configmap = configmap_feed.recv().await.unwrap().expect("the ConfigMap was listed");
    let live = Arc::new(LiveTemplates::new(Some(
        envoy_injector::template::TemplateSet::from_data(
            "ei/envoy-injector",
            &configmap.data.clone().unwrap(),
            envoy_injector::template::KubeVersion::NEWEST,
        )
        .unwrap(),
    )));
    let admission = Admission::new(live, Arc::new(cache.stores.clone()), Metrics::unregistered());
    let response = respond(&admission, &fixture("network-annotation.json"));
    let message = response["status"]["message"].as_str().unwrap_or_default().to_string();
    assert!(
        response["allowed"] == false && message.contains("example-network"),
        "expected a Pod naming a Network refused, naming it, found {response}"
    );
    // No further list, and no watch of Networks or member Pods, was started.
    let kept = |uri: &str| uri.contains("/configmaps") || uri.contains("/namespaces");
    let extra = further_request(&mut handle, &mut held_watches, kept).await;
    assert!(extra.is_none(), "unexpected request: {extra:?}");
}

/// Namespace `mesh`, opted in, whose label picks `template` for its Pods.
fn namespace_with_template(template: &str) -> PartialObjectMeta<Namespace> {
    let mut ns = namespace("mesh", true);
    ns.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("sidecar.samplecrd.k8s.io/template".into(), template.into());
    ns
}

#[test]
fn a_namespace_label_picks_the_template_and_the_pod_s_annotation_wins() {
    let data = BTreeMap::from([
        ("config".to_string(), SIDECAR.to_string()),
        (
            "canary".to_string(),
            "containers:\n- name: canary-proxy\n  image: envoy:next\n".to_string(),
        ),
    ]);
    let admission_in = |template: &str| {
        let live = Arc::new(LiveTemplates::new(Some(
            envoy_injector::template::TemplateSet::from_data("t", &data, envoy_injector::template::KubeVersion::NEWEST)
                .unwrap(),
        )));
        let stores = stores(vec![namespace_with_template(template)], vec![]);
        Admission::new(live, Arc::new(stores), Metrics::unregistered())
    };
    let sidecar = |pod: &Value| pod["spec"]["initContainers"][0]["name"].clone();
    let review = fixture("namespace-labeled.json");

    let canary = admission_in("canary");
    let pod = patched(&review, &respond(&canary, &review));
    assert_eq!(sidecar(&pod), "canary-proxy");
    let status = common::injection_status(&pod);
    assert_eq!(
        status["template"], "canary",
        "the stale gauge and check --stale read this"
    );

    let own_choice = ReviewBuilder::fixture("namespace-labeled.json")
        .annotations(&[("sidecar.samplecrd.k8s.io/template", "config")])
        .build();
    assert_eq!(sidecar(&patched(&own_choice, &respond(&canary, &own_choice))), "proxy");

    let response = respond(&admission_in("nope"), &review);
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"]["message"],
        "template `nope` named by label `sidecar.samplecrd.k8s.io/template` of namespace `mesh` does not exist; the injector has: `canary`, `config`"
    );
}
