//! Drift on Pods injected by the engine itself, then stored as the API server stores them
//! (defaults filled in, quantities in their canonical form, a Network's env added) or
//! changed after the injection.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::inject::jsonpatch;

const TEMPLATE: &str = r#"
containers:
- name: envoy
  image: envoy:1
  args: ["--log-level", "info"]
  resources:
    requests: {cpu: "0.1", memory: 64Mi}
    limits: {memory: 128Mi}
  env:
  - name: LOG_LEVEL
    value: info
  ports:
  - containerPort: 15001
  volumeMounts:
  - name: envoy-conf
    mountPath: /etc/envoy
volumes:
- name: envoy-conf
  emptyDir: {}
volumeMounts:
- name: envoy-conf
  mountPath: /etc/envoy
overrides:
  memory-limit: {container: envoy, field: resources.limits.memory, min: 64Mi, max: 1Gi}
"#;

fn live(text: &str) -> TemplateSet {
    TemplateSet::from_data(
        "t",
        &BTreeMap::from([("config".to_string(), text.to_string())]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap()
}

/// A Burstable Pod: its sidecar keeps the template's resources (a BestEffort Pod's goes in
/// without cpu and memory).
fn app_pod(annotations: Value, restart_policy: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "apps", "annotations": annotations},
        "spec": {"restartPolicy": restart_policy,
                 "containers": [{"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "50m"}}}]},
    })
}

/// `pod` injected with `set`'s `config`, as the webhook patches it.
fn injected(pod: &Value, set: &TemplateSet) -> Value {
    let template = set.get("config").unwrap();
    let view = PodView::read(pod);
    let Decision::Inject(plan) = inject::plan(&view, template, &Extras::default()).unwrap() else {
        panic!("expected the Pod injected")
    };
    let patch = jsonpatch::render(&plan, &view).unwrap();
    let mut out = pod.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    out
}

/// What the API server adds to a stored Pod: defaults, canonical quantities, and another
/// writer's additions that the template does not set (a Network's env, a token volume).
fn as_stored(mut pod: Value) -> Value {
    for list in ["containers", "initContainers"] {
        for container in pod["spec"][list].as_array_mut().into_iter().flatten() {
            container["imagePullPolicy"] = json!("IfNotPresent");
            container["terminationMessagePath"] = json!("/dev/termination-log");
            if let Some(ports) = container["ports"].as_array_mut() {
                for port in ports {
                    port["protocol"] = json!("TCP");
                }
            }
            if container["name"] == "envoy" {
                container["resources"]["requests"]["cpu"] = json!("100m");
                container["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "NETWORK_CIDR", "value": "198.18.64.0/24"}));
            }
            container["volumeMounts"].as_array_mut().unwrap().push(json!({
                "name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true
            }));
        }
    }
    pod["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "kube-api-access-x", "projected": {"sources": []}}));
    pod
}

fn differences(standing: Standing) -> Vec<String> {
    match standing {
        Standing::Drifted(found) => found.iter().map(ToString::to_string).collect(),
        other => panic!("expected drift, found {other:?}"),
    }
}

#[test]
fn a_pod_stored_as_injected_is_in_step_whatever_the_api_server_added() {
    let set = live(TEMPLATE);
    for restart_policy in ["Always", "Never"] {
        let pod = as_stored(injected(&app_pod(json!({}), restart_policy), &set));
        assert_eq!(standing(&pod, &set), Standing::InStep, "restartPolicy {restart_policy}");
    }
    let asked = app_pod(
        json!({"sidecar.samplecrd.k8s.io/override.memory-limit": "256Mi"}),
        "Always",
    );
    let pod = as_stored(injected(&asked, &set));
    assert_eq!(
        standing(&pod, &set),
        Standing::InStep,
        "an override applied is what the template makes"
    );
}

#[test]
fn a_rewritten_image_and_a_changed_override_value_are_named() {
    let set = live(TEMPLATE);
    let mut pod = as_stored(injected(&app_pod(json!({}), "Always"), &set));
    let envoy = pod["spec"]["initContainers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == "envoy")
        .unwrap();
    envoy["image"] = json!("mirror.example/envoy:1");
    envoy["resources"]["limits"]["memory"] = json!("1Gi");
    envoy["args"] = json!(["--log-level", "debug"]);
    assert_eq!(
        differences(standing(&pod, &set)),
        vec![
            r#"initContainers[envoy].args: expected ["--log-level","info"], found ["--log-level","debug"]"#,
            r#"initContainers[envoy].image: expected "envoy:1", found "mirror.example/envoy:1""#,
            r#"initContainers[envoy].resources.limits.memory: expected "128Mi", found "1Gi""#,
        ]
    );
}

#[test]
fn a_native_sidecar_without_its_restart_policy_is_named() {
    let set = live(TEMPLATE);
    let mut pod = as_stored(injected(&app_pod(json!({}), "Never"), &set));
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always", "{pod:#}");
    pod["spec"]["initContainers"][0]
        .as_object_mut()
        .unwrap()
        .remove("restartPolicy");
    assert_eq!(
        differences(standing(&pod, &set)),
        vec![r#"initContainers[envoy].restartPolicy: expected "Always", found none"#]
    );
}

#[test]
fn a_removed_mount_and_a_moved_sidecar_are_named() {
    let set = live(TEMPLATE);
    let mut pod = as_stored(injected(&app_pod(json!({}), "Always"), &set));
    let app = &mut pod["spec"]["containers"][0];
    assert_eq!(app["name"], "app");
    app["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .retain(|m| m["mountPath"] != "/etc/envoy");
    let found = differences(standing(&pod, &set));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("containers[app].volumeMounts[/etc/envoy]: expected {")
            && found[0].ends_with("found none"),
        "{found:?}"
    );

    // The sidecar as a regular container where the template makes it a native one.
    let mut pod = as_stored(injected(&app_pod(json!({}), "Never"), &set));
    let sidecar = pod["spec"]["initContainers"].as_array_mut().unwrap().remove(0);
    pod["spec"]["containers"].as_array_mut().unwrap().push(sidecar);
    assert_eq!(
        differences(standing(&pod, &set)),
        vec![r#"initContainers[envoy]: expected "container `envoy` in `initContainers`", found "it in `containers`""#]
    );
}

#[test]
fn another_revision_is_stale_and_a_plain_pod_is_not_injected() {
    let old = live(TEMPLATE);
    let new = live(&TEMPLATE.replace("envoy:1", "envoy:2"));
    let pod = as_stored(injected(&app_pod(json!({}), "Always"), &old));
    assert_eq!(
        standing(&pod, &new),
        Standing::Stale,
        "an older revision is stale, not drifted"
    );
    let gone = TemplateSet::from_data(
        "t",
        &BTreeMap::from([("other".to_string(), TEMPLATE.to_string())]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    assert_eq!(standing(&pod, &gone), Standing::Stale, "a template that is gone");
    assert_eq!(standing(&app_pod(json!({}), "Always"), &new), Standing::NotInjected);
    let mangled = app_pod(json!({STATUS_ANNOTATION: "{"}), "Always");
    assert!(matches!(standing(&mangled, &new), Standing::Unknown(why) if why.contains(STATUS_ANNOTATION)));
}

#[test]
fn check_drift_lists_each_drifted_pod_with_its_workload_and_fails() {
    let set = live(TEMPLATE);
    let fine = as_stored(injected(&app_pod(json!({}), "Always"), &set));
    let mut changed = fine.clone();
    changed["metadata"]["name"] = json!("web-2");
    changed["spec"]["initContainers"][0]["image"] = json!("other:1");
    let stale = as_stored(injected(
        &app_pod(json!({}), "Always"),
        &live(&TEMPLATE.replace("envoy:1", "envoy:0")),
    ));
    let pods = [fine, changed, stale];
    let found = drifted(&pods, &set, |pod| {
        Some(format!("Deployment apps/{}", pod["metadata"]["name"]))
    });
    assert_eq!(found.len(), 1, "only the changed one: {found:#?}");
    let pod = &found[0];
    assert_eq!(
        (pod.name.as_str(), pod.workload.as_deref()),
        ("web-2", Some(r#"Deployment apps/"web-2""#))
    );
    assert_eq!(
        (pod.template.as_str(), pod.revision.as_str()),
        ("config", set.get("config").unwrap().revision.as_str())
    );
    assert_eq!(pod.differences.len(), 1);
    assert_eq!(pod.differences[0].field, "initContainers[envoy].image");
    let line = check_line(&found, Some("apps"));
    assert_eq!(line.status, Status::Fail, "{line:?}");
    assert!(
        line.message
            .starts_with("1 injected Pod(s) in namespace apps carry a sidecar that differs"),
        "{line:?}"
    );
    assert_eq!(check_line(&[], None).status, Status::Ok);

    // A Pod nothing owns names no workload, in JSON neither.
    let bare = drifted(&pods, &set, |_| None);
    assert_eq!(bare[0].workload, None);
    let json = serde_json::to_value(&bare[0]).unwrap();
    assert!(json.get("workload").is_none(), "{json}");
}
