//! A container's own values: its name and image, ports, mounts and devices, pull and
//! termination-message policies, restart policy and rules, resize policy; then its env,
//! resources, securityContext, probes and lifecycle (their own files).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, Volume, VolumeMount};

use super::names::{self, DNS_LABEL, PORT_NAME};
use super::walk::{Walk, quoted};
use crate::template::spec::TemplateSpec;

/// How the API server will see a template's container in the Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An entry of `initContainers`: an init container as written.
    Init,
    /// An entry of `containers`: a regular container, or a native sidecar (an init
    /// container with `restartPolicy: Always`) where the Pod or the template asks for
    /// one; it must pass as both.
    Sidecar,
}

pub fn container(walk: &mut Walk, c: &Container, role: Role, volumes: &BTreeMap<&str, &Volume>) {
    if !c.name.is_empty() {
        walk.text("name", &c.name, names::is_dns_label, DNS_LABEL);
    }
    match c.image.as_deref() {
        None | Some("") => walk.fail_at(
            "image",
            "an image",
            if c.image.is_some() { "an empty string" } else { "none" },
        ),
        Some(image) if image.trim() != image => {
            walk.fail_at(
                "image",
                "an image without leading or trailing whitespace",
                quoted(image),
            );
        }
        Some(_) => {}
    }
    walk.one_of(
        "imagePullPolicy",
        non_empty(&c.image_pull_policy),
        &["Always", "IfNotPresent", "Never"],
    );
    walk.one_of(
        "terminationMessagePolicy",
        non_empty(&c.termination_message_policy),
        &["File", "FallbackToLogsOnError"],
    );
    ports(walk, c);
    walk.list("env", c.env.as_deref().unwrap_or_default(), |walk, var| {
        super::env::var(walk, var, volumes);
    });
    walk.list("envFrom", c.env_from.as_deref().unwrap_or_default(), super::env::from);
    walk.list(
        "volumeMounts",
        c.volume_mounts.as_deref().unwrap_or_default(),
        |walk, mount| {
            self::mount(walk, mount, Some(c));
        },
    );
    devices(walk, c, volumes);
    walk.opt("resources", c.resources.as_ref(), super::resources::requirements);
    resize_policy(walk, c);
    walk.opt("securityContext", c.security_context.as_ref(), super::security::context);
    restart(walk, c, role);
    // A probe or a lifecycle hook on an init container that does not keep running is
    // refused; on a native sidecar and a regular container they are checked alike.
    let keeps_running = role == Role::Sidecar || c.restart_policy.as_deref() == Some("Always");
    let probes = [
        ("livenessProbe", &c.liveness_probe, super::probes::Kind::Liveness),
        ("readinessProbe", &c.readiness_probe, super::probes::Kind::Readiness),
        ("startupProbe", &c.startup_probe, super::probes::Kind::Startup),
    ];
    for (key, probe, kind) in probes {
        match (probe, keeps_running) {
            (Some(probe), true) => walk.key(key, |walk| super::probes::probe(walk, probe, kind)),
            (Some(_), false) => walk.fail_at(key, NOT_ON_INIT, "a probe"),
            (None, _) => {}
        }
    }
    match (&c.lifecycle, keeps_running) {
        (Some(lifecycle), true) => walk.key("lifecycle", |walk| super::probes::lifecycle(walk, lifecycle)),
        (Some(_), false) => walk.fail_at("lifecycle", NOT_ON_INIT, "a lifecycle"),
        (None, _) => {}
    }
}

const NOT_ON_INIT: &str = "none on an init container without `restartPolicy: Always`";

/// An optional string, `None` when empty (the API server's defaulting fills an empty one).
fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

fn ports(walk: &mut Walk, c: &Container) {
    let mut seen = BTreeSet::new();
    walk.list("ports", c.ports.as_deref().unwrap_or_default(), |walk, port| {
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            if !names::is_port_name(name) {
                walk.fail_at("name", PORT_NAME, quoted(name));
            } else if !seen.insert(name.to_string()) {
                walk.fail_at("name", "a port name unique in its container", quoted(name));
            }
        }
        if port.container_port == 0 {
            walk.fail_at("containerPort", "a port number from 1 to 65535", "none");
        } else {
            walk.within("containerPort", Some(i64::from(port.container_port)), 1, 65535);
        }
        if let Some(host) = port.host_port.filter(|p| *p != 0) {
            walk.within("hostPort", Some(i64::from(host)), 1, 65535);
        }
        walk.one_of("protocol", non_empty(&port.protocol), &["TCP", "UDP", "SCTP"]);
    });
}

/// Host ports are the node's: two containers of the Pod cannot take the same one (for the
/// same protocol and address). Init containers run one at a time and only clash with
/// themselves; the template's `containers` can all run together.
pub fn host_ports(walk: &mut Walk, spec: &TemplateSpec) {
    let key = |port: &k8s_openapi::api::core::v1::ContainerPort| {
        format!(
            "{}/{}/{}",
            non_empty(&port.protocol).unwrap_or("TCP"),
            port.host_ip.as_deref().unwrap_or_default(),
            port.host_port.unwrap_or_default()
        )
    };
    let check = |walk: &mut Walk, list: &str, containers: &[Container], shared: bool| {
        let mut taken = BTreeSet::new();
        walk.list(list, containers, |walk, c| {
            if !shared {
                taken.clear();
            }
            walk.list("ports", c.ports.as_deref().unwrap_or_default(), |walk, port| {
                if port.host_port.is_some_and(|p| p != 0) && !taken.insert(key(port)) {
                    walk.fail_at(
                        "hostPort",
                        "a host port no other container of the Pod takes",
                        quoted(&key(port)),
                    );
                }
            });
        });
    };
    check(walk, "initContainers", &spec.init_containers, false);
    check(walk, "containers", &spec.containers, true);
}

/// One mount; `container` is the one that mounts it (`None`: the template's top-level
/// `volumeMounts`, added to the Pod's own containers, whose privileges are the Pod's).
pub fn mount(walk: &mut Walk, m: &VolumeMount, container: Option<&Container>) {
    if m.mount_path.is_empty() {
        walk.fail_at("mountPath", "a mount path", "an empty string");
    }
    let sub_path = non_empty(&m.sub_path);
    if let Some(sub) = sub_path
        && let Some(fault) = names::descending_path_fault(sub)
    {
        walk.fail_at("subPath", fault, quoted(sub));
    }
    if let Some(expr) = non_empty(&m.sub_path_expr) {
        if sub_path.is_some() {
            walk.fail_at("subPathExpr", "subPathExpr or subPath, not both", quoted(expr));
        } else if let Some(fault) = names::descending_path_fault(expr) {
            walk.fail_at("subPathExpr", fault, quoted(expr));
        }
    }
    let propagation = m.mount_propagation.as_deref();
    walk.one_of(
        "mountPropagation",
        propagation,
        &["None", "HostToContainer", "Bidirectional"],
    );
    if propagation == Some("Bidirectional")
        && let Some(c) = container
        && !c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false)
    {
        walk.fail_at(
            "mountPropagation",
            "Bidirectional propagation only in a privileged container",
            "an unprivileged container",
        );
    }
    match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => {}
        Some("Enabled" | "IfPossible") => {
            if !m.read_only.unwrap_or(false) {
                walk.fail_at("recursiveReadOnly", "`readOnly: true` with it", "readOnly false");
            }
            if propagation.is_some_and(|p| p != "None") {
                walk.fail_at(
                    "recursiveReadOnly",
                    "mountPropagation None or unset with it",
                    quoted(propagation.unwrap_or_default()),
                );
            }
        }
        Some(other) => walk.fail_at(
            "recursiveReadOnly",
            r#"one of "Disabled", "IfPossible", "Enabled""#,
            quoted(other),
        ),
    }
}

fn devices(walk: &mut Walk, c: &Container, volumes: &BTreeMap<&str, &Volume>) {
    let mounts: BTreeMap<&str, &str> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    let (mut names_seen, mut paths_seen) = (BTreeSet::new(), BTreeSet::new());
    walk.list(
        "volumeDevices",
        c.volume_devices.as_deref().unwrap_or_default(),
        |walk, device| {
            let name = device.name.as_str();
            if name.is_empty() {
                walk.fail_at("name", "the name of a volume", "an empty string");
            } else if !names_seen.insert(name) {
                walk.fail_at("name", "a device name unique in its container", quoted(name));
            } else {
                match volumes.get(name) {
                    None => walk.fail_at("name", "the name of one of the template's volumes", quoted(name)),
                    Some(v) if v.persistent_volume_claim.is_none() && v.ephemeral.is_none() => walk.fail_at(
                        "name",
                        "a persistentVolumeClaim or ephemeral volume (block mode)",
                        quoted(name),
                    ),
                    Some(_) => {}
                }
                if mounts.contains_key(name) {
                    walk.fail_at("name", "a volume this container does not also mount", quoted(name));
                }
            }
            let path = device.device_path.as_str();
            if path.is_empty() {
                walk.fail_at("devicePath", "a device path", "an empty string");
            } else if !paths_seen.insert(path) {
                walk.fail_at("devicePath", "a device path unique in its container", quoted(path));
            } else if path.split('/').any(|p| p == "..") {
                walk.fail_at("devicePath", "a path without '..'", quoted(path));
            } else if mounts.values().any(|p| *p == path) {
                walk.fail_at("devicePath", "a path no mount of this container uses", quoted(path));
            }
        },
    );
}

fn resize_policy(walk: &mut Walk, c: &Container) {
    if !walk.version.resize_policy() {
        return;
    }
    let mut seen = BTreeSet::new();
    walk.list(
        "resizePolicy",
        c.resize_policy.as_deref().unwrap_or_default(),
        |walk, p| {
            if p.resource_name.is_empty() {
                walk.fail_at("resourceName", r#"one of "cpu", "memory""#, "an empty string");
            } else {
                walk.one_of("resourceName", Some(&p.resource_name), &["cpu", "memory"]);
                if !seen.insert(p.resource_name.clone()) {
                    walk.fail_at("resourceName", "each resource once", quoted(&p.resource_name));
                }
            }
            if p.restart_policy.is_empty() {
                walk.fail_at(
                    "restartPolicy",
                    r#"one of "NotRequired", "RestartContainer""#,
                    "an empty string",
                );
            } else {
                walk.one_of(
                    "restartPolicy",
                    Some(&p.restart_policy),
                    &["NotRequired", "RestartContainer"],
                );
            }
        },
    );
}

fn restart(walk: &mut Walk, c: &Container, role: Role) {
    let rules_on = walk.version.container_restart_rules();
    let policy = c.restart_policy.as_deref();
    match (role, policy, rules_on) {
        (_, None, _) => {}
        (_, Some(_), true) => walk.one_of("restartPolicy", policy, &["Always", "OnFailure", "Never"]),
        (Role::Init, Some(_), false) => walk.one_of("restartPolicy", policy, &["Always"]),
        (Role::Sidecar, Some(value), false) => walk.fail_at(
            "restartPolicy",
            format!(
                "none on a container injected as a regular container (Kubernetes {} takes it only on init containers; native sidecars get `Always`)",
                walk.version
            ),
            quoted(value),
        ),
    }
    let rules = c.restart_policy_rules.as_deref().unwrap_or_default();
    if !rules_on || rules.is_empty() {
        return;
    }
    // As a regular container the rules need a restartPolicy of its own; as a native
    // sidecar (restartPolicy Always) they need Kubernetes 1.36.
    let sidecar_form = role == Role::Sidecar || policy == Some("Always");
    if policy.is_none() {
        walk.fail_at("restartPolicy", "a restartPolicy with `restartPolicyRules`", "none");
    }
    if sidecar_form && !walk.version.restart_all_containers() {
        walk.fail_at(
            "restartPolicyRules",
            format!("none on a native sidecar (Kubernetes {})", walk.version),
            "restart rules",
        );
    }
    walk.list("restartPolicyRules", rules, restart_rule);
}

fn restart_rule(walk: &mut Walk, rule: &ContainerRestartRule) {
    let actions: &[&str] = if walk.version.restart_all_containers() {
        &["Restart", "RestartAllContainers"]
    } else {
        &["Restart"]
    };
    walk.one_of("action", Some(&rule.action), actions);
    match &rule.exit_codes {
        None => walk.fail_at("exitCodes", "the exit codes the rule matches", "none"),
        Some(codes) => walk.key("exitCodes", |walk| {
            walk.one_of("operator", Some(&codes.operator), &["In", "NotIn"]);
        }),
    }
}
