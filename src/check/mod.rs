//! `envoy-injector check`: read-only, against the cluster of the current kubeconfig.
//!
//! For a namespace, a Pod or the documents of a manifest it explains, per Pod (or Pod
//! template), whether it would be injected and why ([`decision`]); it checks the
//! installation's health ([`health`]); with `--stale` it lists the Pods that run an older
//! template revision, by workload ([`stale`]). It makes only GET and LIST requests.
//!
//! What it reads is always the cluster's: the deployed MutatingWebhookConfiguration (its
//! selectors and CEL `matchConditions`, evaluated by [`cel`]), Namespace labels, Networks
//! and the live ConfigMap. A manifest (`-f`) is explained against that cluster too: what
//! the shipped `manifests/` would do is what the cluster does once they are applied.
//!
//! | module | does |
//! |---|---|
//! | `decision` | pure: one Pod → verdict, the rule that decided, template, collisions |
//! | `cel`, `selector` | pure: a webhook's matchConditions and label selectors |
//! | `health` | pure: the installation's facts → `ok`/`warn`/`fail` lines |
//! | `stale` | pure: injected Pods → stale ones grouped by workload, with the fix |
//! | `fetch` | the API reads that fill the above |
//! | `render` | the report as text (JSON is its serde form) |

pub mod cel;
pub mod decision;
mod fetch;
pub mod health;
pub mod render;
pub mod selector;
pub mod stale;

use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use decision::{Installed, PodReport, Subject};
use health::{Check, Status};
use stale::StaleGroup;

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
    /// Where the injector's ConfigMap, Secret, Service and Lease live.
    pub injector_namespace: String,
    pub webhook_config: Option<String>,
    pub validating_webhook_config: Option<String>,
    pub tls_secret: Option<String>,
    pub lease_name: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("cannot {action}: {message}")]
    Api { action: String, message: String },
    #[error("expected Pod {namespace}/{name}, found none")]
    NoSuchPod { namespace: String, name: String },
}

/// Everything `check` found. `-o json` prints exactly this.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The injector's namespace.
    pub namespace: String,
    /// False when a check failed or a Pod would be denied; the exit code follows it.
    pub healthy: bool,
    pub checks: Vec<Check>,
    pub pods: Vec<PodReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<Vec<StaleGroup>>,
}

impl Report {
    /// Puts the parts together; `healthy` follows from them.
    pub fn new(namespace: String, checks: Vec<Check>, pods: Vec<PodReport>, stale: Option<Vec<StaleGroup>>) -> Report {
        let healthy = !checks.iter().any(|c| c.status == Status::Fail) && !pods.iter().any(PodReport::is_problem);
        Report {
            namespace,
            healthy,
            checks,
            pods,
            stale,
        }
    }
}

/// Runs every read and check. Read errors on the installation are failed checks; an error
/// reading the target itself (the namespace's Pods, the Pod) is an `Err`.
pub async fn run(client: kube::Client, settings: &CheckSettings, now: OffsetDateTime) -> Result<Report, CheckError> {
    let facts = fetch::facts(&client, settings).await;
    // Parsed once: the `templates` check and every decision read the same set.
    let templates = health::live_templates(&facts.namespace, &facts.configmap);
    let mut checks = health::evaluate_with(&facts, &templates, now);

    let subjects = fetch::subjects(&client, &settings.target).await?;
    let snapshot = fetch::snapshot(&client, &subjects).await;
    let webhooks = match &facts.mutating {
        Some((_, Ok(Some(config)))) => Some(config.webhooks.clone().unwrap_or_default()),
        _ => None,
    };
    let installed = Installed {
        webhook_config: settings.webhook_config.as_deref().unwrap_or_default(),
        webhooks: webhooks.as_deref(),
        templates: templates.as_ref().map_err(String::as_str),
    };
    let pods = decision::explain_all(&subjects, &installed, &snapshot);

    let stale = if settings.stale {
        let scope = match &settings.target {
            Target::Namespace(namespace) | Target::Pod { namespace, .. } => Some(namespace.as_str()),
            Target::Installation | Target::Documents { .. } => None,
        };
        let groups = match &templates {
            Ok(live) => {
                let (pods, owners) = fetch::injected_pods(&client, scope).await?;
                stale::group(&pods, &owners, live)
            }
            Err(_) => Vec::new(),
        };
        checks.push(stale_check(&groups, templates.is_ok(), scope));
        Some(groups)
    } else {
        None
    };
    Ok(Report::new(settings.injector_namespace.clone(), checks, pods, stale))
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
