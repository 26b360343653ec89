//! One injection template: the YAML fragment of a PodSpec kept under a ConfigMap key.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, VolumeMount};

use super::error::{Fault, TemplateError, UnknownField};
use super::fields;
use super::overrides::Overrides;
use super::pod_values;
use super::prepared::Prepared;
use super::spec::TemplateSpec;
use super::validate::{self, KubeVersion};
use super::yaml_locate::{Lines, Segment, render_path, without_locations};

/// A validated template, ready for the injection engine.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The ConfigMap key it came from (`config` is the default template).
    pub name: String,
    /// Content hash (or ConfigMap resourceVersion in cluster mode): written into the
    /// status annotation so operators can tell which template a Pod got.
    pub revision: String,
    pub spec: TemplateSpec,
    /// `spec`'s additions as JSON, serialised once here rather than per Pod.
    pub prepared: Prepared,
    /// `spec.overrides`, checked.
    pub overrides: Overrides,
}

/// A container field put at the template's top level by mistake (`resources` most often)
/// is named with the container it belongs in.
fn is_container_field(key: &str) -> bool {
    fields::known_at::<Container>(&[]).is_some_and(|known| known.contains(&key))
}

impl Template {
    /// Parses and validates the YAML text of one template, its values as the API server
    /// of `version` checks a Pod's. The error is the one fault that stopped the reading
    /// ([`TemplateError::Syntax`]) or every fault found ([`TemplateError::Faults`]).
    pub fn parse(name: &str, text: &str, version: KubeVersion) -> Result<Template, TemplateError> {
        match Template::parse_keeping_values(name, text, version)? {
            (template, None) => Ok(template),
            (_, Some(refused)) => Err(refused),
        }
    }

    /// Parses a template as [`Template::parse`] does, but keeps one whose only faults are
    /// values the API server would refuse ([`Fault::Value`]s, returned beside it):
    /// a template loaded before these rules existed is served on, loudly, until it is
    /// edited (`template::reload`).
    pub fn parse_keeping_values(
        name: &str,
        text: &str,
        version: KubeVersion,
    ) -> Result<(Template, Option<TemplateError>), TemplateError> {
        // Only what stops serde stops the reading; every other fault is found and
        // reported with the others, in the order of the text.
        let lines = Lines::new(text);
        let (spec, mut faults) = parse_strict(name, text, &lines)?;
        faults.extend(structure(&spec, &lines));
        let (overrides, found) = Overrides::of(&spec, &lines);
        faults.extend(found);
        faults.extend(pod_values::check(&spec, &lines));
        faults.extend(validate::check(&spec, version, &lines).into_iter().map(Fault::Value));
        faults.sort_by_key(Fault::line);
        let as_error = |faults: Vec<Fault>| TemplateError::Faults {
            template: name.to_string(),
            faults,
        };
        if faults.iter().any(|f| !matches!(f, Fault::Value(_))) {
            return Err(as_error(faults));
        }
        let prepared = Prepared::of(&spec).map_err(|e| TemplateError::Syntax {
            template: name.to_string(),
            line: None,
            message: format!("cannot be written as JSON: {e}"),
        })?;
        let refused = (!faults.is_empty()).then(|| as_error(faults));
        let template = Template {
            name: name.to_string(),
            revision: template_revision(text),
            spec,
            prepared,
            overrides,
        };
        Ok((template, refused))
    }

    /// Names of every container this template injects (sidecars and init containers).
    pub fn container_names(&self) -> impl Iterator<Item = &str> {
        self.spec
            .init_containers
            .iter()
            .chain(self.spec.containers.iter())
            .map(|c| c.name.as_str())
    }
}

/// The version of the rules by which the injector shapes a Pod from a template. Raise it
/// whenever a release changes what the same template makes of the same Pod (2: native
/// sidecars by default, Pod-level resources raised, the QoS class kept): the revision
/// follows it, so Pods injected by the old rules show as stale, not as drift, and
/// `rollout` moves them over.
pub const INJECTION_RULES: u32 = 2;

/// A template's revision: the first 12 hex digits of the SHA-256 of the rules version
/// ([`INJECTION_RULES`]) and the template text. Stable across restarts and replicas, and
/// across versions of this binary with the same rules.
pub fn template_revision(text: &str) -> String {
    content_revision(&format!("envoy-injector rules {INJECTION_RULES}\n{text}"))
}

/// First 12 hex digits of the SHA-256 of a text.
pub fn content_revision(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// The typed template and its unknown fields; a text that is not YAML, or a value of a
/// type its field cannot hold, stops here.
fn parse_strict(name: &str, text: &str, lines: &Lines) -> Result<(TemplateSpec, Vec<Fault>), TemplateError> {
    let empty = || TemplateError::Faults {
        template: name.to_string(),
        faults: vec![Fault::Empty],
    };
    if text.trim().is_empty() {
        return Err(empty());
    }
    let mut ignored: Vec<Vec<Segment>> = Vec::new();
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    let spec: Option<TemplateSpec> = serde_ignored::deserialize(deserializer, |path| {
        ignored.push(segments(&path));
    })
    .map_err(|source| TemplateError::Syntax {
        template: name.to_string(),
        line: source.location().map(|l| l.line()),
        message: without_locations(&source.to_string()),
    })?;
    let spec = spec.ok_or_else(empty)?;
    let unknown = ignored
        .iter()
        .map(|path| {
            Fault::UnknownField(UnknownField {
                path: render_path(path),
                line: lines.line_of(path),
                hint: hint_for(path),
            })
        })
        .collect();
    Ok((spec, unknown))
}

fn segments(path: &serde_ignored::Path<'_>) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut current = Some(path);
    while let Some(p) = current {
        current = match p {
            serde_ignored::Path::Root => None,
            serde_ignored::Path::Seq { parent, index } => {
                out.push(Segment::Index(*index));
                Some(*parent)
            }
            serde_ignored::Path::Map { parent, key } => {
                out.push(Segment::Key(key.clone()));
                Some(*parent)
            }
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => Some(*parent),
        };
    }
    out.reverse();
    out
}

fn hint_for(path: &[Segment]) -> String {
    let Some((Segment::Key(key), parent)) = path.split_last() else {
        return String::from("not a field of the Kubernetes type at that place");
    };
    let known = fields::known_at::<TemplateSpec>(parent);
    let suggestion = known.and_then(|known| fields::nearest(key, known));
    if parent.is_empty() {
        let top = known.unwrap_or_default().join(", ");
        return match suggestion {
            _ if is_container_field(key) => format!(
                "`{key}` is a container field: indent it under an entry of `containers`; a template's top level takes {top}"
            ),
            Some(near) => format!("did you mean `{near}`? a template's top level takes {top}"),
            None => format!("a template's top level takes {top}"),
        };
    }
    match suggestion {
        Some(near) => format!("did you mean `{near}`?"),
        None => String::from("not a field of the Kubernetes type at that place"),
    }
}

/// The template's shape: something to inject, names present and unique, mounts of the
/// template's own volumes only.
fn structure(spec: &TemplateSpec, lines: &Lines) -> Vec<Fault> {
    let mut faults = Vec::new();
    if spec.containers.is_empty()
        && spec.init_containers.is_empty()
        && spec.volumes.is_empty()
        && spec.image_pull_secrets.is_empty()
        && spec.volume_mounts.is_empty()
    {
        faults.push(Fault::Empty);
    }
    // The field at fault as a user writes it (`containers[1].name`), and its line: an entry
    // without the key by the entry's first key.
    let place = |path: Vec<Segment>| -> (String, Option<usize>) { (render_path(&path), lines.line_near(&path)) };
    let key = |k: &str| Segment::Key(k.to_string());
    let all_containers = || {
        spec.init_containers
            .iter()
            .enumerate()
            .map(|(i, c)| ("initContainers", i, c))
            .chain(spec.containers.iter().enumerate().map(|(i, c)| ("containers", i, c)))
    };

    let mut container_names = BTreeSet::new();
    for (list, i, container) in all_containers() {
        if container.name.is_empty() {
            let (path, line) = place(vec![key(list), Segment::Index(i)]);
            faults.push(Fault::MissingName {
                what: format!("an entry of `{list}` (entry {i})"),
                path,
                line,
            });
        } else if !container_names.insert(container.name.as_str()) {
            let (path, line) = place(vec![key(list), Segment::Index(i), key("name")]);
            faults.push(Fault::Duplicate {
                kind: "containers",
                name: container.name.clone(),
                path,
                line,
            });
        }
    }

    let mut volumes = BTreeSet::new();
    for (i, volume) in spec.volumes.iter().enumerate() {
        if volume.name.is_empty() {
            let (path, line) = place(vec![key("volumes"), Segment::Index(i)]);
            faults.push(Fault::MissingName {
                what: String::from("an entry of `volumes`"),
                path,
                line,
            });
        } else if !volumes.insert(volume.name.as_str()) {
            let (path, line) = place(vec![key("volumes"), Segment::Index(i), key("name")]);
            faults.push(Fault::Duplicate {
                kind: "volumes",
                name: volume.name.clone(),
                path,
                line,
            });
        }
    }

    let mut pull_secrets = BTreeSet::new();
    for (i, secret) in spec.image_pull_secrets.iter().enumerate() {
        if !pull_secrets.insert(secret.name.as_str()) {
            let (path, line) = place(vec![key("imagePullSecrets"), Segment::Index(i), key("name")]);
            faults.push(Fault::Duplicate {
                kind: "imagePullSecrets",
                name: secret.name.clone(),
                path,
                line,
            });
        }
    }

    // A mount must name a template volume; the Pod's own volumes are unknown here and
    // mounting one of them from a shared template would break every other Pod.
    let defined = if volumes.is_empty() {
        String::from("none")
    } else {
        volumes.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ")
    };
    let mut check_mounts = |owner: String, at: Vec<Segment>, mounts: &[VolumeMount]| {
        let mut paths = BTreeSet::new();
        for (i, mount) in mounts.iter().enumerate() {
            let field = |k: &str| {
                let mut path = at.clone();
                path.extend([Segment::Index(i), key(k)]);
                place(path)
            };
            if !volumes.contains(mount.name.as_str()) {
                let (path, line) = field("name");
                faults.push(Fault::UndefinedVolume {
                    volume: mount.name.clone(),
                    defined: defined.clone(),
                    path,
                    line,
                });
            }
            if !paths.insert(mount.mount_path.as_str()) {
                let (path, line) = field("mountPath");
                faults.push(Fault::Duplicate {
                    kind: "volumeMounts (mountPath)",
                    name: format!("{} in {owner}", mount.mount_path),
                    path,
                    line,
                });
            }
        }
    };
    check_mounts(
        String::from("top-level `volumeMounts`"),
        vec![key("volumeMounts")],
        &spec.volume_mounts,
    );
    for (list, i, container) in all_containers() {
        check_mounts(
            format!("container `{}`", container.name),
            vec![key(list), Segment::Index(i), key("volumeMounts")],
            container.volume_mounts.as_deref().unwrap_or_default(),
        );
    }
    faults
}
