//! Drift: an injected Pod whose stored sidecar is not what the live template makes of it,
//! though the Pod records the live revision. Something changed it after our injection — a
//! mutating webhook called after ours that re-serialises Pods and drops a native sidecar's
//! `restartPolicy: Always`, rewrites images, removes a mount — or a hand edit of the
//! manifest. Pure: the stored Pod and the live templates in, the differences out.
//!
//! What the template makes of the Pod is the engine's own answer: the recorded injection
//! is taken out again (`inject::uninject`, as the status annotation records it), and the
//! plan of the live template for that Pod (`inject::plan`, its overrides and native-sidecar
//! choice included) is compared with what is stored, field by field and only for the
//! fields the plan sets: what the API server fills in (defaults, a Network's env, a token
//! volume) is not drift. A Pod on another revision is stale, not drifted.

use serde::Serialize;
use serde_json::{Map, Value};

use super::health::{Check, Status};
use crate::inject::{self, Decision, Extras, InjectionStatus, PodView, STATUS_ANNOTATION};
use crate::template::TemplateSet;
use crate::template::quantity::Quantity;

/// One field the plan sets whose stored value differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// The field, with list items named by their key: `initContainers[envoy].restartPolicy`,
    /// `containers[app].volumeMounts[/etc/envoy]`.
    pub field: String,
    /// What the live template sets.
    pub expected: Value,
    /// What the Pod has; `None` when the field is absent.
    pub found: Option<Value>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let found = self
            .found
            .as_ref()
            .map_or_else(|| String::from("none"), Value::to_string);
        write!(f, "{}: expected {}, found {found}", self.field, self.expected)
    }
}

/// Where an injected Pod stands against the live templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// No status annotation: not injected.
    NotInjected,
    /// Recorded at another revision than the live template's (or the template is gone).
    Stale,
    /// At the live revision, and the sidecar is what the template makes.
    InStep,
    /// At the live revision, with these differences.
    Drifted(Vec<Difference>),
    /// At the live revision, but the comparison cannot be made (and why).
    Unknown(String),
}

/// Where `pod` (the stored object, as JSON) stands against `live`.
pub fn standing(pod: &Value, live: &TemplateSet) -> Standing {
    let recorded = pod
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .and_then(|a| a.get(STATUS_ANNOTATION));
    let Some(recorded) = recorded else {
        return Standing::NotInjected;
    };
    let Some(status) = recorded
        .as_str()
        .and_then(|text| serde_json::from_str::<InjectionStatus>(text).ok())
    else {
        return Standing::Unknown(format!(
            "annotation `{STATUS_ANNOTATION}` is not the JSON the injector writes"
        ));
    };
    let Some(template) = live.get(&status.template).filter(|t| t.revision == status.revision) else {
        return Standing::Stale;
    };
    let pristine = match without_injection(pod) {
        Ok(pristine) => pristine,
        Err(why) => return Standing::Unknown(why),
    };
    let view = PodView::read(&pristine);
    let plan = match inject::plan(&view, template, &Extras::default()) {
        Ok(Decision::Inject(plan)) => plan,
        Ok(Decision::Skip(skip)) => {
            return Standing::Unknown(format!(
                "without its recorded injection the Pod would not be injected again ({skip})"
            ));
        }
        Err(err) => {
            return Standing::Unknown(format!(
                "template `{}` would refuse the Pod without its recorded injection: {err}",
                template.name
            ));
        }
    };
    let spec = pod.pointer("/spec").and_then(Value::as_object);
    let empty = Map::new();
    let spec = spec.unwrap_or(&empty);
    let mut differences = Vec::new();
    let lists = [
        ("initContainers", "containers", &plan.init_containers),
        ("containers", "initContainers", &plan.containers),
    ];
    for (list, other, added) in lists {
        for container in added.iter() {
            let expected = to_value(container);
            let field = format!("{list}[{}]", container.name);
            match named(spec, list, &container.name) {
                Some(stored) => compare(&field, &expected, stored, &mut differences),
                None if named(spec, other, &container.name).is_some() => differences.push(Difference {
                    field,
                    expected: Value::String(format!("container `{}` in `{list}`", container.name)),
                    found: Some(Value::String(format!("it in `{other}`"))),
                }),
                None => differences.push(Difference {
                    field,
                    expected,
                    found: None,
                }),
            }
        }
    }
    for volume in &plan.volumes {
        let field = format!("volumes[{}]", volume.name);
        let expected = to_value(volume);
        match named(spec, "volumes", &volume.name) {
            Some(stored) => compare(&field, &expected, stored, &mut differences),
            None => differences.push(Difference {
                field,
                expected,
                found: None,
            }),
        }
    }
    for secret in &plan.image_pull_secrets {
        if named(spec, "imagePullSecrets", &secret.name).is_none() {
            differences.push(Difference {
                field: format!("imagePullSecrets[{}]", secret.name),
                expected: to_value(secret),
                found: None,
            });
        }
    }
    for mount in &plan.app_mounts {
        let field = format!(
            "containers[{}].volumeMounts[{}]",
            mount.container_name, mount.mount.mount_path
        );
        let expected = to_value(&mount.mount);
        let stored = named(spec, "containers", &mount.container_name)
            .and_then(|c| c.get("volumeMounts"))
            .and_then(Value::as_array)
            .and_then(|mounts| {
                mounts
                    .iter()
                    .find(|m| m.get("mountPath").and_then(Value::as_str) == Some(mount.mount.mount_path.as_str()))
            });
        match stored {
            Some(stored) => compare(&field, &expected, stored, &mut differences),
            None => differences.push(Difference {
                field,
                expected,
                found: None,
            }),
        }
    }
    if differences.is_empty() {
        Standing::InStep
    } else {
        Standing::Drifted(differences)
    }
}

/// One injected Pod at its template's live revision whose sidecar differs from what the
/// template makes of it (`check --drift`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftedPod {
    pub namespace: String,
    pub name: String,
    /// The workload that owns it (`Deployment apps/web`); `None` when nothing does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    pub template: String,
    pub revision: String,
    /// Each field that differs; empty when `unknown` says why it could not be compared.
    pub differences: Vec<Difference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

/// The Pods among `pods` (stored objects, as JSON) that drifted from `live`, or that are
/// at the live revision but cannot be compared; `owner` names each one's workload, if any.
pub fn drifted<'p>(
    pods: impl IntoIterator<Item = &'p Value>,
    live: &TemplateSet,
    owner: impl Fn(&Value) -> Option<String>,
) -> Vec<DriftedPod> {
    let text = |pod: &Value, pointer: &str| {
        pod.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut out: Vec<DriftedPod> = pods
        .into_iter()
        .filter_map(|pod| {
            let (differences, unknown) = match standing(pod, live) {
                Standing::Drifted(differences) => (differences, None),
                Standing::Unknown(why) => (Vec::new(), Some(why)),
                Standing::NotInjected | Standing::Stale | Standing::InStep => return None,
            };
            let status = pod
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(STATUS_ANNOTATION))
                .and_then(Value::as_str)
                .and_then(|s| serde_json::from_str::<InjectionStatus>(s).ok());
            Some(DriftedPod {
                namespace: text(pod, "/metadata/namespace"),
                name: text(pod, "/metadata/name"),
                workload: owner(pod),
                template: status.as_ref().map(|s| s.template.clone()).unwrap_or_default(),
                revision: status.map(|s| s.revision).unwrap_or_default(),
                differences,
                unknown,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// The `sidecar-drift` line of `check --drift`: failing when a Pod drifted.
pub fn check_line(drifted: &[DriftedPod], scope: Option<&str>) -> Check {
    let place = scope.map_or_else(|| String::from("in any namespace"), |ns| format!("in namespace {ns}"));
    let differ = drifted.iter().filter(|d| d.unknown.is_none()).count();
    let unknown = drifted.len() - differ;
    let not_compared = if unknown == 0 {
        String::new()
    } else {
        format!("; {unknown} Pod(s) at the live revision could not be compared (listed below, with why)")
    };
    if differ == 0 {
        return Check::new(
            CHECK,
            Status::Ok,
            format!(
                "every injected Pod {place} at its template's live revision carries what the template makes{not_compared}"
            ),
        );
    }
    Check::new(
        CHECK,
        Status::Fail,
        format!(
            "{differ} injected Pod(s) {place} carry a sidecar that differs from what their live template makes (changed after injection: listed below, field by field){not_compared}"
        ),
    )
}

/// The check's name.
pub const CHECK: &str = "sidecar-drift";

/// The Pod as it was before the injection its status annotation records.
fn without_injection(pod: &Value) -> Result<Value, String> {
    let cannot = |why: String| format!("cannot take the recorded injection out to compare: {why}");
    let removal = inject::uninject::removal(pod)
        .map_err(|err| cannot(err.to_string()))?
        .ok_or_else(|| cannot(String::from("no status annotation")))?;
    let mut pristine = pod.clone();
    json_patch::patch(&mut pristine, &removal.patch).map_err(|err| cannot(err.to_string()))?;
    // A sidecar moved to the other list since (a native one made regular) is still the
    // injection's: taken out by name, so the plan compares it with where it belongs.
    let ours: Vec<&String> = removal
        .status
        .containers
        .iter()
        .chain(&removal.status.init_containers)
        .collect();
    for list in ["containers", "initContainers"] {
        if let Some(items) = pristine
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        {
            items.retain(|c| {
                !c.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| ours.iter().any(|o| *o == n))
            });
        }
    }
    Ok(pristine)
}

fn to_value<T: Serialize>(item: &T) -> Value {
    // Kubernetes types of plain strings, numbers and maps: serialising cannot fail.
    serde_json::to_value(item).unwrap_or_default()
}

/// The item of `spec.<list>` named `name`.
fn named<'p>(spec: &'p Map<String, Value>, list: &str, name: &str) -> Option<&'p Value> {
    spec.get(list)?
        .as_array()?
        .iter()
        .find(|item| item.get("name").and_then(Value::as_str) == Some(name))
}

/// The key that names the items of a list the template writes, when every item has it.
const ITEM_KEYS: [&str; 5] = ["name", "mountPath", "devicePath", "containerPort", "ip"];

fn item_key(items: &[Value]) -> Option<&'static str> {
    ITEM_KEYS
        .into_iter()
        .find(|key| !items.is_empty() && items.iter().all(|item| item.get(*key).is_some()))
}

fn key_text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_string)
}

/// Pushes a [`Difference`] for each field `expected` sets that `found` does not hold.
fn compare(field: &str, expected: &Value, found: &Value, out: &mut Vec<Difference>) {
    match (expected, found) {
        (Value::Object(want), Value::Object(have)) => {
            for (key, want) in want {
                let field = format!("{field}.{key}");
                match have.get(key) {
                    Some(have) => compare(&field, want, have, out),
                    None if want.is_null() => {}
                    None => out.push(Difference {
                        field,
                        expected: want.clone(),
                        found: None,
                    }),
                }
            }
        }
        (Value::Array(want), Value::Array(have)) => match item_key(want) {
            // Keyed items (env by name, mounts by path, ports by number): each wanted one
            // is looked up, and items the API server or another writer added are not ours.
            Some(key) => {
                for item in want {
                    let id = item.get(key).cloned().unwrap_or_default();
                    let field = format!("{field}[{}]", key_text(&id));
                    match have.iter().find(|h| h.get(key) == Some(&id)) {
                        Some(stored) => compare(&field, item, stored, out),
                        None => out.push(Difference {
                            field,
                            expected: item.clone(),
                            found: None,
                        }),
                    }
                }
            }
            // Plain lists (a command, its args) are one value.
            None => {
                let mut inside = Vec::new();
                let same_length = want.len() == have.len();
                for (index, (w, h)) in want.iter().zip(have).enumerate() {
                    compare(&format!("{field}[{index}]"), w, h, &mut inside);
                }
                if !same_length || !inside.is_empty() {
                    out.push(Difference {
                        field: field.to_string(),
                        expected: expected.clone(),
                        found: Some(found.clone()),
                    });
                }
            }
        },
        (Value::String(want), Value::String(have)) if is_quantity(field) && same_quantity(want, have) => {}
        (want, have) if want == have => {}
        (want, have) => out.push(Difference {
            field: field.to_string(),
            expected: want.clone(),
            found: Some(have.clone()),
        }),
    }
}

/// A field that holds a quantity: the API server stores it in its own form (`0.5` as
/// `500m`, `1000m` as `1`), so it is compared by value.
fn is_quantity(field: &str) -> bool {
    field.contains(".resources.") || field.ends_with(".sizeLimit")
}

fn same_quantity(want: &str, have: &str) -> bool {
    matches!((Quantity::parse(want), Quantity::parse(have)), (Ok(w), Ok(h)) if w.cmp(&h).is_eq())
}

#[cfg(test)]
mod tests;
