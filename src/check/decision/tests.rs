//! Each decision rule on plain data, against the shipped MutatingWebhookConfiguration.

use k8s_openapi::api::admissionregistration::v1::{MatchCondition, MutatingWebhookConfiguration};
use serde_json::json;

use super::*;
use std::collections::BTreeMap;

use crate::cluster::snapshot::NAMESPACE_NAME_LABEL;
use crate::inject::NETWORK_ANNOTATION;

const SHIPPED: &str = include_str!("../../../manifests/webhook.yaml");
pub(super) const TEMPLATE: &str = "containers:\n- name: envoy\n  image: envoy\n  ports:\n  - containerPort: 15001\nvolumes:\n- name: envoy-conf\n  emptyDir: {}\n";

pub(super) fn shipped() -> Vec<MutatingWebhook> {
    let config: MutatingWebhookConfiguration = serde_yaml_ng::from_str(SHIPPED).unwrap();
    config.webhooks.unwrap()
}

pub(super) fn templates() -> TemplateSet {
    TemplateSet::from_data(
        "envoy-injector/envoy-injector",
        &BTreeMap::from([("config".to_string(), TEMPLATE.to_string())]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap()
}

pub(super) fn cluster() -> Snapshot {
    let ns = |name: &str, label: Option<&str>| {
        let mut labels = BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), name.to_string())]);
        if let Some(value) = label {
            labels.insert(NAMESPACE_LABEL.to_string(), value.to_string());
        }
        (name.to_string(), labels)
    };
    Snapshot {
        namespaces: BTreeMap::from([
            ns("labelled", Some("enabled")),
            ns("plain", None),
            ns("kube-system", None),
        ]),
        networks: BTreeMap::new(),
    }
}

pub(super) fn subject(namespace: &str, annotations: Value, spec: Value) -> Subject {
    Subject {
        what: format!("Pod {namespace}/p"),
        namespace: namespace.to_string(),
        pod: json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": namespace, "annotations": annotations},
            "spec": spec,
        }),
    }
}

pub(super) fn app() -> Value {
    json!({"containers": [{"name": "app", "image": "app"}]})
}

fn explain_with(subject: &Subject, webhooks: Webhooks<'_>, templates: Result<&TemplateSet, &str>) -> PodReport {
    explain(
        subject,
        &Installed {
            webhook_config: "envoy-injector",
            webhooks,
            templates,
            policies: None,
            annotation_opt_in: crate::inject::AnnotationOptIn::On,
        },
        &cluster(),
    )
}

fn explain_shipped(subject: &Subject) -> PodReport {
    let hooks = shipped();
    let set = templates();
    explain_with(subject, Webhooks::Deployed(&hooks), Ok(&set))
}

fn calls(report: &PodReport) -> Vec<(&str, Call)> {
    report.webhooks.iter().map(|w| (w.name.as_str(), w.call)).collect()
}

const NS_HOOK: &str = "namespace.sidecar.samplecrd.k8s.io";
const LABEL_HOOK: &str = "label.sidecar.samplecrd.k8s.io";
const POD_HOOK: &str = "pod.sidecar.samplecrd.k8s.io";

#[test]
fn namespace_label_injects_through_the_namespace_entry() {
    let report = explain_shipped(&subject("labelled", json!({}), app()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Inject, Rule::NamespaceLabel),
        "{report:#?}"
    );
    assert_eq!(
        calls(&report),
        [
            (NS_HOOK, Call::Called),
            (LABEL_HOOK, Call::NotCalled),
            (POD_HOOK, Call::NotCalled)
        ]
    );
    assert_eq!(
        report.webhooks[2].reason,
        "namespaceSelector wants `sidecar.samplecrd.k8s.io/inject notin (enabled,disabled)`: namespace `labelled` has `sidecar.samplecrd.k8s.io/inject=enabled`"
    );
    let template = report.template.unwrap();
    assert_eq!(
        (template.name.as_str(), template.revision.as_str()),
        ("config", templates().get("config").unwrap().revision.as_str())
    );
    assert_eq!(report.adds, ["init container envoy", "volume envoy-conf"]);
}

#[test]
fn annotations_inject_through_the_pod_entry() {
    let report = explain_shipped(&subject("plain", json!({INJECT_ANNOTATION: "True"}), app()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Inject, Rule::Annotation),
        "{report:#?}"
    );
    assert_eq!(
        calls(&report),
        [
            (NS_HOOK, Call::NotCalled),
            (LABEL_HOOK, Call::NotCalled),
            (POD_HOOK, Call::Called)
        ]
    );
    let report = explain_shipped(&subject("plain", json!({LEGACY_INJECT_ANNOTATION: "true"}), app()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Inject, Rule::LegacyAnnotation),
        "{report:#?}"
    );
}

#[test]
fn opt_out_and_no_opt_in_are_skips_the_api_server_never_sends() {
    let report = explain_shipped(&subject("labelled", json!({INJECT_ANNOTATION: "false"}), app()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Skip, Rule::OptedOut),
        "{report:#?}"
    );
    assert_eq!(
        calls(&report),
        [
            (NS_HOOK, Call::NotCalled),
            (LABEL_HOOK, Call::NotCalled),
            (POD_HOOK, Call::NotCalled)
        ]
    );
    assert_eq!(
        report.webhooks[0].reason,
        "matchCondition `not-opted-out-and-work-to-do` is false"
    );
    assert!(!report.is_problem());

    let report = explain_shipped(&subject("plain", json!({INJECT_ANNOTATION: "yes"}), app()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Skip, Rule::NotOptedIn),
        "{report:#?}"
    );
    assert_eq!(
        report.webhooks[2].reason,
        "matchCondition `opted-in-by-annotation-and-work-to-do` is false"
    );
    assert!(
        report.warnings[0].contains("is \"yes\", expected \"true\" or \"false\""),
        "{report:#?}"
    );
}

#[test]
fn already_injected_pods_name_their_template_and_whether_it_is_stale() {
    let status = json!({"template": "config", "revision": "000000000000", "containers": ["envoy"], "initContainers": [], "volumes": [], "imagePullSecrets": [], "nativeSidecar": false});
    let annotations = json!({INJECT_ANNOTATION: "true", STATUS_ANNOTATION: status.to_string()});
    let report = explain_shipped(&subject("plain", annotations, app()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Skip, Rule::AlreadyInjected),
        "{report:#?}"
    );
    assert_eq!(
        report.webhooks[2].reason,
        "matchCondition `opted-in-by-annotation-and-work-to-do` is false"
    );
    let template = report.template.unwrap();
    assert!(template.stale);
    assert_eq!(template.revision, "000000000000");
    assert_eq!(
        template.live_revision,
        Some(templates().get("config").unwrap().revision.clone())
    );
}

#[test]
fn an_opted_in_pod_the_webhook_never_sees_is_not_injected() {
    let report = explain_shipped(&subject("kube-system", json!({INJECT_ANNOTATION: "true"}), app()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Skip, Rule::WebhookNotCalled),
        "{report:#?}"
    );
    assert_eq!(
        report.webhooks[1].reason,
        "namespaceSelector wants `kubernetes.io/metadata.name notin (kube-system,envoy-injector)`: namespace `kube-system` has `kubernetes.io/metadata.name=kube-system`"
    );
    let set = templates();
    let report = explain_with(
        &subject("plain", json!({INJECT_ANNOTATION: "true"}), app()),
        Webhooks::Absent,
        Ok(&set),
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Skip, Rule::WebhookAbsent),
        "{report:#?}"
    );
}

#[test]
fn collisions_unknown_templates_and_networks_are_denials() {
    let clash = json!({
        "containers": [{"name": "app", "image": "app"}],
        "volumes": [{"name": "envoy-conf", "configMap": {"name": "mine"}}],
    });
    let report = explain_shipped(&subject("labelled", json!({}), clash));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::Collision),
        "{report:#?}"
    );
    assert!(report.reason.contains("Pod volume `envoy-conf`"), "{}", report.reason);
    assert!(report.is_problem());

    let ports = json!({"containers": [{"name": "app", "image": "app", "ports": [{"containerPort": 15001}]}]});
    let report = explain_shipped(&subject("labelled", json!({}), ports));
    assert_eq!(report.rule, Rule::Collision, "{report:#?}");
    assert!(report.reason.contains("port 15001/TCP"), "{}", report.reason);

    let report = explain_shipped(&subject(
        "labelled",
        json!({"sidecar.samplecrd.k8s.io/template": "nope"}),
        app(),
    ));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::UnknownTemplate),
        "{report:#?}"
    );

    let report = explain_shipped(&subject("labelled", json!({NETWORK_ANNOTATION: "net1"}), app()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::Network),
        "{report:#?}"
    );
    assert!(report.reason.contains("Network `net1`"), "{}", report.reason);

    // Two faults: the template's is named first, as the webhook and the policies name it.
    let report = explain_shipped(&subject(
        "labelled",
        json!({NETWORK_ANNOTATION: "net1", "sidecar.samplecrd.k8s.io/template": "nope"}),
        app(),
    ));
    assert_eq!(report.rule, Rule::UnknownTemplate, "{report:#?}");
    let report = explain_shipped(&subject(
        "labelled",
        json!({NETWORK_ANNOTATION: "net1", "sidecar.samplecrd.k8s.io/override.bogus": "1"}),
        app(),
    ));
    assert_eq!(report.verdict, Verdict::Deny, "{report:#?}");
    assert!(report.reason.contains("override.bogus"), "{}", report.reason);
}

#[test]
fn unreadable_templates_leave_the_answer_open() {
    let hooks = shipped();
    let report = explain_with(
        &subject("labelled", json!({}), app()),
        Webhooks::Deployed(&hooks),
        Err("config envoy-injector/envoy-injector: template `config`: unknown field `imag` at line 3"),
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Unknown, Rule::NoTemplates),
        "{report:#?}"
    );
    assert!(report.reason.contains("line 3"), "{}", report.reason);
}

#[test]
fn a_host_network_pod_is_left_alone_unless_the_template_it_names_allows_it_and_then_said() {
    let spec = json!({"hostNetwork": true, "containers": [{"name": "app", "image": "app"}]});
    // The shipped templates allow none: left alone, the rule says why, no entry calls it.
    let report = explain_shipped(&subject("labelled", json!({}), spec.clone()));
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Skip, Rule::HostNetwork),
        "expected left alone for the node's network, found: {report:#?}"
    );
    assert!(
        report.reason.contains("`hostNetwork: true`") && report.reason.contains("ports would be the node's"),
        "expected the reason to name hostNetwork and the ports, found: {}",
        report.reason
    );
    assert!(
        report.webhooks.iter().all(|w| w.call != Call::Called),
        "expected no entry called, found {:?}",
        calls(&report)
    );
    // A template that allows it, named by the Pod: injected, and the ports said.
    let text = "apiVersion: v1\nkind: ConfigMap\ndata:\n  host: |\n    allowHostNetwork: true\n    containers: [{name: proxy, image: envoy, ports: [{containerPort: 15000}]}]\n";
    let set = TemplateSet::from_text("cm.yaml", text, crate::template::KubeVersion::NEWEST).unwrap();
    let named = json!({"sidecar.samplecrd.k8s.io/template": "host"});
    let hooks = shipped();
    let report = explain_with(&subject("labelled", named, spec), Webhooks::Deployed(&hooks), Ok(&set));
    assert_eq!(report.verdict, Verdict::Inject, "expected injected, found: {report:#?}");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("template `host` allows it") && w.contains("ports are the node's")),
        "expected a warning that its ports are the node's, found {:?}",
        report.warnings
    );
}

#[test]
fn a_condition_that_cannot_be_evaluated_applies_the_failure_policy() {
    let mut hooks = shipped();
    hooks.truncate(1);
    hooks[0].match_conditions = Some(vec![MatchCondition {
        name: "needs-labels".into(),
        expression: "object.metadata.labels['team'] == 'a'".into(),
    }]);
    let set = templates();
    let report = explain_with(
        &subject("labelled", json!({}), app()),
        Webhooks::Deployed(&hooks),
        Ok(&set),
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::WebhookError),
        "{report:#?}"
    );
    assert!(report.reason.contains("failurePolicy Fail"), "{}", report.reason);
    hooks[0].failure_policy = Some("Ignore".into());
    let report = explain_with(
        &subject("labelled", json!({}), app()),
        Webhooks::Deployed(&hooks),
        Ok(&set),
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Skip, Rule::WebhookError),
        "{report:#?}"
    );
}

fn with_restart_policy(policy: &str) -> Value {
    json!({"restartPolicy": policy, "containers": [{"name": "app", "image": "app"}]})
}

/// Warnings about a Pod that would never complete (none other is expected of these Pods).
fn completion_warnings(report: &PodReport) -> Vec<&str> {
    report
        .warnings
        .iter()
        .map(String::as_str)
        .filter(|w| w.contains("never completes"))
        .collect()
}

/// The report has one such warning, and it says each of `parts`.
fn assert_completion_warning(report: &PodReport, parts: &[&str]) {
    let [warning] = completion_warnings(report)[..] else {
        panic!("expected one warning: {report:#?}")
    };
    for part in parts {
        assert!(warning.contains(part), "{part}: {warning}");
    }
}

#[test]
fn a_pod_gets_a_native_sidecar_without_a_word() {
    for policy in ["Never", "OnFailure", "Always"] {
        let report = explain_shipped(&subject("labelled", json!({}), with_restart_policy(policy)));
        assert_eq!(report.verdict, Verdict::Inject, "{report:#?}");
        assert_eq!(report.adds, ["init container envoy", "volume envoy-conf"], "{policy}");
        assert!(report.warnings.is_empty(), "{report:#?}");
    }
}

#[test]
fn a_regular_sidecar_in_a_pod_that_runs_to_completion_is_a_warning_with_the_fix() {
    let opted_out = json!({NATIVE_SIDECAR_ANNOTATION: "false"});
    let report = explain_shipped(&subject("labelled", opted_out.clone(), with_restart_policy("Never")));
    assert_eq!(report.verdict, Verdict::Inject, "{report:#?}");
    assert_eq!(report.adds, ["container envoy", "volume envoy-conf"]);
    assert_completion_warning(
        &report,
        &[
            "`restartPolicy: Never`",
            "annotation `sidecar.samplecrd.k8s.io/native-sidecar: \"false\"`",
            "its Job stays Running",
            "remove the annotation or set it to \"true\"",
        ],
    );
    // A Pod that keeps running is what a regular sidecar is for: nothing to say.
    let report = explain_shipped(&subject("labelled", opted_out, with_restart_policy("Always")));
    assert!(report.warnings.is_empty(), "{report:#?}");

    let regular = TemplateSet::from_data(
        "envoy-injector/envoy-injector",
        &BTreeMap::from([("config".to_string(), format!("nativeSidecar: false\n{TEMPLATE}"))]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let hooks = shipped();
    let explain_regular = |annotations: Value| {
        explain_with(
            &subject("labelled", annotations, with_restart_policy("OnFailure")),
            Webhooks::Deployed(&hooks),
            Ok(&regular),
        )
    };
    let report = explain_regular(json!({}));
    assert_completion_warning(
        &report,
        &[
            "`restartPolicy: OnFailure`",
            "template `config` sets `nativeSidecar: false`",
            "set annotation `sidecar.samplecrd.k8s.io/native-sidecar: \"true\"`",
            "remove `nativeSidecar: false` from the template",
        ],
    );
    // The annotation wins over the template: native again, no warning.
    let report = explain_regular(json!({NATIVE_SIDECAR_ANNOTATION: "true"}));
    assert_eq!(report.adds, ["init container envoy", "volume envoy-conf"]);
    assert!(report.warnings.is_empty(), "{report:#?}");
}

/// A Job's and a CronJob's Pod template from a manifest (`check -f`) are explained with
/// their restartPolicy, as the API server will create their Pods.
#[test]
fn job_and_cronjob_pod_templates_are_explained_with_their_restart_policy() {
    let pod_template = |annotations: Value| {
        json!({"metadata": {"annotations": annotations},
               "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "job", "image": "busybox"}]}})
    };
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
                     "spec": {"template": pod_template(json!({}))}});
    let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
                         "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template":
                             pod_template(json!({NATIVE_SIDECAR_ANNOTATION: "false"}))}}}});
    let explained = |document: &Value| {
        let subject = crate::check::document_subject(1, document, "labelled").unwrap();
        explain_shipped(&subject)
    };
    let report = explained(&job);
    assert_eq!(report.subject, "Job labelled/once (document 1, Pod template)");
    assert_eq!(report.adds, ["init container envoy", "volume envoy-conf"]);
    assert!(report.warnings.is_empty(), "{report:#?}");
    let report = explained(&cronjob);
    assert_eq!(report.adds, ["container envoy", "volume envoy-conf"]);
    assert_completion_warning(&report, &["`restartPolicy: OnFailure`", "annotation"]);
}

#[test]
fn each_override_is_shown_applied_or_refused_with_the_reason() {
    let example = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/overrides/template.yaml"
    ));
    let set = TemplateSet::from_data(
        "t",
        &BTreeMap::from([("config".to_string(), example.to_string())]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let hooks = shipped();
    let asked = |overrides: &[(&str, &str)]| {
        let mut annotations = json!({INJECT_ANNOTATION: "true"});
        for (name, value) in overrides {
            annotations[format!("{}{name}", crate::inject::OVERRIDE_PREFIX)] = json!(value);
        }
        explain_with(
            &subject("plain", annotations, app()),
            Webhooks::Deployed(&hooks),
            Ok(&set),
        )
    };
    let report = asked(&[("cpu-request", "500m"), ("log-level", "debug")]);
    assert_eq!(report.verdict, Verdict::Inject, "{report:?}");
    assert_eq!(
        report.overrides,
        [
            OverrideReport {
                name: "cpu-request".into(),
                value: "500m".into(),
                applied: true,
                detail: "sets resources.requests.cpu of container `envoy`".into(),
            },
            OverrideReport {
                name: "log-level".into(),
                value: "debug".into(),
                applied: true,
                detail: "sets env LOG_LEVEL of container `envoy`".into(),
            },
        ]
    );

    let report = asked(&[("cpu-request", "8"), ("log-level", "debug")]);
    assert_eq!((report.verdict, report.rule), (Verdict::Deny, Rule::Override));
    assert_eq!(
        report.reason,
        r#"override.cpu-request: "8" exceeds max "2" of template "config""#
    );
    assert!(!report.overrides[0].applied);
    assert_eq!(report.overrides[0].detail, report.reason);
    assert!(report.overrides[1].applied, "the good one is shown as allowed");
    let text = crate::check::render::text(&crate::check::Report {
        namespace: String::from("envoy-injector"),
        healthy: false,
        checks: Vec::new(),
        pods: vec![report],
        stale: None,
        missing: None,
        drift: None,
        offline: None,
        unreadable: Vec::new(),
    });
    assert!(
        text.contains(r#"override cpu-request="8": REFUSED: override.cpu-request: "8" exceeds max "2""#),
        "{text}"
    );
    assert!(
        text.contains(r#"override log-level="debug": applied: sets env LOG_LEVEL"#),
        "{text}"
    );

    // An injected Pod shows what its status annotation records.
    let status = json!({"template": "config", "revision": "0", "containers": ["envoy"], "initContainers": [],
                        "volumes": [], "imagePullSecrets": [], "nativeSidecar": false,
                        "overrides": {"memory-limit": "256Mi"}});
    let report = explain_with(
        &subject("plain", json!({STATUS_ANNOTATION: status.to_string()}), app()),
        Webhooks::Deployed(&hooks),
        Ok(&set),
    );
    assert_eq!(report.rule, Rule::AlreadyInjected);
    assert_eq!(report.overrides.len(), 1);
    assert_eq!(
        (report.overrides[0].name.as_str(), report.overrides[0].value.as_str()),
        ("memory-limit", "256Mi")
    );
}

#[test]
fn a_namespace_s_template_label_is_the_template_check_reports() {
    let set = TemplateSet::from_data(
        "t",
        &BTreeMap::from([
            ("config".to_string(), TEMPLATE.to_string()),
            (
                "canary".to_string(),
                "containers:\n- name: canary\n  image: envoy\n".to_string(),
            ),
        ]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let mut cluster = cluster();
    cluster.namespaces.get_mut("labelled").unwrap().insert(
        crate::inject::NAMESPACE_TEMPLATE_LABEL.to_string(),
        "canary".to_string(),
    );
    let hooks = shipped();
    let installed = Installed {
        webhook_config: "envoy-injector",
        webhooks: Webhooks::Deployed(&hooks),
        templates: Ok(&set),
        policies: None,
        annotation_opt_in: crate::inject::AnnotationOptIn::On,
    };
    let report = explain(&subject("labelled", json!({}), app()), &installed, &cluster);
    assert_eq!(report.verdict, Verdict::Inject, "{report:?}");
    assert_eq!(report.template.unwrap().name, "canary");
    assert_eq!(report.adds, ["init container canary"]);
}

/// `check -f` without a cluster: the webhook configuration and Networks are not known. An
/// opted-in Pod is explained from its template (injected, or denied for a collision), and
/// a Network it joins is named as not known instead of denying it.
#[test]
fn offline_decides_from_the_pod_and_the_template_alone() {
    let set = templates();
    let offline = |annotations, spec| {
        explain(
            &subject("plain", annotations, spec),
            &Installed {
                webhook_config: "",
                webhooks: Webhooks::Offline,
                templates: Ok(&set),
                policies: None,
                annotation_opt_in: crate::inject::AnnotationOptIn::On,
            },
            &Snapshot::default(),
        )
    };
    let report = offline(json!({INJECT_ANNOTATION: "true"}), app());
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Inject, Rule::Annotation),
        "{report:#?}"
    );
    assert!(report.webhooks.is_empty(), "{report:#?}");

    let joins = offline(json!({INJECT_ANNOTATION: "true", NETWORK_ANNOTATION: "blue"}), app());
    assert_eq!(joins.verdict, Verdict::Inject, "{joins:#?}");
    assert!(
        joins
            .warnings
            .iter()
            .any(|w| w.contains("Network `blue`") && w.contains("not known offline")),
        "{joins:#?}"
    );

    let clash = json!({"containers": [{"name": "app", "image": "app", "ports": [{"containerPort": 15001}]}]});
    let denied = offline(json!({INJECT_ANNOTATION: "true"}), clash);
    assert_eq!(
        (denied.verdict, denied.rule),
        (Verdict::Deny, Rule::Collision),
        "{denied:#?}"
    );

    let plain = offline(json!({}), app());
    assert_eq!(
        (plain.verdict, plain.rule),
        (Verdict::Skip, Rule::NotOptedIn),
        "{plain:#?}"
    );
}

/// A Pod that would be injected names the level its namespace enforces and what its
/// template adds that breaks it; a Pod the level refuses once injected is a problem.
#[test]
fn pod_security_names_the_enforced_level_and_each_field_the_template_breaks() {
    use crate::check::report::NamespaceLabels;
    use crate::inject::TEMPLATE_ANNOTATION;
    use crate::template::pod_security::{Level, Mode};

    let set = TemplateSet::embedded();
    let hooks = shipped();
    let mut cluster = cluster();
    cluster.namespaces.insert(
        "strict".into(),
        BTreeMap::from([
            (NAMESPACE_NAME_LABEL.to_string(), "strict".to_string()),
            (
                "pod-security.kubernetes.io/enforce".to_string(),
                "restricted".to_string(),
            ),
            ("pod-security.kubernetes.io/warn".to_string(), "baseline".to_string()),
        ]),
    );
    let installed = |webhooks| Installed {
        webhook_config: "envoy-injector",
        webhooks,
        templates: Ok(&set),
        policies: None,
        annotation_opt_in: crate::inject::AnnotationOptIn::On,
    };
    let explain_in = |namespace: &str, template: Option<&str>, spec: Value, webhooks| {
        let mut annotations = json!({INJECT_ANNOTATION: "true"});
        if let Some(template) = template {
            annotations[TEMPLATE_ANNOTATION] = json!(template);
        }
        explain(&subject(namespace, annotations, spec), &installed(webhooks), &cluster)
    };

    let default = explain_in("strict", None, app(), Webhooks::Deployed(&hooks));
    let security = default
        .pod_security
        .as_ref()
        .expect("a Pod that would be injected is judged");
    assert_eq!(
        (security.labels, security.meets),
        (NamespaceLabels::Known, Level::Restricted)
    );
    assert!(security.modes.iter().all(|m| m.met), "{security:#?}");
    assert!(!default.is_problem());

    let classic = explain_in("strict", Some("classic"), app(), Webhooks::Deployed(&hooks));
    assert_eq!(classic.verdict, Verdict::Inject);
    assert!(classic.is_problem(), "restricted refuses the injected Pod");
    let security = classic.pod_security.as_ref().unwrap();
    assert_eq!(security.meets, Level::Baseline);
    let enforce = &security.modes[0];
    assert_eq!((enforce.policy.mode, enforce.met), (Mode::Enforce, false));
    let fields: Vec<&str> = enforce.findings.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "securityContext.capabilities.drop",
            "securityContext.seccompProfile.type",
            "securityContext.allowPrivilegeEscalation",
            "securityContext.runAsNonRoot",
        ]
    );
    assert!(security.modes[1].met, "warn baseline");
    let text = crate::check::render::text(&crate::check::Report::new(
        String::new(),
        Vec::new(),
        vec![classic.clone()],
        None,
    ));
    for line in [
        "      pod security: namespace `strict`: enforce restricted:latest, warn baseline:latest, audit not set; what template `classic` adds meets baseline, not restricted\n",
        "      pod security: it breaks enforce restricted:latest: the API server refuses the injected Pod:\n",
        "        container `envoy` of template `classic`: `securityContext.allowPrivilegeEscalation`: restricted expects false, found none\n",
        "1 Pod(s) would be denied, 1 of them by Pod Security once injected",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }

    // The Pod's own securityContext meets what it can for the sidecar.
    let own = json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": "app"}],
    });
    let classic = explain_in("strict", Some("classic"), own, Webhooks::Deployed(&hooks));
    let fields: Vec<&str> = classic.pod_security.as_ref().unwrap().modes[0]
        .findings
        .iter()
        .map(|f| f.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "securityContext.capabilities.drop",
            "securityContext.allowPrivilegeEscalation"
        ]
    );

    // No label: the API server's default, which nothing breaks.
    let plain = explain_in("plain", Some("classic"), app(), Webhooks::Deployed(&hooks));
    let security = plain.pod_security.as_ref().unwrap();
    assert!(security.modes.iter().all(|m| m.met && !m.policy.labelled));
    assert!(!plain.is_problem());
    let text = crate::check::render::text(&crate::check::Report::new(String::new(), Vec::new(), vec![plain], None));
    assert!(
        text.contains("      pod security: namespace `plain` sets no Pod Security label (enforce privileged, the API server's default unless its AdmissionConfiguration sets another); what template `classic` adds meets baseline, not restricted\n"),
        "{text}"
    );

    // Offline, a namespace the file does not declare has labels no one knows.
    let offline = explain_in("elsewhere", Some("classic"), app(), Webhooks::Offline);
    let security = offline.pod_security.as_ref().unwrap();
    assert_eq!(security.labels, NamespaceLabels::Unknown);
    assert!(security.modes.is_empty() && !offline.is_problem());
    // With a cluster, one not listed is not found.
    let missing = explain_in("elsewhere", Some("classic"), app(), Webhooks::Deployed(&hooks));
    assert_eq!(missing.pod_security.unwrap().labels, NamespaceLabels::NotFound);

    // A Pod that is not injected is not judged.
    let skipped = explain(
        &subject("strict", json!({}), app()),
        &installed(Webhooks::Deployed(&hooks)),
        &cluster,
    );
    assert_eq!(skipped.verdict, Verdict::Skip);
    assert!(skipped.pod_security.is_none());
}

/// What the injection does to resources is part of the explanation: each Pod-level value
/// written and why, the QoS class kept; a Guaranteed Pod the template cannot keep so is
/// denied by its own rule.
#[test]
fn the_pod_level_raise_and_the_qos_class_are_explained() {
    let set = TemplateSet::from_data(
        "envoy-injector/envoy-injector",
        &BTreeMap::from([(
            "config".to_string(),
            String::from("containers:\n- name: envoy\n  image: envoy\n  resources: {requests: {cpu: 100m}, limits: {cpu: '1'}}\n"),
        )]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let hooks = shipped();
    let explained = |spec: Value| {
        explain_with(
            &subject("labelled", json!({}), spec),
            Webhooks::Deployed(&hooks),
            Ok(&set),
        )
    };

    let raised = explained(json!({"resources": {"requests": {"cpu": "200m"}},
                                  "containers": [{"name": "app", "resources": {"requests": {"cpu": "150m"}}}]}));
    assert_eq!(raised.verdict, Verdict::Inject, "{raised:#?}");
    assert_eq!(
        raised.resources,
        [
            "pod-level cpu request 200m → 300m: the sidecar's 100m added",
            "QoS Burstable kept: the added containers' resources as the template sets them",
        ]
    );
    let report = crate::check::Report::new(String::from("ns"), Vec::new(), vec![raised], None);
    let text = crate::check::render::text(&report);
    assert!(
        text.contains("      adds: init container envoy\n      pod-level cpu request 200m → 300m: the sidecar's 100m added\n      QoS Burstable kept"),
        "{text}"
    );

    let guaranteed = explained(json!({"containers": [{"name": "app",
                                                      "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}));
    assert_eq!(
        (guaranteed.verdict, guaranteed.rule),
        (Verdict::Deny, Rule::QosClass),
        "{guaranteed:#?}"
    );
    assert!(
        guaranteed
            .reason
            .contains("give it resources.limits.memory in the template"),
        "{}",
        guaranteed.reason
    );
}
