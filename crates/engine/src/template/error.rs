use std::fmt;
use std::path::PathBuf;

use super::validate::ValueError;
use super::yaml_locate::ConfigMapLines;

/// A field serde did not recognise, with where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownField {
    pub path: String,
    pub line: Option<usize>,
    pub hint: String,
}

impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown field `{}`", self.path)?;
        if let Some(line) = self.line {
            write!(f, " at line {line}")?;
        }
        write!(f, " ({})", self.hint)
    }
}

fn join(fields: &[UnknownField]) -> String {
    fields.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

fn at_line(line: &Option<usize>) -> String {
    line.map(|l| format!(" at line {l}")).unwrap_or_default()
}

/// What is wrong with one template.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TemplateError {
    #[error(
        "template `{template}`: expected YAML of a PodSpec fragment{}: {message}",
        at_line(line)
    )]
    Syntax {
        template: String,
        line: Option<usize>,
        message: String,
    },
    #[error("template `{template}`: {}", join(fields))]
    UnknownFields {
        template: String,
        fields: Vec<UnknownField>,
    },
    #[error(
        "template `{template}` is empty: expected at least one of containers, initContainers, volumes, imagePullSecrets, volumeMounts"
    )]
    Empty { template: String },
    #[error("template `{template}`: field `{path}`{}: {what} has no `name`", at_line(line))]
    MissingName {
        template: String,
        what: String,
        path: String,
        line: Option<usize>,
    },
    #[error(
        "template `{template}`: field `{path}`{}: two {kind} are named `{name}`; names must be unique",
        at_line(line)
    )]
    Duplicate {
        template: String,
        kind: &'static str,
        name: String,
        path: String,
        line: Option<usize>,
    },
    #[error("template `{template}`: field `{path}`{}: {message}", at_line(line))]
    Override {
        template: String,
        path: String,
        line: Option<usize>,
        message: String,
    },
    #[error(
        "template `{template}`: field `{path}`{}: a mount of volume `{volume}`, which the template does not define (its volumes: {defined})",
        at_line(line)
    )]
    UndefinedVolume {
        template: String,
        volume: String,
        defined: String,
        path: String,
        line: Option<usize>,
    },
    /// Values the API server would refuse in every Pod the template is injected into.
    #[error("template `{template}`: {}", errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Values { template: String, errors: Vec<ValueError> },
}

impl TemplateError {
    /// The ConfigMap key (template name) the error is about.
    pub fn template(&self) -> &str {
        match self {
            TemplateError::Syntax { template, .. }
            | TemplateError::UnknownFields { template, .. }
            | TemplateError::Empty { template }
            | TemplateError::MissingName { template, .. }
            | TemplateError::Duplicate { template, .. }
            | TemplateError::Override { template, .. }
            | TemplateError::UndefinedVolume { template, .. }
            | TemplateError::Values { template, .. } => template,
        }
    }

    /// The same error with its lines counted in the ConfigMap file the template came from
    /// (`inject --config cm.yaml`) instead of from the template's first line. A line
    /// the file does not map one for one (a quoted or folded value) stays the template's.
    pub fn in_file(mut self, file: &ConfigMapLines) -> TemplateError {
        let key = self.template().to_string();
        let map = |line: &mut Option<usize>| {
            if let Some(in_file) = line.and_then(|l| file.file_line(&key, l)) {
                *line = Some(in_file);
            }
        };
        match &mut self {
            TemplateError::Syntax { line, .. }
            | TemplateError::Override { line, .. }
            | TemplateError::MissingName { line, .. }
            | TemplateError::Duplicate { line, .. }
            | TemplateError::UndefinedVolume { line, .. } => map(line),
            TemplateError::UnknownFields { fields, .. } => fields.iter_mut().for_each(|f| map(&mut f.line)),
            TemplateError::Values { errors, .. } => errors.iter_mut().for_each(|e| map(&mut e.line)),
            TemplateError::Empty { .. } => {}
        }
        self
    }
}

/// What is wrong with a whole configuration source (file or ConfigMap).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "config {source_name}: expected a template or a ConfigMap in YAML{}: {message}",
        at_line(line)
    )]
    Syntax {
        source_name: String,
        line: Option<usize>,
        message: String,
    },
    #[error(
        "config {source_name}: expected one document, a template or the `envoy-injector` ConfigMap (its `data` keys are the templates), found several: {found}"
    )]
    SeveralDocuments { source_name: String, found: String },
    #[error("config {source_name}: expected kind ConfigMap (apiVersion v1), found {found}")]
    WrongKind { source_name: String, found: String },
    #[error(
        "ConfigMap {source_name}: data key `{key}`{} holds a {found}, expected a string with a template (is the `{key}: |` block indented consistently?)",
        at_line(line)
    )]
    DataNotString {
        source_name: String,
        key: String,
        line: Option<usize>,
        found: &'static str,
    },
    #[error("ConfigMap {source_name}: no `data` keys; expected key `config` with the default template")]
    NoTemplates { source_name: String },
    #[error("config {source_name}: {}", errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Templates {
        source_name: String,
        errors: Vec<TemplateError>,
    },
}
