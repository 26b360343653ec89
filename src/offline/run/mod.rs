//! The `inject` stream: documents are read, injected and written one at a time, so
//! memory follows the largest document, not the input. Every document that can be
//! processed is written; each one that cannot is left out of the output and reported.
//!
//! How a document is written is decided once, in `document`, on two questions: whether
//! it is written as the input's own text with the additions (or removals) spliced in
//! (`text`: YAML in and out) or from its tree (`tree`: JSON in or out, the patch formats,
//! and YAML that cannot be edited in place); and whether it is one object, or a `List`
//! whose items are injected and written one at a time.

mod text;
mod tree;

#[cfg(test)]
mod tests;

use std::io::{BufRead, Write};

use serde_json::Value as Json;

use super::paths::PodPaths;
use super::view::{engine_view, identity};
use super::{OfflineError, Outcome, Renderings, describe, inject_object, place, type_name, uninject_object};
use crate::template::TemplateSet;
use crate::yaml::ahead::{InOrder, Piece, Reading, parse_ahead, workers};
use crate::yaml::node::{Node, Value};
use crate::yaml::packed::Packed;
use crate::yaml::read::{Document, ReadError};
use crate::yaml::splice;
use crate::yaml::split::{InputError, json_values, starts_like_json};

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

/// What the stream does to each object.
#[derive(Clone, Copy)]
enum Action<'a> {
    Inject(&'a TemplateSet),
    /// Removes what the status annotation records (`uninject`).
    Uninject,
}

/// Reads manifests from `input`, writes the result to `output` in `format` as each
/// document is done, and hands every note, warning and error to `report`.
pub fn inject_stream<R: BufRead + Send, W: Write>(
    input: R,
    output: W,
    templates: &TemplateSet,
    format: Format,
    report: &mut dyn FnMut(Message),
) -> Result<Summary, StreamError> {
    stream(input, output, Action::Inject(templates), format, report)
}

/// As [`inject_stream`], but undoing each object's injection (`uninject`). The strategic
/// merge patch is not a format of it: it can only add.
pub fn uninject_stream<R: BufRead + Send, W: Write>(
    input: R,
    output: W,
    format: Format,
    report: &mut dyn FnMut(Message),
) -> Result<Summary, StreamError> {
    stream(input, output, Action::Uninject, format, report)
}

fn stream<R: BufRead + Send, W: Write>(
    mut input: R,
    output: W,
    action: Action<'_>,
    format: Format,
    report: &mut dyn FnMut(Message),
) -> Result<Summary, StreamError> {
    let mut stream = Stream {
        action,
        format,
        output,
        report,
        summary: Summary::default(),
        pending_comments: Vec::new(),
        written: 0,
        held_json: None,
        json_tail: None,
        json_count: 0,
        done: Vec::new(),
        splicing: false,
        renders: splice::Renders::default(),
    };
    if starts_like_json(&mut input)? {
        for (index, value) in json_values(input).enumerate() {
            match value {
                Ok(root) => {
                    stream.document(
                        index + 1,
                        None,
                        Document {
                            root: Some(root),
                            ..Document::default()
                        },
                        None,
                    )?;
                    // Built on this thread: freed here.
                    stream.done.clear();
                }
                Err(e) if e.is_io() => {
                    return Err(StreamError::Input(InputError {
                        line: e.line(),
                        source: e.into(),
                    }));
                }
                Err(e) => {
                    // A JSON stream cannot be resumed after a syntax error.
                    stream.fail(OfflineError::Syntax {
                        at: place(&format!("document {}", index + 1), None, Some(e.line())),
                        message: format!(
                            "expected JSON (the input starts with `{{`, so kubectl reads it as JSON): {e}"
                        ),
                    });
                    break;
                }
            }
        }
    } else {
        stream.splicing = format == Format::Yaml;
        // Only output that is the input's text needs it, and where things are in it.
        let reading = match stream.splicing {
            true => Reading::Text(&PodPaths),
            false => Reading::Values,
        };
        // Cutting on one thread, parsing ahead on others, injecting and writing here in
        // input order; bounded channels keep a few parsed documents in flight.
        std::thread::scope(|scope| -> Result<(), StreamError> {
            stream.pieces(parse_ahead(scope, input, workers(), reading))
        })?;
    }
    stream.finish()
}

struct Stream<'a, W> {
    action: Action<'a>,
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
    /// `-o json`, once the output `List` is open: the fields to write after its items.
    json_tail: Option<Vec<Entry>>,
    json_count: usize,
    /// Trees the parsing threads built, done with, to be freed there (see `ahead`).
    done: Vec<Node>,
    /// YAML in and out: each document written as its own text, edited.
    splicing: bool,
    /// The additions' text, written once for many documents.
    renders: splice::Renders,
}

/// A map entry of a `Node`.
type Entry = (String, Node);

fn is_list(node: &Node) -> bool {
    node.get("kind")
        .and_then(Node::as_str)
        .is_some_and(|kind| kind.ends_with("List"))
        && matches!(node.get("items").map(|i| &i.value), Some(Value::Seq(_)))
}

/// How a `List`'s item `i` (from 0), whose view is `json`, is named in messages:
/// `document 1 (List), item 3 (a string) at line 9`.
fn item_place(at: &str, i: usize, item: &Node, json: &Json) -> String {
    let what = match json.is_object() {
        true => describe(json),
        false => type_name(json).to_string(),
    };
    place(&format!("{at}, item {}", i + 1), Some(&what), item.line())
}

/// The items of a `List` in turn: its tree's, or, where they were packed as they were
/// read, each unpacked as it comes, so that their trees are never all in memory.
fn list_items(tree: Vec<Node>, packed: Vec<Packed>) -> Box<dyn Iterator<Item = Node>> {
    match packed.is_empty() {
        true => Box::new(tree.into_iter()),
        false => Box::new(packed.into_iter().map(|p| p.unpack())),
    }
}

impl<W: Write> Stream<'_, W> {
    /// What the action is handed of an object: injection its engine view; `uninject` the
    /// whole object, since whether a map it would empty is the injector's own depends on
    /// every key there (an `ownerReferences` the view prunes must keep `metadata`).
    fn view(&self, node: &Node) -> Json {
        match self.action {
            Action::Inject(_) => engine_view(node),
            Action::Uninject => node.to_json(),
        }
    }

    /// A tree a parsing thread built, done with.
    fn discard(&mut self, tree: Node) {
        self.done.push(tree);
    }

    /// A `List`'s item, done with: one `unpacked` here is freed here, one of the tree the
    /// parsing thread built goes back there.
    fn done_with_item(&mut self, item: Node, unpacked: bool) {
        match unpacked {
            true => drop(item),
            false => self.discard(item),
        }
    }

    /// Tells the user; an error counts as a failure.
    fn say(&mut self, message: Message) {
        if matches!(message, Message::Error(_)) {
            self.summary.failed += 1;
        }
        (self.report)(message);
    }

    fn fail(&mut self, error: OfflineError) {
        self.say(Message::Error(error.to_string()));
    }

    /// The parsed pieces of a YAML input, each with its first line, document by document.
    fn pieces(&mut self, mut parsed: InOrder) -> Result<(), StreamError> {
        let mut index = 0;
        while let Some(piece) = parsed.next() {
            let Piece {
                first_line,
                text,
                documents,
            } = piece?;
            self.piece(&mut index, first_line, &text, documents, &mut parsed)?;
            parsed.free_text(text);
        }
        Ok(())
    }

    /// The documents of one piece of a YAML input, `text`, or why it could not be read;
    /// `index` counts the documents so far.
    fn piece(
        &mut self,
        index: &mut usize,
        first_line: usize,
        text: &str,
        documents: Result<Vec<Document>, ReadError>,
        parsed: &mut InOrder,
    ) -> Result<(), StreamError> {
        match documents {
            Ok(documents) => {
                let roots = documents.iter().filter(|d| d.root.is_some()).count();
                if self.splicing && roots == 0 {
                    // Comments only, or nothing: the text as it is.
                    self.output.write_all(text.as_bytes())?;
                }
                // A piece is one document (`split` cuts at every `---`); should it hold
                // more, each is written from its tree.
                let own_text = (self.splicing && roots == 1).then_some(text);
                for document in documents {
                    if document.root.is_some() {
                        *index += 1;
                        self.document(*index, Some(first_line), document, own_text)?;
                        self.done.drain(..).for_each(|tree| parsed.free(tree));
                    } else if !self.splicing {
                        self.pending_comments.extend(document.trailing);
                    }
                }
            }
            Err(e) => {
                *index += 1;
                self.fail(OfflineError::Syntax {
                    at: place(&format!("document {index}"), None, Some(e.line.unwrap_or(first_line))),
                    message: e.message,
                });
            }
        }
        Ok(())
    }

    /// One document; `text` is its piece of the input when the output is that text.
    fn document(
        &mut self,
        index: usize,
        chunk_line: Option<usize>,
        mut document: Document,
        text: Option<&str>,
    ) -> Result<(), StreamError> {
        if document.root.as_ref().is_some_and(|root| !is_list(root)) {
            // Its `items` were packed as a List's, but it is not one: whole again.
            document.unpack();
        }
        let Some(mut root) = document.root.take() else {
            return Ok(());
        };
        let list = is_list(&root);
        self.summary.documents += 1;
        let line = root.line().or(chunk_line);
        let Document {
            trailing,
            warnings,
            packed_items,
            aliased,
            ..
        } = document;
        // A List is processed item by item; only its identity is needed whole.
        let json = match list {
            true => identity(&root),
            false => self.view(&root),
        };
        let at = super::at_document(index, &json, line);
        for warning in warnings {
            self.say(Message::Warning(format!("{at}: {warning}")));
        }
        // A List's items are edited in its text one by one, unless an addition to one
        // could show wherever an alias repeats one of its nodes in another.
        let text = match text {
            Some(_)
                if list
                    && root
                        .get("items")
                        .is_some_and(|items| splice::aliases_cross_items(items, &aliased)) =>
            {
                self.say(Message::Warning(format!(
                    "{at}: written anew, not as the input's text: an alias repeats a node of another item"
                )));
                None
            }
            text => text,
        };
        if list {
            return match text {
                Some(text) => self.list_as_text(&at, root, packed_items, text, &aliased),
                None => self.list_from_tree(&at, root, packed_items, &trailing),
            };
        }
        let Some(outcome) = self.object(&at, &mut root, &json, text.is_some()) else {
            return Ok(());
        };
        match text {
            Some(text) => self.object_as_text(&at, root, &trailing, &outcome, text, &aliased),
            None => self.object_from_tree(&at, root, &trailing, &outcome),
        }
    }

    /// Injects one object in place (unless its output is its `spliced` text, which the
    /// caller edits); `None` when it failed (reported).
    fn object(&mut self, at: &str, node: &mut Node, json: &Json, spliced: bool) -> Option<Outcome> {
        let renderings = if self.format == Format::Strategic {
            Renderings::JsonPatchAndStrategic
        } else {
            Renderings::JsonPatch
        };
        let outcome = match self.action {
            Action::Inject(templates) => inject_object(at, json, templates, renderings),
            Action::Uninject => uninject_object(at, json),
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                self.fail(error);
                return None;
            }
        };
        for warning in &outcome.warnings {
            self.say(Message::Warning(format!("{at}: {warning}")));
        }
        if let Some(skipped) = outcome.skipped.as_ref().filter(|s| !s.quiet) {
            self.say(Message::Note(format!("{at}: left unchanged: {}", skipped.reason)));
        }
        if matches!(self.format, Format::Yaml | Format::Json)
            && !spliced
            && let Err(message) = apply(node, &outcome.json_patch)
        {
            self.fail(OfflineError::Encode {
                at: at.to_string(),
                format: "YAML",
                message: format!("the computed patch does not apply: {message}"),
            });
            return None;
        }
        Some(outcome)
    }
}

/// Applies an outcome's operations to the tree they were planned on.
fn apply(node: &mut Node, patch: &json_patch::Patch) -> Result<(), String> {
    for op in &patch.0 {
        match op {
            json_patch::PatchOperation::Add(add) => node.add(&add.path, Node::from_json(&add.value))?,
            json_patch::PatchOperation::Remove(remove) => node.remove(&remove.path)?,
            other => return Err(format!("unexpected operation {other:?}")),
        }
    }
    Ok(())
}
