//! The policy guard for the API server (`manifests/apiserver/`): a file kube-apiserver
//! can load from disk (Kubernetes 1.36 refuses to start on one it cannot), about the
//! shipped ServiceAccount alone, covering exactly what the RBAC grants on admission
//! policies, and no object of the kustomization (there the API server would never
//! evaluate it on the writes it is about).

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::rbac::v1::ClusterRole;
use serde_json::Value;

use crate::rbac::POLICY_CREATE_READ;
use crate::round_trip::assert_round_trips;
use crate::support::*;

const GUARD_FILE: &str = "manifests/apiserver/policy-guard.yaml";
const CONFIG_FILE: &str = "manifests/apiserver/admission-configuration.yaml";
/// Names an API server loads from disk must end so (and the API refuses them).
const STATIC_SUFFIX: &str = ".static.k8s.io";
const GROUP: &str = "admissionregistration.k8s.io";

fn read(relative: &str) -> Vec<Doc> {
    let path = repo(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_stream(relative, &text)
}

fn guard() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, Vec<Doc>) {
    let docs = read(GUARD_FILE);
    let kinds: Vec<&str> = docs.iter().map(Doc::kind).collect();
    assert_eq!(
        kinds,
        ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"],
        "the documents of {GUARD_FILE}"
    );
    (docs[0].typed(), docs[1].typed(), docs)
}

pub fn the_guard_is_a_policy_the_api_server_can_load_from_disk() {
    let (policy, binding, docs) = guard();
    assert_round_trips(&docs);
    let name = policy.metadata.name.clone().unwrap_or_default();
    for (kind, object_name) in [
        ("ValidatingAdmissionPolicy", &name),
        (
            "ValidatingAdmissionPolicyBinding",
            &binding.metadata.name.clone().unwrap_or_default(),
        ),
    ] {
        assert!(
            object_name.ends_with(STATIC_SUFFIX),
            "expected the {kind}'s name to end in {STATIC_SUFFIX}, found {object_name:?}"
        );
    }
    let spec = policy.spec.clone().expect("the guard has a spec");
    let binding_spec = &binding.spec;
    assert_eq!(binding_spec.policy_name, name, "the binding binds the guard");
    assert_eq!(binding_spec.validation_actions, ["Deny"], "the binding denies");
    // Loaded from disk, a policy may take no parameters and reference no API object.
    assert!(
        spec.param_kind.is_none(),
        "expected no paramKind, found {:?}",
        spec.param_kind
    );
    assert!(
        binding_spec.param_ref.is_none(),
        "expected no paramRef, found {:?}",
        binding_spec.param_ref
    );
    assert_eq!(
        spec.failure_policy.as_deref(),
        Some("Fail"),
        "an error in the guard refuses the write"
    );
    // serve's cleanup deletes by this label; the guard must never look like its own.
    for doc in &docs {
        assert!(
            doc.value["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null(),
            "expected no app.kubernetes.io/managed-by label on {}",
            doc.label()
        );
    }
    let validations = spec.validations.unwrap_or_default();
    assert!(!validations.is_empty(), "the guard validates");
    for validation in &validations {
        assert_eq!(
            validation.reason.as_deref(),
            Some("Forbidden"),
            "reason of {}",
            validation.expression
        );
        assert!(
            validation.message_expression.is_some(),
            "expected a messageExpression naming the object for {}",
            validation.expression
        );
    }
}

pub fn the_guard_covers_what_the_rbac_grants_and_only_for_the_shipped_service_account() -> Outcome {
    let docs = rendered()?;
    let (policy, _, _) = guard();
    let spec = policy.spec.expect("the guard has a spec");

    // The ServiceAccount the Deployment runs as, named in full.
    let account = one(docs, "ServiceAccount");
    let namespace = account.value["metadata"]["namespace"].as_str().unwrap_or_default();
    let username = format!("system:serviceaccount:{namespace}:{}", account.name());
    let conditions = spec.match_conditions.clone().unwrap_or_default();
    assert_eq!(conditions.len(), 1, "one matchCondition: {conditions:?}");
    assert_eq!(
        conditions[0].expression,
        format!("request.userInfo.username == '{username}'"),
        "the guard selects the requests of the shipped ServiceAccount and no one else's"
    );

    // Every admission-policy resource the ClusterRole grants, every write verb.
    let role: ClusterRole = one(docs, "ClusterRole").typed();
    let mut granted: Vec<String> = role
        .rules
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.api_groups.iter().flatten().any(|g| g == GROUP) && r.resource_names.is_none())
        .inspect(|r| assert_eq!(r.verbs, POLICY_CREATE_READ, "verbs of {:?}", r.resources))
        .flat_map(|r| r.resources.unwrap_or_default())
        .collect();
    granted.sort();
    let rules = spec
        .match_constraints
        .and_then(|m| m.resource_rules)
        .expect("the guard matches by resource rules");
    assert_eq!(rules.len(), 1, "one resource rule: {rules:?}");
    let mut guarded = rules[0].resources.clone().unwrap_or_default();
    guarded.sort();
    assert_eq!(
        guarded, granted,
        "the guard covers exactly the admission-policy resources the ClusterRole grants without resourceNames"
    );
    assert_eq!(rules[0].api_groups.as_deref(), Some(&[GROUP.to_string()][..]));
    assert_eq!(
        rules[0].api_versions.as_deref(),
        Some(&["*".to_string()][..]),
        "every version"
    );
    let mut operations = rules[0].operations.clone().unwrap_or_default();
    operations.sort();
    assert_eq!(
        operations,
        ["CREATE", "DELETE", "UPDATE"],
        "every write a granted verb makes"
    );
    Ok(())
}

pub fn the_guard_is_no_object_of_the_kustomization() -> Outcome {
    let docs = rendered()?;
    let found: Vec<String> = docs
        .iter()
        .filter(|d| d.name().ends_with(STATIC_SUFFIX) || d.kind().contains("AdmissionPolicy"))
        .map(Doc::label)
        .collect();
    assert!(
        found.is_empty(),
        "expected no admission policy in `kubectl kustomize manifests/` (the API server evaluates none on writes to \
         admission policies, and refuses names ending in {STATIC_SUFFIX}), found {found:?}"
    );
    Ok(())
}

pub fn the_admission_configuration_loads_the_guard_directory() {
    let docs = read(CONFIG_FILE);
    assert_eq!(docs.len(), 1, "one AdmissionConfiguration in {CONFIG_FILE}");
    let config = &docs[0].value;
    assert_eq!(
        (config["apiVersion"].as_str(), config["kind"].as_str()),
        (Some("apiserver.config.k8s.io/v1"), Some("AdmissionConfiguration"))
    );
    let plugins = config["plugins"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = plugins.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(
        names,
        ["ValidatingAdmissionPolicy"],
        "plugins configured in {CONFIG_FILE}"
    );
    let configuration: &Value = &plugins[0]["configuration"];
    assert_eq!(
        (configuration["apiVersion"].as_str(), configuration["kind"].as_str()),
        (
            Some("apiserver.config.k8s.io/v1"),
            Some("ValidatingAdmissionPolicyConfiguration")
        )
    );
    let dir = configuration["staticManifestsDir"].as_str().unwrap_or_default();
    assert!(
        dir.starts_with('/'),
        "expected an absolute staticManifestsDir (the API server takes no relative path), found {dir:?}"
    );
}

/// The overlay docs/policies.md gives for webhook mode without power over admission
/// policies, exactly as written there, rendered by kustomize against `manifests/`.
pub fn the_documented_webhook_only_overlay_removes_exactly_the_policy_rule() -> Outcome {
    let docs = rendered()?;
    let page = std::fs::read_to_string(repo("docs/policies.md")).expect("docs/policies.md");
    let section = &page[page.find("## Power bounded").expect("a Power bounded section")..];
    let overlay = section
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .find(|block| block.contains("manifests/webhook-only"))
        .expect("a kustomization for webhook mode (the component manifests/webhook-only) in the Power bounded section");
    // As the page lays it out: my-injector/ beside a checkout envoy-injector/.
    assert!(
        overlay.contains("  - ../envoy-injector/manifests\n"),
        "the overlay names its base as ../envoy-injector/manifests:\n{overlay}"
    );
    let with_overlay = render_overlay(overlay, "the documented overlay");

    let rules = |docs: &[Doc]| -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
        one(docs, "ClusterRole")
            .typed::<ClusterRole>()
            .rules
            .unwrap_or_default()
    };
    let mut expected = rules(docs);
    expected.retain(|r| {
        !r.resources
            .iter()
            .flatten()
            .any(|x| x.ends_with("admissionpolicies") || x.ends_with("admissionpolicybindings"))
    });
    assert_eq!(
        rules(docs).len(),
        expected.len() + 4,
        "four rules on admission policies shipped (create and reads; patch and delete by name)"
    );
    assert_eq!(
        rules(&with_overlay),
        expected,
        "the overlay's ClusterRole: the shipped rules but those on admission policies"
    );
    let args = one(&with_overlay, "Deployment").value["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert_eq!(
        args.as_array().and_then(|a| a.last()).and_then(Value::as_str),
        Some("--injection=webhook"),
        "the overlay's Deployment runs serve in webhook mode: {args}"
    );
    Ok(())
}
