//! `envoy-injector policies`: the admission policies a template file compiles to.

use std::io::Write;

use crate::cli::{PoliciesArgs, PoliciesFormat};
use envoy_injector::inject::AnnotationOptIn;
use envoy_injector::policies::{self, Options};
use envoy_injector::template::{ConfigError, TemplateSet};

#[derive(Debug, thiserror::Error)]
pub enum PoliciesCommandError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot write the policies: {0}")]
    Encode(String),
    #[error("cannot write to stdout: {0}")]
    Write(#[from] std::io::Error),
}

pub fn run(args: &PoliciesArgs) -> Result<(), PoliciesCommandError> {
    let templates = TemplateSet::from_file(&args.file)?;
    let compiled = policies::compile(
        &templates,
        &Options {
            injector_namespace: args.namespace.clone(),
            annotation_opt_in: if args.annotation_opt_in {
                AnnotationOptIn::On
            } else {
                AnnotationOptIn::Off
            },
        },
    );
    for left in &compiled.not_compiled {
        eprintln!(
            "note: template `{}` is left to the webhook: {}",
            left.template, left.reason
        );
    }
    let text = match args.output {
        PoliciesFormat::Yaml => {
            let mut out = String::new();
            for object in &compiled.objects {
                out.push_str("---\n");
                out.push_str(
                    &serde_yaml_ng::to_string(object).map_err(|e| PoliciesCommandError::Encode(e.to_string()))?,
                );
            }
            out
        }
        PoliciesFormat::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": compiled.objects});
            let mut text =
                serde_json::to_string_pretty(&list).map_err(|e| PoliciesCommandError::Encode(e.to_string()))?;
            text.push('\n');
            text
        }
    };
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}
