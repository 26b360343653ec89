//! One injection template: the YAML fragment of a PodSpec kept under a ConfigMap key.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::VolumeMount;

use super::error::{TemplateError, UnknownField};
use super::overrides::Overrides;
use super::pod_values;
use super::prepared::Prepared;
use super::spec::TemplateSpec;
use super::validate::{self, KubeVersion};
use super::yaml_locate::{LineIndex, Segment, render_path, without_locations};

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

const TOP_LEVEL_FIELDS: &str =
    "containers, initContainers, volumes, imagePullSecrets, volumeMounts, nativeSidecar, overrides, fromPod";

/// Container fields that users put at the template's top level by mistake (`resources`
/// and `volumeMounts` most often): each is named with the container it belongs in.
const CONTAINER_ONLY_FIELDS: &[&str] = &[
    "name",
    "image",
    "command",
    "args",
    "ports",
    "env",
    "envFrom",
    "resources",
    "securityContext",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "imagePullPolicy",
    "workingDir",
    "restartPolicy",
];

impl Template {
    /// Parses and validates the YAML text of one template, its values as the API server
    /// of `version` checks a Pod's.
    pub fn parse(name: &str, text: &str, version: KubeVersion) -> Result<Template, TemplateError> {
        match Template::parse_keeping_values(name, text, version)? {
            (template, None) => Ok(template),
            (_, Some(refused)) => Err(refused),
        }
    }

    /// Parses a template as [`Template::parse`] does, but keeps one whose only faults are
    /// values the API server would refuse ([`TemplateError::Values`], returned beside it):
    /// a template loaded before these rules existed is served on, loudly, until it is
    /// edited (`template::reload`).
    pub fn parse_keeping_values(
        name: &str,
        text: &str,
        version: KubeVersion,
    ) -> Result<(Template, Option<TemplateError>), TemplateError> {
        let spec = parse_strict(name, text)?;
        validate(name, text, &spec)?;
        let overrides = Overrides::of(name, text, &spec)?;
        pod_values::check(name, text, &spec)?;
        let prepared = Prepared::of(&spec).map_err(|e| TemplateError::Syntax {
            template: name.to_string(),
            line: None,
            message: format!("cannot be written as JSON: {e}"),
        })?;
        let values = validate::check(&spec, version, text);
        let refused = (!values.is_empty()).then(|| TemplateError::Values {
            template: name.to_string(),
            errors: values,
        });
        let template = Template {
            name: name.to_string(),
            revision: content_revision(text),
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

/// First 12 hex digits of the SHA-256 of the template text: stable across restarts,
/// replicas and versions of this binary.
pub fn content_revision(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_strict(name: &str, text: &str) -> Result<TemplateSpec, TemplateError> {
    if text.trim().is_empty() {
        return Err(TemplateError::Empty {
            template: name.to_string(),
        });
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
    if !ignored.is_empty() {
        let lines = LineIndex::build(text);
        let fields = ignored
            .iter()
            .map(|path| UnknownField {
                path: render_path(path),
                line: lines.line_of(path),
                hint: hint_for(path),
            })
            .collect();
        return Err(TemplateError::UnknownFields {
            template: name.to_string(),
            fields,
        });
    }
    spec.ok_or_else(|| TemplateError::Empty {
        template: name.to_string(),
    })
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
    match path {
        [Segment::Key(key)] if CONTAINER_ONLY_FIELDS.contains(&key.as_str()) => format!(
            "`{key}` is a container field: indent it under an entry of `containers`; a template's top level takes {TOP_LEVEL_FIELDS}"
        ),
        [Segment::Key(_)] => format!("a template's top level takes {TOP_LEVEL_FIELDS}"),
        _ => String::from("not a field of the Kubernetes type at that place"),
    }
}

fn validate(name: &str, text: &str, spec: &TemplateSpec) -> Result<(), TemplateError> {
    let template = || name.to_string();
    if spec.containers.is_empty()
        && spec.init_containers.is_empty()
        && spec.volumes.is_empty()
        && spec.image_pull_secrets.is_empty()
        && spec.volume_mounts.is_empty()
    {
        return Err(TemplateError::Empty { template: template() });
    }
    // The field at fault as a user writes it (`containers[1].name`), and its line: an entry
    // without the key by the entry's first key; the text is read only on a fault.
    let place = |path: Vec<Segment>| -> (String, Option<usize>) {
        let lines = LineIndex::build(text);
        let line = (0..=path.len()).rev().find_map(|len| lines.line_of(&path[..len]));
        (render_path(&path), line)
    };
    let key = |k: &str| Segment::Key(k.to_string());

    let mut container_names = BTreeSet::new();
    let all_containers = spec
        .init_containers
        .iter()
        .enumerate()
        .map(|(i, c)| ("initContainers", i, c))
        .chain(spec.containers.iter().enumerate().map(|(i, c)| ("containers", i, c)));
    for (list, i, container) in all_containers {
        if container.name.is_empty() {
            let (path, line) = place(vec![key(list), Segment::Index(i)]);
            return Err(TemplateError::MissingName {
                template: template(),
                what: format!("an entry of `{list}` (entry {i})"),
                path,
                line,
            });
        }
        if !container_names.insert(container.name.as_str()) {
            let (path, line) = place(vec![key(list), Segment::Index(i), key("name")]);
            return Err(TemplateError::Duplicate {
                template: template(),
                kind: "containers",
                name: container.name.clone(),
                path,
                line,
            });
        }
    }

    let mut volumes = BTreeMap::new();
    for (i, volume) in spec.volumes.iter().enumerate() {
        if volume.name.is_empty() {
            let (path, line) = place(vec![key("volumes"), Segment::Index(i)]);
            return Err(TemplateError::MissingName {
                template: template(),
                what: String::from("an entry of `volumes`"),
                path,
                line,
            });
        }
        if volumes.insert(volume.name.as_str(), volume).is_some() {
            let (path, line) = place(vec![key("volumes"), Segment::Index(i), key("name")]);
            return Err(TemplateError::Duplicate {
                template: template(),
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
            return Err(TemplateError::Duplicate {
                template: template(),
                kind: "imagePullSecrets",
                name: secret.name.clone(),
                path,
                line,
            });
        }
    }

    // A mount must name a template volume; the Pod's own volumes are unknown here and
    // mounting one of them from a shared template would break every other Pod.
    let defined = || volumes.keys().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ");
    let check_mounts = |owner: String, at: Vec<Segment>, mounts: &[VolumeMount]| {
        let mut paths = BTreeSet::new();
        for (i, mount) in mounts.iter().enumerate() {
            let field = |k: &str| {
                let mut path = at.clone();
                path.extend([Segment::Index(i), key(k)]);
                place(path)
            };
            if !volumes.contains_key(mount.name.as_str()) {
                let (path, line) = field("name");
                return Err(TemplateError::UndefinedVolume {
                    template: template(),
                    volume: mount.name.clone(),
                    defined: if volumes.is_empty() {
                        String::from("none")
                    } else {
                        defined()
                    },
                    path,
                    line,
                });
            }
            if !paths.insert(mount.mount_path.as_str()) {
                let (path, line) = field("mountPath");
                return Err(TemplateError::Duplicate {
                    template: template(),
                    kind: "volumeMounts (mountPath)",
                    name: format!("{} in {owner}", mount.mount_path),
                    path,
                    line,
                });
            }
        }
        Ok(())
    };
    check_mounts(
        String::from("top-level `volumeMounts`"),
        vec![key("volumeMounts")],
        &spec.volume_mounts,
    )?;
    let all_containers = spec
        .init_containers
        .iter()
        .enumerate()
        .map(|(i, c)| ("initContainers", i, c))
        .chain(spec.containers.iter().enumerate().map(|(i, c)| ("containers", i, c)));
    for (list, i, container) in all_containers {
        check_mounts(
            format!("container `{}`", container.name),
            vec![key(list), Segment::Index(i), key("volumeMounts")],
            container.volume_mounts.as_deref().unwrap_or_default(),
        )?;
    }
    Ok(())
}
