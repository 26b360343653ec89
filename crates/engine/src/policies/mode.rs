//! The two names of one idea: the injection mode `serve --injection` is set to, and the
//! path that then injects a Pod. Pure.

use serde::Serialize;

/// `serve --injection`: how the templates are injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Policies when the API server serves MutatingAdmissionPolicy v1, else the webhook.
    Auto,
    Policy,
    Webhook,
}

impl Mode {
    /// Every mode, in the order `--help` lists them.
    pub const ALL: [Mode; 3] = [Mode::Auto, Mode::Policy, Mode::Webhook];

    /// The flag's value as `serve` accepts it (and `check` reads it from a Deployment).
    pub fn parse(value: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.as_str() == value)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Policy => "policy",
            Mode::Webhook => "webhook",
        }
    }
}

/// The path that injects: the compiled admission policies the API server runs itself, or
/// the webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    Policy,
    Webhook,
}

impl Path {
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Policy => "policy",
            Path::Webhook => "webhook",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_reads_back_from_its_name_and_nothing_else_does() {
        for mode in Mode::ALL {
            assert_eq!(Mode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(Mode::parse("policies"), None);
        assert_eq!(Mode::parse("Auto"), None);
    }
}
