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

fn at_line(line: &Option<usize>) -> String {
    line.map(|l| format!(" at line {l}")).unwrap_or_default()
}

/// At most this many faults are named in one report; the rest are counted (`and 12 more
/// faults`), since past a few dozen a list is no longer read.
pub const MAX_FAULTS: usize = 30;

/// A report's greatest length in bytes, where the whole list is shown (the CLI, the log,
/// the validating webhook's denial, which the API server passes on to kubectl whole): a
/// screenful. An Event's note asks for less ([`ConfigError::report`]).
pub const MAX_REPORT_BYTES: usize = 8 * 1024;

/// One fault of a template that does not stop the reading: each is found and reported
/// with the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    UnknownField(UnknownField),
    /// Nothing to inject.
    Empty,
    MissingName {
        what: String,
        path: String,
        line: Option<usize>,
    },
    Duplicate {
        kind: &'static str,
        name: String,
        path: String,
        line: Option<usize>,
    },
    /// A mistake in an entry of `overrides` or `fromPod`.
    Override {
        path: String,
        line: Option<usize>,
        message: String,
    },
    UndefinedVolume {
        volume: String,
        defined: String,
        path: String,
        line: Option<usize>,
    },
    /// A value the API server would refuse in every Pod the template is injected into.
    Value(ValueError),
}

impl Fault {
    /// The template's line of the fault (none: the template as a whole).
    pub fn line(&self) -> Option<usize> {
        match self {
            Fault::UnknownField(UnknownField { line, .. })
            | Fault::MissingName { line, .. }
            | Fault::Duplicate { line, .. }
            | Fault::Override { line, .. }
            | Fault::UndefinedVolume { line, .. }
            | Fault::Value(ValueError { line, .. }) => *line,
            Fault::Empty => None,
        }
    }

    fn line_mut(&mut self) -> Option<&mut Option<usize>> {
        match self {
            Fault::UnknownField(UnknownField { line, .. })
            | Fault::MissingName { line, .. }
            | Fault::Duplicate { line, .. }
            | Fault::Override { line, .. }
            | Fault::UndefinedVolume { line, .. }
            | Fault::Value(ValueError { line, .. }) => Some(line),
            Fault::Empty => None,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::UnknownField(field) => field.fmt(f),
            Fault::Empty => f.write_str(
                "the template is empty: expected at least one of containers, initContainers, volumes, imagePullSecrets, volumeMounts, found none",
            ),
            Fault::MissingName { what, path, line } => {
                write!(f, "field `{path}`{}: {what} has no `name`", at_line(line))
            }
            Fault::Duplicate { kind, name, path, line } => write!(
                f,
                "field `{path}`{}: two {kind} are named `{name}`; names must be unique",
                at_line(line)
            ),
            Fault::Override { path, line, message } => write!(f, "field `{path}`{}: {message}", at_line(line)),
            Fault::UndefinedVolume {
                volume,
                defined,
                path,
                line,
            } => write!(
                f,
                "field `{path}`{}: a mount of volume `{volume}`, which the template does not define (its volumes: {defined})",
                at_line(line)
            ),
            Fault::Value(value) => value.fmt(f),
        }
    }
}

/// What is wrong with one template.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// The reading stopped: the text is not YAML, or a value is of a type its field cannot
    /// hold (serde cannot build the template), so nothing after it was checked.
    #[error(
        "template `{template}`: expected YAML of a PodSpec fragment{}: {message}",
        at_line(line)
    )]
    Syntax {
        template: String,
        line: Option<usize>,
        message: String,
    },
    /// Every other fault found, in the order of the text (by line).
    #[error("{}", bounded("", &parts(template, faults), MAX_REPORT_BYTES))]
    Faults { template: String, faults: Vec<Fault> },
}

/// A report's parts, one a fault, the first named with its template as the messages have
/// always begun: `template `config`: field ...`.
fn parts(template: &str, faults: &[Fault]) -> Vec<String> {
    faults
        .iter()
        .enumerate()
        .map(|(i, fault)| match i {
            0 => format!("template `{template}`: {fault}"),
            _ => fault.to_string(),
        })
        .collect()
}

/// The one place a report is cut: `head`, then the parts joined by `; ` while at most
/// [`MAX_FAULTS`] are shown and the whole fits `max_bytes`, then how many were left out.
/// A first part too long alone is cut inside, so that what names the place is kept.
fn bounded(head: &str, parts: &[String], max_bytes: usize) -> String {
    let more = |left: usize| format!("; and {left} more fault{}", if left == 1 { "" } else { "s" });
    // Room for the count is kept while anything may follow; the count of all is the longest.
    let tail = more(parts.len()).len();
    let mut out = String::from(head);
    let mut shown = 0;
    for part in parts {
        let separator = if shown == 0 { "" } else { "; " };
        let reserve = if shown + 1 < parts.len() { tail } else { 0 };
        if shown == MAX_FAULTS || out.len() + separator.len() + part.len() + reserve > max_bytes {
            if shown == 0 {
                let room = max_bytes.saturating_sub(out.len() + reserve + '…'.len_utf8());
                out.push_str(&part[..part.floor_char_boundary(room)]);
                out.push('…');
                shown = 1;
            }
            break;
        }
        out.push_str(separator);
        out.push_str(part);
        shown += 1;
    }
    if shown < parts.len() {
        out.push_str(&more(parts.len() - shown));
    }
    out
}

impl TemplateError {
    /// The ConfigMap key (template name) the error is about.
    pub fn template(&self) -> &str {
        match self {
            TemplateError::Syntax { template, .. } | TemplateError::Faults { template, .. } => template,
        }
    }

    /// The faults found (none for an error that stopped the reading).
    pub fn faults(&self) -> &[Fault] {
        match self {
            TemplateError::Syntax { .. } => &[],
            TemplateError::Faults { faults, .. } => faults,
        }
    }

    /// The report's parts, for a report of several templates.
    fn parts(&self) -> Vec<String> {
        match self {
            TemplateError::Syntax { .. } => vec![self.to_string()],
            TemplateError::Faults { template, faults } => parts(template, faults),
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
            TemplateError::Syntax { line, .. } => map(line),
            TemplateError::Faults { faults, .. } => faults.iter_mut().filter_map(Fault::line_mut).for_each(map),
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
    #[error("{}", templates_report(source_name, errors, MAX_REPORT_BYTES))]
    Templates {
        source_name: String,
        errors: Vec<TemplateError>,
    },
}

fn templates_report(source_name: &str, errors: &[TemplateError], max_bytes: usize) -> String {
    let parts: Vec<String> = errors.iter().flat_map(TemplateError::parts).collect();
    bounded(&format!("config {source_name}: "), &parts, max_bytes)
}

impl ConfigError {
    /// The message in at most `max_bytes` (an Event's note), the faults that do not fit
    /// counted; [`Display`](fmt::Display) is this at [`MAX_REPORT_BYTES`].
    pub fn report(&self, max_bytes: usize) -> String {
        match self {
            ConfigError::Templates { source_name, errors } => templates_report(source_name, errors, max_bytes),
            other => bounded("", &[other.to_string()], max_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(n: usize) -> Fault {
        Fault::UnknownField(UnknownField {
            path: format!("containers[{n}].imag"),
            line: Some(n + 1),
            hint: String::from("did you mean `image`?"),
        })
    }

    #[test]
    fn a_report_names_at_most_max_faults_and_counts_the_rest() {
        let error = TemplateError::Faults {
            template: String::from("config"),
            faults: (0..100).map(unknown).collect(),
        };
        let message = error.to_string();
        assert!(
            message.starts_with("template `config`: unknown field `containers[0].imag` at line 1"),
            "{message}"
        );
        assert_eq!(message.matches("unknown field").count(), MAX_FAULTS, "{message}");
        assert!(message.ends_with("; and 70 more faults"), "{message}");
        assert!(message.len() <= MAX_REPORT_BYTES);
    }

    #[test]
    fn a_report_fits_its_bytes_with_the_count_of_what_is_left_out() {
        let errors = vec![
            TemplateError::Faults {
                template: String::from("a"),
                faults: (0..3).map(unknown).collect(),
            },
            TemplateError::Syntax {
                template: String::from("b"),
                line: Some(2),
                message: String::from("did not find expected key"),
            },
        ];
        let error = ConfigError::Templates {
            source_name: String::from("ns/cm"),
            errors,
        };
        let whole = error.to_string();
        assert!(
            whole.starts_with("config ns/cm: template `a`: unknown field"),
            "{whole}"
        );
        assert!(
            whole.ends_with("template `b`: expected YAML of a PodSpec fragment at line 2: did not find expected key"),
            "{whole}"
        );
        assert!(!whole.contains("more fault"), "{whole}");
        for max in [60, 150, 200, 300] {
            let cut = error.report(max);
            assert!(cut.len() <= max, "{max}: {} bytes: {cut}", cut.len());
            assert!(cut.contains(" more fault"), "{max}: {cut}");
        }
        assert!(
            error.report(150).ends_with("; and 3 more faults"),
            "{}",
            error.report(150)
        );
        // One fault that alone does not fit is cut inside, its start kept.
        let cut = error.report(60);
        assert!(cut.starts_with("config ns/cm: template `a`: unknown"), "{cut}");
        assert!(cut.ends_with("…; and 3 more faults"), "{cut}");
    }
}
