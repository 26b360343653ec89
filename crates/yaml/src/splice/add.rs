//! Additions: each `add` of a patch placed in the text, written in the style of what it
//! joins.

use std::borrow::Cow;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::Value as Json;

use super::flow::{STEP, fits, flow, flow_key, one_line, wrapped};
use super::{
    Edit, Edits, NotInText, Target, Written, child, comment_line, index_of, is_map, line_after, line_start,
    not_in_text, resolve, style_of, tokens,
};
use crate::layout::{Entry, Shape};
use crate::node::{Node, Value};
use crate::write::{self, Out, Style};

/// What the additions of one object make, before it is written as text.
enum Pending<'n> {
    /// Entries added to a collection written in the text, at its end or its front.
    Add {
        to: Written<'n>,
        /// The path of the collection.
        path: Vec<String>,
        front: bool,
        /// Borrowed from the patch, copied only when an operation changes one.
        entries: Vec<Added<'n>>,
        style: Style,
        depth: usize,
        /// The column of the block collection holding it (see [`floor_of`]).
        floor: usize,
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
        /// The column of the block collection holding it (see [`floor_of`]).
        floor: usize,
    },
}

/// An entry added: its key (in a map) and value.
type Added<'n> = (Option<String>, Cow<'n, Json>);

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
pub fn additions<'n>(text: &str, root: &'n Node, patch: &'n Patch, renders: &mut Renders) -> Result<Edits, NotInText> {
    let mut pending: Vec<Pending<'n>> = Vec::new();
    for op in &patch.0 {
        let PatchOperation::Add(add) = op else {
            return Err(not_in_text(format!("a patch of additions only, found {op:?}")));
        };
        let tokens = tokens(&add.path);
        if into_pending(&mut pending, &tokens, &add.value)? {
            continue;
        }
        let mut chain = Vec::new();
        let target = resolve(root, &tokens, &mut chain)?;
        let style = style_of(&chain);
        let depth = chain.len();
        let floor = floor_of(&chain);
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
                            floor,
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
                            floor,
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
                        add_entry(
                            &mut pending,
                            to,
                            parent,
                            front_add,
                            None,
                            &add.value,
                            style,
                            depth,
                            floor,
                        );
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
                    floor,
                });
            }
        }
    }
    let crlf = uses_crlf(text);
    let mut edits = Edits::default();
    let mut ordered: Vec<(Edit, usize)> = Vec::new();
    for p in pending {
        let (edit, depth, unsure) = render(text, p, renders)?;
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
    value: &'n Json,
    style: Style,
    depth: usize,
    floor: usize,
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
            entries.push((key, Cow::Borrowed(value)));
            return;
        }
    }
    pending.push(Pending::Add {
        to,
        path,
        front,
        entries: vec![(key, Cow::Borrowed(value))],
        style,
        depth,
        floor,
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
                    add_inside(json.to_mut(), &tokens[path.len() + 1..], value)?;
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

/// The column of the keys or dashes of the block collection that holds what `chain`
/// leads to (0 in a document that is all flow): the lines of a flow collection in it go
/// deeper.
fn floor_of(chain: &[Written<'_>]) -> usize {
    chain
        .iter()
        .rev()
        .find(|w| !w.layout.flow)
        .map_or(0, |w| w.layout.indent as usize)
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

/// Block text already written for an addition: a stream of documents often gets the same
/// additions, one document after another, at the same place in the same style.
#[derive(Debug, Default)]
pub struct Renders {
    written: Vec<(Rendered, String)>,
}

/// What a piece of block text was written from.
#[derive(Debug, PartialEq)]
struct Rendered {
    key: Option<String>,
    value: Json,
    indent: usize,
    style: Style,
    flow_items: bool,
}

impl Renders {
    /// Kept: the few distinct additions of such a stream, at the few places its documents
    /// put them.
    const KEEP: usize = 32;

    fn text(&mut self, entry: &Added<'_>, indent: usize, style: Style, flow_items: bool) -> &str {
        let (key, value) = entry;
        let found = self.written.iter().position(|(r, _)| {
            r.indent == indent && r.style == style && r.flow_items == flow_items && r.key == *key && r.value == **value
        });
        let at = match found {
            Some(at) => at,
            None => {
                let mut out = Out::default();
                match key {
                    Some(key) => write::entries(&mut out, &[(key.clone(), Node::from_json(value))], indent, style),
                    // Among flow items, in their style where it fits a line: a long one
                    // (a sidecar with its whole configuration) is read in block style.
                    None => match flow_items
                        .then(|| one_line(value, false))
                        .filter(|line| fits(indent + 2, line))
                    {
                        Some(line) => {
                            out.push_str(&" ".repeat(indent));
                            out.push_str("- ");
                            out.push_str(&line);
                            out.push('\n');
                        }
                        None => write::item(&mut out, &Node::from_json(value), indent, style),
                    },
                }
                if self.written.len() == Self::KEEP {
                    self.written.remove(0);
                }
                let rendered = Rendered {
                    key: key.clone(),
                    value: value.clone().into_owned(),
                    indent,
                    style,
                    flow_items,
                };
                self.written.push((rendered, out.into_string()));
                self.written.len() - 1
            }
        };
        &self.written[at].1
    }
}

fn block_entries(
    entries: &[Added<'_>],
    indent: usize,
    style: Style,
    flow_items: bool,
    renders: &mut Renders,
) -> String {
    let mut out = String::new();
    for entry in entries {
        out.push_str(renders.text(entry, indent, style, flow_items));
    }
    out
}

/// Entries added to a flow collection, as text inserted at a place in a line: each on
/// that line where it fits, else over lines (see [`wrapped`]) with its closing bracket
/// at its own column when it starts a line (the collection's items are one a line), else
/// a step deeper than that line's indentation or the `floor`, whichever is deeper.
struct FlowLines {
    out: String,
    /// The column the text goes on at, and the indentation of its line.
    column: usize,
    indent: usize,
    floor: usize,
}

impl FlowLines {
    fn at(text: &str, at: usize, floor: usize) -> FlowLines {
        let line = &text[line_start(text, at)..at];
        FlowLines {
            out: String::new(),
            column: line.chars().count(),
            indent: line.len() - line.trim_start_matches(' ').len(),
            floor,
        }
    }

    fn push_str(&mut self, s: &str) {
        self.out.push_str(s);
        match s.rfind('\n') {
            Some(n) => {
                let line = &s[n + 1..];
                self.column = line.chars().count();
                self.indent = line.len() - line.trim_start_matches(' ').len();
            }
            None => self.column += s.chars().count(),
        }
    }

    fn entry(&mut self, (key, value): &Added<'_>, json: bool) {
        let close = match self.column == self.indent {
            true => self.column,
            false => self.indent.max(self.floor) + STEP,
        };
        if let Some(key) = key {
            let mut out = Out::default();
            flow_key(&mut out, key, json);
            out.push_str(": ");
            self.push_str(&out.into_string());
        }
        let mut out = Out::default();
        wrapped(&mut out, value, json, self.column, close);
        self.push_str(&out.into_string());
    }

    fn into_string(self) -> String {
        self.out
    }
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
fn render(text: &str, pending: Pending<'_>, renders: &mut Renders) -> Result<(Edit, usize, bool), NotInText> {
    match pending {
        Pending::Add {
            to,
            front,
            entries,
            style,
            depth,
            floor,
            ..
        } => Ok((
            add_edit(text, to, front, &entries, style, floor, renders)?,
            depth,
            false,
        )),
        Pending::Anew {
            holder,
            index,
            value,
            original,
            style,
            depth,
            floor,
            ..
        } => {
            let Some(entry) = holder.entry(index) else {
                // A key merged in from elsewhere: set here, it takes precedence.
                let Value::Map(entries) = &holder.node.value else {
                    return Err(not_in_text("a list item not written in the text"));
                };
                let key = entries[index].0.clone();
                return Ok((
                    add_edit(
                        text,
                        holder,
                        false,
                        &[(Some(key), Cow::Owned(value))],
                        style,
                        floor,
                        renders,
                    )?,
                    depth,
                    false,
                ));
            };
            let unsure = !matches!(entry.shape, Shape::Alias | Shape::Empty);
            Ok((anew_edit(text, holder, entry, &value, &original, style)?, depth, unsure))
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn add_edit(
    text: &str,
    to: Written<'_>,
    front: bool,
    entries: &[Added<'_>],
    style: Style,
    floor: usize,
    renders: &mut Renders,
) -> Result<Edit, NotInText> {
    let layout = to.layout;
    let map = is_map(to.node);
    let written: Vec<Entry> = layout.entries.iter().flatten().copied().collect();
    if layout.flow {
        let first = written.iter().chain(layout.merge.iter()).min_by_key(|e| e.start);
        let last = written.iter().chain(layout.merge.iter()).max_by_key(|e| e.end);
        // What goes before each entry and after each.
        let (at, before, after) = match (front, first, last) {
            (true, Some(first), _) => (first.start as usize, String::new(), ", "),
            (_, _, Some(last)) => (last.end as usize, flow_separator(text, last), ""),
            (_, _, None) => (layout.start as usize + 1, String::new(), ""),
        };
        let mut lines = FlowLines::at(text, at, floor);
        for (i, entry) in entries.iter().enumerate() {
            match (i, before.is_empty() && after.is_empty()) {
                (0, _) | (_, false) => lines.push_str(&before),
                (_, true) => lines.push_str(", "),
            }
            lines.entry(entry, layout.json);
            lines.push_str(after);
        }
        return Ok(Edit {
            from: at,
            to: at,
            with: lines.into_string(),
        });
    }
    let indent = layout.indent as usize;
    let at = match (front, written.first()) {
        (true, Some(first)) => before_block(text, first.start as usize, indent),
        (true, None) => return Err(not_in_text("an empty block list")),
        (false, _) => after_block(text, layout.end as usize, indent),
    };
    let flow_items = !map && written.last().is_some_and(|e| e.shape == Shape::Flow);
    let lines = block_entries(entries, indent, style, flow_items, renders);
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
            let node = Node::from_json(value);
            let key_indent = holder.layout.indent as usize;
            let mut lines = Out::default();
            // In a block map, a collection goes on the lines after the key's.
            match &node.value {
                Value::Map(entries) if !holder.layout.flow => {
                    write::entries(&mut lines, entries, key_indent + style.step, style);
                }
                Value::Seq(items) if !holder.layout.flow => {
                    for item in items {
                        write::item(&mut lines, item, key_indent + style.list_offset, style);
                    }
                }
                _ => {}
            }
            let lines = lines.into_string();
            match lines.is_empty() {
                false => {
                    let at = line_after(text, colon + 1);
                    Ok(Edit {
                        from: at,
                        to: at,
                        with: lines_at(text, at, lines),
                    })
                }
                true => {
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
            // A string in place of a quoted scalar keeps the quotes the input chose, so
            // that a value set back (`uninject`) is the text it was: double quotes always
            // (the writer's own are single), single ones unless the writer needed them.
            let chosen = |original: &Json| {
                let mut plain = Out::default();
                flow(&mut plain, original, false);
                !plain.into_string().starts_with('\'')
            };
            match (entry.shape, value, text.as_bytes().get(from)) {
                (Shape::Scalar, Json::String(_), Some(b'"')) => out.push_str(&value.to_string()),
                (Shape::Scalar, Json::String(new), Some(b'\''))
                    if chosen(original) && !new.contains(|c: char| c.is_control()) =>
                {
                    out.push('\'');
                    out.push_str(&new.replace('\'', "''"));
                    out.push('\'');
                }
                _ => flow(&mut out, value, json),
            }
            Ok(Edit {
                from,
                to,
                with: out.into_string(),
            })
        }
    }
}
