//! A container's `securityContext`: user and group ids, the seccomp and AppArmor profiles,
//! procMount, and the combinations the API server refuses.

use k8s_openapi::api::core::v1::SecurityContext;

use super::names;
use super::walk::{Walk, quoted};

const MAX_ID: i64 = 2_147_483_647;

pub fn context(walk: &mut Walk, sc: &SecurityContext) {
    walk.within("runAsUser", sc.run_as_user, 0, MAX_ID);
    walk.within("runAsGroup", sc.run_as_group, 0, MAX_ID);
    if walk.version.proc_mount()
        && let Some(proc_mount) = sc.proc_mount.as_deref()
    {
        match proc_mount {
            "Default" => {}
            // `hostUsers: false` is the Pod's, which a template does not set.
            "Unmasked" => walk.fail_at(
                "procMount",
                "\"Default\" (\"Unmasked\" needs the Pod's `hostUsers: false`)",
                quoted(proc_mount),
            ),
            other => walk.one_of("procMount", Some(other), &["Default", "Unmasked"]),
        }
    }
    walk.opt("seccompProfile", sc.seccomp_profile.as_ref(), |walk, p| {
        profile(walk, &p.type_, p.localhost_profile.as_deref(), Profile::Seccomp);
    });
    walk.opt("appArmorProfile", sc.app_armor_profile.as_ref(), |walk, p| {
        profile(walk, &p.type_, p.localhost_profile.as_deref(), Profile::AppArmor);
    });
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            walk.fail_at(
                "allowPrivilegeEscalation",
                "not false in a privileged container",
                "false with `privileged: true`",
            );
        }
        let adds = sc
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_deref())
            .unwrap_or_default();
        if adds.iter().any(|c| c == "CAP_SYS_ADMIN") {
            walk.fail_at(
                "allowPrivilegeEscalation",
                "not false with CAP_SYS_ADMIN added",
                "false with `capabilities.add: [CAP_SYS_ADMIN]`",
            );
        }
    }
    walk.opt("windowsOptions", sc.windows_options.as_ref(), |walk, w| {
        if w.host_process == Some(true) {
            walk.fail_at(
                "hostProcess",
                "false (a HostProcess container needs the Pod's hostNetwork and every container HostProcess)",
                "true",
            );
        }
    });
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Profile {
    Seccomp,
    AppArmor,
}

fn profile(walk: &mut Walk, kind: &str, localhost: Option<&str>, which: Profile) {
    const TYPES: [&str; 3] = ["Localhost", "RuntimeDefault", "Unconfined"];
    if kind.is_empty() {
        walk.fail_at("type", r#"one of "Localhost", "RuntimeDefault", "Unconfined""#, "none");
        return;
    }
    walk.one_of("type", Some(kind), &TYPES);
    match (kind, localhost) {
        ("Localhost", None) => walk.fail_at("localhostProfile", "a profile with type Localhost", "none"),
        ("Localhost", Some(path)) => match which {
            Profile::Seccomp => {
                if let Some(fault) = names::descending_path_fault(path) {
                    walk.fail_at("localhostProfile", fault, quoted(path));
                }
            }
            Profile::AppArmor => {
                if path.trim() != path {
                    walk.fail_at(
                        "localhostProfile",
                        "a profile name without surrounding whitespace",
                        quoted(path),
                    );
                } else if path.is_empty() {
                    walk.fail_at("localhostProfile", "a profile with type Localhost", "an empty string");
                } else if path.len() > 4095 {
                    walk.fail_at(
                        "localhostProfile",
                        "at most 4095 characters",
                        format!("{} characters", path.len()),
                    );
                }
            }
        },
        (_, Some(path)) if TYPES.contains(&kind) => {
            walk.fail_at("localhostProfile", "none unless the type is Localhost", quoted(path));
        }
        _ => {}
    }
}
