//! Tier `rollout`: template changes brought to running Pods, on the API alone (no node:
//! Pods stay Pending, so a restart never completes here; tests/pods proves the rest).
//!
//! The automatic rollout's bound (`manifests/auto-rollout/bound.yaml`) applied for an
//! installation in the tier's injector namespace (not `envoy-injector`), which `serve`
//! reads before restarting anything. A local `serve --injection=policy --auto-rollout=true` keeps the compiled policies in
//! step with its ConfigMap; opted-in workloads are injected by them. In a namespace
//! labelled `sidecar.samplecrd.k8s.io/rollout=auto` after a template edit, the Lease holder
//! restarts the first stale Deployment, which cannot complete: a Warning Event
//! `RolloutFailed` on it, `envoy_injector_rollouts_total{result="failed"}` 1, and the second
//! Deployment is left untouched (stopped for that revision), as is every workload of an
//! unlabelled namespace. There, `envoy-injector rollout`: `--dry-run` plans the two
//! Deployments in order and lists, with what to do, a paused Deployment, an OnDelete and a
//! partitioned StatefulSet, a bare Pod and a Job — changing no object (resourceVersions
//! equal); `--selector` narrows the plan; the real run right after another edit restarts the
//! first Deployment (its new Pod carries the revision that was live), times it out, exits
//! with 1 and leaves the others untouched; with `--max-parallel 2` the two in flight both
//! finish and are reported, the third is not started. Drift: Pods made from `envoy-injector inject`'s
//! output with a rewritten image and a native sidecar's `restartPolicy` dropped are named by
//! `check --drift`, field by field (exit 1), and `check POD`; gone, the check exits 0.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::metrics::metric_value;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "rollout",
    run: |suite| Box::pin(run(suite)),
};

const REVISION: &str = "sidecar.samplecrd.k8s.io/revision";
const AUTO: (&str, &str) = ("sidecar.samplecrd.k8s.io/rollout", "auto");
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
const SIDECAR: &str = "envoy";

fn revision_of(text: &str) -> String {
    envoy_injector::template::template_revision(text)
}

async fn set_config(configmaps: &Api<ConfigMap>, text: &str) {
    let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": INJECTOR_NAME}, "data": {"config": text}});
    configmaps
        .patch(INJECTOR_NAME, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .unwrap_or_else(|e| panic!("expected to write the ConfigMap, found: {}", api_error(&e)));
}

/// Waits until a dry-run Pod in `namespace` comes back injected at `revision`: the
/// compiled policies serve it.
async fn served_at(namespace: &str, revision: &str) {
    let probe = in_namespace(&pod("probe", &[(INJECT, "true")], DEFAULT_IMAGE), namespace).to_string();
    wait_for(&format!("new Pods injected at revision {revision}"), PATIENCE * 2, async || {
        let out = kubectl(&["create", "--dry-run=server", "--validate=false", "-o", "json", "-f", "-"], Some(&probe)).await;
        let stored: Value = serde_json::from_slice(&out.stdout).map_err(|_| describe_output(&out))?;
        match stored["metadata"]["labels"][REVISION].as_str() {
            Some(found) if found == revision => Ok(()),
            other => Err(format!("revision {other:?}")),
        }
    })
    .await;
}

fn opted_in_deployment(name: &str) -> Deployment {
    deployment(name, 1, &[(INJECT, "true")], DEFAULT_IMAGE)
}

fn stateful_set(name: &str, strategy: Value) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": strategy,
            "template": serde_json::to_value(opted_in_deployment(name)).expect("a Deployment is JSON")["spec"]["template"],
        },
    }))
    .expect("a StatefulSet")
}

fn job(name: &str) -> Job {
    let mut template = serde_json::to_value(opted_in_deployment(name)).expect("a Deployment is JSON")["spec"]["template"].clone();
    template["spec"]["restartPolicy"] = json!("Never");
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": template},
    }))
    .expect("a Job")
}

/// Waits until `count` Pods of `namespace` are injected at `revision`.
async fn injected_at(ns: &TestNs, count: usize, revision: &str) {
    wait_for(&format!("{count} Pods of {} injected at {revision}", ns.name), PATIENCE * 2, async || {
        let pods = ns.pods.list(&ListParams::default()).await.map_err(|e| api_error(&e))?.items;
        let at = pods.iter().filter(|p| label(p, REVISION) == Some(revision)).count();
        if at == count {
            Ok(())
        } else {
            Err(format!("{at} of {} Pods: {:?}", pods.len(), pods.iter().map(describe_pod).collect::<Vec<_>>()))
        }
    })
    .await;
}

/// Each workload's resourceVersion, and whether its Pod template was restarted.
async fn workloads(client: &kube::Client, namespace: &str) -> BTreeMap<String, (String, bool)> {
    let mut out = BTreeMap::new();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    for d in deployments.list(&ListParams::default()).await.expect("list Deployments").items {
        let restarted = d
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .is_some_and(|a| a.contains_key(RESTARTED_AT));
        out.insert(
            format!("Deployment {}", d.metadata.name.unwrap_or_default()),
            (d.metadata.resource_version.unwrap_or_default(), restarted),
        );
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    for s in sets.list(&ListParams::default()).await.expect("list StatefulSets").items {
        out.insert(
            format!("StatefulSet {}", s.metadata.name.unwrap_or_default()),
            (s.metadata.resource_version.unwrap_or_default(), false),
        );
    }
    out
}

fn names(list: &Value, key: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("expected a list `{key}` in {list:#}"))
        .iter()
        .map(|w| format!("{} {}", w["kind"].as_str().unwrap_or("?"), w["name"].as_str().unwrap_or("?")))
        .collect()
}

async fn run(suite: &Suite) -> TierResult {
    suite.loopback_webhooks()?;
    require_kubectl()?;
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let injector = TestNs::create(client, &scope, "rollout-injector", &[(NAMESPACE_OPT_IN.0, "disabled")]).await;
    let apps = TestNs::create(client, &scope, "rollout", &[]).await;
    let auto = TestNs::create(client, &scope, "rollout-auto", &[AUTO]).await;
    suite.install_network_crd().await;
    for kind in [
        ApiResource::erase::<k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy>(&()),
        ApiResource::erase::<k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding>(&()),
        ApiResource::erase::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>(&()),
        ApiResource::erase::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>(&()),
    ] {
        for name in ["envoy-injector-template-config", "envoy-injector-known-templates"] {
            scope.delete_later(kind.clone(), None, name);
        }
    }
    // The automatic rollout's bound, as the component ships it, for an installation in the
    // injector's namespace (not `envoy-injector`): `serve` restarts nothing without it.
    let mut bound = crate::common::helm::yaml_documents(
        &std::fs::read_to_string(manifest_path("manifests/auto-rollout/bound.yaml")).expect("bound.yaml"),
    );
    for object in &mut bound {
        if object["kind"] == "ValidatingAdmissionPolicyBinding" {
            object["spec"]["paramRef"]["namespace"] = json!(injector.name);
        }
        let kind = if object["kind"] == "ValidatingAdmissionPolicy" {
            ApiResource::erase::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>(&())
        } else {
            ApiResource::erase::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>(&())
        };
        scope.delete_later(kind, None, object["metadata"]["name"].as_str().unwrap_or_default());
    }
    kubectl_apply(&bound).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &injector.name);
    let (v1, v2, v3) = (
        template(SIDECAR, "registry.k8s.io/pause:3.9"),
        template(SIDECAR, "registry.k8s.io/pause:3.10"),
        template(SIDECAR, "registry.k8s.io/pause:3.10.1"),
    );
    set_config(&configmaps, &v1).await;
    let certs = envoy_injector::tls::generate(INJECTOR_NAME, &injector.name, &["127.0.0.1".to_string()], 1)
        .expect("test certificates");
    let owner = format!("envoy-injector-{}", injector.name);
    create_policy_owner(client, &scope, &owner).await;
    let args = [
        "--policy-owner",
        &owner,
        "--namespace",
        &injector.name,
        "--network-backend",
        "none",
        "--identity",
        "rollout-test",
        "--injection",
        "policy",
        "--auto-rollout=true",
        "--auto-rollout-timeout",
        "5s",
        "--auto-rollout-interval",
        "1s",
    ];
    let (serve, _) = serve_on_loopback("rollout", &certs, &args).await;
    serve.wait_ready().await;
    served_at(&apps.name, &revision_of(&v1)).await;

    // The workloads, injected at v1 by the compiled policies.
    let post = PostParams::default();
    let deployments = |ns: &TestNs| Api::<Deployment>::namespaced(client.clone(), &ns.name);
    for name in ["a-web", "b-api", "b-cart", "c-paused"] {
        deployments(&apps).create(&post, &opted_in_deployment(name)).await.expect("a Deployment");
    }
    for name in ["a-first", "b-second"] {
        deployments(&auto).create(&post, &opted_in_deployment(name)).await.expect("a Deployment");
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &apps.name);
    sets.create(&post, &stateful_set("d-ondelete", json!({"type": "OnDelete"})))
        .await
        .expect("a StatefulSet");
    sets.create(
        &post,
        &stateful_set("e-partition", json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}})),
    )
    .await
    .expect("a StatefulSet");
    Api::<Job>::namespaced(client.clone(), &apps.name)
        .create(&post, &job("f-batch"))
        .await
        .expect("a Job");
    apps.create_stored(&pod("g-solo", &[(INJECT, "true")], DEFAULT_IMAGE)).await;
    injected_at(&apps, 8, &revision_of(&v1)).await;
    injected_at(&auto, 2, &revision_of(&v1)).await;
    deployments(&apps)
        .patch("c-paused", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"paused": true}})))
        .await
        .expect("pause c-paused");
    step!("8 Pods in {} (4 Deployments, 2 StatefulSets, a Job, a bare Pod) and 2 in {} injected at v1", apps.name, auto.name);

    // The edit: the automatic rollout acts in the labelled namespace only.
    set_config(&configmaps, &v2).await;
    served_at(&apps.name, &revision_of(&v2)).await;
    let failed = wait_for("a RolloutFailed Event on Deployment a-first", PATIENCE * 2, async || {
        let events = auto.events_about("Deployment", "a-first").await?;
        let reasons: Vec<String> = events.iter().filter_map(|e| e.reason.clone()).collect();
        match events.iter().find(|e| e.reason.as_deref() == Some("RolloutFailed")) {
            Some(event) => Ok((event.message.clone().unwrap_or_default(), reasons)),
            None => Err(format!("Events {reasons:?}")),
        }
    })
    .await;
    assert!(failed.1.iter().any(|r| r == "RolloutStarted"), "{failed:?}");
    assert!(
        failed.0.contains("automatic rollout stopped for template `config` revision"),
        "the Event says it stopped: {}",
        failed.0
    );
    let metrics = serve.metrics().await;
    assert_eq!(metric_value(&metrics, "envoy_injector_rollouts_total{result=\"failed\"}"), Some(1.0), "{metrics}");
    assert_eq!(metric_value(&metrics, "envoy_injector_rollouts_in_progress"), Some(0.0), "{metrics}");
    let after_auto = workloads(client, &auto.name).await;
    assert!(after_auto["Deployment a-first"].1, "a-first restarted: {after_auto:?}");
    assert!(!after_auto["Deployment b-second"].1, "b-second untouched after the failure: {after_auto:?}");
    let before = workloads(client, &apps.name).await;
    assert!(before.values().all(|(_, restarted)| !restarted), "nothing restarted in {}: {before:?}", apps.name);
    step!("automatic rollout: a-first restarted and failed ({}), b-second and {} untouched", failed.0, apps.name);

    // The command, in the unlabelled namespace.
    let common = ["-n", apps.name.as_str(), "--injector-namespace", injector.name.as_str(), "--deployment", ""];
    let with = |extra: &[&'static str]| -> Vec<&str> { common.iter().copied().chain(extra.iter().copied()).collect() };
    let dry = envoy_injector("rollout", &with(&["--dry-run", "-o", "json"])).await;
    assert_eq!(dry.code, 0, "{}{}", dry.stdout, dry.stderr);
    let plan: Value = serde_json::from_str(&dry.stdout).expect("-o json prints JSON");
    assert_eq!(names(&plan, "workloads"), vec!["Deployment a-web", "Deployment b-api", "Deployment b-cart"], "{plan:#}");
    assert!(plan["workloads"].as_array().unwrap().iter().all(|w| w["result"] == "planned"), "{plan:#}");
    assert_eq!(
        names(&plan, "left"),
        vec![
            "Deployment c-paused",
            "Job f-batch",
            "Pod g-solo",
            "StatefulSet d-ondelete",
            "StatefulSet e-partition"
        ],
        "{plan:#}"
    );
    assert_eq!(plan["inStep"]["ready"], true, "{plan:#}");
    assert_eq!(workloads(client, &apps.name).await, before, "--dry-run changes nothing");
    let text = envoy_injector("rollout", &with(&["--dry-run"])).await;
    for expected in [
        format!("  Deployment {}/a-web: 1 Pod(s) on `config` revision {} -> {}: would be restarted", apps.name, revision_of(&v1), revision_of(&v2)),
        format!("      what to do: kubectl rollout resume deployment/c-paused -n {}, then run rollout again", apps.name),
        String::from("its updateStrategy is OnDelete"),
        String::from("its rollingUpdate.partition is 1"),
        String::from("a bare Pod: nothing would recreate it"),
        String::from("Result: ok (dry run, nothing changed: 3 to restart; 5 left to you)"),
    ] {
        assert!(text.stdout.contains(&expected), "expected {expected:?} in:\n{}", text.stdout);
    }
    let narrowed = envoy_injector("rollout", &with(&["--dry-run", "-o", "json", "--selector", "app=b-api"])).await;
    let narrowed: Value = serde_json::from_str(&narrowed.stdout).expect("-o json prints JSON");
    assert_eq!((names(&narrowed, "workloads"), names(&narrowed, "left")), (vec![String::from("Deployment b-api")], vec![]));
    step!("rollout --dry-run: a-web, b-api, b-cart, 5 left with what to do, nothing changed; --selector app=b-api: b-api alone");

    // Another edit, and the real run at once: it restarts once the policies serve v3.
    set_config(&configmaps, &v3).await;
    let ran = envoy_injector("rollout", &with(&["--timeout", "6s", "-o", "json"])).await;
    assert_eq!(ran.code, 1, "a rollout that cannot complete fails the run:\n{}{}", ran.stdout, ran.stderr);
    let report: Value = serde_json::from_str(&ran.stdout).expect("-o json prints JSON");
    let results: Vec<(String, String)> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap_or("?").to_string(), w["result"].as_str().unwrap_or("?").to_string()))
        .collect();
    assert_eq!(
        results,
        vec![
            (String::from("a-web"), String::from("timed-out")),
            (String::from("b-api"), String::from("not-started")),
            (String::from("b-cart"), String::from("not-started")),
        ],
        "{report:#}"
    );
    assert!(report["workloads"][1]["reason"].as_str().unwrap_or_default().contains("a-web"), "{report:#}");
    assert!(ran.stderr.contains("a-web: restarting"), "each step told on stderr: {}", ran.stderr);
    let after = workloads(client, &apps.name).await;
    assert!(after["Deployment a-web"].1, "a-web restarted: {after:?}");
    assert!(!after["Deployment b-api"].1, "b-api untouched after a-web failed: {after:?}");
    let new_pods: Vec<Pod> = apps
        .pods
        .list(&ListParams::default().labels("app=a-web"))
        .await
        .expect("a-web's Pods")
        .items;
    assert!(
        new_pods.iter().any(|p| label(p, REVISION) == Some(revision_of(&v3).as_str())),
        "a-web's new Pod carries the revision live when it was restarted: {:?}",
        new_pods.iter().map(describe_pod).collect::<Vec<_>>()
    );
    let report_waited = format!("{:.1}", report["waitedSeconds"].as_f64().unwrap_or_default());
    step!(
        "rollout right after an edit: waited {} s for the policies, a-web's new Pod at v3, timed out ({}); b-api not started; exit 1",
        report_waited,
        report["workloads"][0]["reason"]
    );

    // Two at once: both in flight finish and are reported, none is started after them.
    let parallel = envoy_injector("rollout", &with(&["--timeout", "6s", "--max-parallel", "2", "-o", "json"])).await;
    let report: Value = serde_json::from_str(&parallel.stdout).expect("-o json prints JSON");
    let results: Vec<&str> = report["workloads"].as_array().unwrap().iter().map(|w| w["result"].as_str().unwrap_or("?")).collect();
    assert_eq!((parallel.code, results), (1, vec!["timed-out", "timed-out", "not-started"]), "{report:#}");
    let after = workloads(client, &apps.name).await;
    assert!(after["Deployment b-api"].1 && !after["Deployment b-cart"].1, "b-api restarted beside a-web, b-cart untouched: {after:?}");
    step!("rollout --max-parallel 2: a-web and b-api both timed out and reported, b-cart not started");

    // Drift: Pods written from `inject`'s output, then changed.
    let dir = temp_dir("envoy-injector-e2e-rollout");
    let cm = dir.path().join("configmap.json");
    std::fs::write(&cm, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": INJECTOR_NAME}, "data": {"config": v3}}).to_string())
        .expect("write the ConfigMap");
    // h-image asks for a regular sidecar (its image rewritten), i-native takes the default.
    for (name, restart_policy) in [("h-image", "Always"), ("i-native", "Never")] {
        let regular = [(INJECT, "true"), ("sidecar.samplecrd.k8s.io/native-sidecar", "false")];
        let annotations = if name == "h-image" { &regular[..] } else { &regular[..1] };
        let mut app = serde_json::to_value(pod(name, annotations, DEFAULT_IMAGE)).expect("a Pod is JSON");
        app["spec"]["restartPolicy"] = json!(restart_policy);
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, app.to_string()).expect("write the Pod");
        let out = envoy_injector("inject", &["-f", file.to_str().unwrap(), "--config", cm.to_str().unwrap(), "-o", "json"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let mut injected: Value = serde_json::from_str(&out.stdout).expect("inject -o json prints JSON");
        if restart_policy == "Never" {
            injected["spec"]["initContainers"][0].as_object_mut().expect("the native sidecar").remove("restartPolicy");
        } else {
            injected["spec"]["containers"][1]["image"] = json!("mirror.example/pause:3.10.1");
        }
        apps.create_stored(&serde_json::from_value(injected).expect("a Pod")).await;
    }
    let check_flags = [
        "-n",
        apps.name.as_str(),
        "--injector-namespace",
        injector.name.as_str(),
        "--webhook-config",
        "",
        "--validating-webhook-config",
        "",
        "--tls-secret",
        "",
        "--lease-name",
        "",
        "--deployment",
        "",
    ];
    let drift = envoy_injector("check", &[&check_flags[..], &["--drift", "-o", "json"]].concat()).await;
    assert_eq!(drift.code, 1, "drift fails the check:\n{}", drift.stdout);
    let report: Value = serde_json::from_str(&drift.stdout).expect("-o json prints JSON");
    let found: Vec<(String, Vec<String>)> = report["drift"]
        .as_array()
        .expect("a `drift` list")
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap_or("?").to_string(),
                d["differences"].as_array().into_iter().flatten().map(|x| x["field"].as_str().unwrap_or("?").to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (String::from("h-image"), vec![format!("containers[{SIDECAR}].image")]),
            (String::from("i-native"), vec![format!("initContainers[{SIDECAR}].restartPolicy")]),
        ],
        "only the two changed Pods, field by field (a-web's new Pod is in step, the others stale): {report:#}"
    );
    let one = envoy_injector("check", &[&check_flags[..], &["i-native"]].concat()).await;
    assert!(
        one.stdout.contains(&format!("DRIFT: initContainers[{SIDECAR}].restartPolicy: expected \"Always\", found none")),
        "{}",
        one.stdout
    );
    for name in ["h-image", "i-native"] {
        apps.pods.delete(name, &Default::default()).await.expect("delete a drifted Pod");
    }
    let clean = envoy_injector("check", &[&check_flags[..], &["--drift"]].concat()).await;
    assert_eq!(clean.code, 0, "{}", clean.stdout);
    step!("check --drift names h-image (image) and i-native (restartPolicy), exit 1; without them exit 0");
    Ok(format!(
        "auto: a-first failed, stopped, b-second untouched; rollout waited {} s for the policies, a-web timed out, b-api not started; drift: 2 Pods named",
        report_waited
    ))
}
