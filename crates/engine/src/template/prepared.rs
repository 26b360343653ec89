//! A template's additions serialised to JSON once, when the template is loaded: admission
//! copies these bytes into every patch instead of re-serialising typed containers per Pod.
//! The containers also in the form a BestEffort Pod gets them, the most common Pod of all.

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use serde::Serialize;
use serde_json::value::RawValue;

use super::spec::TemplateSpec;

/// `spec`'s entries as JSON, index for index, plus the native-sidecar form of the
/// containers (`restartPolicy: Always`), typed and as JSON.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub containers: Vec<Box<RawValue>>,
    pub native_containers: Vec<Container>,
    pub native_containers_json: Vec<Box<RawValue>>,
    pub init_containers: Vec<Box<RawValue>>,
    pub volumes: Vec<Box<RawValue>>,
    pub image_pull_secrets: Vec<Box<RawValue>>,
    pub volume_mounts: Vec<Box<RawValue>>,
    /// The containers, native containers and init containers as a BestEffort Pod gets
    /// them ([`without_qos_resources`]), index for index: `None` where that is as written.
    pub best_effort: BestEffortForms,
}

/// Containers in their BestEffort form, typed and as JSON, where it differs.
pub type BestEffort = Vec<Option<(Container, Box<RawValue>)>>;

/// [`Prepared::best_effort`].
#[derive(Debug, Clone, Default)]
pub struct BestEffortForms {
    pub containers: BestEffort,
    pub native_containers: BestEffort,
    pub init_containers: BestEffort,
}

/// `resources` without cpu and memory, the resources the QoS class is computed from (a
/// map left empty goes, and `resources` when nothing is left): a container a BestEffort
/// Pod gets must keep it so. `None` when there is nothing to leave out.
pub fn without_qos_resources(resources: &ResourceRequirements) -> Option<Option<ResourceRequirements>> {
    let mut left = resources.clone();
    let mut gone = false;
    for map in [&mut left.requests, &mut left.limits] {
        if let Some(entries) = map {
            for resource in ["cpu", "memory"] {
                gone |= entries.remove(resource).is_some();
            }
            if entries.is_empty() {
                *map = None;
            }
        }
    }
    gone.then(|| (left != ResourceRequirements::default()).then_some(left))
}

fn best_effort(containers: &[Container]) -> Result<BestEffort, serde_json::Error> {
    containers
        .iter()
        .map(|c| {
            let Some(resources) = c.resources.as_ref().and_then(without_qos_resources) else {
                return Ok(None);
            };
            let form = Container { resources, ..c.clone() };
            let json = serde_json::value::to_raw_value(&form)?;
            Ok(Some((form, json)))
        })
        .collect()
}

/// Equal when the JSON is: it is derived from the spec, so this never disagrees with it.
impl PartialEq for Prepared {
    fn eq(&self, other: &Prepared) -> bool {
        let texts = |p: &Prepared| {
            [
                &p.containers,
                &p.native_containers_json,
                &p.init_containers,
                &p.volumes,
                &p.image_pull_secrets,
                &p.volume_mounts,
            ]
            .map(|list| list.iter().map(|raw| raw.get().to_string()).collect::<Vec<_>>())
        };
        let forms = |p: &Prepared| {
            let forms = &p.best_effort;
            [&forms.containers, &forms.native_containers, &forms.init_containers].map(|list| {
                list.iter()
                    .map(|form| form.as_ref().map(|(_, raw)| raw.get().to_string()))
                    .collect::<Vec<_>>()
            })
        };
        texts(self) == texts(other) && forms(self) == forms(other)
    }
}

fn json_of<T: Serialize>(items: &[T]) -> Result<Vec<Box<RawValue>>, serde_json::Error> {
    items.iter().map(serde_json::value::to_raw_value).collect()
}

impl Prepared {
    /// Fails only if a Kubernetes type would not serialise to JSON, which none does.
    pub fn of(spec: &TemplateSpec) -> Result<Prepared, serde_json::Error> {
        let native_containers: Vec<Container> = spec
            .containers
            .iter()
            .map(|c| Container {
                restart_policy: Some(String::from("Always")),
                ..c.clone()
            })
            .collect();
        Ok(Prepared {
            containers: json_of(&spec.containers)?,
            native_containers_json: json_of(&native_containers)?,
            best_effort: BestEffortForms {
                containers: best_effort(&spec.containers)?,
                native_containers: best_effort(&native_containers)?,
                init_containers: best_effort(&spec.init_containers)?,
            },
            native_containers,
            init_containers: json_of(&spec.init_containers)?,
            volumes: json_of(&spec.volumes)?,
            image_pull_secrets: json_of(&spec.image_pull_secrets)?,
            volume_mounts: json_of(&spec.volume_mounts)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::Template;

    #[test]
    fn prepared_json_is_each_entry_written_out() {
        let template = Template::parse(
            "config",
            "containers: [{name: proxy, image: envoy}]\nvolumes: [{name: v, emptyDir: {}}]\nvolumeMounts: [{name: v, mountPath: /v}]\nimagePullSecrets: [{name: r}]\n",
            crate::template::KubeVersion::NEWEST,
        )
        .unwrap();
        let (spec, prepared) = (&template.spec, &template.prepared);
        let text = |list: &[Box<RawValue>]| list.iter().map(|r| r.get().to_string()).collect::<Vec<_>>();
        let written = |v: serde_json::Value| vec![v.to_string()];
        assert_eq!(
            text(&prepared.containers),
            written(serde_json::to_value(&spec.containers[0]).unwrap())
        );
        assert_eq!(
            text(&prepared.volumes),
            written(serde_json::to_value(&spec.volumes[0]).unwrap())
        );
        assert_eq!(text(&prepared.volume_mounts), [r#"{"mountPath":"/v","name":"v"}"#]);
        assert_eq!(text(&prepared.image_pull_secrets), [r#"{"name":"r"}"#]);
        assert_eq!(
            text(&prepared.native_containers_json),
            [r#"{"image":"envoy","name":"proxy","restartPolicy":"Always"}"#]
        );
        assert_eq!(prepared.native_containers[0].restart_policy.as_deref(), Some("Always"));
        assert!(
            prepared.best_effort.containers[0].is_none(),
            "no resources: nothing to leave out"
        );
    }

    #[test]
    fn the_best_effort_form_leaves_out_cpu_and_memory_only() {
        let template = Template::parse(
            "config",
            "containers:\n- name: proxy\n  image: envoy\n  resources:\n    requests: {cpu: 100m, memory: 64Mi, ephemeral-storage: 1Gi}\n    limits: {cpu: '1', memory: 256Mi}\n- name: other\n  image: other\n  resources: {limits: {memory: 1Gi}}\ninitContainers:\n- {name: init, image: busybox}\n",
            crate::template::KubeVersion::NEWEST,
        )
        .unwrap();
        let forms = &template.prepared.best_effort;
        let (proxy, json) = forms.containers[0].as_ref().unwrap();
        assert_eq!(
            json.get(),
            r#"{"image":"envoy","name":"proxy","resources":{"requests":{"ephemeral-storage":"1Gi"}}}"#
        );
        assert_eq!(&serde_json::to_string(proxy).unwrap(), json.get());
        let (_, other) = forms.containers[1].as_ref().unwrap();
        assert_eq!(other.get(), r#"{"image":"other","name":"other"}"#);
        let (_, native) = forms.native_containers[0].as_ref().unwrap();
        assert!(native.get().contains(r#""restartPolicy":"Always""#), "{}", native.get());
        assert!(forms.init_containers[0].is_none());
    }
}
