//! Where, in a document's text, the collections sit that `inject` adds to and `uninject`
//! takes from. The reader records it (byte offsets into the piece of input it parsed) for
//! the few paths that can receive an addition — an object's and a Pod template's
//! `metadata`, its `annotations` and `labels`, the Pod spec and its lists, a container and
//! its `volumeMounts`, and the way down to a workload's Pod template — so that the output
//! can be the input's own bytes with the additions spliced in (`splice`). Every other
//! node costs the reader one comparison.

/// Roles of a node on the paths that lead to an addition, as bits: a node can be several
/// at once (a document's root is an object and, if its kind is Pod, the Pod).
pub mod role {
    /// A document's root, or an item of its `items` (a `List`'s objects); also a Pod.
    pub const OBJECT: u16 = 1;
    /// The document's root: its `items` may be a `List`'s.
    pub const ROOT: u16 = 1 << 1;
    /// A Pod: an object of kind Pod or a workload's Pod template.
    pub const POD: u16 = 1 << 2;
    pub const POD_METADATA: u16 = 1 << 3;
    /// `annotations` or `labels` of a Pod's metadata.
    pub const METADATA_MAP: u16 = 1 << 4;
    pub const POD_SPEC: u16 = 1 << 5;
    /// `initContainers`, `volumes`, `imagePullSecrets` of a Pod spec.
    pub const SPEC_LIST: u16 = 1 << 6;
    pub const CONTAINERS: u16 = 1 << 7;
    pub const CONTAINER: u16 = 1 << 8;
    pub const MOUNTS: u16 = 1 << 9;
    /// An object's `spec`, which may hold a Pod template.
    pub const WORKLOAD_SPEC: u16 = 1 << 10;
    pub const JOB_TEMPLATE: u16 = 1 << 11;
    pub const JOB_TEMPLATE_SPEC: u16 = 1 << 12;
    /// The root's `items`.
    pub const ITEMS: u16 = 1 << 13;

    /// The role of the root of a document.
    pub const DOCUMENT: u16 = OBJECT | ROOT | POD;

    /// The role of a child of a node of role `parent`: under map key `key`, or an item of
    /// a list (`None`). Follows `offline::pod_path` for every kind.
    pub fn child(parent: u16, key: Option<&str>) -> u16 {
        if parent == 0 {
            return 0;
        }
        let mut role = 0;
        let has = |bits: u16| parent & bits != 0;
        match key {
            None => {
                if has(CONTAINERS) {
                    role |= CONTAINER;
                }
                if has(ITEMS) {
                    role |= OBJECT | POD;
                }
            }
            Some(key) => {
                if has(POD) {
                    match key {
                        "metadata" => role |= POD_METADATA,
                        "spec" => role |= POD_SPEC,
                        _ => {}
                    }
                }
                if has(OBJECT) && key == "spec" {
                    role |= WORKLOAD_SPEC;
                }
                if has(ROOT) && key == "items" {
                    role |= ITEMS;
                }
                if has(WORKLOAD_SPEC) {
                    match key {
                        "template" => role |= POD,
                        "jobTemplate" => role |= JOB_TEMPLATE,
                        _ => {}
                    }
                }
                if has(JOB_TEMPLATE) && key == "spec" {
                    role |= JOB_TEMPLATE_SPEC;
                }
                if has(JOB_TEMPLATE_SPEC) && key == "template" {
                    role |= POD;
                }
                if has(POD_METADATA) && matches!(key, "annotations" | "labels") {
                    role |= METADATA_MAP;
                }
                if has(POD_SPEC) {
                    match key {
                        "containers" => role |= CONTAINERS,
                        "initContainers" | "volumes" | "imagePullSecrets" => role |= SPEC_LIST,
                        _ => {}
                    }
                }
                if has(CONTAINER) && key == "volumeMounts" {
                    role |= MOUNTS;
                }
            }
        }
        role
    }
}

/// How an entry's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Scalar,
    /// Nothing at all after the key (`annotations:`): null, and no text to replace.
    Empty,
    Alias,
    Block,
    Flow,
}

/// One entry of a recorded collection: a map's key and value, or a list's item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its first byte: the key; a block list item's dash; a flow list item's first token.
    pub start: u32,
    /// Where its value starts (a block collection's: its first key or item's content).
    pub value: u32,
    /// Just past the value's last character (a block scalar's: the start of the line after
    /// it, or of the next content's indentation).
    pub end: u32,
    pub shape: Shape,
}

/// Where one collection is in the text.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Layout {
    pub flow: bool,
    /// Block: the column of its keys or dashes (flow: 0).
    pub indent: u32,
    /// Flow: its opening bracket. Block: its first entry's start.
    pub start: u32,
    /// Flow: just past its closing bracket. Block: just past its last content.
    pub end: u32,
    /// Flow, with its keys (or its first item's) double-quoted: JSON, and extended as JSON.
    pub json: bool,
    /// One per entry of the node (map entries, list items, in the node's order); `None`
    /// for one that is not written here (a key that came from a `<<` merge).
    pub entries: Vec<Option<Entry>>,
    /// A flow map's first `<<: *alias` entry (its value: the alias).
    pub merge: Option<Entry>,
}

impl Layout {
    /// The last entry written in the text (a merge entry included).
    pub fn last_written_end(&self) -> Option<u32> {
        self.entries
            .iter()
            .flatten()
            .map(|e| e.end)
            .chain(self.merge.map(|m| m.end))
            .max()
    }
}

/// Drops the layouts an addition to this object cannot use, now that its kind is known:
/// the way to its Pod and the Pod's own are kept (all of them for a Pod), the rest of an
/// object goes without (all of it for a kind that holds no Pod). For the packed items of
/// a `List`, kept as long as the List is read.
pub fn keep_for_pod(object: &mut Node) {
    let kind = object.get("kind").and_then(Node::as_str);
    let Some(path) = kind.and_then(super::pod_path) else {
        strip(object);
        return;
    };
    let mut node = object;
    for token in path.split('/').filter(|t| !t.is_empty()) {
        let Value::Map(entries) = &mut node.value else {
            return;
        };
        let mut next = None;
        for (key, value) in entries.iter_mut() {
            match key == token {
                true => next = Some(value),
                false => strip(value),
            }
        }
        match next {
            Some(next) => node = next,
            None => return,
        }
    }
}

/// Drops a node's layout and its descendants' (only a node with a layout can have
/// descendants with one: roles pass through recorded collections).
fn strip(node: &mut Node) {
    let Some(meta) = node.meta.as_mut() else {
        return;
    };
    if meta.layout.take().is_none() {
        return;
    }
    match &mut node.value {
        Value::Seq(items) => items.iter_mut().for_each(strip),
        Value::Map(entries) => entries.iter_mut().for_each(|(_, v)| strip(v)),
        _ => {}
    }
}

/// The dash of a block list item whose content starts at `to`, looked for from `from`
/// (just past what came before: the key, the previous item, an enclosing dash). Between
/// them there can only be blanks, the key's `:`, comments, and the list's or item's
/// anchor and tag.
pub fn dash_between(text: &str, from: usize, to: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = from;
    while at < to.min(bytes.len()) {
        match bytes[at] {
            b' ' | b'\t' | b'\r' | b'\n' | b':' => at += 1,
            b'#' => at = skip_line(bytes, at),
            b'&' | b'!' => at = skip_token(bytes, at),
            b'-' if bytes
                .get(at + 1)
                .is_none_or(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n')) =>
            {
                return Some(at);
            }
            _ => return None,
        }
    }
    None
}

/// The first token of a flow list item whose content starts at `to` (its anchor or tag,
/// if any), looked for from `from`, just past the bracket or the previous item.
pub fn token_between(text: &str, from: usize, to: usize) -> usize {
    let bytes = text.as_bytes();
    let mut at = from;
    while at < to.min(bytes.len()) {
        match bytes[at] {
            b' ' | b'\t' | b'\r' | b'\n' | b',' => at += 1,
            b'#' => at = skip_line(bytes, at),
            _ => return at,
        }
    }
    to
}

fn skip_line(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |n| from + n)
}

fn skip_token(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .map_or(bytes.len(), |n| from + n)
}

/// The column of byte `at` (its line's indentation, for a dash).
pub fn column(text: &str, at: usize) -> usize {
    at - text[..at]
        .rfind('\n')
        .map_or_else(|| first_line_start(text).min(at), |n| n + 1)
}

/// Where the first line's content starts: past a byte order mark.
pub fn first_line_start(text: &str) -> usize {
    if text.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    }
}

use super::node::{Node, Value};

#[cfg(test)]
mod tests {
    use super::role::*;
    use super::*;

    #[test]
    fn roles_follow_the_pod_paths_of_every_kind() {
        let walk = |keys: &[Option<&str>]| keys.iter().fold(DOCUMENT, |role, key| child(role, *key));
        // A Pod.
        assert_ne!(walk(&[Some("metadata"), Some("annotations")]) & METADATA_MAP, 0);
        assert_ne!(
            walk(&[Some("spec"), Some("containers"), None, Some("volumeMounts")]) & MOUNTS,
            0
        );
        // A Deployment's and a CronJob's Pod template.
        assert_ne!(
            walk(&[Some("spec"), Some("template"), Some("spec"), Some("volumes")]) & SPEC_LIST,
            0
        );
        assert_ne!(
            walk(&[
                Some("spec"),
                Some("jobTemplate"),
                Some("spec"),
                Some("template"),
                Some("metadata"),
                Some("labels")
            ]) & METADATA_MAP,
            0
        );
        // A List's item.
        assert_ne!(walk(&[Some("items"), None, Some("spec"), Some("template")]) & POD, 0);
        // Elsewhere nothing is recorded, and below nothing either.
        assert_eq!(walk(&[Some("data")]), 0);
        assert_eq!(walk(&[Some("spec"), Some("selector"), Some("matchLabels")]), 0);
        assert_eq!(walk(&[Some("spec"), Some("containers"), None, Some("env")]), 0);
        assert_eq!(walk(&[Some("spec"), Some("items")]), 0);
    }

    #[test]
    fn dashes_and_tokens_are_found_past_keys_comments_anchors_and_tags() {
        let text = "containers: &c !!seq # note\n  # more\n  - &d name: x\n";
        let content = text.find("name").unwrap();
        let dash = dash_between(text, "containers".len(), content).unwrap();
        assert_eq!(&text[dash..dash + 2], "- ");
        assert_eq!(column(text, dash), 2);
        // A nested list's dash is found past the enclosing one.
        let nested = "a:\n- - x\n";
        let outer = dash_between(nested, 2, 7).unwrap();
        assert_eq!(outer, 3);
        assert_eq!(dash_between(nested, outer + 1, 7), Some(5));
        // Anything else between is not a list item.
        assert_eq!(dash_between("a: b - c", 1, 7), None);
        let flow = "[a, # c\n  &x b]";
        assert_eq!(token_between(flow, 2, 14), flow.find('&').unwrap());
    }
}
