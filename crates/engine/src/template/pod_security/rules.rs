//! The rules of the Pod Security Standards, as the API server's Pod Security admission
//! applies them to a Pod's containers, init containers and volumes, by policy version:
//! each rule from the release that added it, each relaxation from the release that made
//! it. Only the fields a template can add are judged: what is the Pod's alone (host
//! namespaces, sysctls, the Pod-level `seLinuxOptions`, AppArmor annotations) is the Pod's
//! author's to meet, and a rule a container may meet through the Pod's securityContext
//! reads it from the [`PodLevel`] when one is given.

use k8s_openapi::api::core::v1::{Container, Probe, SecurityContext, Volume};

use super::finding::{Control, Finding, Place};
use super::pod::PodLevel;
use super::standard::{Level, LevelVersion, PolicyVersion};
use crate::template::TemplateSpec;

/// What baseline lets a container add (Docker's defaults).
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The volume sources restricted allows (`image` since it became a volume source; the API
/// server applies that at every version).
const RESTRICTED_VOLUMES: &str =
    "configMap, csi, downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim, projected or secret";

/// Every field of what `spec` (template `name`) adds that `policy` does not allow, in the
/// template's order: volumes, init containers, containers. `pod`: the Pod it is injected
/// into, or `None` to judge the template alone (a rule the Pod's securityContext could
/// meet is then not met, and the words say so).
pub fn judge(name: &str, spec: &TemplateSpec, policy: LevelVersion, pod: Option<&PodLevel>) -> Vec<Finding> {
    if policy.level == Level::Privileged {
        return Vec::new();
    }
    let mut judge = Judge {
        template: name,
        version: policy.version,
        restricted: policy.level == Level::Restricted,
        pod,
        found: Vec::new(),
    };
    for volume in &spec.volumes {
        judge.volume(volume);
    }
    for container in &spec.init_containers {
        judge.container(Place::InitContainer(container.name.clone()), container);
    }
    for container in &spec.containers {
        judge.container(Place::Container(container.name.clone()), container);
    }
    judge.found
}

struct Judge<'a> {
    template: &'a str,
    version: PolicyVersion,
    restricted: bool,
    pod: Option<&'a PodLevel>,
    found: Vec<Finding>,
}

impl Judge<'_> {
    fn add(&mut self, level: Level, control: Control, place: &Place, field: &str, expected: &str, found: String) {
        self.found.push(Finding {
            template: self.template.to_string(),
            level,
            control,
            place: place.clone(),
            field: field.to_string(),
            expected: expected.to_string(),
            found,
        });
    }

    /// Restricted's rules that have no meaning on Windows skip a Windows Pod from v1.25.
    fn windows_exempt(&self) -> bool {
        self.version.at_least(25) && self.pod.is_some_and(PodLevel::windows)
    }

    /// `runAsNonRoot`, `runAsUser` and baseline's `procMount` skip a Pod in a user
    /// namespace from v1.35.
    fn user_namespace_exempt(&self) -> bool {
        self.version.at_least(35) && self.pod.is_some_and(PodLevel::user_namespace)
    }

    fn volume(&mut self, volume: &Volume) {
        let place = Place::Volume(volume.name.clone());
        if self.restricted {
            // Restricted's list replaces baseline's hostPath rule, as in the API server.
            for source in disallowed_sources(volume) {
                self.add(
                    Level::Restricted,
                    Control::VolumeTypes,
                    &place,
                    source,
                    RESTRICTED_VOLUMES,
                    format!("a `{source}` volume"),
                );
            }
        } else if let Some(host_path) = &volume.host_path {
            self.add(
                Level::Baseline,
                Control::HostPathVolumes,
                &place,
                "hostPath",
                "no hostPath volume",
                format!("hostPath {:?}", host_path.path),
            );
        }
    }

    fn container(&mut self, place: Place, container: &Container) {
        let none = SecurityContext::default();
        let sc = container.security_context.as_ref().unwrap_or(&none);
        self.baseline(&place, container, sc);
        if self.restricted {
            self.restricted_only(&place, sc);
        }
    }

    fn baseline(&mut self, place: &Place, container: &Container, sc: &SecurityContext) {
        if sc.privileged == Some(true) {
            self.add(
                Level::Baseline,
                Control::Privileged,
                place,
                "securityContext.privileged",
                "false or none",
                "true".into(),
            );
        }
        if sc.windows_options.as_ref().and_then(|w| w.host_process) == Some(true) {
            self.add(
                Level::Baseline,
                Control::HostProcess,
                place,
                "securityContext.windowsOptions.hostProcess",
                "false or none",
                "true".into(),
            );
        }
        self.host_ports(place, container);
        self.capabilities(place, sc);
        if let Some(profile) = &sc.app_armor_profile
            && !matches!(profile.type_.as_str(), "RuntimeDefault" | "Localhost")
        {
            self.add(
                Level::Baseline,
                Control::AppArmor,
                place,
                "securityContext.appArmorProfile.type",
                "RuntimeDefault, Localhost or none",
                format!("{:?}", profile.type_),
            );
        }
        self.se_linux(place, sc);
        self.proc_mount(place, sc);
        self.seccomp(place, sc);
        if self.version.at_least(34) {
            self.probe_hosts(place, container);
        }
    }

    fn host_ports(&mut self, place: &Place, container: &Container) {
        let host_network = self.pod.is_some_and(|pod| pod.host_network);
        for (i, port) in container.ports.iter().flatten().enumerate() {
            let found = match port.host_port {
                Some(host_port) if host_port != 0 => host_port.to_string(),
                // The API server defaults a host-network Pod's ports to the node's.
                _ if host_network => format!(
                    "none, which the API server sets to the containerPort {} in a Pod with `hostNetwork: true`",
                    port.container_port
                ),
                _ => continue,
            };
            self.add(
                Level::Baseline,
                Control::HostPorts,
                place,
                &format!("ports[{i}].hostPort"),
                "0 or none",
                found,
            );
        }
    }

    fn capabilities(&mut self, place: &Place, sc: &SecurityContext) {
        let caps = sc.capabilities.as_ref();
        let added = caps.and_then(|c| c.add.as_deref()).unwrap_or_default();
        if self.restricted && self.version.at_least(22) {
            // Restricted's rule replaces baseline's, as in the API server.
            if self.windows_exempt() {
                return;
            }
            let dropped = caps.and_then(|c| c.drop.as_deref());
            if !dropped.unwrap_or_default().iter().any(|c| c == "ALL") {
                self.add(
                    Level::Restricted,
                    Control::Capabilities,
                    place,
                    "securityContext.capabilities.drop",
                    "a list holding ALL",
                    dropped.map_or_else(|| "none".to_string(), list),
                );
            }
            let forbidden: Vec<String> = added.iter().filter(|c| *c != "NET_BIND_SERVICE").cloned().collect();
            if !forbidden.is_empty() {
                self.add(
                    Level::Restricted,
                    Control::Capabilities,
                    place,
                    "securityContext.capabilities.add",
                    "none but NET_BIND_SERVICE",
                    list(&forbidden),
                );
            }
            return;
        }
        let forbidden: Vec<String> = added
            .iter()
            .filter(|c| !BASELINE_CAPABILITIES.contains(&c.as_str()))
            .cloned()
            .collect();
        if !forbidden.is_empty() {
            self.add(
                Level::Baseline,
                Control::Capabilities,
                place,
                "securityContext.capabilities.add",
                &format!("none but {}", BASELINE_CAPABILITIES.join(", ")),
                list(&forbidden),
            );
        }
    }

    fn se_linux(&mut self, place: &Place, sc: &SecurityContext) {
        let Some(options) = &sc.se_linux_options else {
            return;
        };
        let mut types = vec!["container_t", "container_init_t", "container_kvm_t"];
        if self.version.at_least(31) {
            types.push("container_engine_t");
        }
        let kind = options.type_.as_deref().unwrap_or_default();
        if !kind.is_empty() && !types.contains(&kind) {
            self.add(
                Level::Baseline,
                Control::SeLinux,
                place,
                "securityContext.seLinuxOptions.type",
                &format!("none or one of {}", types.join(", ")),
                format!("{kind:?}"),
            );
        }
        for (field, value) in [("user", &options.user), ("role", &options.role)] {
            if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                self.add(
                    Level::Baseline,
                    Control::SeLinux,
                    place,
                    &format!("securityContext.seLinuxOptions.{field}"),
                    "none",
                    format!("{value:?}"),
                );
            }
        }
    }

    fn proc_mount(&mut self, place: &Place, sc: &SecurityContext) {
        let Some(mount) = sc.proc_mount.as_deref().filter(|m| *m != "Default") else {
            return;
        };
        // From v1.35 restricted keeps the rule for a user-namespace Pod that baseline
        // relaxes.
        let restricted_rule = self.restricted && self.version.at_least(35);
        if !restricted_rule && self.user_namespace_exempt() {
            return;
        }
        let level = if restricted_rule {
            Level::Restricted
        } else {
            Level::Baseline
        };
        self.add(
            level,
            Control::ProcMount,
            place,
            "securityContext.procMount",
            "Default or none",
            format!("{mount:?}"),
        );
    }

    fn seccomp(&mut self, place: &Place, sc: &SecurityContext) {
        if !self.version.at_least(19) {
            // Before v1.19 the rule read annotations, which are the Pod's.
            return;
        }
        let own = sc.seccomp_profile.as_ref().map(|p| p.type_.as_str());
        if !self.restricted {
            if own == Some("Unconfined") {
                self.add(
                    Level::Baseline,
                    Control::Seccomp,
                    place,
                    "securityContext.seccompProfile.type",
                    "RuntimeDefault, Localhost or none",
                    "\"Unconfined\"".into(),
                );
            }
            return;
        }
        if self.windows_exempt() {
            return;
        }
        let allowed = |kind: &str| matches!(kind, "RuntimeDefault" | "Localhost");
        match own {
            Some(kind) if allowed(kind) => {}
            Some(kind) => self.add(
                Level::Restricted,
                Control::Seccomp,
                place,
                "securityContext.seccompProfile.type",
                "RuntimeDefault or Localhost",
                format!("{kind:?}"),
            ),
            None => {
                let pods = self
                    .pod
                    .map(|pod| pod.security_context.as_ref().and_then(|sc| sc.seccomp_profile.as_ref()));
                let found = match pods {
                    Some(Some(profile)) if allowed(&profile.type_) => return,
                    Some(Some(profile)) => format!(
                        "none, and the Pod's securityContext sets seccompProfile.type {:?}",
                        profile.type_
                    ),
                    Some(None) => "none, and the Pod's securityContext sets no seccompProfile".to_string(),
                    None => "none (judged without a Pod: one whose own securityContext sets seccompProfile.type RuntimeDefault or Localhost meets it)".to_string(),
                };
                self.add(
                    Level::Restricted,
                    Control::Seccomp,
                    place,
                    "securityContext.seccompProfile.type",
                    "RuntimeDefault or Localhost, on the container or the Pod",
                    found,
                );
            }
        }
    }

    fn probe_hosts(&mut self, place: &Place, container: &Container) {
        let probes: [(&str, Option<&Probe>); 3] = [
            ("livenessProbe", container.liveness_probe.as_ref()),
            ("readinessProbe", container.readiness_probe.as_ref()),
            ("startupProbe", container.startup_probe.as_ref()),
        ];
        let mut hosts: Vec<(String, &str)> = Vec::new();
        for (name, probe) in probes {
            let Some(probe) = probe else { continue };
            if let Some(host) = probe.http_get.as_ref().and_then(|h| h.host.as_deref()) {
                hosts.push((format!("{name}.httpGet.host"), host));
            }
            if let Some(host) = probe.tcp_socket.as_ref().and_then(|t| t.host.as_deref()) {
                hosts.push((format!("{name}.tcpSocket.host"), host));
            }
        }
        let lifecycle = container.lifecycle.as_ref();
        for (name, handler) in [
            ("lifecycle.postStart", lifecycle.and_then(|l| l.post_start.as_ref())),
            ("lifecycle.preStop", lifecycle.and_then(|l| l.pre_stop.as_ref())),
        ] {
            let Some(handler) = handler else { continue };
            if let Some(host) = handler.http_get.as_ref().and_then(|h| h.host.as_deref()) {
                hosts.push((format!("{name}.httpGet.host"), host));
            }
            if let Some(host) = handler.tcp_socket.as_ref().and_then(|t| t.host.as_deref()) {
                hosts.push((format!("{name}.tcpSocket.host"), host));
            }
        }
        for (field, host) in hosts.into_iter().filter(|(_, host)| !host.is_empty()) {
            self.add(
                Level::Baseline,
                Control::ProbeHost,
                place,
                &field,
                "none (the Pod's own address)",
                format!("{host:?}"),
            );
        }
    }

    fn restricted_only(&mut self, place: &Place, sc: &SecurityContext) {
        if self.version.at_least(8) && !self.windows_exempt() && sc.allow_privilege_escalation != Some(false) {
            self.add(
                Level::Restricted,
                Control::AllowPrivilegeEscalation,
                place,
                "securityContext.allowPrivilegeEscalation",
                "false",
                shown(sc.allow_privilege_escalation),
            );
        }
        if self.user_namespace_exempt() {
            return;
        }
        match sc.run_as_non_root {
            Some(true) => {}
            Some(false) => self.add(
                Level::Restricted,
                Control::RunAsNonRoot,
                place,
                "securityContext.runAsNonRoot",
                "true",
                "false".into(),
            ),
            None => {
                let pods = self
                    .pod
                    .map(|pod| pod.security_context.as_ref().and_then(|sc| sc.run_as_non_root));
                let found = match pods {
                    Some(Some(true)) => None,
                    Some(Some(false)) => Some("none, and the Pod's securityContext sets it to false".to_string()),
                    Some(None) => Some("none, and the Pod's securityContext does not set it".to_string()),
                    None => Some(
                        "none (judged without a Pod: one whose own securityContext sets runAsNonRoot: true meets it)"
                            .to_string(),
                    ),
                };
                if let Some(found) = found {
                    self.add(
                        Level::Restricted,
                        Control::RunAsNonRoot,
                        place,
                        "securityContext.runAsNonRoot",
                        "true, on the container or the Pod",
                        found,
                    );
                }
            }
        }
        if self.version.at_least(23) && sc.run_as_user == Some(0) {
            self.add(
                Level::Restricted,
                Control::RunAsUser,
                place,
                "securityContext.runAsUser",
                "a user other than 0, or none",
                "0".into(),
            );
        }
    }
}

/// The sources of `volume` restricted does not allow, by their field names.
fn disallowed_sources(volume: &Volume) -> Vec<&'static str> {
    let set = [
        ("awsElasticBlockStore", volume.aws_elastic_block_store.is_some()),
        ("azureDisk", volume.azure_disk.is_some()),
        ("azureFile", volume.azure_file.is_some()),
        ("cephfs", volume.cephfs.is_some()),
        ("cinder", volume.cinder.is_some()),
        ("fc", volume.fc.is_some()),
        ("flexVolume", volume.flex_volume.is_some()),
        ("flocker", volume.flocker.is_some()),
        ("gcePersistentDisk", volume.gce_persistent_disk.is_some()),
        ("gitRepo", volume.git_repo.is_some()),
        ("glusterfs", volume.glusterfs.is_some()),
        ("hostPath", volume.host_path.is_some()),
        ("iscsi", volume.iscsi.is_some()),
        ("nfs", volume.nfs.is_some()),
        ("photonPersistentDisk", volume.photon_persistent_disk.is_some()),
        ("portworxVolume", volume.portworx_volume.is_some()),
        ("quobyte", volume.quobyte.is_some()),
        ("rbd", volume.rbd.is_some()),
        ("scaleIO", volume.scale_io.is_some()),
        ("storageos", volume.storageos.is_some()),
        ("vsphereVolume", volume.vsphere_volume.is_some()),
    ];
    set.into_iter().filter(|(_, on)| *on).map(|(name, _)| name).collect()
}

fn list(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

fn shown(value: Option<bool>) -> String {
    value.map_or_else(|| "none".to_string(), |v| v.to_string())
}
