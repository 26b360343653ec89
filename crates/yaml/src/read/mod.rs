//! YAML text to `Node`s, read the way kubectl reads it (go-yaml v2, then JSON): plain
//! scalars resolved by YAML 1.1 rules, aliases and `<<` merge keys expanded, map keys
//! turned into strings, the last of duplicate keys kept. Comments are kept on the node
//! they sit above or beside, for the writer.

mod builder;
mod document;
mod map;
mod scalar;

use super::paths::Paths;
use builder::Builder;
pub use document::{Aliased, Document, ReadError};

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

#[cfg(test)]
mod tests;
