//! Tier `values`: the injector's value rules against a real API server. For every case of
//! `tests/fixtures/template-values.yaml` (templates bad and good, one or more per rule),
//! the injector's verdict (`Template::parse` with the rules of the API server's own
//! version) must equal the API server's: a server-side dry-run create, in a namespace with
//! its `default` ServiceAccount, of a Pod holding one app container plus the template's
//! containers (and, as the injection may add them, a second Pod with them as native
//! sidecars), init containers, volumes, pull secrets and app mounts. Any disagreement fails
//! the tier, naming the template and both answers.

use envoy_injector::template::KubeVersion;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;

#[path = "../common/template_values.rs"]
mod template_values;

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "values",
    run: |suite| Box::pin(run(suite)),
};

async fn run(suite: &Suite) -> TierResult {
    let info = suite
        .client
        .apiserver_version()
        .await
        .unwrap_or_else(|e| panic!("expected the API server's version, found: {}", api_error(&e)));
    let (version, note) = KubeVersion::from_server(&info.major, &info.minor)
        .unwrap_or_else(|e| panic!("expected a Kubernetes version, found: {e}"));
    if let Some(note) = note {
        return Err(Skip(format!("{note}; the verdicts are compared on a supported version only")));
    }
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "values", &[]).await;
    let pods: Api<DynamicObject> =
        Api::namespaced_with(suite.client.clone(), &ns.name, &ApiResource::erase::<Pod>(&()));
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.to_string()),
    };

    let cases = template_values::cases();
    let (mut refused, mut admitted, mut disagreements, mut unexpected) = (0, 0, Vec::new(), Vec::new());
    for case in &cases {
        let ours = case.verdict(version);
        let mut theirs = Ok(());
        for pod in case.pods(&suite.settings.app_image) {
            let object: DynamicObject = serde_json::from_value(pod).expect("a Pod as a dynamic object");
            match pods.create(&dry_run, &object).await {
                Ok(_) => {}
                // 422 Invalid, or 400 when a value does not even decode ("cpu: banana").
                Err(kube::Error::Api(status)) if matches!(status.code, 400 | 422) => {
                    theirs = Err(status.message);
                    break;
                }
                Err(other) => panic!("case {}: expected the API server's verdict, found: {}", case.name, api_error(&other)),
            }
        }
        step!(
            "{:<48} injector {:<8} API server {}",
            case.name,
            if ours.is_ok() { "admits" } else { "refuses" },
            if theirs.is_ok() { "admits" } else { "refuses" }
        );
        match (&ours, &theirs) {
            (Ok(()), Ok(())) => admitted += 1,
            (Err(_), Err(_)) => refused += 1,
            _ => disagreements.push(format!(
                "{}: the injector {}, the API server {}",
                case.name,
                describe(&ours),
                describe(&theirs)
            )),
        }
        if theirs.is_err() != case.expects_refusal() {
            unexpected.push(format!("{}: expected {}, the API server {}", case.name, case.expect, describe(&theirs)));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} templates judged otherwise than by the API server (Kubernetes {version}):\n{}",
        disagreements.len(),
        cases.len(),
        disagreements.join("\n")
    );
    // The fixture's own expectations hold too, so that each rule keeps a refused case.
    assert!(
        unexpected.is_empty(),
        "the fixture expects otherwise than the API server:\n{}",
        unexpected.join("\n")
    );
    Ok(format!(
        "{} templates on Kubernetes {version}: {refused} refused and {admitted} admitted by both",
        cases.len()
    ))
}

fn describe(verdict: &Result<(), String>) -> String {
    match verdict {
        Ok(()) => String::from("admits it"),
        Err(why) => format!("refuses it: {why}"),
    }
}
