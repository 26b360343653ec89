//! Tier `jobs`: run-to-completion workloads with the sidecar. In a namespace labelled for
//! injection, with nothing but the defaults: a Job (`restartPolicy: Never`) and a Job made
//! from a CronJob (`restartPolicy: OnFailure`, `kubectl create job --from=cronjob/...`, as
//! an operator runs one now) reach `Complete`. The sidecar goes in as a native sidecar by
//! default, since their `restartPolicy` is not `Always`: a regular sidecar container would
//! keep the Pod running after the app exits, and the Job would never complete.

use std::time::Instant;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "jobs",
    run: |suite| Box::pin(run(suite)),
};

async fn run(suite: &Suite) -> TierResult {
    let (_installation, images) = installation(suite).await?;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "jobs", &[NAMESPACE_OPT_IN]).await;
    let jobs: Api<Job> = Api::namespaced(suite.client.clone(), &ns.name);
    let cronjobs: Api<CronJob> = Api::namespaced(suite.client.clone(), &ns.name);

    let started = Instant::now();
    jobs.create(&PostParams::default(), &job("once", "Never", &images.shell))
        .await
        .unwrap_or_else(|e| panic!("expected to create Job once, found: {}", api_error(&e)));
    complete(&ns, &jobs, "once").await;
    let job_took = started.elapsed().as_secs_f64();
    step!("Job once (restartPolicy Never): Complete in {job_took:.1} s");

    // Suspended: only the Job made from it below runs, never one the schedule makes.
    let cron: CronJob = serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": { "name": "nightly" },
        "spec": {
            "schedule": "0 3 * * *",
            "suspend": true,
            "jobTemplate": { "spec": serde_json::to_value(job("unused", "OnFailure", &images.shell)).expect("a Job is JSON")["spec"] },
        },
    }))
    .expect("a CronJob");
    cronjobs
        .create(&PostParams::default(), &cron)
        .await
        .unwrap_or_else(|e| panic!("expected to create CronJob nightly, found: {}", api_error(&e)));
    let started = Instant::now();
    let made = kubectl(&["create", "job", "-n", &ns.name, "nightly-now", "--from=cronjob/nightly"], None).await;
    assert!(made.status.success(), "expected kubectl to make a Job from the CronJob, found {}", describe_output(&made));
    complete(&ns, &jobs, "nightly-now").await;
    let cron_took = started.elapsed().as_secs_f64();
    step!("Job nightly-now from CronJob nightly (restartPolicy OnFailure): Complete in {cron_took:.1} s");
    Ok(format!("Job Complete in {job_took:.1} s, CronJob's Job in {cron_took:.1} s"))
}

/// A Job whose app checks that the sidecar has started (it shares its volume), then exits 0.
fn job(name: &str, restart_policy: &str, image: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": { "job": name } },
                "spec": {
                    "restartPolicy": restart_policy,
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "app",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", format!("test -f {STARTED_FILE} && echo the sidecar was up")],
                    }],
                },
            },
        },
    }))
    .expect("a Job")
}

/// Waits for Job `name` to be Complete, then checks its Pod carried the sidecar as a native
/// sidecar; panics naming the Job's and its Pod's state if it fails or never completes.
async fn complete(ns: &TestNs, jobs: &Api<Job>, name: &str) {
    let pods_of = async || -> Vec<Pod> {
        ns.pods
            .list(&ListParams::default().labels(&format!("job-name={name}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    };
    let outcome = wait_for(&format!("Job {name} to finish"), RUN_PATIENCE, async || {
        let job = jobs.get(name).await.map_err(|e| api_error(&e))?;
        let conditions = job.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        let finished = conditions
            .iter()
            .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True");
        match finished {
            Some(c) => Ok(c.type_.clone()),
            None => {
                let pods: Vec<String> = pods_of().await.iter().map(describe_pod).collect();
                Err(format!("conditions {:?}; Pods {pods:?}", conditions.iter().map(|c| &c.type_).collect::<Vec<_>>()))
            }
        }
    })
    .await;
    let pods = pods_of().await;
    assert_eq!(outcome, "Complete", "expected Job {name} Complete, found {outcome}; Pods {:?}", pods.iter().map(describe_pod).collect::<Vec<_>>());
    let pod = pods.first().unwrap_or_else(|| panic!("expected a Pod of Job {name}"));
    let native = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == SIDECAR && c.restart_policy.as_deref() == Some("Always")));
    assert!(
        native && annotation(pod, STATUS).is_some(),
        "expected the Pod of Job {name} injected with `{SIDECAR}` as a native sidecar, found {}",
        describe_pod(pod)
    );
}
