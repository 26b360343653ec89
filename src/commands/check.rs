//! `envoy-injector check`: maps the flags onto [`CheckSettings`], runs the checks against
//! the current kubeconfig's cluster and prints the report. Returns whether it is healthy.

use std::io::{Read, Write};

use super::flags::{self, non_empty};
use crate::cli::{CheckArgs, CheckOutput};
use envoy_injector::check::{self, CheckError, CheckSettings, Target};
use envoy_injector::offline::read::{self, ReadError};

#[derive(Debug, thiserror::Error)]
pub enum CheckCommandError {
    #[error("cannot reach the cluster (KUBECONFIG or in-cluster config): {0}")]
    Client(#[from] kube::Error),
    #[error("cannot read manifests from {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("expected YAML or JSON manifests that kubectl can read, found: {0}")]
    Manifest(#[from] ReadError),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error("cannot write the report: {0}")]
    Write(#[from] std::io::Error),
}

fn read_documents(path: &std::path::Path) -> Result<Vec<serde_json::Value>, CheckCommandError> {
    let shown = path.display().to_string();
    let mut text = String::new();
    let read = flags::open(path).and_then(|mut input| input.read_to_string(&mut text));
    read.map_err(|source| CheckCommandError::Read { path: shown, source })?;
    Ok(read::objects(&text)?)
}

/// The settings `args` ask for; `default_namespace` is the kubeconfig context's.
pub fn settings(args: &CheckArgs, default_namespace: &str) -> Result<CheckSettings, CheckCommandError> {
    let namespace = args.namespace.clone().unwrap_or_else(|| default_namespace.to_string());
    let target = match (&args.pod, &args.file, &args.namespace) {
        (Some(pod), _, _) => Target::Pod {
            namespace,
            name: pod.clone(),
        },
        (None, Some(file), _) => Target::Documents {
            namespace,
            documents: read_documents(file)?,
        },
        (None, None, Some(namespace)) => Target::Namespace(namespace.clone()),
        (None, None, None) => Target::Installation,
    };
    Ok(CheckSettings {
        target,
        stale: args.stale,
        missing: args.missing,
        injector_namespace: args.injector_namespace.clone(),
        webhook_config: non_empty(&args.webhook_config),
        validating_webhook_config: non_empty(&args.validating_webhook_config),
        tls_secret: non_empty(&args.tls_secret),
        lease_name: non_empty(&args.lease_name),
    })
}

pub async fn run(args: CheckArgs) -> Result<bool, CheckCommandError> {
    let client = kube::Client::try_default().await?;
    let settings = settings(&args, client.default_namespace())?;
    let report = check::run(client, &settings, time::OffsetDateTime::now_utc()).await?;
    let text = match args.output {
        CheckOutput::Text => check::render::text(&report),
        // Plain data of strings, numbers and bools: serialising cannot fail.
        CheckOutput::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(report.healthy)
}
