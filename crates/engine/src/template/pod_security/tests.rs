use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::template::{EMBEDDED_CLASSIC, EMBEDDED_DEFAULT, KubeVersion, Template};

fn template(name: &str, text: &str) -> Template {
    Template::parse(name, text, KubeVersion::NEWEST).unwrap_or_else(|err| panic!("{name}: {err}"))
}

fn at(level: Level, version: &str) -> LevelVersion {
    LevelVersion::new(level, PolicyVersion::parse(version).unwrap())
}

/// Each finding as `place field found`, for comparing whole lists.
fn short(findings: &[Finding]) -> Vec<String> {
    findings
        .iter()
        .map(|f| format!("{} {} {}", f.place, f.field, f.found))
        .collect()
}

fn pod(spec: serde_json::Value) -> PodLevel {
    PodLevel::from_pod(&json!({ "spec": spec }))
}

const RESTRICTED_SIDECAR: &str = "containers:
- name: proxy
  image: envoy
  securityContext:
    runAsNonRoot: true
    allowPrivilegeEscalation: false
    capabilities: {drop: [ALL]}
    seccompProfile: {type: RuntimeDefault}
";

#[test]
fn the_default_template_meets_restricted_at_every_version() {
    let default = template("config", EMBEDDED_DEFAULT);
    for version in ["latest", "v1.36", "v1.35", "v1.25", "v1.0"] {
        let findings = judge("config", &default.spec, at(Level::Restricted, version), None);
        assert!(findings.is_empty(), "{version}: {findings:#?}");
    }
    assert_eq!(
        strictest_met("config", &default.spec, PolicyVersion::Latest, None),
        Level::Restricted
    );
}

/// The test above fails when the default template loses what restricted asks of it: each
/// line taken out is named back as the field restricted expects.
#[test]
fn the_default_template_without_each_restricted_setting_is_named_for_it() {
    for (line, field, found) in [
        (
            "    allowPrivilegeEscalation: false\n",
            "securityContext.allowPrivilegeEscalation",
            "none",
        ),
        (
            "    runAsNonRoot: true\n",
            "securityContext.runAsNonRoot",
            "none (judged without a Pod",
        ),
        ("      drop: [\"ALL\"]\n", "securityContext.capabilities.drop", "none"),
        (
            "    seccompProfile:\n      type: RuntimeDefault\n",
            "securityContext.seccompProfile.type",
            "none (judged without a Pod",
        ),
    ] {
        assert!(EMBEDDED_DEFAULT.contains(line), "the default template holds {line:?}");
        let edited = template("config", &EMBEDDED_DEFAULT.replace(line, ""));
        let findings = judge("config", &edited.spec, at(Level::Restricted, "latest"), None);
        assert_eq!(findings.len(), 1, "{line:?}: {findings:#?}");
        let finding = &findings[0];
        assert_eq!(finding.field, field);
        assert_eq!(finding.place, Place::Container("envoy".into()));
        assert!(finding.found.starts_with(found), "{line:?}: {finding}");
        assert!(
            judge("config", &edited.spec, at(Level::Baseline, "latest"), None).is_empty(),
            "{line:?} is restricted's alone"
        );
    }
}

#[test]
fn classic_meets_baseline_not_restricted_and_each_field_is_named() {
    let classic = template("classic", EMBEDDED_CLASSIC);
    let findings = judge("classic", &classic.spec, at(Level::Restricted, "latest"), None);
    let words: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert_eq!(
        words,
        [
            "container `envoy` of template `classic`: `securityContext.capabilities.drop`: restricted expects a list holding ALL, found none",
            "container `envoy` of template `classic`: `securityContext.seccompProfile.type`: restricted expects RuntimeDefault or Localhost, on the container or the Pod, found none (judged without a Pod: one whose own securityContext sets seccompProfile.type RuntimeDefault or Localhost meets it)",
            "container `envoy` of template `classic`: `securityContext.allowPrivilegeEscalation`: restricted expects false, found none",
            "container `envoy` of template `classic`: `securityContext.runAsNonRoot`: restricted expects true, on the container or the Pod, found none (judged without a Pod: one whose own securityContext sets runAsNonRoot: true meets it)",
        ],
    );
    assert!(findings.iter().all(|f| f.level == Level::Restricted));
    assert!(judge("classic", &classic.spec, at(Level::Baseline, "latest"), None).is_empty());
    assert_eq!(
        strictest_met("classic", &classic.spec, PolicyVersion::Latest, None),
        Level::Baseline
    );
}

#[test]
fn the_pod_s_own_security_context_meets_what_it_can_for_the_template() {
    let classic = template("classic", EMBEDDED_CLASSIC);
    let restricted_pod =
        pod(json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}}));
    let findings = judge(
        "classic",
        &classic.spec,
        at(Level::Restricted, "latest"),
        Some(&restricted_pod),
    );
    assert_eq!(
        short(&findings),
        [
            "container `envoy` securityContext.capabilities.drop none",
            "container `envoy` securityContext.allowPrivilegeEscalation none",
        ]
    );
    // A Pod that sets neither, or the wrong values, is named for it.
    let bare = pod(json!({}));
    let unconfined = pod(json!({"securityContext": {"runAsNonRoot": false, "seccompProfile": {"type": "Unconfined"}}}));
    let found = |pod: &PodLevel| {
        judge("classic", &classic.spec, at(Level::Restricted, "latest"), Some(pod))
            .into_iter()
            .filter(|f| matches!(f.control, Control::RunAsNonRoot | Control::Seccomp))
            .map(|f| f.found)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        found(&bare),
        [
            "none, and the Pod's securityContext sets no seccompProfile",
            "none, and the Pod's securityContext does not set it",
        ]
    );
    assert_eq!(
        found(&unconfined),
        [
            "none, and the Pod's securityContext sets seccompProfile.type \"Unconfined\"",
            "none, and the Pod's securityContext sets it to false",
        ]
    );
    // A container's own value wins over the Pod's, both ways.
    let own = template(
        "own",
        &RESTRICTED_SIDECAR.replace("runAsNonRoot: true", "runAsNonRoot: false"),
    );
    let findings = judge("own", &own.spec, at(Level::Restricted, "latest"), Some(&restricted_pod));
    assert_eq!(
        short(&findings),
        ["container `proxy` securityContext.runAsNonRoot false"]
    );
    assert!(
        judge(
            "r",
            &template("r", RESTRICTED_SIDECAR).spec,
            at(Level::Restricted, "latest"),
            Some(&unconfined)
        )
        .is_empty()
    );
}

#[test]
fn baseline_rules_each_name_their_field() {
    let broken = template(
        "broken",
        "initContainers:
- name: setup
  image: busybox
  securityContext:
    privileged: true
    capabilities: {add: [NET_ADMIN, CHOWN]}
containers:
- name: proxy
  image: envoy
  ports: [{containerPort: 80, hostPort: 8080}]
  securityContext:
    appArmorProfile: {type: Unconfined}
    seLinuxOptions: {type: spc_t, user: system_u, role: r}
    seccompProfile: {type: Unconfined}
  readinessProbe:
    httpGet: {host: example.com, port: 80}
  lifecycle:
    preStop:
      tcpSocket: {host: 10.0.0.1, port: 80}
volumes:
- name: node
  hostPath: {path: /var/run}
",
    );
    let findings = judge("broken", &broken.spec, at(Level::Baseline, "latest"), None);
    let controls: Vec<(Control, String)> = findings.iter().map(|f| (f.control, f.field.clone())).collect();
    assert_eq!(
        controls,
        [
            (Control::HostPathVolumes, "hostPath".to_string()),
            (Control::Privileged, "securityContext.privileged".into()),
            (Control::Capabilities, "securityContext.capabilities.add".into()),
            (Control::HostPorts, "ports[0].hostPort".into()),
            (Control::AppArmor, "securityContext.appArmorProfile.type".into()),
            (Control::SeLinux, "securityContext.seLinuxOptions.type".into()),
            (Control::SeLinux, "securityContext.seLinuxOptions.user".into()),
            (Control::SeLinux, "securityContext.seLinuxOptions.role".into()),
            (Control::Seccomp, "securityContext.seccompProfile.type".into()),
            (Control::ProbeHost, "readinessProbe.httpGet.host".into()),
            (Control::ProbeHost, "lifecycle.preStop.tcpSocket.host".into()),
        ]
    );
    assert!(findings.iter().all(|f| f.level == Level::Baseline));
    assert_eq!(findings[2].found, "[NET_ADMIN]", "CHOWN is baseline's");
    assert_eq!(findings[1].place, Place::InitContainer("setup".into()));
    assert_eq!(findings[0].place, Place::Volume("node".into()));
    assert_eq!(
        strictest_met("broken", &broken.spec, PolicyVersion::Latest, None),
        Level::Privileged
    );
}

#[test]
fn restricted_replaces_baseline_s_volume_and_capability_rules() {
    let t = template(
        "t",
        &format!(
            "{RESTRICTED_SIDECAR}    capabilities: {{drop: [ALL], add: [NET_BIND_SERVICE, CHOWN]}}\nvolumes:\n- {{name: node, hostPath: {{path: /x}}}}\n- {{name: share, nfs: {{server: s, path: /}}}}\n- {{name: conf, configMap: {{name: c}}}}\n- {{name: scratch}}\n"
        )
        .replace("    capabilities: {drop: [ALL]}\n", ""),
    );
    let restricted = judge("t", &t.spec, at(Level::Restricted, "latest"), None);
    assert_eq!(
        short(&restricted),
        [
            "volume `node` hostPath a `hostPath` volume",
            "volume `share` nfs a `nfs` volume",
            "container `proxy` securityContext.capabilities.add [CHOWN]",
        ]
    );
    assert!(restricted[..2].iter().all(|f| f.control == Control::VolumeTypes));
    let baseline = judge("t", &t.spec, at(Level::Baseline, "latest"), None);
    assert_eq!(short(&baseline), ["volume `node` hostPath hostPath \"/x\""]);
}

#[test]
fn rules_apply_from_the_version_that_added_them() {
    let count = |text: &str, policy: LevelVersion, pod: Option<&PodLevel>| {
        judge("t", &template("t", text).spec, policy, pod).len()
    };
    let root = format!("{RESTRICTED_SIDECAR}    runAsUser: 0\n");
    assert_eq!(count(&root, at(Level::Restricted, "v1.22"), None), 0);
    assert_eq!(count(&root, at(Level::Restricted, "v1.23"), None), 1);
    let engine = format!("{RESTRICTED_SIDECAR}    seLinuxOptions: {{type: container_engine_t}}\n");
    assert_eq!(count(&engine, at(Level::Baseline, "v1.30"), None), 1);
    assert_eq!(count(&engine, at(Level::Baseline, "v1.31"), None), 0);
    let host = format!("{RESTRICTED_SIDECAR}  startupProbe: {{tcpSocket: {{host: h, port: 1}}}}\n");
    assert_eq!(count(&host, at(Level::Baseline, "v1.33"), None), 0);
    assert_eq!(count(&host, at(Level::Baseline, "v1.34"), None), 1);
    // Below v1.22 restricted judges capabilities by baseline's list; below v1.19 it leaves
    // seccomp to the Pod's annotations.
    let classic = EMBEDDED_CLASSIC;
    assert_eq!(count(classic, at(Level::Restricted, "v1.21"), None), 3);
    assert_eq!(count(classic, at(Level::Restricted, "v1.18"), None), 2);
}

#[test]
fn a_user_namespace_pod_relaxes_what_the_api_server_relaxes_from_v1_35() {
    let text = format!("{RESTRICTED_SIDECAR}    procMount: Unmasked\n    runAsUser: 0\n")
        .replace("    runAsNonRoot: true\n", "");
    let t = Template::parse_keeping_values("t", &text, KubeVersion::NEWEST)
        .unwrap()
        .0;
    let userns = pod(json!({"hostUsers": false}));
    let controls = |policy: LevelVersion, pod: Option<&PodLevel>| {
        judge("t", &t.spec, policy, pod)
            .into_iter()
            .map(|f| f.control)
            .collect::<Vec<_>>()
    };
    assert_eq!(controls(at(Level::Baseline, "v1.35"), Some(&userns)), []);
    assert_eq!(
        controls(at(Level::Baseline, "v1.34"), Some(&userns)),
        [Control::ProcMount]
    );
    assert_eq!(
        controls(at(Level::Restricted, "latest"), Some(&userns)),
        [Control::ProcMount]
    );
    assert_eq!(
        controls(at(Level::Restricted, "latest"), None),
        [Control::ProcMount, Control::RunAsNonRoot, Control::RunAsUser]
    );
}

#[test]
fn a_windows_pod_skips_restricted_s_linux_rules_from_v1_25() {
    let classic = template("classic", EMBEDDED_CLASSIC);
    let windows = pod(json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true}}));
    assert!(judge("classic", &classic.spec, at(Level::Restricted, "v1.25"), Some(&windows)).is_empty());
    assert_eq!(
        judge("classic", &classic.spec, at(Level::Restricted, "v1.24"), Some(&windows)).len(),
        3
    );
}

#[test]
fn a_host_network_pod_gets_the_template_s_ports_on_the_node() {
    let default = template("config", EMBEDDED_DEFAULT);
    let host = pod(json!({"hostNetwork": true}));
    let findings = judge("config", &default.spec, at(Level::Baseline, "latest"), Some(&host));
    assert_eq!(findings.len(), 3, "{findings:#?}");
    assert_eq!(
        findings[0].to_string(),
        "container `envoy` of template `config`: `ports[0].hostPort`: baseline expects 0 or none, found none, which the API server sets to the containerPort 15006 in a Pod with `hostNetwork: true`"
    );
}

#[test]
fn privileged_allows_everything() {
    let t = template(
        "t",
        "containers:\n- {name: p, image: e, securityContext: {privileged: true}}\n",
    );
    assert!(judge("t", &t.spec, at(Level::Privileged, "latest"), None).is_empty());
}

#[test]
fn namespace_labels_are_read_as_the_api_server_reads_them() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{LABEL_PREFIX}{k}"), v.to_string()))
            .collect()
    };
    let none = NamespacePolicy::from_labels(&BTreeMap::new());
    assert!(none.unlabelled());
    assert_eq!(none.enforce.applied, at(Level::Privileged, "latest"));
    assert!(!none.enforce.labelled);

    let set = NamespacePolicy::from_labels(&labels(&[
        ("enforce", "restricted"),
        ("enforce-version", "v1.30"),
        ("warn", "baseline"),
    ]));
    assert!(!set.unlabelled());
    assert_eq!(set.enforce.applied, at(Level::Restricted, "v1.30"));
    assert_eq!(set.warn.applied, at(Level::Baseline, "latest"));
    assert_eq!(set.audit.applied, at(Level::Privileged, "latest"));
    assert!(set.enforce.labelled && set.warn.labelled && !set.audit.labelled);

    let bad = NamespacePolicy::from_labels(&labels(&[
        ("enforce", "strict"),
        ("warn", "Restricted"),
        ("audit-version", "v1.025"),
    ]));
    assert_eq!(bad.enforce.applied.level, Level::Restricted, "enforce fails closed");
    assert_eq!(bad.warn.applied.level, Level::Privileged, "warn fails open");
    assert_eq!(bad.audit.applied.version, PolicyVersion::Latest);
    assert_eq!(
        bad.enforce.unreadable,
        [
            "`pod-security.kubernetes.io/enforce` is \"strict\", expected privileged, baseline or restricted: the API server takes restricted"
        ]
    );
    assert_eq!(bad.audit.unreadable.len(), 1);

    for (text, read) in [
        ("latest", Some(PolicyVersion::Latest)),
        ("v1.0", Some(PolicyVersion::V1(0))),
        ("v1.36", Some(PolicyVersion::V1(36))),
        ("v1.07", None),
        ("1.30", None),
        ("v2.1", None),
        ("v1.", None),
        ("Latest", None),
    ] {
        assert_eq!(PolicyVersion::parse(text), read, "{text}");
    }
    assert_eq!(
        serde_json::to_value(&set.enforce).unwrap(),
        json!({"mode": "enforce", "level": "restricted", "version": "v1.30", "labelled": true})
    );
}

#[test]
fn the_pod_level_is_read_from_a_pod_and_wrong_types_are_left_unset() {
    let read = PodLevel::from_pod(&json!({"spec": {
        "hostUsers": false, "hostNetwork": true, "os": {"name": "windows"},
        "securityContext": {"runAsNonRoot": true},
    }}));
    assert!(read.user_namespace() && read.host_network && read.windows());
    assert_eq!(read.security_context.unwrap().run_as_non_root, Some(true));
    let odd = PodLevel::from_pod(&json!({"spec": {"hostNetwork": "yes", "securityContext": {"runAsNonRoot": "yes"}}}));
    assert_eq!(odd, PodLevel::default());
    assert_eq!(PodLevel::from_pod(&json!({})), PodLevel::default());
}
