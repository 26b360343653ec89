//! Works out what a template adds to one Pod, and refuses what would break it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, EnvVar, LocalObjectReference, Volume, VolumeMount};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::overrides::Applied;
use super::pod::{Checked, PodView, is_subset_map};
use super::pod_values::{self, Resolved};
use super::resources::{QosClass, Resourcing};
use super::{InjectError, NATIVE_SIDECAR_ANNOTATION, REVISION_LABEL, STATUS_ANNOTATION, policy::Skip};
use crate::template::Template;

/// Additions that come from outside the template (cluster state such as a Network).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extras {
    /// Env vars set in every injected container (replacing a same-named template var).
    pub sidecar_env: Vec<EnvVar>,
    /// Annotations to set on the Pod (the caller merges with any existing value).
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

/// The `status` annotation: what was injected, from which template revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InjectionStatus {
    pub template: String,
    pub revision: String,
    pub containers: Vec<String>,
    pub init_containers: Vec<String>,
    pub volumes: Vec<String>,
    pub image_pull_secrets: Vec<String>,
    pub native_sidecar: bool,
    /// Mounts added to the Pod's own containers of a volume the Pod already had (what
    /// `uninject` takes out again; the mounts of `volumes` need no record, which keeps the
    /// status of the usual injection as it always was).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<MountRecord>,
    /// The overrides applied, by name, with the value the Pod asked for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, String>,
    /// The Pod's own `spec.resources` (its `requests` and `limits`, as it wrote them),
    /// when the injection changed it: what `uninject` puts back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_resources: Option<Value>,
}

/// One mount the injection added to an app container, recorded in the status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountRecord {
    pub container: String,
    pub mount_path: String,
}

/// One entry a plan adds: the template's own, borrowed with the JSON prepared when the
/// template was loaded, or one changed for this Pod (serialised when rendered).
#[derive(Debug, Clone)]
pub struct Added<'t, T: Clone> {
    pub item: Cow<'t, T>,
    prepared: Option<&'t RawValue>,
}

impl<'t, T: Clone + Serialize> Added<'t, T> {
    fn template(item: &'t T, prepared: &'t RawValue) -> Self {
        Added {
            item: Cow::Borrowed(item),
            prepared: Some(prepared),
        }
    }

    fn changed(item: T) -> Self {
        Added {
            item: Cow::Owned(item),
            prepared: None,
        }
    }

    /// Still the template's own, with its prepared JSON.
    fn is_template(&self) -> bool {
        self.prepared.is_some()
    }

    /// The entry changed by `change`: no longer the template's prepared JSON.
    fn change(&mut self, change: impl FnOnce(&mut T)) {
        change(self.item.to_mut());
        self.prepared = None;
    }

    /// The entry as JSON text: the prepared bytes, or serialised now.
    pub fn json(&self) -> Result<Cow<'t, RawValue>, InjectError> {
        match self.prepared {
            Some(raw) => Ok(Cow::Borrowed(raw)),
            None => serde_json::value::to_raw_value(self.item.as_ref())
                .map(Cow::Owned)
                .map_err(|e| InjectError::Encode(e.to_string())),
        }
    }
}

/// Serialises as its JSON: the prepared text when there is one.
impl<T: Clone + Serialize> Serialize for Added<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.prepared {
            Some(raw) => raw.serialize(serializer),
            None => self.item.serialize(serializer),
        }
    }
}

impl<T: Clone> std::ops::Deref for Added<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.item
    }
}

/// Equal when the entries are: the JSON is the same entry written out.
impl<T: Clone + PartialEq> PartialEq for Added<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.item == other.item
    }
}

/// A mount to add to one of the Pod's own containers.
#[derive(Debug, Clone, PartialEq)]
pub struct AppMount<'t> {
    pub container_index: usize,
    pub container_name: String,
    pub mount: Added<'t, VolumeMount>,
}

/// Everything one injection adds. Rendered as JSON Patch (admission) or strategic merge
/// patch (offline); both renderings only ever add. Borrows the template it was made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan<'t> {
    /// Inserted at the front of `spec.initContainers`, in this order.
    pub init_containers: Vec<Added<'t, Container>>,
    /// Appended to `spec.containers`.
    pub containers: Vec<Added<'t, Container>>,
    pub volumes: Vec<Added<'t, Volume>>,
    pub image_pull_secrets: Vec<Added<'t, LocalObjectReference>>,
    pub app_mounts: Vec<AppMount<'t>>,
    /// Includes the status annotation.
    pub annotations: BTreeMap<String, String>,
    /// Includes the revision label (when the revision is a valid label value).
    pub labels: BTreeMap<String, String>,
    /// Why `status.native_sidecar` is what it is (for `check`'s warnings).
    pub native_rule: NativeRule,
    /// The template's `fromPod` values, as this Pod gives them (for warnings and `check`).
    pub pod_values: Vec<Resolved<'t>>,
    /// What the injection does to the Pod-level resources and, to keep the Pod's QoS
    /// class, to the added containers' (already in `init_containers` and `containers`).
    pub resources: Resourcing,
    pub status: InjectionStatus,
}

/// The engine's answer for one opted-in Pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<'t> {
    Inject(Box<Plan<'t>>),
    Skip(Skip),
}

/// Which rule decided whether the template's `containers` go in as native sidecars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeRule {
    /// The Pod's annotation [`NATIVE_SIDECAR_ANNOTATION`] (`"true"` / `"false"`).
    Annotation,
    /// The template's `nativeSidecar`.
    Template,
    /// Neither said: native, for every Pod (Kubernetes runs native sidecars on every
    /// version we support: on by default since 1.29).
    Default,
}

/// A Pod whose containers are meant to exit (a Job's, a CronJob's, a bare `Never` /
/// `OnFailure` Pod). A regular sidecar never exits, so such a Pod would never finish;
/// a native sidecar is stopped once the Pod's own containers are done. Absent means
/// `Always` (the API server's default); an unknown value is refused by the API server.
pub fn runs_to_completion(restart_policy: Option<&str>) -> bool {
    matches!(restart_policy, Some("Never" | "OnFailure"))
}

/// The annotation wins, then the template's explicit choice, then the default: native, so
/// the sidecar is up before the app and the Pod's own init containers start, and stops
/// after the app.
fn wants_native(view: &Checked<'_, '_>, template: &Template) -> (bool, NativeRule) {
    let annotation = view
        .annotations
        .and_then(|a| a.text(NATIVE_SIDECAR_ANNOTATION))
        .map(|v| v.trim().to_ascii_lowercase());
    match (annotation.as_deref(), template.spec.native_sidecar) {
        (Some("true"), _) => (true, NativeRule::Annotation),
        (Some("false"), _) => (false, NativeRule::Annotation),
        (_, Some(native)) => (native, NativeRule::Template),
        (_, None) => (true, NativeRule::Default),
    }
}

/// The longest volume description a collision message holds before it is cut with `…`,
/// in characters: CEL counts a string in code points, and the compiled admission
/// policies write the same words.
pub const VOLUME_DESCRIPTION_LIMIT: usize = 120;

/// A volume as a collision message names it: its first source (by key) as JSON, cut
/// after [`VOLUME_DESCRIPTION_LIMIT`] characters.
pub fn describe_volume(volume: &Map<String, Value>) -> String {
    // A volume's one source key (configMap, emptyDir, ...) is what tells two apart.
    let source = volume
        .iter()
        .find(|(k, _)| k.as_str() != "name")
        .map(|(k, v)| format!("{k}: {v}"))
        .unwrap_or_else(|| String::from("no source"));
    match source.char_indices().nth(VOLUME_DESCRIPTION_LIMIT) {
        Some((cut, _)) => format!("{}…", &source[..cut]),
        None => source,
    }
}

/// Plans the injection of `template` into `pod`. The caller has already decided that
/// the Pod opted in; this only answers *what* to add, or why nothing / why not.
pub fn plan<'t>(pod: &PodView<'_>, template: &'t Template, extras: &Extras) -> Result<Decision<'t>, InjectError> {
    let view = pod.check()?;
    check_has_containers(&view)?;
    if view.annotations.is_some_and(|a| a.get(STATUS_ANNOTATION).is_some()) {
        return Ok(Decision::Skip(Skip::AlreadyInjected {
            evidence: format!("annotation `{STATUS_ANNOTATION}` is present"),
        }));
    }

    let (mut overrides, mut volumes, mut app_mounts) = (Vec::new(), Vec::new(), Vec::new());
    for fault in Fault::IN_ORDER {
        match fault {
            Fault::Partial => {
                if let Some(skip) = all_there(&view, template)? {
                    return Ok(Decision::Skip(skip));
                }
            }
            Fault::Overrides => {
                overrides = super::overrides::applied(view.annotations, template).map_err(InjectError::Override)?
            }
            Fault::Ports => check_ports(&view, template)?,
            Fault::Volumes => volumes = plan_volumes(&view, template)?,
            Fault::Mounts => app_mounts = plan_app_mounts(&view, template)?,
        }
    }
    let from_pod = pod_values::resolve(&view, template, &overrides);

    let existing_secrets: BTreeSet<&str> = view.image_pull_secrets.items().map(|s| s.name()).collect();
    let prepared = &template.prepared;
    let image_pull_secrets: Vec<Added<'t, LocalObjectReference>> = template
        .spec
        .image_pull_secrets
        .iter()
        .zip(&prepared.image_pull_secrets)
        .filter(|(s, _)| !existing_secrets.contains(s.name.as_str()))
        .map(|(s, json)| Added::template(s, json))
        .collect();

    let (native, native_rule) = wants_native(&view, template);
    let (sidecars, sidecars_json) = if native {
        (&prepared.native_containers, &prepared.native_containers_json)
    } else {
        (&template.spec.containers, &prepared.containers)
    };
    let added = |containers: &'t [Container], json: &'t [Box<RawValue>]| -> Vec<Added<'t, Container>> {
        containers
            .iter()
            .zip(json)
            .map(|(c, json)| {
                let overridden = overrides.iter().any(|o| o.decl.container == c.name);
                let from_pod_here = pod_values::changes(&c.name, &from_pod);
                match extras.sidecar_env.is_empty() && !overridden && !from_pod_here {
                    true => Added::template(c, json),
                    false => Added::changed(customised(c, &from_pod, &overrides, &extras.sidecar_env)),
                }
            })
            .collect()
    };
    let mut sidecars = added(sidecars, sidecars_json);
    let mut template_inits = added(&template.spec.init_containers, &prepared.init_containers);
    let resources = {
        let inits: Vec<&Container> = template_inits.iter().map(|c| c.item.as_ref()).collect();
        let long_running: Vec<&Container> = sidecars.iter().map(|c| c.item.as_ref()).collect();
        super::resources::plan(&view, &template.name, &inits, &long_running, native)?
    };
    // A container still as the template wrote it takes its BestEffort form prepared at
    // load; one changed for this Pod is changed again.
    let forms = &prepared.best_effort;
    let sidecar_forms = if native {
        &forms.native_containers
    } else {
        &forms.containers
    };
    for (index, new) in &resources.changed {
        let (container, form) = match index.checked_sub(template_inits.len()) {
            Some(sidecar) => (&mut sidecars[sidecar], &sidecar_forms[sidecar]),
            None => (&mut template_inits[*index], &forms.init_containers[*index]),
        };
        match form {
            Some((form, json)) if container.is_template() && resources.qos == QosClass::BestEffort => {
                *container = Added::template(form, json)
            }
            _ => container.change(|c| c.resources = new.clone()),
        }
    }
    let (init_containers, containers) = if native {
        (template_inits.into_iter().chain(sidecars).collect(), Vec::new())
    } else {
        (template_inits, sidecars)
    };

    let status = InjectionStatus {
        template: template.name.clone(),
        revision: template.revision.clone(),
        containers: containers.iter().map(|c| c.name.clone()).collect(),
        init_containers: init_containers.iter().map(|c| c.name.clone()).collect(),
        volumes: volumes.iter().map(|v| v.name.clone()).collect(),
        image_pull_secrets: image_pull_secrets.iter().map(|s| s.name.clone()).collect(),
        native_sidecar: native,
        volume_mounts: app_mounts
            .iter()
            .filter(|m| !volumes.iter().any(|v| v.name == m.mount.name))
            .map(|m| MountRecord {
                container: m.container_name.clone(),
                mount_path: m.mount.mount_path.clone(),
            })
            .collect(),
        overrides: overrides
            .iter()
            .map(|o| (o.decl.name.clone(), o.value.to_string()))
            .collect(),
        pod_resources: resources.record.clone(),
    };
    let mut annotations = extras.annotations.clone();
    annotations.insert(
        STATUS_ANNOTATION.to_string(),
        serde_json::to_string(&status).map_err(|e| InjectError::Encode(e.to_string()))?,
    );
    let mut labels = extras.labels.clone();
    if let Some(value) = revision_label_value(&template.revision) {
        labels.insert(REVISION_LABEL.to_string(), value.to_string());
    }

    Ok(Decision::Inject(Box::new(Plan {
        init_containers,
        containers,
        volumes,
        image_pull_secrets,
        app_mounts,
        annotations,
        labels,
        native_rule,
        pod_values: from_pod,
        resources,
        status,
    })))
}

/// The revision as the value of [`REVISION_LABEL`], when it is a valid label value (at
/// most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends). Template revisions
/// are 12 hex digits ([`crate::template::content_revision`]), so this is `Some` for every
/// parsed template; anything else gets no label rather than a Pod the API server refuses.
pub fn revision_label_value(revision: &str) -> Option<&str> {
    let bytes = revision.as_bytes();
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    let valid = !bytes.is_empty()
        && bytes.len() <= 63
        && edge(bytes.first())
        && edge(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    valid.then_some(revision)
}

/// The faults a template can find with a Pod, in the order every path names the first one
/// found: [`plan`] here and its CEL (`policies::plan`) both walk [`Fault::IN_ORDER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Some of the template's containers are in the Pod already, not all.
    Partial,
    /// An override annotation the template refuses.
    Overrides,
    /// A Pod container uses a port of the template's sidecars.
    Ports,
    /// A Pod volume is named like a template volume, with other content.
    Volumes,
    /// An app container mounts another volume at a template mount's path.
    Mounts,
}

impl Fault {
    pub const IN_ORDER: [Fault; 5] = [
        Fault::Partial,
        Fault::Overrides,
        Fault::Ports,
        Fault::Volumes,
        Fault::Mounts,
    ];
}

/// Whether the template's containers are in the Pod already: all of them is an injection
/// done (the skip), some of them a fault.
fn all_there(view: &Checked<'_, '_>, template: &Template) -> Result<Option<Skip>, InjectError> {
    let existing: BTreeSet<&str> = view
        .containers
        .items()
        .chain(view.init_containers.items())
        .map(|c| c.name())
        .collect();
    let (present, missing): (Vec<&str>, Vec<&str>) =
        template.container_names().partition(|name| existing.contains(name));
    if present.is_empty() {
        return Ok(None);
    }
    if missing.is_empty() {
        return Ok(Some(Skip::AlreadyInjected {
            evidence: format!("container(s) {} already in the Pod", quote_all(&present)),
        }));
    }
    Err(InjectError::PartiallyInjected {
        template: template.name.clone(),
        present: quote_all(&present),
        missing: quote_all(&missing),
    })
}

/// A Pod needs at least one container of its own: says which shape was found instead.
fn check_has_containers(view: &Checked<'_, '_>) -> Result<(), InjectError> {
    if !view.containers.is_empty() {
        return Ok(());
    }
    let found = if view.containers_null {
        "null"
    } else if !view.containers.is_absent() {
        "an empty list"
    } else if view.has_spec {
        "no `containers` field in `spec`"
    } else {
        "no `spec`"
    };
    Err(InjectError::NoContainers { found })
}

fn quote_all(names: &[&str]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// A template container changed for this Pod: the values it takes from the Pod, then its
/// overrides (which win), then the extras' env (the injector's own values win over a Pod's).
fn customised(
    container: &Container,
    from_pod: &[Resolved<'_>],
    overrides: &[Applied<'_, '_>],
    env: &[EnvVar],
) -> Container {
    let mut changed = container.clone();
    pod_values::apply(&mut changed, from_pod);
    for applied in overrides.iter().filter(|o| o.decl.container == container.name) {
        applied.decl.apply(&mut changed, applied.value);
    }
    with_env(changed, env)
}

fn with_env(mut container: Container, env: &[EnvVar]) -> Container {
    if !env.is_empty() {
        let vars = container.env.get_or_insert_with(Vec::new);
        vars.retain(|v| !env.iter().any(|e| e.name == v.name));
        vars.extend(env.iter().cloned());
    }
    container
}

/// Two processes cannot bind one port in the Pod's shared network namespace: a sidecar
/// port already used by an app container would crash-loop the sidecar.
fn check_ports(view: &Checked<'_, '_>, template: &Template) -> Result<(), InjectError> {
    for sidecar in &template.spec.containers {
        for port in sidecar.ports.iter().flatten() {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            for app in view.containers.items().chain(view.init_containers.items()) {
                if app
                    .ports()
                    .any(|(p, proto)| p == i64::from(port.container_port) && proto == protocol)
                {
                    return Err(InjectError::PortCollision {
                        template: template.name.clone(),
                        sidecar: sidecar.name.clone(),
                        port: port.container_port,
                        protocol: protocol.to_string(),
                        container: app.name().to_string(),
                    });
                }
            }
        }
    }
    Ok(())
}

fn plan_volumes<'t>(view: &Checked<'_, '_>, template: &'t Template) -> Result<Vec<Added<'t, Volume>>, InjectError> {
    let mut added = Vec::new();
    for (volume, json) in template.spec.volumes.iter().zip(&template.prepared.volumes) {
        let existing = view.volumes.items().position(|v| v.name() == volume.name);
        let Some(index) = existing else {
            added.push(Added::template(volume, json));
            continue;
        };
        let pod_volume = view.whole_volume(index).ok_or_else(|| InjectError::Unreadable {
            what: format!("Pod volume `{}` (spec.volumes[{index}])", volume.name),
        })?;
        let wanted: Map<String, Value> =
            serde_json::from_str(json.get()).map_err(|e| InjectError::Encode(e.to_string()))?;
        if !is_subset_map(&wanted, &pod_volume) {
            return Err(InjectError::VolumeCollision {
                name: volume.name.clone(),
                pod: describe_volume(&pod_volume),
                template: template.name.clone(),
                wanted: describe_volume(&wanted),
            });
        }
    }
    Ok(added)
}

fn plan_app_mounts<'t>(view: &Checked<'_, '_>, template: &'t Template) -> Result<Vec<AppMount<'t>>, InjectError> {
    let mut out = Vec::new();
    for (index, container) in view.containers.items().enumerate() {
        let name = container.name();
        for (mount, json) in template.spec.volume_mounts.iter().zip(&template.prepared.volume_mounts) {
            let at_path = container.mounts().find(|(_, path)| *path == mount.mount_path);
            match at_path {
                Some((volume, _)) if volume == mount.name => {}
                Some((volume, _)) => {
                    return Err(InjectError::MountCollision {
                        container: name.to_string(),
                        existing: volume.to_string(),
                        path: mount.mount_path.clone(),
                        template: template.name.clone(),
                        volume: mount.name.clone(),
                    });
                }
                None => out.push(AppMount {
                    container_index: index,
                    container_name: name.to_string(),
                    mount: Added::template(mount, json),
                }),
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::template::content_revision;

    #[test]
    fn a_volume_description_is_cut_after_120_characters_not_bytes() {
        // "é" is two bytes: a cut by bytes would keep about half as many of them.
        let path = format!("/tmp/{}", "é".repeat(200));
        let volume = json!({"name": "data", "hostPath": {"path": path}});
        let described = describe_volume(volume.as_object().unwrap());
        let kept = described.strip_suffix('…').expect("a long description is cut with …");
        assert_eq!(kept.chars().count(), VOLUME_DESCRIPTION_LIMIT);
        assert!(kept.starts_with("hostPath: {\"path\":\"/tmp/éé"), "{described}");

        let short = json!({"name": "data", "emptyDir": {}});
        assert_eq!(describe_volume(short.as_object().unwrap()), "emptyDir: {}");
    }

    #[test]
    fn the_revision_label_sits_next_to_the_status_annotation() {
        let template = Template::parse(
            "config",
            "containers:\n- name: proxy\n  image: envoy\n",
            crate::template::KubeVersion::NEWEST,
        )
        .unwrap();
        let pod = json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app"}]},
        });
        let Decision::Inject(plan) = plan(&PodView::read(&pod), &template, &Extras::default()).unwrap() else {
            panic!("expected an injection")
        };
        assert_eq!(plan.labels.get(REVISION_LABEL), Some(&template.revision));
        assert_eq!(plan.status.revision, template.revision);
        let mut out = pod.clone();
        json_patch::patch(
            &mut out,
            &crate::inject::jsonpatch::render(&plan, &PodView::read(&pod)).unwrap(),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"]["app"], "web", "existing labels are kept");
        assert_eq!(out["metadata"]["labels"][REVISION_LABEL], template.revision.as_str());
    }

    #[test]
    fn only_valid_label_values_become_the_label() {
        for text in [
            "",
            "containers: []",
            "a much longer template text\n".repeat(100).as_str(),
        ] {
            let revision = content_revision(text);
            assert_eq!(revision_label_value(&revision), Some(revision.as_str()), "{revision}");
        }
        assert_eq!(revision_label_value("v1.2_3-x"), Some("v1.2_3-x"));
        for bad in ["", "-abc", "abc.", "a/b", "a b", "ä", &"a".repeat(64)] {
            assert_eq!(revision_label_value(bad), None, "{bad:?}");
        }
        assert_eq!(revision_label_value(&"a".repeat(63)).map(str::len), Some(63));
    }
}
