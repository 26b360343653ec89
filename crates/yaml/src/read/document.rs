//! What the reader hands back: a document's tree with what it kept beside it, and the
//! errors it reads into, each with the line.

use crate::node::{Node, Value};
use crate::packed::Packed;

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

/// How a value is named in messages.
pub(super) fn what(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Int(_) | Value::Uint(_) | Value::Float(_) => "a number",
        Value::Str(_) => "a string",
        Value::Seq(_) => "a list",
        Value::Map(_) => "a map",
    }
}
