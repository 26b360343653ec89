//! Shared-cache footprint and admission latency with full stores.
//!
//! Fills the cache the way the watches would — 10,000 Networks (as the API server sends
//! them: managedFields, kubectl's last-applied annotation, labels; then slimmed by the
//! cache's transform) with their overlap index, 10,000 member Pods (only their index is
//! kept) and the 10,000 NADs' drift index, spread over 100 namespaces, and (first, on a
//! fresh heap) the uninjected-Pod tracker fed 10,000 Pods none of which is injected (every
//! one held: its worst case) — and reports the process RSS added by each, in bytes per object. Then measures admission (network join)
//! against those stores with criterion.
//!
//! Run: `cargo bench --bench stores` (or `make bench-stores`).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::Criterion;
use envoy_injector::admission::Admission;
use envoy_injector::cache::{Stores, slim_network};
use envoy_injector::live::LiveTemplates;
use envoy_injector::metrics::Metrics;
use envoy_injector::network::crd::{Network, NetworkCondition, NetworkSpec, NetworkStatus};
use envoy_injector::network::members::MemberIndex;
use envoy_injector::network::nad;
use envoy_injector::network::nad_index::NadIndex;
use envoy_injector::network::overlaps::OverlapIndex;
use envoy_injector::template::TemplateSet;
use envoy_injector::uninjected::Tracker;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, OwnerReference, Time};
use kube::api::{DynamicObject, ObjectMeta};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;

const NAMESPACES: usize = 100;
const NETWORKS: usize = 10_000;
const PODS: usize = 10_000;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn network(i: usize) -> Network {
    let ns = format!("team-{:03}", i % NAMESPACES);
    // 10.x.y.0/24 ranges, unique per Network.
    let cidr = format!("10.{}.{}.0/24", i / 256, i % 256);
    let gateway = format!("10.{}.{}.1", i / 256, i % 256);
    let name = format!("net-{i:05}");
    let mut n = Network::new(&name, NetworkSpec { cidr, gateway });
    n.metadata.namespace = Some(ns);
    n.metadata.uid = Some(format!("00000000-0000-4000-8000-{i:012}"));
    n.metadata.resource_version = Some(format!("{}", 100_000 + i));
    n.metadata.generation = Some(1);
    n.metadata.creation_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(1_790_000_000 + i as i64).unwrap(),
    ));
    n.metadata.finalizers = Some(vec!["samplecrd.k8s.io/network-cleanup".into()]);
    // What the API server sends besides: dropped by the cache's transform.
    n.metadata.labels = Some(BTreeMap::from([("team".to_string(), "payments".to_string())]));
    let applied = serde_json::json!({"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
        "metadata": {"name": name, "namespace": n.metadata.namespace}, "spec": n.spec});
    n.metadata.annotations = Some(BTreeMap::from([(
        "kubectl.kubernetes.io/last-applied-configuration".to_string(),
        applied.to_string(),
    )]));
    n.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kubectl-client-side-apply".into()),
        operation: Some("Update".into()),
        api_version: Some("samplecrd.k8s.io/v1".into()),
        ..Default::default()
    }]);
    n.status = Some(NetworkStatus {
        conditions: vec![NetworkCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Ready".into(),
            message: format!(
                "multus backend: NetworkAttachmentDefinition/team-{:03}/net-{i:05} is in place",
                i % NAMESPACES
            ),
            last_transition_time: "2026-11-21T00:00:00Z".into(),
            observed_generation: Some(1),
        }],
        observed_generation: Some(1),
        attached_pods: 1,
        backend_ref: Some(format!(
            "NetworkAttachmentDefinition/team-{:03}/net-{i:05}",
            i % NAMESPACES
        )),
    });
    n
}

fn nad_object(n: &Network) -> DynamicObject {
    let owner = nad::Owner {
        api_version: "samplecrd.k8s.io/v1",
        kind: "Network",
        name: n.metadata.name.as_deref().unwrap(),
        uid: n.metadata.uid.as_deref().unwrap(),
    };
    let mut value = nad::render(
        n.metadata.namespace.as_deref().unwrap(),
        &owner,
        &n.spec.cidr,
        &n.spec.gateway,
    );
    value["metadata"]["uid"] = format!("20000000-0000-4000-8000-{}", &owner.uid[24..]).into();
    serde_json::from_value(value).unwrap()
}

fn member_pod(i: usize) -> PartialObjectMeta<Pod> {
    let ns = format!("team-{:03}", i % NAMESPACES);
    let labels = BTreeMap::from([
        ("app".to_string(), format!("web-{}", i % 50)),
        ("pod-template-hash".to_string(), "7d9f8b6c5".to_string()),
        ("sidecar.samplecrd.k8s.io/network".to_string(), format!("net-{i:05}")),
    ]);
    let annotations = BTreeMap::from([
        ("k8s.v1.cni.cncf.io/networks".to_string(), format!("net-{i:05}")),
        ("sidecar.samplecrd.k8s.io/status".to_string(), r#"{"template":"config","revision":"f1df362b6143","containers":["envoy"],"initContainers":[],"volumes":["envoy-conf"],"imagePullSecrets":[],"nativeSidecar":false}"#.to_string()),
    ]);
    PartialObjectMeta {
        metadata: ObjectMeta {
            name: Some(format!("web-{}-7d9f8b6c5-{i:05}", i % 50)),
            namespace: Some(ns),
            uid: Some(format!("10000000-0000-4000-8000-{i:012}")),
            resource_version: Some(format!("{}", 200_000 + i)),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A Deployment's Pod as a metadata watch sends it, not injected (opted in by namespace
/// label, or not at all): the uninjected-Pod tracker holds every such Pod.
fn plain_pod(i: usize) -> PartialObjectMeta<Pod> {
    let ns = format!("team-{:03}", i % NAMESPACES);
    let labels = BTreeMap::from([
        ("app".to_string(), format!("web-{}", i % 50)),
        ("pod-template-hash".to_string(), "7d9f8b6c5".to_string()),
    ]);
    let annotations = BTreeMap::from([(
        "kubectl.kubernetes.io/restartedAt".to_string(),
        "2026-11-21T00:00:00Z".to_string(),
    )]);
    let fields = serde_json::json!({"f:metadata": {"f:generateName": {}, "f:labels": {"f:app": {}, "f:pod-template-hash": {}},
        "f:ownerReferences": {"k:{\"uid\":\"30000000-0000-4000-8000-000000000000\"}": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}, "f:name": {}}}}});
    PartialObjectMeta {
        metadata: ObjectMeta {
            name: Some(format!("web-{}-7d9f8b6c5-{i:05}", i % 50)),
            generate_name: Some(format!("web-{}-7d9f8b6c5-", i % 50)),
            namespace: Some(ns),
            uid: Some(format!("40000000-0000-4000-8000-{i:012}")),
            resource_version: Some(format!("{}", 300_000 + i)),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_790_000_000 + i as i64).unwrap(),
            )),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: format!("web-{}-7d9f8b6c5", i % 50),
                uid: "30000000-0000-4000-8000-000000000000".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("kube-controller-manager".into()),
                operation: Some("Update".into()),
                api_version: Some("v1".into()),
                fields_type: Some("FieldsV1".into()),
                fields_v1: Some(FieldsV1(fields)),
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn main() {
    let before = rss_kib();
    let (configmap, _) = reflector::store::<ConfigMap>();
    let (namespaces, mut namespace_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    for i in 0..NAMESPACES {
        let meta = ObjectMeta {
            name: Some(format!("team-{i:03}")),
            ..Default::default()
        };
        namespace_writer.apply_watcher_event(&Event::Apply(PartialObjectMeta {
            metadata: meta,
            ..Default::default()
        }));
    }
    // First, on a heap nothing has freed into yet: what it adds is its own.
    let before_uninjected = rss_kib();
    let mut uninjected = Tracker::new(envoy_injector::inject::AnnotationOptIn::On);
    uninjected.apply(Event::Init);
    for i in 0..PODS {
        // One at a time, as a watch page would deliver them: only the tracker's entry stays.
        uninjected.apply(Event::InitApply(plain_pod(i)));
    }
    uninjected.apply(Event::InitDone);
    let after_uninjected = rss_kib();
    assert_eq!(uninjected.len(), PODS);
    let (networks, mut network_writer) = reflector::store::<Network>();
    let overlaps = OverlapIndex::new();
    let start = rss_kib();
    for i in 0..NETWORKS {
        let event = Event::Apply(slim_network(network(i)));
        overlaps.apply(&event);
        network_writer.apply_watcher_event(&event);
    }
    let after_networks = rss_kib();
    let members = MemberIndex::new();
    for i in 0..PODS {
        members.apply(&Event::Apply(member_pod(i)));
    }
    let after_pods = rss_kib();
    let owned = NadIndex::new();
    owned.apply(&Event::Init);
    for i in 0..NETWORKS {
        // Built and dropped one at a time, as a watch page would be: only the index stays.
        owned.apply(&Event::InitApply(nad_object(&network(i))));
    }
    owned.apply(&Event::InitDone);
    let after_nads = rss_kib();
    assert_eq!((overlaps.len(), members.len(), owned.len()), (NETWORKS, PODS, NETWORKS));
    let per = |kib: u64, n: usize| kib * 1024 / n as u64;
    println!("cache: {NETWORKS} Networks, {PODS} member Pods, {NETWORKS} NADs, {NAMESPACES} Namespaces");
    println!("  RSS before filling: {} KiB", before);
    println!(
        "  Networks (slim store + overlap index): +{} KiB ({} bytes per Network)",
        after_networks - start,
        per(after_networks - start, NETWORKS)
    );
    println!(
        "  member Pods (count index only): +{} KiB ({} bytes per Pod)",
        after_pods - after_networks,
        per(after_pods - after_networks, PODS)
    );
    println!(
        "  NADs (drift index only): +{} KiB ({} bytes per NAD)",
        after_nads.saturating_sub(after_pods),
        per(after_nads.saturating_sub(after_pods), NETWORKS)
    );
    println!(
        "  uninjected-Pod tracker ({PODS} Pods, none injected: all held): +{} KiB ({} bytes per Pod; {} by its own count)",
        after_uninjected.saturating_sub(before_uninjected),
        per(after_uninjected.saturating_sub(before_uninjected), PODS),
        uninjected.approximate_bytes() / PODS
    );
    println!(
        "  RSS with everything: {} KiB ({:.1} MiB)",
        after_nads,
        after_nads as f64 / 1024.0
    );

    let stores = Stores {
        configmap,
        namespaces,
        networks,
    };
    let live = Arc::new(LiveTemplates::new(Some(TemplateSet::embedded())));
    let admission = Admission::new(live, Arc::new(stores), Metrics::unregistered());
    let mut review: serde_json::Value =
        serde_json::from_str(include_str!("../tests/fixtures/admission/network-annotation.json")).unwrap();
    review["request"]["namespace"] = "team-042".into();
    review["request"]["object"]["metadata"]["namespace"] = "team-042".into();
    review["request"]["object"]["metadata"]["annotations"]["sidecar.samplecrd.k8s.io/network"] = "net-00042".into();
    let body = serde_json::to_vec(&review).unwrap();
    let check: serde_json::Value = serde_json::from_slice(&admission.handle(&body).unwrap()).unwrap();
    assert!(
        check["response"]["patch"].is_string(),
        "network join must inject: {check}"
    );

    let mut criterion = Criterion::default().configure_from_args();
    criterion.bench_function("admission_handle/network-join-with-10k-networks", |b| {
        b.iter(|| admission.handle(black_box(&body)).unwrap())
    });
    criterion.final_summary();
    drop(network_writer);
    drop(namespace_writer);
}
