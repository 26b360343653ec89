//! The levels of the Pod Security Standards and the policy versions a namespace pins them
//! to, read as the API server's Pod Security admission reads its labels' values.

use std::fmt;

use serde::{Serialize, Serializer};

/// A level of the Pod Security Standards, least strict first (each allows less than the
/// one before, so they order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    /// A label's value as the API server takes it: exactly one of the three names.
    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The version of the standards a namespace pins: `latest`, or `v1.MINOR`, whose rules are
/// those that release applied (a rule added later is not applied to it). Ordered oldest
/// first, `latest` last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyVersion {
    V1(u32),
    Latest,
}

impl PolicyVersion {
    /// A label's value as the API server takes it: `latest`, or `v1.` and a minor without a
    /// leading zero.
    pub fn parse(text: &str) -> Option<PolicyVersion> {
        if text == "latest" {
            return Some(PolicyVersion::Latest);
        }
        let minor = text.strip_prefix("v1.")?;
        let digits = !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit());
        if !digits || (minor.len() > 1 && minor.starts_with('0')) {
            return None;
        }
        minor.parse().ok().map(PolicyVersion::V1)
    }

    /// Whether a rule the standards gained in `1.minor` applies at this version: `latest`
    /// and any version newer than the rules written here apply them all.
    pub fn at_least(self, minor: u32) -> bool {
        match self {
            PolicyVersion::Latest => true,
            PolicyVersion::V1(own) => own >= minor,
        }
    }
}

impl fmt::Display for PolicyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyVersion::Latest => f.write_str("latest"),
            PolicyVersion::V1(minor) => write!(f, "v1.{minor}"),
        }
    }
}

impl Serialize for PolicyVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A level at a version: what one mode of a namespace applies (`restricted:latest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct LevelVersion {
    pub level: Level,
    pub version: PolicyVersion,
}

impl LevelVersion {
    pub fn new(level: Level, version: PolicyVersion) -> LevelVersion {
        LevelVersion { level, version }
    }
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level, self.version)
    }
}
