//! Where, in a document's text, the collections are that a caller will edit. The reader
//! records it (byte offsets into the piece of input it parsed) for the collections on the
//! caller's [`Paths`](crate::paths::Paths) only, so that the output can be the input's own bytes with edits
//! spliced in (`splice`); every other node costs the reader one call.

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

#[cfg(test)]
mod tests {
    use super::*;

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
