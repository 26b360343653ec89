//! The tier's templates: every feature a template has, every override kind, native and
//! regular sidecars, and the largest template the CEL cost check compiles.

/// The ConfigMap data of the sameness proof.
pub fn templates() -> Vec<(&'static str, String)> {
    vec![
        ("config", String::from(CONFIG)),
        ("native", String::from(NATIVE)),
        ("canary", String::from(CANARY)),
        ("regular", String::from(REGULAR)),
        // The shipped ones, as the ConfigMap of manifests/ holds them.
        ("shipped", String::from(envoy_injector::template::EMBEDDED_DEFAULT)),
        ("classic", String::from(envoy_injector::template::EMBEDDED_CLASSIC)),
    ]
}

/// Sidecar, init container, volumes of two kinds, a mount for every app container, an
/// image pull secret, and one override of every kind (a resource the template has and one
/// it lacks, in a container with and without `resources`; an env var replaced, one with a
/// `valueFrom` replaced, one added, one added to a container without env; an image tag).
const CONFIG: &str = r#"containers:
- name: envoy
  image: docker.io/envoyproxy/envoy:v1.31.2
  args: ["--config-path", "/etc/envoy/envoy.yaml", "--log-level", "$(LOG_LEVEL)"]
  ports:
  - {containerPort: 15000, protocol: TCP}
  - {containerPort: 15090}
  - {containerPort: 15053, protocol: UDP}
  env:
  - {name: LOG_LEVEL, value: info}
  - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
  resources:
    requests: {cpu: 100m, memory: 64Mi}
    limits: {memory: 256Mi}
  volumeMounts:
  - {name: envoy-conf, mountPath: /etc/envoy, readOnly: true}
initContainers:
- name: envoy-init
  image: docker.io/library/busybox:1.36
  command: ["sh", "-c", "echo 'quoted \"words\"' && true"]
volumes:
- name: envoy-conf
  configMap: {name: envoy, items: [{key: envoy.yaml, path: envoy.yaml}]}
- name: envoy-data
  emptyDir: {}
volumeMounts:
- {name: envoy-data, mountPath: /var/run/envoy}
imagePullSecrets:
- name: registry-a
overrides:
  cpu-request: {container: envoy, field: resources.requests.cpu, max: "2"}
  memory-limit: {container: envoy, field: resources.limits.memory, min: 64Mi, max: 1Gi}
  cpu-limit: {container: envoy, field: resources.limits.cpu, min: 100m, max: "4"}
  init-storage: {container: envoy-init, field: resources.requests.ephemeral-storage, max: 1Gi}
  log-level: {container: envoy, env: LOG_LEVEL, oneOf: [debug, info, warn]}
  pod-ip: {container: envoy, env: POD_IP, oneOf: ["127.0.0.1"]}
  mode: {container: envoy, env: MODE, oneOf: [fast, "slow \"and\" safe"]}
  init-mode: {container: envoy-init, env: INIT_MODE, oneOf: [once]}
  tag: {container: envoy, imageTag: true, oneOf: [v1.31.2, v1.32.0]}
"#;

/// Native sidecars by the template, an init container, a mount in every app container.
const NATIVE: &str = r#"nativeSidecar: true
containers:
- name: proxy
  image: docker.io/library/busybox:1.36
  ports: [{containerPort: 15001}]
initContainers:
- name: setup
  image: docker.io/library/busybox:1.36
volumes:
- name: shared
  emptyDir: {medium: Memory, sizeLimit: 64Mi}
volumeMounts:
- {name: shared, mountPath: /shared, readOnly: true}
"#;

/// A namespace's template (label `sidecar.samplecrd.k8s.io/template`).
const CANARY: &str = r#"containers:
- name: envoy-canary
  image: docker.io/library/busybox:1.36
"#;

/// Two regular sidecars even for Jobs, and a Secret volume (described after `name`).
const REGULAR: &str = r#"nativeSidecar: false
containers:
- name: sidecar-a
  image: docker.io/library/busybox:1.36
- name: sidecar-b
  image: docker.io/library/busybox:1.36
  ports: [{containerPort: 9901}]
volumes:
- name: creds
  secret: {secretName: creds, defaultMode: 256}
"#;

/// `native`, allowing Pods on the node's network (`allowHostNetwork`): its port becomes
/// the node's in such a Pod.
pub fn host() -> String {
    format!("allowHostNetwork: true\n{NATIVE}")
}

/// The largest template of the tests: 5 containers, 50 env vars, every override kind.
pub fn largest() -> String {
    let mut text = String::from("containers:\n");
    for c in 0..4 {
        text.push_str(&format!(
            "- name: side-{c}\n  image: docker.io/library/busybox:1.36\n  ports: [{{containerPort: {}}}]\n  resources:\n    requests: {{cpu: 10m, memory: 16Mi}}\n  env:\n",
            15100 + c
        ));
        text.push_str(&format!("  - {{name: VAR_{c}_0, value: a}}\n"));
        for e in 1..10 {
            text.push_str(&format!("  - {{name: VAR_{c}_{e}, value: \"value {e}\"}}\n"));
        }
    }
    text.push_str("initContainers:\n- name: side-init\n  image: docker.io/library/busybox:1.36\n  env:\n");
    for e in 0..10 {
        text.push_str(&format!("  - {{name: INIT_{e}, value: \"v{e}\"}}\n"));
    }
    text.push_str(
        "volumes:\n- name: big-conf\n  configMap: {name: big}\n- name: big-data\n  emptyDir: {}\n\
         volumeMounts:\n- {name: big-data, mountPath: /big}\n- {name: big-conf, mountPath: /big-conf}\n\
         imagePullSecrets:\n- name: big-registry\n\
         overrides:\n",
    );
    for c in 0..4 {
        text.push_str(&format!(
            "  cpu-{c}: {{container: side-{c}, field: resources.requests.cpu, min: 1m, max: \"2\"}}\n  \
             mem-{c}: {{container: side-{c}, field: resources.limits.memory, max: 1Gi}}\n  \
             var-{c}: {{container: side-{c}, env: VAR_{c}_0, oneOf: [a, b, c]}}\n  \
             tag-{c}: {{container: side-{c}, imageTag: true, oneOf: [\"1.36\", \"1.37\"]}}\n"
        ));
    }
    text.push_str("  init-var: {container: side-init, env: NEW_INIT, oneOf: [x, y]}\n");
    text
}
