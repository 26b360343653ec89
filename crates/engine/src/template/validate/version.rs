//! The Kubernetes version a template's values are checked for: the rules the API server
//! applies to a Pod move with its feature gates, so the same template can be refused by a
//! 1.31 API server and admitted by a 1.36 one. `serve` and `check` read the version from
//! the API server (`/version`); the offline commands take `--kube-version`. A release newer
//! than the rules written here is taken, checked with the newest rules and said: a gate
//! that opened stays open, and refusing a released Kubernetes would only stop the user.

use std::fmt;
use std::str::FromStr;

/// A Kubernetes minor version (`1.MINOR`), the oldest supported or later; one newer than
/// `NEWEST` keeps its own number (it is what the API server is) and `NEWEST`'s rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    minor: u16,
}

/// Why a text is not a supported Kubernetes version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("expected a Kubernetes version such as 1.36 or v1.36.2, found {found:?}")]
    Syntax { found: String },
    #[error("Kubernetes {found} is not supported: expected {} or later", KubeVersion::OLDEST)]
    Unsupported { found: String },
}

/// The first kubelet minor version (1.29) that runs native sidecars by default.
pub const NATIVE_SIDECAR_KUBELET_MINOR: u16 = 29;

impl KubeVersion {
    /// The oldest Kubernetes this project supports (README).
    pub const OLDEST: KubeVersion = KubeVersion { minor: 31 };
    /// The newest whose rules are written here, and the default of `--kube-version`.
    pub const NEWEST: KubeVersion = KubeVersion { minor: 36 };

    /// `major` and `minor` as the API server's `/version` reports them (`"1"`, `"36+"` on
    /// some distributions). A server older than the oldest supported is checked with the
    /// oldest rules (it is running: refusing it would stop nothing), one newer with the
    /// newest; either is said in the second value.
    pub fn from_server(major: &str, minor: &str) -> Result<(KubeVersion, Option<String>), VersionError> {
        let found = format!("{major}.{minor}");
        let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
        let minor: u16 = match (major, digits.parse()) {
            ("1", Ok(minor)) => minor,
            _ => return Err(VersionError::Syntax { found }),
        };
        if minor < Self::OLDEST.minor {
            let note = format!(
                "the API server is Kubernetes {found}, older than {}, the oldest supported: templates are checked with the rules of {}",
                Self::OLDEST,
                Self::OLDEST
            );
            return Ok((Self::OLDEST, Some(note)));
        }
        let version = KubeVersion { minor };
        Ok((version, version.newer_than_rules()))
    }

    /// Whether every kubelet this API server may have runs native sidecars: they are on by
    /// default since kubelet 1.29, and the version skew policy lets kubelets lag the API
    /// server by three minor versions, so only a 1.31 control plane may have nodes that
    /// cannot.
    pub fn kubelets_run_native_sidecars(self) -> bool {
        self.minor >= NATIVE_SIDECAR_KUBELET_MINOR + 3
    }

    /// The release whose rules this version is checked with: itself, or `NEWEST` for a
    /// newer one.
    pub fn rules(self) -> KubeVersion {
        self.min(Self::NEWEST)
    }

    /// For a version newer than `NEWEST`, the one warning that says which rules are used.
    pub fn newer_than_rules(self) -> Option<String> {
        (self > Self::NEWEST).then(|| {
            format!(
                "Kubernetes {self} is newer than the rules this injector knows: template values are checked with the rules of {}",
                Self::NEWEST
            )
        })
    }

    /// At least `1.minor`, by the rules used.
    fn since(self, minor: u16) -> bool {
        self.rules().minor >= minor
    }

    /// Env var names and `envFrom` prefixes: any printable ASCII but `=` (gate
    /// RelaxedEnvironmentVariableValidation, on from 1.32), before that a C identifier
    /// with `-` and `.`.
    pub fn relaxed_env_names(self) -> bool {
        self.since(32)
    }

    /// `sleep: {seconds: 0}` in a lifecycle hook (PodLifecycleSleepActionAllowZero, 1.33).
    pub fn sleep_zero(self) -> bool {
        self.since(33)
    }

    /// `resizePolicy` is kept and checked (InPlacePodVerticalScaling, 1.33); before, the
    /// API server drops it.
    pub fn resize_policy(self) -> bool {
        self.since(33)
    }

    /// `securityContext.procMount` is kept and checked (ProcMountType, 1.33); before, the
    /// API server sets it to `Default`.
    pub fn proc_mount(self) -> bool {
        self.since(33)
    }

    /// `resources.claims` is kept and checked (DynamicResourceAllocation, 1.34); before,
    /// the API server drops it.
    pub fn resource_claims(self) -> bool {
        self.since(34)
    }

    /// `restartPolicy` on regular containers, `Never`/`OnFailure` on init containers and
    /// `restartPolicyRules` (ContainerRestartRules, 1.35); before, only `Always` on init
    /// containers, and the rules are dropped.
    pub fn container_restart_rules(self) -> bool {
        self.since(35)
    }

    /// Restart rules on a native sidecar and the `RestartAllContainers` action (1.36).
    pub fn restart_all_containers(self) -> bool {
        self.since(36)
    }

    /// `env[].valueFrom.fileKeyRef` (EnvFiles, 1.35); before, the API server drops it and
    /// the `valueFrom` left empty is refused.
    pub fn env_files(self) -> bool {
        self.since(35)
    }

    /// `image` volumes (ImageVolume, on from 1.35); before, the API server drops the
    /// volume and its mounts.
    pub fn image_volumes(self) -> bool {
        self.since(35)
    }
}

impl Default for KubeVersion {
    fn default() -> KubeVersion {
        KubeVersion::NEWEST
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

/// `1.36`, `v1.36` or `v1.36.2`, the oldest supported or later.
impl FromStr for KubeVersion {
    type Err = VersionError;

    fn from_str(text: &str) -> Result<KubeVersion, VersionError> {
        let syntax = || VersionError::Syntax {
            found: text.to_string(),
        };
        let bare = text.strip_prefix('v').unwrap_or(text);
        let mut parts = bare.split('.');
        let (Some("1"), Some(minor)) = (parts.next(), parts.next()) else {
            return Err(syntax());
        };
        let patch_ok = match parts.next() {
            None => true,
            Some(patch) => !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit()) && parts.next().is_none(),
        };
        if !patch_ok || minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return Err(syntax());
        }
        let minor: u16 = minor.parse().map_err(|_| syntax())?;
        let version = KubeVersion { minor };
        if version < Self::OLDEST {
            return Err(VersionError::Unsupported {
                found: text.to_string(),
            });
        }
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_a_user_writes_and_refuses_the_rest() {
        for text in ["1.34", "v1.34", "v1.34.2", "1.34.0"] {
            assert_eq!(text.parse::<KubeVersion>().unwrap().to_string(), "1.34", "{text}");
        }
        for text in ["", "1", "2.34", "1.x", "1.34.", "1.34.2.1", "v1.34-rc.1", " 1.34"] {
            assert!(
                matches!(text.parse::<KubeVersion>(), Err(VersionError::Syntax { .. })),
                "{text}"
            );
        }
        let err = "1.30".parse::<KubeVersion>().unwrap_err().to_string();
        assert_eq!(err, "Kubernetes 1.30 is not supported: expected 1.31 or later");
        let oldest = "1.31".parse::<KubeVersion>().unwrap();
        assert_eq!(
            (oldest, oldest.rules(), oldest.newer_than_rules()),
            (KubeVersion::OLDEST, KubeVersion::OLDEST, None)
        );
    }

    #[test]
    fn a_release_newer_than_the_rules_is_taken_with_the_newest_rules_and_said() {
        for (text, shown) in [("1.37", "1.37"), ("v1.40.1", "1.40")] {
            let version: KubeVersion = text
                .parse()
                .unwrap_or_else(|err| panic!("{text}: expected accepted, found {err}"));
            assert_eq!(version.to_string(), shown, "{text}: the version as given");
            assert_eq!(version.rules(), KubeVersion::NEWEST, "{text}: the rules used");
            assert_eq!(
                version.newer_than_rules().as_deref(),
                Some(format!("Kubernetes {shown} is newer than the rules this injector knows: template values are checked with the rules of 1.36").as_str()),
                "{text}: the warning"
            );
            let newest = KubeVersion::NEWEST;
            let gates = |v: KubeVersion| {
                [
                    v.relaxed_env_names(),
                    v.sleep_zero(),
                    v.resize_policy(),
                    v.proc_mount(),
                    v.resource_claims(),
                ]
                .into_iter()
                .chain([
                    v.container_restart_rules(),
                    v.restart_all_containers(),
                    v.env_files(),
                    v.image_volumes(),
                ])
                .collect::<Vec<_>>()
            };
            assert_eq!(
                gates(version),
                gates(newest),
                "{text}: every gate as the newest rules have it"
            );
        }
        assert_eq!(KubeVersion::NEWEST.newer_than_rules(), None);
    }

    #[test]
    fn a_server_outside_the_range_is_checked_with_the_nearest_rules_and_said() {
        assert_eq!(
            KubeVersion::from_server("1", "36").unwrap(),
            (KubeVersion::NEWEST, None)
        );
        assert_eq!(KubeVersion::from_server("1", "33+").unwrap().0.to_string(), "1.33");
        for minor in ["37", "40+"] {
            let (version, note) = KubeVersion::from_server("1", minor).unwrap();
            assert_eq!(version.rules(), KubeVersion::NEWEST, "1.{minor}: the rules used");
            assert_eq!(note, version.newer_than_rules(), "1.{minor}: the one warning");
            assert!(note.is_some(), "1.{minor}: expected a warning, found none");
        }
        let (version, note) = KubeVersion::from_server("1", "30").unwrap();
        assert_eq!(version, KubeVersion::OLDEST);
        assert_eq!(
            note.as_deref(),
            Some(
                "the API server is Kubernetes 1.30, older than 1.31, the oldest supported: templates are checked with the rules of 1.31"
            )
        );
        assert!(KubeVersion::from_server("2", "0").is_err());
        assert!(KubeVersion::from_server("1", "").is_err());
    }

    #[test]
    fn the_gates_move_where_kubernetes_moved_them() {
        let v = |minor| KubeVersion { minor };
        assert!(!v(31).relaxed_env_names() && v(32).relaxed_env_names());
        assert!(!v(32).sleep_zero() && v(33).sleep_zero());
        assert!(!v(34).container_restart_rules() && v(35).container_restart_rules());
        assert!(!v(34).env_files() && v(35).env_files());
        assert!(!v(34).image_volumes() && v(35).image_volumes());
        assert!(!v(33).resource_claims() && v(34).resource_claims());
    }
}
