//! A `Node` as compact bytes, for the items of a large `List` while the rest of it is
//! read: a tree takes several times the memory of its text, these bytes about as much
//! as the text. Packing and unpacking are exact (comments and lines included) and cost
//! a copy, where writing YAML and parsing it again cost more than the first parse.

use super::layout::{Entry, Layout, Shape};
use super::node::{Meta, Node, Value};

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const INT: u8 = 3;
const UINT: u8 = 4;
const FLOAT: u8 = 5;
const STR: u8 = 6;
const SEQ: u8 = 7;
const MAP: u8 = 8;
/// Set on the tag of a node with comments or a line (`Meta` but its layout), which
/// follow the tag.
const WITH_META: u8 = 0x80;
/// Set on the tag of a node with a layout, which follows (after the comments).
const WITH_LAYOUT: u8 = 0x40;

/// One node packed: an item of a large `List` (see `read::Document::packed_items`).
#[derive(Debug, Clone, PartialEq)]
pub struct Packed(Box<[u8]>);

impl Packed {
    /// `node` packed, in bytes kept at their exact size (a list item's bytes grown by
    /// doubling would hold a third more, and there can be a million items); `buffer` is
    /// where they are written first, reused from one item to the next.
    pub fn new(node: &Node, buffer: &mut Vec<u8>) -> Packed {
        buffer.clear();
        pack(node, buffer);
        Packed(buffer.as_slice().into())
    }

    pub fn unpack(&self) -> Node {
        // The bytes were packed here from a tree; the tests below hold that they come
        // back exactly.
        unpack(&self.0).unwrap_or_else(|_| Node::from(Value::Null))
    }
}

/// Appends `node` to `out`.
pub fn pack(node: &Node, out: &mut Vec<u8>) {
    pack_node(node, out, &mut 0);
}

/// Appends `node`; `at` is the offset its layout's start is written as a difference
/// from (the start of the layout before).
fn pack_node(node: &Node, out: &mut Vec<u8>, at: &mut u32) {
    let tag = match &node.value {
        Value::Null => NULL,
        Value::Bool(false) => FALSE,
        Value::Bool(true) => TRUE,
        Value::Int(_) => INT,
        Value::Uint(_) => UINT,
        Value::Float(_) => FLOAT,
        Value::Str(_) => STR,
        Value::Seq(_) => SEQ,
        Value::Map(_) => MAP,
    };
    let meta = node.meta.as_deref();
    let comments = meta.filter(|m| !m.before.is_empty() || m.right.is_some() || m.line.is_some());
    let layout = meta.and_then(|m| m.layout.as_ref());
    out.push(tag | if comments.is_some() { WITH_META } else { 0 } | if layout.is_some() { WITH_LAYOUT } else { 0 });
    if let Some(meta) = comments {
        pack_meta(meta, out);
    }
    if let Some(layout) = layout {
        pack_layout(layout, out, at);
    }
    match &node.value {
        Value::Null | Value::Bool(_) => {}
        Value::Int(i) => out.extend_from_slice(&i.to_le_bytes()),
        Value::Uint(u) => out.extend_from_slice(&u.to_le_bytes()),
        Value::Float(f) => out.extend_from_slice(&f.to_bits().to_le_bytes()),
        Value::Str(s) => text(s, out),
        Value::Seq(items) => {
            number(items.len(), out);
            items.iter().for_each(|item| pack_node(item, out, at));
        }
        Value::Map(entries) => {
            number(entries.len(), out);
            for (key, value) in entries {
                text(key, out);
                pack_node(value, out, at);
            }
        }
    }
}

fn pack_meta(meta: &Meta, out: &mut Vec<u8>) {
    number(meta.before.len(), out);
    meta.before.iter().for_each(|comment| text(comment, out));
    // Optional parts: a presence number (0 for none), or the line plus one.
    number(usize::from(meta.right.is_some()), out);
    if let Some(right) = &meta.right {
        text(right, out);
    }
    number(meta.line.map_or(0, |line| line + 1), out);
}

/// A layout. Offsets are written as differences from the one before (a byte or two
/// each, where offsets take up to five): the start from the previous layout's start,
/// which encloses or precedes it; the entries one after another.
fn pack_layout(layout: &Layout, out: &mut Vec<u8>, at: &mut u32) {
    out.push(u8::from(layout.flow) | u8::from(layout.json) << 1 | u8::from(layout.merge.is_some()) << 2);
    if !layout.flow {
        number(layout.indent as usize, out);
    }
    difference(*at, layout.start, out);
    number(layout.entries.len(), out);
    let mut entry_at = layout.start;
    for entry in &layout.entries {
        pack_entry(entry.as_ref(), &mut entry_at, out);
    }
    if let Some(merge) = &layout.merge {
        pack_entry(Some(merge), &mut entry_at, out);
    }
    // The end: most often the last entry's.
    difference(entry_at, layout.end, out);
    *at = layout.start;
}

/// `to - from` (either way round), zigzag-encoded.
fn zigzag(from: u32, to: u32) -> usize {
    let d = i64::from(to) - i64::from(from);
    ((d << 1) ^ (d >> 63)) as usize
}

fn difference(from: u32, to: u32, out: &mut Vec<u8>) {
    number(zigzag(from, to), out);
}

/// An entry: 0 for none; else its start's difference from the last entry's end with
/// its shape in the low three bits, then its value's and end's differences.
fn pack_entry(entry: Option<&Entry>, at: &mut u32, out: &mut Vec<u8>) {
    let Some(entry) = entry else {
        out.push(0);
        return;
    };
    let shape = match entry.shape {
        Shape::Scalar => 1,
        Shape::Empty => 2,
        Shape::Alias => 3,
        Shape::Block => 4,
        Shape::Flow => 5,
    };
    number(zigzag(*at, entry.start) << 3 | shape, out);
    difference(entry.start, entry.value, out);
    difference(entry.value, entry.end, out);
    *at = entry.end;
}

/// LEB128: seven bits a byte, low first.
fn number(mut n: usize, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn text(s: &str, out: &mut Vec<u8>) {
    number(s.len(), out);
    out.extend_from_slice(s.as_bytes());
}

/// Bytes that are not what `pack` wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("packed node damaged at byte {at}")]
pub struct Damaged {
    pub at: usize,
}

/// Reads back one node that `pack` wrote at the start of `bytes`.
pub fn unpack(bytes: &[u8]) -> Result<Node, Damaged> {
    let mut reader = Reader { bytes, at: 0 };
    let node = reader.node(&mut 0)?;
    if reader.at != bytes.len() {
        return Err(reader.damaged());
    }
    Ok(node)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn damaged(&self) -> Damaged {
        Damaged { at: self.at }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], Damaged> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| self.damaged())?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, Damaged> {
        Ok(self.take(1)?[0])
    }

    fn eight(&mut self) -> Result<[u8; 8], Damaged> {
        let mut word = [0; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(word)
    }

    fn number(&mut self) -> Result<usize, Damaged> {
        let mut n = 0usize;
        for shift in (0..usize::BITS).step_by(7) {
            let b = self.byte()?;
            n |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(self.damaged())
    }

    fn text(&mut self) -> Result<String, Damaged> {
        let len = self.number()?;
        let at = self.at;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Damaged { at })
    }

    fn meta(&mut self) -> Result<Meta, Damaged> {
        let count = self.number()?;
        let before = (0..count).map(|_| self.text()).collect::<Result<_, _>>()?;
        let right = match self.number()? {
            0 => None,
            _ => Some(self.text()?),
        };
        let line = self.number()?.checked_sub(1);
        Ok(Meta {
            before,
            right,
            line,
            layout: None,
        })
    }

    fn layout(&mut self, at: &mut u32) -> Result<Layout, Damaged> {
        let flags = self.byte()?;
        let flow = flags & 1 != 0;
        let indent = if flow { 0 } else { self.offset()? };
        let start = self.difference(*at)?;
        let count = self.number()?;
        let mut entries = Vec::with_capacity(count.min(self.bytes.len() - self.at));
        let mut entry_at = start;
        for _ in 0..count {
            entries.push(self.entry(&mut entry_at)?);
        }
        let merge = match flags & 4 {
            0 => None,
            _ => self.entry(&mut entry_at)?,
        };
        *at = start;
        Ok(Layout {
            flow,
            json: flags & 2 != 0,
            indent,
            start,
            end: self.difference(entry_at)?,
            entries,
            merge,
        })
    }

    fn offset(&mut self) -> Result<u32, Damaged> {
        let at = self.at;
        u32::try_from(self.number()?).map_err(|_| Damaged { at })
    }

    /// An offset written as its difference from `from`.
    fn difference(&mut self, from: u32) -> Result<u32, Damaged> {
        let at = self.at;
        let zigzag = self.number()?;
        Self::offset_from(from, zigzag, at)
    }

    fn offset_from(from: u32, zigzag: usize, at: usize) -> Result<u32, Damaged> {
        let zigzag = zigzag as u64;
        let d = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        u32::try_from(i64::from(from) + d).map_err(|_| Damaged { at })
    }

    fn entry(&mut self, from: &mut u32) -> Result<Option<Entry>, Damaged> {
        let at = self.at;
        let first = self.number()?;
        let shape = match first & 7 {
            _ if first == 0 => return Ok(None),
            1 => Shape::Scalar,
            2 => Shape::Empty,
            3 => Shape::Alias,
            4 => Shape::Block,
            5 => Shape::Flow,
            _ => return Err(Damaged { at }),
        };
        let start = Self::offset_from(*from, first >> 3, at)?;
        let value = self.difference(start)?;
        let end = self.difference(value)?;
        *from = end;
        Ok(Some(Entry {
            start,
            value,
            end,
            shape,
        }))
    }

    fn node(&mut self, at: &mut u32) -> Result<Node, Damaged> {
        let tag = self.byte()?;
        let mut meta = match tag & WITH_META {
            0 => None,
            _ => Some(Box::new(self.meta()?)),
        };
        if tag & WITH_LAYOUT != 0 {
            let layout = self.layout(at)?;
            meta.get_or_insert_with(Default::default).layout = Some(layout);
        }
        let value = match tag & !(WITH_META | WITH_LAYOUT) {
            NULL => Value::Null,
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            INT => Value::Int(i64::from_le_bytes(self.eight()?)),
            UINT => Value::Uint(u64::from_le_bytes(self.eight()?)),
            FLOAT => Value::Float(f64::from_bits(u64::from_le_bytes(self.eight()?))),
            STR => Value::Str(self.text()?),
            SEQ => {
                let count = self.number()?;
                // Each item takes at least one byte: a damaged count cannot reserve much.
                let mut items = Vec::with_capacity(count.min(self.bytes.len() - self.at));
                for _ in 0..count {
                    items.push(self.node(at)?);
                }
                Value::Seq(items)
            }
            MAP => {
                let count = self.number()?;
                let mut entries = Vec::with_capacity(count.min(self.bytes.len() - self.at));
                for _ in 0..count {
                    let key = self.text()?;
                    entries.push((key, self.node(at)?));
                }
                Value::Map(entries)
            }
            _ => return Err(Damaged { at: self.at - 1 }),
        };
        Ok(Node { value, meta })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::read_documents;

    #[test]
    fn every_value_and_comment_comes_back_exactly() {
        let text = "# head\nkind: List # right\nn: ~\nb: [yes, no]\ni: -12\nu: 18446744073709551615\nf: [.nan, -.inf, 1.5]\ns: \"é\\n\"\nitems:\n# above\n- {a: 1} # item\nempty: {}\n# tail\n";
        let docs = read_documents(text, 7).unwrap();
        let mut root = docs[0].root.clone().unwrap();
        root.meta_mut().line = Some(300);
        let mut bytes = Vec::new();
        pack(&root, &mut bytes);
        let back = unpack(&bytes).unwrap();
        // NaN is not equal to itself: compare the text the writer makes of each.
        let yaml = |node: &Node| {
            let mut out = crate::write::Out::default();
            crate::write::yaml_document(&mut out, node, &[]);
            out.into_string()
        };
        assert_eq!(yaml(&back), yaml(&root));
        assert_eq!(back.line(), Some(300));
        let without_nan = read_documents("a: 1\nb: [x, {c: d}]\n", 1).unwrap()[0]
            .root
            .clone()
            .unwrap();
        bytes.clear();
        pack(&without_nan, &mut bytes);
        assert_eq!(unpack(&bytes).unwrap(), without_nan);
    }

    #[test]
    fn layouts_come_back_exactly() {
        let text = "kind: Pod\nbase: &base {a: b}\nmetadata:\n  labels: {<<: *base, c: d}\nspec:\n  containers:\n  - name: x\n    volumeMounts: [{name: v}]\n  volumes:\n  - &v {name: v}\n  initContainers: [*v]\n";
        let root = crate::read::read_documents_with_layouts(text, 1, &crate::paths::EveryCollection).unwrap()[0]
            .root
            .clone()
            .unwrap();
        let labels = root.pointer("/metadata/labels").unwrap().layout().unwrap();
        assert!(labels.flow && labels.merge.is_some(), "{labels:?}");
        let mut bytes = Vec::new();
        pack(&root, &mut bytes);
        assert_eq!(unpack(&bytes).unwrap(), root);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let node = read_documents("a: [1, two, {c: d}]\n", 1).unwrap()[0]
            .root
            .clone()
            .unwrap();
        let mut bytes = Vec::new();
        pack(&node, &mut bytes);
        for cut in 0..bytes.len() {
            assert!(unpack(&bytes[..cut]).is_err(), "{cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(unpack(&extra).is_err());
        assert!(unpack(&[0x7f]).is_err());
        assert!(unpack(&[SEQ, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
    }
}
