//! Every template of one configuration, by name: the ConfigMap's keys read and parsed
//! whole, and the embedded set the binary ships (`config`, the default, and `classic`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::error::{ConfigError, TemplateError};
use super::parse::Template;
use super::validate::KubeVersion;
use super::yaml_locate;

/// The ConfigMap key of the template used when a Pod names none.
pub const DEFAULT_TEMPLATE: &str = "config";

/// The default template compiled into the binary (`serve --standalone`, `inject` and
/// `check -f` without `--config`): a current Envoy whose bootstrap is inline, on ports of
/// its own.
pub const EMBEDDED_DEFAULT: &str = include_str!("default-template.yaml");

/// The name of the previous default template, kept for the Pods that ask for it.
pub const CLASSIC_TEMPLATE: &str = "classic";

/// The previous default: a classic Envoy sidecar on port 80 whose configuration comes
/// from a ConfigMap `envoy` in the Pod's namespace.
pub const EMBEDDED_CLASSIC: &str = include_str!("classic-template.yaml");

/// Every template of one configuration, by name. Immutable: a reload builds a new set and
/// swaps it in whole, so a Pod never sees half of an update.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateSet {
    templates: BTreeMap<String, Arc<Template>>,
    /// Where it came from, for logs and metrics: a file path, `embedded`, or ns/name.
    pub source: String,
}

impl TemplateSet {
    /// The embedded templates, as the shipped ConfigMap holds them: the default under the
    /// key `config`, the previous default under `classic`.
    pub fn embedded() -> TemplateSet {
        // The embedded texts are part of the binary; unit tests check them against every
        // supported Kubernetes version.
        let templates = [
            (DEFAULT_TEMPLATE, EMBEDDED_DEFAULT),
            (CLASSIC_TEMPLATE, EMBEDDED_CLASSIC),
        ]
        .into_iter()
        .map(|(name, text)| {
            Template::parse(name, text, KubeVersion::NEWEST)
                .unwrap_or_else(|err| panic!("embedded template `{name}` is invalid: {err}"))
        })
        .collect();
        TemplateSet::from_templates("embedded", templates)
    }

    fn from_templates(source: &str, templates: Vec<Template>) -> TemplateSet {
        TemplateSet {
            templates: templates.into_iter().map(|t| (t.name.clone(), Arc::new(t))).collect(),
            source: source.to_string(),
        }
    }

    /// Builds the set from a ConfigMap's `data`: every key is a template, its values checked
    /// for the API server of `version`. All keys must pass, or none is taken.
    pub fn from_data(
        source_name: &str,
        data: &BTreeMap<String, String>,
        version: KubeVersion,
    ) -> Result<TemplateSet, ConfigError> {
        match TemplateSet::from_data_keeping(source_name, data, version)? {
            (set, None) => Ok(set),
            (_, Some(refused)) => Err(refused),
        }
    }

    /// Builds the set as [`TemplateSet::from_data`] does, but keeps it when its only faults
    /// are values the API server would refuse, returned beside it (the templates a running
    /// injector loaded before these rules: `reload` serves them on, loudly).
    pub fn from_data_keeping(
        source_name: &str,
        data: &BTreeMap<String, String>,
        version: KubeVersion,
    ) -> Result<(TemplateSet, Option<ConfigError>), ConfigError> {
        if data.is_empty() {
            return Err(ConfigError::NoTemplates {
                source_name: source_name.to_string(),
            });
        }
        let mut templates = Vec::with_capacity(data.len());
        let mut errors = Vec::new();
        let mut refused = Vec::new();
        for (key, text) in data {
            match Template::parse_keeping_values(key, text, version) {
                Ok((template, values)) => {
                    templates.push(template);
                    refused.extend(values);
                }
                Err(err) => errors.push(err),
            }
        }
        let as_error = |errors: Vec<TemplateError>| ConfigError::Templates {
            source_name: source_name.to_string(),
            errors,
        };
        if !errors.is_empty() {
            // Every fault at once: the value errors of the templates that parsed too.
            errors.extend(refused);
            errors.sort_by(|a, b| a.template().cmp(b.template()));
            return Err(as_error(errors));
        }
        let refused = (!refused.is_empty()).then(|| as_error(refused));
        Ok((TemplateSet::from_templates(source_name, templates), refused))
    }

    /// Reads `--config FILE`: either a bare template or a whole ConfigMap manifest.
    pub fn from_file(path: &Path, version: KubeVersion) -> Result<TemplateSet, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        TemplateSet::from_text(&path.display().to_string(), &text, version)
    }

    /// Parses a bare template or a ConfigMap manifest from text.
    pub fn from_text(source_name: &str, text: &str, version: KubeVersion) -> Result<TemplateSet, ConfigError> {
        let (value, single) = one_document(source_name, text)?;
        let text = single.as_deref().unwrap_or(text);
        let kind = value.get("kind").and_then(|k| k.as_str());
        match kind {
            None => {
                let template =
                    Template::parse(DEFAULT_TEMPLATE, text, version).map_err(|err| ConfigError::Templates {
                        source_name: source_name.to_string(),
                        errors: vec![err],
                    })?;
                Ok(TemplateSet::from_templates(source_name, vec![template]))
            }
            Some("ConfigMap") => {
                let data = configmap_data(source_name, text, &value)?;
                // The user has this file open: its lines, not each template's own.
                TemplateSet::from_data(source_name, &data, version).map_err(|err| match err {
                    ConfigError::Templates { source_name, errors } => {
                        let lines = yaml_locate::ConfigMapLines::build(text);
                        ConfigError::Templates {
                            source_name,
                            errors: errors.into_iter().map(|e| e.in_file(&lines)).collect(),
                        }
                    }
                    other => other,
                })
            }
            Some(other) => Err(ConfigError::WrongKind {
                source_name: source_name.to_string(),
                found: other.to_string(),
            }),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Template>> {
        self.templates.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.templates.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.templates.len()
    }

    pub fn is_empty(&self) -> bool {
        self.templates.is_empty()
    }
}

/// The one document of a `--config` file: a template or a ConfigMap. Empty documents
/// (a leading or trailing `---`) do not count; when there are any, the text comes back
/// with its document markers blanked, so that the one document parses alone on the same
/// lines.
fn one_document(source_name: &str, text: &str) -> Result<(serde_yaml_ng::Value, Option<String>), ConfigError> {
    let syntax = |err: serde_yaml_ng::Error| ConfigError::Syntax {
        source_name: source_name.to_string(),
        line: err.location().map(|l| l.line()),
        message: yaml_locate::without_locations(&err.to_string()),
    };
    let mut documents = Vec::new();
    let mut count = 0;
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        count += 1;
        let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(document).map_err(syntax)?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    match documents.len() {
        0 => Ok((serde_yaml_ng::Value::Null, None)),
        1 if count == 1 => Ok((documents.remove(0), None)),
        1 => {
            let blanked: String = text
                .split_inclusive('\n')
                .map(|line| {
                    let marker = line.trim_end();
                    let bare = marker.split_once(" #").map_or(marker, |(m, _)| m).trim_end();
                    if bare == "---" || bare == "..." { "\n" } else { line }
                })
                .collect();
            Ok((documents.remove(0), Some(blanked)))
        }
        _ => Err(ConfigError::SeveralDocuments {
            source_name: source_name.to_string(),
            found: documents.iter().map(describe_document).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// A document of a `--config` file, as an error lists it: `ConfigMap envoy-injector`,
/// `a template`.
fn describe_document(document: &serde_yaml_ng::Value) -> String {
    let kind = document.get("kind").and_then(|k| k.as_str());
    let name = document
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str());
    match (kind, name) {
        (Some(kind), Some(name)) => format!("{kind} {name}"),
        (Some(kind), None) => kind.to_string(),
        (None, _) if document.is_mapping() => String::from("a template"),
        (None, _) => String::from("a value that is neither"),
    }
}

fn configmap_data(
    source_name: &str,
    text: &str,
    manifest: &serde_yaml_ng::Value,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let Some(data) = manifest.get("data").and_then(|d| d.as_mapping()) else {
        return Err(ConfigError::NoTemplates {
            source_name: source_name.to_string(),
        });
    };
    let lines = yaml_locate::LineIndex::build(text);
    let mut out = BTreeMap::new();
    for (key, value) in data {
        let key = match key {
            serde_yaml_ng::Value::String(s) => s.clone(),
            other => serde_yaml_ng::to_string(other).unwrap_or_default().trim().to_string(),
        };
        let found = match value {
            serde_yaml_ng::Value::String(s) => {
                out.insert(key, s.clone());
                continue;
            }
            serde_yaml_ng::Value::Sequence(_) => "list",
            serde_yaml_ng::Value::Mapping(_) => "mapping",
            serde_yaml_ng::Value::Null => "null",
            serde_yaml_ng::Value::Bool(_) => "boolean",
            serde_yaml_ng::Value::Number(_) => "number",
            serde_yaml_ng::Value::Tagged(_) => "tagged value",
        };
        let path = [
            yaml_locate::Segment::Key(String::from("data")),
            yaml_locate::Segment::Key(key.clone()),
        ];
        return Err(ConfigError::DataNotString {
            source_name: source_name.to_string(),
            line: lines.line_of(&path),
            key,
            found,
        });
    }
    Ok(out)
}
