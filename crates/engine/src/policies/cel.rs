//! CEL text from Rust values: literals the API server's CEL reads back as the same
//! value, and the few expression shapes every policy repeats. Pure string building.

use serde_json::Value;

/// Keywords CEL reserves; a schema property of that name is reached as `__name__`.
const RESERVED: &[&str] = &[
    "as",
    "break",
    "const",
    "continue",
    "else",
    "false",
    "for",
    "function",
    "if",
    "import",
    "in",
    "let",
    "loop",
    "namespace",
    "null",
    "package",
    "return",
    "true",
    "var",
    "void",
    "while",
];

/// A CEL string literal holding exactly `text`.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A CEL literal of a JSON value. Every element and member is wrapped in `dyn(...)`: the
/// API server's CEL refuses a list or map literal whose entries differ in type.
pub fn value(json: &Value) -> String {
    match json {
        Value::Null => String::from("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| format!("dyn({})", value(v))).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(members) => {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}: dyn({})", string(k), value(v)))
                .collect();
            format!("{{{}}}", members.join(", "))
        }
    }
}

/// A CEL list literal of strings.
pub fn strings<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(string).collect();
    format!("[{}]", items.join(", "))
}

/// A CEL string expression built of pieces: text known when compiling, and expressions.
/// Adjacent texts are written as one literal, so the API server joins only what varies.
#[derive(Debug, Default)]
pub struct Concat {
    pieces: Vec<(bool, String)>,
}

impl Concat {
    pub fn text(mut self, text: &str) -> Concat {
        match self.pieces.last_mut() {
            Some((true, last)) => last.push_str(text),
            _ => self.pieces.push((true, text.to_string())),
        }
        self
    }

    pub fn expression(mut self, expression: String) -> Concat {
        self.pieces.push((false, expression));
        self
    }

    pub fn build(&self) -> String {
        if self.pieces.is_empty() {
            return string("");
        }
        let pieces: Vec<String> = self
            .pieces
            .iter()
            .map(|(text, piece)| if *text { string(piece) } else { format!("({piece})") })
            .collect();
        pieces.join(" + ")
    }
}

/// The JSON text of a string (what serde_json writes), as a CEL string literal: for
/// pieces of JSON assembled in CEL from values known when compiling.
pub fn json_string(text: &str) -> String {
    string(&Value::from(text).to_string())
}

/// `base.name` for a property `name` (escaped as the API server's CEL names it), or
/// `base["name"]` for a map key that is no identifier.
pub fn field(base: &str, name: &str) -> String {
    match property(name) {
        Some(property) => format!("{base}.{property}"),
        None => format!("{base}[{}]", string(name)),
    }
}

/// `has(base.name)`, or `"name" in base` for a map key that is no identifier.
pub fn has(base: &str, name: &str) -> String {
    match property(name) {
        Some(property) => format!("has({base}.{property})"),
        None => format!("{} in {base}", string(name)),
    }
}

/// A schema property as CEL selects it: identifiers as they are, CEL keywords as
/// `__keyword__`; `None` for a name that is no identifier (a map key such as `a.b`).
fn property(name: &str) -> Option<String> {
    let mut chars = name.chars();
    let first = chars.next()?;
    let identifier =
        (first.is_ascii_alphabetic() || first == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier || name.contains("__") {
        return None;
    }
    Some(if RESERVED.contains(&name) {
        format!("__{name}__")
    } else {
        name.to_string()
    })
}

/// A stand-in for a value known only when the policy runs, put into a message the
/// webhook's own error type writes, so that [`words`] can cut the message around it.
pub fn hole(n: u8) -> String {
    // Printable, so that JSON and Rust's debug quoting leave it as it is.
    format!("⟦{n}⟧")
}

/// CEL building `text` (a message written with [`hole`]s) with each hole replaced by
/// its expression: the words stay the webhook's, only the values are the Pod's.
pub fn words(text: &str, holes: &[(&str, &str)]) -> String {
    let mut parts = Vec::new();
    let mut rest = text;
    loop {
        let next = holes
            .iter()
            .filter_map(|(hole, expr)| rest.find(hole).map(|at| (at, hole.len(), *expr)))
            .min_by_key(|(at, _, _)| *at);
        let Some((at, len, expr)) = next else { break };
        if at > 0 {
            parts.push(string(&rest[..at]));
        }
        parts.push(format!("({expr})"));
        rest = &rest[at + len..];
    }
    if !rest.is_empty() || parts.is_empty() {
        parts.push(string(rest));
    }
    format!("({})", parts.join(" + "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_escaped_for_cel() {
        assert_eq!(string("plain"), r#""plain""#);
        assert_eq!(string("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(string("\u{7}"), r#""\u0007""#);
        assert_eq!(string("ünï"), "\"ünï\"");
    }

    #[test]
    fn every_member_is_dyn() {
        let literal = value(&json!({"name": "x", "ports": [{"containerPort": 80}], "tty": true}));
        assert_eq!(
            literal,
            r#"{"name": dyn("x"), "ports": dyn([dyn({"containerPort": dyn(80)})]), "tty": dyn(true)}"#
        );
        assert_eq!(value(&json!([])), "[]");
        assert_eq!(value(&json!({})), "{}");
    }

    #[test]
    fn properties_and_map_keys_are_told_apart() {
        assert_eq!(field("v", "configMap"), "v.configMap");
        assert_eq!(field("v", "namespace"), "v.__namespace__");
        assert_eq!(field("m", "a.b/c"), r#"m["a.b/c"]"#);
        assert_eq!(has("v", "configMap"), "has(v.configMap)");
        assert_eq!(has("m", "a-b"), r#""a-b" in m"#);
    }

    #[test]
    fn words_keep_the_text_and_fill_the_holes() {
        let (a, b) = (hole(0), hole(1));
        let text = format!("volume `{a}` of `{b}` and `{a}`");
        assert_eq!(
            words(&text, &[(&a, "x.name"), (&b, "t")]),
            r#"("volume `" + (x.name) + "` of `" + (t) + "` and `" + (x.name) + "`")"#
        );
        assert_eq!(words("fixed", &[]), r#"("fixed")"#);
    }

    #[test]
    fn json_strings_are_serde_json_text() {
        assert_eq!(json_string("a\"b"), r#""\"a\\\"b\"""#);
    }
}
