//! A template's additions serialised to JSON once, when the template is loaded: admission
//! copies these bytes into every patch instead of re-serialising typed containers per Pod.

use k8s_openapi::api::core::v1::Container;
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
        texts(self) == texts(other)
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
    }
}
