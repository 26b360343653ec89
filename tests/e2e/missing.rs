//! Tier `missing`: Pods that escaped injection are found, counted and fixed.
//!
//! A local `serve` (cluster mode, `--network-backend none`) runs while no webhook
//! configuration sends it anything. Opted-in Pods are created then: a Deployment's two (by
//! annotation), a bare Pod (by annotation), and in a second namespace a plain Pod whose
//! namespace is labelled afterwards; an opted-out and a plain Pod are created beside them.
//! The gauge `envoy_injector_pods_uninjected{namespace}` of the running `serve` counts the
//! opted-in ones (the label change moves it with no Pod event). Then the shipped mutating
//! configuration is registered (by `url:` on 127.0.0.1, narrowed to these namespaces):
//! `check --missing` lists them by workload (JSON and text, exit code 1) with the reason
//! (created before the webhook configuration, created before the namespace label) and the
//! fix. The fixes it prints are run as printed (`kubectl rollout restart`, the bare Pods
//! replaced): the gauge drops to 0 and `check --missing` exits 0. A second `serve` with
//! `--watch-uninjected=false` shows no series of the gauge at all.
//!
//! The Deployment uses `strategy: Recreate`: without a node its new Pods never become
//! Ready, so a rolling update would wait forever for them before removing the old ones.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::check::{check, wait_for_dry_run_injection};
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "missing",
    run: |suite| Box::pin(run(suite)),
};

const GAUGE: &str = "envoy_injector_pods_uninjected";

/// The gauge's value for `namespace`; `None` when it has no series there.
fn series(metrics: &str, namespace: &str) -> Option<f64> {
    let prefix = format!("{GAUGE}{{namespace=\"{namespace}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

/// Waits until the gauge of `injector` shows `want` for each namespace.
async fn gauge_shows(injector: &Injector, want: &[(&str, Option<f64>)], what: &str) {
    wait_for(what, PATIENCE * 2, async || {
        let metrics = injector.try_metrics().await?;
        let found: Vec<Option<f64>> = want.iter().map(|(ns, _)| series(&metrics, ns)).collect();
        let wanted: Vec<Option<f64>> = want.iter().map(|(_, v)| *v).collect();
        if found == wanted {
            Ok(())
        } else {
            Err(format!("{GAUGE} per namespace {want:?}: found {found:?}"))
        }
    })
    .await;
}

/// `check --missing -o json` groups of `namespace`, as (workload, pods, reasons, fix).
fn groups(report: &Value, namespace: &str) -> Vec<(String, usize, Vec<String>, String)> {
    report["missing"]
        .as_array()
        .expect("-o json with --missing has a `missing` list")
        .iter()
        .filter(|g| g["namespace"] == namespace)
        .map(|g| {
            (
                format!("{} {}", g["kind"].as_str().unwrap_or("?"), g["name"].as_str().unwrap_or("?")),
                g["pods"].as_array().map_or(0, Vec::len),
                g["reasons"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| r["reason"].as_str().unwrap_or("?").to_string())
                    .collect(),
                g["fix"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Runs a fix as `check` printed it, in `dir` (where it may write `pod.yaml`). kubectl
/// 1.32 is older than the test plane's API server: its `replace` needs `--validate=false`.
async fn run_fix(fix: &str, dir: &std::path::Path) {
    let shell = fix.strip_prefix("delete and recreate the Pod: ").unwrap_or(fix);
    assert!(shell.starts_with("kubectl "), "expected a kubectl command, found {fix:?}");
    let shell = shell.replace("kubectl replace --force", "kubectl replace --force --validate=false");
    let mut command = Command::new("bash");
    command.args(["-c", &shell]).current_dir(dir);
    let out = run_command(command, None).await;
    assert!(out.status.success(), "the fix `{shell}` failed: {}", describe_output(&out));
    step!("ran the fix: {shell}");
}

async fn run(suite: &Suite) -> TierResult {
    let (scope, id) = suite.loopback_tier_with_kubectl()?;
    let client = &suite.client;
    let injector_ns = format!("ei-e2e-missing-{id}");
    TestNs::create_named(client, &scope, &injector_ns, &[(NAMESPACE_OPT_IN.0, "disabled")]).await;
    let apps = TestNs::create(client, &scope, "missing-apps", &[]).await;
    let late = TestNs::create(client, &scope, "missing-late", &[]).await;
    suite.install_network_crd().await;

    let certs = envoy_injector::tls::generate(INJECTOR_NAME, &injector_ns, &["127.0.0.1".to_string()], 365)
        .expect("test certificates");
    kubectl_apply(&[in_namespace(
        &configmap_object(INJECTOR_NAME, &template("envoy", DEFAULT_IMAGE)),
        &injector_ns,
    )])
    .await;
    let common = ["--namespace", &injector_ns, "--network-backend", "none"];
    let (serve, webhook) = serve_on_loopback("missing", &certs, &[&common[..], &["--identity", "missing-test"]].concat()).await;
    serve.wait_ready().await;

    // Nothing may inject these namespaces yet (a leftover configuration would).
    let probe = in_namespace(&pod("probe", &[(INJECT, "true")], DEFAULT_IMAGE), &apps.name);
    let out = kubectl(
        &["create", "--dry-run=server", "--validate=false", "-o", "json", "-f", "-"],
        Some(&probe.to_string()),
    )
    .await;
    assert!(
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(STATUS),
        "expected no webhook to inject namespace {} before this tier registers one, found: {}",
        apps.name,
        describe_output(&out)
    );

    // Opted-in Pods while no webhook configuration exists.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &apps.name);
    let mut web = deployment("web", 2, &[(INJECT, "true")], DEFAULT_IMAGE);
    if let Some(spec) = web.spec.as_mut() {
        spec.strategy = Some(serde_json::from_value(json!({ "type": "Recreate" })).expect("a strategy"));
    }
    deployments
        .create(&PostParams::default(), &web)
        .await
        .unwrap_or_else(|e| panic!("expected to create Deployment web, found: {}", api_error(&e)));
    for (name, annotations) in [
        ("solo", &[(INJECT, "true")][..]),
        ("out", &[(INJECT, "false")][..]),
        ("plain", &[][..]),
    ] {
        apps.create_stored(&pod(name, annotations, DEFAULT_IMAGE)).await;
    }
    late.create_stored(&pod("early", &[], DEFAULT_IMAGE)).await;
    let web_pods = async || {
        apps.pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .map_err(|e| api_error(&e))
            .map(|list| list.items)
    };
    wait_for("the two Pods of Deployment web", PATIENCE * 2, async || match web_pods().await?.len() {
        2 => Ok(()),
        n => Err(format!("{n} Pods")),
    })
    .await;
    gauge_shows(
        &serve,
        &[(&apps.name, Some(3.0)), (&late.name, Some(0.0))],
        "the gauge to count web's two Pods and solo; early's namespace is not labelled yet",
    )
    .await;
    step!("{GAUGE}: 3 in {} (not `out`, not `plain`), 0 in {}", apps.name, late.name);

    // creationTimestamps are whole seconds: the label and the configuration come a second
    // later, so the order is what `check` can tell.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    late.set_label(NAMESPACE_OPT_IN.0, json!(NAMESPACE_OPT_IN.1)).await;
    gauge_shows(
        &serve,
        &[(&apps.name, Some(3.0)), (&late.name, Some(1.0))],
        "the namespace label to count `early`, with no Pod event",
    )
    .await;
    step!("labelling {} moved the gauge to 1 there", late.name);
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let webhook_config = format!("envoy-injector-missing-{id}");
    register_shipped_webhooks(
        &scope,
        &webhook_config,
        &format!("https://{webhook}/mutate"),
        certs.ca.cert_pem.as_bytes(),
        &[&apps.name, &late.name],
    )
    .await;
    wait_for_dry_run_injection(&probe).await;

    let flags = [
        "--injector-namespace",
        injector_ns.as_str(),
        "--webhook-config",
        webhook_config.as_str(),
        "--validating-webhook-config",
        "",
        "--tls-secret",
        "",
        "--missing",
    ];
    let with = |extra: &[&'static str], namespace: &str| -> Vec<String> {
        flags
            .iter()
            .copied()
            .chain(["-n", namespace])
            .chain(extra.iter().copied())
            .map(String::from)
            .collect()
    };
    let run = check(&with(&["-o", "json"], &apps.name)).await;
    let report: Value = serde_json::from_str(&run.stdout).expect("-o json prints JSON");
    assert_eq!(run.code, 1, "Pods without the sidecar fail the check:\n{}", run.stdout);
    let found = groups(&report, &apps.name);
    let restart = format!("kubectl rollout restart deployment/web -n {}", apps.name);
    assert_eq!(
        found.iter().map(|(w, n, r, _)| (w.as_str(), *n, r.clone())).collect::<Vec<_>>(),
        vec![
            ("Deployment web", 2, vec!["before-webhook-configuration".to_string()]),
            ("Pod solo", 1, vec!["before-webhook-configuration".to_string()]),
        ],
        "{}",
        run.stdout
    );
    assert_eq!(found[0].3, restart);
    let run = check(&with(&[], &late.name)).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    // `-n` only bounds the list: the namespace's Pods are not each explained besides.
    assert!(!run.stdout.contains("\nPods\n"), "{}", run.stdout);
    for expected in [
        format!("Pod {}/early: 1 Pod(s)", late.name),
        format!(
            "created before label {}={} was set on namespace {}",
            NAMESPACE_OPT_IN.0, NAMESPACE_OPT_IN.1, late.name
        ),
        format!("fix: delete and recreate the Pod: kubectl get pod early -n {}", late.name),
        String::from("[FAIL] uninjected-pods: 1 opted-in Pod(s) in 1 workload(s)"),
    ] {
        assert!(run.stdout.contains(&expected), "expected {expected:?} in:\n{}", run.stdout);
    }
    // Without -n: every namespace, ours among them.
    let everywhere: Vec<String> = flags.iter().copied().chain(["-o", "json"]).map(String::from).collect();
    let run = check(&everywhere).await;
    let report: Value = serde_json::from_str(&run.stdout).expect("-o json prints JSON");
    assert_eq!(
        (groups(&report, &apps.name).len(), groups(&report, &late.name).len(), run.code),
        (2, 1, 1),
        "{}",
        run.stdout
    );
    step!("check --missing lists web (2), solo and early with their reasons and fixes; exit 1");

    // The fixes, as printed.
    let dir = temp_dir("envoy-injector-e2e-missing");
    run_fix(&restart, dir.path()).await;
    run_fix(&found[1].3, dir.path()).await;
    let late_report: Value = serde_json::from_str(&check(&with(&["-o", "json"], &late.name)).await.stdout)
        .expect("-o json prints JSON");
    run_fix(&groups(&late_report, &late.name)[0].3, dir.path()).await;
    wait_for("web's new Pods, injected", PATIENCE * 2, async || {
        let pods = web_pods().await?;
        let injected = pods.iter().filter(|p| annotation(p, STATUS).is_some()).count();
        if pods.len() == 2 && injected == 2 {
            Ok(())
        } else {
            Err(format!("{} Pods, {injected} injected", pods.len()))
        }
    })
    .await;
    gauge_shows(
        &serve,
        &[(&apps.name, Some(0.0)), (&late.name, Some(0.0))],
        "the gauge to drop to 0 after the fixes",
    )
    .await;
    for namespace in [&apps.name, &late.name] {
        let run = check(&with(&[], namespace)).await;
        assert_eq!(run.code, 0, "nothing left to fix in {namespace}:\n{}", run.stdout);
        assert!(
            run.stdout.contains("[ok]   uninjected-pods: every opted-in Pod"),
            "{}",
            run.stdout
        );
    }
    step!("after the fixes: {GAUGE} 0 in both namespaces, check --missing exits 0");

    // The watch turned off: no series at all, not a 0.
    let (unwatched, _) = serve_on_loopback(
        "missing-off",
        &certs,
        &[&common[..], &["--leader-elect=false", "--watch-uninjected=false"]].concat(),
    ).await;
    unwatched.wait_ready().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let metrics = unwatched.metrics().await;
    assert!(
        !metrics.lines().any(|l| l.starts_with(GAUGE)),
        "expected no {GAUGE} series with --watch-uninjected=false, found:\n{metrics}"
    );
    assert!(series(&serve.metrics().await, &apps.name).is_some());
    step!("--watch-uninjected=false: no {GAUGE} series at all");
    Ok(String::new())
}
