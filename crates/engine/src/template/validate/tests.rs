use super::*;
use crate::template::{EMBEDDED_CLASSIC, EMBEDDED_DEFAULT, Fault, Template, TemplateError};

fn v(text: &str) -> KubeVersion {
    text.parse().unwrap()
}

/// The value errors of `template` for `version` (a template that fails otherwise panics).
fn refused(template: &str, version: KubeVersion) -> Vec<ValueError> {
    match Template::parse_keeping_values("config", template, version) {
        Ok((_, None)) => Vec::new(),
        Ok((_, Some(refused))) => refused
            .faults()
            .iter()
            .map(|fault| match fault {
                Fault::Value(value) => value.clone(),
                other => panic!("expected only value faults, found {other}"),
            })
            .collect(),
        other => panic!("expected a template that parses, found {other:?}"),
    }
}

/// A template of one container `s` with `fields` (YAML, indented under it) added.
fn sidecar(fields: &str) -> String {
    let indented: String = fields.lines().map(|l| format!("  {l}\n")).collect();
    format!("containers:\n- name: s\n  image: envoy\n{indented}")
}

#[track_caller]
fn assert_refused(template: &str, version: KubeVersion, path: &str, expected: &str) {
    let errors = refused(template, version);
    assert!(
        errors.iter().any(|e| e.path == path && e.expected.contains(expected)),
        "expected `{path}` refused with {expected:?} on {version}, found {errors:#?}\n{template}"
    );
}

#[track_caller]
fn assert_accepted(template: &str, version: KubeVersion) {
    let errors = refused(template, version);
    assert!(
        errors.is_empty(),
        "expected no value errors on {version}, found {errors:#?}\n{template}"
    );
}

#[test]
fn the_shipped_templates_pass_every_supported_version() {
    for minor in 31..=36 {
        let version = v(&format!("1.{minor}"));
        assert_accepted(EMBEDDED_DEFAULT, version);
        assert_accepted(EMBEDDED_CLASSIC, version);
    }
}

#[test]
fn the_first_hour_values_are_refused_with_field_line_expected_and_found() {
    let text = "containers:\n- name: Envoy\n  image: \"\"\n  imagePullPolicy: Sometimes\n  ports:\n  - containerPort: 70000\n    protocol: tcp\n  resources:\n    requests: {cpu: \"2\", memory: 32 MB}\n    limits: {cpu: \"1\", ephemeral-storage: 10mm}\n  readinessProbe:\n    exec: {command: [true]}\n    tcpSocket: {port: 15021}\n";
    let errors = refused(text, KubeVersion::NEWEST);
    let found: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (e.path.as_str(), e.line)).collect();
    for expected in [
        ("containers[0].name", Some(2)),
        ("containers[0].image", Some(3)),
        ("containers[0].imagePullPolicy", Some(4)),
        ("containers[0].ports[0].containerPort", Some(6)),
        ("containers[0].ports[0].protocol", Some(7)),
        ("containers[0].resources.requests.memory", Some(9)),
        ("containers[0].resources.limits.ephemeral-storage", Some(10)),
        ("containers[0].resources.requests.cpu", Some(9)),
        ("containers[0].readinessProbe", Some(11)),
    ] {
        assert!(found.contains(&expected), "{expected:?} in {errors:#?}");
    }
    let message = TemplateError::Faults {
        template: "config".into(),
        faults: errors.into_iter().map(Fault::Value).collect(),
    }
    .to_string();
    assert!(
        message.contains(
            r#"field `containers[0].ports[0].protocol` at line 7: expected one of "TCP", "UDP", "SCTP", found "tcp""#
        ),
        "{message}"
    );
    assert!(
        message.contains(
            r#"field `containers[0].resources.requests.cpu` at line 9: expected at most the limit 1, found "2""#
        ),
        "{message}"
    );
    assert!(message.contains(r#"found "32 MB""#), "{message}");
}

#[test]
fn names_ports_and_enums() {
    let new = KubeVersion::NEWEST;
    assert_refused(
        &sidecar("ports: [{name: HTTP, containerPort: 80}]"),
        new,
        "containers[0].ports[0].name",
        "port name",
    );
    assert_refused(
        &sidecar("ports: [{name: a, containerPort: 80}, {name: a, containerPort: 81}]"),
        new,
        "containers[0].ports[1].name",
        "unique",
    );
    assert_refused(
        &sidecar("ports: [{containerPort: 0}]"),
        new,
        "containers[0].ports[0].containerPort",
        "1 to 65535",
    );
    assert_refused(
        &sidecar("ports: [{containerPort: 80, hostPort: 70000}]"),
        new,
        "containers[0].ports[0].hostPort",
        "1 to 65535",
    );
    assert_refused(
        &sidecar("terminationMessagePolicy: Always"),
        new,
        "containers[0].terminationMessagePolicy",
        "File",
    );
    assert_refused(&sidecar("image: \" envoy\""), new, "containers[0].image", "whitespace");
    assert_accepted(
        &sidecar("ports: [{name: envoy-ready, containerPort: 15021, protocol: UDP}]"),
        new,
    );
    let two = "containers:\n- {name: a, image: x, ports: [{containerPort: 80, hostPort: 8080}]}\n- {name: b, image: x, ports: [{containerPort: 81, hostPort: 8080}]}\n";
    assert_refused(two, new, "containers[1].ports[0].hostPort", "host port");
    let inits = "initContainers:\n- {name: a, image: x, ports: [{containerPort: 80, hostPort: 8080}]}\n- {name: b, image: x, ports: [{containerPort: 81, hostPort: 8080}]}\n";
    assert_accepted(inits, new);
}

#[test]
fn resources_quantities_limits_and_extended_resources() {
    let new = KubeVersion::NEWEST;
    let res = |r: &str| sidecar(&format!("resources: {r}"));
    assert_refused(
        &res("{limits: {cpu: banana}}"),
        new,
        "containers[0].resources.limits.cpu",
        "a quantity",
    );
    assert_refused(
        &res("{limits: {cpu: 10mm}}"),
        new,
        "containers[0].resources.limits.cpu",
        "a quantity",
    );
    assert_refused(
        &res("{limits: {cpu: \"-1\"}}"),
        new,
        "containers[0].resources.limits.cpu",
        "0 or more",
    );
    assert_refused(
        &res("{limits: {pods: \"1\"}}"),
        new,
        "containers[0].resources.limits.pods",
        "container resource",
    );
    assert_refused(
        &res("{limits: {example.com/gpu: 1500m}, requests: {example.com/gpu: 1500m}}"),
        new,
        "containers[0].resources.limits.example.com/gpu",
        "whole number",
    );
    assert_refused(
        &res("{requests: {example.com/gpu: \"1\"}}"),
        new,
        "containers[0].resources.limits.example.com/gpu",
        "a limit",
    );
    assert_refused(
        &res("{requests: {example.com/gpu: \"1\"}, limits: {example.com/gpu: \"2\"}}"),
        new,
        "containers[0].resources.requests.example.com/gpu",
        "the limit",
    );
    assert_refused(
        &res("{limits: {hugepages-2Mi: 3Mi, memory: 1Gi}}"),
        new,
        "containers[0].resources.limits.hugepages-2Mi",
        "pages",
    );
    assert_refused(
        &res("{limits: {hugepages-2Mi: 2Mi}}"),
        new,
        "containers[0].resources",
        "cpu or memory",
    );
    // 0.1 CPU is 100m exactly, a limit equal to its request is fine, and so are the
    // Kubernetes-prefixed names.
    assert_accepted(
        &res("{requests: {cpu: \"0.1\"}, limits: {cpu: 100m, kubernetes.io/x: \"1\"}}"),
        new,
    );
    assert_accepted(
        &res("{limits: {example.com/gpu: \"2\", hugepages-2Mi: 4Mi, memory: 1Gi}, requests: {example.com/gpu: \"2\"}}"),
        new,
    );
}

#[test]
fn probes_and_hooks_take_exactly_one_handler_and_sane_numbers() {
    let new = KubeVersion::NEWEST;
    assert_refused(
        &sidecar("readinessProbe: {periodSeconds: 3}"),
        new,
        "containers[0].readinessProbe",
        "exactly one of",
    );
    assert_refused(
        &sidecar("livenessProbe: {exec: {command: [x]}, successThreshold: 2}"),
        new,
        "containers[0].livenessProbe.successThreshold",
        "1 for",
    );
    assert_refused(
        &sidecar("readinessProbe: {exec: {command: [x]}, periodSeconds: -1}"),
        new,
        "containers[0].readinessProbe.periodSeconds",
        "0 to",
    );
    assert_refused(
        &sidecar("readinessProbe: {httpGet: {port: HTTP}}"),
        new,
        "containers[0].readinessProbe.httpGet.port",
        "port name",
    );
    assert_refused(
        &sidecar("readinessProbe: {httpGet: {port: 80, scheme: http}}"),
        new,
        "containers[0].readinessProbe.httpGet.scheme",
        "HTTPS",
    );
    assert_refused(
        &sidecar("readinessProbe: {exec: {command: [x]}, terminationGracePeriodSeconds: 5}"),
        new,
        "containers[0].readinessProbe.terminationGracePeriodSeconds",
        "none on a readiness",
    );
    assert_refused(
        &sidecar("startupProbe: {grpc: {port: 0}}"),
        new,
        "containers[0].startupProbe.grpc.port",
        "1 to 65535",
    );
    assert_refused(
        &sidecar("lifecycle: {preStop: {}}"),
        new,
        "containers[0].lifecycle.preStop",
        "exactly one of",
    );
    assert_refused(
        &sidecar("lifecycle: {preStop: {exec: {}}}"),
        new,
        "containers[0].lifecycle.preStop.exec.command",
        "a command",
    );
    assert_accepted(
        &sidecar(
            "readinessProbe: {httpGet: {port: envoy-ready, path: /ready}, successThreshold: 3}\nlivenessProbe: {tcpSocket: {port: 15021}, successThreshold: 0}",
        ),
        new,
    );
    // Probes and hooks on an init container that does not keep running.
    let init = |fields: &str| format!("initContainers:\n- name: i\n  image: x\n  {fields}\n");
    assert_refused(
        &init("readinessProbe: {exec: {command: [x]}}"),
        new,
        "initContainers[0].readinessProbe",
        "without `restartPolicy: Always`",
    );
    assert_accepted(
        &init("restartPolicy: Always\n  readinessProbe: {exec: {command: [x]}}"),
        new,
    );
}

#[test]
fn env_volumes_mounts_and_security() {
    let new = KubeVersion::NEWEST;
    assert_refused(
        &sidecar("env: [{name: \"a=b\", value: x}]"),
        new,
        "containers[0].env[0].name",
        "other than '='",
    );
    assert_refused(
        &sidecar("env: [{name: A, value: x, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]"),
        new,
        "containers[0].env[0].valueFrom",
        "not both",
    );
    assert_refused(
        &sidecar("env: [{name: A, valueFrom: {fieldRef: {fieldPath: metadata.bogus}}}]"),
        new,
        "containers[0].env[0].valueFrom.fieldRef.fieldPath",
        "metadata.labels['KEY']",
    );
    assert_refused(
        &sidecar("env: [{name: A, valueFrom: {configMapKeyRef: {key: k}}}]"),
        new,
        "containers[0].env[0].valueFrom.configMapKeyRef.name",
        "subdomain",
    );
    assert_refused(
        &sidecar("envFrom: [{prefix: P}]"),
        new,
        "containers[0].envFrom[0]",
        "exactly one of",
    );
    assert_accepted(
        &sidecar(
            "env: [{name: A, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}}, {name: B, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}]",
        ),
        new,
    );
    let vol = |v: &str| format!("containers:\n- name: s\n  image: x\nvolumes:\n- {v}\n");
    assert_refused(
        &vol("{name: V_1, emptyDir: {}}"),
        new,
        "volumes[0].name",
        "RFC 1123 label",
    );
    assert_refused(
        &vol("{name: v, emptyDir: {}, configMap: {name: c}}"),
        new,
        "volumes[0]",
        "one volume source",
    );
    assert_refused(
        &vol("{name: v, configMap: {name: c, defaultMode: 888}}"),
        new,
        "volumes[0].configMap.defaultMode",
        "file mode",
    );
    assert_refused(
        &vol("{name: v, hostPath: {path: /x, type: Dir}}"),
        new,
        "volumes[0].hostPath.type",
        "DirectoryOrCreate",
    );
    assert_refused(
        &vol("{name: v, projected: {sources: [{serviceAccountToken: {path: t, expirationSeconds: 60}}]}}"),
        new,
        "volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds",
        "600 to",
    );
    assert_refused(
        &vol("{name: v, downwardAPI: {items: [{path: a, fieldRef: {fieldPath: spec.nodeName}}]}}"),
        new,
        "volumes[0].downwardAPI.items[0].fieldRef.fieldPath",
        "metadata.uid",
    );
    assert_accepted(&vol("{name: v}"), new);
    let mount = |m: &str| {
        format!("containers:\n- name: s\n  image: x\n  volumeMounts: [{m}]\nvolumes: [{{name: v, emptyDir: {{}}}}]\n")
    };
    assert_refused(
        &mount("{name: v, mountPath: /x, subPath: /a}"),
        new,
        "containers[0].volumeMounts[0].subPath",
        "relative",
    );
    assert_refused(
        &mount("{name: v, mountPath: /x, mountPropagation: Bidirectional}"),
        new,
        "containers[0].volumeMounts[0].mountPropagation",
        "privileged",
    );
    assert_refused(
        &mount("{name: v, mountPath: /x, recursiveReadOnly: Enabled}"),
        new,
        "containers[0].volumeMounts[0].recursiveReadOnly",
        "readOnly",
    );
    assert_refused(
        &sidecar("securityContext: {runAsUser: -1}"),
        new,
        "containers[0].securityContext.runAsUser",
        "0 to 2147483647",
    );
    assert_refused(
        &sidecar("securityContext: {seccompProfile: {type: Localhost}}"),
        new,
        "containers[0].securityContext.seccompProfile.localhostProfile",
        "Localhost",
    );
    assert_refused(
        &sidecar("securityContext: {privileged: true, allowPrivilegeEscalation: false}"),
        new,
        "containers[0].securityContext.allowPrivilegeEscalation",
        "privileged",
    );
}

#[test]
fn rules_follow_the_version_of_the_api_server() {
    let env = sidecar("env: [{name: 1abc, value: x}]");
    assert_refused(
        &env,
        v("1.31"),
        "containers[0].env[0].name",
        "not starting with a digit",
    );
    assert_accepted(&env, v("1.32"));

    let sleep = sidecar("lifecycle: {preStop: {sleep: {seconds: 0}}}");
    assert_refused(
        &sleep,
        v("1.32"),
        "containers[0].lifecycle.preStop.sleep.seconds",
        "1 or more",
    );
    assert_accepted(&sleep, v("1.33"));

    let restart = sidecar("restartPolicy: Never");
    assert_refused(
        &restart,
        v("1.34"),
        "containers[0].restartPolicy",
        "native sidecars get `Always`",
    );
    assert_accepted(&restart, v("1.35"));
    assert_refused(
        &sidecar("restartPolicy: Sometimes"),
        v("1.36"),
        "containers[0].restartPolicy",
        "OnFailure",
    );

    let file = "containers:\n- name: s\n  image: x\n  env: [{name: A, valueFrom: {fileKeyRef: {volumeName: v, path: p, key: k}}}]\nvolumes: [{name: v, emptyDir: {}}]\n";
    assert_refused(file, v("1.34"), "containers[0].env[0].valueFrom", "one of fieldRef");
    assert_accepted(file, v("1.35"));

    let claims = sidecar("resources: {claims: [{name: gpu}]}");
    assert_accepted(&claims, v("1.33"));
    assert_refused(
        &claims,
        v("1.34"),
        "containers[0].resources.claims[0].name",
        "spec.resourceClaims",
    );

    let unmasked = sidecar("securityContext: {procMount: Unmasked}");
    assert_accepted(&unmasked, v("1.32"));
    assert_refused(
        &unmasked,
        v("1.33"),
        "containers[0].securityContext.procMount",
        "hostUsers",
    );

    let resize = sidecar("resizePolicy: [{resourceName: gpu, restartPolicy: NotRequired}]");
    assert_accepted(&resize, v("1.32"));
    assert_refused(
        &resize,
        v("1.33"),
        "containers[0].resizePolicy[0].resourceName",
        "memory",
    );

    let image = "containers:\n- name: s\n  image: x\nvolumes: [{name: v, image: {pullPolicy: Sometimes}}]\n";
    assert_accepted(image, v("1.34"));
    assert_refused(image, v("1.35"), "volumes[0].image.reference", "image reference");
}
