//! One field of what a template adds that a level does not allow: which template,
//! container or volume and field, what the level expects and what was found.

use std::fmt;

use serde::Serialize;

use super::standard::Level;

/// A control of the Pod Security Standards, as the standards name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Control {
    Privileged,
    HostProcess,
    HostPorts,
    HostPathVolumes,
    Capabilities,
    AppArmor,
    SeLinux,
    ProcMount,
    Seccomp,
    ProbeHost,
    VolumeTypes,
    AllowPrivilegeEscalation,
    RunAsNonRoot,
    RunAsUser,
}

impl Control {
    pub fn name(self) -> &'static str {
        match self {
            Control::Privileged => "privileged",
            Control::HostProcess => "hostProcess",
            Control::HostPorts => "host ports",
            Control::HostPathVolumes => "hostPath volumes",
            Control::Capabilities => "capabilities",
            Control::AppArmor => "AppArmor",
            Control::SeLinux => "SELinux",
            Control::ProcMount => "procMount",
            Control::Seccomp => "seccomp",
            Control::ProbeHost => "probe and lifecycle hosts",
            Control::VolumeTypes => "volume types",
            Control::AllowPrivilegeEscalation => "allowPrivilegeEscalation",
            Control::RunAsNonRoot => "runAsNonRoot",
            Control::RunAsUser => "runAsUser",
        }
    }
}

impl fmt::Display for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where in the template a finding is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Place {
    Container(String),
    InitContainer(String),
    Volume(String),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Container(name) => write!(f, "container `{name}`"),
            Place::InitContainer(name) => write!(f, "init container `{name}`"),
            Place::Volume(name) => write!(f, "volume `{name}`"),
        }
    }
}

/// One field a level does not allow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub template: String,
    /// The level whose rule it breaks (a restricted namespace applies baseline's too).
    pub level: Level,
    pub control: Control,
    pub place: Place,
    /// The field within the container or volume: `securityContext.runAsNonRoot`.
    pub field: String,
    pub expected: String,
    pub found: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of template `{}`: `{}`: {} expects {}, found {}",
            self.place, self.template, self.field, self.level, self.expected, self.found
        )
    }
}
