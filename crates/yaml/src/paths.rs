//! What the caller says of where it will edit: the collections whose layout the reader
//! records (`Paths`), and how to drop layouts no longer needed.

use super::node::{Node, Value};

/// Which collections the reader records the layout of: those on the ways to what a caller
/// edits. Each node read gets a role from its parent's: the caller's own bits, 0 for a
/// node off every way, below which nothing is recorded.
pub trait Paths: Sync {
    /// The role of a document's root.
    fn root(&self) -> u16;

    /// The role of a child of a node of role `parent` (not 0): under map key `key`, or an
    /// item of a list (`None`).
    fn child(&self, parent: u16, key: Option<&str>) -> u16;

    /// Whether a block map of role `role` has every entry recorded, not only those with a
    /// role of their own: where an edit may take out any of them.
    fn every_entry(&self, role: u16) -> bool;

    /// Drops what an item of the root map's `items`, read whole, will not need of its
    /// layouts (its edits can now be known): it waits packed until the document ends.
    fn settle_item(&self, _item: &mut Node) {}
}

/// Every collection of a document, for the tests of what reads and edits text.
#[cfg(test)]
pub struct EveryCollection;

#[cfg(test)]
impl Paths for EveryCollection {
    fn root(&self) -> u16 {
        1
    }

    fn child(&self, _parent: u16, _key: Option<&str>) -> u16 {
        1
    }

    fn every_entry(&self, _role: u16) -> bool {
        true
    }
}

/// Drops a node's layout and its descendants' (only a node with a layout can have
/// descendants with one: roles pass through recorded collections).
pub fn strip_layouts(node: &mut Node) {
    let Some(meta) = node.meta.as_mut() else {
        return;
    };
    if meta.layout.take().is_none() {
        return;
    }
    match &mut node.value {
        Value::Seq(items) => items.iter_mut().for_each(strip_layouts),
        Value::Map(entries) => entries.iter_mut().for_each(|(_, v)| strip_layouts(v)),
        _ => {}
    }
}
