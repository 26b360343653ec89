use serde_json::{Value, json};

use crate::inject::{Decision, Extras, PodView, plan};
use crate::template::{EMBEDDED_DEFAULT, KubeVersion, Template};

fn default_template() -> Template {
    Template::parse("config", EMBEDDED_DEFAULT, KubeVersion::NEWEST).unwrap()
}

/// What APP_PORT of the injected Envoy holds for `pod`, and the warnings.
fn app_port(pod: &Value) -> (String, Vec<String>) {
    let template = default_template();
    let Decision::Inject(plan) = plan(&PodView::read(pod), &template, &Extras::default()).unwrap() else {
        panic!("expected an injection")
    };
    let envoy = plan
        .containers
        .iter()
        .chain(&plan.init_containers)
        .find(|c| c.name == "envoy")
        .unwrap();
    let port = envoy
        .env
        .iter()
        .flatten()
        .find(|v| v.name == "APP_PORT")
        .unwrap()
        .value
        .clone()
        .unwrap();
    let warnings = plan.pod_values.iter().filter_map(|v| v.warning(&template)).collect();
    (port, warnings)
}

fn pod(containers: Value) -> Value {
    json!({"spec": {"containers": containers}})
}

#[test]
fn the_sidecar_takes_the_one_tcp_port_the_app_declares() {
    let one = pod(json!([{"name": "web", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}]));
    assert_eq!(app_port(&one), (String::from("80"), Vec::new()));
    // The same port twice is one port; a native sidecar takes it too.
    let twice = json!({"spec": {"restartPolicy": "Never", "containers": [
        {"name": "web", "ports": [{"containerPort": 3000, "protocol": "TCP"}]},
        {"name": "tail", "ports": [{"containerPort": 3000}]}]}});
    assert_eq!(app_port(&twice).0, "3000");
}

#[test]
fn without_one_port_it_keeps_8080_and_warns_naming_the_ports() {
    let (port, warnings) = app_port(&pod(json!([{"name": "web"}])));
    assert_eq!(port, "8080");
    assert_eq!(
        warnings,
        [
            "env `APP_PORT` of container `envoy` keeps the template's value \"8080\": the Pod's app containers declare no TCP port; annotation `sidecar.samplecrd.k8s.io/override.app-port` sets it"
        ]
    );
    let (port, warnings) = app_port(&pod(json!([
        {"name": "web", "ports": [{"containerPort": 80}]},
        {"name": "admin", "ports": [{"containerPort": 9090}]}])));
    assert_eq!(port, "8080");
    assert!(
        warnings[0].contains("declare several TCP ports (80, 9090)"),
        "{warnings:?}"
    );
}

#[test]
fn the_override_and_its_bounds_still_win() {
    let asked = |value: &str| {
        json!({"metadata": {"annotations": {"sidecar.samplecrd.k8s.io/override.app-port": value}},
               "spec": {"containers": [{"name": "web", "ports": [{"containerPort": 3000}]}]}})
    };
    assert_eq!(app_port(&asked("443")), (String::from("443"), Vec::new()));
    let refused = plan(&PodView::read(&asked("81")), &default_template(), &Extras::default()).unwrap_err();
    assert!(
        refused.to_string().contains("override.app-port: \"81\" is not one of"),
        "{refused}"
    );
}

#[test]
fn check_describes_where_the_value_came_from() {
    let template = default_template();
    let one = pod(json!([{"name": "web", "ports": [{"containerPort": 80}]}]));
    let Decision::Inject(plan) = plan(&PodView::read(&one), &template, &Extras::default()).unwrap() else {
        panic!()
    };
    assert_eq!(
        plan.pod_values[0].describe(),
        "env APP_PORT of container envoy: \"80\", the one TCP port the Pod's app containers declare"
    );
}
