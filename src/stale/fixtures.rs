//! Test data shared by the unit tests of `stale`: live templates and injected Pods.

use std::collections::BTreeMap as Map;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;

use crate::inject::{REVISION_LABEL, STATUS_ANNOTATION};
use crate::template::TemplateSet;

pub(super) fn live(templates: &[(&str, &str)]) -> TemplateSet {
    let data: Map<String, String> = templates
        .iter()
        .map(|(name, image)| {
            (
                name.to_string(),
                format!("containers:\n- name: {name}\n  image: {image}\n"),
            )
        })
        .collect();
    TemplateSet::from_data("test", &data, crate::template::KubeVersion::NEWEST).unwrap()
}

pub(super) fn pod(uid: &str, template: &str, revision: Option<&str>) -> PartialObjectMeta<Pod> {
    let status = format!(
        r#"{{"template":"{template}","revision":"{}","containers":[],"initContainers":[],"volumes":[],"imagePullSecrets":[],"nativeSidecar":false}}"#,
        revision.unwrap_or_default()
    );
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            uid: Some(uid.into()),
            labels: revision.map(|r| Map::from([(REVISION_LABEL.to_string(), r.to_string())])),
            annotations: Some(Map::from([(STATUS_ANNOTATION.to_string(), status)])),
            ..ObjectMeta::default()
        },
        _phantom: Default::default(),
    }
}

pub(super) fn uid(n: u32) -> String {
    format!("00000000-0000-0000-0000-{n:012x}")
}
