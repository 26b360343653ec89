//! Documents written from their trees: YAML anew in kubectl's style (JSON input, or a
//! List whose items an alias ties together), JSON (one object, or a `List` of all), and
//! the patch formats, one line per object.

use std::io::Write;

use serde_json::Value as Json;

use super::{Entry, Format, Stream, StreamError, item_place, list_items};
use crate::offline::{OfflineError, Outcome};
use crate::yaml::node::{Node, Value};
use crate::yaml::packed::Packed;
use crate::yaml::write::{self, Out, Style, comment_lines, first_not_json, json, yaml_document};

/// What opens a YAML document in the output: `---` unless it is the first, then the
/// comments of the comment-only pieces read before it.
fn yaml_document_start(out: &mut Out<'_>, first: bool, pending_comments: &[String]) {
    if !first {
        out.push_str("---\n");
    }
    comment_lines(out, pending_comments, 0);
}

impl<W: Write> Stream<'_, W> {
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

    /// A `List`: each item is injected, written and dropped in turn, so the injected
    /// additions (and, for a packed List, the items' trees) are never all in memory.
    pub(super) fn list_from_tree(
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
        let unpacked = !packed.is_empty();
        let items = list_items(tree_items, packed);
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
            let item_at = item_place(at, i, &item, &item_json);
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
            self.done_with_item(item, unpacked);
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
    pub(super) fn object_from_tree(
        &mut self,
        at: &str,
        root: Node,
        trailing: &[String],
        outcome: &Outcome,
    ) -> Result<(), StreamError> {
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

    /// What ends the output once every document is written.
    pub(super) fn finish(mut self) -> Result<super::Summary, StreamError> {
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
        Ok(self.summary)
    }
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
