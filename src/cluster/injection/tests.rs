//! The mode, the expectation, the `admission-policies` line and a Pod's route, on plain
//! data: the objects found are those `policies::compile` makes, then one fault at a time.

use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::mode::expand;
use super::*;
use crate::cluster::health::Status;

const NS: &str = "envoy-injector";
const TEMPLATE: &str = "containers:\n- name: envoy\n  image: envoy\n";
const CANARY: &str = "containers:\n- name: canary\n  image: envoy\n";

pub(crate) fn deployment(args: &[&str], env: &[(&str, &str)]) -> Deployment {
    Deployment {
        spec: Some(DeploymentSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: crate::NAME.into(),
                        args: Some(args.iter().map(|a| a.to_string()).collect()),
                        env: Some(
                            env.iter()
                                .map(|(name, value)| EnvVar {
                                    name: name.to_string(),
                                    value: Some(value.to_string()),
                                    value_from: None,
                                })
                                .collect(),
                        ),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

fn mode_of(deployment: Deployment) -> Configured {
    configured(NS, Some(("envoy-injector", &Ok(Some(deployment)))))
}

fn mode(mode: Mode) -> Option<Mode> {
    Some(mode)
}

fn read_mode(configured: &Configured) -> Option<Mode> {
    match configured {
        Configured::Mode { mode, .. } => Some(*mode),
        _ => None,
    }
}

#[test]
fn the_mode_is_read_as_serve_reads_it() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], Option<Mode>);
    let cases: [Case; 7] = [
        (&["serve", "--log-format", "json"], &[], mode(Mode::Auto)),
        (&["serve", "--injection=policy"], &[], mode(Mode::Policy)),
        (&["serve", "--injection", "webhook"], &[], mode(Mode::Webhook)),
        // The last one given wins; the flag wins over the env.
        (
            &["serve", "--injection=policy", "--injection=webhook"],
            &[(INJECTION_ENV, "policy")],
            mode(Mode::Webhook),
        ),
        (&["serve"], &[(INJECTION_ENV, "webhook")], mode(Mode::Webhook)),
        // `$(VAR)` is expanded from the container's env, as the kubelet does.
        (
            &["serve", "--injection=$(MODE)"],
            &[("MODE", "policy")],
            mode(Mode::Policy),
        ),
        (&["serve", "--injection=Policy"], &[], None),
    ];
    for (args, env, want) in cases {
        let found = mode_of(deployment(args, env));
        assert_eq!(read_mode(&found), want, "{args:?} {env:?}: {found:?}");
    }
    let Configured::Mode { from, .. } = mode_of(deployment(&["serve", "--injection=policy"], &[])) else {
        panic!("a mode")
    };
    assert_eq!(
        from,
        "`--injection=policy` in the args of container `envoy-injector` of Deployment envoy-injector/envoy-injector"
    );
    assert_eq!(
        mode_of(deployment(&["serve", "--injection=Policy"], &[])),
        Configured::Invalid {
            value: "Policy".into(),
            from: "`--injection=Policy` in the args of container `envoy-injector` of Deployment envoy-injector/envoy-injector"
                .into()
        }
    );
    assert_eq!(expand("a$$(B)$(C)$(D)", &BTreeMap::from([("C", "c")])), "a$(B)c$(D)");
}

#[test]
fn a_mode_that_cannot_be_read_is_unknown_and_none_asked_for_is_the_default() {
    let missing = configured(NS, Some(("envoy-injector", &Ok(None))));
    assert!(
        matches!(&missing, Configured::Unknown(why) if why.starts_with("expected Deployment envoy-injector/envoy-injector, found none")),
        "{missing:?}"
    );
    let unreadable = configured(NS, Some(("envoy-injector", &Err("HTTP 403 Forbidden: no".into()))));
    assert_eq!(
        unreadable,
        Configured::Unknown("cannot read Deployment envoy-injector/envoy-injector: HTTP 403 Forbidden: no".into())
    );
    let mut from_elsewhere = deployment(&["serve"], &[]);
    let container = &mut from_elsewhere
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    container.env = Some(vec![EnvVar {
        name: INJECTION_ENV.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.annotations['mode']".into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }]);
    assert!(matches!(mode_of(from_elsewhere), Configured::Unknown(why) if why.contains("valueFrom")));
    assert_eq!(read_mode(&configured(NS, None)), Some(Mode::Auto));
}

#[test]
fn the_expected_path_follows_the_mode_and_discovery() {
    let set = |mode| Configured::Mode {
        mode,
        from: String::from("FROM"),
    };
    let unknown = Served::Unknown(String::from("timeout"));
    let cases = [
        (set(Mode::Auto), Served::Yes, Some(Path::Policy), Status::Ok),
        (set(Mode::Auto), Served::No, Some(Path::Webhook), Status::Ok),
        (set(Mode::Auto), unknown.clone(), None, Status::Warn),
        (set(Mode::Policy), Served::Yes, Some(Path::Policy), Status::Ok),
        (set(Mode::Policy), Served::No, Some(Path::Policy), Status::Fail),
        (set(Mode::Policy), unknown.clone(), Some(Path::Policy), Status::Warn),
        (set(Mode::Webhook), Served::Yes, Some(Path::Webhook), Status::Ok),
        (set(Mode::Webhook), Served::No, Some(Path::Webhook), Status::Ok),
        (Configured::Unknown("why".into()), Served::Yes, None, Status::Warn),
        (
            Configured::Invalid {
                value: "x".into(),
                from: "FROM".into(),
            },
            Served::Yes,
            None,
            Status::Fail,
        ),
    ];
    for (configured, served, expected, status) in cases {
        let found = expectation(&configured, &served);
        assert_eq!(
            (found.expected, found.check.status),
            (expected, status),
            "{configured:?} {served:?}: {found:?}"
        );
        assert_eq!(found.check.check, "injection");
    }
    let fail = expectation(&set(Mode::Policy), &Served::No);
    assert_eq!(
        fail.check.message,
        "FROM, but the API server does not serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) (Kubernetes 1.36 or later): no policy can be applied; use `--injection=auto` or `webhook`"
    );
}

fn templates(data: &[(&str, &str)]) -> TemplateSet {
    TemplateSet::from_data(
        "envoy-injector/envoy-injector",
        &data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap()
}

/// What `set` compiles to, as found in the cluster.
fn compiled(set: &TemplateSet) -> Vec<Object> {
    policies::compile(set, &policies::Options::default())
        .objects
        .iter()
        .map(Object::new)
        .collect()
}

fn policies_with(mode: &str, served: Served, found: Result<Vec<Object>, String>, set: &TemplateSet) -> Policies {
    let facts = PolicyFacts {
        deployment: Some((
            "envoy-injector".into(),
            Ok(Some(deployment(&["serve", &format!("--injection={mode}")], &[]))),
        )),
        served,
        found,
    };
    Policies::new(&facts, &Ok(set.clone()), NS)
}

fn find<'a>(objects: &'a mut [Object], kind: &str, name: &str) -> &'a mut Object {
    objects.iter_mut().find(|o| o.kind == kind && o.name == name).unwrap()
}

/// The templates a found mutating policy holds: `name` at `revision`.
fn holding(object: &mut Object, name: &str, revision: &str) {
    object
        .templates
        .get_or_insert_with(BTreeMap::new)
        .insert(name.to_string(), revision.to_string());
}

#[test]
fn policies_in_step_pass_and_each_fault_is_named_with_the_fix() {
    let set = templates(&[("config", TEMPLATE), ("canary", CANARY)]);
    let live = set.get("config").unwrap().revision.clone();
    let in_step = compiled(&set);
    assert_eq!(
        in_step.len(),
        7,
        "the denial and its binding, the two mutating policies and their three bindings"
    );
    let healthy = health::admission_policies(&policies_with("policy", Served::Yes, Ok(in_step.clone()), &set));
    assert_eq!(healthy.status, Status::Ok, "{healthy:?}");
    assert!(
        healthy.message.starts_with(&format!(
            "in step with ConfigMap envoy-injector/envoy-injector: template(s) `canary` revision {}, `config` revision {live} (7 object(s)",
            set.get("canary").unwrap().revision
        )),
        "{}",
        healthy.message
    );

    // One object deleted: named, with the fix.
    let mut deleted = in_step.clone();
    deleted.retain(|o| !(o.kind == MUTATING_BINDING && o.name == names::BY_LABEL));
    let check = health::admission_policies(&policies_with("policy", Served::Yes, Ok(deleted), &set));
    assert_eq!(check.status, Status::Fail);
    assert!(
        check
            .message
            .contains("MutatingAdmissionPolicyBinding envoy-injector-inject-label: expected it, found none"),
        "{}",
        check.message
    );
    assert!(check.message.contains("wait for it (see `lease`)"), "{}", check.message);
    assert!(
        check.message.contains(
            "`kubectl get configmap envoy-injector -n envoy-injector -o yaml | envoy-injector policies -f /dev/stdin --namespace envoy-injector | kubectl apply --server-side --field-manager=envoy-injector -f -`"
        ),
        "{}",
        check.message
    );

    // A template held at another revision: both revisions named.
    let mut edited = in_step.clone();
    holding(find(&mut edited, MUTATING, names::INJECT), "config", "0ld0ld0ld0ld");
    let check = health::admission_policies(&policies_with("policy", Served::Yes, Ok(edited), &set));
    assert_eq!(check.status, Status::Fail);
    assert!(
        check.message.contains(&format!(
            "MutatingAdmissionPolicy envoy-injector-inject: holds template `config` at revision 0ld0ld0ld0ld, expected {live} (ConfigMap envoy-injector/envoy-injector)"
        )),
        "{}",
        check.message
    );

    // Compiled from a ConfigMap without `canary`: it would refuse `canary`.
    let older = compiled(&templates(&[("config", TEMPLATE)]));
    let mut stale_list = in_step.clone();
    *find(&mut stale_list, MUTATING, names::INJECT_ANNOTATED) = older
        .iter()
        .find(|o| o.name == names::INJECT_ANNOTATED && o.kind == MUTATING)
        .unwrap()
        .clone();
    let check = health::admission_policies(&policies_with("policy", Served::Yes, Ok(stale_list), &set));
    assert_eq!(check.status, Status::Fail);
    assert!(
        check.message.contains(
            "MutatingAdmissionPolicy envoy-injector-inject-annotated: does not hold template `canary` of ConfigMap envoy-injector/envoy-injector (it refuses a Pod choosing it)"
        ),
        "{}",
        check.message
    );

    // A binding pointing elsewhere.
    let mut rebound = in_step.clone();
    find(&mut rebound, MUTATING_BINDING, names::BY_NAMESPACE).policy_name = Some("other".into());
    let check = health::admission_policies(&policies_with("policy", Served::Yes, Ok(rebound), &set));
    assert!(
        check.message.contains(
            "MutatingAdmissionPolicyBinding envoy-injector-inject-namespace: binds `other`, expected `envoy-injector-inject`"
        ),
        "{}",
        check.message
    );

    // A deleted template: the policies still hold it.
    let only_config = templates(&[("config", TEMPLATE)]);
    let check = health::admission_policies(&policies_with("policy", Served::Yes, Ok(in_step.clone()), &only_config));
    assert_eq!(check.status, Status::Fail, "{check:?}");
    assert!(
        check
            .message
            .contains("holds template `canary`, which ConfigMap envoy-injector/envoy-injector no longer has"),
        "{}",
        check.message
    );
    // Objects of the previous layout left over: a warning.
    let mut leftover = compiled(&only_config);
    let mut old = leftover[2].clone();
    old.name = String::from("envoy-injector-template-config");
    leftover.push(old);
    let check = health::admission_policies(&policies_with("policy", Served::Yes, Ok(leftover), &only_config));
    assert_eq!(check.status, Status::Warn, "{check:?}");
    assert!(
        check.message.contains("left over (their template is gone from the ConfigMap, or left to the webhook): MutatingAdmissionPolicy envoy-injector-template-config"),
        "{}",
        check.message
    );

    // Not served although the mode asks for policies.
    let check = health::admission_policies(&policies_with("policy", Served::No, Ok(Vec::new()), &set));
    assert_eq!(check.status, Status::Fail, "{check:?}");
    // Cannot be listed.
    let denied = "cannot list the objects of kind ValidatingAdmissionPolicy labelled app.kubernetes.io/managed-by=envoy-injector: HTTP 403";
    let check = health::admission_policies(&policies_with("policy", Served::Yes, Err(denied.into()), &set));
    assert_eq!((check.status, check.message.as_str()), (Status::Fail, denied));
    let check = health::admission_policies(&policies_with("webhook", Served::Yes, Err(denied.into()), &set));
    assert_eq!(check.status, Status::Warn);
}

#[test]
fn the_webhook_path_wants_none_and_warns_about_those_left() {
    let set = templates(&[("config", TEMPLATE)]);
    let none = health::admission_policies(&policies_with("webhook", Served::Yes, Ok(Vec::new()), &set));
    assert_eq!(none.status, Status::Ok, "{none:?}");
    let mut left = compiled(&set);
    holding(find(&mut left, MUTATING, names::INJECT), "config", "0ld0ld0ld0ld");
    let check = health::admission_policies(&policies_with("webhook", Served::Yes, Ok(left), &set));
    assert_eq!(check.status, Status::Warn, "{check:?}");
    assert!(
        check.message.starts_with("the webhook path is configured, but 7 object(s) labelled app.kubernetes.io/managed-by=envoy-injector remain"),
        "{}",
        check.message
    );
    assert!(
        check
            .message
            .contains("holds template `config` at revision 0ld0ld0ld0ld"),
        "{}",
        check.message
    );
    assert!(check.message.contains(&health::delete_command()), "{}", check.message);
    // Not served: the mutating kinds cannot be there, and none is wanted.
    let check = health::admission_policies(&policies_with("auto", Served::No, Ok(Vec::new()), &set));
    assert_eq!(check.status, Status::Ok, "{check:?}");
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_pod_takes_the_policy_route_only_where_its_objects_are_bound() {
    let set = templates(&[("config", TEMPLATE)]);
    let live = set.get("config").unwrap().revision.clone();
    let apps = labels(&[("kubernetes.io/metadata.name", "apps")]);
    let shop = labels(&[
        ("kubernetes.io/metadata.name", "shop"),
        ("sidecar.samplecrd.k8s.io/inject", "enabled"),
    ]);
    let plain = BTreeMap::new();
    let labelled = labels(&[("sidecar.samplecrd.k8s.io/inject", "true")]);
    let policies = policies_with("policy", Served::Yes, Ok(compiled(&set)), &set);
    let route = |p: &Policies, need| p.route("config", need, "apps", &apps, &plain);
    // By annotation (nothing else selects a Pod here), by Pod label, by namespace label.
    assert_eq!(
        route(&policies, Need::Inject),
        Ok(Route {
            kind: MUTATING,
            policy: names::INJECT_ANNOTATED.into(),
            binding: names::BY_ANNOTATION.into(),
            out_of_step: None,
            since: None,
        })
    );
    let by_label = policies
        .route("config", Need::Inject, "apps", &apps, &labelled)
        .unwrap();
    assert_eq!(
        (by_label.policy.as_str(), by_label.binding.as_str()),
        (names::INJECT, names::BY_LABEL)
    );
    let by_namespace = policies.route("config", Need::Inject, "shop", &shop, &plain).unwrap();
    assert_eq!(
        (by_namespace.policy.as_str(), by_namespace.binding.as_str()),
        (names::INJECT, names::BY_NAMESPACE)
    );
    // A refusal: the mark, denied by the validating policy it selects.
    for need in [Need::Deny, Need::UnknownTemplate] {
        let denied = route(&policies, need).unwrap();
        assert_eq!(
            (denied.kind, denied.policy.as_str(), denied.binding.as_str()),
            (VALIDATING, names::REFUSED, names::REFUSED)
        );
    }

    // The shipped bindings leave kube-system and the injector's namespace alone.
    let system = labels(&[("kubernetes.io/metadata.name", "kube-system")]);
    assert_eq!(
        policies.route("config", Need::Inject, "kube-system", &system, &plain),
        Err(String::from(
            "MutatingAdmissionPolicyBinding envoy-injector-inject-annotated's matchResources.namespaceSelector wants `kubernetes.io/metadata.name notin (kube-system,envoy-injector)`: namespace `kube-system` has `kubernetes.io/metadata.name=kube-system`"
        ))
    );

    // Without annotation opt-in, a Pod no label selects takes no policy route.
    let mut found = compiled(&set);
    found.retain(|o| o.name != names::INJECT_ANNOTATED);
    let no_annotations = policies_with("policy", Served::Yes, Ok(found), &set);
    assert_eq!(
        route(&no_annotations, Need::Inject),
        Err(String::from(
            "MutatingAdmissionPolicy envoy-injector-inject-annotated does not exist (the Lease holder applies it in policy mode: see `admission-policies`)"
        ))
    );

    // A binding missing, a policy missing, a template held at another revision.
    let mut found = compiled(&set);
    found.retain(|o| o.kind != MUTATING_BINDING);
    let unbound = policies_with("policy", Served::Yes, Ok(found), &set);
    assert_eq!(
        route(&unbound, Need::Inject),
        Err(String::from(
            "no MutatingAdmissionPolicyBinding envoy-injector-inject-annotated binds MutatingAdmissionPolicy envoy-injector-inject-annotated"
        ))
    );
    let mut found = compiled(&set);
    found.retain(|o| o.kind != MUTATING);
    let missing = policies_with("policy", Served::Yes, Ok(found), &set);
    assert_eq!(
        missing.route("config", Need::Inject, "shop", &shop, &plain),
        Err(String::from(
            "MutatingAdmissionPolicy envoy-injector-inject does not exist (the Lease holder applies it in policy mode: see `admission-policies`)"
        ))
    );
    let mut found = compiled(&set);
    holding(find(&mut found, MUTATING, names::INJECT_ANNOTATED), "config", "0ld");
    let edited = policies_with("policy", Served::Yes, Ok(found), &set);
    assert_eq!(
        route(&edited, Need::Inject).unwrap().out_of_step,
        Some((String::from("0ld"), live))
    );

    // A validating binding that only warns denies nothing.
    let mut found = compiled(&set);
    find(&mut found, VALIDATING_BINDING, names::REFUSED).actions = vec!["Warn".into()];
    let warns = policies_with("policy", Served::Yes, Ok(found), &set);
    assert_eq!(
        route(&warns, Need::Deny),
        Err(String::from(
            "no ValidatingAdmissionPolicyBinding binds ValidatingAdmissionPolicy envoy-injector-refused with validationActions [Deny]"
        ))
    );

    // A further object selector on a binding is applied to the Pod's labels.
    let mut found = compiled(&set);
    find(&mut found, MUTATING_BINDING, names::BY_ANNOTATION)
        .object_selector
        .get_or_insert_with(LabelSelector::default)
        .match_expressions
        .get_or_insert_with(Vec::new)
        .push(LabelSelectorRequirement {
            key: "tier".into(),
            operator: "In".into(),
            values: Some(vec!["web".into()]),
        });
    let selective = policies_with("policy", Served::Yes, Ok(found), &set);
    assert!(
        route(&selective, Need::Inject)
            .unwrap_err()
            .contains("objectSelector wants `tier in (web)`: the Pod has no label `tier`")
    );
    assert!(
        selective
            .route("config", Need::Inject, "apps", &apps, &labels(&[("tier", "web")]))
            .is_ok()
    );

    // The webhook path, and why.
    let webhook = policies_with("webhook", Served::Yes, Ok(Vec::new()), &set);
    assert_eq!(
        route(&webhook, Need::Inject),
        Err(String::from(
            "webhook mode is configured (`--injection=webhook` in the args of container `envoy-injector` of Deployment envoy-injector/envoy-injector)"
        ))
    );
    let not_served = policies_with("auto", Served::No, Ok(Vec::new()), &set);
    assert_eq!(
        route(&not_served, Need::Inject),
        Err(String::from(
            "the API server does not serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1)"
        ))
    );
    let mut left = policies_with("policy", Served::Yes, Ok(compiled(&set)), &set);
    left.left_to_webhook.insert("config".into(), "too large".into());
    assert_eq!(
        route(&left, Need::Inject),
        Err(String::from("template `config` is left to the webhook: too large"))
    );
}

/// Nothing installed: no Deployment, no ConfigMap, no compiled object. The path cannot be
/// told, and the `admission-policies` line says only what it found, nothing of a webhook
/// (whether one exists is the `mutating-webhook` line's to say).
#[test]
fn with_nothing_installed_the_policies_line_claims_no_webhook() {
    let facts = PolicyFacts {
        deployment: Some(("envoy-injector".into(), Ok(None))),
        served: Served::Yes,
        found: Ok(Vec::new()),
    };
    let policies = Policies::new(
        &facts,
        &Err("expected ConfigMap envoy-injector/envoy-injector, found none".into()),
        NS,
    );
    assert_eq!(policies.expectation.expected, None);
    assert_eq!(
        policies.expectation.check.status,
        Status::Warn,
        "{:?}",
        policies.expectation
    );
    assert_eq!(policies.found_any(), PoliciesFound::None);
    let check = health::admission_policies(&policies);
    assert_eq!(
        (check.status, check.message.as_str()),
        (
            Status::Ok,
            "none labelled app.kubernetes.io/managed-by=envoy-injector: no admission policy of the injector acts on Pods"
        )
    );
    assert!(!check.message.contains("webhook"), "{}", check.message);
}

#[test]
fn the_policies_found_are_told_to_the_health_lines() {
    let set = templates(&[("config", TEMPLATE)]);
    let found = policies_with("policy", Served::Yes, Ok(compiled(&set)), &set);
    assert_eq!(found.found_any(), PoliciesFound::Some);
    let unlisted = policies_with("policy", Served::Yes, Err("HTTP 403 Forbidden".into()), &set);
    assert_eq!(unlisted.found_any(), PoliciesFound::Unknown);
}
