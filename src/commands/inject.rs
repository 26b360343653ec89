//! `envoy-injector inject`: offline injection of manifests.

use std::io::{Read, Write};

use serde_json::{Value, json};

use crate::cli::{InjectArgs, OutputFormat};
use crate::offline::{self, Injected, OfflineError};
use crate::template::{ConfigError, TemplateSet};

#[derive(Debug, thiserror::Error)]
pub enum InjectCommandError {
    #[error("cannot read manifests from {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Offline(#[from] OfflineError),
    #[error("no documents found in {path}: expected at least one manifest")]
    Empty { path: String },
    #[error("cannot write the output: {0}")]
    Write(#[from] std::io::Error),
}

fn read_input(args: &InjectArgs) -> Result<String, InjectCommandError> {
    let path = args.file.display().to_string();
    let mut text = String::new();
    let result = if path == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(&args.file).map(|t| text = t)
    };
    result.map_err(|source| InjectCommandError::Read {
        path: path.clone(),
        source,
    })?;
    Ok(text)
}

/// Renders the injected documents in the requested format.
pub fn render(results: &[Injected], format: OutputFormat) -> Result<String, OfflineError> {
    let encode = |index: usize, format: &'static str, e: &dyn std::fmt::Display| OfflineError::Encode {
        index: index + 1,
        format,
        message: e.to_string(),
    };
    let mut out = String::new();
    match format {
        OutputFormat::Yaml => {
            for (index, doc) in results.iter().enumerate() {
                if index > 0 {
                    out.push_str("---\n");
                }
                out.push_str(&serde_yaml_ng::to_string(&doc.result).map_err(|e| encode(index, "YAML", &e))?);
            }
        }
        OutputFormat::Json => {
            let value = match results {
                [one] => one.result.clone(),
                many => json!({
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": many.iter().map(|d| d.result.clone()).collect::<Vec<Value>>(),
                }),
            };
            out = serde_json::to_string_pretty(&value).map_err(|e| encode(0, "JSON", &e))?;
            out.push('\n');
        }
        OutputFormat::Jsonpatch | OutputFormat::Strategic => {
            for (index, doc) in results.iter().enumerate() {
                let line = if format == OutputFormat::Jsonpatch {
                    serde_json::to_string(&doc.json_patch)
                } else {
                    serde_json::to_string(&doc.strategic)
                };
                out.push_str(&line.map_err(|e| encode(index, "JSON", &e))?);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

pub fn run(args: &InjectArgs) -> Result<(), InjectCommandError> {
    let templates = match &args.config {
        Some(path) => TemplateSet::from_file(path)?,
        None => TemplateSet::embedded(),
    };
    let text = read_input(args)?;
    let documents = offline::read_documents(&text)?;
    if documents.is_empty() {
        return Err(InjectCommandError::Empty {
            path: args.file.display().to_string(),
        });
    }
    let results = documents
        .iter()
        .enumerate()
        .map(|(index, doc)| offline::inject_document(index + 1, doc, &templates))
        .collect::<Result<Vec<_>, _>>()?;
    for (index, result) in results.iter().enumerate() {
        if let Some(reason) = &result.skipped {
            tracing::debug!(document = index + 1, %reason, "left unchanged");
        }
    }
    let rendered = render(&results, args.output)?;
    std::io::stdout().lock().write_all(rendered.as_bytes())?;
    Ok(())
}
