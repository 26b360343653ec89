//! The in-step verdict on plain data: the compiled policies as `policies::compile` makes
//! them, then one fault at a time; replicas showing what their `/metrics` say.

use std::collections::BTreeMap;

use super::*;
use crate::cluster::injection::{Object, PolicyFacts, Served};

const NS: &str = "envoy-injector";

fn live(image: &str) -> TemplateSet {
    TemplateSet::from_data(
        "t",
        &BTreeMap::from([(
            "config".to_string(),
            format!("containers:\n- name: envoy\n  image: {image}\n"),
        )]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap()
}

fn compiled(set: &TemplateSet) -> Vec<Object> {
    let options = crate::policies::Options {
        injector_namespace: NS.into(),
        ..crate::policies::Options::default()
    };
    crate::policies::compile(set, &options)
        .objects
        .iter()
        .map(Object::new)
        .collect()
}

fn policies(mode: &str, found: Vec<Object>, set: &TemplateSet) -> Policies {
    let deployment = crate::cluster::injection::tests::deployment(&["serve", &format!("--injection={mode}")], &[]);
    let facts = PolicyFacts {
        deployment: Some((crate::NAME.into(), Ok(Some(deployment)))),
        served: Served::Yes,
        found: Ok(found),
    };
    Policies::new(&facts, &Ok(set.clone()), NS)
}

fn metrics_of(set: &TemplateSet) -> String {
    let revision = &set.get("config").unwrap().revision;
    format!(
        "# HELP envoy_injector_templates_loaded x\n# TYPE envoy_injector_templates_loaded gauge\nenvoy_injector_templates_loaded 1\n\
         # HELP {REVISION_METRIC} 1 for each live template\n# TYPE {REVISION_METRIC} gauge\n\
         {REVISION_METRIC}{{template=\"config\",revision=\"{revision}\"}} 1\n# EOF\n"
    )
}

fn replicas(shown: &[(&str, Shown)]) -> Replicas {
    Replicas::Read {
        deployment: crate::NAME.into(),
        ready: shown
            .iter()
            .map(|(name, shown)| Replica {
                name: name.to_string(),
                shown: shown.clone(),
            })
            .collect(),
    }
}

#[test]
fn a_replica_s_metrics_say_which_revisions_it_injects_with() {
    let set = live("envoy:2");
    let shown = shown_revisions(&metrics_of(&set)).unwrap();
    assert_eq!(
        shown,
        BTreeMap::from([("config".to_string(), set.get("config").unwrap().revision.clone())])
    );
    let err = shown_revisions("# TYPE envoy_injector_templates_loaded gauge\nenvoy_injector_templates_loaded 1\n")
        .unwrap_err();
    assert!(err.contains(REVISION_METRIC), "{err}");
    let none_loaded = format!("# TYPE {REVISION_METRIC} gauge\n# EOF\n");
    assert_eq!(shown_revisions(&none_loaded), Ok(BTreeMap::new()));
    assert_eq!(
        parse_labels(r#"template="a\"b",revision="x""#),
        BTreeMap::from([("template".into(), "a\"b".into()), ("revision".into(), "x".into())])
    );
}

#[test]
fn webhook_mode_waits_for_every_ready_replica_to_reload() {
    let old = live("envoy:1");
    let new = live("envoy:2");
    let webhook = policies("webhook", Vec::new(), &new);
    let reloaded = shown_revisions(&metrics_of(&new));
    let behind = shown_revisions(&metrics_of(&old));

    let verdict = judge(
        &new,
        &webhook,
        &replicas(&[("a", reloaded.clone()), ("b", reloaded.clone())]),
    );
    assert!(verdict.ready, "{verdict:?}");
    assert!(verdict.because.iter().any(|b| b.contains("(a, b)")), "{verdict:?}");

    let verdict = judge(&new, &webhook, &replicas(&[("a", reloaded.clone()), ("b", behind)]));
    assert!(!verdict.ready);
    let old_revision = &old.get("config").unwrap().revision;
    let new_revision = &new.get("config").unwrap().revision;
    assert_eq!(
        verdict.because,
        vec![format!(
            "replicas of Deployment envoy-injector not yet reloaded: b: `config` at {old_revision}, live {new_revision}"
        )]
    );

    let verdict = judge(
        &new,
        &webhook,
        &replicas(&[("a", Err(String::from("HTTP 403 Forbidden")))]),
    );
    assert!(
        !verdict.ready && verdict.because[0].contains("a: HTTP 403 Forbidden"),
        "{verdict:?}"
    );

    let verdict = judge(&new, &webhook, &replicas(&[]));
    assert!(
        !verdict.ready && verdict.because[0].contains("no Ready replica"),
        "{verdict:?}"
    );

    let verdict = judge(&new, &webhook, &Replicas::NotChecked);
    assert!(verdict.ready, "{verdict:?}");
}

#[test]
fn policy_mode_waits_for_the_compiled_policies() {
    let old = live("envoy:1");
    let new = live("envoy:2");
    let in_step = policies("policy", compiled(&new), &new);
    let verdict = judge(&new, &in_step, &replicas(&[]));
    assert!(
        verdict.ready,
        "no replica is needed when the policies inject: {verdict:?}"
    );

    let behind = policies("policy", compiled(&old), &new);
    let verdict = judge(&new, &behind, &Replicas::NotChecked);
    assert!(!verdict.ready);
    assert!(
        verdict.because[0].starts_with("admission policies: not in step with ConfigMap envoy-injector/envoy-injector"),
        "{verdict:?}"
    );

    // Left over in webhook mode, they still act: with an old revision, that is lagging.
    let leftover = policies("webhook", compiled(&old), &new);
    let verdict = judge(&new, &leftover, &Replicas::NotChecked);
    assert!(
        !verdict.ready && verdict.because[0].contains("left over"),
        "{verdict:?}"
    );
    let leftover_in_step = policies("webhook", compiled(&new), &new);
    assert!(judge(&new, &leftover_in_step, &Replicas::NotChecked).ready);
}

#[test]
fn a_dry_run_pod_at_an_older_revision_or_refused_is_not_in_step() {
    let old = live("envoy:1");
    let new = live("envoy:2");
    let at = |set: &TemplateSet| Probe::Injected {
        template: "config".into(),
        revision: set.get("config").unwrap().revision.clone(),
    };
    let verdict = judge_probes(
        &new,
        &[
            ("Deployment apps/a".into(), at(&new)),
            ("Deployment apps/b".into(), Probe::NotInjected),
        ],
    );
    assert!(verdict.ready, "{verdict:?}");
    assert_eq!(
        verdict.because,
        vec!["a Pod each of 2 workload(s) creates now gets the live revision (server-side dry run)"]
    );

    let verdict = judge_probes(&new, &[("Deployment apps/a".into(), at(&old))]);
    assert!(!verdict.ready);
    assert!(
        verdict.because[0].starts_with("a Pod Deployment apps/a creates now gets template `config` revision")
            && verdict.because[0].ends_with("the live one is not served there yet"),
        "{verdict:?}"
    );
    let refused = judge_probes(
        &new,
        &[(
            "Deployment apps/a".into(),
            Probe::Refused("HTTP 403 Forbidden: denied".into()),
        )],
    );
    assert!(
        !refused.ready && refused.because[0].contains("is refused: HTTP 403"),
        "{refused:?}"
    );
    let unchecked = judge_probes(
        &new,
        &[("Deployment apps/a".into(), Probe::NotPermitted("cannot create".into()))],
    );
    assert!(
        unchecked.ready && unchecked.because[0].contains("not checked"),
        "{unchecked:?}"
    );

    // Both verdicts: what lags wins; when both hold, what both rest on.
    let serving = judge(&new, &policies("webhook", Vec::new(), &new), &Replicas::NotChecked);
    let both = serving
        .clone()
        .and(judge_probes(&new, &[("Deployment apps/a".into(), at(&new))]));
    assert!(
        both.ready && both.because.len() == serving.because.len() + 1,
        "{both:?}"
    );
    let lagging = serving.and(judge_probes(&new, &[("Deployment apps/a".into(), at(&old))]));
    assert!(!lagging.ready && lagging.because.len() == 1, "{lagging:?}");
}
