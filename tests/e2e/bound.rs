//! Tier `bound`: the automatic rollout's rights, bounded, tried as an attacker holding the
//! injector's ServiceAccount token would try them, on the real API server. Twice: with
//! `manifests/` and the component `manifests/auto-rollout/` through a kustomize overlay
//! that installs into a namespace of another name (`namespace: ei-e2e-bound-…`), and with
//! the chart (`autoRollout.enabled`) rendered for another release namespace. Of each
//! render, the ServiceAccount, its roles and the bound (`bound.yaml`: the policy and its
//! binding) are applied by an admin; every request below is then made with a TokenRequest
//! token of that ServiceAccount.
//!
//! Refused, each with the rule's words: a real Pod in an opted-in namespace; a privileged
//! `hostPID` Pod with the node's `/` mounted in `kube-system`; a Deployment's image
//! changed, a container added, scaled to zero; a restart in a namespace without the label
//! `sidecar.samplecrd.k8s.io/rollout=auto` and in `kube-system`; the bound and its binding
//! deleted or changed (by RBAC: no right of the ServiceAccount names them). Allowed: a
//! dry-run Pod, and a restart (the Pod template's `kubectl.kubernetes.io/restartedAt`, as
//! `serve --auto-rollout` writes it) in a labelled namespace. An admin is not bound.

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::common::helm;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "bound",
    run: |suite| Box::pin(run(suite)),
};

const BOUND: &str = "envoy-injector-rollout";
const AUTO: (&str, &str) = ("sidecar.samplecrd.k8s.io/rollout", "auto");
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// The kinds of a render applied: the identity, its rights and their bound.
const APPLIED: [&str; 7] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

const DRY_RUN_ONLY: &str = "envoy-injector-rollout (Pods only as dry runs)";
const RESTART_ONLY: &str = "envoy-injector-rollout (restart only)";
const OPTED_IN_ONLY: &str = "envoy-injector-rollout (opted-in namespaces only)";

async fn run(suite: &Suite) -> TierResult {
    require_kubectl()?;
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let labelled = TestNs::create(client, &scope, "bound-auto", &[AUTO]).await;
    let plain = TestNs::create(client, &scope, "bound-plain", &[]).await;
    for kind in ["ClusterRole", "ClusterRoleBinding"] {
        scope.delete_later(resource(kind), None, BOUND);
    }
    scope.delete_later(resource("ValidatingAdmissionPolicy"), None, BOUND);
    scope.delete_later(resource("ValidatingAdmissionPolicyBinding"), None, BOUND);
    let suffix = unique_suffix();
    let system_app = format!("ei-e2e-bound-{suffix}");
    scope.delete_later(ApiResource::erase::<Deployment>(&()), Some("kube-system"), &system_app);
    for (namespace, name) in [(labelled.name.as_str(), "app"), (plain.name.as_str(), "app"), ("kube-system", system_app.as_str())] {
        Api::<Deployment>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &deployment(name, 1, &[], DEFAULT_IMAGE))
            .await
            .unwrap_or_else(|e| panic!("expected an admin to create Deployment {namespace}/{name}, found: {}", api_error(&e)));
    }

    let mut sources = vec![("kustomize overlay", format!("ei-e2e-bound-k-{suffix}"))];
    let helm_engine = helm::engine("tier bound's chart render").ok();
    if helm_engine.is_some() {
        sources.push(("chart", format!("ei-e2e-bound-h-{suffix}")));
    }
    for (source, namespace) in &sources {
        TestNs::create_named(client, &scope, namespace, &[]).await;
        let rendered = match *source {
            "chart" => helm_engine
                .as_ref()
                .expect("checked above")
                .render(namespace, r#"{"autoRollout": {"enabled": true}}"#)
                .unwrap_or_else(|e| panic!("expected the chart to render, found: {e}")),
            _ => overlay(namespace),
        };
        let objects: Vec<Value> = rendered
            .into_iter()
            .filter(|o| APPLIED.contains(&o["kind"].as_str().unwrap_or_default()))
            .collect();
        kubectl_apply(&objects).await;
        let account = service_account_client(client, namespace).await;
        step!("{source}: installed into namespace {namespace}; acting as ServiceAccount {namespace}/{INJECTOR_NAME}");
        attacks(client, &account, source, &labelled.name, &plain.name, &system_app).await;
    }
    if helm_engine.is_none() {
        return Err(Skip(
            "the kustomize overlay's bound held; the chart's was not tried: the Helm engine is not installed (`make helm-sdk`)".into(),
        ));
    }
    Ok(format!(
        "{} installations ({}) bounded: 13 attempts refused (8 on Pods and workloads, 5 on the bound) and 2 legitimate requests allowed in each",
        sources.len(),
        sources.iter().map(|(s, n)| format!("{s} in {n}")).collect::<Vec<_>>().join(", ")
    ))
}

async fn attacks(admin: &Client, account: &Client, source: &str, labelled: &str, plain: &str, system_app: &str) {
    // The API server loads a policy a moment after it is written: wait until a restart
    // where none is allowed is refused by it (a restart of a test Deployment meanwhile
    // is harmless).
    wait_for(&format!("{source}: the bound in force"), PATIENCE, async || {
        match restart(account, plain, "app").await {
            Err(message) if message.contains(OPTED_IN_ONLY) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let refused = |what: &str, found: Result<String, String>, words: &str| {
        match found {
            Err(message) if message.contains(words) => {
                step!("{source}: {what}: refused: {message}");
            }
            other => panic!("{source}: expected {what} to be refused with {words:?}, found {other:?}"),
        }
    };
    refused("a real Pod in an opted-in namespace", create_pod(account, labelled, pod("real", &[], DEFAULT_IMAGE), false).await, DRY_RUN_ONLY);
    refused("a privileged hostPID Pod mounting / in kube-system", create_pod(account, "kube-system", privileged(), false).await, DRY_RUN_ONLY);
    match create_pod(account, labelled, pod("probe", &[], DEFAULT_IMAGE), true).await {
        Ok(name) => step!("{source}: a dry-run Pod: allowed ({name}, nothing stored)"),
        Err(e) => panic!("{source}: expected a dry-run Pod to be allowed, found {e}"),
    }
    let deployments = Api::<Deployment>::namespaced(account.clone(), labelled);
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "registry.example/evil:1"}]}}}});
    refused("an image change", patch(&deployments, "app", &image).await, RESTART_ONLY);
    let added = json!({"spec": {"template": {"spec": {"containers": [{"name": "extra", "image": "registry.example/evil:1"}]}}}});
    refused("an added container", patch(&deployments, "app", &added).await, RESTART_ONLY);
    refused("a scale to zero", patch(&deployments, "app", &json!({"spec": {"replicas": 0}})).await, RESTART_ONLY);
    let sneaked = json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: "now"}}, "spec": {"hostPID": true}}}});
    refused("a restart carrying a Pod spec change", patch(&deployments, "app", &sneaked).await, RESTART_ONLY);
    refused("a restart in a namespace that did not opt in", restart(account, plain, "app").await, OPTED_IN_ONLY);
    refused("a restart in kube-system", restart(account, "kube-system", system_app).await, OPTED_IN_ONLY);
    match restart(account, labelled, "app").await {
        Ok(at) => step!("{source}: a restart in a labelled namespace: allowed ({RESTARTED_AT}={at})"),
        Err(e) => panic!("{source}: expected a restart in labelled namespace {labelled} to be allowed, found {e}"),
    }

    // The bound itself: no right of the ServiceAccount names it.
    let policies = Api::<ValidatingAdmissionPolicy>::all(account.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(account.clone());
    let forbidden = |what: &str, found: Result<(), kube::Error>| match found {
        Err(kube::Error::Api(status)) if status.code == 403 => step!("{source}: {what}: refused: {}", status.message),
        other => panic!("{source}: expected {what} to be refused (403), found {:?}", other.map_err(|e| api_error(&e))),
    };
    let audit_only = json!({"spec": {"validationActions": ["Audit"]}});
    let ignore = json!({"spec": {"failurePolicy": "Ignore"}});
    let merge = |v: &Value| Patch::Merge(v.clone());
    forbidden("deleting the bound", policies.delete(BOUND, &DeleteParams::default()).await.map(|_| ()));
    forbidden("deleting its binding", bindings.delete(BOUND, &DeleteParams::default()).await.map(|_| ()));
    forbidden("changing the bound", policies.patch(BOUND, &PatchParams::default(), &merge(&ignore)).await.map(|_| ()));
    forbidden("changing its binding", bindings.patch(BOUND, &PatchParams::default(), &merge(&audit_only)).await.map(|_| ()));
    let taken_over = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": BOUND}, "spec": {"policyName": BOUND, "validationActions": ["Audit"]}});
    forbidden(
        "applying its binding anew",
        bindings
            .patch(BOUND, &PatchParams::apply(INJECTOR_NAME).force(), &Patch::Apply(&taken_over))
            .await
            .map(|_| ()),
    );
    // An admin is not bound.
    Api::<Deployment>::namespaced(admin.clone(), plain)
        .patch("app", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}})))
        .await
        .unwrap_or_else(|e| panic!("{source}: expected an admin to scale {plain}/app, found: {}", api_error(&e)));
    Api::<Deployment>::namespaced(admin.clone(), plain)
        .patch("app", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}})))
        .await
        .unwrap_or_else(|e| panic!("{source}: expected an admin to scale {plain}/app back, found: {}", api_error(&e)));
    step!("{source}: an admin scales a Deployment of a namespace that did not opt in: not bound");
}

fn resource(kind: &str) -> ApiResource {
    let (group, plural) = match kind {
        "ClusterRole" => ("rbac.authorization.k8s.io", "clusterroles"),
        "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "clusterrolebindings"),
        "ValidatingAdmissionPolicy" => ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
        _ => ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
    };
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// `manifests/` with the component, through an overlay that installs into `namespace`.
fn overlay(namespace: &str) -> Vec<Value> {
    let dir = manifest_path("target").join(format!("e2e-bound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("an overlay directory under target/");
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!("namespace: {namespace}\nresources: [../../manifests]\ncomponents: [../../manifests/auto-rollout]\n"),
    )
    .expect("write the overlay");
    let text = crate::common::kubectl::kustomize(&dir).unwrap_or_else(|e| panic!("expected the overlay to render, found: {e}"));
    std::fs::remove_dir_all(&dir).ok();
    helm::yaml_documents(&text)
}

/// A client that is ServiceAccount `namespace/envoy-injector`: a TokenRequest token, the
/// suite's server and certificate authority, no other credential.
async fn service_account_client(admin: &Client, namespace: &str) -> Client {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(INJECTOR_NAME, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("expected a token for ServiceAccount {namespace}/{INJECTOR_NAME}, found: {}", api_error(&e)))
        .status
        .expect("a TokenRequest answer has a status")
        .token;
    let mut config = kube::Config::infer().await.expect("KUBECONFIG names a cluster");
    config.auth_info = kube::config::AuthInfo {
        token: token.map(Into::into),
        ..kube::config::AuthInfo::default()
    };
    Client::try_from(config).expect("a client for the ServiceAccount")
}

fn privileged() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root"},
        "spec": {
            "hostPID": true,
            "containers": [{"name": "root", "image": DEFAULT_IMAGE, "securityContext": {"privileged": true},
                "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        },
    }))
    .expect("a Pod")
}

/// A Pod created as the client; `Ok` its name, `Err` the API server's words.
async fn create_pod(client: &Client, namespace: &str, pod: Pod, dry_run: bool) -> Result<String, String> {
    let params = PostParams {
        dry_run,
        field_manager: None,
    };
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&params, &pod)
        .await
        .map(|p| p.metadata.name.unwrap_or_default())
        .map_err(|e| api_error(&e))
}

async fn patch(api: &Api<Deployment>, name: &str, patch: &Value) -> Result<String, String> {
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(|d| d.metadata.resource_version.unwrap_or_default())
        .map_err(|e| api_error(&e))
}

/// A restart as `serve --auto-rollout` makes it; `Ok` the time set.
async fn restart(client: &Client, namespace: &str, name: &str) -> Result<String, String> {
    let at = k8s_openapi::jiff::Timestamp::now().to_string();
    let body = json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: at}}}}});
    patch(&Api::<Deployment>::namespaced(client.clone(), namespace), name, &body)
        .await
        .map(|_| at)
}

