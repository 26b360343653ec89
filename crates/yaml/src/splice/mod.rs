//! The output as the input's own text: a JSON Patch's `add`s become text inserted at
//! byte offsets of the document (taken from the reader's [`Layout`]s), written in the
//! style of the collection they join — a block list gets block items at its dashes'
//! column (on one line, in flow style, where its items are flow maps and that line fits
//! 80 columns), a block map `key: value` lines at its keys' column, a flow collection
//! `, item` before its closing bracket (JSON where its keys are double-quoted; over
//! lines where one would not fit).
//! `remove`s (of entries that `add`s made) become ranges of the text taken out: a block
//! entry's lines, a flow entry with one separator. So every byte that is not added (or
//! removed) is the input's. A patch is either: `add`s only, or `remove`s only.
//!
//! What has no place of its own in the text is written anew, and only that: the value
//! of an alias the addition goes into (`labels: *labels` becomes
//! `labels: {<<: *labels, added: value}`), of a key left null, of a key set again. A
//! value rewritten whole in flow style is for the caller to read back ([`Edits::unsure`]),
//! as is any edit inside an anchored node that is aliased elsewhere ([`touches`]).

mod add;
mod flow;
mod remove;

use json_patch::jsonptr::PointerBuf;

use super::layout::{self, Entry, Layout};
use super::node::{Node, Value};
use super::read::Aliased;
use super::write::{self, Out, Style};

pub use add::{Renders, additions};
pub use flow::flow;
pub use remove::{item_range, removals};

/// `text[from..to]` replaced by `with` (an insertion when `from == to`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub from: usize,
    pub to: usize,
    pub with: String,
}

/// The edits of one object, in text order.
#[derive(Debug, Default)]
pub struct Edits {
    pub edits: Vec<Edit>,
    /// A value is written anew whole in place of the input's (a scalar, or a collection
    /// that is not recorded): the caller reads the result back.
    pub unsure: bool,
}

/// Whether an edit falls inside one of the `aliased` nodes' text (from its first line to
/// the line after it): it would show where the node is aliased too.
pub fn touches(text: &str, edits: &[Edit], aliased: &[Aliased]) -> bool {
    aliased.iter().any(|a| {
        let (start, end) = a.anchored;
        let (start, end) = (line_start(text, start as usize), line_after(text, end as usize));
        edits.iter().any(|e| e.to > start && e.from <= end)
    })
}

/// An operation that has no place in the text; the caller writes the object anew.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotInText(pub String);

fn not_in_text(message: impl Into<String>) -> NotInText {
    NotInText(message.into())
}

/// The text with its edits made.
pub fn apply(text: &str, edits: &[Edit]) -> String {
    let mut out = String::with_capacity(text.len() + edits.iter().map(|e| e.with.len()).sum::<usize>());
    let mut at = 0;
    for edit in edits {
        out.push_str(&text[at..edit.from]);
        out.push_str(&edit.with);
        at = edit.to;
    }
    out.push_str(&text[at..]);
    out
}

fn index_of(node: &Node, token: &str) -> Option<usize> {
    match &node.value {
        Value::Map(entries) => entries.iter().rposition(|(k, _)| k == token),
        Value::Seq(items) => token.parse::<usize>().ok().filter(|&i| i < items.len()),
        _ => None,
    }
}

fn child(node: &Node, index: usize) -> &Node {
    match &node.value {
        Value::Map(entries) => &entries[index].1,
        Value::Seq(items) => &items[index],
        _ => unreachable!("index_of found an entry"),
    }
}

fn is_map(node: &Node) -> bool {
    matches!(node.value, Value::Map(_))
}

/// A collection written in the text.
#[derive(Clone, Copy)]
struct Written<'n> {
    node: &'n Node,
    layout: &'n Layout,
}

impl<'n> Written<'n> {
    fn same(&self, other: &Written<'_>) -> bool {
        std::ptr::eq(self.node, other.node)
    }

    fn entry(&self, index: usize) -> Option<Entry> {
        self.layout.entries.get(index).copied().flatten()
    }
}

/// Where an operation's path leads in the text.
enum Target<'n> {
    /// Its parent collection, written in the text (as is every collection above it).
    In(Written<'n>),
    /// Entry `index` of `holder`, whose value is not a collection written there (an
    /// alias, a scalar, a merged key's): the path's first `depth` tokens lead to it.
    Anew {
        holder: Written<'n>,
        index: usize,
        depth: usize,
    },
}

/// The path down from the root through the written collections, and where it leaves
/// them; `chain` gets every written collection passed.
fn resolve<'n>(root: &'n Node, tokens: &[String], chain: &mut Vec<Written<'n>>) -> Result<Target<'n>, NotInText> {
    let layout = root
        .layout()
        .ok_or_else(|| not_in_text("the document is not a map written in the text"))?;
    let mut here = Written { node: root, layout };
    chain.push(here);
    let parents = tokens.len().saturating_sub(1);
    for (depth, token) in tokens[..parents].iter().enumerate() {
        let index = index_of(here.node, token).ok_or_else(|| not_in_text(format!("no `{token}` on the way")))?;
        let next = child(here.node, index);
        match (here.entry(index), next.layout()) {
            (Some(_), Some(layout)) => {
                here = Written { node: next, layout };
                chain.push(here);
            }
            _ => {
                return Ok(Target::Anew {
                    holder: here,
                    index,
                    depth: depth + 1,
                });
            }
        }
    }
    Ok(Target::In(here))
}

fn tokens(path: &PointerBuf) -> Vec<String> {
    path.tokens().map(|t| t.decoded().into_owned()).collect()
}

/// The nesting the input uses, from the written collections down to an addition: how
/// much deeper a map is than its key, and a list's dashes. kubectl's where it shows none.
fn style_of(chain: &[Written<'_>]) -> Style {
    let mut step = None;
    let mut list_offset = None;
    for pair in chain.windows(2) {
        let (parent, inner) = (pair[0], pair[1]);
        if parent.layout.flow || inner.layout.flow || !is_map(parent.node) {
            continue;
        }
        let deeper = inner.layout.indent.checked_sub(parent.layout.indent);
        match is_map(inner.node) {
            true => step = step.or(deeper.filter(|&d| d > 0)),
            false => list_offset = list_offset.or(deeper),
        }
    }
    Style {
        step: step.map_or(Style::KUBECTL.step, |s| s as usize),
        list_offset: list_offset.map_or(Style::KUBECTL.list_offset, |s| s as usize),
    }
}

/// Start of the line holding byte `at` (on the first line, past a byte order mark).
fn line_start(text: &str, at: usize) -> usize {
    text[..at]
        .rfind('\n')
        .map_or_else(|| layout::first_line_start(text).min(at), |n| n + 1)
}

/// Where the line after the content ending at `end` starts. A block scalar ends on the
/// line after its last one, in the next content's indentation: that line then.
fn line_after(text: &str, end: usize) -> usize {
    let start = line_start(text, end);
    if text.as_bytes()[start..end].iter().all(|&b| b == b' ') {
        return start;
    }
    text[end..].find('\n').map_or(text.len(), |n| end + n + 1)
}

/// The indentation of the line starting at `at` and whether it holds only a comment.
fn comment_line(text: &str, at: usize) -> Option<usize> {
    let line = &text[at..text[at..].find('\n').map_or(text.len(), |n| at + n)];
    let rest = line.trim_start_matches(' ');
    rest.starts_with('#').then(|| line.len() - rest.len())
}

/// Whether an alias in the written list `list` repeats a node outside its own item (in
/// another item, or in the List's own fields): the items could not be edited one by one.
pub fn aliases_cross_items(list: &Node, aliased: &[Aliased]) -> bool {
    let Some(layout) = list.layout() else {
        return !aliased.is_empty();
    };
    let item_of = |at: u32| {
        layout
            .entries
            .iter()
            .position(|e| e.is_some_and(|e| e.start <= at && at <= e.end))
    };
    aliased
        .iter()
        .any(|a| item_of(a.alias).is_none() || item_of(a.anchored.0) != item_of(a.alias))
}

/// The text of item `index` of the written list `list` on its own, as a YAML document
/// reads it: a block item's lines (a list of one), a flow item's value.
pub fn item_text(text: &str, list: &Node, index: usize) -> Option<ItemText> {
    let layout = list.layout()?;
    let entry = layout.entries.get(index).copied().flatten()?;
    Some(match layout.flow {
        true => ItemText {
            from: entry.start as usize,
            to: entry.end as usize,
            block: false,
            indent: 0,
        },
        false => ItemText {
            from: line_start(text, entry.start as usize),
            to: line_after(text, entry.end as usize),
            block: true,
            indent: layout.indent as usize,
        },
    })
}

/// Where a list item's text is (see [`item_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemText {
    pub from: usize,
    pub to: usize,
    /// A block item: its lines, a list of one item with its dash at `indent`.
    pub block: bool,
    pub indent: usize,
}

impl ItemText {
    /// The item written anew from its tree, in place of its text.
    pub fn anew(&self, item: &Node, json: bool) -> Edit {
        let mut out = Out::default();
        match self.block {
            true => write::item(&mut out, item, self.indent, Style::KUBECTL),
            false => flow(&mut out, &item.to_json(), json),
        }
        Edit {
            from: self.from,
            to: self.to,
            with: out.into_string(),
        }
    }
}

#[cfg(test)]
mod tests;
