//! The admission handler on real captured AdmissionReviews, without the network.

use std::sync::Arc;

use base64::Engine as _;
use envoy_injector::admission::{Admission, RequestError};
use envoy_injector::inject::Standalone;
use envoy_injector::live::LiveTemplates;
use envoy_injector::metrics::Metrics;
use envoy_injector::template::TemplateSet;
use serde_json::{Value, json};

mod common;

use common::builders::ReviewBuilder;
use common::{Samples, metric_value};

fn fixture(name: &str) -> Value {
    ReviewBuilder::fixture(name).build()
}

fn admission_with(templates: Option<TemplateSet>) -> (Admission, prometheus_client::registry::Registry) {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let admission = Admission::new(Arc::new(LiveTemplates::new(templates)), Arc::new(Standalone), metrics);
    (admission, registry)
}

fn respond(admission: &Admission, review: &Value) -> Value {
    let bytes = admission
        .handle(&serde_json::to_vec(review).unwrap())
        .expect("a well-formed review gets a review back");
    let response: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(response["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(response["kind"], "AdmissionReview");
    assert_eq!(
        response["response"]["uid"], review["request"]["uid"],
        "uid must be echoed"
    );
    response["response"].clone()
}

fn patched_pod(review: &Value, response: &Value) -> Value {
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).unwrap();
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(pod.clone()).unwrap();
    pod
}

#[test]
fn dry_run_gets_the_same_patch_without_counting_an_injection() {
    let (admission, registry) = admission_with(Some(TemplateSet::embedded()));
    let review = fixture("dry-run.json");
    let response = respond(&admission, &review);
    assert_eq!(response["allowed"], true);
    let pod = patched_pod(&review, &response);
    assert_eq!(pod["spec"]["initContainers"][0]["name"], "envoy");
    let text = envoy_injector::metrics::encode(&registry);
    assert!(!Samples::parse(&text).has("envoy_injector_injections_total"), "{text}");
    assert!(
        metric_value(
            &text,
            "envoy_injector_admission_requests_total{outcome=\"injected\",dry_run=\"true\"}"
        ) == Some(1.0),
        "{text}"
    );
}

#[test]
fn updates_other_kinds_and_subresources_pass_through() {
    let (admission, _) = admission_with(Some(TemplateSet::embedded()));
    let mut update = fixture("seed-initializer-annotation.json");
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    let response = respond(&admission, &update);
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());

    let deployment = ReviewBuilder::fixture("seed-initializer-annotation.json")
        .kind("apps", "v1", "Deployment")
        .build();
    assert!(respond(&admission, &deployment).get("patch").is_none());

    let mut binding = fixture("seed-initializer-annotation.json");
    binding["request"]["subResource"] = json!("binding");
    assert!(respond(&admission, &binding).get("patch").is_none());
}

#[test]
fn collisions_and_unknown_templates_deny_with_reasons() {
    let (admission, _) = admission_with(Some(TemplateSet::embedded()));
    // `classic` mounts a volume `envoy-conf` from ConfigMap `envoy`: a Pod volume of that
    // name from a Secret collides with it.
    let mut clash = fixture("seed-initializer-annotation.json");
    clash["request"]["object"]["metadata"]["annotations"]["sidecar.samplecrd.k8s.io/template"] = json!("classic");
    clash["request"]["object"]["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "envoy-conf", "secret": {"secretName": "mine"}}));
    let response = respond(&admission, &clash);
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("envoy-conf") && message.contains("secret") && message.contains("template `classic`"),
        "{message}"
    );

    // An app on one of the default sidecar's own ports collides with it.
    let mut port = fixture("seed-initializer-annotation.json");
    port["request"]["object"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 15021}]);
    let message = respond(&admission, &port)["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("port 15021/TCP of template `config` container `envoy` is already used by Pod container"),
        "{message}"
    );

    let mut unknown = fixture("seed-initializer-annotation.json");
    unknown["request"]["object"]["metadata"]["annotations"]["sidecar.samplecrd.k8s.io/template"] = json!("missing");
    let message = respond(&admission, &unknown)["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("`missing`") && message.contains("`classic`, `config`"),
        "{message}"
    );
}

#[test]
fn objects_that_will_fail_validation_later_are_answered_sanely() {
    let (admission, _) = admission_with(Some(TemplateSet::embedded()));
    let mut no_containers = fixture("seed-initializer-annotation.json");
    no_containers["request"]["object"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("containers");
    no_containers["request"]["object"]["metadata"]["name"] = json!("Invalid_Name!");
    let response = respond(&admission, &no_containers);
    // Injecting would turn the API server's refusal into a sidecar-only Pod.
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("`spec.containers`") && message.contains("no `containers` field"),
        "{message}"
    );

    let mut invalid_name = fixture("seed-initializer-annotation.json");
    invalid_name["request"]["object"]["metadata"]["name"] = json!("Invalid_Name!");
    let response = respond(&admission, &invalid_name);
    assert_eq!(response["allowed"], true);
    let pod = patched_pod(&invalid_name, &response);
    let names: Vec<&str> = pod["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"envoy"), "{names:?}");

    let mut bad_shape = fixture("seed-initializer-annotation.json");
    bad_shape["request"]["object"]["spec"]["containers"] = json!("nginx");
    let response = respond(&admission, &bad_shape);
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.containers")
    );

    let mut no_object = fixture("seed-initializer-annotation.json");
    no_object["request"]["object"] = Value::Null;
    let response = respond(&admission, &no_object);
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("request.object")
    );
}

#[test]
fn no_template_loaded_denies_instead_of_guessing() {
    let (admission, _) = admission_with(None);
    let response = respond(&admission, &fixture("seed-initializer-annotation.json"));
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("no injection template")
    );
    // Pods that did not opt in are not blocked by a missing template.
    assert_eq!(
        respond(&admission, &fixture("plain-no-annotation.json"))["allowed"],
        true
    );
}

#[test]
fn unreadable_annotation_and_standalone_network_get_warnings() {
    let (admission, _) = admission_with(Some(TemplateSet::embedded()));
    let odd = ReviewBuilder::fixture("plain-no-annotation.json")
        .annotations(&[("sidecar.samplecrd.k8s.io/inject", "yes")])
        .build();
    let response = respond(&admission, &odd);
    assert!(response.get("patch").is_none());
    assert!(
        response["warnings"][0]
            .as_str()
            .unwrap()
            .contains("expected \"true\" or \"false\"")
    );

    let response = respond(&admission, &fixture("network-annotation.json"));
    assert_eq!(response["allowed"], true);
    assert!(
        response["warnings"][0]
            .as_str()
            .unwrap()
            .contains("cannot see Networks"),
        "{response}"
    );
}

#[test]
fn malformed_bodies_are_request_errors() {
    let (admission, registry) = admission_with(Some(TemplateSet::embedded()));
    type Expect = fn(&RequestError) -> bool;
    let cases: Vec<(Vec<u8>, Expect)> = vec![
        (b"not json".to_vec(), |e| matches!(e, RequestError::NotJson(_))),
        (
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#.to_vec(),
            |e| matches!(e, RequestError::WrongVersion { .. }),
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            |e| matches!(e, RequestError::NoRequest),
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}"#.to_vec(),
            |e| matches!(e, RequestError::NotAReview(_)),
        ),
    ];
    for (body, expected) in cases {
        let err = admission.handle(&body).unwrap_err();
        assert!(expected(&err), "{}: {err}", String::from_utf8_lossy(&body));
    }
    let mut no_uid = fixture("seed-initializer-annotation.json");
    no_uid["request"]["uid"] = json!("");
    assert_eq!(
        admission.handle(&serde_json::to_vec(&no_uid).unwrap()).unwrap_err(),
        RequestError::NoUid
    );
    let text = envoy_injector::metrics::encode(&registry);
    assert!(
        metric_value(
            &text,
            "envoy_injector_admission_requests_total{outcome=\"invalid\",dry_run=\"false\"}"
        ) == Some(5.0),
        "{text}"
    );
}

/// The admission path reads the Pod straight from the review's text, borrowing only what
/// the decision reads; the engine must decide and patch it exactly as it does the Pod
/// read from a parsed value (`inject`, `check`) — on every captured Pod and on shapes
/// that lead to each kind of refusal.
#[test]
fn the_pod_read_from_text_gets_the_same_decision_and_patch_as_the_parsed_pod() {
    use envoy_injector::inject::pod::Whole;
    use envoy_injector::inject::{self, Decision, Extras, PodView};
    // The default refuses port collisions; `classic` volume and mount collisions too.
    let embedded = TemplateSet::embedded();
    let templates = [embedded.get("config").unwrap(), embedded.get("classic").unwrap()];
    let mut pods: Vec<Value> = common::fixtures()
        .iter()
        .map(|(_, body)| serde_json::from_slice::<Value>(body).unwrap()["request"]["object"].clone())
        .collect();
    let base = pods[0].clone();
    let edit = |change: &dyn Fn(&mut Value)| {
        let mut pod = base.clone();
        change(&mut pod);
        pod
    };
    pods.push(edit(&|p| {
        p["spec"]["volumes"] = json!([{"name": "envoy-conf", "emptyDir": {}}])
    }));
    pods.push(edit(&|p| {
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}, {"containerPort": 15021}])
    }));
    pods.push(edit(&|p| {
        p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "x", "mountPath": "/etc/envoy"}])
    }));
    pods.push(edit(&|p| p["spec"]["containers"] = json!([{"name": "envoy"}])));
    pods.push(edit(&|p| p["spec"]["containers"] = json!("nginx")));
    pods.push(edit(&|p| p["metadata"]["annotations"] = Value::Null));
    pods.push(edit(&|p| {
        p.as_object_mut().unwrap().remove("metadata");
    }));
    pods.push(edit(&|p| p["spec"]["volumes"][0] = json!(7)));
    pods.push(edit(&|p| {
        p["metadata"]["annotations"]["escaped \"key\""] = json!("a\nb")
    }));
    pods.push(json!("not a Pod"));
    for (pod, template) in pods.iter().flat_map(|pod| templates.iter().map(move |t| (pod, t))) {
        let text = pod.to_string();
        let from_text = serde_json::from_str::<PodView<'_>>(&text).unwrap().within(Whole::Text {
            json: text.as_bytes(),
            pointer: "",
        });
        let decide = |view: &PodView<'_>| match inject::plan(view, template, &Extras::default()) {
            Ok(Decision::Inject(plan)) => Ok(Some((
                plan.clone(),
                serde_json::to_value(inject::jsonpatch::render(&plan, view).unwrap()).unwrap(),
            ))),
            Ok(Decision::Skip(skip)) => Err(skip.to_string()),
            Err(err) => Err(err.to_string()),
        };
        let from_value = decide(&PodView::read(pod));
        assert_eq!(from_value, decide(&from_text), "template {}, pod: {pod}", template.name);
        if let Ok(Some((_, patch))) = &from_value {
            let mut patched = pod.clone();
            let patch: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
            json_patch::patch(&mut patched, &patch).unwrap();
        }
    }
}

/// The template of issue 20's example: an envoy sidecar and the four overrides it allows.
const OVERRIDES_TEMPLATE: &str = include_str!("fixtures/overrides/template.yaml");

fn overrides_admission(template: &str) -> Admission {
    admission_with(Some(
        TemplateSet::from_text("test", template, envoy_injector::template::KubeVersion::NEWEST).unwrap(),
    ))
    .0
}

/// The captured dry-run review, opted in, asking for `overrides`; its app asks for some
/// cpu, so the Pod is Burstable and its sidecar keeps the resources the overrides set (a
/// BestEffort Pod's goes in without cpu and memory).
fn overrides_review(overrides: &[(&str, &str)]) -> Value {
    let keys: Vec<(String, &str)> = overrides
        .iter()
        .map(|(name, value)| (format!("{}{name}", envoy_injector::inject::OVERRIDE_PREFIX), *value))
        .collect();
    let mut pairs: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    pairs.push(("sidecar.samplecrd.k8s.io/inject", "true"));
    let mut review = ReviewBuilder::fixture("dry-run.json").annotations(&pairs).build();
    review["request"]["object"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "50m"}});
    review
}

#[test]
fn the_webhook_applies_overrides_within_bounds_and_records_them() {
    let admission = overrides_admission(OVERRIDES_TEMPLATE);
    let asked = overrides_review(&[
        ("memory-limit", "256Mi"),
        ("cpu-request", "1500m"),
        ("log-level", "warn"),
    ]);
    let response = respond(&admission, &asked);
    assert_eq!(response["allowed"], true, "{response}");
    let pod = patched_pod(&asked, &response);
    let envoy = &pod["spec"]["initContainers"][0];
    assert_eq!(envoy["name"], "envoy");
    assert_eq!(envoy["resources"]["limits"]["memory"], "256Mi");
    assert_eq!(envoy["resources"]["requests"]["cpu"], "1500m");
    assert_eq!(envoy["env"], json!([{"name": "LOG_LEVEL", "value": "warn"}]));
    let status = common::injection_status(&pod);
    assert_eq!(
        status["overrides"],
        json!({"cpu-request": "1500m", "log-level": "warn", "memory-limit": "256Mi"})
    );
}

#[test]
fn the_webhook_denies_a_value_out_of_bounds_with_the_issue_s_words() {
    let admission = overrides_admission(OVERRIDES_TEMPLATE);
    let response = respond(&admission, &overrides_review(&[("cpu-request", "8")]));
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"]["message"],
        r#"override.cpu-request: "8" exceeds max "2" of template "config""#
    );
    assert!(response.get("patch").is_none(), "nothing half-applied: {response}");
}

/// Declaring overrides changes nothing for a Pod that asks for none: the patch is the
/// one the same template without `overrides` gives, byte for byte (but the revision,
/// which is the hash of the template's text).
#[test]
fn a_pod_without_override_annotations_gets_exactly_the_patch_it_got_before() {
    let plain_text = &OVERRIDES_TEMPLATE[..OVERRIDES_TEMPLATE.find("overrides:").unwrap()];
    let with = TemplateSet::from_text("t", OVERRIDES_TEMPLATE, envoy_injector::template::KubeVersion::NEWEST).unwrap();
    let without = TemplateSet::from_text("t", plain_text, envoy_injector::template::KubeVersion::NEWEST).unwrap();
    let revision = |set: &TemplateSet| set.get("config").unwrap().revision.clone();
    let plain = overrides_review(&[]);
    let patch = |template: &str| {
        let response = respond(&overrides_admission(template), &plain);
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(response["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(
        patch(OVERRIDES_TEMPLATE).replace(&revision(&with), &revision(&without)),
        patch(plain_text)
    );
}
