//! The walk over one template's values: where it is (the path), and what it refused so
//! far; each kind of value's rules (`container`, `env`, `volumes`, ...) take a `Walk`.

use std::fmt;

use super::version::KubeVersion;
use crate::template::yaml_locate::Segment;

/// One value the API server would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError {
    /// The field, as a user writes it: `containers[0].ports[1].protocol`.
    pub path: String,
    /// The template's line of the field (or of the nearest enclosing one written).
    pub line: Option<usize>,
    pub expected: String,
    pub found: String,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field `{}`", self.path)?;
        if let Some(line) = self.line {
            write!(f, " at line {line}")?;
        }
        write!(f, ": expected {}, found {}", self.expected, self.found)
    }
}

/// A text as an error quotes it (as JSON, so control characters stay visible).
pub(crate) fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// The walk over one template: where it is, and what it refused so far (path, expected,
/// found).
pub(crate) struct Walk {
    pub version: KubeVersion,
    path: Vec<Segment>,
    found: Vec<(Vec<Segment>, String, String)>,
}

impl Walk {
    pub fn new(version: KubeVersion) -> Walk {
        Walk {
            version,
            path: Vec::new(),
            found: Vec::new(),
        }
    }

    /// What was refused: each value's path, what was expected and what was found.
    pub fn into_found(self) -> Vec<(Vec<Segment>, String, String)> {
        self.found
    }

    /// Runs `f` one field deeper.
    pub fn key<R>(&mut self, key: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(Segment::Key(key.to_string()));
        let out = f(self);
        self.path.pop();
        out
    }

    /// Runs `f` on the field `key` when it is present.
    pub fn opt<T>(&mut self, key: &str, value: Option<&T>, f: impl FnOnce(&mut Self, &T)) {
        if let Some(value) = value {
            self.key(key, |walk| f(walk, value));
        }
    }

    /// Runs `f` on each entry of the list `key`.
    pub fn list<'t, T>(&mut self, key: &str, items: &'t [T], mut f: impl FnMut(&mut Self, &'t T)) {
        self.key(key, |walk| {
            for (index, item) in items.iter().enumerate() {
                walk.path.push(Segment::Index(index));
                f(walk, item);
                walk.path.pop();
            }
        });
    }

    /// The value here is refused.
    pub fn fail(&mut self, expected: impl Into<String>, found: impl Into<String>) {
        self.found.push((self.path.clone(), expected.into(), found.into()));
    }

    /// The field `key` here is refused.
    pub fn fail_at(&mut self, key: &str, expected: impl Into<String>, found: impl Into<String>) {
        let (expected, found) = (expected.into(), found.into());
        self.key(key, |walk| walk.fail(expected, found));
    }

    /// A text that must pass `rule`, described by `expected`.
    pub fn text(&mut self, key: &str, value: &str, rule: impl Fn(&str) -> bool, expected: &str) {
        if !rule(value) {
            self.fail_at(key, expected, quoted(value));
        }
    }

    /// A string that must be one of `allowed` (`None`: not written, which defaulting fills).
    pub fn one_of(&mut self, key: &str, value: Option<&str>, allowed: &[&str]) {
        if let Some(value) = value
            && !allowed.contains(&value)
        {
            let expected = format!(
                "one of {}",
                allowed.iter().map(|a| quoted(a)).collect::<Vec<_>>().join(", ")
            );
            self.fail_at(key, expected, quoted(value));
        }
    }

    /// A required string that is missing or empty.
    pub fn required(&mut self, key: &str, value: Option<&str>, what: &str) -> bool {
        let present = value.is_some_and(|v| !v.is_empty());
        if !present {
            let found = if value.is_some() { "an empty string" } else { "none" };
            self.fail_at(key, what, found);
        }
        present
    }

    /// A number that must lie within `range`, both ends included.
    pub fn within(&mut self, key: &str, value: Option<i64>, low: i64, high: i64) {
        if let Some(value) = value
            && !(low..=high).contains(&value)
        {
            self.fail_at(key, format!("a number from {low} to {high}"), value.to_string());
        }
    }
}
