//! `volumes`: names, one source each, and each source's own values: paths, modes, names of
//! what it refers to, the downward API's fields, projected sources, CSI drivers, claims.

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Volume, VolumeProjection};

use super::env::{VOLUME_FIELDS, field_path, resource_field};
use super::names::{self, DNS_LABEL, DNS_SUBDOMAIN};
use super::walk::{Walk, quoted};

const MODE: &str = "a file mode from 0 to 0777 (511)";

pub fn volume(walk: &mut Walk, v: &Volume) {
    if !v.name.is_empty() {
        walk.text("name", &v.name, names::is_dns_label, DNS_LABEL);
    }
    // An API server without image volumes drops the volume (and its mounts) whole.
    let image = v.image.as_ref().filter(|_| walk.version.image_volumes());
    let sources: Vec<&str> = [
        ("emptyDir", v.empty_dir.is_some()),
        ("hostPath", v.host_path.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("secret", v.secret.is_some()),
        ("nfs", v.nfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("flocker", v.flocker.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("rbd", v.rbd.is_some()),
        ("cinder", v.cinder.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("quobyte", v.quobyte.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("fc", v.fc.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
        ("configMap", v.config_map.is_some()),
        ("azureFile", v.azure_file.is_some()),
        ("vsphereVolume", v.vsphere_volume.is_some()),
        ("photonPersistentDisk", v.photon_persistent_disk.is_some()),
        ("portworxVolume", v.portworx_volume.is_some()),
        ("azureDisk", v.azure_disk.is_some()),
        ("storageos", v.storageos.is_some()),
        ("projected", v.projected.is_some()),
        ("scaleIO", v.scale_io.is_some()),
        ("csi", v.csi.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("image", image.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, set)| set.then_some(key))
    .collect();
    // None at all is defaulted to an emptyDir.
    if sources.len() > 1 {
        walk.fail("one volume source", sources.join(", "));
    }
    walk.opt("emptyDir", v.empty_dir.as_ref(), |walk, e| {
        if let Some(limit) = &e.size_limit {
            super::resources::non_negative(walk, "sizeLimit", &limit.0);
        }
    });
    walk.opt("hostPath", v.host_path.as_ref(), |walk, h| {
        if walk.required("path", Some(&h.path), "a path on the node") && h.path.split('/').any(|p| p == "..") {
            walk.fail_at("path", "a path without '..'", quoted(&h.path));
        }
        let types = [
            "",
            "DirectoryOrCreate",
            "Directory",
            "FileOrCreate",
            "File",
            "Socket",
            "CharDevice",
            "BlockDevice",
        ];
        walk.one_of("type", h.type_.as_deref(), &types);
    });
    walk.opt("secret", v.secret.as_ref(), |walk, s| {
        walk.required("secretName", s.secret_name.as_deref(), "the name of a Secret");
        mode(walk, "defaultMode", s.default_mode);
        walk.list("items", s.items.as_deref().unwrap_or_default(), key_to_path);
    });
    walk.opt("configMap", v.config_map.as_ref(), |walk, c| {
        walk.required("name", Some(&c.name), "the name of a ConfigMap");
        mode(walk, "defaultMode", c.default_mode);
        walk.list("items", c.items.as_deref().unwrap_or_default(), key_to_path);
    });
    walk.opt(
        "persistentVolumeClaim",
        v.persistent_volume_claim.as_ref(),
        |walk, p| {
            walk.required("claimName", Some(&p.claim_name), "the name of a PersistentVolumeClaim");
        },
    );
    walk.opt("nfs", v.nfs.as_ref(), |walk, n| {
        walk.required("server", Some(&n.server), "an NFS server");
        if walk.required("path", Some(&n.path), "an absolute path on the server") && !n.path.starts_with('/') {
            walk.fail_at("path", "an absolute path", quoted(&n.path));
        }
    });
    walk.opt("downwardAPI", v.downward_api.as_ref(), |walk, d| {
        mode(walk, "defaultMode", d.default_mode);
        walk.list("items", d.items.as_deref().unwrap_or_default(), downward_file);
    });
    walk.opt("projected", v.projected.as_ref(), |walk, p| {
        mode(walk, "defaultMode", p.default_mode);
        let mut paths = std::collections::BTreeSet::new();
        walk.list("sources", p.sources.as_deref().unwrap_or_default(), |walk, source| {
            projection(walk, source, &mut paths);
        });
    });
    walk.opt("csi", v.csi.as_ref(), |walk, c| {
        let driver = c.driver.as_str();
        if driver.is_empty() {
            walk.fail_at("driver", "the name of a CSI driver", "an empty string");
        } else if driver.len() > 63 || !names::is_dns_subdomain(&driver.to_ascii_lowercase()) {
            walk.fail_at(
                "driver",
                "a CSI driver name: a DNS subdomain of at most 63 characters",
                quoted(driver),
            );
        }
        walk.opt("nodePublishSecretRef", c.node_publish_secret_ref.as_ref(), |walk, r| {
            if walk.required("name", Some(&r.name), "the name of a Secret") {
                walk.text("name", &r.name, names::is_dns_subdomain, DNS_SUBDOMAIN);
            }
        });
    });
    walk.opt("ephemeral", v.ephemeral.as_ref(), |walk, e| {
        match &e.volume_claim_template {
            None => walk.fail_at("volumeClaimTemplate", "a claim template", "none"),
            Some(t) => walk.key("volumeClaimTemplate", |walk| {
                walk.key("spec", |walk| {
                    let modes = t.spec.access_modes.as_deref().unwrap_or_default();
                    if modes.is_empty() {
                        walk.fail_at("accessModes", "at least one access mode", "none");
                    }
                    let allowed = ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"];
                    for mode in modes {
                        walk.one_of("accessModes", Some(mode), &allowed);
                    }
                    if modes.iter().any(|m| m == "ReadWriteOncePod") && modes.len() > 1 {
                        walk.fail_at("accessModes", "ReadWriteOncePod alone", modes.join(", "));
                    }
                    let storage = t
                        .spec
                        .resources
                        .as_ref()
                        .and_then(|r| r.requests.as_ref())
                        .and_then(|r| r.get("storage"));
                    walk.key("resources", |walk| {
                        walk.key("requests", |walk| match storage {
                            None => walk.fail_at("storage", "a storage request", "none"),
                            Some(q) => {
                                if let Some(value) = super::resources::non_negative(walk, "storage", &q.0)
                                    && value.nanos() == 0
                                {
                                    walk.fail_at("storage", "a storage request above 0", quoted(&q.0));
                                }
                            }
                        });
                    });
                });
            }),
        }
    });
    walk.opt("image", image, |walk, i| {
        walk.required("reference", i.reference.as_deref(), "an image reference");
        walk.one_of(
            "pullPolicy",
            i.pull_policy.as_deref().filter(|p| !p.is_empty()),
            &["Always", "IfNotPresent", "Never"],
        );
    });
    walk.opt("gitRepo", v.git_repo.as_ref(), |walk, g| {
        walk.required("repository", Some(&g.repository), "a repository");
        if let Some(dir) = g.directory.as_deref()
            && let Some(fault) = names::descending_path_fault(dir)
        {
            walk.fail_at("directory", fault, quoted(dir));
        }
    });
    legacy(walk, v);
}

/// The in-tree volume plugins: the fields each one requires.
fn legacy(walk: &mut Walk, v: &Volume) {
    let required = |walk: &mut Walk, source: &str, fields: &[(&str, &str)]| {
        walk.key(source, |walk| {
            for (key, value) in fields {
                walk.required(key, Some(value), "a value");
            }
        });
    };
    if let Some(s) = &v.iscsi {
        required(walk, "iscsi", &[("targetPortal", &s.target_portal), ("iqn", &s.iqn)]);
        walk.key("iscsi", |walk| walk.within("lun", Some(i64::from(s.lun)), 0, 255));
    }
    if let Some(s) = &v.rbd {
        required(walk, "rbd", &[("image", &s.image)]);
        if s.monitors.is_empty() {
            walk.key("rbd", |walk| walk.fail_at("monitors", "at least one monitor", "none"));
        }
    }
    if let Some(s) = &v.cephfs
        && s.monitors.is_empty()
    {
        walk.key("cephfs", |walk| {
            walk.fail_at("monitors", "at least one monitor", "none")
        });
    }
    if let Some(s) = &v.cinder {
        required(walk, "cinder", &[("volumeID", &s.volume_id)]);
    }
    if let Some(s) = &v.flex_volume {
        required(walk, "flexVolume", &[("driver", &s.driver)]);
    }
    if let Some(s) = &v.azure_file {
        required(
            walk,
            "azureFile",
            &[("secretName", &s.secret_name), ("shareName", &s.share_name)],
        );
    }
    if let Some(s) = &v.azure_disk {
        required(
            walk,
            "azureDisk",
            &[("diskName", &s.disk_name), ("diskURI", &s.disk_uri)],
        );
    }
    if let Some(s) = &v.vsphere_volume {
        required(walk, "vsphereVolume", &[("volumePath", &s.volume_path)]);
    }
    if let Some(s) = &v.photon_persistent_disk {
        required(walk, "photonPersistentDisk", &[("pdID", &s.pd_id)]);
    }
    if let Some(s) = &v.portworx_volume {
        required(walk, "portworxVolume", &[("volumeID", &s.volume_id)]);
    }
    if let Some(s) = &v.scale_io {
        required(walk, "scaleIO", &[("gateway", &s.gateway), ("system", &s.system)]);
        walk.key("scaleIO", |walk| {
            walk.required("volumeName", s.volume_name.as_deref(), "a value");
        });
    }
    if let Some(s) = &v.quobyte {
        required(walk, "quobyte", &[("registry", &s.registry), ("volume", &s.volume)]);
    }
    if let Some(s) = &v.glusterfs {
        required(walk, "glusterfs", &[("endpoints", &s.endpoints), ("path", &s.path)]);
    }
    if let Some(s) = &v.gce_persistent_disk {
        required(walk, "gcePersistentDisk", &[("pdName", &s.pd_name)]);
        walk.key("gcePersistentDisk", |walk| {
            walk.within("partition", s.partition.map(i64::from), 0, 255)
        });
    }
    if let Some(s) = &v.aws_elastic_block_store {
        required(walk, "awsElasticBlockStore", &[("volumeID", &s.volume_id)]);
        walk.key("awsElasticBlockStore", |walk| {
            walk.within("partition", s.partition.map(i64::from), 0, 255)
        });
    }
    if let Some(s) = &v.storageos {
        walk.key("storageos", |walk| {
            if walk.required("volumeName", s.volume_name.as_deref(), "a volume name") {
                walk.text(
                    "volumeName",
                    s.volume_name.as_deref().unwrap_or_default(),
                    names::is_dns_label,
                    DNS_LABEL,
                );
            }
        });
    }
    if let Some(s) = &v.flocker {
        let given = [s.dataset_name.as_deref(), s.dataset_uuid.as_deref()]
            .iter()
            .filter(|d| d.is_some_and(|d| !d.is_empty()))
            .count();
        if given != 1 {
            walk.key("flocker", |walk| {
                walk.fail("exactly one of datasetName or datasetUUID", given.to_string())
            });
        }
    }
    if let Some(s) = &v.fc {
        let (wwns, wwids) = (
            s.target_wwns.as_deref().unwrap_or_default(),
            s.wwids.as_deref().unwrap_or_default(),
        );
        walk.key("fc", |walk| {
            if wwns.is_empty() == wwids.is_empty() {
                walk.fail(
                    "exactly one of targetWWNs or wwids",
                    if wwns.is_empty() { "neither" } else { "both" },
                );
            }
            if !wwns.is_empty() {
                match s.lun {
                    None => walk.fail_at("lun", "a lun with targetWWNs", "none"),
                    Some(lun) => walk.within("lun", Some(i64::from(lun)), 0, 255),
                }
            }
        });
    }
}

fn mode(walk: &mut Walk, key: &str, mode: Option<i32>) {
    if let Some(mode) = mode.filter(|m| !(0..=0o777).contains(m)) {
        walk.fail_at(key, MODE, mode.to_string());
    }
}

fn key_to_path(walk: &mut Walk, item: &KeyToPath) {
    walk.required("key", Some(&item.key), "a key");
    local_path(walk, "path", &item.path);
    mode(walk, "mode", item.mode);
}

fn local_path(walk: &mut Walk, key: &str, path: &str) {
    if walk.required(key, Some(path), "a relative path")
        && let Some(fault) = names::local_path_fault(path)
    {
        walk.fail_at(key, fault, quoted(path));
    }
}

fn downward_file(walk: &mut Walk, file: &DownwardAPIVolumeFile) {
    local_path(walk, "path", &file.path);
    match (&file.field_ref, &file.resource_field_ref) {
        (Some(_), Some(_)) => walk.fail("fieldRef or resourceFieldRef, not both", "both"),
        (None, None) => walk.fail("one of fieldRef or resourceFieldRef", "neither"),
        _ => {}
    }
    walk.opt("fieldRef", file.field_ref.as_ref(), |walk, f| {
        field_path(walk, f.api_version.as_deref(), &f.field_path, VOLUME_FIELDS);
    });
    walk.opt("resourceFieldRef", file.resource_field_ref.as_ref(), |walk, r| {
        resource_field(walk, r, true)
    });
    mode(walk, "mode", file.mode);
}

fn projection(walk: &mut Walk, source: &VolumeProjection, paths: &mut std::collections::BTreeSet<String>) {
    let set = [
        source.secret.is_some(),
        source.config_map.is_some(),
        source.downward_api.is_some(),
        source.service_account_token.is_some(),
        source.cluster_trust_bundle.is_some(),
        source.pod_certificate.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if set > 1 {
        walk.fail("one source per entry", format!("{set} sources"));
    }
    let mut unique = |walk: &mut Walk, key: &str, path: &str| {
        if !path.is_empty() && !paths.insert(path.to_string()) {
            walk.fail_at(key, "a path no other source of the volume writes", quoted(path));
        }
    };
    walk.opt("secret", source.secret.as_ref(), |walk, s| {
        walk.required("name", Some(&s.name), "the name of a Secret");
        walk.list("items", s.items.as_deref().unwrap_or_default(), |walk, item| {
            key_to_path(walk, item);
            unique(walk, "path", &item.path);
        });
    });
    walk.opt("configMap", source.config_map.as_ref(), |walk, c| {
        walk.required("name", Some(&c.name), "the name of a ConfigMap");
        walk.list("items", c.items.as_deref().unwrap_or_default(), |walk, item| {
            key_to_path(walk, item);
            unique(walk, "path", &item.path);
        });
    });
    walk.opt("downwardAPI", source.downward_api.as_ref(), |walk, d| {
        walk.list("items", d.items.as_deref().unwrap_or_default(), |walk, file| {
            downward_file(walk, file);
            unique(walk, "path", &file.path);
        });
    });
    walk.opt(
        "serviceAccountToken",
        source.service_account_token.as_ref(),
        |walk, t| {
            // Unset is defaulted to an hour.
            if let Some(seconds) = t.expiration_seconds {
                walk.within("expirationSeconds", Some(seconds), 600, 1 << 32);
            }
            local_path(walk, "path", &t.path);
        },
    );
}
