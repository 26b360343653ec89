//! What `inject_object` is handed of an object, as JSON: its identity and, pruned to
//! what the engine reads ([`POD`]), its Pod. Converting a whole object (a ConfigMap's
//! data, a Deployment's env, probes and status) would be wasted work: the conversion and
//! the freeing of that JSON cost more than the injection itself.

use serde_json::Value as Json;

use super::kinds::{nest, pod_path};
use crate::yaml::node::{Node, Value};
use crate::yaml::prune::{Keep, pruned};

/// A container: what mounts, ports and names the engine compares with the template's,
/// and what the Pod-level raise and the QoS class are computed from.
static CONTAINER: Keep = Keep::Fields(&[
    ("name", Keep::All),
    ("volumeMounts", Keep::All),
    ("ports", Keep::All),
    ("resources", Keep::All),
    ("restartPolicy", Keep::All),
]);

/// All that the engine reads of a Pod (`inject::pod::Body` and what it reads whole: a
/// same-named volume). It must stay in step with that type; the tests below check that
/// the pruned Pod gets the same answer as the whole one on every corpus object.
pub static POD: Keep = Keep::Fields(&[
    ("apiVersion", Keep::All),
    ("kind", Keep::All),
    (
        "metadata",
        Keep::Fields(&[
            ("name", Keep::All),
            ("generateName", Keep::All),
            ("namespace", Keep::All),
            ("annotations", Keep::All),
            ("labels", Keep::All),
        ]),
    ),
    (
        "spec",
        Keep::Fields(&[
            ("containers", Keep::Each(&CONTAINER)),
            ("initContainers", Keep::Each(&CONTAINER)),
            // Whole: a same-named volume is compared field by field.
            ("volumes", Keep::All),
            ("imagePullSecrets", Keep::All),
            // On the node's network: left alone unless the template allows it.
            ("hostNetwork", Keep::All),
            // Pod-level resources, raised by what the injection adds.
            ("resources", Keep::All),
        ]),
    ),
]);

/// Kind, API version and name of an object: enough to name it in messages and to
/// decide on a kind that holds no Pod.
pub fn identity(node: &Node) -> Json {
    let text = |n: Option<&Node>| n.and_then(Node::as_str).map_or(Json::Null, Json::from);
    let metadata = node.get("metadata");
    let mut names = serde_json::Map::new();
    for key in ["name", "generateName"] {
        if let Some(name) = metadata.and_then(|m| m.get(key)).and_then(Node::as_str) {
            names.insert(key.to_string(), Json::from(name));
        }
    }
    serde_json::json!({
        "apiVersion": text(node.get("apiVersion")),
        "kind": text(node.get("kind")),
        "metadata": names,
    })
}

/// The engine's view of an object: a Pod pruned, a workload's identity with its Pod
/// template pruned, a kind that holds no Pod its identity only. An object without a
/// string `kind`, or a non-object, is converted whole for the error that names it.
pub fn engine_view(node: &Node) -> Json {
    let kind = node.get("kind").and_then(Node::as_str).filter(|k| !k.is_empty());
    let path = match kind.map(pod_path) {
        Some(Some("")) => return pruned(node, POD),
        Some(Some(path)) => path,
        Some(None) if matches!(node.value, Value::Map(_)) => return identity(node),
        _ => return node.to_json(),
    };
    let mut view = identity(node);
    if let (Some(pod), Json::Object(fields)) = (node.pointer(path), &mut view)
        && let Json::Object(pod_at_path) = nest(path, pruned(pod, POD))
    {
        fields.extend(pod_at_path);
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offline::{Renderings, inject_object};
    use crate::template::TemplateSet;
    use crate::yaml::read::read_documents;

    fn root(text: &str) -> Node {
        read_documents(text, 1).unwrap().remove(0).root.unwrap()
    }

    /// The engine decides, patches and names an object the same from its view as from
    /// the whole object, in both renderings, warnings and errors included.
    #[test]
    fn the_view_gets_the_same_outcome_as_the_whole_object() {
        let set = TemplateSet::embedded();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/offline");
        let mut objects = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for chunk in crate::yaml::split::YamlChunks::new(text.as_bytes()) {
                let chunk = chunk.unwrap();
                let Ok(documents) = read_documents(&chunk.text, chunk.first_line) else {
                    continue;
                };
                for mut document in documents {
                    document.unpack();
                    objects.extend(document.root);
                }
            }
        }
        objects.extend([
            root("kind: Deployment\nmetadata: {name: d}\nspec:\n  template: [1]\n"),
            root("kind: Deployment\nspec: {template: {spec: {containers: [{name: a, ports: [{containerPort: 15021}]}]}}}\n"),
            root("kind: Pod\nmetadata: {annotations: {sidecar.samplecrd.k8s.io/template: classic}}\nspec: {containers: [{name: a, ports: [{containerPort: 80}]}]}\n"),
            root("kind: Pod\nmetadata: {annotations: {sidecar.samplecrd.k8s.io/inject: maybe}}\nspec: {containers: [x]}\n"),
            root("kind: CronJob\nspec: {jobTemplate: {spec: {template: {spec: {containers: null}}}}}\n"),
            root("kind: Pod\nmetadata: {annotations: {sidecar.samplecrd.k8s.io/template: classic}}\nspec: {containers: [{name: a}], volumes: [{name: envoy-conf, emptyDir: {}}]}\n"),
            root("kind: 12\nspec: {}\n"),
            root("kind: Job\nspec: {template: {spec: {restartPolicy: Never, containers: [{name: a}]}}}\n"),
            root("kind: Job\nspec: {template: {spec: {restartPolicy: [Never], containers: [{name: a}]}}}\n"),
            root("kind: Pod\nspec: {restartPolicy: OnFailure, containers: [{name: a}]}\n"),
            root("kind: Pod\nspec: {resources: {limits: {cpu: 500m}}, containers: [{name: a, resources: {requests: {cpu: 1m}}}]}\n"),
            root("kind: Pod\nspec: {resources: {requests: {cpu: 1}}, initContainers: [{name: i, restartPolicy: Always, resources: {requests: {cpu: 2}}}], containers: [{name: a}]}\n"),
            root("kind: Pod\nspec: {containers: [{name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}]}\n"),
            root("kind: Pod\nspec: {resources: {requests: [cpu]}, containers: [{name: a}]}\n"),
        ]);
        assert!(objects.len() > 20, "{}", objects.len());
        let mut refused = 0;
        for object in &objects {
            let whole = object.to_json();
            let view = engine_view(object);
            assert_ne!(view, Json::Null);
            for renderings in [Renderings::JsonPatch, Renderings::JsonPatchAndStrategic] {
                let outcome = |json: &Json| match inject_object("d", json, &set, renderings) {
                    Ok(o) => Ok((
                        serde_json::to_value(&o.json_patch).unwrap(),
                        o.strategic,
                        o.skipped,
                        o.warnings,
                    )),
                    Err(e) => Err(e.to_string()),
                };
                assert_eq!(outcome(&view), outcome(&whole), "{whole}");
                refused += usize::from(outcome(&whole).is_err());
            }
            assert_eq!(crate::offline::describe(&view), crate::offline::describe(&whole));
        }
        // Refusals are compared too: port and volume collisions, wrong shapes.
        assert!(refused >= 2 * 6, "only {refused} refusals");
    }

    #[test]
    fn pruning_keeps_only_what_the_engine_reads() {
        let pod = root(
            "kind: Pod\nmetadata: {name: p, uid: x, labels: {a: b}}\nspec:\n  nodeName: n\n  restartPolicy: Never\n  containers:\n  - {name: a, image: i, env: [{name: E}], ports: [{containerPort: 80}]}\n  - text\nstatus: {phase: Pending}\n",
        );
        assert_eq!(
            engine_view(&pod),
            serde_json::json!({"kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
                               "spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80}]}, "text"]}})
        );
    }
}
