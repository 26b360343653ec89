//! `Node`s back to text. YAML: block style with kubectl's layout (two-space maps, list
//! dashes at their key's indentation), comments where they were, and every scalar
//! written so that a YAML 1.1 reader (kubectl) and a YAML 1.2 reader both read back the
//! same value: a string that could resolve to anything else is quoted; multi-line
//! strings become literal blocks when that is exact. JSON: pretty-printed, key order kept.

use std::fmt::Write as _;

use super::node::{Meta, Node, Value};
use super::yaml11::{needs_escape, plain_is_safe};

/// Where the writer's text goes: a `String` (tests, small pieces) or, through a
/// buffer flushed every 64 KB, an `io::Write`, so that a large document is never
/// held twice in memory. The first write error is kept and returned by `finish`.
#[derive(Default)]
pub struct Out<'a> {
    buf: String,
    sink: Option<&'a mut dyn std::io::Write>,
    error: Option<std::io::Error>,
}

const FLUSH_AT: usize = 64 * 1024;

impl<'a> Out<'a> {
    pub fn to(sink: &'a mut dyn std::io::Write) -> Out<'a> {
        Out {
            // Most documents are a few KB: a small start, grown when needed.
            buf: String::with_capacity(8 * 1024),
            sink: Some(sink),
            error: None,
        }
    }

    pub fn push_str(&mut self, s: &str) {
        self.buf.push_str(s);
        if self.buf.len() >= FLUSH_AT {
            self.flush_buffer();
        }
    }

    pub fn push(&mut self, c: char) {
        self.buf.push(c);
    }

    fn flush_buffer(&mut self) {
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        if self.error.is_none()
            && let Err(e) = sink.write_all(self.buf.as_bytes())
        {
            self.error = Some(e);
        }
        self.buf.clear();
    }

    /// Writes what is buffered; the first write error, if any.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.flush_buffer();
        self.error.map_or(Ok(()), Err)
    }

    /// The text written, when writing to a `String`.
    pub fn into_string(self) -> String {
        self.buf
    }
}

impl std::fmt::Write for Out<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

/// How nested block collections are indented: kubectl's way, or the input's where
/// additions join it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// A map under a key: this much deeper than the key.
    pub step: usize,
    /// A list under a key: its dashes this much deeper than the key (kubectl: none).
    pub list_offset: usize,
}

impl Style {
    pub const KUBECTL: Style = Style {
        step: 2,
        list_offset: 0,
    };
}

/// A value JSON cannot hold (NaN, an infinity), with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{path}` is {found}, which JSON cannot represent (kubectl would refuse it too)")]
pub struct NotJson {
    pub path: String,
    pub found: String,
}

/// Appends `node` as a YAML document (no `---`), preceded by `leading` comments and
/// followed by `trailing` ones.
pub fn yaml_document(out: &mut Out<'_>, node: &Node, trailing: &[String]) {
    match &node.value {
        Value::Map(entries) if !entries.is_empty() => {
            write_comments(out, node.meta.as_deref(), 0);
            map_entries(out, entries, 0, false, Style::KUBECTL);
        }
        Value::Seq(items) if !items.is_empty() => {
            write_comments(out, node.meta.as_deref(), 0);
            seq_items(out, items, 0, Style::KUBECTL);
        }
        _ => {
            write_comments(out, node.meta.as_deref(), 0);
            scalar_or_empty(out, node, 0);
        }
    }
    comment_lines(out, trailing, 0);
}

/// `key: value` lines at `indent`, for a caller writing a map piece by piece.
pub fn entries(out: &mut Out<'_>, entries: &[(String, Node)], indent: usize, style: Style) {
    map_entries(out, entries, indent, false, style);
}

/// The line that opens a block list under `key` (its items follow, from `item`).
pub fn list_key(out: &mut Out<'_>, key: &str, meta: Option<&Meta>, indent: usize) {
    write_comments(out, meta, indent);
    push_indent(out, indent);
    scalar_text(out, key);
    out.push(':');
    right_comment(out, meta);
    out.push('\n');
}

/// One item of a block list whose dashes are at `indent`.
pub fn item(out: &mut Out<'_>, item: &Node, indent: usize, style: Style) {
    seq_items(out, std::slice::from_ref(item), indent, style);
}

/// Own-line comments, at `indent`.
pub fn comment_lines(out: &mut Out<'_>, comments: &[String], indent: usize) {
    for comment in comments {
        push_indent(out, indent);
        out.push('#');
        // The text is what followed `#`; a line break inside cannot happen.
        out.push_str(comment);
        out.push('\n');
    }
}

fn write_comments(out: &mut Out<'_>, meta: Option<&Meta>, indent: usize) {
    if let Some(meta) = meta {
        comment_lines(out, &meta.before, indent);
    }
}

fn right_comment(out: &mut Out<'_>, meta: Option<&Meta>) {
    if let Some(right) = meta.and_then(|m| m.right.as_deref()) {
        out.push_str(" #");
        out.push_str(right);
    }
}

fn push_indent(out: &mut Out<'_>, indent: usize) {
    const SPACES: &str = "                                ";
    let mut left = indent;
    while left > 0 {
        let n = left.min(SPACES.len());
        out.push_str(&SPACES[..n]);
        left -= n;
    }
}

fn is_block_collection(node: &Node) -> bool {
    match &node.value {
        Value::Map(entries) => !entries.is_empty(),
        Value::Seq(items) => !items.is_empty(),
        _ => false,
    }
}

/// Longest key written as `key:`; YAML allows 1024 characters, quotes included.
const MAX_IMPLICIT_KEY: usize = 1000;

/// `key: value` lines at `indent`. With `inline_first`, the first key continues a line
/// already begun (after `- `).
fn map_entries(out: &mut Out<'_>, entries: &[(String, Node)], indent: usize, inline_first: bool, style: Style) {
    for (i, (key, value)) in entries.iter().enumerate() {
        if !(inline_first && i == 0) {
            write_comments(out, value.meta.as_deref(), indent);
            push_indent(out, indent);
        }
        if key.chars().count() > MAX_IMPLICIT_KEY {
            // YAML caps implicit keys at 1024 characters; longer ones need `? key`.
            out.push_str("? ");
            scalar_text(out, key);
            out.push('\n');
            push_indent(out, indent);
        } else {
            scalar_text(out, key);
        }
        out.push(':');
        match &value.value {
            Value::Map(map) if !map.is_empty() => {
                right_comment(out, value.meta.as_deref());
                out.push('\n');
                map_entries(out, map, indent + style.step, false, style);
            }
            // kubectl's layout: a list's dashes at its key's indentation.
            Value::Seq(items) if !items.is_empty() => {
                right_comment(out, value.meta.as_deref());
                out.push('\n');
                seq_items(out, items, indent + style.list_offset, style);
            }
            _ => {
                out.push(' ');
                scalar_or_empty(out, value, indent);
            }
        }
    }
}

fn seq_items(out: &mut Out<'_>, items: &[Node], indent: usize, style: Style) {
    for item in items {
        write_comments(out, item.meta.as_deref(), indent);
        match &item.value {
            Value::Map(entries) if !entries.is_empty() => {
                // Comments above the first key go above the dash.
                if let Some(first) = entries[0].1.meta.as_deref() {
                    comment_lines(out, &first.before, indent);
                }
                push_indent(out, indent);
                out.push('-');
                if item.meta.as_ref().is_some_and(|m| m.right.is_some()) {
                    right_comment(out, item.meta.as_deref());
                    out.push('\n');
                    let (first_key, first_value) = &entries[0];
                    let first = [(first_key.clone(), without_before(first_value))];
                    map_entries(out, &first, indent + 2, false, style);
                    map_entries(out, &entries[1..], indent + 2, false, style);
                } else {
                    out.push(' ');
                    map_entries(out, &entries[..1], indent + 2, true, style);
                    map_entries(out, &entries[1..], indent + 2, false, style);
                }
            }
            Value::Seq(inner) if !inner.is_empty() => {
                push_indent(out, indent);
                out.push('-');
                right_comment(out, item.meta.as_deref());
                out.push('\n');
                seq_items(out, inner, indent + 2, style);
            }
            _ => {
                push_indent(out, indent);
                out.push_str("- ");
                scalar_or_empty(out, item, indent);
            }
        }
    }
}

/// The first entry of a list item's map, its `before` comments already written above
/// the dash.
fn without_before(node: &Node) -> Node {
    let mut copy = node.clone();
    if let Some(meta) = copy.meta.as_mut() {
        meta.before.clear();
    }
    copy
}

/// A scalar, `{}` or `[]`, its same-line comment and the line break; literal blocks
/// continue on the following lines, indented under `indent`.
fn scalar_or_empty(out: &mut Out<'_>, node: &Node, indent: usize) {
    debug_assert!(!is_block_collection(node));
    if json_and_yaml_agree(out, &node.value) {
        right_comment(out, node.meta.as_deref());
        out.push('\n');
        return;
    }
    match &node.value {
        Value::Float(f) => float(out, *f),
        Value::Str(s) => {
            if literal_block(out, s, indent, node.meta.as_deref()) {
                return;
            }
            scalar_text(out, s);
        }
        Value::Map(_) => out.push_str("{}"),
        Value::Seq(_) => out.push_str("[]"),
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::Uint(_) => {}
    }
    right_comment(out, node.meta.as_deref());
    out.push('\n');
}

/// Null, booleans and integers, which JSON and YAML spell alike; false for the rest.
fn json_and_yaml_agree(out: &mut Out<'_>, value: &Value) -> bool {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Uint(u) => {
            let _ = write!(out, "{u}");
        }
        _ => return false,
    }
    true
}

/// Floats in a form both YAML 1.1 and 1.2 read as this float: Rust's shortest
/// round-trip digits always carry a `.` or an exponent (`1000.0`, `1e21`).
fn float(out: &mut Out<'_>, f: f64) {
    if f.is_nan() {
        out.push_str(".nan");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { ".inf" } else { "-.inf" });
    } else {
        let _ = write!(out, "{f:?}");
    }
}

/// A string on one line: plain when that is unambiguous, else double-quoted.
fn scalar_text(out: &mut Out<'_>, s: &str) {
    quoted_unless(out, s, plain_is_safe(s));
}

/// A string inside a flow collection (`[...]`, `{...}`): plain only without any flow
/// indicator, `:` or `#` (readers differ on `a:b` there), else quoted as on one line.
pub fn flow_scalar(out: &mut Out<'_>, s: &str) {
    let plain = plain_is_safe(s) && !s.contains([',', '[', ']', '{', '}', ':', '#']);
    quoted_unless(out, s, plain);
}

/// A float as YAML writes it (both YAML 1.1 and 1.2 read it back as this float).
pub fn yaml_float(out: &mut Out<'_>, f: f64) {
    float(out, f);
}

fn quoted_unless(out: &mut Out<'_>, s: &str, plain: bool) {
    if plain {
        out.push_str(s);
        return;
    }
    // Single quotes escape nothing but `'` itself: the readable choice for one line of
    // printable text (JSON in an annotation, say).
    let single_line = !s.starts_with(' ') && !s.ends_with(' ');
    if single_line && !s.is_empty() && !s.chars().any(|c| c == '\n' || c == '\t' || needs_escape(c)) {
        out.push('\'');
        for (i, part) in s.split('\'').enumerate() {
            if i > 0 {
                out.push_str("''");
            }
            out.push_str(part);
        }
        out.push('\'');
        return;
    }
    out.push('"');
    double_quoted(out, s);
    out.push('"');
}

/// `s` as the inside of a double-quoted scalar: escaped where it must be.
pub fn double_quoted(out: &mut Out<'_>, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// Writes `s` as a literal block (`|`) when it has several lines and a literal block
/// holds it exactly; returns false (writing nothing) otherwise.
fn literal_block(out: &mut Out<'_>, s: &str, indent: usize, meta: Option<&Meta>) -> bool {
    if !s.contains('\n') || s.chars().any(needs_escape) {
        return false;
    }
    let body = s.trim_end_matches('\n');
    // A last line of blanks only would read as indentation, not content.
    if body.is_empty()
        || body
            .rsplit('\n')
            .next()
            .is_some_and(|l| l.trim_matches([' ', '\t']).is_empty())
    {
        return false;
    }
    let trailing_breaks = s.len() - body.len();
    let chomping = match trailing_breaks {
        0 => "-",
        1 => "",
        _ => "+",
    };
    let content_indent = indent + 2;
    out.push('|');
    // Leading spaces (or leading empty lines) would be taken for the indentation.
    if s.starts_with([' ', '\n']) {
        let _ = write!(out, "2");
    }
    out.push_str(chomping);
    right_comment(out, meta);
    out.push('\n');
    for line in s[..body.len()].split('\n') {
        if !line.is_empty() {
            push_indent(out, content_indent);
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing_breaks {
        out.push('\n');
    }
    true
}

/// Appends `node` as pretty-printed JSON (two-space indentation, as kubectl prints),
/// its first line already indented by the caller. Every caller refuses a value JSON
/// cannot hold (`first_not_json`) before writing any of its document, so that nothing
/// of a refused document is written; one written anyway would come out `null`, as
/// `Node::to_json` makes it.
pub fn json(out: &mut Out<'_>, node: &Node, indent: usize) {
    if json_and_yaml_agree(out, &node.value) {
        return;
    }
    match &node.value {
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::Uint(_) => {}
        Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => {
                let _ = write!(out, "{n}");
            }
            None => out.push_str("null"),
        },
        Value::Str(s) => json_string(out, s),
        Value::Seq(items) if items.is_empty() => out.push_str("[]"),
        Value::Map(entries) if entries.is_empty() => out.push_str("{}"),
        Value::Seq(items) => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                push_indent(out, indent + 2);
                json(out, item, indent + 2);
                out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            push_indent(out, indent);
            out.push(']');
        }
        Value::Map(entries) => {
            out.push_str("{\n");
            for (i, (key, value)) in entries.iter().enumerate() {
                push_indent(out, indent + 2);
                json_field(out, key, value, indent + 2);
                out.push_str(if i + 1 < entries.len() { ",\n" } else { "\n" });
            }
            push_indent(out, indent);
            out.push('}');
        }
    }
}

/// The first value JSON cannot hold (NaN, an infinity), if any.
pub fn first_not_json(node: &Node) -> Option<NotJson> {
    fn walk(node: &Node, path: &mut String) -> Option<NotJson> {
        match &node.value {
            Value::Float(f) if !f.is_finite() => Some(NotJson {
                path: if path.is_empty() {
                    String::from("/")
                } else {
                    path.clone()
                },
                found: format!("{f}"),
            }),
            Value::Seq(items) => items.iter().enumerate().find_map(|(i, item)| {
                let len = path.len();
                let _ = write!(path, "/{i}");
                let found = walk(item, path);
                path.truncate(len);
                found
            }),
            Value::Map(entries) => entries.iter().find_map(|(key, value)| {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                let found = walk(value, path);
                path.truncate(len);
                found
            }),
            _ => None,
        }
    }
    walk(node, &mut String::new())
}

/// `"key": value` of a JSON object whose fields are at `indent` (see `json`).
pub fn json_field(out: &mut Out<'_>, key: &str, value: &Node, indent: usize) {
    json_string(out, key);
    out.push_str(": ");
    json(out, value, indent);
}

fn json_string(out: &mut Out<'_>, s: &str) {
    // serde_json's escaping of a &str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::read_documents;

    fn round_trip(yaml: &str) -> (String, serde_json::Value) {
        let docs = read_documents(yaml, 1).unwrap();
        let root = docs[0].root.as_ref().unwrap();
        let mut out = Out::default();
        yaml_document(&mut out, root, &docs[0].trailing);
        let out = out.into_string();
        let again = read_documents(&out, 1).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert_eq!(again[0].root.as_ref().unwrap().to_json(), root.to_json(), "{out}");
        (out, root.to_json())
    }

    #[test]
    fn ambiguous_strings_are_quoted_and_numbers_stay_numbers() {
        let (out, _) = round_trip(
            "env:\n- {name: A, value: \"yes\"}\n- {name: B, value: \"0644\"}\n- {name: C, value: \"~\"}\nmode: 0644\nratio: 1e3\nhex: 0x1F\ns: \"1e3\"\n",
        );
        assert!(out.contains("value: 'yes'"), "{out}");
        assert!(out.contains("value: '0644'"), "{out}");
        assert!(out.contains("mode: 420"), "{out}");
        assert!(out.contains("ratio: 1000.0"), "{out}");
        assert!(out.contains("hex: 31"), "{out}");
        assert!(out.contains("s: '1e3'"), "{out}");
    }

    #[test]
    fn layout_is_kubectls_and_comments_stay() {
        let yaml = "# top\napiVersion: v1\nkind: Pod # the kind\nspec:\n  # the containers\n  containers:\n  - name: a\n    args: [\"--x\", \"1\"]\n  volumes: []\n# end\n";
        let (out, _) = round_trip(yaml);
        assert_eq!(
            out,
            "# top\napiVersion: v1\nkind: Pod # the kind\nspec:\n  # the containers\n  containers:\n  - name: a\n    args:\n    - --x\n    - '1'\n  volumes: []\n# end\n"
        );
    }

    #[test]
    fn multi_line_strings_become_exact_literal_blocks() {
        let (out, _) = round_trip(
            "a: |\n  one\n  two\nb: |-\n  x\n   y\nc: |+\n  keep\n\nd: \"  lead\\nx\\n\"\ne: \"t\\ty\\n\"\nf: \"x\\n  \"\n",
        );
        assert!(out.contains("a: |\n  one\n  two\n"), "{out}");
        assert!(out.contains("b: |-\n  x\n   y\n"), "{out}");
        assert!(out.contains("d: |2\n"), "{out}");
    }

    #[test]
    fn very_long_keys_use_the_explicit_form() {
        let key = "k".repeat(2000);
        let inner = Value::Map(vec![
            (key, Node::from(Value::Int(1))),
            ("b".into(), Node::from(Value::Int(2))),
        ]);
        let node = Node::from(Value::Map(vec![("a".into(), Node::from(inner))]));
        let mut out = Out::default();
        yaml_document(&mut out, &node, &[]);
        let out = out.into_string();
        assert!(out.contains("  ? kkk"), "{out}");
        let back = read_documents(&out, 1).unwrap();
        assert_eq!(back[0].root.as_ref().unwrap().to_json(), node.to_json());
    }

    #[test]
    fn nested_lists_and_maps_in_lists() {
        round_trip("a:\n- - 1\n  - 2\n- []\n- {}\n- k: v\n  l:\n  - m\n- # note\n  k: v\n");
    }

    #[test]
    fn json_keeps_order_and_refuses_nan() {
        let docs = read_documents("b: 1\na: [x, 1.5]\n", 1).unwrap();
        let mut out = Out::default();
        json(&mut out, docs[0].root.as_ref().unwrap(), 0);
        assert_eq!(
            out.into_string(),
            "{\n  \"b\": 1,\n  \"a\": [\n    \"x\",\n    1.5\n  ]\n}"
        );
        let docs = read_documents("a:\n- 1\n- {b~/c: .nan}\n", 1).unwrap();
        let err = first_not_json(docs[0].root.as_ref().unwrap()).unwrap();
        assert_eq!(err.path, "/a/1/b~0~1c");
        assert_eq!(err.found, "NaN");
    }

    mod properties {
        use super::*;
        use crate::yaml11::TRICKY_STRINGS;
        use proptest::prelude::*;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[ -~]{0,10}",
                "[a-z0-9 :#'\"\\-]{0,8}(\n[ a-z#\t]{0,6}){0,3}\n{0,3}",
                "[\u{80}-\u{a0}\u{2028}\u{feff}é✓\r\t\u{7}]{1,4}",
                prop::sample::select(TRICKY_STRINGS).prop_map(String::from),
            ]
        }

        fn leaf() -> impl Strategy<Value = Node> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::Int),
                ((i64::MAX as u64 + 1)..=u64::MAX).prop_map(Value::Uint),
                any::<f64>()
                    .prop_filter("finite or not, JSON aside", |f| !f.is_nan())
                    .prop_map(Value::Float),
                text().prop_map(Value::Str),
            ]
            .prop_map(Node::from)
        }

        fn tree() -> impl Strategy<Value = Node> {
            leaf().prop_recursive(4, 48, 5, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5).prop_map(|items| Node::from(Value::Seq(items))),
                    prop::collection::vec((text(), inner), 0..5).prop_map(|entries| {
                        let mut seen = std::collections::HashSet::new();
                        let unique = entries.into_iter().filter(|(k, _)| seen.insert(k.clone())).collect();
                        Node::from(Value::Map(unique))
                    }),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Whatever the values, the YAML written reads back (YAML 1.1, as kubectl
            /// reads) to exactly the same values.
            #[test]
            fn written_yaml_reads_back_the_same(node in tree()) {
                let mut out = Out::default();
                yaml_document(&mut out, &node, &[]);
                let out = out.into_string();
                let docs = read_documents(&out, 1).map_err(|e| TestCaseError::fail(format!("{e}\n{out}")))?;
                prop_assert_eq!(docs.len(), 1, "{}", out);
                let back = docs[0].root.as_ref().map_or(serde_json::Value::Null, Node::to_json);
                prop_assert_eq!(back, node.to_json(), "{}", out);
            }
        }
    }
}
