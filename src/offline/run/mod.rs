//! The `inject` stream: documents are read, injected and written one at a time, so
//! memory follows the largest document, not the input. Every document that can be
//! processed is written; each one that cannot is left out of the output and reported.
//! YAML in, YAML out: the output is the input's text with the additions (or removals)
//! spliced in (`text`); JSON in or out, the documents are written from their trees.

mod handed;
mod text;

use std::io::{BufRead, Write};

use serde_json::Value as Json;

use super::paths::PodPaths;
use super::view::{engine_view, identity};
use super::{OfflineError, Outcome, Renderings, describe, inject_object, type_name, uninject_object};
use crate::template::TemplateSet;
use crate::yaml::ahead::{Body, InOrder, Piece, Reading, parse_ahead, workers};
use crate::yaml::node::{Node, Value};
use crate::yaml::packed::Packed;
use crate::yaml::read::{Document, ReadError};
use crate::yaml::splice;
use crate::yaml::split::{InputError, json_values, starts_like_json};
use crate::yaml::write::{self, Out, Style, comment_lines, first_not_json, json, yaml_document};

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
    stream(
        input,
        output,
        Action::Inject(templates),
        format,
        report,
        Settings::default(),
    )
    .map(|(s, _)| s)
}

/// As [`inject_stream`], but undoing each object's injection (`uninject`). The strategic
/// merge patch is not a format of it: it can only add.
pub fn uninject_stream<R: BufRead + Send, W: Write>(
    input: R,
    output: W,
    format: Format,
    report: &mut dyn FnMut(Message),
) -> Result<Summary, StreamError> {
    stream(input, output, Action::Uninject, format, report, Settings::default()).map(|(s, _)| s)
}

/// How the stream goes about its work, where tests need to choose.
#[derive(Debug, Clone, Copy)]
struct Settings {
    /// Whether a large piece is handed over while parsed (`ahead::Handing`).
    hand_over: bool,
    /// What the items of a `List` handed over may hold (`handed`); `None`: the default.
    hold_at_most: Option<usize>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            hand_over: true,
            hold_at_most: None,
        }
    }
}

/// The stream, and how many `List`s were written from the work done on their items as
/// they were read.
fn stream<R: BufRead + Send, W: Write>(
    mut input: R,
    output: W,
    action: Action<'_>,
    format: Format,
    report: &mut dyn FnMut(Message),
    settings: Settings,
) -> Result<(Summary, usize), StreamError> {
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
        held: None,
        settings,
        handed_lists: 0,
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
            stream.pieces(parse_ahead(scope, input, workers(), reading, settings.hand_over))
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
    /// Messages held back instead of told (and errors not yet counted): those of a
    /// `List`'s items injected before the `List` is known to be one (`handed`).
    held: Option<Vec<Message>>,
    settings: Settings,
    /// `List`s written from the work done on their items as they were read.
    handed_lists: usize,
}

fn is_list(node: &Node) -> bool {
    node.get("kind")
        .and_then(Node::as_str)
        .is_some_and(|kind| kind.ends_with("List"))
        && matches!(node.get("items").map(|i| &i.value), Some(Value::Seq(_)))
}

/// How every message names what it is about (`document 2 (Pod web) at line 14`,
/// `document 1 (List), item 3 (a string) at line 9`): `what` it is and its line, when
/// known.
fn place(name: &str, what: Option<&str>, line: Option<usize>) -> String {
    let mut at = name.to_string();
    if let Some(what) = what {
        at.push_str(&format!(" ({what})"));
    }
    if let Some(line) = line {
        at.push_str(&format!(" at line {line}"));
    }
    at
}

/// What opens a YAML document in the output: `---` unless it is the first, then the
/// comments of the comment-only pieces read before it.
fn yaml_document_start(out: &mut Out<'_>, first: bool, pending_comments: &[String]) {
    if !first {
        out.push_str("---\n");
    }
    comment_lines(out, pending_comments, 0);
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

    /// Tells the user, or holds the message back (see `held`).
    fn say(&mut self, message: Message) {
        match &mut self.held {
            Some(held) => held.push(message),
            None => {
                if matches!(message, Message::Error(_)) {
                    self.summary.failed += 1;
                }
                (self.report)(message);
            }
        }
    }

    fn fail(&mut self, error: OfflineError) {
        self.say(Message::Error(error.to_string()));
    }

    /// Refuses `object`, named `at`, when it holds a value JSON cannot hold (a NaN or an
    /// infinity); the field is named by its place in that same object. True if refused.
    fn refuse_not_json(&mut self, at: &str, object: &Node) -> bool {
        let Some(found) = first_not_json(object) else {
            return false;
        };
        self.fail(OfflineError::Encode {
            at: at.to_string(),
            format: "JSON",
            message: found.to_string(),
        });
        true
    }

    /// The parsed pieces of a YAML input, each with its first line, document by document.
    fn pieces(&mut self, mut parsed: InOrder) -> Result<(), StreamError> {
        let mut index = 0;
        while let Some(piece) = parsed.next() {
            let Piece { first_line, body } = piece?;
            match body {
                Body::Read { text, documents } => {
                    self.piece(&mut index, first_line, &text, documents, &mut parsed, None)?;
                    parsed.free_text(text);
                }
                Body::Handing(handing) => self.handing(&mut index, first_line, handing, &mut parsed)?,
            }
        }
        Ok(())
    }

    /// The documents of one piece of a YAML input, `text`, or why it could not be read;
    /// `index` counts the documents so far. `handed` is what was done of its `List`'s
    /// items while they were read, already checked to hold for it (see `handed`).
    fn piece(
        &mut self,
        index: &mut usize,
        first_line: usize,
        text: &str,
        documents: Result<Vec<Document>, ReadError>,
        parsed: &mut InOrder,
        mut handed: Option<handed::Speculation>,
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
                        self.document(*index, Some(first_line), document, own_text, handed.take())?;
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
        handed: Option<handed::Speculation>,
    ) -> Result<(), StreamError> {
        let Some(mut root) = document.root.take() else {
            return Ok(());
        };
        self.summary.documents += 1;
        let Document {
            trailing,
            warnings,
            packed_items,
            aliased,
            ..
        } = document;
        let line = root.line().or(chunk_line);
        let list = is_list(&root);
        // A List is processed item by item; only its identity is needed whole.
        let mut json = if list || !packed_items.is_empty() {
            identity(&root)
        } else {
            self.view(&root)
        };
        // A non-object is named by number only: its error says what was found.
        let what = json.is_object().then(|| describe(&json));
        let at = place(&format!("document {index}"), what.as_deref(), line);
        for warning in warnings {
            self.say(Message::Warning(format!("{at}: {warning}")));
        }
        if list {
            if let Some(text) = text {
                if !root
                    .get("items")
                    .is_some_and(|items| splice::aliases_cross_items(items, &aliased))
                {
                    return match handed {
                        Some(handed) => self.commit_list_text(&at, root, handed, text, &aliased),
                        None => self.stream_list_text(&at, root, packed_items, text, &aliased),
                    };
                }
                // An item's addition could show wherever one of its nodes is aliased.
                self.say(Message::Warning(format!(
                    "{at}: written anew, not as the input's text: an alias repeats a node of another item"
                )));
            }
            return self.stream_list(&at, root, packed_items, &trailing);
        }
        if !packed_items.is_empty() {
            // Not a List after all (an object with an `items` field): whole again.
            let mut whole = Document {
                root: Some(root),
                packed_items,
                ..Document::default()
            };
            whole.unpack();
            root = whole.root.take().unwrap_or_else(|| Node::from(Value::Null));
            json = self.view(&root);
        }
        let spliced = text.is_some();
        let Some(outcome) = self.object(&at, &mut root, &json, spliced) else {
            return Ok(());
        };
        match text {
            Some(text) => self.write_text(&at, root, &trailing, &outcome, text, &aliased),
            None => self.write(&at, root, &trailing, &outcome),
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

    /// A `List`: each item is injected, written and dropped in turn, so the injected
    /// additions (and, for a packed List, the items' trees) are never all in memory.
    fn stream_list(
        &mut self,
        at: &str,
        mut root: Node,
        packed: Vec<Packed>,
        trailing: &[String],
    ) -> Result<(), StreamError> {
        let (position, items_meta, tree_items) = {
            let Value::Map(entries) = &mut root.value else {
                return Ok(());
            };
            let Some(position) = entries.iter().rposition(|(k, _)| k == "items") else {
                return Ok(());
            };
            let items_meta = entries[position].1.meta.take();
            let tree_items = match &mut entries[position].1.value {
                Value::Seq(items) => std::mem::take(items),
                _ => Vec::new(),
            };
            (position, items_meta, tree_items)
        };
        // The List without its items (each is checked as it is written), so that a field
        // is named by its place in the List.
        if self.format == Format::Json && self.refuse_not_json(at, &root) {
            return Ok(());
        }
        let Value::Map(entries) = &root.value else {
            return Ok(());
        };
        // Packed items are unpacked one at a time, as they are written.
        let packed_list = !packed.is_empty();
        let items: Box<dyn Iterator<Item = Node>> = if packed.is_empty() {
            Box::new(tree_items.into_iter())
        } else {
            Box::new(packed.into_iter().map(|p| p.unpack()))
        };
        let (head, rest) = entries.split_at(position);
        let tail = &rest[1..];
        match self.format {
            Format::Yaml => {
                let mut out = Out::default();
                yaml_document_start(&mut out, self.written == 0, &std::mem::take(&mut self.pending_comments));
                if let Some(meta) = root.meta.as_deref() {
                    comment_lines(&mut out, &meta.before, 0);
                }
                write::entries(&mut out, head, 0, Style::KUBECTL);
                self.output.write_all(out.into_string().as_bytes())?;
            }
            Format::Json => self.open_json_list(Some((head, tail)))?,
            Format::JsonPatch | Format::Strategic => {}
        }
        self.written += 1;
        let mut any = false;
        for (i, mut item) in items.enumerate() {
            let item_json = self.view(&item);
            let what = if item_json.is_object() {
                describe(&item_json)
            } else {
                type_name(&item_json).to_string()
            };
            let item_at = place(&format!("{at}, item {}", i + 1), Some(&what), item.line());
            let Some(outcome) = self.object(&item_at, &mut item, &item_json, false) else {
                continue;
            };
            let mut out = Out::default();
            match self.format {
                Format::Yaml => {
                    if !any {
                        write::list_key(&mut out, "items", items_meta.as_deref(), 0);
                    }
                    write::item(&mut out, &item, 0, Style::KUBECTL);
                }
                Format::Json => {
                    if self.refuse_not_json(&item_at, &item) {
                        continue;
                    }
                    json_item(&mut out, &item, &mut self.json_count);
                }
                Format::JsonPatch | Format::Strategic => patch_line(&mut out, self.format, &outcome),
            }
            any = true;
            self.output.write_all(out.into_string().as_bytes())?;
            // A packed item was unpacked here: it is freed here.
            if packed_list {
                drop(item);
            } else {
                self.discard(item);
            }
        }
        if self.format == Format::Yaml {
            let mut out = Out::default();
            if !any {
                write::entries(
                    &mut out,
                    &[(String::from("items"), Node::from(Value::Seq(Vec::new())))],
                    0,
                    Style::KUBECTL,
                );
            }
            write::entries(&mut out, tail, 0, Style::KUBECTL);
            comment_lines(&mut out, trailing, 0);
            self.output.write_all(out.into_string().as_bytes())?;
        }
        Ok(())
    }

    /// Opens the output `List` of `-o json` if it is not open yet. `list` is the
    /// document that forces it open when it is a `List` itself: if it is the first
    /// document, its own fields frame the output (so a single `List` comes out as
    /// itself); otherwise a plain `v1` `List` holds everything, a held first document
    /// first.
    fn open_json_list(&mut self, list: Option<(&[Entry], &[Entry])>) -> Result<(), StreamError> {
        if self.json_tail.is_some() {
            return Ok(());
        }
        let held = self.held_json.take();
        let mut out = Out::to(&mut self.output);
        match (held, list) {
            (None, Some((head, tail))) => {
                out.push('{');
                for (key, value) in head {
                    out.push_str("\n  ");
                    write::json_field(&mut out, key, value, 2);
                    out.push(',');
                }
                out.push_str("\n  \"items\": [");
                self.json_tail = Some(tail.to_vec());
            }
            (held, _) => {
                out.push_str("{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": [");
                self.json_tail = Some(Vec::new());
                if let Some(first) = held {
                    json_item(&mut out, &first, &mut self.json_count);
                }
            }
        }
        out.finish()?;
        Ok(())
    }

    /// Writes one injected document; the patch formats write its `outcome` instead.
    fn write(&mut self, at: &str, root: Node, trailing: &[String], outcome: &Outcome) -> Result<(), StreamError> {
        if self.format == Format::Json && self.refuse_not_json(at, &root) {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending_comments);
        let first = self.written == 0;
        self.written += 1;
        match self.format {
            Format::Yaml => {
                let mut out = Out::to(&mut self.output);
                yaml_document_start(&mut out, first, &pending);
                yaml_document(&mut out, &root, trailing);
                out.finish()?;
            }
            Format::Json => {
                if self.json_tail.is_none() {
                    if self.held_json.is_none() {
                        self.held_json = Some(root);
                        return Ok(());
                    }
                    self.open_json_list(None)?;
                }
                let mut out = Out::to(&mut self.output);
                json_item(&mut out, &root, &mut self.json_count);
                out.finish()?;
            }
            Format::JsonPatch | Format::Strategic => {
                let mut out = Out::to(&mut self.output);
                patch_line(&mut out, self.format, outcome);
                out.finish()?;
            }
        }
        self.discard(root);
        Ok(())
    }

    fn finish(mut self) -> Result<(Summary, usize), StreamError> {
        let mut out = Out::to(&mut self.output);
        match self.format {
            Format::Yaml => comment_lines(&mut out, &self.pending_comments, 0),
            Format::Json => match self.json_tail.take() {
                Some(tail) => {
                    out.push_str("\n  ]");
                    for (key, value) in &tail {
                        out.push_str(",\n  ");
                        write::json_field(&mut out, key, value, 2);
                    }
                    out.push_str("\n}\n");
                }
                None => {
                    if let Some(only) = self.held_json.take() {
                        json(&mut out, &only, 0);
                        out.push('\n');
                    }
                }
            },
            Format::JsonPatch | Format::Strategic => {}
        }
        out.finish()?;
        self.output.flush()?;
        Ok((self.summary, self.handed_lists))
    }
}

/// A map entry of a `Node`.
type Entry = (String, Node);

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

/// One object in the output `List` of `-o json`.
fn json_item(out: &mut Out<'_>, item: &Node, count: &mut usize) {
    out.push_str(if *count > 0 { ",\n    " } else { "\n    " });
    json(out, item, 4);
    *count += 1;
}

/// One line of `-o jsonpatch` / `-o strategic`.
fn patch_line(out: &mut Out<'_>, format: Format, outcome: &Outcome) {
    let line = if format == Format::JsonPatch {
        serde_json::to_string(&outcome.json_patch)
    } else {
        serde_json::to_string(outcome.strategic.as_ref().unwrap_or(&Json::Object(Default::default())))
    };
    // Serialising plain JSON values cannot fail.
    out.push_str(&line.unwrap_or_default());
    out.push('\n');
}

#[cfg(test)]
mod tests;
