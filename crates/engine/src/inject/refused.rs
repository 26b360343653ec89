//! An override a Pod asks for that its template refuses, and the words that say why:
//! the webhook's deny and the compiled policies' (which write the same words with holes).

use std::fmt;

use serde_json::Value;

use crate::template::OutOfBounds;
use crate::template::overrides::quote_all;

/// An override the Pod asks for that its template refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub name: String,
    /// The value as the Pod wrote it (the JSON text of a value that is not a string).
    pub value: String,
    pub template: String,
    pub reason: Reason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The template declares no override of this name; these are the ones it declares.
    Undeclared {
        declared: Vec<String>,
    },
    /// Annotation values are strings; this one was not.
    NotAString,
    OutOfBounds(Box<Outside>),
}

/// A value outside an override's bound, and where the override lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outside {
    pub why: OutOfBounds,
    /// `resources.requests.cpu`, `env LOG_LEVEL`, ...
    pub target: String,
    pub container: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Refused {
            name,
            value,
            template,
            reason,
        } = self;
        let template = Value::from(template.as_str());
        match reason {
            Reason::NotAString => write!(f, "override.{name}: {value} ")?,
            _ => write!(f, "override.{name}: {} ", quoted(value))?,
        }
        match reason {
            Reason::Undeclared { declared } if declared.is_empty() => {
                write!(f, "is not an override of template {template}, which declares none")
            }
            Reason::Undeclared { declared } => write!(
                f,
                "is not an override of template {template}, which declares {}",
                quote_all(declared)
            ),
            Reason::NotAString => write!(f, "is not a string: quote the annotation's value"),
            Reason::OutOfBounds(outside) => match &outside.why {
                OutOfBounds::AboveMax(max) => write!(f, "exceeds max {} of template {template}", quoted(max.as_str())),
                OutOfBounds::BelowMin(min) => write!(f, "is below min {} of template {template}", quoted(min.as_str())),
                OutOfBounds::NotOneOf(values) => {
                    write!(f, "is not one of {} of template {template}", quote_all(values))
                }
                OutOfBounds::NotAQuantity(message) => write!(
                    f,
                    "is not a quantity, which {} of container `{}` in template {template} takes: {message}",
                    outside.target, outside.container
                ),
            },
        }
    }
}

fn quoted(text: &str) -> Value {
    Value::from(text)
}
