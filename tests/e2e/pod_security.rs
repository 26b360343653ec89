//! Tier `pod_security`: the injector's Pod Security rules against a real API server's Pod
//! Security admission. For every case of `tests/fixtures/pod-security.yaml` and every
//! `LEVEL:VERSION` it names, a server-side dry-run create, in a namespace labelled to
//! enforce that level at that version, of a Pod holding one app container that meets
//! restricted plus the template's additions (`common/pod_security.rs`): the controls the
//! API server names (none when it admits the Pod) must equal those the injector finds in
//! the template's additions (`template::pod_security::judge`). Any disagreement fails the
//! tier, naming the case and both answers.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;

#[path = "../common/pod_security.rs"]
mod cases;

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "pod_security",
    run: |suite| Box::pin(run(suite)),
};

async fn run(suite: &Suite) -> TierResult {
    let scope = Scope::new(suite.settings.mode);
    let cases = cases::cases();
    let levels: BTreeSet<&str> = cases.iter().flat_map(|c| c.expect.keys().map(String::as_str)).collect();
    let mut namespaces: BTreeMap<&str, Api<DynamicObject>> = BTreeMap::new();
    for at in &levels {
        let policy = cases::level_version(at);
        let (level, version) = (policy.level.to_string(), policy.version.to_string());
        let labels = [
            ("pod-security.kubernetes.io/enforce", level.as_str()),
            ("pod-security.kubernetes.io/enforce-version", version.as_str()),
        ];
        let ns = TestNs::create(&suite.client, &scope, "pod-security", &labels).await;
        namespaces.insert(
            at,
            Api::namespaced_with(suite.client.clone(), &ns.name, &ApiResource::erase::<Pod>(&())),
        );
    }
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.to_string()),
    };

    let (mut judged, mut disagreements, mut unexpected) = (0, Vec::new(), Vec::new());
    for case in &cases {
        let object: DynamicObject =
            serde_json::from_value(case.pod(&suite.settings.app_image)).expect("a Pod as a dynamic object");
        for (at, expected) in &case.expect {
            let ours = case.ours(at);
            let theirs = match namespaces[at.as_str()].create(&dry_run, &object).await {
                Ok(_) => BTreeSet::new(),
                Err(kube::Error::Api(status)) if status.code == 403 => cases::controls_in(&status.message),
                Err(other) => panic!(
                    "case {} at {at}: expected Pod Security admission's verdict, found: {}",
                    case.name,
                    api_error(&other)
                ),
            };
            step!(
                "{:<62} {:<18} injector {:<40} API server {}",
                case.name,
                at,
                shown(&ours),
                shown(&theirs)
            );
            judged += 1;
            if ours != theirs {
                disagreements.push(format!(
                    "{} at {at}: the injector finds {}, the API server {}",
                    case.name,
                    shown(&ours),
                    shown(&theirs)
                ));
            }
            if &theirs != expected {
                unexpected.push(format!(
                    "{} at {at}: expected {}, the API server {}",
                    case.name,
                    shown(expected),
                    shown(&theirs)
                ));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {judged} verdicts differ from Pod Security admission's:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    // The fixture's own expectations hold too, so that each control keeps a broken case.
    assert!(
        unexpected.is_empty(),
        "the fixture expects otherwise than the API server:\n{}",
        unexpected.join("\n")
    );
    Ok(format!(
        "{} templates, {judged} verdicts at {} levels: the injector names what Pod Security admission names",
        cases.len(),
        levels.len()
    ))
}

fn shown(controls: &BTreeSet<String>) -> String {
    if controls.is_empty() {
        String::from("meets it")
    } else {
        controls.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}
