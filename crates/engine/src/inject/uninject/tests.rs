use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::inject::{Decision, Extras, PodView, jsonpatch, plan};
use crate::template::{Template, TemplateSet};

/// Templates that add every kind of thing the status records.
fn templates() -> Vec<Template> {
    vec![
        TemplateSet::embedded().get("config").unwrap().as_ref().clone(),
        Template::parse(
            "config",
            "initContainers:\n- {name: setup, image: busybox}\ncontainers:\n- {name: proxy, image: envoy}\nvolumes:\n- {name: certs, emptyDir: {}}\nvolumeMounts:\n- {name: certs, mountPath: /etc/certs}\nimagePullSecrets:\n- name: registry\n",
            crate::template::KubeVersion::NEWEST,
        )
        .unwrap(),
        Template::parse(
            "native",
            "nativeSidecar: true\ncontainers:\n- {name: proxy, image: envoy}\nvolumes:\n- {name: certs, emptyDir: {}}\nvolumeMounts:\n- {name: certs, mountPath: /etc/certs}\n",
            crate::template::KubeVersion::NEWEST,
        )
        .unwrap(),
        Template::parse("overrides", crate::template::overrides::tests::EXAMPLE, crate::template::KubeVersion::NEWEST).unwrap(),
        TemplateSet::embedded().get("classic").unwrap().as_ref().clone(),
    ]
}

fn inject(pod: &Value, template: &Template) -> Value {
    let view = PodView::read(pod);
    let Decision::Inject(plan) = plan(&view, template, &Extras::default()).unwrap() else {
        panic!("expected an injection of {pod}")
    };
    let mut out = pod.clone();
    json_patch::patch(&mut out, &jsonpatch::render(&plan, &view).unwrap()).unwrap();
    out
}

fn uninject(pod: &Value) -> Value {
    let removal = removal(pod).unwrap().expect("a status annotation");
    assert!(removal.missing.is_empty(), "{:?}", removal.missing);
    let mut out = pod.clone();
    json_patch::patch(&mut out, &removal.patch).unwrap_or_else(|e| panic!("{e}: {:?} on {pod}", removal.patch));
    out
}

#[test]
fn a_pod_without_status_is_not_touched_and_a_bad_status_is_named() {
    assert_eq!(
        removal(&json!({"spec": {"containers": [{"name": "a"}]}})).unwrap(),
        None
    );
    let err = removal(&json!({"metadata": {"annotations": {STATUS_ANNOTATION: "{oops"}}}))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!("annotation `{STATUS_ANNOTATION}`: expected the JSON the injector writes, found \"{{oops\"")
    );
}

#[test]
fn only_what_the_status_records_is_removed() {
    let status = json!({"template": "config", "revision": "1", "containers": ["envoy"], "initContainers": [],
                        "volumes": ["envoy-conf"], "imagePullSecrets": [], "nativeSidecar": false,
                        "volumeMounts": [{"container": "app", "mountPath": "/etc/envoy"}]});
    let pod = json!({
        "metadata": {"annotations": {STATUS_ANNOTATION: status.to_string(), "mine": "x"},
                     "labels": {REVISION_LABEL: "1", "app": "web"}},
        "spec": {
            "containers": [
                {"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "envoy-conf", "mountPath": "/etc/envoy"}]},
                {"name": "envoy"},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "envoy-conf", "configMap": {"name": "envoy"}}],
            "imagePullSecrets": [{"name": "registry"}],
        },
    });
    assert_eq!(
        uninject(&pod),
        json!({
            "metadata": {"annotations": {"mine": "x"}, "labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "imagePullSecrets": [{"name": "registry"}],
            },
        })
    );
    // What the user removed by hand since is named, the rest still taken out.
    let mut edited = pod.clone();
    edited["spec"]["containers"].as_array_mut().unwrap().pop();
    let removal = removal(&edited).unwrap().unwrap();
    assert_eq!(removal.missing, ["containers entry `envoy`"]);
}

#[test]
fn inject_then_uninject_gives_back_overrides_native_sidecars_and_all() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "web", "annotations": {
                         "sidecar.samplecrd.k8s.io/override.cpu-request": "1",
                         "sidecar.samplecrd.k8s.io/override.log-level": "debug"}},
                     "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    let plain = {
        let mut plain = pod.clone();
        plain["metadata"].as_object_mut().unwrap().remove("annotations");
        plain
    };
    for template in templates() {
        let pod = if template.overrides.is_empty() { &plain } else { &pod };
        let injected = inject(pod, &template);
        assert_ne!(&injected, pod);
        assert_eq!(&uninject(&injected), pod, "template {}", template.name);
    }
}

#[test]
fn a_template_volume_the_pod_already_had_stays_and_only_the_mounts_go() {
    let pod = json!({"spec": {"containers": [{"name": "app"}], "volumes": [{"name": "certs", "emptyDir": {}}]}});
    let template = &templates()[1];
    let injected = inject(&pod, template);
    assert_eq!(injected["spec"]["volumes"].as_array().unwrap().len(), 1, "{injected}");
    assert_eq!(
        injected["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        "/etc/certs"
    );
    assert_eq!(uninject(&injected), pod);
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9]{0,5}".prop_map(|n| format!("u-{n}"))
}

/// A list field that is absent or holds 1..=max entries (the API server keeps no empty
/// list: `[]` and absent are the same Pod to it).
fn maybe_list(entries: impl Strategy<Value = Value>, max: usize) -> impl Strategy<Value = Option<Value>> {
    proptest::option::of(proptest::collection::vec(entries, 1..=max).prop_map(|items| {
        // Names unique, as the API server requires.
        let mut seen = std::collections::BTreeSet::new();
        Value::Array(
            items
                .into_iter()
                .filter(|i| seen.insert(i["name"].as_str().unwrap_or_default().to_string()))
                .collect(),
        )
    }))
}

fn container() -> impl Strategy<Value = Value> {
    let mount = (name(), "/[a-z]{1,6}").prop_map(|(name, path)| json!({"name": name, "mountPath": path}));
    (name(), maybe_list(mount, 3)).prop_map(|(name, mounts)| {
        let mut c = json!({"name": name, "image": "app"});
        if let Some(mounts) = mounts {
            // One mount per path, as the API server requires.
            let mut paths = std::collections::BTreeSet::new();
            let unique: Vec<Value> = mounts
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| paths.insert(m["mountPath"].to_string()))
                .cloned()
                .collect();
            c["volumeMounts"] = Value::Array(unique);
        }
        c
    })
}

fn pod() -> impl Strategy<Value = Value> {
    let named = || name().prop_map(|name| json!({"name": name, "emptyDir": {}}));
    let dict = || proptest::option::of(proptest::collection::btree_map("[a-z]{1,4}", "[a-z]{0,4}", 1..3));
    (
        maybe_list(container(), 3).prop_filter("a Pod has containers", Option::is_some),
        maybe_list(container(), 2),
        maybe_list(named(), 3),
        maybe_list(name().prop_map(|name| json!({"name": name})), 2),
        dict(),
        dict(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(containers, inits, volumes, secrets, annotations, labels, named, shares_volume)| {
                let mut spec = serde_json::Map::new();
                for (key, value) in [
                    ("containers", containers),
                    ("initContainers", inits),
                    ("volumes", volumes),
                    ("imagePullSecrets", secrets),
                ] {
                    if let Some(value) = value {
                        spec.insert(key.to_string(), value);
                    }
                }
                if shares_volume {
                    // The templates' own volume, already there: not added, but mounted.
                    let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
                    volumes
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "certs", "emptyDir": {}}));
                }
                let mut metadata = serde_json::Map::new();
                if named {
                    metadata.insert("name".into(), json!("p"));
                }
                if let Some(a) = annotations {
                    metadata.insert("annotations".into(), json!(a));
                }
                if let Some(l) = labels {
                    metadata.insert("labels".into(), json!(l));
                }
                let mut pod = json!({"spec": spec});
                if !metadata.is_empty() {
                    pod["metadata"] = Value::Object(metadata);
                }
                pod
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// `inject | uninject` gives back the Pod, whatever it already had of its own.
    #[test]
    fn uninject_undoes_inject(pod in pod(), which in 0usize..5) {
        let template = &templates()[which];
        let injected = inject(&pod, template);
        prop_assert_eq!(uninject(&injected), pod);
    }
}

#[test]
fn metadata_the_injection_emptied_goes_unless_something_else_is_in_it() {
    let template = &templates()[0];
    for pod in [
        json!({"spec": {"containers": [{"name": "app"}]}}),
        json!({"metadata": {"ownerReferences": [{"name": "rs"}]}, "spec": {"containers": [{"name": "app"}]}}),
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app"}]}}),
    ] {
        assert_eq!(uninject(&inject(&pod, template)), pod);
    }
}
