//! Values written in flow style, on one line: what a flow collection is extended with,
//! and what takes the place of a value written anew.

use serde_json::Value as Json;

use crate::write::{self, Out};

/// The width an added entry is written in flow style within, as a line of its own: what
/// an editor shows and a linter (yamllint's `line-length`) allows by default. Longer ones
/// are written over lines.
pub(super) const WIDTH: usize = 80;

/// Whether `line`, starting at `column`, ends within [`WIDTH`].
pub(super) fn fits(column: usize, line: &str) -> bool {
    column + line.chars().count() <= WIDTH
}

/// How much deeper than its closing bracket a collection written over lines puts its
/// entries.
pub(super) const STEP: usize = 2;

/// `value` in flow style starting at `column`: on one line where that fits [`WIDTH`],
/// else a collection's entries one a line, [`STEP`] deeper than its closing bracket at
/// `close`, and a string of several lines over as many (see [`quoted_lines`]). A long
/// scalar of one line stays one line: there is nowhere to break it.
pub(super) fn wrapped(out: &mut Out<'_>, value: &Json, json: bool, column: usize, close: usize) {
    let line = one_line(value, json);
    if fits(column, &line) {
        out.push_str(&line);
        return;
    }
    let inner = close + STEP;
    let (open, end, entries): (char, char, Vec<(Option<&String>, &Json)>) = match value {
        Json::Object(map) if !map.is_empty() => ('{', '}', map.iter().map(|(k, v)| (Some(k), v)).collect()),
        Json::Array(items) if !items.is_empty() => ('[', ']', items.iter().map(|v| (None, v)).collect()),
        Json::String(s) if !json && s.trim_end_matches('\n').contains('\n') => {
            quoted_lines(out, s, column + 1);
            return;
        }
        _ => {
            out.push_str(&line);
            return;
        }
    };
    out.push(open);
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('\n');
        out.push_str(&" ".repeat(inner));
        let mut column = inner;
        if let Some(key) = key {
            let mut written = Out::default();
            flow_key(&mut written, key, json);
            let written = written.into_string();
            column += written.chars().count() + ": ".len();
            out.push_str(&written);
            out.push_str(": ");
        }
        wrapped(out, value, json, column, inner);
    }
    out.push('\n');
    out.push_str(&" ".repeat(close));
    out.push(end);
}

/// A string of several lines, double-quoted over as many lines: each but the last ends
/// in an escaped line break, which the string does not hold, and the next goes on at
/// `column` (its first space escaped: a line's leading blanks are not the string's).
fn quoted_lines(out: &mut Out<'_>, s: &str, column: usize) {
    out.push('"');
    for (i, line) in s.split_inclusive('\n').enumerate() {
        if i > 0 {
            out.push_str("\\\n");
            out.push_str(&" ".repeat(column));
            if line.starts_with(' ') {
                out.push('\\');
            }
        }
        write::double_quoted(out, line);
    }
    out.push('"');
}

/// `value` in flow style on one line (see [`flow`]).
pub(super) fn one_line(value: &Json, json: bool) -> String {
    let mut out = Out::default();
    flow(&mut out, value, json);
    out.into_string()
}

/// A key in a flow map: as JSON in a JSON collection.
pub(super) fn flow_key(out: &mut Out<'_>, key: &str, json: bool) {
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
