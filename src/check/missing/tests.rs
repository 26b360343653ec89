use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, OwnerReference};
use serde_json::json;

use super::*;
use crate::check::report::WebhookMatch;
use crate::cluster::workload::controlled_by;

fn at(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_790_000_000 + second).unwrap())
}

fn entry(manager: &str, second: i64, fields: Value) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some("Update".into()),
        api_version: Some("v1".into()),
        time: Some(at(second)),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        subresource: None,
    }
}

#[test]
fn the_label_was_written_when_its_manager_last_wrote() {
    let label = format!("f:{NAMESPACE_LABEL}");
    let namespace = ObjectMeta {
        name: Some("apps".into()),
        managed_fields: Some(vec![
            entry("kubectl-create", 0, json!({"f:metadata": {"f:labels": {"f:team": {}}}})),
            entry("kubectl-label", 60, json!({"f:metadata": {"f:labels": {label: {}}}})),
            entry("other", 90, json!({"f:metadata": {"f:annotations": {}}})),
        ]),
        ..ObjectMeta::default()
    };
    assert_eq!(
        label_written(&namespace),
        Some(LabelWritten {
            at: at(60),
            manager: "kubectl-label".into()
        })
    );
    assert_eq!(
        label_written(&ObjectMeta::default()),
        None,
        "no managedFields: cannot be told"
    );
}

fn decision(verdict: Verdict, rule: Rule, webhooks: &[(&str, Call, bool)]) -> PodReport {
    PodReport {
        subject: "Pod apps/p".into(),
        verdict,
        rule,
        reason: format!("{rule:?} says so"),
        template: None,
        adds: Vec::new(),
        values: Vec::new(),
        resources: Vec::new(),
        webhooks: webhooks
            .iter()
            .map(|(name, call, fail_closed)| WebhookMatch {
                name: name.to_string(),
                call: *call,
                reason: String::new(),
                fail_closed: *fail_closed,
            })
            .collect(),
        warnings: Vec::new(),
        overrides: Vec::new(),
        path: None,
        drift: Vec::new(),
        pod_security: None,
    }
}

fn escaped(name: &str, created: i64, opt_in: OptIn, owned_by: Option<OwnerReference>, decision: PodReport) -> Escaped {
    Escaped {
        meta: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("apps".into()),
            creation_timestamp: Some(at(created)),
            owner_references: owned_by.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        opt_in,
        decision,
    }
}

const CALLED_FAIL: (&str, Call, bool) = ("pods.sidecar", Call::Called, true);
const CALLED_IGNORE: (&str, Call, bool) = ("pods.sidecar", Call::Called, false);

#[test]
fn each_reason_is_told_from_its_evidence_in_order() {
    let labels_written = BTreeMap::from([(
        "apps".to_string(),
        LabelWritten {
            at: at(100),
            manager: "kubectl-label".into(),
        },
    )]);
    let registered = at(50);
    let evidence = Evidence {
        webhook_config: "envoy-injector",
        webhook_created: Some(&registered),
        labels_written: &labels_written,
    };
    let inject = |hooks: &[(&str, Call, bool)]| decision(Verdict::Inject, Rule::Annotation, hooks);
    let reason = |pod: Escaped| why(&pod, &evidence).map(|(reason, _)| reason);
    let cases = [
        (
            escaped(
                "gone",
                200,
                OptIn::Annotation,
                None,
                decision(Verdict::Skip, Rule::WebhookAbsent, &[]),
            ),
            Some(Reason::NoWebhookConfiguration),
        ),
        (
            escaped(
                "clash",
                10,
                OptIn::Annotation,
                None,
                decision(Verdict::Deny, Rule::Collision, &[CALLED_FAIL]),
            ),
            Some(Reason::WouldBeDenied),
        ),
        (
            escaped("early-label", 90, OptIn::NamespaceLabel, None, inject(&[CALLED_FAIL])),
            Some(Reason::BeforeNamespaceLabel),
        ),
        // Annotated: the label's time says nothing about it.
        (
            escaped("annotated", 90, OptIn::Annotation, None, inject(&[CALLED_FAIL])),
            None,
        ),
        (
            escaped("early", 40, OptIn::Annotation, None, inject(&[CALLED_FAIL])),
            Some(Reason::BeforeWebhookConfiguration),
        ),
        (
            escaped(
                "excluded",
                200,
                OptIn::Annotation,
                None,
                decision(Verdict::Skip, Rule::WebhookNotCalled, &[]),
            ),
            Some(Reason::NotSentToWebhook),
        ),
        (
            escaped("ignored", 200, OptIn::Annotation, None, inject(&[CALLED_IGNORE])),
            Some(Reason::FailurePolicyIgnore),
        ),
        (
            escaped("riddle", 200, OptIn::NamespaceLabel, None, inject(&[CALLED_FAIL])),
            Some(Reason::Unknown),
        ),
    ];
    for (pod, expected) in cases {
        let name = pod.meta.name.clone().unwrap_or_default();
        let found = reason(pod);
        match expected {
            Some(expected) => assert_eq!(found, Some(expected), "{name}"),
            // Created after the configuration, called, fails closed: nothing to tell.
            None => assert_eq!(found, Some(Reason::Unknown), "{name}"),
        }
    }
    let by_hand = escaped(
        "by-hand",
        200,
        OptIn::Annotation,
        None,
        decision(Verdict::Skip, Rule::AlreadyInjected, &[]),
    );
    assert_eq!(why(&by_hand, &evidence), None, "the template's containers are there");
    let (_, detail) = why(
        &escaped("early-label", 90, OptIn::NamespaceLabel, None, inject(&[CALLED_FAIL])),
        &evidence,
    )
    .unwrap();
    assert!(
        detail.contains("namespace apps") && detail.contains("by kubectl-label"),
        "{detail}"
    );
    // Same second: the order cannot be told, so it is not claimed.
    let same_second = escaped("tie", 50, OptIn::Annotation, None, inject(&[CALLED_FAIL]));
    assert_eq!(reason(same_second), Some(Reason::Unknown));
}

#[test]
fn escaped_pods_are_grouped_by_workload_with_reasons_and_the_fix() {
    let labels_written = BTreeMap::new();
    let registered = at(50);
    let evidence = Evidence {
        webhook_config: "envoy-injector",
        webhook_created: Some(&registered),
        labels_written: &labels_written,
    };
    let fail = || decision(Verdict::Inject, Rule::Annotation, &[CALLED_FAIL]);
    let rs = || Some(controlled_by("ReplicaSet", "web-5d9"));
    let pods = vec![
        escaped("web-2", 10, OptIn::Annotation, rs(), fail()),
        escaped("web-1", 10, OptIn::Annotation, rs(), fail()),
        escaped("web-3", 60, OptIn::Annotation, rs(), fail()),
        escaped(
            "db-0",
            10,
            OptIn::Annotation,
            Some(controlled_by("StatefulSet", "db")),
            fail(),
        ),
        escaped("loose", 10, OptIn::Annotation, None, fail()),
        escaped(
            "manual",
            10,
            OptIn::Annotation,
            None,
            decision(Verdict::Skip, Rule::AlreadyInjected, &[]),
        ),
        // On the node's network, its template not allowing it: left alone, not missed.
        escaped(
            "on-host",
            10,
            OptIn::Annotation,
            None,
            decision(Verdict::Skip, Rule::HostNetwork, &[]),
        ),
    ];
    let owners = BTreeMap::from([(
        ("apps".to_string(), "web-5d9".to_string()),
        Some(controlled_by("Deployment", "web")),
    )]);
    let (groups, by_hand) = group(&pods, &owners, &evidence);
    assert_eq!(by_hand, vec!["apps/manual".to_string()]);
    type Summary = (String, Vec<String>, Vec<(Reason, usize)>, String);
    let summary: Vec<Summary> = groups
        .iter()
        .map(|g| {
            (
                g.workload(),
                g.pods.clone(),
                g.reasons.iter().map(|m| (m.reason, m.pods)).collect(),
                g.fix.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "Deployment apps/web".to_string(),
                vec!["web-1".to_string(), "web-2".to_string(), "web-3".to_string()],
                vec![(Reason::BeforeWebhookConfiguration, 2), (Reason::Unknown, 1)],
                "kubectl rollout restart deployment/web -n apps".to_string()
            ),
            (
                "Pod apps/loose".to_string(),
                vec!["loose".to_string()],
                vec![(Reason::BeforeWebhookConfiguration, 1)],
                "delete and recreate the Pod: kubectl get pod loose -n apps -o yaml > pod.yaml && kubectl replace --force -f pod.yaml".to_string()
            ),
            (
                "StatefulSet apps/db".to_string(),
                vec!["db-0".to_string()],
                vec![(Reason::BeforeWebhookConfiguration, 1)],
                "kubectl rollout restart statefulset/db -n apps".to_string()
            ),
        ]
    );
    let json = serde_json::to_value(&groups[0]).unwrap();
    assert_eq!(json["reasons"][0]["reason"], "before-webhook-configuration");
    assert_eq!(json["fix"], "kubectl rollout restart deployment/web -n apps");
}

/// A Pod a compiled policy injects now: the webhook's evidence does not apply, the
/// policy's and its binding's creation do (the later of the two).
#[test]
fn where_a_policy_injects_now_its_creation_is_the_evidence() {
    use crate::check::report::PathReport;
    use crate::policies::Path;
    let labels_written = BTreeMap::new();
    let registered = at(500);
    let evidence = Evidence {
        webhook_config: "envoy-injector",
        webhook_created: Some(&registered),
        labels_written: &labels_written,
    };
    let by_policy = || {
        let mut decision = decision(Verdict::Inject, Rule::Annotation, &[]);
        decision.path = Some(PathReport {
            via: Path::Policy,
            kind: Some("MutatingAdmissionPolicy"),
            policy: Some("envoy-injector-template-config".into()),
            binding: Some("envoy-injector-template-config".into()),
            reason: String::new(),
            since: Some((
                "MutatingAdmissionPolicyBinding envoy-injector-template-config".into(),
                at(100),
            )),
        });
        decision
    };
    let (reason, detail) = why(&escaped("early", 40, OptIn::Annotation, None, by_policy()), &evidence).unwrap();
    assert_eq!(reason, Reason::BeforePolicies);
    assert_eq!(
        detail,
        format!(
            "created before MutatingAdmissionPolicyBinding envoy-injector-template-config ({}): MutatingAdmissionPolicy envoy-injector-template-config (binding envoy-injector-template-config) injects it now, but did not exist yet (in policy mode the Lease holder applies them)",
            at(100).0
        )
    );
    // Created after them, and before the webhook configuration: the policy is what
    // counts, and it cannot tell.
    let (reason, detail) = why(&escaped("later", 200, OptIn::Annotation, None, by_policy()), &evidence).unwrap();
    assert_eq!(reason, Reason::PolicyUnknown);
    assert!(
        detail.starts_with("cannot be told: MutatingAdmissionPolicy envoy-injector-template-config"),
        "{detail}"
    );
    // A namespace label set after the Pod still explains it first.
    let labels_written = BTreeMap::from([(
        "apps".to_string(),
        LabelWritten {
            at: at(300),
            manager: "kubectl-label".into(),
        },
    )]);
    let evidence = Evidence {
        labels_written: &labels_written,
        ..evidence
    };
    let (reason, _) = why(
        &escaped("labelled", 200, OptIn::NamespaceLabel, None, by_policy()),
        &evidence,
    )
    .unwrap();
    assert_eq!(reason, Reason::BeforeNamespaceLabel);
}
