//! The output as the input's own text: an injection's `add`s become text inserted at
//! byte offsets of the document (taken from the reader's [`Layout`]s), written in the
//! style of the collection they join — a block list gets block items at its dashes'
//! column (on one line, in flow style, where its items are flow maps), a block map
//! `key: value` lines at its keys' column, a flow collection `, item` before its closing
//! bracket (JSON where its keys are double-quoted). `uninject`'s `remove`s become ranges
//! of the text taken out: a block entry's lines, a flow entry with one separator. So
//! every byte that is not added (or removed) is the input's.
//!
//! What has no place of its own in the text is written anew, and only that: the value
//! of an alias the addition goes into (`labels: *labels` becomes
//! `labels: {<<: *labels, added: value}`), of a key left null, of a key set again. A
//! value rewritten whole in flow style is for the caller to read back ([`Edits::unsure`]),
//! as is any edit inside an anchored node that is aliased elsewhere ([`touches`]).

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::Value as Json;

use super::layout::{self, Entry, Layout, Shape};
use super::node::{Node, Value};
use super::read::Aliased;
use super::write::{self, Out, Style};

/// `text[from..to]` replaced by `with` (an insertion when `from == to`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub from: usize,
    pub to: usize,
    pub with: String,
}

/// The edits of one object, in text order.
#[derive(Debug, Default)]
pub struct Edits {
    pub edits: Vec<Edit>,
    /// A value is written anew whole in place of the input's (a scalar, or a collection
    /// that is not recorded): the caller reads the result back.
    pub unsure: bool,
}

/// Whether an edit falls inside one of the `aliased` nodes' text (from its first line to
/// the line after it): it would show where the node is aliased too.
pub fn touches(text: &str, edits: &[Edit], aliased: &[Aliased]) -> bool {
    aliased.iter().any(|a| {
        let (start, end) = a.anchored;
        let (start, end) = (line_start(text, start as usize), line_after(text, end as usize));
        edits.iter().any(|e| e.to > start && e.from <= end)
    })
}

/// An operation that has no place in the text; the caller writes the object anew.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotInText(pub String);

fn not_in_text(message: impl Into<String>) -> NotInText {
    NotInText(message.into())
}

/// The text with its edits made.
pub fn apply(text: &str, edits: &[Edit]) -> String {
    let mut out = String::with_capacity(text.len() + edits.iter().map(|e| e.with.len()).sum::<usize>());
    let mut at = 0;
    for edit in edits {
        out.push_str(&text[at..edit.from]);
        out.push_str(&edit.with);
        at = edit.to;
    }
    out.push_str(&text[at..]);
    out
}

fn index_of(node: &Node, token: &str) -> Option<usize> {
    match &node.value {
        Value::Map(entries) => entries.iter().rposition(|(k, _)| k == token),
        Value::Seq(items) => token.parse::<usize>().ok().filter(|&i| i < items.len()),
        _ => None,
    }
}

fn child(node: &Node, index: usize) -> &Node {
    match &node.value {
        Value::Map(entries) => &entries[index].1,
        Value::Seq(items) => &items[index],
        _ => unreachable!("index_of found an entry"),
    }
}

fn is_map(node: &Node) -> bool {
    matches!(node.value, Value::Map(_))
}

/// A collection written in the text.
#[derive(Clone, Copy)]
struct Written<'n> {
    node: &'n Node,
    layout: &'n Layout,
}

impl<'n> Written<'n> {
    fn same(&self, other: &Written<'_>) -> bool {
        std::ptr::eq(self.node, other.node)
    }

    fn entry(&self, index: usize) -> Option<Entry> {
        self.layout.entries.get(index).copied().flatten()
    }
}

/// Where an operation's path leads in the text.
enum Target<'n> {
    /// Its parent collection, written in the text (as is every collection above it).
    In(Written<'n>),
    /// Entry `index` of `holder`, whose value is not a collection written there (an
    /// alias, a scalar, a merged key's): the path's first `depth` tokens lead to it.
    Anew {
        holder: Written<'n>,
        index: usize,
        depth: usize,
    },
}

/// The path down from the root through the written collections, and where it leaves
/// them; `chain` gets every written collection passed.
fn resolve<'n>(root: &'n Node, tokens: &[String], chain: &mut Vec<Written<'n>>) -> Result<Target<'n>, NotInText> {
    let layout = root
        .layout()
        .ok_or_else(|| not_in_text("the document is not a map written in the text"))?;
    let mut here = Written { node: root, layout };
    chain.push(here);
    let parents = tokens.len().saturating_sub(1);
    for (depth, token) in tokens[..parents].iter().enumerate() {
        let index = index_of(here.node, token).ok_or_else(|| not_in_text(format!("no `{token}` on the way")))?;
        let next = child(here.node, index);
        match (here.entry(index), next.layout()) {
            (Some(_), Some(layout)) => {
                here = Written { node: next, layout };
                chain.push(here);
            }
            _ => {
                return Ok(Target::Anew {
                    holder: here,
                    index,
                    depth: depth + 1,
                });
            }
        }
    }
    Ok(Target::In(here))
}

fn tokens(path: &PointerBuf) -> Vec<String> {
    path.tokens().map(|t| t.decoded().into_owned()).collect()
}

/// The nesting the input uses, from the written collections down to an addition: how
/// much deeper a map is than its key, and a list's dashes. kubectl's where it shows none.
fn style_of(chain: &[Written<'_>]) -> Style {
    let mut step = None;
    let mut list_offset = None;
    for pair in chain.windows(2) {
        let (parent, inner) = (pair[0], pair[1]);
        if parent.layout.flow || inner.layout.flow || !is_map(parent.node) {
            continue;
        }
        let deeper = inner.layout.indent.checked_sub(parent.layout.indent);
        match is_map(inner.node) {
            true => step = step.or(deeper.filter(|&d| d > 0)),
            false => list_offset = list_offset.or(deeper),
        }
    }
    Style {
        step: step.map_or(Style::KUBECTL.step, |s| s as usize),
        list_offset: list_offset.map_or(Style::KUBECTL.list_offset, |s| s as usize),
    }
}

/// What the additions of one object make, before it is written as text.
enum Pending<'n> {
    /// Entries added to a collection written in the text, at its end or its front.
    Add {
        to: Written<'n>,
        /// The path of the collection.
        path: Vec<String>,
        front: bool,
        entries: Vec<(Option<String>, Json)>,
        style: Style,
        depth: usize,
    },
    /// An entry's value written anew: what it was, with the operations below it applied.
    Anew {
        holder: Written<'n>,
        index: usize,
        /// The path of the entry.
        path: Vec<String>,
        value: Json,
        original: Json,
        style: Style,
        depth: usize,
    },
}

/// Adds `value` at `relative` inside `target`.
fn add_inside(target: &mut Json, relative: &[String], value: &Json) -> Result<(), NotInText> {
    let path = PointerBuf::from_tokens(relative.iter().map(String::as_str));
    let op = PatchOperation::Add(AddOperation {
        path,
        value: value.clone(),
    });
    json_patch::patch(target, &[op]).map_err(|e| not_in_text(e.to_string()))
}

/// The edits that make `patch` (`add`s against the object `root`) in `text`.
pub fn additions(text: &str, root: &Node, patch: &Patch) -> Result<Edits, NotInText> {
    let mut pending: Vec<Pending<'_>> = Vec::new();
    for op in &patch.0 {
        let PatchOperation::Add(add) = op else {
            return Err(not_in_text(format!("an injection only adds, found {op:?}")));
        };
        let tokens = tokens(&add.path);
        if into_pending(&mut pending, &tokens, &add.value)? {
            continue;
        }
        let mut chain = Vec::new();
        let target = resolve(root, &tokens, &mut chain)?;
        let style = style_of(&chain);
        let depth = chain.len();
        match target {
            Target::In(to) => {
                let last = tokens.last().ok_or_else(|| not_in_text("the whole document"))?;
                let parent = tokens[..tokens.len() - 1].to_vec();
                match &to.node.value {
                    Value::Map(_) => match index_of(to.node, last) {
                        Some(index) => pending.push(Pending::Anew {
                            holder: to,
                            index,
                            path: tokens.clone(),
                            value: add.value.clone(),
                            original: child(to.node, index).to_json(),
                            style,
                            depth,
                        }),
                        None => add_entry(
                            &mut pending,
                            to,
                            parent,
                            false,
                            Some(last.clone()),
                            &add.value,
                            style,
                            depth,
                        ),
                    },
                    Value::Seq(items) => {
                        let (front, end) = added_to(&pending, &to);
                        let front_add = match last.as_str() {
                            "-" => false,
                            index => match index.parse::<usize>() {
                                Ok(i) if i <= front => true,
                                Ok(i) if i == front + items.len() + end => false,
                                _ => return Err(not_in_text(format!("an insertion at `{index}` inside the list"))),
                            },
                        };
                        add_entry(&mut pending, to, parent, front_add, None, &add.value, style, depth);
                    }
                    _ => return Err(not_in_text("an addition inside a scalar")),
                }
            }
            Target::Anew {
                holder,
                index,
                depth: at,
            } => {
                let path = tokens[..at].to_vec();
                let mut value = child(holder.node, index).to_json();
                let original = value.clone();
                add_inside(&mut value, &tokens[at..], &add.value)?;
                pending.push(Pending::Anew {
                    holder,
                    index,
                    path,
                    value,
                    original,
                    style,
                    depth,
                });
            }
        }
    }
    let crlf = uses_crlf(text);
    let mut edits = Edits::default();
    let mut ordered: Vec<(Edit, usize)> = Vec::new();
    for p in pending {
        let (edit, depth, unsure) = render(text, p)?;
        edits.unsure |= unsure;
        ordered.push((crlf_edit(edit, crlf), depth));
    }
    // At one offset, what goes into a deeper collection comes first: it ends before its
    // parent's next entry starts. Otherwise the operations' order.
    ordered.sort_by_key(|(edit, depth)| (edit.from, std::cmp::Reverse(*depth)));
    edits.edits = ordered.into_iter().map(|(edit, _)| edit).collect();
    Ok(edits)
}

/// How many entries this patch adds at the front and at the end of a list.
fn added_to(pending: &[Pending<'_>], list: &Written<'_>) -> (usize, usize) {
    let mut counts = (0, 0);
    for p in pending {
        if let Pending::Add { to, front, entries, .. } = p
            && to.same(list)
        {
            match front {
                true => counts.0 += entries.len(),
                false => counts.1 += entries.len(),
            }
        }
    }
    counts
}

#[allow(clippy::too_many_arguments)]
fn add_entry<'n>(
    pending: &mut Vec<Pending<'n>>,
    to: Written<'n>,
    path: Vec<String>,
    front: bool,
    key: Option<String>,
    value: &Json,
    style: Style,
    depth: usize,
) {
    for p in pending.iter_mut() {
        if let Pending::Add {
            to: there,
            front: at_front,
            entries,
            ..
        } = p
            && there.same(&to)
            && *at_front == front
        {
            entries.push((key, value.clone()));
            return;
        }
    }
    pending.push(Pending::Add {
        to,
        path,
        front,
        entries: vec![(key, value.clone())],
        style,
        depth,
    });
}

/// An operation below something this patch already writes (a map it adds, a value it
/// writes anew) goes into that; true if it did.
fn into_pending(pending: &mut [Pending<'_>], tokens: &[String], value: &Json) -> Result<bool, NotInText> {
    for p in pending.iter_mut() {
        match p {
            Pending::Add { path, entries, .. } if tokens.len() > path.len() + 1 && tokens.starts_with(path) => {
                let key = &tokens[path.len()];
                if let Some((_, json)) = entries.iter_mut().find(|(k, _)| k.as_ref() == Some(key)) {
                    add_inside(json, &tokens[path.len() + 1..], value)?;
                    return Ok(true);
                }
            }
            Pending::Anew { path, value: json, .. } if tokens.starts_with(path) => {
                match tokens.len() == path.len() {
                    true => *json = value.clone(),
                    false => add_inside(json, &tokens[path.len()..], value)?,
                }
                return Ok(true);
            }
            _ => {}
        }
    }
    Ok(false)
}

fn uses_crlf(text: &str) -> bool {
    text.find('\n')
        .is_some_and(|n| n > 0 && text.as_bytes()[n - 1] == b'\r')
}

fn crlf_edit(mut edit: Edit, crlf: bool) -> Edit {
    if crlf && edit.with.contains('\n') {
        edit.with = edit.with.replace('\n', "\r\n");
    }
    edit
}

/// Start of the line holding byte `at` (on the first line, past a byte order mark).
fn line_start(text: &str, at: usize) -> usize {
    text[..at]
        .rfind('\n')
        .map_or_else(|| layout::first_line_start(text).min(at), |n| n + 1)
}

/// Where the line after the content ending at `end` starts. A block scalar ends on the
/// line after its last one, in the next content's indentation: that line then.
fn line_after(text: &str, end: usize) -> usize {
    let start = line_start(text, end);
    if text.as_bytes()[start..end].iter().all(|&b| b == b' ') {
        return start;
    }
    text[end..].find('\n').map_or(text.len(), |n| end + n + 1)
}

/// The indentation of the line starting at `at` and whether it holds only a comment.
fn comment_line(text: &str, at: usize) -> Option<usize> {
    let line = &text[at..text[at..].find('\n').map_or(text.len(), |n| at + n)];
    let rest = line.trim_start_matches(' ');
    rest.starts_with('#').then(|| line.len() - rest.len())
}

/// Where an entry added at the end of a block collection (keys or dashes at `indent`)
/// goes: after its last content's line, and after comment lines indented deeper than
/// `indent`, which belong to the last entry.
fn after_block(text: &str, end: usize, indent: usize) -> usize {
    let mut at = line_after(text, end);
    while at < text.len() && comment_line(text, at).is_some_and(|i| i > indent) {
        at = text[at..].find('\n').map_or(text.len(), |n| at + n + 1);
    }
    at
}

/// Where an entry added at the front of a block collection goes: before the comment
/// lines just above its first entry, which describe that entry.
fn before_block(text: &str, first: usize, indent: usize) -> usize {
    let mut at = line_start(text, first);
    while at > 0 {
        let above = line_start(text, at - 1);
        match comment_line(text, above) {
            Some(i) if i >= indent => at = above,
            _ => break,
        }
    }
    at
}

/// Text inserted at `at`: a line break first if `at` ends a text without one, and then
/// none at its end, so that the output ends as the input did.
fn lines_at(text: &str, at: usize, mut lines: String) -> String {
    if at == text.len() && !text.is_empty() && !text.ends_with('\n') {
        lines.pop();
        lines.insert(0, '\n');
    }
    lines
}

fn block_entries(
    entries: &[(Option<String>, Json)],
    map: bool,
    indent: usize,
    style: Style,
    flow_items: bool,
) -> String {
    let mut out = Out::default();
    for (key, value) in entries {
        match (map, key) {
            (true, Some(key)) => write::entries(&mut out, &[(key.clone(), Node::from_json(value))], indent, style),
            _ if flow_items => {
                out.push_str(&" ".repeat(indent));
                out.push_str("- ");
                flow(&mut out, value, false);
                out.push('\n');
            }
            _ => write::item(&mut out, &Node::from_json(value), indent, style),
        }
    }
    out.into_string()
}

fn flow_entries(entries: &[(Option<String>, Json)], json: bool) -> Vec<String> {
    entries
        .iter()
        .map(|(key, value)| {
            let mut out = Out::default();
            if let Some(key) = key {
                flow_key(&mut out, key, json);
                out.push_str(": ");
            }
            flow(&mut out, value, json);
            out.into_string()
        })
        .collect()
}

/// What goes before an entry appended to a flow collection: `, `, or a line break and
/// the last entry's indentation when that entry is on a line of its own.
fn flow_separator(text: &str, last: &Entry) -> String {
    let start = last.start as usize;
    let line = line_start(text, start);
    let indent = &text[line..start];
    match line > 0 && indent.bytes().all(|b| b == b' ') {
        true => format!(",\n{indent}"),
        false => String::from(", "),
    }
}

/// One pending addition as an edit: the edit, the depth of what it goes into, and
/// whether it is to be read back.
fn render(text: &str, pending: Pending<'_>) -> Result<(Edit, usize, bool), NotInText> {
    match pending {
        Pending::Add {
            to,
            front,
            entries,
            style,
            depth,
            ..
        } => Ok((add_edit(text, to, front, &entries, style)?, depth, false)),
        Pending::Anew {
            holder,
            index,
            value,
            original,
            style,
            depth,
            ..
        } => {
            let Some(entry) = holder.entry(index) else {
                // A key merged in from elsewhere: set here, it takes precedence.
                let Value::Map(entries) = &holder.node.value else {
                    return Err(not_in_text("a list item not written in the text"));
                };
                let key = entries[index].0.clone();
                return Ok((
                    add_edit(text, holder, false, &[(Some(key), value)], style)?,
                    depth,
                    false,
                ));
            };
            let unsure = !matches!(entry.shape, Shape::Alias | Shape::Empty);
            Ok((anew_edit(text, holder, entry, &value, &original, style)?, depth, unsure))
        }
    }
}

fn add_edit(
    text: &str,
    to: Written<'_>,
    front: bool,
    entries: &[(Option<String>, Json)],
    style: Style,
) -> Result<Edit, NotInText> {
    let layout = to.layout;
    let map = is_map(to.node);
    let written: Vec<Entry> = layout.entries.iter().flatten().copied().collect();
    if layout.flow {
        let items = flow_entries(entries, layout.json);
        let first = written.iter().chain(layout.merge.iter()).min_by_key(|e| e.start);
        let last = written.iter().chain(layout.merge.iter()).max_by_key(|e| e.end);
        let (at, with) = match (front, first, last) {
            (true, Some(first), _) => (first.start as usize, items.iter().map(|i| format!("{i}, ")).collect()),
            (_, _, Some(last)) => {
                let separator = flow_separator(text, last);
                let with = items.iter().map(|i| format!("{separator}{i}")).collect();
                (last.end as usize, with)
            }
            (_, _, None) => (layout.start as usize + 1, items.join(", ")),
        };
        return Ok(Edit { from: at, to: at, with });
    }
    let indent = layout.indent as usize;
    let first = written
        .first()
        .ok_or_else(|| not_in_text("an empty block collection"))?;
    let at = match front {
        true => before_block(text, first.start as usize, indent),
        false => after_block(text, layout.end as usize, indent),
    };
    let flow_items = !map && written.last().is_some_and(|e| e.shape == Shape::Flow);
    let lines = block_entries(entries, map, indent, style, flow_items);
    Ok(Edit {
        from: at,
        to: at,
        with: lines_at(text, at, lines),
    })
}

/// An entry's value written anew, in place of what was there.
fn anew_edit(
    text: &str,
    holder: Written<'_>,
    entry: Entry,
    value: &Json,
    original: &Json,
    style: Style,
) -> Result<Edit, NotInText> {
    let json = holder.layout.json;
    let (from, to) = (entry.value as usize, entry.end as usize);
    match (entry.shape, value, original) {
        // The alias stays, merged into a map with what changed.
        (Shape::Alias, Json::Object(now), Json::Object(before)) => {
            let mut out = Out::default();
            out.push_str("{<<: ");
            out.push_str(&text[from..to]);
            for (key, value) in now.iter().filter(|(k, v)| before.get(*k) != Some(*v)) {
                out.push_str(", ");
                flow_key(&mut out, key, false);
                out.push_str(": ");
                flow(&mut out, value, false);
            }
            out.push('}');
            Ok(Edit {
                from,
                to,
                with: out.into_string(),
            })
        }
        (Shape::Empty, _, _) => {
            // Nothing after the key but its `:`: what is added follows it.
            let colon = text[from..]
                .find(|c: char| c != ' ')
                .map(|n| from + n)
                .filter(|&at| text.as_bytes()[at] == b':')
                .ok_or_else(|| not_in_text("a key without `:` and value"))?;
            let block = match value {
                Json::Object(map) if !map.is_empty() && !holder.layout.flow => Some(true),
                Json::Array(items) if !items.is_empty() && !holder.layout.flow => Some(false),
                _ => None,
            };
            match block {
                Some(is_map) => {
                    let key_indent = holder.layout.indent as usize;
                    let at = line_after(text, colon + 1);
                    let node = Node::from_json(value);
                    let mut out = Out::default();
                    match &node.value {
                        Value::Map(entries) => write::entries(&mut out, entries, key_indent + style.step, style),
                        Value::Seq(items) => {
                            for item in items {
                                write::item(&mut out, item, key_indent + style.list_offset, style);
                            }
                        }
                        _ => {}
                    }
                    debug_assert!(is_map == matches!(node.value, Value::Map(_)));
                    Ok(Edit {
                        from: at,
                        to: at,
                        with: lines_at(text, at, out.into_string()),
                    })
                }
                None => {
                    let mut out = Out::default();
                    out.push(' ');
                    flow(&mut out, value, json);
                    Ok(Edit {
                        from: colon + 1,
                        to: colon + 1,
                        with: out.into_string(),
                    })
                }
            }
        }
        _ => {
            let mut out = Out::default();
            flow(&mut out, value, json);
            Ok(Edit {
                from,
                to,
                with: out.into_string(),
            })
        }
    }
}

/// A key in a flow map: as JSON in a JSON collection.
fn flow_key(out: &mut Out<'_>, key: &str, json: bool) {
    match json {
        true => out.push_str(&serde_json::to_string(key).unwrap_or_default()),
        false => write::flow_scalar(out, key),
    }
}

/// `value` on one line in flow style: `{name: envoy, ports: [{containerPort: 80}]}`, or
/// JSON with `json`.
pub fn flow(out: &mut Out<'_>, value: &Json, json: bool) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) if !json => write::yaml_float(out, f),
            _ => out.push_str(&n.to_string()),
        },
        Json::String(s) => match json {
            true => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
            false => write::flow_scalar(out, s),
        },
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(out, item, json);
            }
            out.push(']');
        }
        Json::Object(map) => {
            out.push('{');
            for (i, (key, value)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow_key(out, key, json);
                out.push_str(": ");
                flow(out, value, json);
            }
            out.push('}');
        }
    }
}

/// The edits that make `patch` (`remove`s against the object `root`, as `uninject`
/// plans them) in `text`: each entry's own text goes, nothing else.
pub fn removals(text: &str, root: &Node, patch: &Patch) -> Result<Edits, NotInText> {
    // Per collection, the entries removed (list items by their first index: later
    // operations count without the earlier ones, as JSON Patch applies them in turn).
    let mut taken: Vec<(Written<'_>, Vec<usize>)> = Vec::new();
    // Map entries the patch removes, decided once all are known.
    let mut whole: Vec<(Written<'_>, usize)> = Vec::new();
    for op in &patch.0 {
        let PatchOperation::Remove(remove) = op else {
            return Err(not_in_text(format!("uninject only removes, found {op:?}")));
        };
        let tokens = tokens(&remove.path);
        let mut chain = Vec::new();
        let Target::In(from) = resolve(root, &tokens, &mut chain)? else {
            return Err(not_in_text(format!(
                "`{}` is not written as such in the text",
                remove.path
            )));
        };
        let last = tokens.last().ok_or_else(|| not_in_text("the whole document"))?;
        let gone = taken_from(&mut taken, from);
        let index = match &from.node.value {
            Value::Seq(_) => {
                let now: usize = last
                    .parse()
                    .map_err(|_| not_in_text(format!("`{last}` is not a list index")))?;
                (0..len(from.node))
                    .filter(|i| !gone.contains(i))
                    .nth(now)
                    .ok_or_else(|| not_in_text(format!("no item {now} to remove")))?
            }
            _ => index_of(from.node, last).ok_or_else(|| not_in_text(format!("no `{last}` to remove")))?,
        };
        if from.entry(index).is_none() {
            return Err(not_in_text(format!("`{}` is not written in the text", remove.path)));
        }
        match from.node.value {
            Value::Seq(_) => gone.push(index),
            _ => whole.push((from, index)),
        }
    }
    for &(from, index) in &whole {
        take_whole(&mut taken, from, index, &whole);
    }
    let mut edits = Edits::default();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (from, gone) in &taken {
        let layout = from.layout;
        let written = layout.entries.iter().flatten().count();
        match layout.merge {
            // A flow map left with only its `<<: *alias`, where the injection merged into
            // an alias: the alias alone again.
            Some(merge) if layout.flow && !gone.is_empty() && gone.len() == written => {
                edits.edits.push(Edit {
                    from: layout.start as usize,
                    to: layout.end as usize,
                    with: text[merge.value as usize..merge.end as usize].to_string(),
                });
            }
            _ if layout.flow => ranges.extend(flow_ranges(*from, gone)?),
            _ => {
                for &index in gone {
                    ranges.push(block_range(text, *from, index)?);
                }
            }
        }
    }
    // What a rewritten map covers is in it.
    ranges.retain(|&(a, b)| !edits.edits.iter().any(|e| a >= e.from && b <= e.to));
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (from, to) in ranges {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    edits.edits.extend(merged.into_iter().map(|range| {
        let (from, to) = without_last_break(text, range);
        Edit {
            from,
            to,
            with: String::new(),
        }
    }));
    edits.edits.sort_by_key(|e| e.from);
    Ok(edits)
}

/// Takes map entry `index` of `from` out whole, as `uninject`'s patch says (`whole`: all
/// it takes out of maps), but for a collection the input had, which stays, emptied. An
/// injection writes a collection it creates in the style of a block map (block), and
/// after every entry of a flow map; so a flow collection in a block map was the input's,
/// as is an entry of a flow map that an entry staying follows, and a block map holding
/// either. True if the entry stays.
fn take_whole<'n>(
    taken: &mut Vec<(Written<'n>, Vec<usize>)>,
    from: Written<'n>,
    index: usize,
    whole: &[(Written<'n>, usize)],
) -> bool {
    let (Some(entry), value) = (from.entry(index), child(from.node, index)) else {
        return false;
    };
    if let Some(layout) = value.layout() {
        let inner = Written { node: value, layout };
        let written: Vec<usize> = (0..len(value)).filter(|&i| inner.entry(i).is_some()).collect();
        let followed = from.layout.flow
            && in_text_order(from.layout).iter().any(|(i, e)| {
                e.start > entry.start && !i.is_some_and(|i| whole.iter().any(|(m, w)| m.same(&from) && *w == i))
            });
        let was_there = match entry.shape {
            Shape::Flow => !from.layout.flow || followed,
            _ => followed,
        };
        // Everything in it goes (the patch takes it whole): a map's entries by the same
        // rule, a list's items.
        let mut stays = was_there;
        match is_map(value) {
            true => {
                let all: Vec<(Written<'n>, usize)> = written.iter().map(|&i| (inner, i)).collect();
                for &i in &written {
                    stays |= take_whole(taken, inner, i, &all);
                }
            }
            false if was_there => taken_from(taken, inner).extend(written),
            false => {}
        }
        if stays {
            return true;
        }
    }
    taken_from(taken, from).push(index);
    false
}

/// The entries of `from` taken so far.
fn taken_from<'t, 'n>(taken: &'t mut Vec<(Written<'n>, Vec<usize>)>, from: Written<'n>) -> &'t mut Vec<usize> {
    let at = match taken.iter().position(|(c, _)| c.same(&from)) {
        Some(at) => at,
        None => {
            taken.push((from, Vec::new()));
            taken.len() - 1
        }
    };
    &mut taken[at].1
}

fn len(node: &Node) -> usize {
    match &node.value {
        Value::Map(entries) => entries.len(),
        Value::Seq(items) => items.len(),
        _ => 0,
    }
}

/// The written entries of a collection in text order (a flow map's merge entry too),
/// each with its index in the node (`None`: the merge entry).
fn in_text_order(layout: &Layout) -> Vec<(Option<usize>, Entry)> {
    let mut written: Vec<(Option<usize>, Entry)> = layout
        .entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.map(|e| (Some(i), e)))
        .chain(layout.merge.map(|m| (None, m)))
        .collect();
    written.sort_by_key(|(_, e)| e.start);
    written
}

/// The text of the `gone` entries of a flow collection, to take out: each run of
/// consecutive ones with the separator before it (after it, for a run at the front),
/// so that the entries left keep theirs.
fn flow_ranges(of: Written<'_>, gone: &[usize]) -> Result<Vec<(usize, usize)>, NotInText> {
    if gone.iter().any(|&i| of.entry(i).is_none()) {
        return Err(not_in_text("an entry not written in the text"));
    }
    let written = in_text_order(of.layout);
    let removed = |at: usize| written[at].0.is_some_and(|i| gone.contains(&i));
    let mut ranges = Vec::new();
    let mut at = 0;
    while at < written.len() {
        if !removed(at) {
            at += 1;
            continue;
        }
        let first = at;
        while at < written.len() && removed(at) {
            at += 1;
        }
        let (run_start, run_end) = (written[first].1.start, written[at - 1].1.end);
        ranges.push(match (first.checked_sub(1), written.get(at)) {
            (Some(kept), _) => (written[kept].1.end as usize, run_end as usize),
            (None, Some(next)) => (run_start as usize, next.1.start as usize),
            (None, None) => (run_start as usize, run_end as usize),
        });
    }
    Ok(ranges)
}

/// The text of entry `index` of a block collection, to take out: its lines.
fn block_range(text: &str, of: Written<'_>, index: usize) -> Result<(usize, usize), NotInText> {
    let entry = of
        .entry(index)
        .ok_or_else(|| not_in_text("an entry not written in the text"))?;
    let (start, end) = (entry.start as usize, entry.end as usize);
    let line = line_start(text, start);
    if !text.as_bytes()[line..start].iter().all(|&b| b == b' ') {
        // The first key of a list item, on its dash's line: up to the next key, which
        // takes its place after the dash.
        let written = in_text_order(of.layout);
        let at = written.iter().position(|(i, _)| *i == Some(index));
        let next = at
            .and_then(|at| written.get(at + 1))
            .ok_or_else(|| not_in_text("the only key of a list item"))?;
        return Ok((start, next.1.start as usize));
    }
    Ok((line, line_after(text, end)))
}

/// A range of whole lines up to the end of a text without a final line break takes the
/// break before it, so that the text still ends without one.
fn without_last_break(text: &str, (start, end): (usize, usize)) -> (usize, usize) {
    let at_line_start = start > 0 && text.as_bytes()[start - 1] == b'\n';
    match end == text.len() && !text.ends_with('\n') && at_line_start {
        true => (
            start - 1 - usize::from(start >= 2 && text.as_bytes()[start - 2] == b'\r'),
            end,
        ),
        false => (start, end),
    }
}

/// The range of item `index` of the written list `list` (its layout recorded), to leave
/// an item out of the output.
pub fn item_range(text: &str, list: &Node, index: usize) -> Option<(usize, usize)> {
    let layout = list.layout()?;
    let of = Written { node: list, layout };
    match layout.flow {
        true => flow_ranges(of, &[index]).ok()?.pop(),
        false => block_range(text, of, index)
            .ok()
            .map(|range| without_last_break(text, range)),
    }
}

/// Whether an alias in the written list `list` repeats a node outside its own item (in
/// another item, or in the List's own fields): the items could not be edited one by one.
pub fn aliases_cross_items(list: &Node, aliased: &[Aliased]) -> bool {
    let Some(layout) = list.layout() else {
        return !aliased.is_empty();
    };
    let item_of = |at: u32| {
        layout
            .entries
            .iter()
            .position(|e| e.is_some_and(|e| e.start <= at && at <= e.end))
    };
    aliased
        .iter()
        .any(|a| item_of(a.alias).is_none() || item_of(a.anchored.0) != item_of(a.alias))
}

/// The text of item `index` of the written list `list` on its own, as a YAML document
/// reads it: a block item's lines (a list of one), a flow item's value.
pub fn item_text(text: &str, list: &Node, index: usize) -> Option<ItemText> {
    let layout = list.layout()?;
    let entry = layout.entries.get(index).copied().flatten()?;
    Some(match layout.flow {
        true => ItemText {
            from: entry.start as usize,
            to: entry.end as usize,
            block: false,
            indent: 0,
        },
        false => ItemText {
            from: line_start(text, entry.start as usize),
            to: line_after(text, entry.end as usize),
            block: true,
            indent: layout.indent as usize,
        },
    })
}

/// Where a list item's text is (see [`item_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemText {
    pub from: usize,
    pub to: usize,
    /// A block item: its lines, a list of one item with its dash at `indent`.
    pub block: bool,
    pub indent: usize,
}

impl ItemText {
    /// The item written anew from its tree, in place of its text.
    pub fn anew(&self, item: &Node, json: bool) -> Edit {
        let mut out = Out::default();
        match self.block {
            true => write::item(&mut out, item, self.indent, Style::KUBECTL),
            false => flow(&mut out, &item.to_json(), json),
        }
        Edit {
            from: self.from,
            to: self.to,
            with: out.into_string(),
        }
    }
}

#[cfg(test)]
mod tests;
