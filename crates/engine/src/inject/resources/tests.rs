//! Each case of the rules on plain data: the Pod injected with the shipped default
//! template (sidecar `envoy`: requests cpu 100m, memory 64Mi; limits cpu 1, memory 256Mi)
//! or a small one, the patch applied, and the Pod level and the QoS class read back.

use serde_json::{Value, json};

use super::lists::Lists;
use super::qos::{self, QosClass};
use super::*;
use crate::inject::pod::PodView;
use crate::inject::{
    Decision, Extras, InjectError, InjectionStatus, NATIVE_SIDECAR_ANNOTATION, STATUS_ANNOTATION, jsonpatch, plan,
    strategic, uninject,
};
use crate::template::{DEFAULT_TEMPLATE, KubeVersion, Template, TemplateSet};

fn default_template() -> Template {
    TemplateSet::embedded().get(DEFAULT_TEMPLATE).unwrap().as_ref().clone()
}

fn template(text: &str) -> Template {
    Template::parse("config", text, KubeVersion::NEWEST).unwrap()
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": spec})
}

fn app(resources: Value) -> Value {
    json!({"name": "app", "image": "nginx", "resources": resources})
}

/// The plan's resources part, the injected Pod (the JSON Patch applied) and the patch.
fn inject(pod: &Value, template: &Template) -> (Resourcing, Value) {
    let view = PodView::read(pod);
    let Decision::Inject(plan) = plan(&view, template, &Extras::default()).unwrap() else {
        panic!("expected an injection")
    };
    let mut out = pod.clone();
    let patch = jsonpatch::render(&plan, &view).unwrap();
    json_patch::patch(&mut out, &patch).unwrap_or_else(|e| panic!("{patch:?} does not apply: {e}"));
    // What admission sends is what applies.
    let ops = jsonpatch::render_ops(&plan, &view).unwrap();
    assert_eq!(
        serde_json::to_value(&ops).unwrap(),
        serde_json::to_value(&patch).unwrap()
    );
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(out.clone()).unwrap();
    (plan.resources.clone(), out)
}

fn refused(pod: &Value, template: &Template) -> InjectError {
    plan(&PodView::read(pod), template, &Extras::default()).unwrap_err()
}

/// The QoS class of a Pod as the API server computes it (defaulting first).
fn class(pod: &Value) -> QosClass {
    let view = PodView::read(pod);
    let view = view.check().unwrap();
    let lists = |list: crate::inject::pod::List<'_, crate::inject::pod::Container<'_>>| -> Vec<Lists> {
        list.items()
            .map(|c| Lists::of_pod(&c.resource_lists("c").unwrap()))
            .collect()
    };
    let (regular, inits) = (lists(view.containers), lists(view.init_containers));
    let restartable: Vec<bool> = view.init_containers.items().map(|c| c.restartable()).collect();
    let before = aggregate::aggregate(
        regular.iter().map(|l| &l.requests),
        restartable.iter().copied().zip(inits.iter().map(|l| &l.requests)),
    );
    match view.pod_resources().unwrap() {
        Some(pod) => {
            let held = pod_level::defaulted(&pod, &before);
            qos::of_pod_level(
                &pod_level::Defaulted::amounts(&held.requests),
                &pod_level::Defaulted::amounts(&held.limits),
            )
        }
        None => qos::of_containers(regular.iter().chain(&inits)),
    }
}

fn envoy(out: &Value) -> &Value {
    let containers = out["spec"]["containers"].as_array().unwrap();
    let inits = out["spec"]["initContainers"].as_array().into_iter().flatten();
    containers.iter().chain(inits).find(|c| c["name"] == "envoy").unwrap()
}

fn lines(resourcing: &Resourcing) -> Vec<String> {
    resourcing.describe()
}

#[test]
fn pod_level_requests_are_raised_by_the_sidecar_s() {
    // The issue's second Pod: refused before with "must be greater than or equal to
    // aggregate container requests of 250m".
    let pod = pod(json!({"resources": {"requests": {"cpu": "200m"}},
                         "containers": [app(json!({"requests": {"cpu": "150m"}}))]}));
    let (resourcing, out) = inject(&pod, &default_template());
    assert_eq!(out["spec"]["resources"], json!({"requests": {"cpu": "300m"}}));
    assert_eq!(
        lines(&resourcing),
        [
            "pod-level cpu request 200m → 300m: the sidecar's 100m added",
            "QoS Burstable kept: the added containers' resources as the template sets them"
        ]
    );
    assert_eq!(
        envoy(&out)["resources"]["requests"]["cpu"],
        "100m",
        "a Burstable Pod's sidecar is as written"
    );
    assert_eq!(class(&out), class(&pod));
}

#[test]
fn pod_level_limits_alone_get_their_defaulted_requests_written_and_raised() {
    // The issue's first Pod: refused before with "must be less than or equal to pod
    // limits of 500m" (the sidecar's limit 1).
    let pod = pod(json!({"resources": {"limits": {"cpu": "500m"}}, "containers": [app(json!({}))]}));
    let (resourcing, out) = inject(&pod, &default_template());
    // The API server defaults the request to the limit (no container asks for cpu).
    assert_eq!(
        out["spec"]["resources"],
        json!({"limits": {"cpu": "1500m"}, "requests": {"cpu": "600m"}})
    );
    assert_eq!(
        lines(&resourcing)[..2],
        [
            "pod-level cpu request 500m (defaulted to its limit) → 600m: the sidecar's 100m added",
            "pod-level cpu limit 500m → 1500m: the sidecar's limit 1 added",
        ]
    );
    assert_eq!(class(&out), QosClass::Burstable);
    assert_eq!(class(&out), class(&pod));

    // Where a container asks for it, the default is the containers' aggregate request.
    let asks = self::pod(json!({"resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                                "containers": [app(json!({"requests": {"cpu": "150m"}}))]}));
    let (resourcing, out) = inject(&asks, &default_template());
    assert_eq!(
        out["spec"]["resources"],
        json!({"limits": {"cpu": "1500m", "memory": "1280Mi"}, "requests": {"cpu": "250m", "memory": "1088Mi"}})
    );
    assert_eq!(
        lines(&resourcing)[0],
        "pod-level cpu request 150m (defaulted to the containers' requests) → 250m: the sidecar's 100m added"
    );
    assert_eq!(class(&out), class(&asks));
}

#[test]
fn pod_level_requests_and_limits_are_raised_together() {
    let pod = pod(json!({"resources": {"requests": {"cpu": "200m", "memory": "1Gi"},
                                       "limits": {"cpu": "2", "memory": "2Gi"}},
                         "containers": [app(json!({"requests": {"cpu": "150m", "memory": "512Mi"},
                                                   "limits": {"memory": "1Gi"}}))]}));
    let (_, out) = inject(&pod, &default_template());
    assert_eq!(
        out["spec"]["resources"],
        json!({"requests": {"cpu": "300m", "memory": "1088Mi"}, "limits": {"cpu": "3", "memory": "2304Mi"}})
    );
    assert_eq!(class(&out), class(&pod));
}

#[test]
fn without_container_resources_only_the_pod_level_counts() {
    let pod = pod(json!({"resources": {"requests": {"cpu": "1", "memory": "100M"}},
                         "containers": [app(Value::Null)]}));
    let (_, out) = inject(&pod, &default_template());
    // A decimal value stays decimal: 100M + 64Mi, in bytes.
    assert_eq!(
        out["spec"]["resources"],
        json!({"requests": {"cpu": "1100m", "memory": "167108864"}})
    );
}

#[test]
fn a_guaranteed_pod_s_sidecar_gets_its_requests_set_to_its_limits() {
    let pod = pod(json!({"containers": [app(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))]}));
    assert_eq!(class(&pod), QosClass::Guaranteed);
    let (resourcing, out) = inject(&pod, &default_template());
    assert_eq!(
        envoy(&out)["resources"],
        json!({"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}})
    );
    assert_eq!(
        lines(&resourcing),
        [
            "QoS Guaranteed kept: envoy's cpu request set to its limit 1",
            "QoS Guaranteed kept: envoy's memory request set to its limit 256Mi",
        ]
    );
    assert_eq!(out["spec"].get("resources"), None);
    assert_eq!(class(&out), QosClass::Guaranteed);

    // Only a request: the limit follows it.
    let requests_only = template(
        "containers:\n- name: proxy\n  image: envoy\n  resources: {requests: {cpu: 50m}, limits: {memory: 32Mi}}\n",
    );
    let (_, out) = inject(&pod, &requests_only);
    assert_eq!(
        out["spec"]["initContainers"][0]["resources"],
        json!({"requests": {"cpu": "50m"}, "limits": {"cpu": "50m", "memory": "32Mi"}})
    );
    assert_eq!(class(&out), QosClass::Guaranteed);
}

#[test]
fn a_guaranteed_pod_refuses_a_sidecar_without_cpu_or_memory() {
    let pod = pod(json!({"containers": [app(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))]}));
    let bare = template("containers:\n- name: proxy\n  image: envoy\n  resources: {limits: {cpu: 100m}}\n");
    assert_eq!(
        refused(&pod, &bare).to_string(),
        "template `config`: container `proxy` sets no memory request or limit, so the Guaranteed Pod would become Burstable; give it resources.limits.memory in the template"
    );
    // A template init container is held to it too.
    let init = template(
        "initContainers:\n- {name: setup, image: busybox}\ncontainers:\n- name: proxy\n  image: envoy\n  resources: {limits: {cpu: 100m, memory: 64Mi}}\n",
    );
    assert!(
        matches!(refused(&pod, &init), InjectError::GuaranteedLost { container, resource: "cpu", .. } if container == "setup")
    );
}

#[test]
fn a_guaranteed_pod_level_stays_equal_and_takes_a_sidecar_without_resources() {
    let pod = pod(json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}, "containers": [app(json!({}))]}));
    assert_eq!(class(&pod), QosClass::Guaranteed);
    let (resourcing, out) = inject(&pod, &default_template());
    assert_eq!(
        out["spec"]["resources"],
        json!({"limits": {"cpu": "2", "memory": "1280Mi"}, "requests": {"cpu": "2", "memory": "1280Mi"}})
    );
    assert_eq!(
        envoy(&out)["resources"]["requests"],
        json!({"cpu": "1", "memory": "256Mi"})
    );
    assert!(lines(&resourcing).contains(&String::from(
        "QoS Guaranteed kept: envoy's cpu request set to its limit 1"
    )));
    assert_eq!(class(&out), QosClass::Guaranteed);

    // The Pod level decides: a sidecar without resources is no fault.
    let bare = template("containers:\n- {name: proxy, image: envoy}\n");
    let (_, out) = inject(&pod, &bare);
    assert_eq!(
        out["spec"]["resources"],
        json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}})
    );
    assert_eq!(class(&out), QosClass::Guaranteed);

    // An init container the template adds raises the requests by what it adds to the
    // aggregate (1500m, 64Mi: it asks its limits), and the limits with them.
    let big_init = template(
        "initContainers:\n- name: setup\n  image: busybox\n  resources: {limits: {cpu: 1500m, memory: 64Mi}}\ncontainers:\n- {name: proxy, image: envoy}\n",
    );
    let (resourcing, out) = inject(&pod, &big_init);
    assert_eq!(
        out["spec"]["resources"],
        json!({"limits": {"cpu": "2500m", "memory": "1088Mi"}, "requests": {"cpu": "2500m", "memory": "1088Mi"}})
    );
    assert!(
        lines(&resourcing).contains(&String::from(
            "pod-level cpu limit 1 → 2500m: the sidecars set none; raised to setup's own limit 1500m; raised to the request 2500m"
        )),
        "{:?}",
        lines(&resourcing)
    );
    assert_eq!(class(&out), QosClass::Guaranteed);
}

#[test]
fn a_best_effort_pod_s_sidecar_goes_in_without_cpu_and_memory() {
    let pod = pod(json!({"containers": [{"name": "app", "image": "nginx"}]}));
    assert_eq!(class(&pod), QosClass::BestEffort);
    let (resourcing, out) = inject(&pod, &default_template());
    assert_eq!(envoy(&out).get("resources"), None);
    assert_eq!(
        lines(&resourcing),
        ["QoS BestEffort kept: envoy goes in without its cpu and memory requests and limits"]
    );
    assert_eq!(class(&out), QosClass::BestEffort);

    // Other resources stay.
    let storage = template(
        "containers:\n- name: proxy\n  image: envoy\n  resources: {requests: {cpu: 10m, ephemeral-storage: 1Gi}}\n",
    );
    let (_, out) = inject(&pod, &storage);
    assert_eq!(
        out["spec"]["initContainers"][0]["resources"],
        json!({"requests": {"ephemeral-storage": "1Gi"}})
    );

    // `spec.resources: {}` makes the API server take the class from the Pod level, which
    // names nothing: BestEffort, whatever the containers ask.
    let empty = self::pod(json!({"resources": {},
                                 "containers": [app(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))]}));
    assert_eq!(class(&empty), QosClass::BestEffort);
    let (resourcing, out) = inject(&empty, &default_template());
    assert_eq!(envoy(&out).get("resources"), None);
    assert_eq!(resourcing.pod_level, None);
    assert_eq!(out["spec"]["resources"], json!({}));
}

#[test]
fn a_burstable_pod_gets_the_sidecar_as_written() {
    let pod = pod(json!({"containers": [app(json!({"requests": {"memory": "1Gi"}}))]}));
    let template = default_template();
    let (resourcing, out) = inject(&pod, &template);
    assert!(resourcing.changed.is_empty() && resourcing.pod_level.is_none());
    assert_eq!(
        envoy(&out)["resources"],
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}})
    );
    let view = PodView::read(&pod);
    let Decision::Inject(planned) = plan(&view, &template, &Extras::default()).unwrap() else {
        panic!()
    };
    assert_eq!(
        planned.init_containers[0].json().unwrap().get(),
        template.prepared.native_containers_json[0].get(),
        "the bytes prepared at load"
    );
    assert!(!planned.annotations[STATUS_ANNOTATION].contains("podResources"));
}

#[test]
fn an_init_container_asking_more_than_the_pod_raises_the_request_by_the_difference() {
    let pod = pod(json!({"resources": {"requests": {"cpu": "200m"}},
                         "containers": [app(json!({"requests": {"cpu": "150m"}}))]}));
    let with_init = template(
        "initContainers:\n- name: setup\n  image: busybox\n  resources: {requests: {cpu: '2'}}\ncontainers:\n- name: proxy\n  image: envoy\n  resources: {requests: {cpu: 100m}}\n",
    );
    let (resourcing, out) = inject(&pod, &with_init);
    // The aggregate goes from 150m to max(150m + 100m, 2) = 2: 1850m more.
    assert_eq!(out["spec"]["resources"], json!({"requests": {"cpu": "2050m"}}));
    assert_eq!(
        lines(&resourcing)[0],
        "pod-level cpu request 200m → 2050m: the aggregate of the containers' requests goes from 150m to 2: an init container asks more than the containers running beside it"
    );

    // As native sidecars the sidecar runs beside the Pod's own init containers: a Pod
    // init container of 1 now needs 1 + 100m.
    let native = self::pod(json!({"resources": {"requests": {"cpu": "1"}},
                                  "initContainers": [{"name": "migrate", "image": "m",
                                                      "resources": {"requests": {"cpu": "1"}}}],
                                  "containers": [app(json!({"requests": {"cpu": "150m"}}))]}));
    let sidecar = "containers:\n- name: proxy\n  image: envoy\n  resources: {requests: {cpu: 100m}}\n";
    let (_, out) = inject(&native, &template(&format!("nativeSidecar: true\n{sidecar}")));
    assert_eq!(out["spec"]["resources"], json!({"requests": {"cpu": "1100m"}}));
    // As a regular container it does not: the aggregate stays 1.
    let (resourcing, out) = inject(&native, &template(&format!("nativeSidecar: false\n{sidecar}")));
    assert_eq!(out["spec"]["resources"], json!({"requests": {"cpu": "1"}}));
    assert_eq!(resourcing.pod_level, None);
}

#[test]
fn a_sidecar_without_a_limit_gets_the_room_it_asks_for() {
    let pod = pod(json!({"resources": {"limits": {"memory": "1Gi"}}, "containers": [app(json!({}))]}));
    let requests_only =
        template("containers:\n- name: proxy\n  image: envoy\n  resources: {requests: {cpu: 100m, memory: 64Mi}}\n");
    let (resourcing, out) = inject(&pod, &requests_only);
    assert_eq!(
        out["spec"]["resources"],
        json!({"limits": {"memory": "1088Mi"}, "requests": {"memory": "1088Mi"}})
    );
    assert!(
        lines(&resourcing).contains(&String::from(
            "pod-level memory limit 1Gi → 1088Mi: the sidecar's request 64Mi (it sets no memory limit) added"
        )),
        "{:?}",
        lines(&resourcing)
    );
    // cpu is not limited at the Pod level: it stays unset there.
    assert_eq!(class(&out), class(&pod));
}

#[test]
fn an_override_of_the_sidecar_s_resources_is_what_the_pod_level_counts() {
    let mut pod = pod(
        json!({"resources": {"requests": {"cpu": "200m"}, "limits": {"memory": "1Gi"}},
                             "containers": [app(json!({"requests": {"cpu": "150m"}}))]}),
    );
    pod["metadata"]["annotations"] = json!({
        "sidecar.samplecrd.k8s.io/override.cpu-request": "500m",
        "sidecar.samplecrd.k8s.io/override.memory-limit": "512Mi",
    });
    let (_, out) = inject(&pod, &default_template());
    assert_eq!(
        out["spec"]["resources"],
        json!({"requests": {"cpu": "700m", "memory": "1088Mi"}, "limits": {"memory": "1536Mi"}})
    );
    assert_eq!(envoy(&out)["resources"]["requests"]["cpu"], "500m");
    assert_eq!(envoy(&out)["resources"]["limits"]["memory"], "512Mi");

    // A Guaranteed Pod's sidecar asks its limit, whatever request the override sets.
    let mut guaranteed = self::pod(json!({"containers": [app(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))]}));
    guaranteed["metadata"]["annotations"] = json!({"sidecar.samplecrd.k8s.io/override.memory-limit": "128Mi"});
    let (_, out) = inject(&guaranteed, &default_template());
    assert_eq!(
        envoy(&out)["resources"],
        json!({"requests": {"cpu": "1", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}})
    );
}

#[test]
fn native_and_regular_sidecars_alike() {
    for native in ["true", "false"] {
        let mut pod = pod(
            json!({"resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "500m"}},
                                 "containers": [app(json!({"requests": {"cpu": "150m"}}))]}),
        );
        pod["metadata"]["annotations"] = json!({NATIVE_SIDECAR_ANNOTATION: native});
        let (_, out) = inject(&pod, &default_template());
        assert_eq!(
            out["spec"]["resources"],
            json!({"requests": {"cpu": "300m"}, "limits": {"cpu": "1500m"}}),
            "native {native}"
        );
        assert_eq!(envoy(&out)["restartPolicy"] == "Always", native == "true");
        assert_eq!(class(&out), class(&pod));

        let guaranteed = json!({"metadata": {"annotations": {NATIVE_SIDECAR_ANNOTATION: native}},
                                "spec": {"containers": [app(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))]}});
        let (_, out) = inject(&guaranteed, &default_template());
        assert_eq!(
            envoy(&out)["resources"]["requests"]["memory"],
            "256Mi",
            "native {native}"
        );
        assert_eq!(class(&out), QosClass::Guaranteed);

        let best_effort = json!({"metadata": {"annotations": {NATIVE_SIDECAR_ANNOTATION: native}},
                                 "spec": {"containers": [{"name": "app"}]}});
        let (_, out) = inject(&best_effort, &default_template());
        assert_eq!(envoy(&out).get("resources"), None, "native {native}");
        assert_eq!(class(&out), QosClass::BestEffort);
    }
}

#[test]
fn the_json_patch_sets_keys_of_every_shape() {
    let gpu = template(
        "containers:\n- name: proxy\n  image: envoy\n  resources:\n    requests: {cpu: 100m, example.com/gpu: '1', hugepages-2Mi: 2Mi}\n    limits: {cpu: '1', example.com/gpu: '1', hugepages-2Mi: 2Mi}\n",
    );
    let pod = pod(
        json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "4Mi"}},
                         "containers": [app(json!({"requests": {"cpu": "100m"}}))]}),
    );
    let view = PodView::read(&pod);
    let Decision::Inject(planned) = plan(&view, &gpu, &Extras::default()).unwrap() else {
        panic!()
    };
    let ops = serde_json::to_value(jsonpatch::render(&planned, &view).unwrap()).unwrap();
    let paths: Vec<&str> = ops
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap())
        .collect();
    // The Pod has no `requests`: the defaulted ones are added whole, with the raise.
    assert!(paths.contains(&"/spec/resources/requests"), "{paths:?}");
    assert!(paths.contains(&"/spec/resources/limits/cpu"), "{paths:?}");
    assert!(paths.contains(&"/spec/resources/limits/hugepages-2Mi"), "{paths:?}");
    let (_, out) = inject(&pod, &gpu);
    assert_eq!(
        out["spec"]["resources"],
        json!({"limits": {"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "6Mi"},
               "requests": {"cpu": "200m", "memory": "1Gi", "hugepages-2Mi": "6Mi"}})
    );

    // With `requests` there, each key is set on its own, escaped where it must be (the
    // API server takes only cpu, memory and hugepages at the Pod level: the pointer is
    // right whatever the name).
    let pod_gpu = self::pod(json!({"resources": {"requests": {"example.com/gpu": "1", "cpu": "1"}},
                                   "containers": [app(json!({"requests": {"cpu": "100m", "example.com/gpu": "1"},
                                                             "limits": {"example.com/gpu": "1"}}))]}));
    let view = PodView::read(&pod_gpu);
    let Decision::Inject(planned) = plan(&view, &gpu, &Extras::default()).unwrap() else {
        panic!()
    };
    let ops = serde_json::to_value(jsonpatch::render(&planned, &view).unwrap()).unwrap();
    let paths: Vec<&str> = ops
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/spec/resources/requests/example.com~1gpu"),
        "{paths:?}"
    );
    let (_, out) = inject(&pod_gpu, &gpu);
    assert_eq!(
        out["spec"]["resources"],
        json!({"requests": {"example.com/gpu": "2", "cpu": "1100m"}})
    );

    // A `null` map is replaced whole.
    let null = self::pod(json!({"resources": {"requests": null, "limits": {"cpu": "1"}},
                                "containers": [app(json!({}))]}));
    let (_, out) = inject(&null, &default_template());
    assert_eq!(
        out["spec"]["resources"],
        json!({"requests": {"cpu": "1100m"}, "limits": {"cpu": "2"}})
    );
}

#[test]
fn the_strategic_patch_writes_the_same_values() {
    let pod = pod(
        json!({"resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "200m"}},
                         "containers": [app(json!({"requests": {"cpu": "150m"}}))]}),
    );
    let template = default_template();
    let view = PodView::read(&pod);
    let Decision::Inject(planned) = plan(&view, &template, &Extras::default()).unwrap() else {
        panic!()
    };
    let patch = strategic::render(&planned, &view).unwrap();
    assert_eq!(
        patch["spec"]["resources"],
        json!({"requests": {"cpu": "300m"}, "limits": {"cpu": "1500m"}})
    );
}

#[test]
fn the_status_records_the_pod_s_own_and_uninject_puts_it_back() {
    let template = default_template();
    for spec in [
        json!({"resources": {"limits": {"cpu": "500m"}}, "containers": [app(json!({}))]}),
        json!({"resources": {"requests": {"cpu": 0.2, "memory": "1Gi"}, "limits": {"memory": 2147483648u64}},
               "containers": [app(json!({"requests": {"cpu": "150m"}}))]}),
        json!({"resources": {"requests": null, "limits": {"cpu": "1", "memory": "1Gi"}},
               "containers": [app(json!({}))]}),
    ] {
        let pod = pod(spec);
        let (_, out) = inject(&pod, &template);
        let status: InjectionStatus =
            serde_json::from_str(out["metadata"]["annotations"][STATUS_ANNOTATION].as_str().unwrap()).unwrap();
        let mut own = pod["spec"]["resources"].clone();
        own.as_object_mut()
            .unwrap()
            .retain(|k, _| k == "requests" || k == "limits");
        assert_eq!(status.pod_resources.as_ref(), Some(&own));
        let removal = uninject::removal(&out).unwrap().unwrap();
        let mut back = out.clone();
        json_patch::patch(&mut back, &removal.patch).unwrap();
        assert_eq!(back, pod, "{:#}", serde_json::to_value(&removal.patch).unwrap());
        assert_eq!(back.to_string(), pod.to_string(), "byte for byte");
    }
}

#[test]
fn wrong_types_and_values_are_named_by_their_field() {
    let template = default_template();
    for (spec, message) in [
        (
            json!({"resources": {"requests": ["cpu"]}, "containers": [app(json!({}))]}),
            "Pod field `spec.resources.requests`: expected an object, found an array",
        ),
        (
            json!({"resources": "big", "containers": [app(json!({}))]}),
            "Pod field `spec.resources`: expected an object, found a string",
        ),
        (
            json!({"containers": [app(json!({"limits": {"cpu": true}}))]}),
            "Pod field `spec.containers[0].resources.limits.cpu`: expected a quantity, found a boolean",
        ),
        (
            json!({"initContainers": [{"name": "i", "resources": {"requests": {"memory": "lots"}}}],
                   "containers": [app(json!({}))]}),
            "Pod field `spec.initContainers[0].resources.requests.memory`: expected a quantity (a number with an optional suffix: n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent such as e3), found \"lots\"",
        ),
    ] {
        assert_eq!(refused(&pod(spec), &template).to_string(), message);
    }
    // A number is a quantity, as the API server reads it.
    let (_, out) = inject(
        &pod(json!({"resources": {"requests": {"cpu": 0.5}}, "containers": [app(json!({"requests": {"cpu": 1}}))]})),
        &template,
    );
    assert_eq!(out["spec"]["resources"]["requests"]["cpu"], "600m");
}

#[test]
fn the_aggregate_is_the_api_server_s() {
    let amounts = |pairs: &[(&str, &str)]| -> lists::Amounts {
        pairs
            .iter()
            .map(|(r, q)| {
                (
                    r.to_string(),
                    crate::template::quantity::Quantity::parse(q).unwrap().amount(),
                )
            })
            .collect()
    };
    let app = amounts(&[("cpu", "150m"), ("memory", "64Mi")]);
    let sidecar = amounts(&[("cpu", "100m")]);
    let big = amounts(&[("cpu", "2")]);
    let sum = aggregate::aggregate([&app], [(true, &sidecar), (false, &big)]);
    // The init container runs beside the native sidecar started before it: 2 + 100m.
    assert_eq!(sum, amounts(&[("cpu", "2100m"), ("memory", "64Mi")]));
    let sum = aggregate::aggregate([&app], [(false, &big), (true, &sidecar)]);
    assert_eq!(sum, amounts(&[("cpu", "2"), ("memory", "64Mi")]));
    let sum = aggregate::aggregate([&app, &sidecar], []);
    assert_eq!(sum, amounts(&[("cpu", "250m"), ("memory", "64Mi")]));
}
