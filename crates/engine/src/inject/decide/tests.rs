//! The decision's order on plain data: opt-in, the join after a policy, the Network held
//! until the template is known, the template's fault named first; and template selection.

use serde_json::{Value, json};

use super::*;
use crate::inject::join::NetworkView;
use crate::inject::policy::Skip;
use crate::inject::{
    INJECT_ANNOTATION, InjectError, NAMESPACE_LABEL, NETWORK_ANNOTATION, STATUS_ANNOTATION, TEMPLATE_ANNOTATION,
};
use crate::template::TemplateSet;

/// The cluster as plain data: whether the namespace is labelled, and the one Network
/// `blue` of namespace `shop` when there is one.
struct Cluster {
    labelled: bool,
    blue: Option<NetworkView>,
}

impl ClusterView for Cluster {
    fn namespace_opt_in(&self, _namespace: &str) -> NamespaceOptIn {
        if self.labelled {
            NamespaceOptIn::Labeled
        } else {
            NamespaceOptIn::NotLabeled
        }
    }

    fn network(&self, namespace: &str, name: &str) -> Lookup {
        match &self.blue {
            Some(view) if namespace == "shop" && name == "blue" => Lookup::Found(view.clone()),
            _ => Lookup::Missing,
        }
    }
}

fn ready_blue() -> Cluster {
    Cluster {
        labelled: false,
        blue: Some(NetworkView {
            cidr: "198.18.64.0/24".into(),
            gateway: "198.18.64.1".into(),
            ready: Ok(()),
            deleting: false,
        }),
    }
}

fn no_network() -> Cluster {
    Cluster {
        labelled: false,
        blue: None,
    }
}

/// The shipped templates plus `proxy`, whose volume `data` collides with a Pod's.
fn templates() -> TemplateSet {
    TemplateSet::from_text(
        "t",
        "apiVersion: v1\nkind: ConfigMap\ndata:\n  config: |\n    containers: [{name: proxy, image: envoy}]\n    volumes: [{name: data, emptyDir: {}}]\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap()
}

fn pod(annotations: Value) -> Value {
    json!({"metadata": {"annotations": annotations}, "spec": {"containers": [{"name": "app"}]}})
}

fn decided(pod: &Value, cluster: &dyn ClusterView) -> Decided {
    let set = templates();
    decide(&PodView::read(pod), "shop", AnnotationOptIn::On, || Some(&set), cluster)
}

#[test]
fn a_pod_not_opted_in_is_skipped_without_reading_the_templates() {
    let plain = pod(json!({}));
    let never = || -> Option<&TemplateSet> { panic!("templates read for a Pod that did not opt in") };
    let out = decide(
        &PodView::read(&plain),
        "shop",
        AnnotationOptIn::On,
        never,
        &no_network(),
    );
    assert!(matches!(out, Decided::Skip(Skip::NotOptedIn)), "{out:?}");
    // The namespace's label opts it in; an opt-out annotation wins over it.
    let labelled = Cluster {
        labelled: true,
        blue: None,
    };
    assert!(matches!(
        decided(&plain, &labelled),
        Decided::OptedIn(OptIn::NamespaceLabel, Ok(_))
    ));
    let out = decided(&pod(json!({INJECT_ANNOTATION: "false"})), &labelled);
    assert!(
        matches!(out, Decided::Skip(Skip::OptedOut { .. })),
        "{out:?} ({NAMESPACE_LABEL})"
    );
}

#[test]
fn an_opted_in_pod_without_templates_is_told_so() {
    let asked = pod(json!({INJECT_ANNOTATION: "true"}));
    let out = decide(
        &PodView::read(&asked),
        "shop",
        AnnotationOptIn::On,
        || None::<&TemplateSet>,
        &no_network(),
    );
    assert!(
        matches!(out, Decided::OptedIn(OptIn::Annotation, Err(NotChosen::NoTemplates))),
        "{out:?}"
    );
}

#[test]
fn the_template_s_fault_is_named_before_the_network_s() {
    let colliding = json!({"metadata": {"annotations": {INJECT_ANNOTATION: "true", NETWORK_ANNOTATION: "blue"}},
                           "spec": {"containers": [{"name": "app"}], "volumes": [{"name": "data", "hostPath": {"path": "/d"}}]}});
    let Decided::OptedIn(_, Ok(chosen)) = decided(&colliding, &no_network()) else {
        panic!("expected a chosen template")
    };
    let err = chosen.plan(&PodView::read(&colliding)).unwrap_err();
    assert!(
        matches!(err, Refused::Pod(InjectError::VolumeCollision { .. })),
        "{err:?}"
    );
    // Without the collision, the missing Network is what is refused.
    let fine = pod(json!({INJECT_ANNOTATION: "true", NETWORK_ANNOTATION: "blue"}));
    let Decided::OptedIn(_, Ok(chosen)) = decided(&fine, &no_network()) else {
        panic!("expected a chosen template")
    };
    let err = chosen.plan(&PodView::read(&fine)).unwrap_err();
    assert!(matches!(err, Refused::Network(JoinError::Missing { .. })), "{err:?}");
    // A policy cannot see Networks: it injects what the template adds.
    assert!(matches!(
        chosen.plan_without_join(&PodView::read(&fine)),
        Ok(Decision::Inject(_))
    ));
}

#[test]
fn a_ready_network_is_joined_and_an_unseen_one_is_named() {
    let joining = pod(json!({INJECT_ANNOTATION: "true", NETWORK_ANNOTATION: "blue"}));
    let Decided::OptedIn(_, Ok(chosen)) = decided(&joining, &ready_blue()) else {
        panic!("expected a chosen template")
    };
    let Ok(Decision::Inject(plan)) = chosen.plan(&PodView::read(&joining)) else {
        panic!("expected an injection")
    };
    assert_eq!(plan.annotations[crate::inject::join::MULTUS_ANNOTATION], "blue");
    assert_eq!(chosen.unseen_network(), None);
    let Decided::OptedIn(_, Ok(chosen)) = decided(&joining, &Standalone) else {
        panic!("expected a chosen template")
    };
    assert_eq!(chosen.unseen_network(), Some("blue"));
}

#[test]
fn a_pod_a_policy_injected_gets_only_the_join() {
    let injected =
        |network: &str| pod(json!({INJECT_ANNOTATION: "true", NETWORK_ANNOTATION: network, STATUS_ANNOTATION: "{}"}));
    let out = decided(&injected("blue"), &ready_blue());
    assert!(
        matches!(&out, Decided::JoinOnly { network, join: Ok(_) } if network == "blue"),
        "{out:?}"
    );
    let out = decided(&injected("blue"), &no_network());
    assert!(
        matches!(
            out,
            Decided::JoinOnly {
                join: Err(JoinError::Missing { .. }),
                ..
            }
        ),
        "{out:?}"
    );
    // Where Networks cannot be seen, or once joined, it is simply injected already.
    let out = decided(&injected("blue"), &Standalone);
    assert!(matches!(out, Decided::Skip(Skip::AlreadyInjected { .. })), "{out:?}");
    let mut joined = injected("blue");
    joined["metadata"]["labels"] = json!({(crate::inject::join::NETWORK_LABEL): "blue"});
    let out = decided(&joined, &ready_blue());
    assert!(matches!(out, Decided::Skip(Skip::AlreadyInjected { .. })), "{out:?}");
    // An opt-out wins here too: nothing is added.
    let out_of_it = pod(json!({INJECT_ANNOTATION: "false", NETWORK_ANNOTATION: "blue", STATUS_ANNOTATION: "{}"}));
    assert!(matches!(
        decided(&out_of_it, &ready_blue()),
        Decided::Skip(Skip::AlreadyInjected { .. })
    ));
}

#[test]
fn an_unknown_template_is_not_chosen_and_named() {
    let named = pod(json!({INJECT_ANNOTATION: "true", TEMPLATE_ANNOTATION: "gone"}));
    let out = decided(&named, &no_network());
    let Decided::OptedIn(_, Err(NotChosen::Unknown(err))) = out else {
        panic!("expected an unknown template, found {out:?}")
    };
    assert!(err.to_string().contains("`gone`"), "{err}");
}

#[test]
fn template_is_selected_by_annotation() {
    let mut data = std::collections::BTreeMap::new();
    data.insert("config".to_string(), crate::template::EMBEDDED_DEFAULT.to_string());
    data.insert(
        "debug".to_string(),
        "containers:\n- name: debug\n  image: debug\n".to_string(),
    );
    let set = TemplateSet::from_data("t", &data, crate::template::KubeVersion::NEWEST).unwrap();
    let pod = json!({"metadata": {"annotations": {TEMPLATE_ANNOTATION: "debug"}}});
    assert_eq!(
        select_template(&set, &PodView::read(&pod), "", || None).unwrap().name,
        "debug"
    );
    assert_eq!(
        select_template(&set, &PodView::read(&json!({})), "", || None)
            .unwrap()
            .name,
        "config"
    );
    let err = select_template(
        &set,
        &PodView::read(&json!({"metadata": {"annotations": {TEMPLATE_ANNOTATION: "nope"}}})),
        "",
        || None,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("`nope`") && err.contains("`config`, `debug`"), "{err}");
}

#[test]
fn a_pod_naming_no_template_is_told_the_configmap_has_no_default() {
    let set = TemplateSet::from_text(
        "t",
        "apiVersion: v1\nkind: ConfigMap\ndata:\n  canary: |\n    containers: [{name: b, image: b}]\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let err = select_template(&set, &PodView::read(&json!({})), "shop", || None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "the injector's ConfigMap has no `config` template, which a Pod gets when neither its annotation `sidecar.samplecrd.k8s.io/template` nor its namespace's label `sidecar.samplecrd.k8s.io/template` names one; the injector has: `canary`"
    );
    // Named by the label, it is the label's fault.
    let by_label = select_template(&set, &PodView::read(&json!({})), "shop", || Some("config".into()))
        .unwrap_err()
        .to_string();
    assert!(by_label.starts_with("template `config` named by label"), "{by_label}");
}

#[test]
fn the_pod_s_template_annotation_wins_over_its_namespace_s_label() {
    let set = TemplateSet::from_text(
        "t",
        "apiVersion: v1\nkind: ConfigMap\ndata:\n  config: |\n    containers: [{name: a, image: a}]\n  canary: |\n    containers: [{name: b, image: b}]\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    let canary = || Some("canary".to_string());
    let plain = json!({});
    assert_eq!(
        select_template(&set, &PodView::read(&plain), "shop", canary)
            .unwrap()
            .name,
        "canary"
    );
    assert_eq!(
        select_template(&set, &PodView::read(&plain), "shop", || None)
            .unwrap()
            .name,
        "config"
    );
    let named = json!({"metadata": {"annotations": {TEMPLATE_ANNOTATION: "config"}}});
    assert_eq!(
        select_template(&set, &PodView::read(&named), "shop", || -> Option<String> {
            panic!("the namespace's label is not asked for when the Pod names a template")
        })
        .unwrap()
        .name,
        "config"
    );
    let err = select_template(&set, &PodView::read(&plain), "shop", || Some("gone".to_string()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`gone`") && err.contains("namespace `shop`") && err.contains("`canary`, `config`"),
        "{err}"
    );
}

/// `config`, which does not allow Pods on the node's network, and `host`, which does.
fn host_templates() -> TemplateSet {
    TemplateSet::from_text(
        "t",
        "apiVersion: v1\nkind: ConfigMap\ndata:\n  config: |\n    containers: [{name: proxy, image: envoy, ports: [{containerPort: 15000}]}]\n  host: |\n    allowHostNetwork: true\n    containers: [{name: proxy, image: envoy, ports: [{containerPort: 15000}]}]\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap()
}

fn on_host_network(annotations: Value) -> Value {
    json!({"metadata": {"annotations": annotations}, "spec": {"hostNetwork": true, "containers": [{"name": "app"}]}})
}

#[test]
fn a_pod_on_the_node_network_is_injected_only_with_a_template_it_names_that_allows_it() {
    let set = host_templates();
    let labelled = Cluster {
        labelled: true,
        blue: None,
    };
    let decide_for = |pod: &Value, cluster: &dyn ClusterView| {
        decide(&PodView::read(pod), "shop", AnnotationOptIn::On, || Some(&set), cluster)
    };
    let skipped = |annotations: Value, cluster: &dyn ClusterView, template: Option<&str>| {
        let pod = on_host_network(annotations.clone());
        match decide_for(&pod, cluster) {
            Decided::Skip(Skip::HostNetwork { template: found }) => {
                assert_eq!(
                    found.as_deref(),
                    template,
                    "{annotations}: the template named in the skip"
                )
            }
            other => panic!("{annotations}: expected left alone for the node's network, found {other:?}"),
        }
    };
    // The default template, or one its namespace names, does not take it; nor one that
    // does not allow it, nor one the ConfigMap lacks (left alone, not denied).
    skipped(json!({INJECT_ANNOTATION: "true"}), &no_network(), None);
    skipped(json!({}), &labelled, None);
    skipped(
        json!({INJECT_ANNOTATION: "true", TEMPLATE_ANNOTATION: "config"}),
        &no_network(),
        Some("config"),
    );
    skipped(
        json!({INJECT_ANNOTATION: "true", TEMPLATE_ANNOTATION: "nope"}),
        &no_network(),
        Some("nope"),
    );
    // The template it names allows it: injected.
    let allowed = on_host_network(json!({INJECT_ANNOTATION: "true", TEMPLATE_ANNOTATION: " host "}));
    match decide_for(&allowed, &no_network()) {
        Decided::OptedIn(OptIn::Annotation, Ok(chosen)) => {
            assert_eq!(chosen.template.name, "host", "the template chosen");
            let view = PodView::read(&allowed);
            assert!(
                matches!(chosen.plan(&view), Ok(Decision::Inject(_))),
                "expected injected"
            );
        }
        other => panic!("expected injected with template `host`, found {other:?}"),
    }
    // Not opted in, or opted out: that is the reason given, first.
    let out = decide_for(&on_host_network(json!({TEMPLATE_ANNOTATION: "host"})), &no_network());
    assert!(matches!(out, Decided::Skip(Skip::NotOptedIn)), "{out:?}");
    // `hostNetwork: false`, or not a boolean, is not the node's network.
    for value in [json!(false), json!("true")] {
        let pod = json!({"metadata": {"annotations": {INJECT_ANNOTATION: "true"}}, "spec": {"hostNetwork": value, "containers": [{"name": "app"}]}});
        assert!(
            matches!(decide_for(&pod, &no_network()), Decided::OptedIn(_, Ok(_))),
            "hostNetwork {value}: expected opted in"
        );
    }
}

#[test]
fn the_host_network_skip_says_why() {
    let none = Skip::HostNetwork { template: None }.to_string();
    assert!(
        none.contains("`hostNetwork: true`")
            && none.contains("naming no template by annotation `sidecar.samplecrd.k8s.io/template`")
            && none.contains("ports would be the node's"),
        "{none}"
    );
    let named = Skip::HostNetwork {
        template: Some(String::from("config")),
    }
    .to_string();
    assert!(
        named.contains("template `config` does not set `allowHostNetwork: true`"),
        "{named}"
    );
}
