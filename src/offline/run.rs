//! The `inject` stream: documents are read, injected and written one at a time, so
//! memory follows the largest document, not the input. Every document that can be
//! processed is written; each one that cannot is left out of the output and reported.

use std::io::{BufRead, Write};

use serde_json::Value as Json;

use super::node::{Node, Value};
use super::read::{Document, read_documents};
use super::split::{InputError, YamlChunks, json_values, starts_like_json};
use super::write::{comment_lines, first_not_json, json, yaml_document};
use super::{OfflineError, Outcome, describe, inject_object, type_name};
use crate::template::TemplateSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The documents, injected, as multi-document YAML.
    Yaml,
    /// One object, or a `List` of all objects when there are several.
    Json,
    /// One RFC 6902 array per object, one per line.
    JsonPatch,
    /// One strategic merge patch per object, one per line.
    Strategic,
}

/// What the user is told on the side (stderr), in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Left unchanged, and why.
    Note(String),
    /// Processed, but something looks wrong.
    Warning(String),
    /// Not processed: left out of the output.
    Error(String),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Documents read (empty ones not counted).
    pub documents: usize,
    /// Objects (documents or `List` items) that could not be processed.
    pub failed: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// Reads manifests from `input`, writes the result to `output` in `format` as each
/// document is done, and hands every note, warning and error to `report`.
pub fn inject_stream<R: BufRead, W: Write>(
    mut input: R,
    output: W,
    templates: &TemplateSet,
    format: Format,
    report: &mut dyn FnMut(Message),
) -> Result<Summary, StreamError> {
    let mut stream = Stream {
        templates,
        format,
        output,
        report,
        summary: Summary::default(),
        pending_comments: Vec::new(),
        written: 0,
        held_json: None,
        json_list_open: false,
        json_count: 0,
    };
    if starts_like_json(&mut input)? {
        for (index, value) in json_values(input).enumerate() {
            match value {
                Ok(root) => stream.document(index + 1, None, root, Vec::new(), Vec::new())?,
                Err(e) if e.is_io() => {
                    return Err(StreamError::Input(InputError {
                        line: e.line(),
                        source: e.into(),
                    }));
                }
                Err(e) => {
                    // A JSON stream cannot be resumed after a syntax error.
                    stream.fail(OfflineError::Syntax {
                        at: format!("document {} at line {}", index + 1, e.line()),
                        message: format!(
                            "expected JSON (the input starts with `{{`, so kubectl reads it as JSON): {e}"
                        ),
                    });
                    break;
                }
            }
        }
    } else {
        let mut index = 0;
        for chunk in YamlChunks::new(input) {
            let chunk = chunk?;
            match read_documents(&chunk.text, chunk.first_line) {
                Ok(documents) => {
                    for Document {
                        root,
                        trailing,
                        warnings,
                    } in documents
                    {
                        match root {
                            Some(root) => {
                                index += 1;
                                stream.document(index, Some(chunk.first_line), root, trailing, warnings)?;
                            }
                            None => stream.pending_comments.extend(trailing),
                        }
                    }
                }
                Err(e) => {
                    index += 1;
                    stream.fail(OfflineError::Syntax {
                        at: format!("document {index} at line {}", e.line.unwrap_or(chunk.first_line)),
                        message: e.message,
                    });
                }
            }
        }
    }
    stream.finish()
}

struct Stream<'a, W> {
    templates: &'a TemplateSet,
    format: Format,
    output: W,
    report: &'a mut dyn FnMut(Message),
    summary: Summary,
    /// Comments of comment-only pieces, written before the next document.
    pending_comments: Vec<String>,
    written: usize,
    /// JSON output: the first document, held until a second shows whether the output
    /// is that object alone or a `List`.
    held_json: Option<Node>,
    json_list_open: bool,
    json_count: usize,
}

fn is_list(node: &Node) -> bool {
    node.get("kind")
        .and_then(Node::as_str)
        .is_some_and(|kind| kind.ends_with("List"))
        && matches!(node.get("items").map(|i| &i.value), Some(Value::Seq(_)))
}

fn items_mut(node: &mut Node) -> Option<&mut Vec<Node>> {
    match &mut node.value {
        Value::Map(entries) => {
            entries
                .iter_mut()
                .rev()
                .find(|(k, _)| k == "items")
                .and_then(|(_, v)| match &mut v.value {
                    Value::Seq(items) => Some(items),
                    _ => None,
                })
        }
        _ => None,
    }
}

fn place(index: usize, line: Option<usize>, object: &Json) -> String {
    let what = if object.is_object() {
        describe(object)
    } else {
        String::new()
    };
    let mut at = format!("document {index}");
    if !what.is_empty() {
        at.push_str(&format!(" ({what})"));
    }
    if let Some(line) = line {
        at.push_str(&format!(" at line {line}"));
    }
    at
}

impl<W: Write> Stream<'_, W> {
    fn fail(&mut self, error: OfflineError) {
        self.summary.failed += 1;
        (self.report)(Message::Error(error.to_string()));
    }

    fn document(
        &mut self,
        index: usize,
        chunk_line: Option<usize>,
        mut root: Node,
        trailing: Vec<String>,
        warnings: Vec<String>,
    ) -> Result<(), StreamError> {
        self.summary.documents += 1;
        let line = root.line().or(chunk_line);
        let json = root.to_json();
        let at = place(index, line, &json);
        for warning in warnings {
            (self.report)(Message::Warning(format!("{at}: {warning}")));
        }
        let mut patches = Vec::new();
        if is_list(&root) {
            drop(json);
            let Some(items) = items_mut(&mut root) else {
                return Ok(());
            };
            let mut kept = Vec::with_capacity(items.len());
            for (i, mut item) in std::mem::take(items).into_iter().enumerate() {
                let item_json = item.to_json();
                let item_at = format!(
                    "{at}, item {} ({}){}",
                    i + 1,
                    if item_json.is_object() {
                        describe(&item_json)
                    } else {
                        type_name(&item_json).to_string()
                    },
                    item.line().map(|l| format!(" at line {l}")).unwrap_or_default()
                );
                if let Some(patch) = self.object(&item_at, &mut item, &item_json) {
                    patches.push(patch);
                    kept.push(item);
                }
            }
            if let Some(items) = items_mut(&mut root) {
                *items = kept;
            }
        } else {
            match self.object(&at, &mut root, &json) {
                Some(patch) => patches.push(patch),
                None => return Ok(()),
            }
        }
        self.write(root, &trailing, patches)
    }

    /// Injects one object in place; `None` when it failed (reported).
    fn object(&mut self, at: &str, node: &mut Node, json: &Json) -> Option<Outcome> {
        let outcome = match inject_object(at, json, self.templates) {
            Ok(outcome) => outcome,
            Err(error) => {
                self.fail(error);
                return None;
            }
        };
        for warning in &outcome.warnings {
            (self.report)(Message::Warning(format!("{at}: {warning}")));
        }
        if let Some(skipped) = outcome.skipped.as_ref().filter(|s| !s.quiet) {
            (self.report)(Message::Note(format!("{at}: left unchanged: {}", skipped.reason)));
        }
        if matches!(self.format, Format::Yaml | Format::Json) {
            for op in &outcome.json_patch.0 {
                let applied = match op {
                    json_patch::PatchOperation::Add(add) => {
                        node.add(&add.path.to_string(), Node::from_json(&add.value))
                    }
                    other => Err(format!("unexpected operation {other:?}")),
                };
                if let Err(message) = applied {
                    self.fail(OfflineError::Encode {
                        at: at.to_string(),
                        format: "YAML",
                        message: format!("the computed patch does not apply: {message}"),
                    });
                    return None;
                }
            }
        }
        Some(outcome)
    }

    fn write(&mut self, root: Node, trailing: &[String], patches: Vec<Outcome>) -> Result<(), StreamError> {
        let mut text = String::new();
        match self.format {
            Format::Yaml => {
                if self.written > 0 {
                    text.push_str("---\n");
                }
                comment_lines(&mut text, &std::mem::take(&mut self.pending_comments), 0);
                yaml_document(&mut text, &root, trailing);
            }
            Format::Json => {
                if let Err(e) = self.check_json(&root) {
                    self.fail(e);
                    return Ok(());
                }
                if !self.json_list_open {
                    match self.held_json.take() {
                        None => {
                            self.held_json = Some(root);
                            return Ok(());
                        }
                        Some(first) => {
                            text.push_str("{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": [");
                            self.json_list_open = true;
                            self.json_items(&mut text, first);
                        }
                    }
                }
                self.json_items(&mut text, root);
            }
            Format::JsonPatch | Format::Strategic => {
                for outcome in patches {
                    let line = if self.format == Format::JsonPatch {
                        serde_json::to_string(&outcome.json_patch)
                    } else {
                        serde_json::to_string(&outcome.strategic)
                    };
                    // Serialising plain JSON values cannot fail.
                    text.push_str(&line.unwrap_or_default());
                    text.push('\n');
                }
            }
        }
        self.written += 1;
        self.output.write_all(text.as_bytes())?;
        Ok(())
    }

    fn check_json(&self, root: &Node) -> Result<(), OfflineError> {
        match first_not_json(root) {
            None => Ok(()),
            Some(e) => Err(OfflineError::Encode {
                at: place(self.summary.documents, root.line(), &root.to_json()),
                format: "JSON",
                message: e.to_string(),
            }),
        }
    }

    /// Items of the output `List`: a `List` document contributes its items.
    fn json_items(&mut self, text: &mut String, node: Node) {
        let items = if is_list(&node) {
            match node.value {
                Value::Map(entries) => entries
                    .into_iter()
                    .rev()
                    .find(|(k, _)| k == "items")
                    .and_then(|(_, v)| match v.value {
                        Value::Seq(items) => Some(items),
                        _ => None,
                    })
                    .unwrap_or_default(),
                _ => Vec::new(),
            }
        } else {
            vec![node]
        };
        for item in items {
            text.push_str(if self.json_count > 0 { ",\n    " } else { "\n    " });
            // Checked by check_json before.
            let _ = json(text, &item, 4, &mut String::new());
            self.json_count += 1;
        }
    }

    fn finish(mut self) -> Result<Summary, StreamError> {
        let mut text = String::new();
        match self.format {
            Format::Yaml => comment_lines(&mut text, &self.pending_comments, 0),
            Format::Json if self.json_list_open => text.push_str("\n  ]\n}\n"),
            Format::Json => {
                if let Some(only) = self.held_json.take() {
                    let _ = json(&mut text, &only, 0, &mut String::new());
                    text.push('\n');
                }
            }
            Format::JsonPatch | Format::Strategic => {}
        }
        self.output.write_all(text.as_bytes())?;
        self.output.flush()?;
        Ok(self.summary)
    }
}
