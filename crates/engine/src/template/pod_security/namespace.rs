//! What a Namespace's `pod-security.kubernetes.io/*` labels ask of its Pods, read as the API
//! server's Pod Security admission reads them: a mode without a level label takes the
//! default (`privileged`, unless the API server's AdmissionConfiguration sets another,
//! which no one outside it can read), a version label missing or unreadable is `latest`, an
//! unreadable level is `restricted` for `enforce` and `privileged` for `warn` and `audit`.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::standard::{Level, LevelVersion, PolicyVersion};

/// The label prefix of every Pod Security label: `PREFIX + mode` is the level,
/// `PREFIX + mode + "-version"` its version.
pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// What the API server does with a Pod that breaks a mode's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Refuses it.
    Enforce,
    /// Admits it with a warning to the client.
    Warn,
    /// Admits it and records it in the audit log.
    Audit,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Enforce, Mode::Warn, Mode::Audit];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Warn => "warn",
            Mode::Audit => "audit",
        }
    }

    /// The label holding this mode's level.
    pub fn level_label(self) -> String {
        format!("{LABEL_PREFIX}{}", self.name())
    }

    /// The label holding this mode's version.
    pub fn version_label(self) -> String {
        format!("{LABEL_PREFIX}{}-version", self.name())
    }

    /// The level an unreadable level label stands for: Pod Security admission fails
    /// closed for `enforce` and open for the others.
    fn unreadable_level(self) -> Level {
        match self {
            Mode::Enforce => Level::Restricted,
            Mode::Warn | Mode::Audit => Level::Privileged,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One mode of a Namespace: the level and version it applies, and where they came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModePolicy {
    pub mode: Mode,
    #[serde(flatten)]
    pub applied: LevelVersion,
    /// Whether its level label is set; without it the API server's default applies.
    pub labelled: bool,
    /// The labels of this mode whose values the API server cannot read, each with what it
    /// takes instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// The three modes a Namespace's labels set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamespacePolicy {
    pub enforce: ModePolicy,
    pub warn: ModePolicy,
    pub audit: ModePolicy,
}

impl NamespacePolicy {
    /// What `labels` (a Namespace's) ask for.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> NamespacePolicy {
        let mode = |mode: Mode| {
            let mut unreadable = Vec::new();
            let level_label = mode.level_label();
            let level = match labels.get(&level_label) {
                None => Level::Privileged,
                Some(text) => Level::parse(text).unwrap_or_else(|| {
                    let taken = mode.unreadable_level();
                    unreadable.push(format!(
                        "`{level_label}` is {text:?}, expected privileged, baseline or restricted: the API server takes {taken}"
                    ));
                    taken
                }),
            };
            let version_label = mode.version_label();
            let version = match labels.get(&version_label) {
                None => PolicyVersion::Latest,
                Some(text) => PolicyVersion::parse(text).unwrap_or_else(|| {
                    unreadable.push(format!(
                        "`{version_label}` is {text:?}, expected latest or v1.MINOR: the API server takes latest"
                    ));
                    PolicyVersion::Latest
                }),
            };
            ModePolicy {
                mode,
                applied: LevelVersion::new(level, version),
                labelled: labels.contains_key(&level_label),
                unreadable,
            }
        };
        NamespacePolicy {
            enforce: mode(Mode::Enforce),
            warn: mode(Mode::Warn),
            audit: mode(Mode::Audit),
        }
    }

    /// The three modes, `enforce` first.
    pub fn modes(&self) -> [&ModePolicy; 3] {
        [&self.enforce, &self.warn, &self.audit]
    }

    /// Whether no label of Pod Security is set: every mode is the API server's default.
    pub fn unlabelled(&self) -> bool {
        self.modes()
            .iter()
            .all(|m| !m.labelled && m.unreadable.is_empty() && m.applied.version == PolicyVersion::Latest)
    }
}
