//! Tier `check`: `envoy-injector check` on scenarios built in the cluster, its text output
//! compared with the golden files in `tests/golden/check/` (`UPDATE_GOLDEN=1` rewrites them;
//! review the diff), its `-o json` and exit codes asserted.
//!
//! A local `serve` (cluster mode, `--network-backend none`) is the injector of namespace
//! `ei-check-<id>` (its ConfigMap, TLS Secret and Lease there), registered through the
//! shipped mutating and validating configurations sent by `url:` to 127.0.0.1 and narrowed
//! to this tier's namespaces (`ei-check-<id>-labelled`, opted in by label, and
//! `ei-check-<id>-plain`; the golden files name them). Checked: every decision rule from a
//! manifest (nothing created), Pods the injector really injected (a Deployment's, through
//! its ReplicaSet) and a healthy installation, then the upgrade of the default template
//! (`config` goes from the previous default, shipped now as `classic`, to the current one):
//! a Pod created after it gets the new sidecar and `check --stale` lists the Deployment
//! whose Pods are on the old revision; then a `caBundle` from another CA, an expired
//! serving certificate and the webhooks behind a Service without endpoints.
//!
//! First, before anything is installed: `check` says what is true of that (golden
//! `no-installation.txt`), reading the API server's version once; and once installed, a
//! bare Pod whose sidecar image was rewritten after injection is named alone by `--drift`.
//!
//! Which path injects: the injector's Deployment (no replica: `serve` runs here) says
//! `--injection=webhook` first, so every Pod above is the webhook's. Then it says nothing
//! (`auto`: this API server serves MutatingAdmissionPolicy v1, so policies are expected) and
//! the policies `envoy-injector policies` compiles from the live ConfigMap are applied,
//! bound to this tier's namespaces and to `ei-check-<id>-policies`, which only the policies
//! reach, where a Pod was created before them. Checked: `check` names the policy and binding
//! (or the validating policy that denies, or the webhook and why) for each Pod; `--missing`
//! says that Pod was created before the policies; deleting one binding, then editing a
//! policy's revision label, fail the check naming the object and both revisions;
//! `--injection=webhook` with the policies still there is a warning.

use std::time::Duration;

use envoy_injector::tls;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::ListParams;
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::common::policies::{narrow, resource_of};
use crate::policies::compile;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "check",
    run: |suite| Box::pin(run(suite)),
};

/// `config` before the upgrade: the previous default (its Envoy on port 80, a volume
/// `envoy-conf`), which ships now as `classic`.
const BEFORE_UPGRADE: &str = envoy_injector::template::EMBEDDED_CLASSIC;
/// `config` after it: the current default.
const AFTER_UPGRADE: &str = envoy_injector::template::EMBEDDED_DEFAULT;

/// Replaces what changes from run to run (names, ports, times) so outputs compare.
fn normalise(output: &str, id: &str) -> String {
    let replacements = [
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<time>"),
        (r"\(\d+ days left\)", "(<n> days left)"),
        (r"127\.0\.0\.1:\d+", "127.0.0.1:<port>"),
        (r"web-[0-9a-f]{6,10}-[0-9a-z]{5}", "web-<pod>"),
    ];
    let mut out = output.replace(id, "<id>");
    for (pattern, with) in replacements {
        out = regex::Regex::new(pattern)
            .expect("a valid pattern")
            .replace_all(&out, with)
            .into_owned();
    }
    out
}

/// Compares `actual` with `tests/golden/check/<name>`, or writes it there with
/// `UPDATE_GOLDEN` set.
fn golden(name: &str, actual: &str) {
    let path = manifest_path("tests/golden/check").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent directory")).expect("create tests/golden/check");
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}); run with UPDATE_GOLDEN=1 to write it",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "`check` output differs from {}:\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

/// `envoy-injector check ARGS`, which must answer with exit code 0 or 1 (also for tier
/// `missing`).
pub(crate) async fn check(args: &[impl AsRef<str>]) -> Ran {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    envoy_injector("check", &args).await
}

/// Waits until a server-side dry run of `probe` (a Pod manifest) comes back injected: the
/// API server calls the injector once it has the configuration, or runs the compiled
/// policies once it has them (also for tier `missing`).
pub(crate) async fn wait_for_dry_run_injection(probe: &Value) {
    wait_for_dry_run_with(probe, STATUS).await;
}

/// Waits until a server-side dry run of `probe` comes back holding `text`.
async fn wait_for_dry_run_with(probe: &Value, text: &str) {
    let probe = probe.to_string();
    wait_for(&format!("a dry run to come back with {text:?}"), PATIENCE * 2, async || {
        let out = kubectl(
            &[
                "create",
                "--dry-run=server",
                "--validate=false",
                "-o",
                "json",
                "-f",
                "-",
            ],
            Some(&probe),
        )
        .await;
        if String::from_utf8_lossy(&out.stdout).contains(text) {
            Ok(())
        } else {
            Err(describe_output(&out))
        }
    })
    .await;
}

/// A Pod manifest with `annotations` and `spec`, in `namespace`.
fn pod_doc(namespace: &str, name: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": namespace, "annotations": annotations },
        "spec": spec,
    })
}

fn app_spec() -> Value {
    json!({ "containers": [{ "name": "app", "image": "app:1" }] })
}

/// The injector's Deployment as `check` reads it, its container's args saying which path
/// `serve` sets up; no replica (`serve` runs beside the test).
fn injector_deployment(namespace: &str, args: &[&str]) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": INJECTOR_NAME, "namespace": namespace },
        "spec": {
            "replicas": 0,
            "selector": { "matchLabels": { "app": "envoy-injector-check" } },
            "template": {
                "metadata": { "labels": { "app": "envoy-injector-check" } },
                "spec": { "containers": [{ "name": INJECTOR_NAME, "image": "envoy-injector:dev", "args": args }] },
            },
        },
    })
}

/// Writes `documents` as a manifest file in `dir`, named `name`.
fn manifest(dir: &tempfile::TempDir, name: &str, documents: &[Value]) -> String {
    let path = dir.path().join(name);
    // JSON documents in a YAML stream: every string stays quoted, so `"yes"` is read as
    // the string kubectl reads, not YAML 1.1's boolean.
    let yaml: Vec<String> = documents
        .iter()
        .map(|d| serde_json::to_string_pretty(d).expect("JSON"))
        .collect();
    std::fs::write(&path, yaml.join("\n---\n")).expect("write the manifest");
    path.to_str().expect("a UTF-8 temporary path").to_string()
}

/// The injector's TLS Secret holding `certs`.
fn secret(namespace: &str, certs: &tls::ServiceCerts) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": { "name": "envoy-injector-tls", "namespace": namespace },
        "data": {
            "tls.crt": base64(certs.serving.cert_pem.as_bytes()),
            "tls.key": base64(certs.serving.key_pem.as_bytes()),
            "ca.crt": base64(certs.ca.cert_pem.as_bytes()),
        },
    })
}

async fn run(suite: &Suite) -> TierResult {
    let (scope, id) = suite.loopback_tier_with_kubectl()?;
    let client = &suite.client;
    let injector = format!("ei-check-{id}");
    let labelled = format!("ei-check-{id}-labelled");
    let plain = format!("ei-check-{id}-plain");
    TestNs::create_named(client, &scope, &injector, &[(NAMESPACE_OPT_IN.0, "disabled")]).await;
    let labelled_ns = TestNs::create_named(client, &scope, &labelled, &[NAMESPACE_OPT_IN]).await;
    let plain_ns = TestNs::create_named(client, &scope, &plain, &[]).await;
    // `serve` in cluster mode watches Networks: the CRD must be served.
    suite.install_network_crd().await;
    let webhook_config = format!("envoy-injector-check-{id}");
    let flags = [
        "--injector-namespace",
        &injector,
        "--webhook-config",
        &webhook_config,
        "--validating-webhook-config",
        &webhook_config,
    ];
    let with = |extra: &[&str]| -> Vec<String> { flags.iter().chain(extra).map(|s| s.to_string()).collect() };
    let dir = temp_dir("envoy-injector-e2e-check");

    // Nothing installed yet: each object's own line fails, and no line says a Pod is
    // denied for want of templates or that a webhook injects.
    let opted_in = manifest(
        &dir,
        "opted-in.yaml",
        &[pod_doc(&plain, "by-annotation", json!({ INJECT: "true" }), app_spec())],
    );
    let run = check(&with(&["-f", &opted_in])).await;
    golden("no-installation.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1, "a missing installation fails the check:\n{}", run.stdout);
    for contradiction in ["denied until", "the webhook injects"] {
        assert!(!run.stdout.contains(contradiction), "{contradiction}:\n{}", run.stdout);
    }
    let version_read = run.stderr.matches("checking template values with the rules").count();
    assert_eq!(version_read, 1, "the API server's version is read once:\n{}", run.stderr);
    step!("check with nothing installed: each line true of that, the version read once (golden no-installation.txt)");

    let certs = tls::generate(INJECTOR_NAME, &injector, &["127.0.0.1".to_string()], 365).expect("test certificates");
    kubectl_apply(&[
        in_namespace(&configmap_object(INJECTOR_NAME, BEFORE_UPGRADE), &injector),
        secret(&injector, &certs),
        injector_deployment(&injector, &["serve", "--injection=webhook"]),
    ])
    .await;
    let (serve, webhook) = serve_on_loopback(
        "check",
        &certs,
        &[
            "--namespace",
            &injector,
            "--network-backend",
            "none",
            "--identity",
            "check-test-replica",
        ],
    ).await;
    serve.wait_ready().await;
    scope.delete_later(
        ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        None,
        &webhook_config,
    );
    scope.delete_later(
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        None,
        &webhook_config,
    );
    let mutate_url = format!("https://{webhook}/mutate");
    let app_namespaces = [labelled.as_str(), plain.as_str(), "kube-system"];
    let mutating = |ca_pem: &str, namespaces: &[&str]| {
        shipped_webhooks_at(
            "manifests/webhook.yaml",
            &webhook_config,
            &mutate_url,
            ca_pem.as_bytes(),
            namespaces,
        )
    };
    kubectl_apply(&[
        mutating(&certs.ca.cert_pem, &app_namespaces),
        shipped_webhooks_at(
            "manifests/validating-webhook.yaml",
            &webhook_config,
            &format!("https://{webhook}/validate"),
            certs.ca.cert_pem.as_bytes(),
            &[&injector],
        ),
    ])
    .await;
    // The API server calls the injector once it has the configuration.
    wait_for_dry_run_injection(&pod_doc(&labelled, "probe", json!({}), app_spec())).await;

    // Every decision rule, from a manifest (nothing is created).
    let scenarios = [
        pod_doc(&labelled, "by-namespace-label", json!({}), app_spec()),
        pod_doc(&plain, "by-annotation", json!({ INJECT: "true" }), app_spec()),
        pod_doc(
            &plain,
            "by-legacy-annotation",
            json!({ "initializer.kubernetes.io/envoy": "true" }),
            app_spec(),
        ),
        pod_doc(&labelled, "opted-out", json!({ INJECT: "false" }), app_spec()),
        pod_doc(&plain, "not-opted-in", json!({ INJECT: "yes" }), app_spec()),
        pod_doc(
            &labelled,
            "host-network",
            json!({}),
            json!({ "hostNetwork": true, "containers": [{ "name": "app", "image": "app:1" }] }),
        ),
        pod_doc("kube-system", "in-kube-system", json!({ INJECT: "true" }), app_spec()),
        pod_doc(
            &labelled,
            "volume-clash",
            json!({}),
            json!({ "containers": [{ "name": "app", "image": "app:1" }], "volumes": [{ "name": "envoy-conf", "configMap": { "name": "mine" } }] }),
        ),
        pod_doc(
            &labelled,
            "port-clash",
            json!({}),
            json!({ "containers": [{ "name": "app", "image": "app:1", "ports": [{ "containerPort": 80 }] }] }),
        ),
        pod_doc(
            &labelled,
            "unknown-template",
            json!({ "sidecar.samplecrd.k8s.io/template": "nope" }),
            app_spec(),
        ),
        pod_doc(&labelled, "missing-network", json!({ NETWORK: "net1" }), app_spec()),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": labelled },
            "spec": {
                "replicas": 2,
                "selector": { "matchLabels": { "app": "web" } },
                "template": { "metadata": { "labels": { "app": "web" } }, "spec": app_spec() },
            },
        }),
    ];
    let scenarios_file = manifest(&dir, "scenarios.yaml", &scenarios);
    let scenarios_file = scenarios_file.as_str();
    let run = check(&with(&["-f", scenarios_file])).await;
    golden("decisions.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1, "Pods that would be denied fail the check:\n{}", run.stdout);
    let run = check(&with(&["-f", scenarios_file, "-o", "json"])).await;
    let report: Value = serde_json::from_str(&run.stdout).expect("-o json prints JSON");
    let rules: Vec<(&str, &str)> = report["pods"]
        .as_array()
        .expect("a list of Pods")
        .iter()
        .map(|p| {
            (
                p["rule"].as_str().expect("a rule"),
                p["verdict"].as_str().expect("a verdict"),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("namespace-label", "inject"),
            ("annotation", "inject"),
            ("legacy-annotation", "inject"),
            ("opted-out", "skip"),
            ("not-opted-in", "skip"),
            ("host-network", "skip"),
            ("webhook-not-called", "skip"),
            ("collision", "deny"),
            ("collision", "deny"),
            ("unknown-template", "deny"),
            ("network", "deny"),
            ("namespace-label", "inject"),
        ]
    );
    assert_eq!(report["healthy"], false);
    step!("check explains every decision rule (golden decisions.txt)");

    // Pods the injector really injected (a Deployment's, through its ReplicaSet), and one
    // that opted out; a healthy installation.
    kubectl_apply(&[
        scenarios[11].clone(),
        pod_doc(&labelled, "opted-out", json!({ INJECT: "false" }), app_spec()),
    ])
    .await;
    wait_for("the Deployment's two Pods", PATIENCE * 2, async || {
        let pods = labelled_ns
            .pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .map_err(|e| api_error(&e))?;
        match pods.items.len() {
            2 => Ok(()),
            n => Err(format!("{n} Pods")),
        }
    })
    .await;
    let run = check(&with(&["-n", &labelled, "--stale"])).await;
    golden("namespace-healthy.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 0, "a healthy installation passes:\n{}", run.stdout);

    // A bare Pod the injector injected, its sidecar's image then rewritten (as a later
    // webhook would): `--drift` names it alone, nothing owning it.
    kubectl_apply(&[pod_doc(&plain, "bare", json!({ INJECT: "true" }), app_spec())]).await;
    let bare = plain_ns.pods.get("bare").await.expect("the bare Pod");
    let containers = bare.spec.expect("a spec").containers;
    let envoy = containers.iter().position(|c| c.name == "envoy").expect("the injected sidecar");
    let rewrite = format!(
        r#"[{{"op":"replace","path":"/spec/containers/{envoy}/image","value":"mirror.example/envoy:1"}}]"#
    );
    let patched = kubectl(&["patch", "pod", "bare", "-n", &plain, "--type=json", "-p", &rewrite], None).await;
    assert!(patched.status.success(), "{}", String::from_utf8_lossy(&patched.stderr));
    let run = check(&with(&["-n", &plain, "--drift"])).await;
    assert_eq!(run.code, 1, "drift fails the check:\n{}", run.stdout);
    assert!(
        run.stdout.contains(&format!("\n  Pod {plain}/bare: template `config` revision ")),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains(" of Pod "), "{}", run.stdout);
    plain_ns.pods.delete("bare", &Default::default()).await.expect("delete the bare Pod");
    step!("check --drift names a drifted bare Pod alone, with no owner");

    // The upgrade: a Pod created after it gets the new sidecar, and the Deployment's Pods,
    // injected before it, are stale.
    kubectl_apply(&[in_namespace(&configmap_object(INJECTOR_NAME, AFTER_UPGRADE), &injector)]).await;
    let new_image = embedded_image(envoy_injector::template::DEFAULT_TEMPLATE);
    wait_for_dry_run_with(&pod_doc(&labelled, "after-upgrade", json!({}), app_spec()), &new_image).await;
    let run = check(&with(&["-n", &labelled, "--stale"])).await;
    golden("stale.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 0, "stale sidecars are a warning:\n{}", run.stdout);
    let run = check(&with(&["--stale", "-o", "json"])).await;
    let report: Value = serde_json::from_str(&run.stdout).expect("-o json prints JSON");
    let stale = report["stale"].as_array().expect("a list of stale workloads");
    let ours: Vec<&Value> = stale.iter().filter(|g| g["namespace"] == labelled.as_str()).collect();
    assert_eq!(ours.len(), 1, "{stale:?}");
    assert_eq!(ours[0]["kind"], "Deployment");
    assert_eq!(
        ours[0]["fix"],
        format!("kubectl rollout restart deployment/web -n {labelled}")
    );
    step!("check: a healthy installation; after the upgrade new Pods get {new_image} and `check --stale` lists the Deployment");

    // A caBundle from another CA; then an expired serving certificate (same CA); then the
    // webhooks behind a Service without endpoints.
    let other = tls::generate(INJECTOR_NAME, &injector, &["127.0.0.1".to_string()], 365).expect("other certificates");
    kubectl_apply(&[mutating(&other.ca.cert_pem, &app_namespaces)]).await;
    let run = check(&with(&[])).await;
    golden("ca-bundle-mismatch.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1);
    kubectl_apply(&[mutating(&certs.ca.cert_pem, &app_namespaces)]).await;

    let issued = time::OffsetDateTime::now_utc() - time::Duration::days(30);
    let expired_leaf = tls::sign_serving_cert(
        &certs.ca,
        INJECTOR_NAME,
        &injector,
        issued,
        issued + time::Duration::days(2),
    )
    .expect("an expired serving certificate");
    let expired = tls::ServiceCerts {
        ca: certs.ca.clone(),
        serving: expired_leaf,
    };
    kubectl_apply(&[secret(&injector, &expired)]).await;
    let run = check(&with(&[])).await;
    golden("certificate-expired.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1);
    kubectl_apply(&[secret(&injector, &certs)]).await;

    let mut behind_service = mutating(&certs.ca.cert_pem, &["none-of-ours"]);
    for hook in behind_service["webhooks"].as_array_mut().expect("webhooks") {
        hook["clientConfig"] = json!({
            "service": { "name": INJECTOR_NAME, "namespace": injector, "port": 443, "path": "/mutate" },
            "caBundle": base64(certs.ca.cert_pem.as_bytes()),
        });
    }
    kubectl_apply(&[
        behind_service,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": INJECTOR_NAME, "namespace": injector },
            "spec": { "selector": { "app": "envoy-injector-check-nothing" }, "ports": [{ "port": 443, "targetPort": 8443 }] },
        }),
    ])
    .await;
    let run = check(&with(&[])).await;
    golden("service-without-endpoints.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1);
    step!("check fails a foreign caBundle, an expired certificate, a Service without endpoints");

    policy_path(&scope, &id, &injector, &with, &dir, || mutating(&certs.ca.cert_pem, &app_namespaces)).await;
    Ok(String::new())
}

/// The compiled admission policies applied (as a GitOps user applies them: no `serve`
/// holds the Lease here to do it), and what `check` says of them.
async fn policy_path(
    scope: &Scope,
    id: &str,
    injector: &str,
    with: &dyn Fn(&[&str]) -> Vec<String>,
    dir: &tempfile::TempDir,
    webhook: impl Fn() -> Value,
) {
    let client = kube::Client::try_default().await.expect("a client");
    let (labelled, plain) = (format!("ei-check-{id}-labelled"), format!("ei-check-{id}-plain"));
    // The webhook back on 127.0.0.1 for this tier's namespaces, so nothing else fails.
    kubectl_apply(&[webhook()]).await;
    // A namespace only the policies reach, and a Pod created there before them.
    let reached = format!("ei-check-{id}-policies");
    TestNs::create_named(&client, scope, &reached, &[NAMESPACE_OPT_IN]).await;
    kubectl_apply(&[pod_doc(&reached, "early", json!({}), app_spec())]).await;
    // creationTimestamps are whole seconds: the policies come a second later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // No `--injection`: `auto`, and this API server serves MutatingAdmissionPolicy v1.
    kubectl_apply(&[injector_deployment(injector, &["serve", "--log-format", "json"])]).await;
    let configmap = serde_json::to_value(configmap_object(INJECTOR_NAME, AFTER_UPGRADE)).expect("JSON");
    let compiled = narrow(
        &compile(&configmap, injector),
        &[labelled.clone(), plain.clone(), reached.clone()],
    );
    for object in &compiled {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        scope.delete_later(resource_of(object), None, name);
    }
    kubectl_apply(&compiled).await;
    wait_for_dry_run_injection(&pod_doc(&reached, "probe", json!({}), app_spec())).await;

    let clash = || json!({ "containers": [{ "name": "app", "image": "app:1", "ports": [{ "containerPort": 15006 }] }] });
    let scenarios = [
        pod_doc(&reached, "by-namespace-label", json!({}), app_spec()),
        pod_doc(&plain, "by-annotation", json!({ INJECT: "true" }), app_spec()),
        pod_doc(&reached, "port-clash", json!({}), clash()),
        pod_doc(
            &reached,
            "unknown-template",
            json!({ "sidecar.samplecrd.k8s.io/template": "nope" }),
            app_spec(),
        ),
        // The webhook is called for it too, and refuses it before the validating policies.
        pod_doc(&labelled, "port-clash", json!({}), clash()),
        pod_doc("kube-system", "in-kube-system", json!({ INJECT: "true" }), app_spec()),
    ];
    let file = manifest(dir, "policies.yaml", &scenarios);
    let run = check(&with(&["-f", &file])).await;
    golden("policies.txt", &normalise(&run.stdout, id));
    assert_eq!(run.code, 1, "Pods that would be denied fail the check:\n{}", run.stdout);
    let run = check(&with(&["-f", &file, "-o", "json"])).await;
    let report: Value = serde_json::from_str(&run.stdout).expect("-o json prints JSON");
    let paths: Vec<Value> = report["pods"]
        .as_array()
        .expect("a list of Pods")
        .iter()
        .map(|p| json!([p["verdict"], p["path"]["via"], p["path"]["kind"], p["path"]["policy"], p["path"]["binding"]]))
        .collect();
    let (policy, by_namespace) = ("envoy-injector-inject", "envoy-injector-inject-namespace");
    let annotated = "envoy-injector-inject-annotated";
    let refused = "envoy-injector-refused";
    assert_eq!(
        paths,
        [
            json!(["inject", "policy", "MutatingAdmissionPolicy", policy, by_namespace]),
            json!(["inject", "policy", "MutatingAdmissionPolicy", annotated, annotated]),
            json!(["deny", "policy", "ValidatingAdmissionPolicy", refused, refused]),
            json!(["deny", "policy", "ValidatingAdmissionPolicy", refused, refused]),
            json!(["deny", "webhook", null, null, null]),
            json!(["skip", "webhook", null, null, null]),
        ],
        "{}",
        run.stdout
    );
    // The API server agrees on who refuses: the validating policy the mark selects where
    // no webhook is called, the webhook first where one is (it picks policies up a moment
    // after they are written).
    let by_policy = format!("ValidatingAdmissionPolicy '{refused}' with binding '{refused}' denied request");
    for (document, refused_by) in [
        (&scenarios[2], by_policy.clone()),
        (&scenarios[3], by_policy),
        (&scenarios[4], String::from("admission webhook \"namespace.sidecar.samplecrd.k8s.io\" denied the request")),
    ] {
        let document = document.to_string();
        wait_for(&format!("a refusal by {refused_by}"), PATIENCE, async || {
            let out = kubectl(&["create", "--dry-run=server", "--validate=false", "-f", "-"], Some(&document)).await;
            if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains(&refused_by) {
                Ok(())
            } else {
                Err(describe_output(&out))
            }
        })
        .await;
    }
    let checks = |report: &Value| -> Vec<(String, String)> {
        report["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .filter(|c| c["check"] == "injection" || c["check"] == "admission-policies")
            .map(|c| (c["check"].as_str().unwrap_or_default().to_string(), c["status"].as_str().unwrap_or_default().to_string()))
            .collect()
    };
    let ok = |check: &str| (check.to_string(), String::from("ok"));
    assert_eq!(checks(&report), [ok("injection"), ok("admission-policies")]);
    step!("check names the policy and binding that inject or deny each Pod (golden policies.txt)");

    // The Pod created before the policies: listed with the policy's creation as the reason.
    let run = check(&with(&["-n", &reached, "--missing"])).await;
    golden("policies-missing.txt", &normalise(&run.stdout, id));
    assert_eq!(run.code, 1, "an opted-in Pod without the sidecar fails:\n{}", run.stdout);
    let run = check(&with(&["-n", &reached, "--missing", "-o", "json"])).await;
    let report: Value = serde_json::from_str(&run.stdout).expect("-o json prints JSON");
    let reasons: Vec<&str> = report["missing"]
        .as_array()
        .expect("a `missing` list")
        .iter()
        .flat_map(|g| g["reasons"].as_array().into_iter().flatten())
        .filter_map(|r| r["reason"].as_str())
        .collect();
    assert_eq!(reasons, ["before-policies"], "{}", run.stdout);
    let run = check(&with(&["-n", &reached])).await;
    assert_eq!(run.code, 0, "policies in step pass:\n{}", run.stdout);
    step!("check --missing: the Pod created before the policies is named so (golden policies-missing.txt)");

    // One binding deleted: the check fails, naming it; the Pod's path is the webhook's.
    let deleted = kubectl(&["delete", "mutatingadmissionpolicybinding", by_namespace], None).await;
    assert!(deleted.status.success(), "{}", describe_output(&deleted));
    let run = check(&with(&["-n", &reached])).await;
    golden("policy-deleted.txt", &normalise(&run.stdout, id));
    assert_eq!(run.code, 1, "a policy missing fails:\n{}", run.stdout);
    assert!(
        run.stdout.contains(&format!("MutatingAdmissionPolicyBinding {by_namespace}: expected it, found none")),
        "{}",
        run.stdout
    );

    // Put back, then the revision it holds edited: the check names both revisions.
    kubectl_apply(&compiled).await;
    let held = "sidecar.samplecrd.k8s.io/templates={\"config\":\"0ld0ld0ld0ld\"}";
    let edited = kubectl(&["annotate", "mutatingadmissionpolicy", policy, held, "--overwrite"], None).await;
    assert!(edited.status.success(), "{}", describe_output(&edited));
    let run = check(&with(&["-n", &reached])).await;
    golden("policy-out-of-step.txt", &normalise(&run.stdout, id));
    assert_eq!(run.code, 1, "a policy out of step fails:\n{}", run.stdout);
    let live = envoy_injector::template::TemplateSet::from_data(
        "check",
        &std::collections::BTreeMap::from([("config".to_string(), AFTER_UPGRADE.to_string())]),
        envoy_injector::template::KubeVersion::NEWEST,
    )
    .expect("the edited template")
    .get("config")
    .expect("config")
    .revision
    .clone();
    assert!(
        run.stdout
            .contains(&format!("MutatingAdmissionPolicy {policy}: holds template `config` at revision 0ld0ld0ld0ld, expected {live}")),
        "{}",
        run.stdout
    );
    step!("check fails a deleted policy binding and an edited revision (golden policy-deleted.txt, policy-out-of-step.txt)");

    // The webhook path configured with the policies still there: a warning.
    kubectl_apply(&[injector_deployment(injector, &["serve", "--injection=webhook"])]).await;
    let run = check(&with(&["-n", &reached, "-o", "json"])).await;
    let report: Value = serde_json::from_str(&run.stdout).expect("-o json prints JSON");
    assert_eq!(
        checks(&report),
        [ok("injection"), ("admission-policies".to_string(), "warn".to_string())],
        "{}",
        run.stdout
    );
    assert_eq!(run.code, 0, "policies left in webhook mode are a warning:\n{}", run.stdout);
    step!("check warns of policies left while the webhook path is configured");
}

/// Runs everywhere: what `normalise` hides (the golden files are compared only against a
/// cluster).
pub fn normalise_hides_what_changes_from_run_to_run() {
    let id = "0badcafe";
    let raw = "Secret ei-check-0badcafe/envoy-injector-tls: valid until 2027-01-02T03:04:05Z (364 days left) \
               https://127.0.0.1:40123/mutate pods: web-5d8f7c9b6-x2k4p";
    assert_eq!(
        normalise(raw, id),
        "Secret ei-check-<id>/envoy-injector-tls: valid until <time> (<n> days left) \
         https://127.0.0.1:<port>/mutate pods: web-<pod>"
    );
    assert!(manifest_path("tests/golden/check/decisions.txt").is_file());
}
