//! `envoy-injector inject`: reads the arguments and the files, streams the manifests
//! through `offline::run`, prints notes, warnings and errors on stderr.

use std::io::{BufWriter, Write};

use super::flags;
use crate::cli::{InjectArgs, OutputFormat, UninjectArgs, UninjectFormat};
use envoy_injector::offline::run::{Format, Message, StreamError, Summary, inject_stream, uninject_stream};
use envoy_injector::template::{ConfigError, TemplateSet};

#[derive(Debug, thiserror::Error)]
pub enum InjectCommandError {
    #[error("cannot read manifests from {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{path}: {source}")]
    Stream { path: String, source: StreamError },
    #[error("no documents found in {path}: expected at least one manifest")]
    Empty { path: String },
    #[error(
        "{failed} of the objects in {path} could not be processed (each is named above and left out of the output)"
    )]
    Failed { path: String, failed: usize },
}

impl From<OutputFormat> for Format {
    fn from(format: OutputFormat) -> Format {
        match format {
            OutputFormat::Yaml => Format::Yaml,
            OutputFormat::Json => Format::Json,
            OutputFormat::Jsonpatch => Format::JsonPatch,
            OutputFormat::Strategic => Format::Strategic,
        }
    }
}

pub fn run(args: &InjectArgs) -> Result<(), InjectCommandError> {
    let templates = match &args.config {
        Some(path) => TemplateSet::from_file(path, flags::kube_version(args.kube_version))?,
        None => TemplateSet::embedded(),
    };
    let format = args.output.into();
    stream(&args.file, |input, stdout, report| {
        inject_stream(input, stdout, &templates, format, report)
    })
}

/// `envoy-injector uninject`: the same reading, writing and reporting as `inject`.
pub fn run_uninject(args: &UninjectArgs) -> Result<(), InjectCommandError> {
    let format = match args.output {
        UninjectFormat::Yaml => Format::Yaml,
        UninjectFormat::Json => Format::Json,
        UninjectFormat::Jsonpatch => Format::JsonPatch,
    };
    stream(&args.file, |input, stdout, report| {
        uninject_stream(input, stdout, format, report)
    })
}

type Stdout = BufWriter<std::io::StdoutLock<'static>>;

/// Opens `file` (`-`: stdin), runs `each` over it to stdout with its messages on stderr,
/// and turns the summary into the command's result.
fn stream(
    file: &std::path::Path,
    each: impl FnOnce(Box<dyn std::io::BufRead + Send>, Stdout, &mut dyn FnMut(Message)) -> Result<Summary, StreamError>,
) -> Result<(), InjectCommandError> {
    let path = file.display().to_string();
    let input = flags::open(file).map_err(|source| InjectCommandError::Read {
        path: path.clone(),
        source,
    })?;
    let stdout = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    // Stderr is unbuffered: `writeln!` would make a system call per piece of each line.
    let mut stderr = std::io::LineWriter::new(std::io::stderr().lock());
    let mut report = |message: Message| {
        // A closed stderr must not stop the output; there is nowhere else to say it.
        let _ = match message {
            Message::Note(text) => writeln!(stderr, "note: {text}"),
            Message::Warning(text) => writeln!(stderr, "warning: {text}"),
            Message::Error(text) => writeln!(stderr, "error: {text}"),
        };
    };
    let summary = each(input, stdout, &mut report).map_err(|source| InjectCommandError::Stream {
        path: path.clone(),
        source,
    })?;
    if summary.failed > 0 {
        return Err(InjectCommandError::Failed {
            path,
            failed: summary.failed,
        });
    }
    if summary.documents == 0 {
        return Err(InjectCommandError::Empty { path });
    }
    Ok(())
}
