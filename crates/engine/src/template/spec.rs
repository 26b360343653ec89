//! A template as written: the fields it may carry, typed as Kubernetes types them, with
//! its `overrides` and `fromPod` entries as declared. Checking them is `parse`'s,
//! `overrides`' and `pod_values`' work; these types depend on none of them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Volume, VolumeMount};
use serde::{Deserialize, Deserializer, Serialize};

/// The fields a template may carry. Names and types are Kubernetes' own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSpec {
    /// Sidecar containers appended to the Pod (or, with `nativeSidecar`, prepended to its
    /// init containers with `restartPolicy: Always`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Container>,
    /// Init containers placed before the Pod's own init containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Mounts added to every app container of the Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Inject `containers` as Kubernetes native sidecars (init containers that keep
    /// running): `true` always, `false` never, absent when the Pod's `restartPolicy` asks
    /// for it (see `inject::plan`). Only a boolean is taken: `null` is refused, not absent.
    #[serde(default, deserialize_with = "present_bool", skip_serializing_if = "Option::is_none")]
    pub native_sidecar: Option<bool>,
    /// Whether a Pod with `hostNetwork: true` that names this template by annotation is
    /// injected (`inject::decide`): its sidecar's ports are then the node's. Not the
    /// PodSpec's own name, so that no one reads it as setting the Pod's network.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_host_network: bool,
    /// Values a Pod may set with `sidecar.samplecrd.k8s.io/override.NAME`, and their bounds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, OverrideDecl>,
    /// Values injected containers take from the Pod (`template::pod_values`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_pod: Vec<PodValue>,
}

impl TemplateSpec {
    /// The container of the template named `name` (an init container or a sidecar).
    pub fn container(&self, name: &str) -> Option<&Container> {
        self.init_containers
            .iter()
            .chain(&self.containers)
            .find(|c| c.name == name)
    }

    /// The template's containers as messages list them: `` `envoy`, `init` ``.
    pub fn container_list(&self) -> String {
        self.init_containers
            .iter()
            .chain(&self.containers)
            .map(|c| format!("`{}`", c.name))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn is_false(value: &bool) -> bool {
    !value
}

/// A field that, once written, must be a boolean (`Option<bool>` alone would read `null`
/// as absent and hide a value the platform team meant to set).
fn present_bool<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    bool::deserialize(deserializer).map(Some)
}

/// One entry of `overrides` as written. Unknown keys are reported by the template parser.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverrideDecl {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// `resources.requests.NAME` or `resources.limits.NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The name of an env var of the container to set or replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Replaces the tag of the container's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<bool>,
    #[serde(default, deserialize_with = "scalar", skip_serializing_if = "Option::is_none")]
    pub min: Option<String>,
    #[serde(default, deserialize_with = "scalar", skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
    #[serde(default, deserialize_with = "scalars", skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<String>>,
}

/// A YAML scalar as its text: `max: 2` means the quantity "2", `oneOf: [1, 2]` the strings.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn text(self) -> String {
        match self {
            Scalar::Text(text) => text,
            Scalar::Int(n) => n.to_string(),
            Scalar::Float(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

fn scalar<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<Scalar>::deserialize(deserializer)?.map(Scalar::text))
}

fn scalars<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Vec<String>>, D::Error> {
    Ok(Option::<Vec<Scalar>>::deserialize(deserializer)?.map(|items| items.into_iter().map(Scalar::text).collect()))
}

/// What of the Pod a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PodValueKind {
    /// The one TCP port the Pod's own (app) containers declare, when they declare exactly
    /// one: the port a proxy in front of the app forwards to.
    #[serde(rename = "appPort")]
    AppPort,
}

impl PodValueKind {
    /// What the value is, in the words of messages.
    pub fn describe(self) -> &'static str {
        match self {
            PodValueKind::AppPort => "the one TCP port the Pod's app containers declare",
        }
    }
}

/// One entry of `fromPod` as written; unknown keys are reported by the template parser.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodValue {
    pub value: PodValueKind,
    pub container: String,
    pub env: String,
}
