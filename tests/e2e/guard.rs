//! Tier `guard`: policy mode's power over admission policies, bounded, on the real API
//! server. `manifests/` applied; every request below is made as the injector's
//! ServiceAccount (a TokenRequest token), unless it says an admin makes it.
//!
//! - RBAC: the objects `envoy-injector policies` compiles from the shipped ConfigMap are
//!   server-side applied with field manager `envoy-injector` (created, then applied again),
//!   read back (get, list by the managed-by label) and deleted, as policy mode does.
//! - The guard (`manifests/apiserver/policy-guard.yaml`): every write outside what
//!   `policies` compiles is refused with the guard's words: a policy without the label,
//!   one matching ConfigMaps, Pod UPDATE, an extra resource, another group, taking
//!   parameters, not named as ours; a binding of a foreign policy, one widening its match
//!   with resource rules; relabelling or deleting a policy that is not ours. (A binding
//!   with a paramRef the API server refuses itself: the ServiceAccount cannot read what
//!   it would name.) The guard itself is no API object (nothing to change or delete), and its
//!   name cannot be taken. The foreign policy is written by an admin: nobody else is
//!   restricted.
//!
//! The API server evaluates no policy registered through its API on writes to admission
//! policies, so the guard works only loaded from disk (manifest-based admission control,
//! Kubernetes 1.36 alpha): `make apiserver-guard` writes the files and prints the
//! kube-apiserver flags. Where the API server's `/metrics` shows no policy loaded from disk,
//! the RBAC part runs and the tier then skips, loudly, naming those flags.

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::common::metrics::Samples;
use crate::common::policies::{narrow, resource_of};
use crate::policies::compile;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "guard",
    run: |suite| Box::pin(run(suite)),
};

/// The guard's name (a policy loaded from disk must end in `.static.k8s.io`).
const GUARD: &str = "envoy-injector-policy-guard.static.k8s.io";
/// `serve`'s field manager for the objects it applies.
const INJECTOR_MANAGER: &str = "envoy-injector";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The series the API server exports once it has loaded policies from disk.
const LOADED_SERIES: &str = "apiserver_manifest_admission_config_controller_last_config_info";

/// The guard's words, one per rule.
/// RBAC's words: patch and delete name the compiled objects only, so a foreign policy
/// (or one of the previous layout) is refused before the guard sees the request.
const NOT_OURS_PATCH: &str = "cannot patch resource \"validatingadmissionpolicies\"";
const NOT_OURS_DELETE: &str = "cannot delete resource \"validatingadmissionpolicies\"";
const NOT_LABELLED: &str = "may write only admission policies labelled app.kubernetes.io/managed-by=envoy-injector";
/// RBAC's words: patch (a server-side apply) names the compiled objects only.
const NOT_NAMED_RBAC: &str = NOT_OURS_PATCH;
const NOT_POD_CREATE: &str = "may write only admission policies that match Pod CREATE and nothing else";
const NOT_OUR_BINDING: &str = "may write only bindings of its own policies";

async fn run(suite: &Suite) -> TierResult {
    let install = suite.install().await?;
    let scope = Scope::new(suite.settings.mode);
    let account = install.service_account_client().await;
    let suffix = unique_suffix();
    let loaded = guard_loaded(&suite.client).await;

    // Bound to a namespace that does not exist: the objects act on no Pod meanwhile.
    let shipped = read_manifest("manifests/configmap.yaml");
    let compiled = narrow(
        &compile(&shipped, &install.namespace),
        &[format!("ei-e2e-guard-none-{suffix}")],
    );
    for object in &compiled {
        scope.delete_later(resource_of(object), None, name(object));
    }
    for round in ["create", "apply again"] {
        for object in &compiled {
            apply(&account, object).await.unwrap_or_else(|e| {
                panic!(
                    "expected ServiceAccount {} to apply {} {} ({round}), found: {}",
                    install.service_account,
                    object["kind"],
                    name(object),
                    api_error(&e)
                )
            });
        }
    }
    for object in &compiled {
        let api = dynamic(&account, object);
        api.get(name(object)).await.unwrap_or_else(|e| {
            panic!("expected to read {} {} back, found: {}", object["kind"], name(object), api_error(&e))
        });
        let listed = api
            .list(&ListParams::default().labels(&format!("{MANAGED_BY}={INJECTOR_NAME}")))
            .await
            .unwrap_or_else(|e| panic!("expected to list {} by label, found: {}", object["kind"], api_error(&e)));
        assert!(
            listed.items.iter().any(|o| o.metadata.name.as_deref() == Some(name(object))),
            "expected {} {} in the list by label {MANAGED_BY}={INJECTOR_NAME}",
            object["kind"],
            name(object)
        );
    }
    step!(
        "as ServiceAccount {}/{}: {} compiled objects created, applied again, read back (get, list by label)",
        install.namespace,
        install.service_account,
        compiled.len()
    );

    if !loaded {
        delete_as(&account, &compiled).await;
        return Err(Skip(format!(
            "the API server loads no admission policy from disk ({LOADED_SERIES} absent from its /metrics), so the \
             guard's refusals were not checked; the RBAC part passed ({} compiled objects applied, read back and \
             deleted as the ServiceAccount). Start kube-apiserver with the flags `make -s apiserver-guard` prints \
             (the control plane here: APISERVER_EXTRA_ARGS=\"$(make -s apiserver-guard)\")",
            compiled.len()
        )));
    }

    // A policy that is not ours, written by an admin: the guard restricts nobody else.
    let foreign = format!("ei-e2e-guard-foreign-{suffix}");
    let foreign_policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": foreign, "labels": {PART_OF.0: PART_OF.1}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule(&[""], &["v1"], &["configmaps"], &["CREATE"])]},
            "validations": [{"expression": "true"}],
        },
    });
    scope.delete_later(resource_of(&foreign_policy), None, &foreign);
    apply_as(&suite.client, FIELD_MANAGER, &foreign_policy)
        .await
        .unwrap_or_else(|e| panic!("expected an admin to write ValidatingAdmissionPolicy {foreign}, found: {}", api_error(&e)));
    step!("an admin wrote ValidatingAdmissionPolicy {foreign} (unlabelled, ConfigMaps): the guard restricts nobody else");

    let policy = find(&compiled, "ValidatingAdmissionPolicy");
    let mutating = find(&compiled, "MutatingAdmissionPolicy");
    let binding = find(&compiled, "ValidatingAdmissionPolicyBinding");
    let mutating_binding = find(&compiled, "MutatingAdmissionPolicyBinding");
    let writes: Vec<(&str, &str, Value)> = vec![
        (
            "a policy without the managed-by label",
            NOT_LABELLED,
            variant(policy, "unlabelled", |o| {
                o["metadata"]["labels"].as_object_mut().map(|l| l.remove(MANAGED_BY));
            }),
        ),
        (
            "a policy matching ConfigMaps",
            NOT_POD_CREATE,
            variant(mutating, "configmaps", |o| set_rules(o, json!([rule(&[""], &["v1"], &["configmaps"], &["CREATE"])]))),
        ),
        (
            "a policy matching Pod UPDATE",
            NOT_POD_CREATE,
            variant(policy, "update", |o| set_rules(o, json!([rule(&[""], &["v1"], &["pods"], &["CREATE", "UPDATE"])]))),
        ),
        (
            "a policy with an extra resource",
            NOT_POD_CREATE,
            variant(mutating, "secrets", |o| set_rules(o, json!([rule(&[""], &["v1"], &["pods", "secrets"], &["CREATE"])]))),
        ),
        (
            "a policy with a rule for another group",
            NOT_POD_CREATE,
            variant(policy, "apps", |o| {
                set_rules(
                    o,
                    json!([
                        rule(&[""], &["v1"], &["pods"], &["CREATE"]),
                        rule(&["apps"], &["v1"], &["deployments"], &["CREATE"]),
                    ]),
                )
            }),
        ),
        (
            "a policy taking parameters",
            NOT_POD_CREATE,
            // Namespaces: a kind the ServiceAccount may read, or the API server's own check
            // (`get` on the paramKind) would refuse it first.
            variant(policy, "params", |o| o["spec"]["paramKind"] = json!({"apiVersion": "v1", "kind": "Namespace"})),
        ),
        (
            // RBAC refuses it first: patch names the compiled objects only.
            "a policy not named as ours",
            NOT_NAMED_RBAC,
            variant(policy, "", |o| o["metadata"]["name"] = json!(format!("ei-e2e-guard-misnamed-{suffix}"))),
        ),
        (
            "a binding of a foreign policy",
            NOT_OUR_BINDING,
            variant(binding, "foreign", |o| o["spec"]["policyName"] = json!(foreign)),
        ),
        (
            "a binding widening its match with resource rules",
            NOT_OUR_BINDING,
            variant(mutating_binding, "widened", |o| {
                o["spec"]["matchResources"]["resourceRules"] = json!([rule(&[""], &["v1"], &["configmaps"], &["CREATE"])])
            }),
        ),
        (
            "the foreign policy, relabelled as ours",
            NOT_OURS_PATCH,
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": foreign, "labels": {MANAGED_BY: INJECTOR_NAME}},
            }),
        ),
    ];
    let mut refused = 0;
    for (what, words, object) in &writes {
        scope.delete_later(resource_of(object), None, name(object));
        let message = refused_with(what, words, apply(&account, object).await);
        step!("refused {what}: {message}");
        refused += 1;
    }

    // The previous layout (a pair of policies per template): deleted, never written.
    let previous = variant(policy, "", |o| o["metadata"]["name"] = json!("envoy-injector-template-config"));
    scope.delete_later(resource_of(&previous), None, name(&previous));
    let message = refused_with(
        "a policy of the previous layout",
        NOT_NAMED_RBAC,
        apply(&account, &previous).await,
    );
    step!("refused writing a policy of the previous layout: {message}");
    refused += 1;
    apply_as(&suite.client, FIELD_MANAGER, &previous)
        .await
        .unwrap_or_else(|e| panic!("expected an admin to write {}, found: {}", name(&previous), api_error(&e)));
    // RBAC names the compiled objects only: the previous layout is an admin's to delete.
    let deleted = dynamic(&account, &previous)
        .delete(name(&previous), &DeleteParams::default())
        .await
        .map(|_| ());
    let message = refused_with("deleting a policy of the previous layout", NOT_OURS_DELETE, deleted);
    step!("refused deleting {} of the previous layout as the ServiceAccount: {message}", name(&previous));
    refused += 1;

    let deleted = dynamic(&account, &foreign_policy)
        .delete(&foreign, &DeleteParams::default())
        .await
        .map(|_| ());
    let message = refused_with("deleting the foreign policy", NOT_OURS_DELETE, deleted);
    step!("refused deleting the foreign policy: {message}");
    refused += 1;

    // The guard is loaded from disk: the API has no object of it to change or delete (and
    // the ServiceAccount's RBAC names no such object: refused before it is looked up).
    for (who, client) in [("an admin", &suite.client), ("the ServiceAccount", &account)] {
        match dynamic(client, &foreign_policy).delete(GUARD, &DeleteParams::default()).await {
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(kube::Error::Api(status)) if who == "the ServiceAccount" && status.message.contains(NOT_OURS_DELETE) => {}
            other => panic!(
                "expected {GUARD} out of reach of {who} (404: no such API object), found {:?}",
                other.map(|_| ()).map_err(|e| api_error(&e))
            ),
        }
    }
    let impostor = variant(policy, "", |o| o["metadata"]["name"] = json!(GUARD));
    match apply(&account, &impostor).await {
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 422 => {
            step!("the guard: no API object to delete (404), its name refused: {}", status.message);
            refused += 1;
        }
        other => panic!(
            "expected a policy named {GUARD} refused, found {:?}",
            other.map_err(|e| api_error(&e))
        ),
    }

    delete_as(&account, &compiled).await;
    Ok(format!(
        "{} compiled objects applied, read back and deleted as the ServiceAccount; {refused} writes outside them refused",
        compiled.len()
    ))
}

/// Whether the API server has loaded ValidatingAdmissionPolicies from disk.
async fn guard_loaded(client: &Client) -> bool {
    let request = http::Request::get("/metrics").body(Vec::new()).expect("a request");
    match client.request_text(request).await {
        Ok(text) => Samples::parse(&text)
            .0
            .iter()
            .any(|s| s.name == LOADED_SERIES && s.labels.get("plugin").is_some_and(|p| p == "ValidatingAdmissionPolicy")),
        Err(e) => {
            step!("cannot read the API server's /metrics ({}): the guard counts as not loaded", api_error(&e));
            false
        }
    }
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn dynamic(client: &Client, object: &Value) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource_of(object))
}

/// A server-side apply with `serve`'s field manager, as policy mode writes.
async fn apply(client: &Client, object: &Value) -> Result<(), kube::Error> {
    apply_as(client, INJECTOR_MANAGER, object).await
}

async fn apply_as(client: &Client, manager: &str, object: &Value) -> Result<(), kube::Error> {
    dynamic(client, object)
        .patch(name(object), &PatchParams::apply(manager).force(), &Patch::Apply(object))
        .await
        .map(|_| ())
}

async fn delete_as(client: &Client, objects: &[Value]) {
    for object in objects.iter().rev() {
        dynamic(client, object)
            .delete(name(object), &DeleteParams::default())
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "expected the ServiceAccount to delete {} {}, found: {}",
                    object["kind"],
                    name(object),
                    api_error(&e)
                )
            });
    }
}

/// The first compiled object of `kind`.
fn find<'a>(compiled: &'a [Value], kind: &str) -> &'a Value {
    compiled
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("expected a compiled {kind}"))
}

/// `base` (still ours by name: the guard allows only the names it compiles), edited.
fn variant(base: &Value, _what: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut object = base.clone();
    edit(&mut object);
    object
}

fn set_rules(object: &mut Value, rules: Value) {
    object["spec"]["matchConstraints"]["resourceRules"] = rules;
}

fn rule(groups: &[&str], versions: &[&str], resources: &[&str], operations: &[&str]) -> Value {
    json!({"apiGroups": groups, "apiVersions": versions, "resources": resources, "operations": operations})
}

/// Asserts `result` is the guard's refusal with `words` (or RBAC's, for words that are
/// RBAC's: `cannot VERB resource`); returns its message.
fn refused_with(what: &str, words: &str, result: Result<(), kube::Error>) -> String {
    let by_rbac = words.starts_with("cannot ");
    match result {
        Err(kube::Error::Api(status))
            if status.code == 403
                && (by_rbac || status.message.contains(&format!("ValidatingAdmissionPolicy '{GUARD}'")))
                && status.message.contains(words) =>
        {
            status.message
        }
        other => panic!(
            "expected {what} refused by {GUARD} with \"{words}\", found {:?}",
            other.map_err(|e| api_error(&e))
        ),
    }
}
