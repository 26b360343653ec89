//! The JSON Patch a template's MutatingAdmissionPolicy applies, in CEL: the same
//! additions `inject::jsonpatch` renders for the webhook, built from the same prepared
//! JSON, with the same status annotation and revision label.

use json_patch::jsonptr::Token;
use k8s_openapi::api::admissionregistration::v1::Variable;
use serde_json::Value;

use super::cel::{self, Concat, hole};
use super::ops::{container_path, op};
use super::variables::{self, ANNOTATIONS, CONTAINERS, OVERRIDE_KEYS, POD_VOLUME_NAMES, Scope};
use crate::inject::{OVERRIDE_PREFIX, REVISION_LABEL, STATUS_ANNOTATION, revision_label_value};
use crate::template::{Bound, Override, Template};

/// The mutation's words turning a list of operation maps (`ops`) into `JSONPatch` values.
pub fn operations(ops: &str) -> String {
    format!(
        "{ops}.map(o, has(o.value) ? JSONPatch{{op: string(o.op), path: string(o.path), value: o.value}} : JSONPatch{{op: string(o.op), path: string(o.path)}})"
    )
}

/// A JSON Pointer of fixed tokens, escaped (`~0`, `~1`).
fn pointer(tokens: &[&str]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", Token::new(*t).encoded()))
        .collect()
}

fn add(path: &str, value: &str) -> String {
    op("add", path, value)
}

fn list(ops: &[String]) -> String {
    format!("[{}]", ops.join(",\n"))
}

/// `[0, 1, ..., n-1]`.
fn indices(n: usize) -> String {
    let items: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    format!("[{}]", items.join(", "))
}

fn json_list(items: &[Box<serde_json::value::RawValue>]) -> Vec<Value> {
    items
        .iter()
        .map(|raw| serde_json::from_str(raw.get()).unwrap_or(Value::Null))
        .collect()
}

/// The variables the patch of one template (`scope`) reads: whether its sidecars go in
/// as native sidecars, and what it adds that the Pod does not have.
pub fn variables(template: &Template, scope: &Scope) -> Vec<Variable> {
    let spec = &template.spec;
    let volume_names = cel::strings(spec.volumes.iter().map(|v| v.name.as_str()));
    let secret_names = cel::strings(spec.image_pull_secrets.iter().map(|s| s.name.as_str()));
    let mount_paths = cel::strings(spec.volume_mounts.iter().map(|m| m.mount_path.as_str()));
    vec![
        scope.variable("native", variables::native(template)),
        scope.variable(
            "addedVolumes",
            format!(
                "{}.filter(i, !({volume_names}[i] in {POD_VOLUME_NAMES}))",
                indices(spec.volumes.len())
            ),
        ),
        scope.variable(
            "addedVolumeNames",
            format!("{}.map(i, {volume_names}[i])", scope.get("addedVolumes")),
        ),
        scope.variable(
            "addedSecrets",
            format!(
                "{}.filter(i, !({secret_names}[i] in (has(object.spec.imagePullSecrets) ? object.spec.imagePullSecrets.map(s, s.name) : [])))",
                indices(spec.image_pull_secrets.len())
            ),
        ),
        // Per app container, the template mounts it gets: those at a path it leaves free.
        scope.variable(
            "appMounts",
            format!(
                "{CONTAINERS}.map(c, {}.filter(m, !(has(c.volumeMounts) && c.volumeMounts.exists(vm, vm.mountPath == {mount_paths}[m]))))",
                indices(spec.volume_mounts.len())
            ),
        ),
    ]
}

/// Every addition of one template (`scope`): the operations the policy's one mutation
/// returns when the template injects the Pod, as maps (`op`, `path`, `value`), since a
/// variable cannot hold `JSONPatch` values ([`OPERATIONS`] turns them into those).
pub fn additions(template: &Template, scope: &Scope) -> String {
    let parts = [
        init_containers(template, scope),
        containers(template, scope),
        overrides(template, scope),
        super::pod_values::additions(template, scope),
        // After the overrides: the class keeps what they set, or changes it.
        scope.get("resourceOps"),
        volumes(template, scope),
        image_pull_secrets(template, scope),
        app_mounts(template, scope),
        metadata("annotations", STATUS_ANNOTATION, &status(template, scope)),
        match revision_label_value(&template.revision) {
            Some(revision) => metadata("labels", REVISION_LABEL, &cel::string(revision)),
            None => String::from("[]"),
        },
    ];
    format!("(\n{}\n)", parts.join("\n+ "))
}

/// The template's init containers, then (native) its sidecars, at the front of
/// `spec.initContainers` in that order. A Pod without the list gets an empty one first
/// and then each entry appended: the API server fails on a whole list added at once.
fn init_containers(template: &Template, scope: &Scope) -> String {
    let prepared = &template.prepared;
    let inits = json_list(&prepared.init_containers);
    let natives = json_list(&prepared.native_containers_json);
    let front = |entries: &[Value]| -> String {
        if entries.is_empty() {
            return String::from("[]");
        }
        let at: Vec<String> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| add(&cel::string(&format!("/spec/initContainers/{i}")), &cel::value(e)))
            .collect();
        let mut fresh = vec![add(&cel::string("/spec/initContainers"), "[]")];
        fresh.extend(
            entries
                .iter()
                .map(|e| add(&cel::string("/spec/initContainers/-"), &cel::value(e))),
        );
        format!("(has(object.spec.initContainers) ? {} : {})", list(&at), list(&fresh))
    };
    let with_natives: Vec<Value> = inits.iter().chain(&natives).cloned().collect();
    format!(
        "({} ? {} : {})",
        scope.get("native"),
        front(&with_natives),
        front(&inits)
    )
}

/// The template's sidecars appended to `spec.containers` (when not native).
fn containers(template: &Template, scope: &Scope) -> String {
    let ops: Vec<String> = json_list(&template.prepared.containers)
        .iter()
        .map(|c| add(&cel::string("/spec/containers/-"), &cel::value(c)))
        .collect();
    if ops.is_empty() {
        return String::from("[]");
    }
    format!("({} ? [] : {})", scope.get("native"), list(&ops))
}

/// A change an override makes to its container's JSON: a map or list to create first
/// (where the template has none), or a value to set or take away.
#[derive(Debug, Clone, PartialEq)]
enum Change {
    CreateMap(Vec<String>),
    CreateList(Vec<String>),
    Add(Vec<String>, Value),
    Replace(Vec<String>, Value),
    Append(Vec<String>, Value),
    Remove(Vec<String>),
}

/// What turns `before` into `after`, as JSON Patch steps that never replace a whole map
/// or list another override may also add to.
fn changes(before: &Value, after: &Value, at: &[String], out: &mut Vec<Change>) {
    let here = |key: &str| -> Vec<String> { at.iter().cloned().chain([key.to_string()]).collect() };
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (key, value) in a {
                match b.get(key) {
                    Some(old) if old == value => {}
                    Some(old) => changes(old, value, &here(key), out),
                    None => match value {
                        Value::Object(_) => {
                            out.push(Change::CreateMap(here(key)));
                            changes(&Value::Object(Default::default()), value, &here(key), out);
                        }
                        Value::Array(_) => {
                            out.push(Change::CreateList(here(key)));
                            changes(&Value::Array(Vec::new()), value, &here(key), out);
                        }
                        _ => out.push(Change::Add(here(key), value.clone())),
                    },
                }
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(Change::Remove(here(key)));
            }
        }
        (Value::Array(b), Value::Array(a)) if a.len() == b.len() + 1 && a[..b.len()] == b[..] => {
            out.push(Change::Append(at.to_vec(), a[b.len()].clone()));
        }
        (Value::Array(b), Value::Array(a)) if a.len() == b.len() => {
            for (i, (old, new)) in b.iter().zip(a).enumerate() {
                if old != new {
                    changes(old, new, &here(&i.to_string()), out);
                }
            }
        }
        _ => out.push(Change::Replace(at.to_vec(), after.clone())),
    }
}

/// Each override the Pod may ask for, applied as the webhook applies it
/// (`Override::apply` on the template's container, with a hole for the value), guarded
/// by the Pod's annotation. Maps and lists the template lacks are created once, before
/// the values, when any override needing them is asked for.
fn overrides(template: &Template, scope: &Scope) -> String {
    let value_hole = hole(1);
    // (guard, container path, where, `{}` or `[]`): each created once, whoever needs it.
    let mut creations: Vec<(String, String, Vec<String>, &str)> = Vec::new();
    let mut values: Vec<String> = Vec::new();
    for decl in template.overrides.iter() {
        let Some(container) = template
            .spec
            .init_containers
            .iter()
            .chain(&template.spec.containers)
            .find(|c| c.name == decl.container)
        else {
            continue;
        };
        let mut changed = container.clone();
        decl.apply(&mut changed, &value_hole);
        let (Ok(before), Ok(after)) = (serde_json::to_value(container), serde_json::to_value(&changed)) else {
            continue;
        };
        let mut steps = Vec::new();
        changes(&before, &after, &[], &mut steps);
        let asked = format!("{} in {ANNOTATIONS}", annotation_key(decl));
        let base = container_path(template, scope, &decl.container);
        let value = format!("{ANNOTATIONS}[{}]", annotation_key(decl));
        let mut ops = Vec::new();
        for step in steps {
            let (at, empty) = match step {
                Change::CreateMap(at) => (at, "{}"),
                Change::CreateList(at) => (at, "[]"),
                Change::Add(at, v) => {
                    ops.push(add(&path(&base, &at), &filled(&v, &value_hole, &value)));
                    continue;
                }
                Change::Replace(at, v) => {
                    ops.push(op("replace", &path(&base, &at), &filled(&v, &value_hole, &value)));
                    continue;
                }
                Change::Append(mut at, v) => {
                    at.push(String::from("-"));
                    ops.push(add(&path(&base, &at), &filled(&v, &value_hole, &value)));
                    continue;
                }
                Change::Remove(at) => {
                    ops.push(format!(
                        "{{\"op\": dyn(\"remove\"), \"path\": dyn({})}}",
                        path(&base, &at)
                    ));
                    continue;
                }
            };
            match creations.iter_mut().find(|(_, b, a, _)| *b == base && *a == at) {
                Some((guard, _, _, _)) => *guard = format!("{guard} || {asked}"),
                None => creations.push((asked.clone(), base.clone(), at, empty)),
            }
        }
        if !ops.is_empty() {
            values.push(format!("({asked} ? {} : [])", list(&ops)));
        }
    }
    // Creations go first, parents before children.
    creations.sort_by_key(|(_, _, at, _)| at.len());
    let mut parts: Vec<String> = creations
        .into_iter()
        .map(|(guard, base, at, empty)| format!("({guard} ? [{}] : [])", add(&path(&base, &at), empty)))
        .collect();
    parts.extend(values);
    if parts.is_empty() {
        return String::from("[]");
    }
    // A Pod without override annotations (most) pays one size check.
    format!("(size({OVERRIDE_KEYS}) == 0 ? [] : ({}))", parts.join(" + "))
}

fn annotation_key(decl: &Override) -> String {
    cel::string(&format!("{OVERRIDE_PREFIX}{}", decl.name))
}

/// `base` (a CEL string expression) followed by the escaped tokens `at`.
fn path(base: &str, at: &[String]) -> String {
    let tokens: Vec<&str> = at.iter().map(String::as_str).collect();
    let suffix = tokens
        .iter()
        .map(|t| if *t == "-" { String::from("/-") } else { pointer(&[t]) })
        .collect::<String>();
    format!("{base} + {}", cel::string(&suffix))
}

/// A CEL literal of `json` with every string holding the hole filled by `value`.
fn filled(json: &Value, hole: &str, value: &str) -> String {
    match json {
        Value::String(s) if s.contains(hole) => cel::words(s, &[(hole, value)]),
        Value::Array(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|v| format!("dyn({})", filled(v, hole, value)))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(members) => {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}: dyn({})", cel::string(k), filled(v, hole, value)))
                .collect();
            format!("{{{}}}", members.join(", "))
        }
        other => cel::value(other),
    }
}

/// Template entries the Pod lacks by name, appended to `spec.<field>`.
fn append_missing(field: &str, entries: &[Value], added: &str) -> String {
    if entries.is_empty() {
        return String::from("[]");
    }
    let values: Vec<String> = entries.iter().map(cel::value).collect();
    format!(
        "(has(object.spec.{field}) || size({added}) == 0 ? [] : [{}]) + {added}.map(i, {})",
        add(&cel::string(&format!("/spec/{field}")), "[]"),
        add(
            &cel::string(&format!("/spec/{field}/-")),
            &format!("[{}][i]", values.join(", "))
        )
    )
}

fn volumes(template: &Template, scope: &Scope) -> String {
    append_missing(
        "volumes",
        &json_list(&template.prepared.volumes),
        &scope.get("addedVolumes"),
    )
}

fn image_pull_secrets(template: &Template, scope: &Scope) -> String {
    append_missing(
        "imagePullSecrets",
        &json_list(&template.prepared.image_pull_secrets),
        &scope.get("addedSecrets"),
    )
}

/// The template's mounts, in each app container at a path it leaves free.
fn app_mounts(template: &Template, scope: &Scope) -> String {
    let mounts = json_list(&template.prepared.volume_mounts);
    if mounts.is_empty() {
        return String::from("[]");
    }
    let values: Vec<String> = mounts.iter().map(cel::value).collect();
    let app_mounts = scope.get("appMounts");
    let container = "\"/spec/containers/\" + string(i) + \"/volumeMounts\"";
    format!(
        "lists.range(size({CONTAINERS})).map(i, (has({CONTAINERS}[i].volumeMounts) || size({app_mounts}[i]) == 0 ? [] : [{}]) + {app_mounts}[i].map(m, {})).flatten()",
        add(container, "[]"),
        add(&format!("{container} + \"/-\""), &format!("[{}][m]", values.join(", ")))
    )
}

/// `key` set in `metadata.<map>` (created when the Pod has none).
fn metadata(map: &str, key: &str, value: &str) -> String {
    format!(
        "(has(object.metadata.{map}) ? [] : [{}]) + [{}]",
        add(&cel::string(&format!("/metadata/{map}")), "{}"),
        add(&cel::string(&pointer(&["metadata", map, key])), value)
    )
}

/// The status annotation, written as `inject::InjectionStatus` serialises: the same
/// members in the same order, so `check`, `uninject` and the gauges read it unchanged.
fn status(template: &Template, scope: &Scope) -> String {
    let native = scope.get("native");
    let (added_volumes, added_volume_names, added_secrets, app_mounts) = (
        scope.get("addedVolumes"),
        scope.get("addedVolumeNames"),
        scope.get("addedSecrets"),
        scope.get("appMounts"),
    );
    let spec = &template.spec;
    let names = |items: &mut dyn Iterator<Item = &str>| -> String {
        items.map(|n| Value::from(n).to_string()).collect::<Vec<_>>().join(",")
    };
    let sidecars = names(&mut spec.containers.iter().map(|c| c.name.as_str()));
    let inits = names(&mut spec.init_containers.iter().map(|c| c.name.as_str()));
    let inits_native = names(
        &mut spec
            .init_containers
            .iter()
            .chain(&spec.containers)
            .map(|c| c.name.as_str()),
    );
    let json_names = |items: Vec<&str>| -> String {
        let items: Vec<String> = items.into_iter().map(cel::json_string).collect();
        format!("[{}]", items.join(", "))
    };
    let volume_json = json_names(spec.volumes.iter().map(|v| v.name.as_str()).collect());
    let secret_json = json_names(spec.image_pull_secrets.iter().map(|s| s.name.as_str()).collect());
    let mount_volumes = cel::strings(spec.volume_mounts.iter().map(|m| m.name.as_str()));
    let mount_paths = json_names(spec.volume_mounts.iter().map(|m| m.mount_path.as_str()).collect());
    let mounts = if spec.volume_mounts.is_empty() {
        None
    } else {
        Some(format!(
            "[lists.range(size({CONTAINERS})).map(i, {app_mounts}[i].filter(m, !({mount_volumes}[m] in {added_volume_names})).map(m, \"{{\\\"container\\\":\\\"\" + {CONTAINERS}[i].name + \"\\\",\\\"mountPath\\\":\" + {mount_paths}[m] + \"}}\")).flatten()].map(r, size(r) > 0 ? \",\\\"volumeMounts\\\":[\" + r.join(\",\") + \"]\" : \"\")[0]"
        ))
    };
    let overrides: Vec<String> = template
        .overrides
        .iter()
        .map(|decl| {
            let key = annotation_key(decl);
            let value = format!("{ANNOTATIONS}[{key}]");
            let json = match &decl.bound {
                // The value is one of these (else no injection): their JSON, looked up.
                Bound::OneOf(allowed) => {
                    let entries: Vec<String> = allowed
                        .iter()
                        .map(|v| format!("{}: {}", cel::string(v), cel::json_string(v)))
                        .collect();
                    format!("{{{}}}[{value}]", entries.join(", "))
                }
                // A quantity has no character JSON escapes.
                Bound::Range { .. } => format!("\"\\\"\" + {value} + \"\\\"\""),
            };
            format!(
                "({key} in {ANNOTATIONS} ? {} + {json} : \"\")",
                cel::string(&format!("{}:", Value::from(decl.name.as_str())))
            )
        })
        .collect();
    let overrides = if overrides.is_empty() {
        None
    } else {
        Some(format!(
            "(size({OVERRIDE_KEYS}) == 0 ? \"\" : [[{}].filter(o, o != \"\")].map(r, size(r) > 0 ? \",\\\"overrides\\\":{{\" + r.join(\",\") + \"}}\" : \"\")[0])",
            overrides.join(", ")
        ))
    };
    let pod_resources = Some(scope.get("resourceStatus"));
    let head = format!(
        "{{\"template\":{},\"revision\":{},\"containers\":[",
        Value::from(template.name.as_str()),
        Value::from(template.revision.as_str())
    );
    // Written once for each value of `native`, so that what the template fixes is one
    // literal; what the template does not have is the empty list it is.
    let added = |names: &str, added: &str| (names != "[]").then(|| format!("{added}.map(i, {names}[i]).join(\",\")"));
    let (volumes, secrets) = (added(&volume_json, &added_volumes), added(&secret_json, &added_secrets));
    let written = |as_native: bool| {
        let mut text = Concat::default()
            .text(&head)
            .text(if as_native { "" } else { &sidecars })
            .text("],\"initContainers\":[")
            .text(if as_native { &inits_native } else { &inits })
            .text("],\"volumes\":[");
        if let Some(volumes) = &volumes {
            text = text.expression(volumes.clone());
        }
        text = text.text("],\"imagePullSecrets\":[");
        if let Some(secrets) = &secrets {
            text = text.expression(secrets.clone());
        }
        text = text.text(if as_native {
            "],\"nativeSidecar\":true"
        } else {
            "],\"nativeSidecar\":false"
        });
        for part in [&mounts, &overrides, &pod_resources].into_iter().flatten() {
            text = text.expression(part.clone());
        }
        text.text("}").build()
    };
    format!("({native} ? {} : {})", written(true), written(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_create_what_is_missing_and_set_values() {
        let mut out = Vec::new();
        changes(
            &json!({"name": "envoy", "env": [{"name": "A", "value": "1"}]}),
            &json!({"name": "envoy", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "x"}], "resources": {"limits": {"cpu": "x"}}}),
            &[],
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                Change::Append(vec!["env".into()], json!({"name": "B", "value": "x"})),
                Change::CreateMap(vec!["resources".into()]),
                Change::CreateMap(vec!["resources".into(), "limits".into()]),
                Change::Add(vec!["resources".into(), "limits".into(), "cpu".into()], json!("x")),
            ]
        );
    }

    #[test]
    fn a_replaced_env_var_loses_what_it_had() {
        let mut out = Vec::new();
        changes(
            &json!({"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}),
            &json!({"env": [{"name": "A", "value": "v"}]}),
            &[],
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                Change::Add(vec!["env".into(), "0".into(), "value".into()], json!("v")),
                Change::Remove(vec!["env".into(), "0".into(), "valueFrom".into()]),
            ]
        );
    }
}
