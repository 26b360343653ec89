//! The reader's state machine: parser events in, a tree per document out, with the
//! comments, lines, anchors and (for the caller's paths) layouts it records on the way.

use std::collections::HashMap;

use granit_parser::{Event, Parser, Placement, ScalarStyle, Span, StructureStyle};

use super::document::{Aliased, Document, ReadError};
use super::map::{merge, set};
use crate::layout::{self, Entry, Layout, Shape};
use crate::node::{Meta, Node, Value};
use crate::packed::Packed;
use crate::paths::Paths;

impl Builder<'_> {
    pub(super) fn run(mut self) -> Result<Vec<Document>, ReadError> {
        let text = self.text;
        for event in Parser::new_from_str(text) {
            let (event, span) = event.map_err(|e| ReadError {
                line: Some(e.marker().line() + self.line_offset),
                message: e.info(),
            })?;
            self.event(event, span)?;
        }
        Ok(self.finish())
    }
}

enum Frame {
    Seq {
        node: Node,
        items: Vec<Node>,
        anchor: usize,
        rec: Rec,
    },
    Map {
        node: Node,
        entries: Vec<(String, Node)>,
        /// Key → index, built once a map grows big enough for linear search to hurt.
        index: Option<HashMap<String, usize>>,
        key: Option<Key>,
        /// Index of the entry set last, for a same-line comment after its value.
        last: Option<usize>,
        /// Keys that came from a `<<` merge: an explicit key may override them once
        /// without being a duplicate.
        merged: Option<std::collections::HashSet<String>>,
        anchor: usize,
        rec: Rec,
        /// Whether its first key is double-quoted (JSON, when the map is flow).
        quoted_keys: bool,
    },
}

/// What is recorded of a collection being read: its role on the way to an addition, its
/// layout if it has one, and where it sits in its parent.
#[derive(Default)]
struct Rec {
    role: u16,
    /// Boxed while read: most frames have none, and frames are moved often.
    layout: Option<Box<Layout>>,
    placed: Placed,
    /// Where the collection's text starts (a block one's: its first entry's content).
    start: usize,
}

/// Where a node starts as an entry of its parent, and where its value starts.
#[derive(Debug, Default, Clone, Copy)]
struct Placed {
    start: u32,
    value: u32,
}

/// A finished node, as its parent records it.
#[derive(Clone, Copy)]
struct Child {
    placed: Placed,
    shape: Shape,
    /// A double-quoted scalar, or a flow map with double-quoted keys.
    json: bool,
}

pub(super) enum KeyName {
    Name(String),
    Merge,
}

struct Key {
    name: KeyName,
    meta: Option<Box<Meta>>,
    line: usize,
    /// Byte offset of the key in the text.
    start: u32,
}

/// What the last event produced, for a same-line comment that follows it.
#[derive(Clone, Copy, PartialEq)]
enum Last {
    Nothing,
    Key,
    ChildOfTop,
    StartedTop,
}

pub(super) struct Builder<'t> {
    text: &'t str,
    /// The paths whose collections have their layouts recorded; none when no layout is
    /// (or when the text is too large for the 32-bit offsets they keep).
    paths: Option<&'t dyn Paths>,
    /// Just past the last content read (a scalar, an alias, a flow bracket): where the
    /// next item's dash or token is looked for.
    last_end: usize,
    line_offset: usize,
    frames: Vec<Frame>,
    /// Each anchor's node, and where its text is.
    anchors: HashMap<usize, (Node, (u32, u32))>,
    pending: Vec<String>,
    last: Last,
    document: Document,
    done: Vec<Document>,
    /// Nodes produced by aliases so far, against a budget: a few anchors can otherwise
    /// expand into gigabytes (the "billion laughs").
    alias_nodes: usize,
    events: usize,
    /// Whether the root map's `items` are packed as they are read.
    pack: bool,
    pack_buffer: Vec<u8>,
}

fn node_count(node: &Node) -> usize {
    match &node.value {
        Value::Seq(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|(_, v)| node_count(v)).sum::<usize>(),
        _ => 1,
    }
}

/// A byte offset of the text: within 32 bits where layouts are recorded (`paths`).
fn offset(at: usize) -> u32 {
    at as u32
}

fn byte(marker: &granit_parser::Marker) -> usize {
    // Parsing a `&str` always gives byte offsets.
    marker.byte_offset().unwrap_or_default()
}

impl<'t> Builder<'t> {
    /// A reader of `text`, whose first line is line `first_line` of the input.
    pub(super) fn new(text: &'t str, first_line: usize, pack: bool, paths: Option<&'t dyn Paths>) -> Builder<'t> {
        Builder {
            text,
            paths: paths.filter(|_| u32::try_from(text.len()).is_ok()),
            last_end: 0,
            line_offset: first_line.saturating_sub(1),
            frames: Vec::new(),
            anchors: HashMap::new(),
            pending: Vec::new(),
            last: Last::Nothing,
            document: Document::default(),
            done: Vec::new(),
            alias_nodes: 0,
            events: 0,
            pack,
            pack_buffer: Vec::new(),
        }
    }

    fn line(&self, span: &Span) -> usize {
        span.start.line() + self.line_offset
    }

    pub(super) fn error(&self, span: &Span, message: String) -> ReadError {
        ReadError {
            line: Some(self.line(span)),
            message,
        }
    }

    fn finish(mut self) -> Vec<Document> {
        if !self.pending.is_empty() || self.document.root.is_some() {
            self.end_document();
        }
        self.done
    }

    fn end_document(&mut self) {
        let mut document = std::mem::take(&mut self.document);
        document.trailing.append(&mut self.pending);
        if matches!(document.root.as_ref().map(|r| &r.value), Some(Value::Null)) {
            // `---` followed by nothing: kubectl skips such documents.
            document.root = None;
        }
        self.anchors.clear();
        self.last = Last::Nothing;
        self.done.push(document);
    }

    fn top_is_map_awaiting_key(&self) -> bool {
        matches!(self.frames.last(), Some(Frame::Map { key: None, .. }))
    }

    /// A node starts: in a list, it takes the comments above it; the first items of a
    /// document's top-level list keep their line for messages.
    fn starting(&mut self, span: &Span) -> Option<Box<Meta>> {
        let in_seq = matches!(self.frames.last(), Some(Frame::Seq { .. }));
        let keep_line = self.frames.is_empty() || (in_seq && self.frames.len() == 2);
        let before = if in_seq {
            std::mem::take(&mut self.pending)
        } else {
            Vec::new()
        };
        if before.is_empty() && !keep_line {
            return None;
        }
        Some(Box::new(Meta {
            before,
            line: keep_line.then(|| self.line(span)),
            ..Meta::default()
        }))
    }

    /// The role of a node starting now, from its parent's role and its key or place.
    fn child_role(&self, paths: &dyn Paths) -> u16 {
        match self.frames.last() {
            None => paths.root(),
            Some(Frame::Seq { rec, .. }) if rec.role != 0 => paths.child(rec.role, None),
            Some(Frame::Map {
                rec,
                key: Some(Key {
                    name: KeyName::Name(key),
                    ..
                }),
                ..
            }) if rec.role != 0 => paths.child(rec.role, Some(key)),
            Some(_) => 0,
        }
    }

    /// Where a node starting at `span` sits in its parent, when the parent records its
    /// entries: after its key; at its dash (block list) or first token (flow list). A
    /// block list's first item also gives the list its start and dash column.
    fn place(&mut self, span: &Span) -> Placed {
        let value = byte(&span.start);
        let text = self.text;
        let last_end = self.last_end;
        let Some(frame) = self.frames.last_mut() else {
            return Placed::default();
        };
        let start = match frame {
            Frame::Map {
                rec: Rec { layout: Some(_), .. },
                key: Some(key),
                ..
            } => key.start as usize,
            Frame::Seq {
                rec: Rec {
                    layout: Some(layout), ..
                },
                ..
            } if layout.flow => layout::token_between(text, last_end, value),
            Frame::Seq {
                rec: Rec {
                    layout: Some(layout), ..
                },
                ..
            } => {
                // Not found only for text this reader would not have parsed as a list.
                let dash = layout::dash_between(text, last_end, value).unwrap_or(value);
                if layout.entries.is_empty() {
                    layout.start = offset(dash);
                    layout.indent = offset(layout::column(text, dash));
                }
                // A list nested in this item looks for its dash past this one.
                self.last_end = dash + 1;
                dash
            }
            _ => return Placed::default(),
        };
        Placed {
            start: offset(start),
            value: offset(value),
        }
    }

    /// A collection starts: its frame, with its layout when its role records one.
    fn collection_start(&mut self, span: &Span, flow: bool) -> Rec {
        let role = self.paths.map_or(0, |paths| self.child_role(paths));
        let placed = self.place(span);
        if flow {
            self.last_end = byte(&span.end);
        }
        let layout = (role != 0).then(|| {
            let start = byte(&span.start);
            Box::new(Layout {
                flow,
                indent: if flow { 0 } else { offset(span.start.col()) },
                start: offset(start),
                // Most recorded collections have a few entries: grown once, if at all.
                entries: Vec::with_capacity(4),
                ..Layout::default()
            })
        });
        Rec {
            role,
            layout,
            placed,
            start: byte(&span.start),
        }
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), ReadError> {
        self.events += 1;
        match event {
            Event::StreamStart | Event::StreamEnd | Event::Anchor(..) => {}
            Event::DocumentStart(..) => {}
            Event::DocumentEnd => self.end_document(),
            Event::Comment(text, placement) => self.comment(text.into_owned(), placement),
            Event::Scalar(text, style, anchor, tag) => {
                if self.top_is_map_awaiting_key() {
                    let name = self.key_name(&text, style, tag.as_deref(), &span)?;
                    let before = std::mem::take(&mut self.pending);
                    let line = self.line(&span);
                    let start = offset(byte(&span.start));
                    self.last_end = byte(&span.end);
                    if let Some(Frame::Map {
                        key,
                        entries,
                        quoted_keys,
                        rec,
                        ..
                    }) = self.frames.last_mut()
                    {
                        if entries.is_empty() && key.is_none() {
                            *quoted_keys = style == ScalarStyle::DoubleQuoted;
                            if let Some(layout) = rec.layout.as_mut() {
                                layout.json = layout.flow && *quoted_keys;
                            }
                        }
                        *key = Some(Key {
                            name,
                            meta: (!before.is_empty()).then(|| {
                                Box::new(Meta {
                                    before,
                                    ..Meta::default()
                                })
                            }),
                            line,
                            start,
                        });
                    }
                    if anchor != 0 {
                        let at = (start, offset(self.last_end));
                        self.anchors
                            .insert(anchor, (Node::from(Value::Str(text.into_owned())), at));
                    }
                    self.last = Last::Key;
                    return Ok(());
                }
                let placed = self.place(&span);
                self.last_end = byte(&span.end);
                let shape = match span.start == span.end && style == ScalarStyle::Plain {
                    true => Shape::Empty,
                    false => Shape::Scalar,
                };
                let json = style == ScalarStyle::DoubleQuoted;
                let meta = self.starting(&span);
                let value = self.scalar_value(text.into_owned(), style, tag.as_deref(), &span)?;
                let node = Node { value, meta };
                if anchor != 0 {
                    let at = (offset(byte(&span.start)), offset(self.last_end));
                    self.anchors.insert(anchor, (node.without_meta(), at));
                }
                self.complete(node, &span, Child { placed, shape, json })?;
            }
            Event::Alias(id) => {
                if self.top_is_map_awaiting_key() {
                    return Err(self.error(&span, String::from("an alias as a map key cannot become a JSON key")));
                }
                let Some((target, at)) = self.anchors.get(&id) else {
                    return Err(self.error(&span, String::from("alias to an unknown anchor")));
                };
                let copy = target.without_meta();
                self.document.aliased.push(Aliased {
                    anchored: *at,
                    alias: offset(byte(&span.start)),
                });
                self.alias_nodes += node_count(&copy);
                if self.alias_nodes > 10 * (self.events + 10_000) {
                    return Err(self.error(
                        &span,
                        format!(
                            "excessive aliasing: aliases expand to {} nodes from {} YAML events",
                            self.alias_nodes, self.events
                        ),
                    ));
                }
                let placed = self.place(&span);
                self.last_end = byte(&span.end);
                let meta = self.starting(&span);
                let child = Child {
                    placed,
                    shape: Shape::Alias,
                    json: false,
                };
                self.complete(Node { meta, ..copy }, &span, child)?;
            }
            Event::UnresolvedAlias(name) => {
                return Err(self.error(&span, format!("alias `*{name}` names no anchor defined before it")));
            }
            Event::SequenceStart(style, anchor, _) => {
                if self.top_is_map_awaiting_key() {
                    return Err(self.error(&span, String::from("a list as a map key cannot become a JSON key")));
                }
                let rec = self.collection_start(&span, style == StructureStyle::Flow);
                let meta = self.starting(&span);
                self.frames.push(Frame::Seq {
                    node: Node {
                        value: Value::Null,
                        meta,
                    },
                    items: Vec::new(),
                    anchor,
                    rec,
                });
                self.last = Last::StartedTop;
            }
            Event::MappingStart(style, anchor, _) => {
                if self.top_is_map_awaiting_key() {
                    return Err(self.error(&span, String::from("a map as a map key cannot become a JSON key")));
                }
                let rec = self.collection_start(&span, style == StructureStyle::Flow);
                let meta = self.starting(&span);
                self.frames.push(Frame::Map {
                    node: Node {
                        value: Value::Null,
                        meta,
                    },
                    entries: Vec::new(),
                    index: None,
                    key: None,
                    last: None,
                    merged: None,
                    anchor,
                    rec,
                    quoted_keys: false,
                });
                self.last = Last::StartedTop;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (mut node, anchor, rec, json) = match self.frames.pop() {
                    Some(Frame::Seq {
                        mut node,
                        items,
                        anchor,
                        rec,
                    }) => {
                        node.value = Value::Seq(items);
                        let json = rec.layout.as_ref().is_some_and(|l| l.json);
                        (node, anchor, rec, json)
                    }
                    Some(Frame::Map {
                        mut node,
                        entries,
                        anchor,
                        rec,
                        quoted_keys,
                        ..
                    }) => {
                        node.value = Value::Map(entries);
                        (node, anchor, rec, quoted_keys)
                    }
                    None => return Err(self.error(&span, String::from("unbalanced end of a collection"))),
                };
                // A block collection ends at its next token: its last content ended it.
                let flow = span.start != span.end;
                if flow {
                    self.last_end = byte(&span.end);
                }
                let Rec {
                    layout, placed, start, ..
                } = rec;
                if anchor != 0 {
                    let at = (offset(start), offset(self.last_end));
                    self.anchors.insert(anchor, (node.without_meta(), at));
                }
                if let Some(mut layout) = layout {
                    layout.end = offset(self.last_end);
                    node.meta_mut().layout = Some(*layout);
                }
                let shape = if flow { Shape::Flow } else { Shape::Block };
                self.complete(
                    node,
                    &span,
                    Child {
                        placed,
                        shape,
                        json: json && flow,
                    },
                )?;
            }
            _ => {}
        }
        Ok(())
    }

    fn comment(&mut self, text: String, placement: Placement) {
        if placement != Placement::Right {
            self.pending.push(text);
            return;
        }
        let target: Option<&mut Option<Box<Meta>>> = match (self.last, self.frames.last_mut()) {
            (Last::Key, Some(Frame::Map { key: Some(key), .. })) => Some(&mut key.meta),
            (Last::StartedTop, Some(Frame::Seq { node, .. } | Frame::Map { node, .. })) => Some(&mut node.meta),
            (Last::ChildOfTop, Some(Frame::Seq { items, .. })) => items.last_mut().map(|n| &mut n.meta),
            (Last::ChildOfTop, Some(Frame::Map { entries, last, .. })) => {
                last.and_then(|i| entries.get_mut(i)).map(|(_, v)| &mut v.meta)
            }
            _ => None,
        };
        match target {
            Some(meta) => {
                let meta = meta.get_or_insert_with(Default::default);
                match &mut meta.right {
                    Some(existing) => {
                        existing.push_str(" #");
                        existing.push_str(&text);
                    }
                    None => meta.right = Some(text),
                }
            }
            None => self.pending.push(text),
        }
    }

    /// A finished node goes into its parent (or becomes the document's root).
    fn complete(&mut self, mut node: Node, span: &Span, child: Child) -> Result<(), ReadError> {
        // The parent's record of this entry: where it is, to the end of what was read.
        let entry = Entry {
            start: child.placed.start,
            value: child.placed.value,
            end: offset(self.last_end),
            shape: child.shape,
        };
        let root_items = self.pack
            && self.frames.len() == 2
            && matches!(self.frames[1], Frame::Seq { .. })
            && matches!(
                &self.frames[0],
                Frame::Map { key: Some(Key { name: KeyName::Name(k), .. }), .. } if k == "items"
            );
        if root_items {
            if let Some(Frame::Seq {
                rec: Rec {
                    layout: Some(layout), ..
                },
                ..
            }) = self.frames.last_mut()
            {
                layout.entries.push(Some(entry));
            }
            if let Some(paths) = self.paths {
                paths.settle_item(&mut node);
            }
            let packed = Packed::new(&node, &mut self.pack_buffer);
            self.document.packed_items.push(packed);
            self.last = Last::Nothing;
            return Ok(());
        }
        let line_offset = self.line_offset;
        let paths = self.paths;
        match self.frames.last_mut() {
            None => {
                if self.document.root.is_some() {
                    return Err(self.error(span, String::from("a second root node in one document")));
                }
                self.document.root = Some(node);
                self.last = Last::Nothing;
            }
            Some(Frame::Seq { items, rec, .. }) => {
                if let Some(layout) = rec.layout.as_mut() {
                    if layout.entries.is_empty() && layout.flow {
                        layout.json = child.json;
                    }
                    layout.entries.push(Some(entry));
                }
                items.push(node);
                self.last = Last::ChildOfTop;
            }
            Some(Frame::Map {
                entries,
                index,
                key,
                last,
                merged,
                rec,
                ..
            }) => {
                let Some(key) = key.take() else {
                    return Err(ReadError {
                        line: Some(span.start.line() + line_offset),
                        message: String::from("a map value without a key"),
                    });
                };
                if let Some(key_meta) = key.meta {
                    let meta = node.meta_mut();
                    meta.before = key_meta.before;
                    if meta.right.is_none() {
                        meta.right = key_meta.right;
                    }
                }
                let layout = rec.layout.as_mut();
                match key.name {
                    KeyName::Name(name) => {
                        // A block map's entry is kept where it is on the caller's paths, or
                        // the paths want every entry of the map. A flow map's are all
                        // kept: they are its separators.
                        let keep = layout.as_ref().is_some_and(|layout| {
                            layout.flow
                                || paths.is_some_and(|p| p.every_entry(rec.role) || p.child(rec.role, Some(&name)) != 0)
                        });
                        let overrides_merge = merged.as_mut().is_some_and(|m| m.remove(&name));
                        let (at, duplicate) = set(entries, index, name, node);
                        *last = Some(at);
                        if let Some(layout) = layout {
                            record_at(layout, at, keep.then_some(entry));
                        }
                        if duplicate && !overrides_merge {
                            let name = &entries[at].0;
                            self.document.warnings.push(format!(
                                "key `{name}` at line {} appears twice in one map; the last value is kept, as kubectl does",
                                key.line
                            ));
                        }
                    }
                    KeyName::Merge => {
                        let keys = merge(entries, index, node).map_err(|message| ReadError {
                            line: Some(key.line),
                            message,
                        })?;
                        if let Some(layout) = layout {
                            // Merged keys are not written here.
                            for (_, at) in &keys {
                                record_at(layout, *at, None);
                            }
                            if layout.merge.is_none() && child.shape == Shape::Alias {
                                layout.merge = Some(entry);
                            }
                        }
                        merged
                            .get_or_insert_with(Default::default)
                            .extend(keys.into_iter().map(|(k, _)| k));
                        *last = None;
                    }
                }
                self.last = Last::ChildOfTop;
            }
        }
        Ok(())
    }
}

/// Records where the map entry at index `at` is written (`None`: not in this text).
fn record_at(layout: &mut Layout, at: usize, entry: Option<Entry>) {
    if layout.entries.len() <= at {
        layout.entries.resize(at + 1, None);
    }
    layout.entries[at] = entry;
}
