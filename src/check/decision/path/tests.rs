//! Which path acts on an opted-in Pod, on plain data: the policies found are what
//! `policies::compile` makes of the test templates, then one change at a time.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhook;
use serde_json::{Value, json};

use super::super::tests::{app, cluster, shipped, subject, templates};
use super::super::{Installed, Webhooks, explain};
use crate::check::report::{Call, PodReport, Rule, Verdict};
use crate::cluster::injection::{MUTATING, Object, Policies, PolicyFacts, Served, VALIDATING};
use crate::inject::{INJECT_ANNOTATION, NETWORK_ANNOTATION, TEMPLATE_ANNOTATION};
use crate::policies;
use crate::policies::Path;
use crate::template::TemplateSet;

const NS_HOOK: &str = "namespace.sidecar.samplecrd.k8s.io";

/// The policies `set` compiles to, as found in the cluster, minus what `keep` refuses;
/// `serve`'s mode is its default (`auto`) on an API server that serves them.
fn policies_found(set: &TemplateSet, keep: impl Fn(&Object) -> bool) -> Policies {
    let found = policies::compile(set, &policies::Options::default())
        .objects
        .iter()
        .map(Object::new)
        .filter(|o| keep(o))
        .collect();
    let facts = PolicyFacts {
        deployment: None,
        served: Served::Yes,
        found: Ok(found),
    };
    Policies::new(&facts, &Ok(set.clone()), "envoy-injector")
}

fn explain_with(pod: &super::super::Subject, hooks: Webhooks<'_>, policies: &Policies) -> PodReport {
    let set = templates();
    explain(
        pod,
        &Installed {
            webhook_config: "envoy-injector",
            webhooks: hooks,
            templates: Ok(&set),
            policies: Some(policies),
            annotation_opt_in: crate::inject::AnnotationOptIn::On,
        },
        &cluster(),
    )
}

fn path(report: &PodReport) -> (Path, Option<&str>, Option<&str>, Option<&str>) {
    let path = report.path.as_ref().expect("a path");
    (path.via, path.kind, path.policy.as_deref(), path.binding.as_deref())
}

use crate::policies::names::{BY_NAMESPACE, INJECT, REFUSED};

#[test]
fn a_policy_injects_where_it_is_bound_and_the_webhook_then_sees_the_injected_pod() {
    let set = templates();
    let policies = policies_found(&set, |_| true);
    let hooks = shipped();
    let report = explain_with(
        &subject("labelled", json!({}), app()),
        Webhooks::Deployed(&hooks),
        &policies,
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Inject, Rule::NamespaceLabel),
        "{report:#?}"
    );
    assert_eq!(
        path(&report),
        (Path::Policy, Some(MUTATING), Some(INJECT), Some(BY_NAMESPACE))
    );
    assert_eq!(report.adds, ["init container envoy", "volume envoy-conf"]);
    // The API server calls the webhooks with the Pod as the policy left it: injected.
    assert_eq!(report.webhooks[0].name, NS_HOOK);
    assert_eq!(report.webhooks[0].call, Call::NotCalled, "{report:#?}");
    assert_eq!(
        report.webhooks[0].reason,
        "matchCondition `not-opted-out-and-work-to-do` is false"
    );

    // No webhook configuration at all: the policy injects all the same.
    let report = explain_with(
        &subject("plain", json!({INJECT_ANNOTATION: "true"}), app()),
        Webhooks::Absent,
        &policies,
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Inject, Rule::Annotation),
        "{report:#?}"
    );
    assert_eq!(path(&report).0, Path::Policy);

    // Not opted in: no path to tell.
    let report = explain_with(
        &subject("plain", json!({}), app()),
        Webhooks::Deployed(&hooks),
        &policies,
    );
    assert_eq!(report.rule, Rule::NotOptedIn);
    assert_eq!(report.path, None);
}

#[test]
fn denials_name_the_validating_policy_that_refuses() {
    let set = templates();
    let policies = policies_found(&set, |_| true);
    let clash = json!({"containers": [{"name": "app", "image": "app", "ports": [{"containerPort": 15001}]}]});
    let report = explain_with(&subject("labelled", json!({}), clash), Webhooks::Absent, &policies);
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::Collision),
        "{report:#?}"
    );
    assert_eq!(
        path(&report),
        (Path::Policy, Some(VALIDATING), Some(REFUSED), Some(REFUSED))
    );
    assert!(report.reason.contains("port 15001/TCP"), "{}", report.reason);

    let report = explain_with(
        &subject("labelled", json!({TEMPLATE_ANNOTATION: "nope"}), app()),
        Webhooks::Absent,
        &policies,
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::UnknownTemplate),
        "{report:#?}"
    );
    assert_eq!(
        path(&report),
        (Path::Policy, Some(VALIDATING), Some(REFUSED), Some(REFUSED))
    );

    // A mutating webhook called for it runs before the validating policies: it refuses
    // the Pod first, with the same words.
    let hooks = shipped();
    let clash = json!({"containers": [{"name": "app", "image": "app", "ports": [{"containerPort": 15001}]}]});
    let report = explain_with(
        &subject("labelled", json!({}), clash),
        Webhooks::Deployed(&hooks),
        &policies,
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::Collision),
        "{report:#?}"
    );
    let path = report.path.as_ref().unwrap();
    assert_eq!(
        (path.via, path.reason.as_str()),
        (
            Path::Webhook,
            "mutating webhooks run before validating policies: webhook namespace.sidecar.samplecrd.k8s.io is called and refuses it first (ValidatingAdmissionPolicy envoy-injector-refused with binding envoy-injector-refused would deny it with the same words)"
        )
    );
}

#[test]
fn without_its_policy_or_binding_the_pod_is_the_webhooks_and_says_why() {
    let set = templates();
    let hooks = shipped();
    let no_binding = policies_found(&set, |o| {
        !(o.kind == "MutatingAdmissionPolicyBinding" && o.name == BY_NAMESPACE)
    });
    let report = explain_with(
        &subject("labelled", json!({}), app()),
        Webhooks::Deployed(&hooks),
        &no_binding,
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Inject, Rule::NamespaceLabel),
        "{report:#?}"
    );
    let path = report.path.as_ref().unwrap();
    assert_eq!(path.via, Path::Webhook);
    assert_eq!(
        path.reason,
        format!("no MutatingAdmissionPolicyBinding {BY_NAMESPACE} binds MutatingAdmissionPolicy {INJECT}")
    );
    assert_eq!(
        report.webhooks[0].call,
        Call::Called,
        "the webhook sees the Pod as created"
    );

    // Where no binding selects the namespace, and no webhook is called either.
    let policies = policies_found(&set, |_| true);
    let report = explain_with(
        &subject("kube-system", json!({INJECT_ANNOTATION: "true"}), app()),
        Webhooks::Deployed(&hooks),
        &policies,
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Skip, Rule::WebhookNotCalled),
        "{report:#?}"
    );
    let path = report.path.as_ref().unwrap();
    assert_eq!(path.via, Path::Webhook);
    assert!(
        path.reason.contains(
            "matchResources.namespaceSelector wants `kubernetes.io/metadata.name notin (kube-system,envoy-injector)`"
        ),
        "{}",
        path.reason
    );
}

#[test]
fn a_policy_out_of_step_still_injects_with_its_own_revision_and_says_so() {
    let set = templates();
    let live = set.get("config").unwrap().revision.clone();
    let mut policies = policies_found(&set, |_| true);
    if let Ok(found) = &mut policies.found {
        for object in found.iter_mut().filter(|o| o.kind == MUTATING) {
            if let Some(held) = &mut object.templates {
                held.insert("config".into(), "0ld0ld0ld0ld".into());
            }
        }
    }
    let report = explain_with(&subject("labelled", json!({}), app()), Webhooks::Absent, &policies);
    assert_eq!(path(&report).0, Path::Policy, "{report:#?}");
    assert!(
        report.warnings.contains(&format!(
            "MutatingAdmissionPolicy {INJECT} holds template `config` at revision 0ld0ld0ld0ld, the ConfigMap's is revision {live}: until the Lease holder applies the new policies, the Pod gets the template the policy was compiled from"
        )),
        "{report:#?}"
    );
}

/// A webhook entry that joins Networks for Pods a policy injected (as tier `policies`
/// registers it).
fn join_hook() -> MutatingWebhook {
    serde_json::from_value(json!({
        "name": "join.sidecar.samplecrd.k8s.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"url": "https://127.0.0.1/mutate"},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "matchConditions": [{
            "name": "injected-not-joined",
            "expression": "has(object.metadata.annotations) && 'sidecar.samplecrd.k8s.io/status' in object.metadata.annotations && 'sidecar.samplecrd.k8s.io/network' in object.metadata.annotations",
        }],
    }))
    .unwrap()
}

#[test]
fn the_join_of_a_network_stays_with_the_webhook() {
    let set = templates();
    let policies = policies_found(&set, |_| true);
    let joins: Value = json!({INJECT_ANNOTATION: "true", NETWORK_ANNOTATION: "blue"});

    // The shipped entries are called for a Pod a policy injected that names a Network it
    // has not joined: the Network does not exist, so the webhook refuses the join.
    let hooks = shipped();
    let report = explain_with(
        &subject("plain", joins.clone(), app()),
        Webhooks::Deployed(&hooks),
        &policies,
    );
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::Network),
        "{report:#?}"
    );
    assert_eq!(path(&report).0, Path::Policy);
    assert_eq!(
        report.path.as_ref().unwrap().reason,
        "then webhook pod.sidecar.samplecrd.k8s.io refuses the join of Network `blue`"
    );

    // A join entry of its own is called alike.
    let hooks = [join_hook()];
    let report = explain_with(&subject("plain", joins, app()), Webhooks::Deployed(&hooks), &policies);
    assert_eq!(
        (report.verdict, report.rule),
        (Verdict::Deny, Rule::Network),
        "{report:#?}"
    );
    assert!(report.reason.contains("Network `blue`"), "{}", report.reason);
    assert_eq!(path(&report).0, Path::Policy);
    assert_eq!(
        report.path.as_ref().unwrap().reason,
        "then webhook join.sidecar.samplecrd.k8s.io refuses the join of Network `blue`"
    );
}

#[test]
fn webhook_mode_with_no_policies_says_so() {
    let set = templates();
    let facts = PolicyFacts {
        deployment: None,
        served: Served::No,
        found: Ok(Vec::new()),
    };
    let policies = Policies::new(&facts, &Ok(set.clone()), "envoy-injector");
    let hooks = shipped();
    let report = explain_with(
        &subject("labelled", json!({}), app()),
        Webhooks::Deployed(&hooks),
        &policies,
    );
    assert_eq!(report.verdict, Verdict::Inject);
    let path = report.path.as_ref().unwrap();
    assert_eq!(
        (path.via, path.reason.as_str()),
        (
            Path::Webhook,
            "the API server does not serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1)"
        )
    );
}
