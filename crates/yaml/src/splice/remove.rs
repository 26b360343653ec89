//! Removals: each `remove` of a patch that undoes additions, as the text of the entry it
//! takes out.

use json_patch::{Patch, PatchOperation};

use super::{
    Edit, Edits, NotInText, Target, Written, child, index_of, is_map, line_after, line_start, not_in_text, resolve,
    tokens,
};
use crate::layout::{Entry, Layout, Shape};
use crate::node::{Node, Value};

/// The edits that make `patch` (`remove`s against the object `root`) in `text`: each
/// entry's own text goes, nothing else. `created` is the order in which the additions
/// being undone created the keys they created (see `take_whole`).
pub fn removals(text: &str, root: &Node, patch: &Patch, created: &[&str]) -> Result<Edits, NotInText> {
    // Per collection, the entries removed (list items by their first index: later
    // operations count without the earlier ones, as JSON Patch applies them in turn).
    let mut taken: Vec<(Written<'_>, Vec<usize>)> = Vec::new();
    // Map entries the patch removes, decided once all are known.
    let mut whole: Vec<(Written<'_>, usize)> = Vec::new();
    for op in &patch.0 {
        let PatchOperation::Remove(remove) = op else {
            return Err(not_in_text(format!("a patch of removals only, found {op:?}")));
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
        take_whole(&mut taken, from, index, &whole, created);
    }
    let mut edits = Edits::default();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (from, gone) in &taken {
        let layout = from.layout;
        let written = layout.entries.iter().flatten().count();
        match layout.merge {
            // A flow map left with only its `<<: *alias`, where the additions merged into
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

/// Whether additions that create keys in the order `created` would create `first`
/// before `then`.
fn created_before(created: &[&str], first: &str, then: &str) -> bool {
    let rank = |key| created.iter().position(|k| *k == key);
    matches!((rank(first), rank(then)), (Some(a), Some(b)) if a < b)
}

/// Takes map entry `index` of `from` out whole, as the patch says (`whole`: all it takes
/// out of maps), but for a collection the input had, which stays, emptied. The additions
/// being undone wrote a collection they created in the style of a block map (block), and
/// after every entry of a flow map, in the order `created`; so a flow collection in a
/// block map was the input's, as is an entry of a flow map that an entry staying follows
/// (or one the additions would have created before it), and a block map holding either.
/// True if the entry stays.
fn take_whole<'n>(
    taken: &mut Vec<(Written<'n>, Vec<usize>)>,
    from: Written<'n>,
    index: usize,
    whole: &[(Written<'n>, usize)],
    created: &[&str],
) -> bool {
    let (Some(entry), value) = (from.entry(index), child(from.node, index)) else {
        return false;
    };
    if let Some(layout) = value.layout() {
        let inner = Written { node: value, layout };
        let written: Vec<usize> = (0..len(value)).filter(|&i| inner.entry(i).is_some()).collect();
        let key = |i: usize| match &from.node.value {
            Value::Map(entries) => entries[i].0.as_str(),
            _ => "",
        };
        let followed = from.layout.flow
            && in_text_order(from.layout).iter().any(|(i, e)| {
                let taken = |i: usize| whole.iter().any(|(m, w)| m.same(&from) && *w == i);
                e.start > entry.start
                    && match i {
                        Some(i) => !taken(*i) || created_before(created, key(*i), key(index)),
                        None => true,
                    }
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
                    stays |= take_whole(taken, inner, i, &all, created);
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
pub(super) fn flow_ranges(of: Written<'_>, gone: &[usize]) -> Result<Vec<(usize, usize)>, NotInText> {
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
pub(super) fn block_range(text: &str, of: Written<'_>, index: usize) -> Result<(usize, usize), NotInText> {
    let entry = of
        .entry(index)
        .ok_or_else(|| not_in_text("an entry not written in the text"))?;
    let (start, end) = (entry.start as usize, entry.end as usize);
    let line = line_start(text, start);
    if !text.as_bytes()[line..start].iter().all(|&b| b == b' ') {
        // The first key of a list item, on its dash's line: up to the next key, which
        // takes its place after the dash.
        let next =
            next_key(text, end, of.layout.indent as usize).ok_or_else(|| not_in_text("the only key of a list item"))?;
        return Ok((start, next));
    }
    Ok((line, line_after(text, end)))
}

/// Where the next key of a block map whose keys are at column `indent` starts, after its
/// entry ending at `end`; `None` when the map ends first.
fn next_key(text: &str, end: usize, indent: usize) -> Option<usize> {
    let mut at = line_after(text, end);
    while at < text.len() {
        let line = &text[at..text[at..].find('\n').map_or(text.len(), |n| at + n)];
        let content = line.trim_start_matches(' ');
        let column = line.len() - content.len();
        match content.trim_end_matches('\r') {
            "" => {}
            rest if rest.starts_with('#') => {}
            _ if column == indent => return Some(at + indent),
            _ if column < indent => return None,
            _ => {}
        }
        at += line.len() + 1;
    }
    None
}

/// A range of whole lines up to the end of a text without a final line break takes the
/// break before it, so that the text still ends without one.
pub(super) fn without_last_break(text: &str, (start, end): (usize, usize)) -> (usize, usize) {
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
