//! YAML text to `Node`s, read the way kubectl reads it (go-yaml v2, then JSON): plain
//! scalars resolved by YAML 1.1 rules, aliases and `<<` merge keys expanded, map keys
//! turned into strings, the last of duplicate keys kept. Comments are kept on the node
//! they sit above or beside, for the writer.

mod builder;
mod map;
mod scalar;

use super::layout::Paths;
use super::node::{Node, Value};
use super::packed::Packed;
use builder::Builder;

/// A document of the input: its root (`None` for an empty document), the comments
/// after it, and what a user should know about how it was read.
#[derive(Debug, Default)]
pub struct Document {
    pub root: Option<Node>,
    pub trailing: Vec<String>,
    pub warnings: Vec<String>,
    /// The entries of the root map's `items` list (a `List`'s objects) of a large text
    /// (`PACK_FROM`), each packed as soon as it was read, the list in `root` left empty:
    /// a tree takes several times the memory of its text, and a `List` can be the whole
    /// input. `unpack` puts them back.
    pub packed_items: Vec<Packed>,
    /// Each alias and the anchored node it repeats: a change inside that node would
    /// show at the alias too.
    pub aliased: Vec<Aliased>,
}

/// An alias and the node it repeats, as places in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aliased {
    /// The anchored node's text: its start and end.
    pub anchored: (u32, u32),
    /// Where the alias is.
    pub alias: u32,
}

impl Document {
    /// Puts packed `items` back into the root's tree.
    pub fn unpack(&mut self) {
        if self.packed_items.is_empty() {
            return;
        }
        let items: Vec<Node> = self.packed_items.drain(..).map(|p| p.unpack()).collect();
        if let Some(Value::Map(entries)) = self.root.as_mut().map(|r| &mut r.value)
            && let Some((_, list)) = entries.iter_mut().rev().find(|(k, _)| k == "items")
        {
            list.value = Value::Seq(items);
        }
    }
}

/// The input is not YAML, or not YAML that kubectl could turn into JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct ReadError {
    pub line: Option<usize>,
    pub message: String,
}

/// Texts from this size on have their root `items` packed (`Document::packed_items`);
/// below it a tree is at most a few MB, not worth packing and unpacking.
const PACK_FROM: usize = 1 << 20;

/// Parses `text` (one or more YAML documents); `first_line` is the line of `text`'s
/// first line in the whole input, so that messages point into the user's file.
pub fn read_documents(text: &str, first_line: usize) -> Result<Vec<Document>, ReadError> {
    Builder::new(text, first_line, text.len() >= PACK_FROM, None).run()
}

/// As [`read_documents`], recording too where the collections on `paths` are in `text`
/// ([`Node::layout`]): for output that is this text, edited.
pub fn read_documents_with_layouts(
    text: &str,
    first_line: usize,
    paths: &dyn Paths,
) -> Result<Vec<Document>, ReadError> {
    Builder::new(text, first_line, text.len() >= PACK_FROM, Some(paths)).run()
}

/// How a value is named in messages.
fn what(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Int(_) | Value::Uint(_) | Value::Float(_) => "a number",
        Value::Str(_) => "a string",
        Value::Seq(_) => "a list",
        Value::Map(_) => "a map",
    }
}

#[cfg(test)]
mod tests;
