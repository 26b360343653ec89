//! Renders a [`Plan`] as RFC 6902 operations against the Pod's exact JSON.
//!
//! Only `add` is ever emitted, and a whole list or map is added only where the Pod has
//! none: existing entries are never replaced (one well-known injector wiped every
//! annotation with a bare `add /metadata/annotations`), but for the Pod-level resources
//! the injection raises, each set by an `add` of its own key.
//!
//! The operations borrow the template's JSON prepared at load time ([`Ops`]), so the
//! admission path writes them straight into the response; [`render`] gives the same
//! operations as a [`json_patch::Patch`] for callers that apply them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use json_patch::jsonptr::{PointerBuf, Token};
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::plan::{Added, Plan};
use super::pod::{Dict, List, PodView};
use super::resources::PodLevel;
use super::{InjectError, REFUSED_ANNOTATION, REFUSED_LABEL};

fn all<T>(items: &[T]) -> Vec<&T> {
    items.iter().collect()
}

/// The JSON Pointer text of `tokens`, each escaped as RFC 6901 says (`~0`, `~1`), built in
/// one allocation: admission writes a few per request.
pub(super) fn pointer(tokens: &[&str]) -> String {
    let mut path = String::with_capacity(tokens.iter().map(|t| t.len() + 1).sum::<usize>() + 4);
    for token in tokens {
        path.push('/');
        path.push_str(Token::new(*token).encoded());
    }
    path
}

/// The value of one `add`.
#[derive(Debug, Clone)]
pub enum OpValue<'p> {
    /// One entry, as JSON text.
    Entry(Cow<'p, RawValue>),
    /// A whole new list of entries.
    Entries(Vec<Cow<'p, RawValue>>),
    /// Anything built here (metadata maps, strings, an empty `spec`).
    Json(Value),
}

impl Serialize for OpValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            OpValue::Entry(raw) => raw.serialize(serializer),
            OpValue::Entries(raws) => {
                let mut seq = serializer.serialize_seq(Some(raws.len()))?;
                for raw in raws {
                    seq.serialize_element(raw.as_ref())?;
                }
                seq.end()
            }
            OpValue::Json(value) => value.serialize(serializer),
        }
    }
}

impl OpValue<'_> {
    fn into_value(self) -> Result<Value, InjectError> {
        let parse = |raw: &RawValue| serde_json::from_str(raw.get()).map_err(|e| InjectError::Encode(e.to_string()));
        match self {
            OpValue::Entry(raw) => parse(&raw),
            OpValue::Entries(raws) => Ok(Value::Array(
                raws.iter().map(|raw| parse(raw)).collect::<Result<_, _>>()?,
            )),
            OpValue::Json(value) => Ok(value),
        }
    }
}

/// One operation: an `add`, or (`value` none) a `remove`, which only the join of an
/// already injected Pod writes (a var of the same name leaving its place).
#[derive(Debug, Clone)]
pub struct Op<'p> {
    /// A JSON Pointer, already escaped.
    pub path: String,
    pub value: Option<OpValue<'p>>,
}

impl Serialize for Op<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("op", if self.value.is_some() { "add" } else { "remove" })?;
        map.serialize_entry("path", &self.path)?;
        if let Some(value) = &self.value {
            map.serialize_entry("value", value)?;
        }
        map.end()
    }
}

/// The operations of one patch, serialising as the RFC 6902 JSON array.
#[derive(Debug, Clone, Default)]
pub struct Ops<'p>(pub Vec<Op<'p>>);

impl Serialize for Ops<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(&self.0)
    }
}

impl<'p> Ops<'p> {
    /// The same operations as a [`json_patch::Patch`], to apply.
    pub fn into_patch(self) -> Result<Patch, InjectError> {
        let ops = self
            .0
            .into_iter()
            .map(|op| {
                let path = PointerBuf::parse(op.path).map_err(|e| InjectError::Encode(e.to_string()))?;
                Ok(match op.value {
                    Some(value) => PatchOperation::Add(AddOperation {
                        path,
                        value: value.into_value()?,
                    }),
                    None => PatchOperation::Remove(RemoveOperation { path }),
                })
            })
            .collect::<Result<_, InjectError>>()?;
        Ok(Patch(ops))
    }

    pub(super) fn add(&mut self, path: String, value: OpValue<'p>) {
        self.0.push(Op {
            path,
            value: Some(value),
        });
    }

    pub(super) fn remove(&mut self, path: String) {
        self.0.push(Op { path, value: None });
    }

    /// Appends entries to a list, creating it when the Pod has none.
    fn append<T: Clone + Serialize, U>(
        &mut self,
        list: List<'_, U>,
        path: &[&str],
        items: &[&Added<'p, T>],
    ) -> Result<(), InjectError> {
        if items.is_empty() {
            return Ok(());
        }
        match list {
            List::Absent => {
                let all = items.iter().map(|item| item.json()).collect::<Result<Vec<_>, _>>()?;
                self.add(pointer(path), OpValue::Entries(all));
            }
            List::Present(_) => {
                let mut end = path.to_vec();
                end.push("-");
                for item in items {
                    self.add(pointer(&end), OpValue::Entry(item.json()?));
                }
            }
        }
        Ok(())
    }

    /// Inserts entries at the front of a list, in order.
    fn prepend<T: Clone + Serialize, U>(
        &mut self,
        list: List<'_, U>,
        path: &[&str],
        items: &[&Added<'p, T>],
    ) -> Result<(), InjectError> {
        if list.is_absent() {
            return self.append(list, path, items);
        }
        for (index, item) in items.iter().enumerate() {
            let index = index.to_string();
            let mut at = path.to_vec();
            at.push(&index);
            self.add(pointer(&at), OpValue::Entry(item.json()?));
        }
        Ok(())
    }

    /// Sets the Pod-level values `pod_level` changes: each key of a map the Pod has (an
    /// `add` replaces a member), or the map whole where it has none (the requests the API
    /// server would default, written out). `spec.resources` itself is there: a Pod level
    /// is raised only when it has requests or limits.
    fn pod_level(&mut self, pod_level: &PodLevel) {
        for (limits, field, has) in [
            (false, "requests", pod_level.has_requests),
            (true, "limits", pod_level.has_limits),
        ] {
            let changes = pod_level.changes.iter().filter(|c| c.limits == limits);
            if has {
                for change in changes {
                    self.add(
                        pointer(&["spec", "resources", field, &change.resource]),
                        OpValue::Json(Value::String(change.new.clone())),
                    );
                }
            } else {
                let map: Map<String, Value> = changes
                    .map(|c| (c.resource.clone(), Value::String(c.new.clone())))
                    .collect();
                if !map.is_empty() {
                    self.add(
                        pointer(&["spec", "resources", field]),
                        OpValue::Json(Value::Object(map)),
                    );
                }
            }
        }
    }

    /// Sets keys in a metadata map, creating the map (and `metadata`) when absent.
    fn set_keys(
        &mut self,
        has_metadata: bool,
        dict: Option<&Dict<'_>>,
        field: &str,
        entries: &BTreeMap<String, String>,
    ) {
        if entries.is_empty() {
            return;
        }
        let as_map = || -> Map<String, Value> {
            entries
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect()
        };
        match dict {
            Some(_) => {
                for (key, value) in entries {
                    self.add(
                        pointer(&["metadata", field, key]),
                        OpValue::Json(Value::String(value.clone())),
                    );
                }
            }
            None if has_metadata => self.add(pointer(&["metadata", field]), OpValue::Json(Value::Object(as_map()))),
            None => {
                let mut metadata = Map::new();
                metadata.insert(field.to_string(), Value::Object(as_map()));
                self.add(pointer(&["metadata"]), OpValue::Json(Value::Object(metadata)));
            }
        }
    }
}

/// The JSON Patch that applies `plan` to `pod`, as operations that borrow the plan's
/// template (what admission writes into its response).
pub fn render_ops<'p>(plan: &Plan<'p>, pod: &PodView<'_>) -> Result<Ops<'p>, InjectError> {
    let view = pod.check()?;
    let mut ops = Ops(Vec::new());
    let adds_to_spec = !plan.init_containers.is_empty()
        || !plan.containers.is_empty()
        || !plan.volumes.is_empty()
        || !plan.image_pull_secrets.is_empty();
    if !view.has_spec && adds_to_spec {
        ops.add(pointer(&["spec"]), OpValue::Json(Value::Object(Map::new())));
    }

    // Mounts first: they address the Pod's own containers by index, which appending
    // sidecars after them does not shift. Grouped so a container without a list gets it
    // created once.
    let mut mounts_by_container: BTreeMap<usize, Vec<&Added<'p, _>>> = BTreeMap::new();
    for app in &plan.app_mounts {
        mounts_by_container
            .entry(app.container_index)
            .or_default()
            .push(&app.mount);
    }
    for (index, mounts) in mounts_by_container {
        // A plan only mounts into containers of this Pod: the index is in the list.
        let existing = match view.containers.get(index).and_then(|c| c.volume_mounts.get()) {
            Some(items) => List::Present(items),
            None => List::Absent,
        };
        let index = index.to_string();
        ops.append(existing, &["spec", "containers", &index, "volumeMounts"], &mounts)?;
    }

    ops.prepend(
        view.init_containers,
        &["spec", "initContainers"],
        &all(&plan.init_containers),
    )?;
    ops.append(view.containers, &["spec", "containers"], &all(&plan.containers))?;
    ops.append(view.volumes, &["spec", "volumes"], &all(&plan.volumes))?;
    ops.append(
        view.image_pull_secrets,
        &["spec", "imagePullSecrets"],
        &all(&plan.image_pull_secrets),
    )?;
    if let Some(pod_level) = &plan.resources.pod_level {
        ops.pod_level(pod_level);
    }

    // Creating `metadata` for annotations must not then be overwritten by labels.
    ops.set_keys(view.has_metadata, view.annotations, "annotations", &plan.annotations);
    let metadata_now = view.has_metadata || !plan.annotations.is_empty();
    ops.set_keys(metadata_now, view.labels, "labels", &plan.labels);
    // The mark of compiled policies that refused the Pod (compiled from other templates
    // than these, during a change): injected, it would still be denied for it.
    for (dict, field, key) in [
        (view.annotations, "annotations", REFUSED_ANNOTATION),
        (view.labels, "labels", REFUSED_LABEL),
    ] {
        if dict.is_some_and(|d| d.get(key).is_some()) {
            ops.remove(pointer(&["metadata", field, key]));
        }
    }
    Ok(ops)
}

/// The JSON Patch that applies `plan` to `pod`.
pub fn render(plan: &Plan<'_>, pod: &PodView<'_>) -> Result<Patch, InjectError> {
    render_ops(plan, pod)?.into_patch()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::EnvVar;
    use serde_json::json;

    use super::*;
    use crate::inject::{Decision, Extras, NATIVE_SIDECAR_ANNOTATION, plan};
    use crate::template::Template;

    const TEMPLATE: &str = "
containers:
- name: proxy
  image: envoy
  ports: [{containerPort: 15001}]
initContainers:
- name: init-net
  image: busybox
volumes:
- name: envoy-config
  configMap: {name: envoy}
imagePullSecrets:
- name: registry
volumeMounts:
- name: envoy-config
  mountPath: /etc/envoy
";

    /// What admission sends (the operations serialised) is what the applied patch says,
    /// whether an entry is the template's prepared JSON or changed for this Pod.
    /// A Pod the compiled policies marked refused (compiled from other templates, during
    /// a change) and the webhook injects loses the mark: it would be denied for it.
    #[test]
    fn an_injection_takes_the_refusal_mark_out() {
        let template = Template::parse("config", TEMPLATE, crate::template::KubeVersion::NEWEST).unwrap();
        let pod = json!({"metadata": {"labels": {REFUSED_LABEL: "true", "app": "web"},
                                      "annotations": {REFUSED_ANNOTATION: "template `old` ...", "a": "b"}},
                         "spec": {"containers": [{"name": "app"}]}});
        let view = PodView::read(&pod);
        let Decision::Inject(plan) = plan(&view, &template, &Extras::default()).unwrap() else {
            panic!("expected an injection")
        };
        let mut out = pod.clone();
        json_patch::patch(&mut out, &render(&plan, &view).unwrap()).unwrap();
        assert_eq!(out["metadata"]["labels"].get(REFUSED_LABEL), None, "{out}");
        assert_eq!(out["metadata"]["annotations"].get(REFUSED_ANNOTATION), None, "{out}");
        assert_eq!(out["metadata"]["labels"]["app"], "web");
        assert_eq!(out["metadata"]["annotations"]["a"], "b");
    }

    #[test]
    fn the_sent_operations_are_the_patch_that_applies() {
        let template = Template::parse("config", TEMPLATE, crate::template::KubeVersion::NEWEST).unwrap();
        let network_env = Extras {
            sidecar_env: vec![EnvVar {
                name: "NETWORK".into(),
                value: Some("net1".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        for native in ["true", "false"] {
            for extras in [Extras::default(), network_env.clone()] {
                for pod in [
                    json!({"metadata": {"annotations": {NATIVE_SIDECAR_ANNOTATION: native}}, "spec": {"containers": [{"name": "app"}]}}),
                    json!({"metadata": {"annotations": {NATIVE_SIDECAR_ANNOTATION: native}}, "spec": {
                        "containers": [{"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                        "initContainers": [{"name": "migrate"}], "volumes": [{"name": "data", "emptyDir": {}}],
                        "imagePullSecrets": [{"name": "other"}]}}),
                ] {
                    let view = PodView::read(&pod);
                    let Decision::Inject(plan) = plan(&view, &template, &extras).unwrap() else {
                        panic!("expected an injection of {pod}")
                    };
                    let ops = render_ops(&plan, &view).unwrap();
                    let sent: Value = serde_json::from_slice(&serde_json::to_vec(&ops).unwrap()).unwrap();
                    let patch = ops.into_patch().unwrap();
                    assert_eq!(
                        sent,
                        serde_json::to_value(&patch).unwrap(),
                        "native {native}, {extras:?}"
                    );
                    let mut out = pod.clone();
                    json_patch::patch(&mut out, &patch).unwrap();
                    let sidecar = if native == "true" {
                        &out["spec"]["initContainers"][1]
                    } else {
                        &out["spec"]["containers"][1]
                    };
                    assert_eq!(sidecar["name"], "proxy", "{out}");
                    assert_eq!(sidecar["ports"][0]["containerPort"], 15001);
                    assert_eq!(sidecar["restartPolicy"] == "Always", native == "true", "{sidecar}");
                    assert_eq!(
                        sidecar["env"][0]["value"] == "net1",
                        !extras.sidecar_env.is_empty(),
                        "{sidecar}"
                    );
                    assert_eq!(
                        out["spec"]["containers"][0]["volumeMounts"]
                            .as_array()
                            .unwrap()
                            .last()
                            .unwrap()["mountPath"],
                        "/etc/envoy"
                    );
                }
            }
        }
    }
}
