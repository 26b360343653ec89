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
/// Set on the tag of a node that has `Meta`, which follows the tag.
const WITH_META: u8 = 0x80;

/// Appends `node` to `out`.
pub fn pack(node: &Node, out: &mut Vec<u8>) {
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
    match node.meta.as_deref() {
        Some(meta) => {
            out.push(tag | WITH_META);
            pack_meta(meta, out);
        }
        None => out.push(tag),
    }
    match &node.value {
        Value::Null | Value::Bool(_) => {}
        Value::Int(i) => out.extend_from_slice(&i.to_le_bytes()),
        Value::Uint(u) => out.extend_from_slice(&u.to_le_bytes()),
        Value::Float(f) => out.extend_from_slice(&f.to_bits().to_le_bytes()),
        Value::Str(s) => text(s, out),
        Value::Seq(items) => {
            number(items.len(), out);
            items.iter().for_each(|item| pack(item, out));
        }
        Value::Map(entries) => {
            number(entries.len(), out);
            for (key, value) in entries {
                text(key, out);
                pack(value, out);
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
    match meta.layout.as_deref() {
        None => number(0, out),
        Some(layout) => {
            number(1 + usize::from(layout.flow) + 2 * usize::from(layout.json), out);
            number(layout.indent as usize, out);
            number(layout.start as usize, out);
            // Offsets as differences from the one before: a byte or two each, where
            // the offsets themselves take up to five.
            difference(layout.start, layout.end, out);
            number(layout.entries.len(), out);
            let mut at = layout.start;
            for entry in &layout.entries {
                pack_entry(entry.as_ref(), &mut at, out);
            }
            pack_entry(layout.merge.as_ref(), &mut at, out);
        }
    }
}

/// `to - from` (either way round), zigzag-encoded.
fn difference(from: u32, to: u32, out: &mut Vec<u8>) {
    let d = i64::from(to) - i64::from(from);
    number(((d << 1) ^ (d >> 63)) as usize, out);
}

fn pack_entry(entry: Option<&Entry>, at: &mut u32, out: &mut Vec<u8>) {
    let Some(entry) = entry else {
        out.push(0);
        return;
    };
    out.push(match entry.shape {
        Shape::Scalar => 1,
        Shape::Empty => 2,
        Shape::Alias => 3,
        Shape::Block => 4,
        Shape::Flow => 5,
    });
    difference(*at, entry.start, out);
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
    let node = reader.node()?;
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
        let layout = match self.number()? {
            0 => None,
            flags => {
                let flags = flags - 1;
                let indent = self.offset()?;
                let start = self.offset()?;
                let mut layout = Layout {
                    flow: flags & 1 != 0,
                    json: flags & 2 != 0,
                    indent,
                    start,
                    end: self.difference(start)?,
                    ..Layout::default()
                };
                let count = self.number()?;
                let mut entries = Vec::with_capacity(count.min(self.bytes.len() - self.at));
                let mut at = start;
                for _ in 0..count {
                    entries.push(self.entry(&mut at)?);
                }
                layout.entries = entries;
                layout.merge = self.entry(&mut at)?;
                Some(Box::new(layout))
            }
        };
        Ok(Meta {
            before,
            right,
            line,
            layout,
        })
    }

    fn offset(&mut self) -> Result<u32, Damaged> {
        let at = self.at;
        u32::try_from(self.number()?).map_err(|_| Damaged { at })
    }

    /// An offset written as its difference from `from`.
    fn difference(&mut self, from: u32) -> Result<u32, Damaged> {
        let at = self.at;
        let zigzag = self.number()? as u64;
        let d = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        u32::try_from(i64::from(from) + d).map_err(|_| Damaged { at })
    }

    fn entry(&mut self, from: &mut u32) -> Result<Option<Entry>, Damaged> {
        let at = self.at;
        let shape = match self.byte()? {
            0 => return Ok(None),
            1 => Shape::Scalar,
            2 => Shape::Empty,
            3 => Shape::Alias,
            4 => Shape::Block,
            5 => Shape::Flow,
            _ => return Err(Damaged { at }),
        };
        let start = self.difference(*from)?;
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

    fn node(&mut self) -> Result<Node, Damaged> {
        let tag = self.byte()?;
        let meta = match tag & WITH_META {
            0 => None,
            _ => Some(Box::new(self.meta()?)),
        };
        let value = match tag & !WITH_META {
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
                    items.push(self.node()?);
                }
                Value::Seq(items)
            }
            MAP => {
                let count = self.number()?;
                let mut entries = Vec::with_capacity(count.min(self.bytes.len() - self.at));
                for _ in 0..count {
                    let key = self.text()?;
                    entries.push((key, self.node()?));
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
    use super::super::read::read_documents;
    use super::*;

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
            let mut out = super::super::write::Out::default();
            super::super::write::yaml_document(&mut out, node, &[]);
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
