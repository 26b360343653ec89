//! `envoy-injector check`: maps the flags onto [`CheckSettings`], runs the checks against
//! the current kubeconfig's cluster and prints the report. Returns whether it is healthy.
//! `-f FILE` without a kubeconfig (or with `--offline`) consults no cluster: the file is
//! explained from itself and the template.

use std::io::{Read, Write};

use super::flags::{self, non_empty};
use super::kubeconfig::{self, KubeconfigError};
use crate::cli::{CheckArgs, CheckOutput};
use envoy_injector::check::{self, CheckSettings, Report, Target};
use envoy_injector::cluster;
use envoy_injector::offline;
use envoy_injector::template::{ConfigError, KubeVersion, TemplateSet};
use envoy_injector::yaml::read::ReadError;

#[derive(Debug, thiserror::Error)]
pub enum CheckCommandError {
    #[error(transparent)]
    NoKubeconfig(#[from] KubeconfigError),
    #[error("cannot use the kubeconfig: {0}")]
    Client(#[from] kube::Error),
    #[error("cannot read manifests from {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: expected YAML or JSON manifests that kubectl can read, found: {source}")]
    Manifest { path: String, source: ReadError },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Cluster(#[from] cluster::ReadError),
    #[error("cannot write the report: {0}")]
    Write(#[from] std::io::Error),
}

fn read_documents(path: &std::path::Path) -> Result<Vec<offline::ManifestObject>, CheckCommandError> {
    let shown = path.display().to_string();
    let mut text = String::new();
    let read = flags::open(path).and_then(|mut input| input.read_to_string(&mut text));
    read.map_err(|source| CheckCommandError::Read {
        path: shown.clone(),
        source,
    })?;
    offline::objects(&text).map_err(|source| CheckCommandError::Manifest { path: shown, source })
}

/// The settings `args` ask for; `default_namespace` is the kubeconfig context's, and
/// `documents` those of `-f`, already read.
pub fn settings(
    args: &CheckArgs,
    default_namespace: &str,
    documents: Option<Vec<serde_json::Value>>,
    templates: Option<TemplateSet>,
    kube_version: KubeVersion,
) -> CheckSettings {
    let namespace = args.namespace.clone().unwrap_or_else(|| default_namespace.to_string());
    let target = match (&args.pod, documents, &args.namespace) {
        (Some(pod), _, _) => Target::Pod {
            namespace,
            name: pod.clone(),
        },
        (None, Some(documents), _) => Target::Documents { namespace, documents },
        (None, None, Some(namespace)) => Target::Namespace(namespace.clone()),
        (None, None, None) => Target::Installation,
    };
    CheckSettings {
        target,
        stale: args.stale,
        missing: args.missing,
        drift: args.drift,
        injector_namespace: args.injector_namespace.clone(),
        webhook_config: non_empty(&args.webhook_config),
        validating_webhook_config: non_empty(&args.validating_webhook_config),
        tls_secret: non_empty(&args.tls_secret),
        lease_name: non_empty(&args.lease_name),
        deployment: non_empty(&args.deployment),
        templates,
        kube_version,
    }
}

/// The namespace of documents that name none when no cluster says which: `-n`, else
/// `default`, as kubectl without a context.
const OFFLINE_NAMESPACE: &str = "default";

pub async fn run(args: CheckArgs) -> Result<bool, CheckCommandError> {
    // The user's files first: a missing one is reported as that, whatever the cluster.
    let located = args.file.as_deref().map(read_documents).transpose()?;
    // What `inject` refuses of the file is reported, and fails the check, the same way.
    let unreadable = located.as_deref().map(check::unreadable).unwrap_or_default();
    let documents = located.map(|l| l.into_iter().map(|d| d.object).collect::<Vec<_>>());
    let config = args.config.as_deref().map(read_config).transpose()?;
    let needs_cluster = args.file.is_none() || args.stale || args.missing || args.drift;
    let cluster = if args.offline {
        None
    } else if needs_cluster {
        Some(kubeconfig::find()?)
    } else {
        kubeconfig::find().ok()
    };
    let report = match (cluster, documents) {
        (None, Some(documents)) => {
            let (templates, from) = match config {
                Some((source, text)) => (
                    TemplateSet::from_text(&source, &text, flags::kube_version(args.kube_version))?,
                    format!("template file {}", given_path(&args)),
                ),
                None => (TemplateSet::embedded(), String::from("the embedded default template")),
            };
            let namespace = args.namespace.as_deref().unwrap_or(OFFLINE_NAMESPACE);
            check::explain_offline(&documents, namespace, &templates, &from)
        }
        (_, documents) => {
            let client = kube::Client::try_default().await?;
            // The cluster's API server checks its Pods: its version's rules, read here once for
            // the given templates and the live ones alike.
            let version = envoy_injector::client::kube_version(&client).await;
            let templates = config
                .map(|(source, text)| TemplateSet::from_text(&source, &text, version))
                .transpose()?;
            let settings = settings(&args, client.default_namespace(), documents, templates, version);
            check::run(client, &settings, time::OffsetDateTime::now_utc()).await?
        }
    };
    let report = report.with_unreadable(unreadable);
    print(&report, args.output)?;
    Ok(report.healthy)
}

/// `--config`'s text, read first so that a missing file is reported as that.
fn read_config(path: &std::path::Path) -> Result<(String, String), CheckCommandError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((path.display().to_string(), text))
}

fn given_path(args: &CheckArgs) -> String {
    args.config
        .as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn print(report: &Report, output: CheckOutput) -> Result<(), CheckCommandError> {
    let text = match output {
        CheckOutput::Text => check::render::text(report),
        // Plain data of strings, numbers and bools: serialising cannot fail.
        CheckOutput::Json => serde_json::to_string_pretty(report).unwrap_or_default() + "\n",
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
