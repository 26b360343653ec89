//! `envoy-injector policies`: the admission policies a template file compiles to.

use std::io::Write;

use super::flags;
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

/// The comment that opens the YAML output: what it is, the Kubernetes it needs, and what
/// each binding selects (read from the bindings themselves).
fn header(file: &std::path::Path, templates: &TemplateSet, compiled: &policies::Compiled) -> String {
    let left: Vec<&str> = compiled.not_compiled.iter().map(|n| n.template.as_str()).collect();
    let names: Vec<&str> = templates.names().filter(|n| !left.contains(n)).collect();
    let mut out = format!(
        "# Admission policies compiled by `envoy-injector policies` from {}, templates {}:\n\
         # they inject a Pod that opted in with the template it chose, or refuse it in the\n\
         # webhook's words. Needs Kubernetes 1.36 or later (MutatingAdmissionPolicy\n\
         # admissionregistration.k8s.io/v1); what they leave to the webhook: docs/policies.md.\n",
        file.display(),
        names.join(", "),
    );
    for object in &compiled.objects {
        let Ok(value) = serde_json::to_value(object) else {
            continue;
        };
        if !value["kind"].as_str().is_some_and(|k| k.ends_with("Binding")) {
            continue;
        }
        let resources = &value["spec"]["matchResources"];
        let mut parts = Vec::new();
        for (key, what) in [("namespaceSelector", "namespaces"), ("objectSelector", "Pods")] {
            let selector = selector_text(&resources[key]);
            if !selector.is_empty() {
                parts.push(format!("{what} {selector}"));
            }
        }
        let selects = if parts.is_empty() {
            String::from("every namespace")
        } else {
            parts.join("; ")
        };
        let name = value["metadata"]["name"].as_str().unwrap_or_default();
        out.push_str(&format!("# Binding {name}: {selects}\n"));
    }
    out
}

/// A label selector as kubectl writes one: `key notin (a,b),other=value`.
fn selector_text(selector: &serde_json::Value) -> String {
    let mut parts: Vec<String> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    for expression in selector["matchExpressions"].as_array().into_iter().flatten() {
        let key = expression["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        parts.push(match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        });
    }
    parts.join(",")
}

pub fn run(args: &PoliciesArgs) -> Result<(), PoliciesCommandError> {
    let templates = TemplateSet::from_file(&args.file, flags::kube_version(args.kube_version))?;
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
            let mut out = header(&args.file, &templates, &compiled);
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
