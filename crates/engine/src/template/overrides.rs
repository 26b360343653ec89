//! A template's `overrides`: the values a Pod may set with an annotation, where each lands
//! in an injected container, and the bounds the platform team puts on it.
//!
//! ```yaml
//! overrides:
//!   cpu-request:  {container: envoy, field: resources.requests.cpu, max: "2"}
//!   log-level:    {container: envoy, env: LOG_LEVEL, oneOf: [debug, info, warn, error]}
//!   image-tag:    {container: envoy, imageTag: true, oneOf: ["v1.31.2", "v1.32.0"]}
//! ```
//!
//! Checked when the template loads (each entry's mistake is a load error naming the field
//! and its line); applying one to a Pod is the engine's (`inject::overrides`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::error::Fault;
use super::quantity::Quantity;
use super::spec::{OverrideDecl, TemplateSpec};
use super::yaml_locate::{Lines, Segment, render_path};

/// The annotation-name part every override's name is put after (`override.NAME`); with it
/// the name must stay a valid annotation name (63 characters at most).
const NAME_PREFIX: &str = "override.";

/// Where in the container an override lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `resources.requests.NAME` (`limits` false) or `resources.limits.NAME`.
    Resource {
        limits: bool,
        resource: String,
    },
    Env(String),
    ImageTag,
}

/// What a Pod may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    Range {
        min: Option<Quantity>,
        max: Option<Quantity>,
    },
    OneOf(Vec<String>),
}

/// One checked override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub name: String,
    pub container: String,
    pub target: Target,
    pub bound: Bound,
}

/// Why a Pod's value is refused (the engine names the annotation and the template).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutOfBounds {
    NotAQuantity(String),
    AboveMax(Quantity),
    BelowMin(Quantity),
    NotOneOf(Vec<String>),
}

impl Override {
    /// Whether `value` is within the bound.
    pub fn check(&self, value: &str) -> Result<(), OutOfBounds> {
        match &self.bound {
            Bound::Range { min, max } => {
                let asked = Quantity::parse(value).map_err(|e| OutOfBounds::NotAQuantity(e.to_string()))?;
                if let Some(max) = max.as_ref().filter(|max| asked > **max) {
                    return Err(OutOfBounds::AboveMax(max.clone()));
                }
                if let Some(min) = min.as_ref().filter(|min| asked < **min) {
                    return Err(OutOfBounds::BelowMin(min.clone()));
                }
                Ok(())
            }
            Bound::OneOf(allowed) if allowed.iter().any(|a| a == value) => Ok(()),
            Bound::OneOf(allowed) => Err(OutOfBounds::NotOneOf(allowed.clone())),
        }
    }

    /// Sets `value` (already checked) in `container`.
    pub fn apply(&self, container: &mut Container, value: &str) {
        match &self.target {
            Target::Resource { limits, resource } => {
                let resources = container.resources.get_or_insert_with(Default::default);
                let list = if *limits {
                    &mut resources.limits
                } else {
                    &mut resources.requests
                };
                list.get_or_insert_with(Default::default)
                    .insert(resource.clone(), K8sQuantity(value.to_string()));
            }
            Target::Env(name) => {
                let vars = container.env.get_or_insert_with(Vec::new);
                let var = EnvVar {
                    name: name.clone(),
                    value: Some(value.to_string()),
                    value_from: None,
                };
                match vars.iter_mut().find(|v| v.name == *name) {
                    Some(existing) => *existing = var,
                    None => vars.push(var),
                }
            }
            Target::ImageTag => {
                let image = container.image.as_deref().unwrap_or_default();
                let (repository, _) = split_image(image);
                container.image = Some(format!("{repository}:{value}"));
            }
        }
    }
}

/// (repository, tag) of an image reference; the tag is after the last `:` of the last
/// path segment (a registry's `host:5000/` port is not a tag).
fn split_image(image: &str) -> (&str, Option<&str>) {
    let last_segment = image.rfind('/').map_or(0, |slash| slash + 1);
    match image[last_segment..].rfind(':') {
        Some(colon) => (&image[..last_segment + colon], Some(&image[last_segment + colon + 1..])),
        None => (image, None),
    }
}

/// Every override of one template, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides(BTreeMap<String, Override>);

impl Overrides {
    pub fn get(&self, name: &str) -> Option<&Override> {
        self.0.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Override> {
        self.0.values()
    }

    /// Checks each declared override against the template it belongs to: the ones that
    /// pass, and a fault for each one that does not (its first mistake: the rest of an
    /// entry depends on what came before, as its bounds on its target).
    pub fn of(spec: &TemplateSpec, lines: &Lines) -> (Overrides, Vec<Fault>) {
        let mut out = BTreeMap::new();
        let mut faults = Vec::new();
        for (name, decl) in &spec.overrides {
            match compile(name, decl, spec) {
                Ok(checked) => {
                    out.insert(name.clone(), checked);
                }
                Err((key, message)) => {
                    let mut path = vec![Segment::Key(String::from("overrides")), Segment::Key(name.clone())];
                    path.extend(key.map(|k| Segment::Key(k.to_string())));
                    // A key that is missing is pointed at by its entry's line.
                    faults.push(Fault::Override {
                        path: render_path(&path),
                        line: lines.line_near(&path),
                        message,
                    });
                }
            }
        }
        (Overrides(out), faults)
    }
}

/// A mistake in one entry: the key at fault (none: the entry itself) and what is wrong.
type Mistake = (Option<&'static str>, String);

fn compile(name: &str, decl: &OverrideDecl, spec: &TemplateSpec) -> Result<Override, Mistake> {
    check_name(name)?;
    let containers = || spec.container_list();
    let container_name = decl.container.as_deref().ok_or_else(|| {
        (
            None,
            format!(
                "expected `container` naming the container the value lands in (this template adds {})",
                or_none(containers())
            ),
        )
    })?;
    let container = spec.container(container_name).ok_or_else(|| {
        (
            Some("container"),
            format!(
                "expected a container this template adds ({}), found `{container_name}`",
                or_none(containers())
            ),
        )
    })?;
    let target = target(decl)?;
    let bound = bound(decl, &target)?;
    let checked = Override {
        name: name.to_string(),
        container: container_name.to_string(),
        target,
        bound,
    };
    check_default(&checked, container)?;
    Ok(checked)
}

fn or_none(list: String) -> String {
    if list.is_empty() { String::from("none") } else { list }
}

/// The name follows `override.` in an annotation name: `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
fn check_name(name: &str) -> Result<(), Mistake> {
    let bytes = name.as_bytes();
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    let valid = edge(bytes.first())
        && edge(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && NAME_PREFIX.len() + name.len() <= 63;
    if valid {
        return Ok(());
    }
    Err((
        None,
        format!(
            "expected an override name that can follow `{NAME_PREFIX}` in an annotation name (letters, digits, `-`, `_`, `.`, alphanumeric at both ends, at most {} characters), found {name:?}",
            63 - NAME_PREFIX.len()
        ),
    ))
}

fn target(decl: &OverrideDecl) -> Result<Target, Mistake> {
    let image_tag = decl.image_tag == Some(true);
    let given: Vec<&str> = [
        decl.field.is_some().then_some("field"),
        decl.env.is_some().then_some("env"),
        image_tag.then_some("imageTag"),
    ]
    .into_iter()
    .flatten()
    .collect();
    match given.as_slice() {
        [] => Err((
            None,
            String::from("expected one of `field`, `env` or `imageTag: true` saying where the value lands"),
        )),
        [_] => Ok(if let Some(field) = &decl.field {
            resource_target(field)?
        } else if let Some(env) = &decl.env {
            if env.is_empty() {
                return Err((
                    Some("env"),
                    String::from("expected the name of an env var, found an empty string"),
                ));
            }
            Target::Env(env.clone())
        } else {
            Target::ImageTag
        }),
        [first, second, ..] => Err((
            Some(second),
            format!("expected one of `field`, `env` or `imageTag: true`, found both `{first}` and `{second}`"),
        )),
    }
}

fn resource_target(field: &str) -> Result<Target, Mistake> {
    let parts: Vec<&str> = field.split('.').collect();
    match parts.as_slice() {
        ["resources", list @ ("requests" | "limits"), resource] if !resource.is_empty() => Ok(Target::Resource {
            limits: *list == "limits",
            resource: resource.to_string(),
        }),
        _ => Err((
            Some("field"),
            format!(
                "expected a container resource field, `resources.requests.NAME` or `resources.limits.NAME` (NAME: cpu, memory, ...), found {field:?}"
            ),
        )),
    }
}

fn bound(decl: &OverrideDecl, target: &Target) -> Result<Bound, Mistake> {
    let quantity = |key: &'static str, text: &Option<String>| -> Result<Option<Quantity>, Mistake> {
        text.as_deref()
            .map(|t| Quantity::parse(t).map_err(|e| (Some(key), e.to_string())))
            .transpose()
    };
    match target {
        Target::Resource { .. } => {
            if decl.one_of.is_some() {
                return Err((
                    Some("oneOf"),
                    String::from(
                        "`oneOf` bounds a string (`env`, `imageTag`); a resource quantity takes `min` and/or `max`",
                    ),
                ));
            }
            let (min, max) = (quantity("min", &decl.min)?, quantity("max", &decl.max)?);
            if min.is_none() && max.is_none() {
                return Err((
                    None,
                    String::from("expected `min`, `max` or both: without a bound a Pod could ask for any amount"),
                ));
            }
            if let (Some(min), Some(max)) = (&min, &max)
                && min > max
            {
                return Err((
                    Some("min"),
                    format!("min {:?} is above max {:?}", min.as_str(), max.as_str()),
                ));
            }
            Ok(Bound::Range { min, max })
        }
        Target::Env(_) | Target::ImageTag => {
            let quantity_bound = [("min", &decl.min), ("max", &decl.max)]
                .into_iter()
                .find_map(|(key, v)| v.as_ref().map(|_| key));
            if let Some(key) = quantity_bound {
                return Err((
                    Some(key),
                    format!("`{key}` bounds a resource quantity (`field`); a string takes `oneOf`"),
                ));
            }
            match &decl.one_of {
                Some(values) if !values.is_empty() => {
                    if let Some(empty) = values.iter().find(|v| v.is_empty() || v.trim() != v.as_str()) {
                        return Err((
                            Some("oneOf"),
                            format!("expected values without surrounding spaces, found {empty:?}"),
                        ));
                    }
                    if *target == Target::ImageTag
                        && let Some(bad) = values.iter().find(|v| !is_tag(v))
                    {
                        return Err((
                            Some("oneOf"),
                            format!(
                                "expected image tags ([A-Za-z0-9_][A-Za-z0-9_.-]*, at most 128 characters), found {bad:?}"
                            ),
                        ));
                    }
                    Ok(Bound::OneOf(values.clone()))
                }
                _ => Err((
                    Some("oneOf"),
                    String::from("expected `oneOf` listing the values a Pod may choose"),
                )),
            }
        }
    }
}

/// A tag as the OCI distribution spec allows it.
fn is_tag(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The template's own value is the default a Pod gets without the annotation: it must be
/// within the bound the template sets, or the bound means nothing.
fn check_default(checked: &Override, container: &Container) -> Result<(), Mistake> {
    let outside = |value: &str, at: String, why: OutOfBounds| {
        let why = match why {
            OutOfBounds::NotAQuantity(e) => e,
            OutOfBounds::AboveMax(max) => format!("above max {:?}", max.as_str()),
            OutOfBounds::BelowMin(min) => format!("below min {:?}", min.as_str()),
            OutOfBounds::NotOneOf(values) => format!("not one of {}", quote_all(&values)),
        };
        Err((
            None,
            format!(
                "the template's own value {value:?} ({at} of container `{}`) is outside the override's bounds: {why}",
                container.name
            ),
        ))
    };
    match &checked.target {
        Target::Resource { limits, resource } => {
            let resources = container.resources.as_ref();
            let list = if *limits {
                resources.and_then(|r| r.limits.as_ref())
            } else {
                resources.and_then(|r| r.requests.as_ref())
            };
            if let Some(value) = list.and_then(|l| l.get(resource))
                && let Err(why) = checked.check(&value.0)
            {
                let list = if *limits { "limits" } else { "requests" };
                return outside(&value.0, format!("resources.{list}.{resource}"), why);
            }
            Ok(())
        }
        Target::Env(name) => {
            let value = container
                .env
                .iter()
                .flatten()
                .find(|v| v.name == *name)
                .and_then(|v| v.value.as_deref());
            match value.map(|v| (v, checked.check(v))) {
                Some((value, Err(why))) => outside(value, format!("env `{name}`"), why),
                _ => Ok(()),
            }
        }
        Target::ImageTag => {
            let image = container.image.as_deref().unwrap_or_default();
            if image.is_empty() {
                return Err((
                    Some("imageTag"),
                    format!(
                        "container `{}` has no `image` whose tag could be replaced",
                        container.name
                    ),
                ));
            }
            if image.contains('@') {
                return Err((
                    Some("imageTag"),
                    format!(
                        "container `{}` pins its image by digest ({image:?}): a tag would not change what runs",
                        container.name
                    ),
                ));
            }
            match split_image(image).1.map(|tag| (tag, checked.check(tag))) {
                Some((tag, Err(why))) => outside(tag, String::from("the image's tag"), why),
                _ => Ok(()),
            }
        }
    }
}

/// `"a", "b"`: values quoted as JSON strings, as the deny messages quote them.
pub fn quote_all(values: &[String]) -> String {
    values
        .iter()
        .map(|v| serde_json::Value::from(v.as_str()).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
pub(crate) mod tests;
