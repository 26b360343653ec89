//! Scalars and map keys as go-yaml v2 reads them and sigs.k8s.io/yaml turns them into
//! JSON: plain scalars resolved by YAML 1.1 rules, core tags honoured, keys made strings.

use granit_parser::{ScalarStyle, Span, Tag};

use super::builder::{Builder, KeyName};
use super::document::{ReadError, what};
use crate::node::Value;
use crate::yaml11::{Resolved, go_format_float_key, resolve_plain};

const CORE: &str = "tag:yaml.org,2002:";

impl Builder<'_> {
    fn tag_name(tag: Option<&Tag>) -> Option<String> {
        let tag = tag?;
        Some(match tag.suffix_in_namespace(CORE) {
            Some(core) => format!("!!{core}"),
            None => format!("{}{}", tag.handle(), tag.suffix()),
        })
    }

    /// A scalar's value: go-yaml resolves plain scalars and honours core tags; quoted
    /// and block scalars, and scalars with other tags, are strings.
    pub(super) fn scalar_value(
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
    pub(super) fn key_name(
        &self,
        text: &str,
        style: ScalarStyle,
        tag: Option<&Tag>,
        span: &Span,
    ) -> Result<KeyName, ReadError> {
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
