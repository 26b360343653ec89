//! YAML text to `Node`s, read the way kubectl reads it (go-yaml v2, then JSON): plain
//! scalars resolved by YAML 1.1 rules, aliases and `<<` merge keys expanded, map keys
//! turned into strings, the last of duplicate keys kept. Comments are kept on the node
//! they sit above or beside, for the writer.

use std::collections::HashMap;

use granit_parser::{Event, Parser, Placement, ScalarStyle, Span, StructureStyle, Tag};

use super::layout::{self, Entry, Layout, Shape, role};
use super::node::{Meta, Node, Value};
use super::packed;
use super::yaml11::{Resolved, go_format_float_key, resolve_plain};

const CORE: &str = "tag:yaml.org,2002:";

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

/// One object of a `List`, packed (see `Document::packed_items`).
#[derive(Debug, Clone, PartialEq)]
pub struct Packed(Box<[u8]>);

impl Packed {
    /// A node packed elsewhere (`packed::pack`).
    pub fn from_bytes(bytes: Vec<u8>) -> Packed {
        Packed(bytes.into_boxed_slice())
    }

    pub fn unpack(&self) -> Node {
        // The bytes were packed here from a tree; `packed`'s tests hold that they
        // come back exactly.
        packed::unpack(&self.0).unwrap_or_else(|_| Node::from(Value::Null))
    }
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

/// An item of the root map's `items` list, handed over as soon as it is read
/// ([`read_documents_handing_items`]), with what placing its text needs.
#[derive(Debug)]
pub struct HandedItem {
    /// Its tree, as it would have been packed (`layout::keep_for_pod` applied).
    pub item: Node,
    /// Its entry in the list's layout.
    pub entry: Entry,
    /// The list's layout without its entries, as it is when the item ends.
    pub list: ListPlace,
    /// The aliases read since the item before it (or since the document started).
    pub aliased: Vec<Aliased>,
}

/// What placing an item's text needs of its list's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListPlace {
    pub flow: bool,
    pub indent: u32,
    pub json: bool,
}

impl ListPlace {
    pub fn of(layout: &Layout) -> ListPlace {
        ListPlace {
            flow: layout.flow,
            indent: layout.indent,
            json: layout.json,
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

/// One object of a manifest and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub object: serde_json::Value,
    pub line: Option<usize>,
}

/// The objects of `text` as JSON, read the way kubectl reads them: every document's
/// root, with a `List` replaced by its items, each with its line. For callers that want
/// values, not the writer's tree (`check -f`).
pub fn objects(text: &str) -> Result<Vec<Located>, ReadError> {
    let mut objects = Vec::new();
    for mut document in read_documents(text, 1)? {
        document.unpack();
        let Some(root) = document.root else { continue };
        let items = match (&root.value, root.get("kind").and_then(Node::as_str)) {
            (Value::Map(_), Some("List")) => match root.get("items").map(|items| &items.value) {
                Some(Value::Seq(items)) => Some(items),
                _ => None,
            },
            _ => None,
        };
        match items {
            Some(items) => objects.extend(items.iter().map(|item| Located {
                object: item.to_json(),
                line: item.line(),
            })),
            // A List without items has none to explain.
            None if root.get("kind").and_then(Node::as_str) == Some("List") => {}
            None => objects.push(Located {
                object: root.to_json(),
                line: root.line(),
            }),
        }
    }
    Ok(objects)
}

/// Texts from this size on have their root `items` packed (`Document::packed_items`);
/// below it a tree is at most a few MB, not worth packing and unpacking.
pub(super) const PACK_FROM: usize = 1 << 20;

/// Parses `text` (one or more YAML documents); `first_line` is the line of `text`'s
/// first line in the whole input, so that messages point into the user's file.
pub fn read_documents(text: &str, first_line: usize) -> Result<Vec<Document>, ReadError> {
    parse(text, first_line, text.len() >= PACK_FROM, false)
}

/// As [`read_documents`], recording too where the collections an addition can go into
/// are in `text` ([`Node::layout`]): for output that is this text, edited.
pub fn read_documents_with_layouts(text: &str, first_line: usize) -> Result<Vec<Document>, ReadError> {
    parse(text, first_line, text.len() >= PACK_FROM, true)
}

/// As [`read_documents_with_layouts`] for a large text, but the first document's root
/// `items` are handed to `hand` one by one as soon as each is read, not packed into the
/// document (whose `items` list is left empty, its layout recorded): the caller can work
/// on them while the rest of the text is read.
pub fn read_documents_handing_items(
    text: &str,
    first_line: usize,
    hand: &mut dyn FnMut(HandedItem),
) -> Result<Vec<Document>, ReadError> {
    let mut builder = Builder::new(text, first_line.saturating_sub(1), true, true);
    builder.hand = Some(hand);
    builder.run()
}

fn parse(text: &str, first_line: usize, pack: bool, layouts: bool) -> Result<Vec<Document>, ReadError> {
    Builder::new(text, first_line.saturating_sub(1), pack, layouts).run()
}

impl Builder<'_> {
    fn run(mut self) -> Result<Vec<Document>, ReadError> {
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

enum KeyName {
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

struct Builder<'t> {
    text: &'t str,
    /// Whether layouts are recorded: offsets are kept in 32 bits.
    record: bool,
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
    /// Where the first document's root `items` go instead, if anywhere.
    hand: Option<&'t mut dyn FnMut(HandedItem)>,
    /// How many of the document's aliases went with an item handed over.
    aliases_handed: usize,
}

fn node_count(node: &Node) -> usize {
    match &node.value {
        Value::Seq(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|(_, v)| node_count(v)).sum::<usize>(),
        _ => 1,
    }
}

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

/// A byte offset of the text, which `record` keeps within 32 bits.
fn offset(at: usize) -> u32 {
    at as u32
}

fn byte(marker: &granit_parser::Marker) -> usize {
    // Parsing a `&str` always gives byte offsets.
    marker.byte_offset().unwrap_or_default()
}

impl<'t> Builder<'t> {
    fn new(text: &'t str, line_offset: usize, pack: bool, layouts: bool) -> Builder<'t> {
        Builder {
            text,
            record: layouts && u32::try_from(text.len()).is_ok(),
            last_end: 0,
            line_offset,
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
            hand: None,
            aliases_handed: 0,
        }
    }

    fn line(&self, span: &Span) -> usize {
        span.start.line() + self.line_offset
    }

    fn error(&self, span: &Span, message: String) -> ReadError {
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
    fn child_role(&self) -> u16 {
        match self.frames.last() {
            None => role::DOCUMENT,
            Some(Frame::Seq { rec, .. }) => role::child(rec.role, None),
            Some(Frame::Map {
                rec,
                key: Some(Key {
                    name: KeyName::Name(key),
                    ..
                }),
                ..
            }) => role::child(rec.role, Some(key)),
            Some(Frame::Map { .. }) => 0,
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
        let role = if self.record { self.child_role() } else { 0 };
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
            let mut list = None;
            if let Some(Frame::Seq {
                rec: Rec {
                    layout: Some(layout), ..
                },
                ..
            }) = self.frames.last_mut()
            {
                layout.entries.push(Some(entry));
                list = Some(ListPlace::of(layout));
            }
            layout::keep_for_pod(&mut node);
            // Only the first document's, and only where the text of each is recorded.
            if let (Some(hand), Some(list), true) = (self.hand.as_mut(), list, self.done.is_empty()) {
                let aliased = self.document.aliased[self.aliases_handed..].to_vec();
                self.aliases_handed = self.document.aliased.len();
                hand(HandedItem {
                    item: node,
                    entry,
                    list,
                    aliased,
                });
                self.last = Last::Nothing;
                return Ok(());
            }
            // Packed into one buffer, kept at its exact size: a list item's bytes grown
            // by doubling would hold a third more, and there can be a million items.
            self.pack_buffer.clear();
            packed::pack(&node, &mut self.pack_buffer);
            self.document
                .packed_items
                .push(Packed(self.pack_buffer.as_slice().into()));
            self.last = Last::Nothing;
            return Ok(());
        }
        let line_offset = self.line_offset;
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
                        // A block map's entry is kept where an addition may go into it or
                        // take it out: the way to a Pod's collections, an annotation or
                        // label. A flow map's are all kept: they are its separators.
                        let keep = layout.as_ref().is_some_and(|layout| {
                            layout.flow || rec.role & role::METADATA_MAP != 0 || role::child(rec.role, Some(&name)) != 0
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

    fn tag_name(tag: Option<&Tag>) -> Option<String> {
        let tag = tag?;
        Some(match tag.suffix_in_namespace(CORE) {
            Some(core) => format!("!!{core}"),
            None => format!("{}{}", tag.handle(), tag.suffix()),
        })
    }

    /// A scalar's value: go-yaml resolves plain scalars and honours core tags; quoted
    /// and block scalars, and scalars with other tags, are strings.
    fn scalar_value(
        &self,
        text: String,
        style: ScalarStyle,
        tag: Option<&Tag>,
        span: &Span,
    ) -> Result<Value, ReadError> {
        let tag = Self::tag_name(tag);
        let resolved = match tag.as_deref() {
            None if style == ScalarStyle::Plain => resolve_plain(&text),
            None | Some("!!str") => Resolved::Str,
            Some(core @ ("!!int" | "!!float" | "!!bool" | "!!null")) => {
                let resolved = resolve_plain(&text);
                let fits = match (core, &resolved) {
                    ("!!int", Resolved::Int(_) | Resolved::Uint(_)) => true,
                    ("!!float", Resolved::Float(_)) => true,
                    ("!!float", Resolved::Int(i)) => return Ok(Value::Float(*i as f64)),
                    ("!!float", Resolved::Uint(u)) => return Ok(Value::Float(*u as f64)),
                    ("!!bool", Resolved::Bool(_)) | ("!!null", Resolved::Null) => true,
                    _ => false,
                };
                if !fits {
                    return Err(self.error(span, format!("tag `{core}` on `{text}`: the value is not of that type")));
                }
                resolved
            }
            Some("!!binary") => {
                return Err(self.error(span, String::from("`!!binary` scalars are not supported")));
            }
            // go-yaml hands any other tag's scalar over as its text.
            Some(_) => Resolved::Str,
        };
        Ok(match resolved {
            Resolved::Null => Value::Null,
            Resolved::Bool(b) => Value::Bool(b),
            Resolved::Int(i) => Value::Int(i),
            Resolved::Uint(u) => Value::Uint(u),
            Resolved::Float(f) => Value::Float(f),
            Resolved::Str | Resolved::Merge => Value::Str(text),
            Resolved::BigInt => {
                return Err(self.error(
                    span,
                    format!("integer `{text}` does not fit in 64 bits; kubectl cannot send it as JSON either"),
                ));
            }
        })
    }

    /// A map key as a JSON object key, converted as sigs.k8s.io/yaml does.
    fn key_name(&self, text: &str, style: ScalarStyle, tag: Option<&Tag>, span: &Span) -> Result<KeyName, ReadError> {
        if style == ScalarStyle::Plain && tag.is_none() && text == "<<" {
            return Ok(KeyName::Merge);
        }
        if Self::tag_name(tag).as_deref() == Some("!!merge") {
            return Ok(KeyName::Merge);
        }
        Ok(KeyName::Name(
            match self.scalar_value(text.to_string(), style, tag, span)? {
                Value::Str(s) => s,
                Value::Bool(b) => b.to_string(),
                Value::Int(i) => i.to_string(),
                Value::Uint(u) => u.to_string(),
                Value::Float(f) => go_format_float_key(f),
                other => {
                    return Err(self.error(
                        span,
                        format!("map key `{text}` is {}, which cannot become a JSON key", what(&other)),
                    ));
                }
            },
        ))
    }
}

/// Records where the map entry at index `at` is written (`None`: not in this text).
fn record_at(layout: &mut Layout, at: usize, entry: Option<Entry>) {
    if layout.entries.len() <= at {
        layout.entries.resize(at + 1, None);
    }
    layout.entries[at] = entry;
}

/// Sets `key` in a map, replacing the value of an existing key in place. Returns the
/// entry's index and whether the key was already there.
fn set(
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
fn merge(
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(text: &str) -> serde_json::Value {
        let docs = read_documents(text, 1).unwrap();
        assert_eq!(docs.len(), 1, "{text}");
        docs[0].root.as_ref().unwrap().to_json()
    }

    #[test]
    fn scalars_resolve_as_kubectl_reads_them() {
        let got = one(
            "a: yes\nb: \"yes\"\nc: 0644\nd: '0644'\ne: ~\nf:\ng: 1e3\nh: 0x1F\ni: |\n  text\nj: !!str 12\nk: !!float 3\nl: !custom 12\nm: 2024-01-01\no: on\nn: 1\n",
        );
        assert_eq!(
            got,
            json!({"a": true, "b": "yes", "c": 420, "d": "0644", "e": null, "f": null, "g": 1000.0, "h": 31,
                   "i": "text\n", "j": "12", "k": 3.0, "l": "12", "m": "2024-01-01", "o": true, "false": 1})
        );
    }

    #[test]
    fn keys_become_strings_like_sigs_yaml() {
        assert_eq!(
            one("1: a\ntrue: b\n1.5: c\n\"x\": d\nyes: e\n"),
            json!({"1": "a", "true": "e", "1.5": "c", "x": "d"})
        );
        let err = read_documents("~: a\n", 1).unwrap_err();
        assert!(err.message.contains("cannot become a JSON key"), "{err}");
        assert_eq!(err.line, Some(1));
    }

    #[test]
    fn anchors_aliases_and_merge_keys_expand() {
        let got = one(
            "base: &b {image: x, port: 80}\nuse: *b\nmerged:\n  <<: *b\n  port: 81\nlist:\n  <<: [{a: 1}, {a: 2, b: 2}]\nquoted:\n  \"<<\": 1\n",
        );
        assert_eq!(got["use"], json!({"image": "x", "port": 80}));
        assert_eq!(got["merged"], json!({"image": "x", "port": 81}));
        assert!(
            read_documents("b: &b {x: 1}\nm:\n  <<: *b\n  x: 2\n", 1).unwrap()[0]
                .warnings
                .is_empty()
        );
        assert_eq!(got["list"], json!({"a": 1, "b": 2}));
        assert_eq!(got["quoted"], json!({"<<": 1}));
    }

    #[test]
    fn duplicate_keys_keep_the_last_value_and_warn() {
        let docs = read_documents("a: 1\nb: 2\na: 3\n", 10).unwrap();
        assert_eq!(docs[0].root.as_ref().unwrap().to_json(), json!({"a": 3, "b": 2}));
        assert_eq!(docs[0].warnings.len(), 1);
        assert!(docs[0].warnings[0].contains("`a` at line 12"), "{:?}", docs[0].warnings);
    }

    #[test]
    fn comments_attach_to_the_node_they_describe() {
        let docs = read_documents(
            "# head\nkind: Pod # right\nspec:\n  # above\n  containers: []\n# tail\n",
            1,
        )
        .unwrap();
        let root = docs[0].root.as_ref().unwrap();
        let kind = root.get("kind").unwrap().meta.as_ref().unwrap();
        assert_eq!(kind.before, [" head"]);
        assert_eq!(kind.right.as_deref(), Some(" right"));
        let containers = root.get("spec").unwrap().get("containers").unwrap();
        assert_eq!(containers.meta.as_ref().unwrap().before, [" above"]);
        assert_eq!(docs[0].trailing, [" tail"]);
    }

    #[test]
    fn errors_point_at_the_line_in_the_whole_file() {
        let err = read_documents("a: 1\nb: [\n", 20).unwrap_err();
        assert!(err.line.is_some_and(|l| l >= 21), "{err:?}");
        let err = read_documents("a: *nope\n", 1).unwrap_err();
        assert_eq!(err.line, Some(1));
    }

    #[test]
    fn a_large_lists_items_are_packed_and_unpack_to_the_same_values() {
        let text = "kind: List\nitems:\n# first\n- {kind: Pod, metadata: {name: a}, x: yes}\n- [1, 2]\nmetadata: {}\n";
        let mut docs = parse(text, 1, true, false).unwrap();
        let doc = &mut docs[0];
        assert_eq!(doc.packed_items.len(), 2);
        assert_eq!(doc.packed_items[0].unpack().line(), Some(4));
        assert_eq!(doc.root.as_ref().unwrap().to_json()["items"], json!([]));
        doc.unpack();
        assert_eq!(
            doc.root.as_ref().unwrap().to_json(),
            json!({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "a"}, "x": true}, [1, 2]], "metadata": {}})
        );
        // Only the root map's `items`.
        let nested = parse("spec:\n  items: [a]\n", 1, true, false).unwrap();
        assert!(nested[0].packed_items.is_empty());
        // A small text is not packed at all.
        assert!(read_documents(text, 1).unwrap()[0].packed_items.is_empty());
    }

    #[test]
    fn handed_items_are_the_packed_ones_and_the_rest_is_the_same() {
        let text = "# head\nkind: List\nitems:\n# first\n- {kind: Pod, metadata: {name: a, labels: &l {x: y}}, y: *l}\n- [1, 2]\n- kind: Deployment\n  spec:\n    template:\n      metadata: {labels: {a: b}}\nmetadata: {}\n---\nkind: List\nitems: [c]\n";
        let packed = parse(text, 3, true, true).unwrap();
        let mut handed = Vec::new();
        let documents = read_documents_handing_items(text, 3, &mut |item| handed.push(item)).unwrap();
        // Only the first document's.
        assert_eq!(handed.len(), 3);
        assert_eq!(documents[1].packed_items, packed[1].packed_items);
        assert!(documents[0].packed_items.is_empty());
        let list = packed[0].root.as_ref().unwrap().get("items").unwrap().layout().unwrap();
        for (i, item) in handed.iter().enumerate() {
            assert_eq!(item.item, packed[0].packed_items[i].unpack(), "{i}");
            assert_eq!(Some(item.entry), list.entries[i], "{i}");
            assert_eq!(item.list, ListPlace::of(list));
        }
        // The alias goes with the item it is in.
        assert_eq!(handed[0].aliased, packed[0].aliased);
        assert!(handed[1].aliased.is_empty());
        assert_eq!(documents[0].root, packed[0].root);
        assert_eq!(documents[0].aliased, packed[0].aliased);
        assert_eq!(documents[0].trailing, packed[0].trailing);
    }

    #[test]
    fn an_item_with_its_own_items_unpacks_whole() {
        let text = "kind: List\nitems:\n- kind: ConfigMapList\n  items: [a, b]\n";
        let mut docs = parse(text, 1, true, false).unwrap();
        docs[0].unpack();
        assert_eq!(
            docs[0].root.as_ref().unwrap().to_json()["items"],
            json!([{"kind": "ConfigMapList", "items": ["a", "b"]}])
        );
    }

    #[test]
    fn billion_laughs_are_refused() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let prev = (b'a' + i - 1) as char;
            let this = (b'a' + i) as char;
            text.push_str(&format!("{this}: &{this} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let err = read_documents(&text, 1).unwrap_err();
        assert!(err.message.contains("excessive aliasing"), "{err}");
    }
}
