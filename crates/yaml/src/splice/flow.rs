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
