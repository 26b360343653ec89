use serde_json::{Value, json};

use super::*;
use crate::inject::{Decision, Extras, InjectError, InjectionStatus, PodView, STATUS_ANNOTATION, jsonpatch, plan};
use crate::template::overrides::tests::EXAMPLE;

fn template() -> Template {
    Template::parse("config", EXAMPLE, crate::template::KubeVersion::NEWEST).unwrap()
}

fn pod(overrides: Value) -> Value {
    let mut annotations = serde_json::Map::new();
    for (name, value) in overrides.as_object().unwrap() {
        annotations.insert(format!("{OVERRIDE_PREFIX}{name}"), value.clone());
    }
    // Burstable: its sidecar keeps the resources the template and the overrides give it
    // (a BestEffort Pod's goes in without cpu and memory, `inject::resources`).
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "annotations": annotations},
           "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "50m"}}}]}})
}

/// Plans and applies; the patched Pod must read back as a Kubernetes Pod.
fn injected(pod: &Value, template: &Template, extras: &Extras) -> Result<(Value, InjectionStatus), InjectError> {
    let view = PodView::read(pod);
    let Decision::Inject(plan) = plan(&view, template, extras)? else {
        panic!("expected an injection")
    };
    let mut out = pod.clone();
    json_patch::patch(&mut out, &jsonpatch::render(&plan, &view).unwrap()).unwrap();
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(out.clone()).unwrap();
    let status = serde_json::from_str(out["metadata"]["annotations"][STATUS_ANNOTATION].as_str().unwrap()).unwrap();
    Ok((out, status))
}

fn denied(pod: &Value) -> String {
    match injected(pod, &template(), &Extras::default()) {
        Err(err @ InjectError::Override(_)) => err.to_string(),
        other => panic!("expected an override refusal, got {other:?}"),
    }
}

#[test]
fn without_override_annotations_the_template_is_copied_as_prepared() {
    let template = template();
    let burstable = json!({"metadata": {"annotations": {"other": "x"}},
                           "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": "1"}}}]}});
    let best_effort = json!({"metadata": {"annotations": {"other": "x"}}, "spec": {"containers": [{"name": "app"}]}});
    // The default is native: the sidecar's prepared forms are the native ones.
    let (best_effort_form, best_effort_json) = template.prepared.best_effort.native_containers[0].as_ref().unwrap();
    for (pod, prepared) in [
        (burstable, template.prepared.native_containers_json[0].get()),
        (best_effort, best_effort_json.get()),
    ] {
        let view = PodView::read(&pod);
        let Decision::Inject(plan) = plan(&view, &template, &Extras::default()).unwrap() else {
            panic!("expected an injection")
        };
        // The very bytes prepared at load time, not a re-serialised copy.
        assert_eq!(plan.init_containers[0].json().unwrap().get(), prepared);
        let status = &plan.annotations[STATUS_ANNOTATION];
        assert!(!status.contains("overrides"), "{status}");
        assert!(!status.contains("volumeMounts"), "{status}");
    }
    assert_eq!(best_effort_form.resources, None, "cpu and memory were all it had");
}

#[test]
fn a_template_s_app_mounts_are_recorded_only_for_a_volume_the_pod_already_had() {
    let template = Template::parse(
        "config",
        "containers: [{name: proxy, image: envoy}]\nvolumes: [{name: certs, emptyDir: {}}]\nvolumeMounts: [{name: certs, mountPath: /etc/certs}]\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let plain = json!({"spec": {"containers": [{"name": "app"}]}});
    let (_, status) = injected(&plain, &template, &Extras::default()).unwrap();
    assert_eq!(status.volumes, ["certs"]);
    assert!(
        status.volume_mounts.is_empty(),
        "the mounts of an added volume need no record"
    );
    let (out, _) = injected(&plain, &template, &Extras::default()).unwrap();
    let text = out["metadata"]["annotations"][STATUS_ANNOTATION].as_str().unwrap();
    assert!(!text.contains("volumeMounts"), "{text}");

    let had_it = json!({"spec": {"containers": [{"name": "app"}], "volumes": [{"name": "certs", "emptyDir": {}}]}});
    let (_, status) = injected(&had_it, &template, &Extras::default()).unwrap();
    assert!(status.volumes.is_empty());
    assert_eq!(
        status.volume_mounts,
        [crate::inject::MountRecord {
            container: "app".into(),
            mount_path: "/etc/certs".into()
        }]
    );
}

#[test]
fn three_overrides_land_where_the_template_says_and_are_recorded() {
    let asked = pod(json!({"cpu-request": "500m", "log-level": "debug", "image-tag": "v1.32.0"}));
    let (out, status) = injected(&asked, &template(), &Extras::default()).unwrap();
    let envoy = &out["spec"]["initContainers"][0];
    assert_eq!(envoy["name"], "envoy");
    assert_eq!(envoy["resources"]["requests"]["cpu"], "500m");
    assert_eq!(
        envoy["resources"]["requests"]["memory"], "64Mi",
        "the rest of the template is kept"
    );
    assert_eq!(envoy["resources"]["limits"]["memory"], "512Mi");
    assert_eq!(envoy["env"], json!([{"name": "LOG_LEVEL", "value": "debug"}]));
    assert_eq!(envoy["image"], "envoyproxy/envoy:v1.32.0");
    assert_eq!(
        status.overrides,
        [
            ("cpu-request", "500m"),
            ("image-tag", "v1.32.0"),
            ("log-level", "debug")
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into()
    );
    assert_eq!(
        out["metadata"]["annotations"][format!("{OVERRIDE_PREFIX}cpu-request")],
        "500m",
        "the Pod's own annotations stay"
    );
}

#[test]
fn a_value_out_of_bounds_is_denied_naming_annotation_value_and_bound() {
    assert_eq!(
        denied(&pod(json!({"cpu-request": "8"}))),
        r#"override.cpu-request: "8" exceeds max "2" of template "config""#
    );
    assert_eq!(
        denied(&pod(json!({"memory-limit": "32Mi"}))),
        r#"override.memory-limit: "32Mi" is below min "64Mi" of template "config""#
    );
    assert_eq!(
        denied(&pod(json!({"log-level": "trace"}))),
        r#"override.log-level: "trace" is not one of "debug", "info", "warn", "error" of template "config""#
    );
    assert_eq!(
        denied(&pod(json!({"image-tag": "latest"}))),
        r#"override.image-tag: "latest" is not one of "v1.31.2", "v1.32.0" of template "config""#
    );
}

#[test]
fn wrong_types_and_undeclared_overrides_are_denied_each_named() {
    let message = denied(&pod(json!({"cpu-request": "lots"})));
    assert!(
        message.starts_with(r#"override.cpu-request: "lots" is not a quantity, which resources.requests.cpu of container `envoy` in template "config" takes: "#),
        "{message}"
    );
    assert_eq!(
        denied(&pod(json!({"cpu-request": 1}))),
        "override.cpu-request: 1 is not a string: quote the annotation's value"
    );
    assert_eq!(
        denied(&pod(json!({"cpu": "1"}))),
        r#"override.cpu: "1" is not an override of template "config", which declares "cpu-request", "image-tag", "log-level", "memory-limit""#
    );
    let plain = Template::parse(
        "config",
        "containers: [{name: envoy, image: envoy}]\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let err = injected(&pod(json!({"cpu-request": "1"})), &plain, &Extras::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"override.cpu-request: "1" is not an override of template "config", which declares none"#
    );
    // Every refusal at once, in the Pod's order; one good override does not half-apply.
    let both = denied(&pod(
        json!({"cpu-request": "8", "log-level": "info", "memory-limit": "2Gi"}),
    ));
    assert_eq!(
        both,
        r#"override.cpu-request: "8" exceeds max "2" of template "config"; override.memory-limit: "2Gi" exceeds max "1Gi" of template "config""#
    );
}

#[test]
fn overrides_apply_to_native_sidecars_and_the_injectors_env_wins() {
    let native = Template::parse(
        "config",
        &format!("nativeSidecar: true\n{EXAMPLE}"),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let (out, status) = injected(&pod(json!({"memory-limit": "256Mi"})), &native, &Extras::default()).unwrap();
    let envoy = &out["spec"]["initContainers"][0];
    assert_eq!(envoy["restartPolicy"], "Always");
    assert_eq!(envoy["resources"]["limits"]["memory"], "256Mi");
    assert_eq!(status.overrides["memory-limit"], "256Mi");

    let extras = Extras {
        sidecar_env: vec![k8s_openapi::api::core::v1::EnvVar {
            name: "LOG_LEVEL".into(),
            value: Some("error".into()),
            value_from: None,
        }],
        ..Extras::default()
    };
    let (out, _) = injected(
        &pod(json!({"log-level": "debug", "cpu-request": "1"})),
        &template(),
        &extras,
    )
    .unwrap();
    let envoy = &out["spec"]["initContainers"][0];
    assert_eq!(envoy["env"], json!([{"name": "LOG_LEVEL", "value": "error"}]));
    assert_eq!(envoy["resources"]["requests"]["cpu"], "1");
}

#[test]
fn an_already_injected_pod_is_skipped_before_its_overrides_are_read() {
    let mut done = pod(json!({"cpu-request": "8"}));
    done["metadata"]["annotations"][STATUS_ANNOTATION] = json!("{}");
    let template = template();
    let decision = plan(&PodView::read(&done), &template, &Extras::default()).unwrap();
    assert!(matches!(decision, Decision::Skip(_)));
}
