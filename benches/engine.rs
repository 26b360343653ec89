//! Criterion benchmarks of the injection engine: plan + JSON Patch bytes on captured Pods
//! (already read into a `PodView`), the whole `Admission::handle` on raw review bytes,
//! and generated Pods of growing size.
//! Run with `cargo bench --bench engine`; numbers are reported, never asserted.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

#[path = "common/mod.rs"]
mod common;

use common::{ENV_PER_CONTAINER, REVIEW_5K, fixture_bytes, huge_review};
use envoy_injector::admission::Admission;
use envoy_injector::inject::Standalone;
use envoy_injector::inject::{self, Decision, Extras, PodView};
use envoy_injector::live::LiveTemplates;
use envoy_injector::metrics::Metrics;
use envoy_injector::template::{Template, TemplateSet};

/// Captured reviews whose Pod gets injected by the default template.
const INJECTED_FIXTURES: &[&str] = &[
    "seed-initializer-annotation",
    "replicaset-generatename-init-volumes",
    "dry-run",
    "network-annotation",
];

/// Container counts of the generated Pods; 50 x 30 = 1500 env vars at the top.
const GENERATED_SIZES: [usize; 3] = [10, 25, 50];

fn fixture_pod(name: &str) -> Value {
    let review: Value = serde_json::from_slice(&fixture_bytes(name)).expect("fixture is JSON");
    review
        .pointer("/request/object")
        .cloned()
        .unwrap_or_else(|| panic!("{name}: no request.object"))
}

fn default_template() -> Arc<Template> {
    TemplateSet::embedded()
        .get("config")
        .expect("embedded template has `config`")
        .clone()
}

/// A Pod as a controller would send it, with `containers` app containers, each with
/// `ENV_PER_CONTAINER` env vars, a port, its own emptyDir and the shared token mount.
fn generated_pod(containers: usize) -> Value {
    let token_mount = json!({
        "name": "kube-api-access-abcde",
        "readOnly": true,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
    });
    let mut volumes = vec![json!({
        "name": "kube-api-access-abcde",
        "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
        ]}
    })];
    let specs: Vec<Value> = (0..containers)
        .map(|c| {
            volumes.push(json!({"name": format!("scratch-{c}"), "emptyDir": {}}));
            let env: Vec<Value> = (0..ENV_PER_CONTAINER)
                .map(|e| {
                    if e % 5 == 0 {
                        json!({"name": format!("POD_FIELD_{e}"),
                               "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}})
                    } else {
                        json!({"name": format!("SETTING_{c}_{e}"), "value": format!("value-{c}-{e}-0123456789abcdef")})
                    }
                })
                .collect();
            json!({
                "name": format!("app-{c}"),
                "image": format!("registry.example.com/team/app-{c}:1.2.3"),
                "ports": [{"name": "http", "containerPort": 8000 + c, "protocol": "TCP"}],
                "env": env,
                "resources": {"limits": {"memory": "256Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}},
                "volumeMounts": [{"name": format!("scratch-{c}"), "mountPath": "/scratch"}, token_mount.clone()],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            })
        })
        .collect();
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "huge-6b8f9c7d5-",
            "namespace": "default",
            "labels": {"app": "huge"},
            "annotations": {"sidecar.samplecrd.k8s.io/inject": "true"}
        },
        "spec": {
            "volumes": volumes,
            "containers": specs,
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "dnsPolicy": "ClusterFirst"
        },
        "status": {}
    })
}

/// An AdmissionReview around `pod`, shaped like the captured ones.
fn review_of(pod: &Value) -> Vec<u8> {
    let gvk = json!({"group": "", "version": "v1", "kind": "Pod"});
    let gvr = json!({"group": "", "version": "v1", "resource": "pods"});
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "5b0a3c2e-8d7f-4f6a-9c1b-2e3d4f5a6b7c",
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    }))
    .expect("review encodes")
}

/// Plan + the JSON Patch's bytes, as admission writes them (the Pod already read).
fn plan_and_render(view: &PodView<'_>, template: &Template) -> Vec<u8> {
    match inject::plan(view, template, &Extras::default()) {
        Ok(Decision::Inject(plan)) => {
            let ops = inject::jsonpatch::render_ops(&plan, view).expect("render");
            serde_json::to_vec(&ops).expect("operations encode")
        }
        other => panic!("expected an injection, got {other:?}"),
    }
}

fn admission() -> Admission {
    Admission::new(
        Arc::new(LiveTemplates::new(Some(TemplateSet::embedded()))),
        Arc::new(Standalone),
        Metrics::unregistered(),
    )
}

/// Fails the setup (not the timing) if the handler did not produce a patch, so a bench
/// never silently measures a skip or a deny.
fn check_patched(admission: &Admission, body: &[u8], what: &str) {
    let reply: Value = serde_json::from_slice(&admission.handle(body).expect("handled")).expect("reply is JSON");
    assert!(
        reply.pointer("/response/patch").is_some(),
        "{what}: expected a patch, got {reply}"
    );
}

fn captured_pods(c: &mut Criterion) {
    let template = default_template();
    let mut group = c.benchmark_group("plan_render");
    for name in INJECTED_FIXTURES {
        let pod = fixture_pod(name);
        let view = PodView::read(&pod);
        // Panics here, outside the timing, if the Pod would not be injected.
        plan_and_render(&view, &template);
        group.bench_with_input(BenchmarkId::from_parameter(name), &view, |b, view| {
            b.iter(|| plan_and_render(black_box(view), &template))
        });
    }
    group.finish();
}

fn admission_handle(c: &mut Criterion) {
    let admission = admission();
    let mut group = c.benchmark_group("admission_handle");
    let mut bodies = vec![
        (REVIEW_5K.to_string(), fixture_bytes(REVIEW_5K)),
        ("huge-250k".to_string(), huge_review()),
    ];
    // Same sizes as the engine series: shows how the whole path scales with body size.
    for containers in GENERATED_SIZES {
        bodies.push((
            format!("generated-{containers}-containers"),
            review_of(&generated_pod(containers)),
        ));
    }
    for (name, body) in &bodies {
        check_patched(&admission, body, name);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), body, |b, body| {
            b.iter(|| admission.handle(black_box(body)))
        });
    }
    group.finish();
}

/// The template of issue 20 (four overrides declared) on the captured 5 KB review: a Pod
/// that asks for none (the cost of declaring them) and one that asks for three.
fn admission_handle_overrides(c: &mut Criterion) {
    let template = include_str!("../tests/fixtures/overrides/template.yaml");
    let admission = Admission::new(
        Arc::new(LiveTemplates::new(Some(
            TemplateSet::from_text("bench", template, envoy_injector::template::KubeVersion::NEWEST)
                .expect("the overrides fixture parses"),
        ))),
        Arc::new(Standalone),
        Metrics::unregistered(),
    );
    let review: Value = serde_json::from_slice(&fixture_bytes(REVIEW_5K)).expect("fixture is JSON");
    let mut three = review.clone();
    let annotations = three["request"]["object"]["metadata"]["annotations"]
        .as_object_mut()
        .expect("the fixture has annotations");
    for (name, value) in [
        ("cpu-request", "500m"),
        ("memory-limit", "256Mi"),
        ("log-level", "debug"),
    ] {
        annotations.insert(format!("{}{name}", inject::OVERRIDE_PREFIX), json!(value));
    }
    let mut group = c.benchmark_group("admission_handle_overrides");
    for (name, body) in [
        ("5k-none-asked", serde_json::to_vec(&review).expect("encodes")),
        ("5k-three-asked", serde_json::to_vec(&three).expect("encodes")),
    ] {
        check_patched(&admission, &body, name);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), &body, |b, body| {
            b.iter(|| admission.handle(black_box(body)))
        });
    }
    group.finish();
}

fn generated_pods(c: &mut Criterion) {
    let template = default_template();
    let mut group = c.benchmark_group("plan_render_generated");
    // Equal steps in time between sizes mean linear cost; a fixed per-Pod part
    // is why per-container throughput rises with size.
    for containers in GENERATED_SIZES {
        let pod = generated_pod(containers);
        let view = PodView::read(&pod);
        plan_and_render(&view, &template);
        group.throughput(Throughput::Elements(containers as u64));
        group.bench_with_input(BenchmarkId::new("containers", containers), &view, |b, view| {
            b.iter(|| plan_and_render(black_box(view), &template))
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    captured_pods,
    admission_handle,
    admission_handle_overrides,
    generated_pods
);
criterion_main!(benches);
