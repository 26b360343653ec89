//! Map entries as go-yaml v2 sets them: the last of duplicate keys kept in the first's
//! place, and `<<` merge keys.

use std::collections::HashMap;

use super::document::what;
use crate::node::{Node, Value};

/// Sets `key` in a map, replacing the value of an existing key in place. Returns the
/// entry's index and whether the key was already there.
pub(super) fn set(
    entries: &mut Vec<(String, Node)>,
    index: &mut Option<HashMap<String, usize>>,
    key: String,
    node: Node,
) -> (usize, bool) {
    const INDEX_FROM: usize = 16;
    let existing = match index {
        Some(index) => index.get(&key).copied(),
        None => entries.iter().position(|(k, _)| *k == key),
    };
    if let Some(at) = existing {
        entries[at].1 = node;
        return (at, true);
    }
    entries.push((key, node));
    let at = entries.len() - 1;
    match index {
        Some(index) => {
            index.insert(entries[at].0.clone(), at);
        }
        None if entries.len() >= INDEX_FROM => {
            *index = Some(entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect());
        }
        None => {}
    }
    (at, false)
}

/// `<<: *base` / `<<: [*a, *b]`: go-yaml v2 sets each merged key in turn (a later
/// explicit key wins over it, and so does a merged key over an earlier explicit one);
/// in a list, earlier maps take precedence.
pub(super) fn merge(
    entries: &mut Vec<(String, Node)>,
    index: &mut Option<HashMap<String, usize>>,
    value: Node,
) -> Result<Vec<(String, usize)>, String> {
    let maps = match value.value {
        Value::Map(map) => vec![map],
        Value::Seq(items) => {
            let mut maps = Vec::new();
            for item in items.into_iter().rev() {
                match item.value {
                    Value::Map(map) => maps.push(map),
                    other => return Err(format!("`<<` merges maps only, found {} in its list", what(&other))),
                }
            }
            maps
        }
        other => return Err(format!("`<<` merges a map or a list of maps, found {}", what(&other))),
    };
    let mut keys = Vec::new();
    for map in maps {
        for (key, node) in map {
            let name = key.clone();
            let (at, _) = set(entries, index, key, node.without_meta());
            keys.push((name, at));
        }
    }
    Ok(keys)
}
