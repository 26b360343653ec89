//! `envoy-injector check`: read-only, against the cluster of the current kubeconfig.
//!
//! For a namespace, a Pod or the documents of a manifest it explains, per Pod (or Pod
//! template), whether it would be injected and why ([`decision`]); it checks the
//! installation's health ([`crate::cluster::health`]); with `--stale` it lists the Pods
//! that run an older template revision, by workload ([`crate::cluster::stale`]); with
//! `--missing` the opted-in Pods that carry no sidecar, by workload, with why they were
//! missed ([`missing`]). It makes only GET and LIST requests.
//!
//! What it reads is the cluster's: the deployed MutatingWebhookConfiguration (its
//! selectors and CEL `matchConditions`, evaluated by [`cel`]), Namespace labels, Networks
//! and the live ConfigMap (or templates given instead). A manifest (`-f`) is explained
//! against that cluster too: what the shipped `manifests/` would do is what the cluster
//! does once they are applied. Without a cluster, [`explain_offline`] explains a manifest
//! from its documents and a template alone, and says what it cannot know.
//!
//! | module | does |
//! |---|---|
//! | `decision` | pure: one Pod → verdict, the rule that decided, template, collisions |
//! | `cel` | pure: a webhook's CEL `matchConditions` |
//! | `missing` | pure: opted-in Pods without the sidecar → grouped by workload, with the fix and the likely reason |
//! | `pod_security` | pure: the Pod Security level a Pod's namespace asks for, and whether what its template adds meets it |
//! | `report` | the report's types: the whole, and each Pod's verdict |
//! | `render` | the report as text (JSON is its serde form) |
//!
//! What it reads of the cluster, and how, is [`crate::cluster`]'s: the fetchers, the
//! installation's health, the injection path, selectors, workloads, stale and drifted Pods.

pub mod cel;
pub mod decision;
pub mod missing;
pub mod pod_security;
pub mod render;
pub mod report;

pub use report::Report;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use time::OffsetDateTime;

use decision::{Installed, Webhooks};
use missing::{Escaped, Evidence};
use report::MissingGroup;

use crate::cluster::fetch::{self, Installation};
use crate::cluster::health::{self, Check, Status};
use crate::cluster::snapshot::{Snapshot, Subject};
use crate::cluster::stale::StaleGroup;
use crate::cluster::{self, ReadError, drift, injection, workload};
use crate::inject::OptIn;
use crate::template::{KubeVersion, TemplateSet};
use crate::uninjected::{self, Namespaces as _};

/// What to explain besides the installation's health.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// Health only.
    Installation,
    /// Every Pod of a namespace.
    Namespace(String),
    /// One Pod.
    Pod { namespace: String, name: String },
    /// The Pods and Pod templates among a manifest's documents; `namespace` is for those
    /// that name none.
    Documents { namespace: String, documents: Vec<Value> },
}

/// The plain settings the `check` flags map to.
#[derive(Debug, Clone)]
pub struct CheckSettings {
    pub target: Target,
    /// Also list stale sidecars (within the target's namespace, or everywhere).
    pub stale: bool,
    /// Also list opted-in Pods without the sidecar (within the target's namespace, or
    /// everywhere); any found fails the check.
    pub missing: bool,
    /// Also list injected Pods at the live revision whose sidecar differs from what the
    /// template makes of them (within the target's namespace, or everywhere); any found
    /// fails the check.
    pub drift: bool,
    /// Where the injector's ConfigMap, Secret, Service and Lease live.
    pub injector_namespace: String,
    pub webhook_config: Option<String>,
    pub validating_webhook_config: Option<String>,
    pub tls_secret: Option<String>,
    pub lease_name: Option<String>,
    /// The Deployment running `serve`, whose `--injection` says which path it sets up;
    /// `None`: `serve`'s default (`auto`) is taken.
    pub deployment: Option<String>,
    /// Templates to explain the Pods against instead of the live ConfigMap's
    /// (`--config FILE`); the `templates` check still reads the live ones.
    pub templates: Option<TemplateSet>,
    /// The API server's version, read once by the caller: the rules the live templates are
    /// checked with, as `templates` were.
    pub kube_version: KubeVersion,
}

/// Each of `documents` that `inject` refuses (not an object, no `kind`, a Pod template
/// that is not an object), in `inject`'s words: `document 2 at line 3: expected an object
/// (a Kubernetes manifest), found a list`.
pub fn unreadable(documents: &[crate::offline::ManifestObject]) -> Vec<String> {
    documents
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let at = crate::offline::at_document(i + 1, &d.object, d.line);
            crate::offline::refused(&at, &d.object).map(|e| e.to_string())
        })
        .collect()
}

/// What `check -f` cannot know without a cluster, said once in its report.
pub const OFFLINE_UNKNOWN: &str = "no cluster consulted, so these are not known: the namespaces' labels \
     (namespace-wide opt-in, the namespace's template, Pod Security), but for the Namespaces the file declares, the deployed \
     webhook configuration (taken to send every Pod that opted in, as the shipped one does), Networks \
     (whether one a Pod joins exists and is Ready) and the installation's health";

/// `check -f` without a cluster: each Pod and Pod template of `documents` explained from
/// the documents and `templates` alone. Namespaces declared among the documents give their
/// labels; nothing else of a cluster is assumed. `healthy` follows the Pod decisions.
pub fn explain_offline(documents: &[Value], namespace: &str, templates: &TemplateSet, templates_from: &str) -> Report {
    let subjects = document_subjects(documents, namespace);
    let mut snapshot = Snapshot::default();
    declare_namespaces(&mut snapshot, documents);
    let installed = Installed {
        webhook_config: "",
        webhooks: Webhooks::Offline,
        templates: Ok(templates),
        policies: None,
        annotation_opt_in: crate::inject::AnnotationOptIn::On,
    };
    let pods = decision::explain_all(&subjects, &installed, &snapshot);
    let mut report = Report::new(String::new(), Vec::new(), pods, None);
    report.offline = Some(format!(
        "explained from the file and {templates_from}; {OFFLINE_UNKNOWN}"
    ));
    report
}

/// The labels of the Namespaces a manifest declares, over what `snapshot` has of them:
/// applying the manifest sets them.
fn declare_namespaces(snapshot: &mut Snapshot, documents: &[Value]) {
    for document in documents {
        if document.get("kind").and_then(Value::as_str) != Some("Namespace") {
            continue;
        }
        let Some(name) = document.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let declared = document.pointer("/metadata/labels").and_then(Value::as_object);
        let mut labels = snapshot.namespace_labels(name);
        for (key, value) in declared.into_iter().flatten() {
            if let Some(value) = value.as_str() {
                labels.insert(key.clone(), value.to_string());
            }
        }
        snapshot.namespaces.insert(name.to_string(), labels);
    }
}

/// The Pods and Pod templates among a manifest's documents, numbered from 1.
fn document_subjects(documents: &[Value], namespace: &str) -> Vec<Subject> {
    documents
        .iter()
        .enumerate()
        .filter_map(|(i, document)| document_subject(i + 1, document, namespace))
        .collect()
}

/// Runs every read and check. Read errors on the installation are failed checks; an error
/// reading the target itself (the namespace's Pods, the Pod) is an `Err`.
pub async fn run(client: kube::Client, settings: &CheckSettings, now: OffsetDateTime) -> Result<Report, ReadError> {
    let installation = Installation {
        namespace: &settings.injector_namespace,
        webhook_config: settings.webhook_config.as_deref(),
        validating_webhook_config: settings.validating_webhook_config.as_deref(),
        tls_secret: settings.tls_secret.as_deref(),
        lease_name: settings.lease_name.as_deref(),
    };
    let facts = fetch::facts(&client, &installation, settings.kube_version).await;
    // Parsed once: the `templates` check and every decision read the same set.
    let live = health::live_templates(&facts);
    let templates = live.as_ref().map(|live| live.set.clone()).map_err(Clone::clone);
    let (policies, _) = cluster::policies(
        &client,
        &settings.injector_namespace,
        settings.deployment.as_deref(),
        &templates,
    )
    .await;
    // The health lines word what a missing ConfigMap does by the policies found.
    let mut checks = health::evaluate_with(&facts, &live, policies.found_any(), now);
    checks.push(policies.expectation.check.clone());
    checks.push(injection::health::admission_policies(&policies));

    // With --stale or --missing a namespace only bounds those lists: its Pods are not
    // each explained, so the report shows only the Pods the lists are about.
    let subjects = match &settings.target {
        Target::Namespace(_) if settings.stale || settings.missing || settings.drift => Vec::new(),
        target => subjects(&client, target).await?,
    };
    let mut snapshot = fetch::snapshot(&client, &subjects).await;
    if let Target::Documents { documents, .. } = &settings.target {
        declare_namespaces(&mut snapshot, documents);
    }
    let webhooks = match &facts.mutating {
        Some((_, Ok(Some(config)))) => Some(config.webhooks.clone().unwrap_or_default()),
        _ => None,
    };
    let installed = Installed {
        webhook_config: settings.webhook_config.as_deref().unwrap_or_default(),
        webhooks: webhooks.as_deref().map_or(Webhooks::Absent, Webhooks::Deployed),
        templates: match &settings.templates {
            Some(given) => Ok(given),
            None => templates.as_ref().map_err(String::as_str),
        },
        policies: Some(&policies),
        annotation_opt_in: policies.annotation_opt_in,
    };
    let mut pods = decision::explain_all(&subjects, &installed, &snapshot);
    if let Ok(live) = installed.templates {
        for (report, subject) in pods.iter_mut().zip(&subjects) {
            match drift::standing(&subject.pod, live) {
                drift::Standing::Drifted(differences) => report.drift = differences,
                drift::Standing::Unknown(why) => report.warnings.push(format!("sidecar drift: {why}")),
                drift::Standing::NotInjected | drift::Standing::Stale | drift::Standing::InStep => {}
            }
        }
    }

    let scope = match &settings.target {
        Target::Namespace(namespace) | Target::Pod { namespace, .. } => Some(namespace.as_str()),
        Target::Installation | Target::Documents { .. } => None,
    };
    let stale = if settings.stale {
        let groups = match &templates {
            Ok(live) => cluster::stale_groups(&client, scope, live).await?,
            Err(_) => Vec::new(),
        };
        checks.push(stale_check(&groups, templates.is_ok(), scope));
        Some(groups)
    } else {
        None
    };
    let missing = if settings.missing {
        let webhook_created = match &facts.mutating {
            Some((_, Ok(Some(config)))) => config.metadata.creation_timestamp.as_ref(),
            _ => None,
        };
        let (groups, by_hand) = find_missing(&client, scope, &installed, webhook_created).await?;
        checks.push(missing_check(&groups, &by_hand, scope));
        Some(groups)
    } else {
        None
    };
    let drift = match (&templates, settings.drift) {
        (_, false) => None,
        (Ok(live), true) => {
            let (pods, owners) = fetch::pods_at_revisions(&client, scope, live).await?;
            let owner = |pod: &Value| {
                let meta: kube::api::ObjectMeta =
                    serde_json::from_value(pod.get("metadata").cloned().unwrap_or_default()).unwrap_or_default();
                let (kind, name) = workload::owned_by(&meta, &owners)?;
                Some(format!("{kind} {}/{name}", meta.namespace.unwrap_or_default()))
            };
            let drifted = drift::drifted(&pods, live, owner);
            checks.push(drift::check_line(&drifted, scope));
            Some(drifted)
        }
        (Err(_), true) => {
            checks.push(Check::new(
                drift::CHECK,
                Status::Warn,
                "cannot tell sidecar drift without readable live templates (see `templates`)",
            ));
            Some(Vec::new())
        }
    };
    let mut report = Report::new(settings.injector_namespace.clone(), checks, pods, stale);
    report.missing = missing;
    report.drift = drift;
    Ok(report)
}

/// The Pods (or Pod templates) the target names.
async fn subjects(client: &kube::Client, target: &Target) -> Result<Vec<Subject>, ReadError> {
    match target {
        Target::Installation => Ok(Vec::new()),
        Target::Namespace(namespace) => fetch::namespace_pods(client, namespace).await,
        Target::Pod { namespace, name } => Ok(vec![fetch::pod(client, namespace, name).await?]),
        Target::Documents { namespace, documents } => Ok(document_subjects(documents, namespace)),
    }
}

/// The opted-in Pods without the sidecar in `scope` (or everywhere), grouped, and those
/// left out because they hold the template's containers. The rule picks them from a
/// metadata list; only those picked are read whole (one paged list per namespace).
async fn find_missing(
    client: &kube::Client,
    scope: Option<&str>,
    installed: &Installed<'_>,
    webhook_created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> Result<(Vec<MissingGroup>, Vec<String>), ReadError> {
    let namespaces = fetch::namespace_metadata(client, scope).await?;
    let name = |ns: &kube::api::ObjectMeta| ns.name.clone().unwrap_or_default();
    let labels: BTreeMap<String, BTreeMap<String, String>> = namespaces
        .iter()
        .map(|ns| (name(ns), ns.labels.clone().unwrap_or_default()))
        .collect();
    let labels_written: BTreeMap<String, missing::LabelWritten> = namespaces
        .iter()
        .filter_map(|ns| Some((name(ns), missing::label_written(ns)?)))
        .collect();
    let picked = |meta: &kube::api::ObjectMeta| {
        let namespace = labels.opt_in(meta.namespace.as_deref().unwrap_or_default());
        uninjected::uninjected(meta, namespace, installed.annotation_opt_in)
    };
    let picks = fetch::pod_metadata(client, scope, |pod| {
        picked(&pod.metadata)?;
        Some((pod.metadata.namespace?, pod.metadata.uid?))
    })
    .await?;
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (namespace, uid) in picks {
        wanted.entry(namespace).or_default().insert(uid);
    }
    // Read whole, they are picked again: one injected since the metadata list is not listed.
    let (metas, subjects): (Vec<_>, Vec<_>) = fetch::pods_by_uid(client, &wanted)
        .await?
        .into_iter()
        .filter_map(|(meta, subject)| Some((picked(&meta)?, meta, subject)))
        .map(|(opt_in, meta, subject)| ((opt_in, meta), subject))
        .unzip();
    let snapshot = fetch::snapshot(client, &subjects).await;
    let decisions = decision::explain_all(&subjects, installed, &snapshot);
    let escaped: Vec<Escaped> = metas
        .into_iter()
        .zip(decisions)
        .map(|((opt_in, meta), decision): ((OptIn, _), _)| Escaped { meta, opt_in, decision })
        .collect();
    let owners = fetch::replica_set_owners(client, escaped.iter().map(|e| &e.meta)).await;
    let evidence = Evidence {
        webhook_config: installed.webhook_config,
        webhook_created,
        labels_written: &labels_written,
    };
    Ok(missing::group(&escaped, &owners, &evidence))
}

fn missing_check(groups: &[MissingGroup], by_hand: &[String], scope: Option<&str>) -> Check {
    let place = scope.map_or_else(|| String::from("in any namespace"), |ns| format!("in namespace {ns}"));
    let by_hand = if by_hand.is_empty() {
        String::new()
    } else {
        format!(
            "; not counted: {} Pod(s) hold the template's containers without the status annotation (added by hand): {}",
            by_hand.len(),
            by_hand.join(", ")
        )
    };
    if groups.is_empty() {
        return Check::new(
            "uninjected-pods",
            Status::Ok,
            format!("every opted-in Pod {place} carries the sidecar{by_hand}"),
        );
    }
    let pods: usize = groups.iter().map(|g| g.pods.len()).sum();
    Check::new(
        "uninjected-pods",
        Status::Fail,
        format!(
            "{pods} opted-in Pod(s) in {} workload(s) {place} carry no sidecar (listed below, with why and the fix){by_hand}",
            groups.len()
        ),
    )
}

fn stale_check(groups: &[StaleGroup], have_templates: bool, scope: Option<&str>) -> Check {
    let place = scope.map_or_else(|| String::from("in any namespace"), |ns| format!("in namespace {ns}"));
    if !have_templates {
        return Check::new(
            "stale-sidecars",
            Status::Warn,
            "cannot tell stale sidecars without readable live templates (see `templates`)",
        );
    }
    if groups.is_empty() {
        return Check::new(
            "stale-sidecars",
            Status::Ok,
            format!("no injected Pod {place} runs an older template revision"),
        );
    }
    let pods: usize = groups.iter().map(|g| g.pods.len()).sum();
    Check::new(
        "stale-sidecars",
        Status::Warn,
        format!(
            "{pods} injected Pod(s) in {} workload(s) {place} run an older template revision (listed below, with the fix)",
            groups.len()
        ),
    )
}

/// A Pod (or Pod template) of a manifest document, as the API server would receive it.
pub fn document_subject(index: usize, document: &Value, default_namespace: &str) -> Option<Subject> {
    let kind = document.get("kind").and_then(Value::as_str).unwrap_or_default();
    let path = crate::offline::pod_path(kind)?;
    let template = document.pointer(path)?.as_object()?;
    let namespace = document
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(default_namespace)
        .to_string();
    let name = document
        .pointer("/metadata/name")
        .or_else(|| document.pointer("/metadata/generateName"))
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)");
    let mut metadata = template
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    if let Some(map) = metadata.as_object_mut() {
        map.insert("namespace".into(), Value::String(namespace.clone()));
    }
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or(Value::Null),
    });
    let what = if path.is_empty() {
        format!("Pod {namespace}/{name} (document {index})")
    } else {
        format!("{kind} {namespace}/{name} (document {index}, Pod template)")
    };
    Some(Subject { what, namespace, pod })
}
