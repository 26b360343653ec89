//! `env` and `envFrom`: names by the version's rule, one source per `valueFrom`, the
//! downward API's field and resource paths, the names and keys of what they refer to.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, ResourceFieldSelector, Volume};

use super::names::{self, CONFIG_MAP_KEY, DNS_SUBDOMAIN, QUALIFIED_NAME};
use super::walk::{Walk, quoted};
use crate::template::quantity::Quantity;

/// The Pod fields an env var may read with `fieldRef`.
const ENV_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// The Pod fields a `downwardAPI` volume file may hold.
pub const VOLUME_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.labels",
    "metadata.annotations",
    "metadata.uid",
];

const RESOURCE_FIELDS: &[&str] = &[
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
];

pub fn var(walk: &mut Walk, var: &EnvVar, volumes: &BTreeMap<&str, &Volume>) {
    env_name(walk, "name", &var.name, "an environment variable name");
    let Some(from) = &var.value_from else { return };
    walk.key("valueFrom", |walk| {
        // An API server without EnvFiles drops `fileKeyRef`: it does not count there.
        let file = from.file_key_ref.as_ref().filter(|_| walk.version.env_files());
        let sources = [
            from.field_ref.is_some(),
            from.resource_field_ref.is_some(),
            from.config_map_key_ref.is_some(),
            from.secret_key_ref.is_some(),
            file.is_some(),
        ]
        .iter()
        .filter(|s| **s)
        .count();
        let kinds = if walk.version.env_files() {
            "fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef or fileKeyRef"
        } else {
            "fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef"
        };
        if sources == 0 {
            let found = if from.file_key_ref.is_some() {
                format!("fileKeyRef, which Kubernetes {} does not take", walk.version)
            } else {
                String::from("none")
            };
            walk.fail(format!("one of {kinds}"), found);
        } else if var.value.as_deref().is_some_and(|v| !v.is_empty()) {
            walk.fail("`valueFrom` or a non-empty `value`, not both", "both");
        } else if sources > 1 {
            walk.fail(format!("exactly one of {kinds}"), format!("{sources} of them"));
        }
        walk.opt("fieldRef", from.field_ref.as_ref(), |walk, f| {
            field_path(walk, f.api_version.as_deref(), &f.field_path, ENV_FIELDS);
        });
        walk.opt("resourceFieldRef", from.resource_field_ref.as_ref(), |walk, r| {
            resource_field(walk, r, false);
        });
        walk.opt("configMapKeyRef", from.config_map_key_ref.as_ref(), |walk, r| {
            key_ref(walk, &r.name, &r.key);
        });
        walk.opt("secretKeyRef", from.secret_key_ref.as_ref(), |walk, r| {
            key_ref(walk, &r.name, &r.key);
        });
        walk.opt("fileKeyRef", file, |walk, f| {
            match volumes.get(f.volume_name.as_str()) {
                _ if f.volume_name.is_empty() => walk.fail_at("volumeName", "the name of a volume", "an empty string"),
                None => walk.fail_at(
                    "volumeName",
                    "the name of one of the template's volumes",
                    quoted(&f.volume_name),
                ),
                Some(v) if v.empty_dir.is_none() => {
                    walk.fail_at("volumeName", "an emptyDir volume", quoted(&f.volume_name));
                }
                Some(_) => {}
            }
            if f.path.is_empty() {
                walk.fail_at("path", "the path of the file", "an empty string");
            }
            env_name(walk, "key", &f.key, "a key of the file");
        });
    });
}

/// A name that becomes an environment variable's, by the version's rule; `what` when empty.
fn env_name(walk: &mut Walk, key: &str, name: &str, what: &str) {
    let relaxed = walk.version.relaxed_env_names();
    if name.is_empty() {
        walk.fail_at(key, what, "an empty string");
    } else {
        walk.text(
            key,
            name,
            |n| names::is_env_name(n, relaxed),
            names::env_name_rule(relaxed),
        );
    }
}

/// A configMap's or Secret's name and key.
fn key_ref(walk: &mut Walk, name: &str, key: &str) {
    walk.text("name", name, names::is_dns_subdomain, DNS_SUBDOMAIN);
    if key.is_empty() {
        walk.fail_at("key", "a key", "an empty string");
    } else {
        walk.text("key", key, names::is_config_map_key, CONFIG_MAP_KEY);
    }
}

/// A downward API `fieldPath`: one of `allowed`, or a label or annotation by key.
pub fn field_path(walk: &mut Walk, api_version: Option<&str>, path: &str, allowed: &[&str]) {
    if let Some(version) = api_version.filter(|v| !v.is_empty() && *v != "v1") {
        walk.fail_at("apiVersion", r#""v1""#, quoted(version));
        return;
    }
    if path.is_empty() {
        walk.fail_at("fieldPath", "a field of the Pod", "an empty string");
        return;
    }
    let subscripted = path
        .strip_suffix("']")
        .and_then(|p| p.split_once("['"))
        .filter(|(field, _)| matches!(*field, "metadata.labels" | "metadata.annotations"));
    match subscripted {
        Some((field, key)) => {
            let key = if field == "metadata.annotations" {
                key.to_ascii_lowercase()
            } else {
                key.to_string()
            };
            if !names::is_qualified_name(&key) {
                walk.fail_at(
                    "fieldPath",
                    format!("{field}['KEY'] with KEY {QUALIFIED_NAME}"),
                    quoted(path),
                );
            }
        }
        None if allowed.contains(&path) => {}
        None => {
            let expected = format!(
                "one of {}, or metadata.labels['KEY'] or metadata.annotations['KEY']",
                allowed.iter().map(|a| quoted(a)).collect::<Vec<_>>().join(", ")
            );
            walk.fail_at("fieldPath", expected, quoted(path));
        }
    }
}

/// A container resource read through the downward API; a volume's must name the container.
pub fn resource_field(walk: &mut Walk, r: &ResourceFieldSelector, in_volume: bool) {
    if in_volume && r.container_name.as_deref().unwrap_or_default().is_empty() {
        walk.fail_at("containerName", "the name of a container", "none");
        return;
    }
    let resource = r.resource.as_str();
    if resource.is_empty() {
        walk.fail_at("resource", "a resource of the container", "an empty string");
        return;
    }
    let hugepages = resource.starts_with("requests.hugepages-") || resource.starts_with("limits.hugepages-");
    if !RESOURCE_FIELDS.contains(&resource) && !hugepages {
        let expected = format!(
            "one of {}, or limits.hugepages-SIZE / requests.hugepages-SIZE",
            RESOURCE_FIELDS.iter().map(|a| quoted(a)).collect::<Vec<_>>().join(", ")
        );
        walk.fail_at("resource", expected, quoted(resource));
    }
    let Some(divisor) = &r.divisor else { return };
    let value = match Quantity::parse(&divisor.0) {
        Ok(value) => value,
        Err(err) => return walk.fail_at("divisor", err.to_string(), quoted(&divisor.0)),
    };
    if value.nanos() == 0 {
        return;
    }
    let nanos = |text: &str| Quantity::parse(text).ok().map(|q| q.nanos());
    let allowed: &[&str] = if resource.ends_with(".cpu") {
        &["1m", "1"]
    } else {
        &[
            "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
        ]
    };
    if !allowed.iter().any(|a| nanos(a) == Some(value.nanos())) {
        walk.fail_at(
            "divisor",
            format!("one of {} for {resource}", allowed.join(", ")),
            quoted(&divisor.0),
        );
    }
}

pub fn from(walk: &mut Walk, source: &EnvFromSource) {
    let relaxed = walk.version.relaxed_env_names();
    if let Some(prefix) = source.prefix.as_deref().filter(|p| !p.is_empty()) {
        walk.text(
            "prefix",
            prefix,
            |p| names::is_env_name(p, relaxed),
            names::env_name_rule(relaxed),
        );
    }
    let refs = [
        ("configMapRef", source.config_map_ref.as_ref().map(|r| r.name.as_str())),
        ("secretRef", source.secret_ref.as_ref().map(|r| r.name.as_str())),
    ];
    let count = refs.iter().filter(|(_, r)| r.is_some()).count();
    if count != 1 {
        let found = if count == 0 { "neither" } else { "both" };
        walk.fail("exactly one of configMapRef or secretRef", found);
    }
    for (key, name) in refs {
        let Some(name) = name else { continue };
        walk.key(key, |walk| {
            // Checked as a prefix of generated names: a trailing '-' is allowed.
            let trimmed = name.strip_suffix('-').unwrap_or(name);
            if name.is_empty() {
                walk.fail_at("name", "a name", "an empty string");
            } else if !names::is_dns_subdomain(trimmed) {
                walk.fail_at("name", DNS_SUBDOMAIN, quoted(name));
            }
        });
    }
}
