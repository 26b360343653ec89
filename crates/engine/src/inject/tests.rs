use serde_json::{Value, json};

use std::sync::Arc;

use super::*;
use crate::template::{CLASSIC_TEMPLATE, DEFAULT_TEMPLATE, Template, TemplateSet};

fn default_template() -> Arc<Template> {
    TemplateSet::embedded().get(DEFAULT_TEMPLATE).unwrap().clone()
}

/// The previous default: a sidecar on port 80 with a volume from ConfigMap `envoy`.
fn classic_template() -> Arc<Template> {
    TemplateSet::embedded().get(CLASSIC_TEMPLATE).unwrap().clone()
}

fn template(text: &str) -> Template {
    Template::parse("config", text, crate::template::KubeVersion::NEWEST).unwrap()
}

/// Plans, renders, applies: returns the patched Pod and the patch.
fn inject_with(pod: &Value, template: &Template) -> (Value, json_patch::Patch) {
    let Decision::Inject(plan) = plan(&PodView::read(pod), template, &Extras::default()).unwrap() else {
        panic!("expected an injection")
    };
    let patch = jsonpatch::render(&plan, &PodView::read(pod)).unwrap();
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &patch).unwrap_or_else(|e| panic!("patch {patch:?} does not apply: {e}"));
    (patched, patch)
}

fn inject_default(pod: &Value) -> Value {
    inject_with(pod, &default_template()).0
}

fn as_pod(value: &Value) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("not a Pod: {e}\n{value:#}"))
}

fn fixture_pod(name: &str) -> Value {
    let path = format!("{}/../../tests/fixtures/admission/{name}", env!("CARGO_MANIFEST_DIR"));
    let review: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    review["request"]["object"].clone()
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[test]
fn seed_pod_gets_sidecar_and_status() {
    let pod = fixture_pod("seed-initializer-annotation.json");
    let out = inject_default(&pod);
    assert_eq!(names(&out["spec"]["containers"]), ["myapp-container"]);
    assert_eq!(
        names(&out["spec"]["initContainers"]),
        ["envoy"],
        "a native sidecar by default"
    );
    // The default sidecar needs no volume: the Pod's own are left as they were.
    assert_eq!(names(&out["spec"]["volumes"]), ["kube-api-access-z5wjl"]);
    let annotations = out["metadata"]["annotations"].as_object().unwrap();
    // Existing annotations are kept, one is added.
    assert_eq!(
        annotations.len(),
        pod["metadata"]["annotations"].as_object().unwrap().len() + 1
    );
    let status: InjectionStatus = serde_json::from_str(annotations[STATUS_ANNOTATION].as_str().unwrap()).unwrap();
    assert_eq!(status.init_containers, ["envoy"]);
    assert!(status.native_sidecar);
    assert_eq!(status.template, "config");
    assert_eq!(status.revision, default_template().revision);
    as_pod(&out);

    // The legacy opt-in keeps its old sidecar when it asks for `classic`.
    let (out, _) = inject_with(&pod, &classic_template());
    assert_eq!(names(&out["spec"]["volumes"]), ["kube-api-access-z5wjl", "envoy-conf"]);
    assert_eq!(
        out["spec"]["containers"][1]["image"],
        "lyft/envoy:845747db88f102c0fd262ab234308e9e22f693a1"
    );
    let status: InjectionStatus =
        serde_json::from_str(out["metadata"]["annotations"][STATUS_ANNOTATION].as_str().unwrap()).unwrap();
    assert_eq!(
        (status.template.as_str(), status.volumes),
        ("classic", vec!["envoy-conf".to_string()])
    );
    as_pod(&out);
}

#[test]
fn generate_name_pod_keeps_its_shape() {
    let pod = fixture_pod("replicaset-generatename-init-volumes.json");
    let out = inject_default(&pod);
    assert!(out["metadata"].get("name").is_none());
    assert_eq!(out["metadata"]["generateName"], "web-7d9f8b6c5-");
    assert_eq!(names(&out["spec"]["initContainers"]), ["envoy", "init-db"]);
    assert_eq!(names(&out["spec"]["containers"]), ["web", "metrics"]);
    assert_eq!(
        names(&out["spec"]["volumes"]),
        ["cache", "config", "kube-api-access-rxspb"]
    );
    as_pod(&out);
    let (out, _) = inject_with(&pod, &classic_template());
    assert_eq!(
        names(&out["spec"]["volumes"]),
        ["cache", "config", "kube-api-access-rxspb", "envoy-conf"]
    );
    as_pod(&out);
}

#[test]
fn already_injected_fixture_by_container_name_gets_nothing() {
    let pod = fixture_pod("already-injected.json");
    let template = default_template();
    let decision = plan(&PodView::read(&pod), &template, &Extras::default()).unwrap();
    assert!(
        matches!(decision, Decision::Skip(Skip::AlreadyInjected { .. })),
        "{decision:?}"
    );
}

#[test]
fn second_pass_adds_nothing() {
    for fixture in [
        "seed-initializer-annotation.json",
        "replicaset-generatename-init-volumes.json",
    ] {
        let once = inject_default(&fixture_pod(fixture));
        let template = default_template();
        let again = plan(&PodView::read(&once), &template, &Extras::default()).unwrap();
        assert!(
            matches!(again, Decision::Skip(Skip::AlreadyInjected { .. })),
            "{fixture}: {again:?}"
        );
    }
}

#[test]
fn absent_arrays_and_maps_are_created_not_replaced() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}, "spec": {"containers": [{"name": "app"}]}});
    let (out, patch) = inject_with(&pod, &classic_template());
    let paths: Vec<String> = patch.0.iter().map(|op| op.path().to_string()).collect();
    assert!(paths.contains(&"/spec/volumes".to_string()), "{paths:?}");
    assert!(paths.contains(&"/metadata/annotations".to_string()), "{paths:?}");
    assert_eq!(names(&out["spec"]["containers"]), ["app", "envoy"]);
    as_pod(&out);
    // A list is created only for something to put in it: the default adds no volume.
    let (out, patch) = inject_with(&pod, &default_template());
    let paths: Vec<String> = patch.0.iter().map(|op| op.path().to_string()).collect();
    assert!(!paths.iter().any(|p| p.starts_with("/spec/volumes")), "{paths:?}");
    assert!(out["spec"].get("volumes").is_none(), "{out:#}");
    as_pod(&out);
}

#[test]
fn no_metadata_still_yields_a_valid_patch() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "app"}]}});
    let (out, _) = inject_with(&pod, &default_template());
    assert!(out["metadata"]["annotations"][STATUS_ANNOTATION].is_string());
    assert_eq!(names(&out["spec"]["containers"]), ["app"]);
    assert_eq!(names(&out["spec"]["initContainers"]), ["envoy"]);
}

#[test]
fn pods_without_containers_are_refused_naming_what_was_found() {
    // The API server refuses these; injecting would make them "valid" sidecar-only Pods.
    for (pod, found) in [
        (json!({"kind": "Pod"}), "found no `spec`"),
        (
            json!({"kind": "Pod", "spec": {}}),
            "found no `containers` field in `spec`",
        ),
        (json!({"kind": "Pod", "spec": {"containers": null}}), "found null"),
        (
            json!({"kind": "Pod", "spec": {"containers": []}}),
            "found an empty list",
        ),
    ] {
        let err = plan(&PodView::read(&pod), &default_template(), &Extras::default()).unwrap_err();
        assert!(matches!(err, InjectError::NoContainers { .. }), "{pod}: {err:?}");
        let message = err.to_string();
        assert!(message.contains("`spec.containers`"), "{message}");
        assert!(message.contains("at least one container"), "{message}");
        assert!(message.ends_with(found), "{pod}: {message}");
    }
}

#[test]
fn empty_and_null_lists_are_appended_to() {
    let pod = json!({"metadata": {"annotations": {}}, "spec": {"containers": [{"name": "app"}], "initContainers": [], "volumes": null}});
    let (out, _) = inject_with(&pod, &classic_template());
    assert_eq!(names(&out["spec"]["containers"]), ["app", "envoy"]);
    assert_eq!(names(&out["spec"]["volumes"]), ["envoy-conf"]);
}

#[test]
fn annotation_keys_are_pointer_escaped() {
    let pod = json!({"metadata": {"annotations": {"a/b~c": "1", "x": "2"}}, "spec": {"containers": [{"name": "app"}]}});
    let (out, patch) = inject_with(&pod, &default_template());
    let status_op = patch
        .0
        .iter()
        .find(|op| op.path().to_string().contains("status"))
        .unwrap();
    assert_eq!(
        status_op.path().to_string(),
        "/metadata/annotations/sidecar.samplecrd.k8s.io~1status"
    );
    assert_eq!(out["metadata"]["annotations"]["a/b~c"], "1");
    assert_eq!(out["metadata"]["annotations"]["x"], "2");
}

#[test]
fn only_add_operations_are_emitted() {
    let pod = fixture_pod("replicaset-generatename-init-volumes.json");
    let (_, patch) = inject_with(&pod, &default_template());
    assert!(
        patch
            .0
            .iter()
            .all(|op| matches!(op, json_patch::PatchOperation::Add(_)))
    );
}

#[test]
fn volume_with_same_name_and_other_source_is_a_collision_naming_both() {
    let pod = json!({"spec": {"containers": [{"name": "app"}], "volumes": [{"name": "envoy-conf", "emptyDir": {}}]}});
    let err = plan(&PodView::read(&pod), &classic_template(), &Extras::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Pod volume `envoy-conf` (emptyDir: {})"), "{err}");
    assert!(err.contains("template `classic`"), "{err}");
    assert!(err.contains("configMap"), "{err}");
}

#[test]
fn identical_volume_defaulted_by_the_server_is_reused() {
    let pod = json!({"spec": {"containers": [{"name": "app"}],
        "volumes": [{"name": "envoy-conf", "configMap": {"name": "envoy", "defaultMode": 420}}]}});
    let (out, _) = inject_with(&pod, &classic_template());
    assert_eq!(names(&out["spec"]["volumes"]), ["envoy-conf"]);
    assert_eq!(names(&out["spec"]["containers"]), ["app", "envoy"]);
}

#[test]
fn partial_injection_is_refused() {
    let t = template("containers:\n- name: proxy\n  image: p\n- name: agent\n  image: a\n");
    let pod = json!({"spec": {"containers": [{"name": "app"}, {"name": "agent"}]}});
    let err = plan(&PodView::read(&pod), &t, &Extras::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("`agent`") && err.contains("`proxy`"), "{err}");
}

#[test]
fn port_collision_names_both_containers() {
    // `classic` really collides with an app on port 80: its Envoy declares it.
    let pod = json!({"spec": {"containers": [{"name": "web", "ports": [{"containerPort": 80}]}]}});
    let err = plan(&PodView::read(&pod), &classic_template(), &Extras::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("port 80/TCP")
            && err.contains("template `classic`")
            && err.contains("`envoy`")
            && err.contains("`web`")
            && err.contains(TEMPLATE_ANNOTATION),
        "{err}"
    );
    let udp = json!({"spec": {"containers": [{"name": "dns", "ports": [{"containerPort": 80, "protocol": "UDP"}]}]}});
    assert!(plan(&PodView::read(&udp), &classic_template(), &Extras::default()).is_ok());
    // So does the default, with an app on one of its own ports.
    let pod = json!({"spec": {"containers": [{"name": "web", "ports": [{"containerPort": 15021}]}]}});
    let err = plan(&PodView::read(&pod), &default_template(), &Extras::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("port 15021/TCP of template `config` container `envoy` is already used by Pod container `web`"),
        "{err}"
    );
}

/// The ports apps commonly listen on are the app's: the default sidecar keeps to its own.
#[test]
fn the_default_injects_apps_on_the_common_ports() {
    for port in [80, 443, 8080, 9090] {
        let pod = json!({"spec": {"containers": [{"name": "web", "ports": [{"containerPort": port}]}]}});
        let out = inject_default(&pod);
        assert_eq!(names(&out["spec"]["containers"]), ["web"], "port {port}");
        let sidecar_ports: Vec<i64> = out["spec"]["initContainers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["containerPort"].as_i64().unwrap())
            .collect();
        assert_eq!(sidecar_ports, [15006, 15021, 15090], "port {port}");
        as_pod(&out);
    }
}

const WITH_MOUNTS: &str = "containers:\n- name: proxy\n  image: p\nvolumes:\n- name: certs\n  emptyDir: {}\nvolumeMounts:\n- name: certs\n  mountPath: /etc/certs\n";

#[test]
fn top_level_mounts_go_into_every_app_container() {
    let pod = json!({"spec": {"containers": [
        {"name": "a"},
        {"name": "b", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    ], "volumes": [{"name": "data", "emptyDir": {}}]}});
    let (out, _) = inject_with(&pod, &template(WITH_MOUNTS));
    assert_eq!(
        out["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": "certs", "mountPath": "/etc/certs"}])
    );
    assert_eq!(names(&out["spec"]["containers"][1]["volumeMounts"]), ["data", "certs"]);
    // The sidecar itself gets only its own mounts.
    assert!(out["spec"]["containers"][2].get("volumeMounts").is_none());
    as_pod(&out);
}

#[test]
fn two_mounts_into_a_container_without_mounts() {
    let t = template(
        "volumes:\n- {name: a, emptyDir: {}}\n- {name: b, emptyDir: {}}\nvolumeMounts:\n- {name: a, mountPath: /a}\n- {name: b, mountPath: /b}\n",
    );
    let pod = json!({"spec": {"containers": [{"name": "app"}]}});
    let (out, _) = inject_with(&pod, &t);
    assert_eq!(names(&out["spec"]["containers"][0]["volumeMounts"]), ["a", "b"]);
}

#[test]
fn mount_path_taken_by_another_volume_is_a_collision() {
    let pod = json!({"spec": {"containers": [{"name": "app", "volumeMounts": [{"name": "mine", "mountPath": "/etc/certs"}]}],
        "volumes": [{"name": "mine", "emptyDir": {}}]}});
    let err = plan(&PodView::read(&pod), &template(WITH_MOUNTS), &Extras::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`app`") && err.contains("`mine`") && err.contains("/etc/certs") && err.contains("`certs`"),
        "{err}"
    );
}

#[test]
fn native_sidecar_from_template_goes_first_in_init_containers() {
    let t = template(
        "nativeSidecar: true\ninitContainers:\n- name: setup\n  image: s\ncontainers:\n- name: proxy\n  image: p\n",
    );
    let pod = fixture_pod("replicaset-generatename-init-volumes.json");
    let (out, _) = inject_with(&pod, &t);
    assert_eq!(names(&out["spec"]["initContainers"]), ["setup", "proxy", "init-db"]);
    assert_eq!(out["spec"]["initContainers"][1]["restartPolicy"], "Always");
    assert_eq!(names(&out["spec"]["containers"]), ["web", "metrics"]);
    as_pod(&out);
}

#[test]
fn native_sidecar_by_pod_annotation() {
    let pod = json!({"metadata": {"annotations": {NATIVE_SIDECAR_ANNOTATION: "true"}}, "spec": {"containers": [{"name": "app"}]}});
    let out = inject_default(&pod);
    assert_eq!(names(&out["spec"]["initContainers"]), ["envoy"]);
    assert_eq!(names(&out["spec"]["containers"]), ["app"]);
    let template = default_template();
    let again = plan(&PodView::read(&out), &template, &Extras::default()).unwrap();
    assert!(matches!(again, Decision::Skip(_)));
}

/// A template's sidecar, the template saying nothing of `nativeSidecar` unless told.
fn sidecar_template(native_sidecar: Option<bool>) -> Template {
    let field = native_sidecar.map_or(String::new(), |n| format!("nativeSidecar: {n}\n"));
    template(&format!("{field}containers:\n- name: proxy\n  image: envoy\n"))
}

/// A Pod with one app container, its `restartPolicy` and `native-sidecar` annotation as given.
fn pod_with(restart_policy: Option<Value>, native_annotation: Option<&str>) -> Value {
    let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "app"}]}});
    if let Some(policy) = restart_policy {
        pod["spec"]["restartPolicy"] = policy;
    }
    if let Some(value) = native_annotation {
        pod["metadata"]["annotations"] = json!({NATIVE_SIDECAR_ANNOTATION: value});
    }
    pod
}

/// The default is native for every Pod, whatever its `restartPolicy`: the sidecar starts
/// before the app and the Pod's own init containers and stops after the app, and a Pod
/// that runs to completion finishes. The annotation, then the template's explicit
/// `nativeSidecar`, override the default.
#[test]
fn native_sidecar_by_default_for_every_pod() {
    let never = || Some(json!("Never"));
    let on_failure = || Some(json!("OnFailure"));
    let always = || Some(json!("Always"));
    for (restart_policy, annotation, template_says, native, rule) in [
        (never(), None, None, true, NativeRule::Default),
        (on_failure(), None, None, true, NativeRule::Default),
        (always(), None, None, true, NativeRule::Default),
        (None, None, None, true, NativeRule::Default),
        (Some(Value::Null), None, None, true, NativeRule::Default),
        (never(), Some("false"), None, false, NativeRule::Annotation),
        (always(), Some("false"), None, false, NativeRule::Annotation),
        (never(), Some(" FALSE "), Some(true), false, NativeRule::Annotation),
        (always(), Some("true"), Some(false), true, NativeRule::Annotation),
        (on_failure(), None, Some(false), false, NativeRule::Template),
        (always(), None, Some(false), false, NativeRule::Template),
        (always(), None, Some(true), true, NativeRule::Template),
        (None, None, Some(true), true, NativeRule::Template),
        // Neither true nor false: the annotation says nothing (admission warns of it).
        (always(), Some("maybe"), None, true, NativeRule::Default),
        (on_failure(), Some("maybe"), Some(false), false, NativeRule::Template),
    ] {
        let case = format!("restartPolicy {restart_policy:?}, annotation {annotation:?}, template {template_says:?}");
        let pod = pod_with(restart_policy, annotation);
        let t = sidecar_template(template_says);
        let Decision::Inject(planned) = plan(&PodView::read(&pod), &t, &Extras::default()).unwrap() else {
            panic!("expected an injection: {case}")
        };
        assert_eq!(planned.native_rule, rule, "{case}");
        let (out, _) = inject_with(&pod, &t);
        let status: InjectionStatus =
            serde_json::from_str(out["metadata"]["annotations"][STATUS_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(status.native_sidecar, native, "{case}");
        if native {
            assert_eq!(names(&out["spec"]["initContainers"]), ["proxy"], "{case}");
            assert_eq!(out["spec"]["initContainers"][0]["restartPolicy"], "Always", "{case}");
            assert_eq!(names(&out["spec"]["containers"]), ["app"], "{case}");
            assert_eq!(
                (status.init_containers, status.containers),
                (vec!["proxy".to_string()], vec![])
            );
        } else {
            assert_eq!(names(&out["spec"]["containers"]), ["app", "proxy"], "{case}");
            assert!(out["spec"].get("initContainers").is_none(), "{case}");
            assert_eq!(out["spec"]["containers"][1].get("restartPolicy"), None, "{case}");
            assert_eq!(
                (status.init_containers, status.containers),
                (vec![], vec!["proxy".to_string()])
            );
        }
        as_pod(&out);
        let again = plan(&PodView::read(&out), &t, &Extras::default()).unwrap();
        assert!(matches!(again, Decision::Skip(Skip::AlreadyInjected { .. })), "{case}");
    }
}

/// The default no longer reads `spec.restartPolicy`: one of the wrong type is the API
/// server's to refuse, and the injection does not stop on it.
#[test]
fn restart_policy_of_the_wrong_type_is_not_read() {
    for policy in [json!(1), json!(["Never"]), json!(true)] {
        for t in [sidecar_template(None), sidecar_template(Some(false))] {
            let pod = pod_with(Some(policy.clone()), None);
            assert!(
                matches!(
                    plan(&PodView::read(&pod), &t, &Extras::default()),
                    Ok(Decision::Inject(_))
                ),
                "{policy}"
            );
        }
    }
}

/// The admission path reads the Pod from the review's text: same answer as from a value.
#[test]
fn restart_policy_read_from_review_text_gives_the_same_plan() {
    let t = sidecar_template(None);
    for policy in ["Never", "OnFailure", "Always"] {
        let pod = pod_with(Some(json!(policy)), None);
        let text = pod.to_string();
        let parsed: PodView<'_> = serde_json::from_str(&text).unwrap();
        let from_text = plan(&parsed, &t, &Extras::default()).unwrap();
        let from_value = plan(&PodView::read(&pod), &t, &Extras::default()).unwrap();
        assert_eq!(from_text, from_value, "{policy}");
    }
}

#[test]
fn pull_secrets_are_added_once() {
    let t = template("containers:\n- name: p\n  image: p\nimagePullSecrets:\n- name: reg\n- name: other\n");
    let pod = json!({"spec": {"containers": [{"name": "app"}], "imagePullSecrets": [{"name": "reg"}]}});
    let (out, _) = inject_with(&pod, &t);
    assert_eq!(names(&out["spec"]["imagePullSecrets"]), ["reg", "other"]);
}

#[test]
fn extras_set_env_annotations_and_labels() {
    let mut extras = Extras::default();
    extras.sidecar_env.push(k8s_openapi::api::core::v1::EnvVar {
        name: "NETWORK_CIDR".into(),
        value: Some("10.0.0.0/24".into()),
        ..Default::default()
    });
    extras
        .labels
        .insert("sidecar.samplecrd.k8s.io/network".into(), "net1".into());
    let pod = json!({"metadata": {}, "spec": {"containers": [{"name": "app"}]}});
    let template = default_template();
    let Decision::Inject(p) = plan(&PodView::read(&pod), &template, &extras).unwrap() else {
        panic!()
    };
    let mut out = pod.clone();
    json_patch::patch(&mut out, &jsonpatch::render(&p, &PodView::read(&pod)).unwrap()).unwrap();
    // The template's own env first, the Network's after it.
    let env: Vec<&str> = out["spec"]["initContainers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(env, ["APP_PORT", "LOG_LEVEL", "NETWORK_CIDR"]);
    assert_eq!(out["metadata"]["labels"]["sidecar.samplecrd.k8s.io/network"], "net1");
}

#[test]
fn wrong_pod_shapes_are_errors_not_panics() {
    for pod in [
        json!("a string"),
        json!({"spec": []}),
        json!({"spec": {"containers": {}}}),
        json!({"metadata": {"annotations": []}}),
    ] {
        assert!(
            plan(&PodView::read(&pod), &default_template(), &Extras::default()).is_err(),
            "{pod}"
        );
    }
}

#[test]
fn strategic_patch_holds_only_additions_keyed_for_merge() {
    let pod = fixture_pod("replicaset-generatename-init-volumes.json");
    let t = template(
        "nativeSidecar: true\ncontainers:\n- name: proxy\n  image: p\nvolumes:\n- {name: certs, emptyDir: {}}\nvolumeMounts:\n- {name: certs, mountPath: /etc/certs}\n",
    );
    let Decision::Inject(p) = plan(&PodView::read(&pod), &t, &Extras::default()).unwrap() else {
        panic!()
    };
    let smp = strategic::render(&p, &PodView::read(&pod)).unwrap();
    assert_eq!(names(&smp["spec"]["initContainers"]), ["proxy"]);
    assert_eq!(
        names(&smp["spec"]["$setElementOrder/initContainers"]),
        ["proxy", "init-db"]
    );
    // Mount-only entries name the container and add under its merge key; where the
    // container already had mounts, their order is pinned so ours go last.
    assert_eq!(
        smp["spec"]["containers"],
        json!([
            {"name": "web",
             "$setElementOrder/volumeMounts": [
                {"mountPath": "/var/cache/nginx"},
                {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                {"mountPath": "/etc/certs"}],
             "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs"}]},
            {"name": "metrics",
             "$setElementOrder/volumeMounts": [
                {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                {"mountPath": "/etc/certs"}],
             "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs"}]}
        ])
    );
    assert_eq!(names(&smp["spec"]["$setElementOrder/containers"]), ["web", "metrics"]);
    assert_eq!(
        names(&smp["spec"]["$setElementOrder/volumes"]),
        ["cache", "config", "kube-api-access-rxspb", "certs"]
    );
    assert!(smp["metadata"]["annotations"][STATUS_ANNOTATION].is_string());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = String> {
        // Keys with the characters JSON Pointer must escape, and the status key itself.
        prop_oneof![
            "[a-z]{1,6}",
            "[a-z]{1,3}/[a-z~]{1,4}",
            "[a-z~/]{1,8}",
            Just("kubectl.kubernetes.io/last-applied-configuration".to_string()),
        ]
    }

    fn named_list(prefix: &'static str) -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            Just(Some(json!([]))),
            prop::collection::vec("[a-z]{1,5}", 1..4).prop_map(move |names| {
                let mut seen = std::collections::BTreeSet::new();
                Some(Value::Array(
                    names
                        .into_iter()
                        .filter(|n| seen.insert(n.clone()))
                        .map(|n| json!({"name": format!("{prefix}{n}"), "image": "busybox"}))
                        .collect(),
                ))
            }),
        ]
    }

    fn map() -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            prop::collection::btree_map(key(), "[ -~]{0,12}", 0..5)
                .prop_map(|m| Some(serde_json::to_value(m).unwrap())),
        ]
    }

    prop_compose! {
        fn arbitrary_pod()(
            has_metadata in any::<bool>(),
            annotations in map(),
            labels in map(),
            generate_name in any::<bool>(),
            has_spec in any::<bool>(),
            containers in named_list("app-"),
            init_containers in named_list("init-"),
            volumes in named_list("vol-"),
            native in prop_oneof![Just(None), Just(Some("true")), Just(Some("false"))],
            restart_policy in prop_oneof![Just(None), Just(Some("Always")), Just(Some("OnFailure")), Just(Some("Never"))],
        ) -> Value {
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod"});
            if has_metadata || native.is_some() {
                let mut metadata = json!({});
                if generate_name { metadata["generateName"] = json!("web-"); } else { metadata["name"] = json!("p"); }
                if let Some(a) = annotations { metadata["annotations"] = a; }
                if let Some(n) = native {
                    if !metadata["annotations"].is_object() { metadata["annotations"] = json!({}); }
                    metadata["annotations"][NATIVE_SIDECAR_ANNOTATION] = json!(n);
                }
                if let Some(l) = labels { metadata["labels"] = l; }
                pod["metadata"] = metadata;
            }
            if has_spec {
                let mut spec = json!({});
                if let Some(c) = containers { spec["containers"] = c; }
                if let Some(c) = init_containers { spec["initContainers"] = c; }
                if let Some(policy) = restart_policy { spec["restartPolicy"] = json!(policy); }
                if let Some(v) = volumes {
                    // Volumes need a source to be valid; give each an emptyDir.
                    let v = match v { Value::Array(items) => Value::Array(items.into_iter().map(|mut i| {
                        i.as_object_mut().unwrap().remove("image");
                        i["emptyDir"] = json!({});
                        i
                    }).collect()), other => other };
                    spec["volumes"] = v;
                }
                pod["spec"] = spec;
            }
            pod
        }
    }

    /// Every leaf of `before` is still in `after` at the same place, except that list
    /// entries may have shifted right (prepended init containers) — so lists are checked
    /// by containment of each original entry, in order.
    fn nothing_lost(before: &Value, after: &Value) -> bool {
        match (before, after) {
            (Value::Object(b), Value::Object(a)) => b.iter().all(|(k, bv)| match a.get(k) {
                Some(av) => bv.is_null() || nothing_lost(bv, av),
                None => false,
            }),
            (Value::Array(b), Value::Array(a)) => {
                let mut rest = a.iter();
                b.iter().all(|bv| rest.any(|av| nothing_lost(bv, av)))
            }
            (b, a) => b == a,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn patch_applies_keeps_everything_and_is_idempotent(pod in arbitrary_pod(), classic in any::<bool>()) {
            // The default adds no volume; `classic` does, so both shapes of template are run.
            let t = if classic { classic_template() } else { default_template() };
            let has_containers = pod.pointer("/spec/containers").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
            if !has_containers {
                let refused = matches!(plan(&PodView::read(&pod), &t, &Extras::default()), Err(InjectError::NoContainers { .. }));
                prop_assert!(refused, "a Pod without containers must be refused:\n{pod:#}");
                return Ok(());
            }
            let Decision::Inject(plan) = plan(&PodView::read(&pod), &t, &Extras::default()).unwrap() else {
                return Err(TestCaseError::fail("fresh Pod must be injected"));
            };
            let patch = jsonpatch::render(&plan, &PodView::read(&pod)).unwrap();
            let mut out = pod.clone();
            json_patch::patch(&mut out, &patch).map_err(|e| TestCaseError::fail(format!("{e}: {patch:?}")))?;
            prop_assert!(nothing_lost(&pod, &out), "lost a field:\n{pod:#}\n->\n{out:#}");
            // The annotation decides; without it, the template: `classic` keeps the seed's
            // regular sidecar, the default is native.
            let annotation = pod.pointer("/metadata/annotations/sidecar.samplecrd.k8s.io~1native-sidecar");
            let native = annotation.and_then(Value::as_str).map_or(!classic, |value| value == "true");
            prop_assert_eq!(plan.status.native_sidecar, native, "{:#}", pod);
            serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(out.clone())
                .map_err(|e| TestCaseError::fail(format!("not a Pod: {e}")))?;
            let again = super::plan(&PodView::read(&out), &t, &Extras::default()).unwrap();
            let skipped = matches!(again, Decision::Skip(Skip::AlreadyInjected { .. }));
            prop_assert!(skipped, "second pass was not a skip: {:?}", again);
        }
    }
}
