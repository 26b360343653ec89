//! YAML out of YAML in: each document is written as its own piece of the input with the
//! edits `splice` makes of its outcome, so that every byte not added (or removed) is
//! the input's. A value rewritten whole, or an edit inside an anchored node that is
//! aliased elsewhere, is read back and compared with the tree the outcome makes; what
//! cannot be made in the text, or would read back different, is written anew from the
//! tree (the document, or the `List` item), and the user is told.

use std::io::Write;

use json_patch::{Patch, PatchOperation};

use super::{Action, Message, Stream, StreamError, apply, item_place, list_items};
use crate::offline::{OfflineError, Outcome};
use crate::yaml::node::{Node, Value};
use crate::yaml::packed::Packed;
use crate::yaml::read::{Aliased, read_documents};
use crate::yaml::splice::{self, Edit, Edits, ItemText, NotInText};
use crate::yaml::write::{Out, yaml_document};

/// The keys an injection creates, in the order it creates them (`inject::jsonpatch`):
/// what `uninject` needs to tell them from the input's own.
const CREATED_IN_ORDER: &[&str] = &[
    "initContainers",
    "containers",
    "volumes",
    "imagePullSecrets",
    "annotations",
    "labels",
];

/// Writes `text` with `edits` made, in order, from `at`; returns where it stopped.
fn write_edited(output: &mut dyn Write, text: &str, edits: &[Edit], mut at: usize) -> std::io::Result<usize> {
    for edit in edits {
        output.write_all(&text.as_bytes()[at..edit.from])?;
        output.write_all(edit.with.as_bytes())?;
        at = edit.to;
    }
    Ok(at)
}

/// A `List` item that is left out (failed, reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failed;

/// The edit that leaves item `i` of the written list `list` out.
fn removal(text: &str, list: &Node, i: usize) -> Vec<Edit> {
    splice::item_range(text, list, i)
        .map(|(from, to)| {
            vec![Edit {
                from,
                to,
                with: String::new(),
            }]
        })
        .unwrap_or_default()
}

/// Whether `text` with `edits` reads back as `expected` (its one document's root or,
/// for a list item's text, that list's one item).
fn reads_back(text: &str, edits: &[Edit], expected: &Node, item: bool) -> Result<(), String> {
    let edited = splice::apply(text, edits);
    let documents = read_documents(&edited, 1).map_err(|e| format!("the edited text does not read back: {e}"))?;
    let mut roots = documents.into_iter().filter_map(|mut d| {
        d.unpack();
        d.root
    });
    let root = match (roots.next(), roots.next()) {
        (Some(root), None) => root,
        _ => return Err(String::from("the edited text is not one document")),
    };
    let back = match (item, root.value) {
        (true, Value::Seq(mut items)) if items.len() == 1 => items.remove(0),
        (true, _) => return Err(String::from("the edited item is not one list item")),
        (false, value) => Node { value, meta: None },
    };
    match back.to_json() == expected.to_json() {
        true => Ok(()),
        false => Err(String::from("the edited text reads back different from the injection")),
    }
}

impl<W: Write> Stream<'_, W> {
    fn edits(&mut self, text: &str, root: &Node, outcome: &Outcome) -> Result<Edits, NotInText> {
        let patch = &outcome.json_patch;
        match self.action {
            Action::Inject(_) => splice::additions(text, root, patch, &mut self.renders),
            Action::Uninject if patch.0.iter().all(|op| matches!(op, PatchOperation::Remove(_))) => {
                splice::removals(text, root, patch, CREATED_IN_ORDER)
            }
            // The Pod-level values put back are `add`s: each made where it is, beside
            // the removals.
            Action::Uninject => {
                let (puts, removes): (Vec<PatchOperation>, Vec<PatchOperation>) = patch
                    .0
                    .iter()
                    .cloned()
                    .partition(|op| matches!(op, PatchOperation::Add(_)));
                let mut edits = splice::removals(text, root, &Patch(removes), CREATED_IN_ORDER)?;
                let puts = splice::additions(text, root, &Patch(puts), &mut self.renders)?;
                edits.unsure |= puts.unsure;
                edits.edits.extend(puts.edits);
                edits.edits.sort_by_key(|e| (e.from, e.to));
                if edits.edits.windows(2).any(|pair| pair[0].to > pair[1].from) {
                    return Err(NotInText(String::from("a value put back lies in what is taken out")));
                }
                Ok(edits)
            }
        }
    }

    /// The tree the outcome makes of `node`, for a check or for writing anew; `None`
    /// (reported) if the outcome does not apply.
    fn applied(&mut self, at: &str, node: &Node, outcome: &Outcome) -> Option<Node> {
        let mut applied = node.clone();
        match apply(&mut applied, &outcome.json_patch) {
            Ok(()) => Some(applied),
            Err(message) => {
                self.fail(OfflineError::Encode {
                    at: at.to_string(),
                    format: "YAML",
                    message: format!("the computed patch does not apply: {message}"),
                });
                None
            }
        }
    }

    /// The edits of one object, read back first when they must be; `Err` with the
    /// reason when it is to be written anew. `check` reads the edited text back against
    /// the tree the outcome makes.
    fn object_edits(
        &mut self,
        at: &str,
        text: &str,
        node: &Node,
        outcome: &Outcome,
        aliased: &[Aliased],
        check: impl FnOnce(&[Edit], &Node) -> Result<(), String>,
    ) -> Result<Vec<Edit>, Option<String>> {
        let edits = self.edits(text, node, outcome).map_err(|e| Some(e.to_string()))?;
        if !edits.unsure && !splice::touches(text, &edits.edits, aliased) {
            return Ok(edits.edits);
        }
        let expected = self.applied(at, node, outcome).ok_or(None)?;
        let result = check(&edits.edits, &expected);
        self.discard(expected);
        result.map(|()| edits.edits).map_err(Some)
    }

    /// One document: its text with its outcome's edits, or (said) written anew.
    pub(super) fn object_as_text(
        &mut self,
        at: &str,
        root: Node,
        trailing: &[String],
        outcome: &Outcome,
        text: &str,
        aliased: &[Aliased],
    ) -> Result<(), StreamError> {
        let edits = self.object_edits(at, text, &root, outcome, aliased, |edits, expected| {
            reads_back(text, edits, expected, false)
        });
        let first = self.written == 0;
        match edits {
            Ok(edits) => {
                let at = write_edited(&mut self.output, text, &edits, 0)?;
                self.output.write_all(&text.as_bytes()[at..])?;
            }
            // Failed, reported: left out.
            Err(None) => {
                self.discard(root);
                return Ok(());
            }
            Err(Some(reason)) => {
                let Some(anew) = self.applied(at, &root, outcome) else {
                    self.discard(root);
                    return Ok(());
                };
                self.say(Message::Warning(format!(
                    "{at}: written anew, not as the input's text: {reason}"
                )));
                let mut out = Out::to(&mut self.output);
                if !first || text.trim_start_matches('\u{feff}').starts_with("---") {
                    out.push_str("---\n");
                }
                yaml_document(&mut out, &anew, trailing);
                out.finish()?;
                self.discard(anew);
            }
        }
        self.written += 1;
        self.discard(root);
        Ok(())
    }

    /// A `List` as its text: each item injected and its edits written in turn (an item
    /// that fails is left out, its text with it), the rest as it was.
    pub(super) fn list_as_text(
        &mut self,
        at: &str,
        mut root: Node,
        packed: Vec<Packed>,
        text: &str,
        aliased: &[Aliased],
    ) -> Result<(), StreamError> {
        let Value::Map(entries) = &mut root.value else {
            return Ok(());
        };
        let Some(list) = entries.iter_mut().rev().find(|(k, _)| k == "items").map(|(_, v)| v) else {
            return Ok(());
        };
        let tree_items = match &mut list.value {
            Value::Seq(items) => std::mem::take(items),
            _ => Vec::new(),
        };
        let list: &Node = list;
        let json = list.layout().is_some_and(|l| l.json);
        let unpacked = !packed.is_empty();
        let items = list_items(tree_items, packed);
        self.written += 1;
        let mut written_to = 0;
        for (i, mut item) in items.enumerate() {
            let place_of = splice::item_text(text, list, i);
            let edits = self.list_item(at, text, i, &mut item, place_of, json, aliased);
            let edits = edits.unwrap_or_else(|Failed| removal(text, list, i));
            written_to = write_edited(&mut self.output, text, &edits, written_to)?;
            self.done_with_item(item, unpacked);
        }
        self.output.write_all(&text.as_bytes()[written_to..])?;
        self.discard(root);
        Ok(())
    }

    /// The edits of item `i` of a `List` written as its text (`text[place_of]`, in a
    /// flow list of `json` style if flow): its outcome's, or the item written anew;
    /// `Failed` (reported) when it is to be left out.
    #[allow(clippy::too_many_arguments)]
    fn list_item(
        &mut self,
        at: &str,
        text: &str,
        i: usize,
        item: &mut Node,
        place_of: Option<ItemText>,
        json: bool,
        aliased: &[Aliased],
    ) -> Result<Vec<Edit>, Failed> {
        let item_json = self.view(item);
        let item_at = item_place(at, i, item, &item_json);
        let Some(outcome) = self.object(&item_at, item, &item_json, true) else {
            return Err(Failed);
        };
        let item: &Node = item;
        let edits = self.object_edits(&item_at, text, item, &outcome, aliased, |edits, expected| {
            let place_of = place_of.ok_or("the item is not written as such")?;
            let inside: Vec<Edit> = edits
                .iter()
                .map(|e| Edit {
                    from: e.from - place_of.from,
                    to: e.to - place_of.from,
                    with: e.with.clone(),
                })
                .collect();
            reads_back(&text[place_of.from..place_of.to], &inside, expected, place_of.block)
        });
        match (edits, place_of) {
            (Ok(edits), _) => Ok(edits),
            (Err(None), _) => Err(Failed),
            (Err(Some(reason)), Some(place_of)) => {
                let anew = self.applied(&item_at, item, &outcome).ok_or(Failed)?;
                self.say(Message::Warning(format!(
                    "{item_at}: written anew, not as the input's text: {reason}"
                )));
                let edit = place_of.anew(&anew, json);
                self.discard(anew);
                Ok(vec![edit])
            }
            (Err(Some(reason)), None) => {
                self.fail(OfflineError::Encode {
                    at: item_at,
                    format: "YAML",
                    message: reason,
                });
                Err(Failed)
            }
        }
    }
}
