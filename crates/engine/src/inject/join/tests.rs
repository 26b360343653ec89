//! The join on plain data: what joining a Network adds, and the join added to a Pod a
//! compiled policy injected.

/// The lookup, the deny words and what joining adds.
mod joining {
    use super::super::*;

    #[test]
    fn the_network_name_is_trimmed_text_and_blank_is_none() {
        let annotations = |value: Value| serde_json::Map::from_iter([(NETWORK_ANNOTATION.to_string(), value)]);
        let name = |value: Value| network_name(Some(&annotations(value))).map(str::to_string);
        assert_eq!(name(Value::from(" net1 ")), Some("net1".to_string()));
        assert_eq!(name(Value::from("  ")), None);
        assert_eq!(name(Value::from(1)), None);
        assert_eq!(network_name(None), None);
    }
    use serde_json::json;

    fn ready() -> Lookup {
        Lookup::Found(NetworkView {
            cidr: "10.1.0.0/16".into(),
            gateway: "10.1.0.1".into(),
            ready: Ok(()),
            deleting: false,
        })
    }

    #[test]
    fn join_adds_env_label_and_multus_annotation() {
        let extras = extras("net1", "default", ready(), None).unwrap().unwrap();
        assert_eq!(extras.sidecar_env[0].value.as_deref(), Some("10.1.0.0/16"));
        assert_eq!(extras.sidecar_env[1].name, "NETWORK_GATEWAY");
        assert_eq!(extras.annotations[MULTUS_ANNOTATION], "net1");
        assert_eq!(extras.labels[NETWORK_LABEL], "net1");
    }

    #[test]
    fn missing_or_unready_networks_are_named() {
        let err = extras("nope", "team-a", Lookup::Missing, None).unwrap_err().to_string();
        assert!(err.contains("`nope`") && err.contains("`team-a`"), "{err}");
        let unready = Lookup::Found(NetworkView {
            cidr: "10.0.0.0/8".into(),
            gateway: "10.0.0.1".into(),
            ready: Err("Overlaps: overlaps Network `a`".into()),
            deleting: false,
        });
        let err = extras("b", "ns", unready, None).unwrap_err().to_string();
        assert!(
            err.contains("`b`") && err.contains("is not Ready") && err.contains("Overlaps"),
            "{err}"
        );
        assert_eq!(extras("x", "ns", Lookup::Unsupported, None), Ok(None));
        // Ready but being deleted: denied, saying so.
        let Lookup::Found(mut going) = ready() else {
            unreachable!()
        };
        going.deleting = true;
        let err = extras("old", "ns", Lookup::Found(going), None).unwrap_err().to_string();
        assert!(err.contains("`old`") && err.contains("is being deleted"), "{err}");
    }

    #[test]
    fn multus_annotation_is_merged_in_either_form() {
        assert_eq!(merge_multus(None, "n", "ns").unwrap(), "n");
        assert_eq!(merge_multus(Some("a, b"), "n", "ns").unwrap(), "a, b,n");
        assert_eq!(merge_multus(Some("a,n"), "n", "ns").unwrap(), "a,n");
        assert_eq!(merge_multus(Some("n@eth1"), "n", "ns").unwrap(), "n@eth1");
        let merged: Value = serde_json::from_str(&merge_multus(Some(r#"[{"name":"a"}]"#), "n", "ns").unwrap()).unwrap();
        assert_eq!(merged, json!([{"name": "a"}, {"name": "n"}]));
        let same = r#"[{"name":"n","namespace":"ns"}]"#;
        assert_eq!(
            merge_multus(Some(same), "n", "ns").unwrap(),
            r#"[{"name":"n","namespace":"ns"}]"#
        );
        assert!(merge_multus(Some("[oops"), "n", "ns").is_err());
    }

    #[test]
    fn over_long_names_cannot_be_labels() {
        let name = "n".repeat(64);
        assert!(matches!(
            extras(&name, "ns", ready(), None),
            Err(JoinError::NameTooLong { .. })
        ));
    }
}

/// The join after a compiled policy injected the Pod.
mod after_a_policy {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::EnvVar;
    use serde_json::json;

    use super::super::*;
    use crate::inject::{Decision, jsonpatch, plan};
    use crate::template::Template;

    fn extras() -> Extras {
        let env = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        };
        Extras {
            sidecar_env: vec![
                env("NETWORK_CIDR", "198.18.64.0/24"),
                env("NETWORK_GATEWAY", "198.18.64.1"),
            ],
            annotations: BTreeMap::from([("k8s.v1.cni.cncf.io/networks".into(), "blue".into())]),
            labels: BTreeMap::from([("sidecar.samplecrd.k8s.io/network".into(), "blue".into())]),
        }
    }

    fn injected(pod: &Value, template: &Template, extras: &Extras) -> Value {
        let view = PodView::read(pod);
        let Decision::Inject(plan) = plan(&view, template, extras).unwrap() else {
            panic!("expected an injection")
        };
        let mut out = pod.clone();
        json_patch::patch(&mut out, &jsonpatch::render(&plan, &view).unwrap()).unwrap();
        out
    }

    /// Injected without the join, then joined: the Pod the webhook makes in one pass.
    #[test]
    fn the_join_after_an_injection_gives_the_pod_of_one_pass() {
        for (template, pod) in [
            (
                "containers: [{name: proxy, image: envoy, env: [{name: A, value: a}, {name: NETWORK_CIDR, value: old}]}]\ninitContainers: [{name: init, image: busybox}]\n",
                json!({"metadata": {"annotations": {"x": "y"}}, "spec": {"containers": [{"name": "app"}]}}),
            ),
            (
                "nativeSidecar: true\ncontainers: [{name: proxy, image: envoy}]\n",
                json!({"metadata": {"labels": {"app": "web"}, "annotations": {"k8s.v1.cni.cncf.io/networks": "blue"}},
                       "spec": {"initContainers": [{"name": "own"}], "containers": [{"name": "app", "env": [{"name": "NETWORK_CIDR", "value": "app's"}]}]}}),
            ),
        ] {
            let template = Template::parse("config", template, crate::template::KubeVersion::NEWEST).unwrap();
            let extras = extras();
            let one_pass = injected(&pod, &template, &extras);
            let policy = injected(&pod, &template, &Extras::default());
            let view = PodView::read(&policy).within(crate::inject::pod::Whole::Value(&policy));
            assert!(!joined(&view, "blue"));
            let mut joined_pod = policy.clone();
            json_patch::patch(&mut joined_pod, &render(&view, &extras).unwrap().into_patch().unwrap()).unwrap();
            assert_eq!(joined_pod, one_pass);
            assert!(joined(&PodView::read(&joined_pod), "blue"));
        }
    }
}
