//! What the rules read of the Pod a template is injected into: the Pod-level settings that
//! meet a rule for every container (`runAsNonRoot`, `seccompProfile`), relax one
//! (`hostUsers: false`, a Windows Pod) or change what a container's port is
//! (`hostNetwork`). A template sets none of them.

use k8s_openapi::api::core::v1::PodSecurityContext;
use serde::Deserialize;
use serde_json::Value;

/// The Pod-level settings the rules read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodLevel {
    pub security_context: Option<PodSecurityContext>,
    /// `spec.hostUsers`: `Some(false)` runs the Pod in a user namespace.
    pub host_users: Option<bool>,
    /// `spec.hostNetwork`: the API server then sets every container port's `hostPort` to
    /// its `containerPort`.
    pub host_network: bool,
    /// `spec.os.name`.
    pub os: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    security_context: Option<Value>,
    #[serde(default)]
    host_users: Option<Value>,
    #[serde(default)]
    host_network: Option<Value>,
    #[serde(default)]
    os: Option<Value>,
}

impl PodLevel {
    /// From a Pod (`{"spec": ...}`), each field taken when it has the API's type and left
    /// unset otherwise (the API server refuses such a Pod before Pod Security sees it).
    pub fn from_pod(pod: &Value) -> PodLevel {
        let Some(spec) = pod.get("spec").and_then(|s| Spec::deserialize(s).ok()) else {
            return PodLevel::default();
        };
        PodLevel {
            security_context: spec.security_context.and_then(|sc| serde_json::from_value(sc).ok()),
            host_users: spec.host_users.and_then(|v| v.as_bool()),
            host_network: spec.host_network.and_then(|v| v.as_bool()).unwrap_or(false),
            os: spec
                .os
                .and_then(|os| os.get("name").and_then(Value::as_str).map(str::to_string)),
        }
    }

    /// A Windows Pod, which the restricted rules that have no meaning on Windows skip
    /// (from v1.25).
    pub fn windows(&self) -> bool {
        self.os.as_deref() == Some("windows")
    }

    /// A Pod in a user namespace, which `runAsNonRoot`, `runAsUser` and baseline's
    /// `procMount` skip (from v1.35).
    pub fn user_namespace(&self) -> bool {
        self.host_users == Some(false)
    }
}
