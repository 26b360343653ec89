//! The corpus: Pod shapes created once through the policies and once through the webhook.
//! Each names the namespace kind it goes to, and whether it is created as a dry run.

use serde_json::{Value, json};

pub const INJECT: &str = "sidecar.samplecrd.k8s.io/inject";
pub const LEGACY: &str = "initializer.kubernetes.io/envoy";
pub const TEMPLATE: &str = "sidecar.samplecrd.k8s.io/template";
pub const NATIVE: &str = "sidecar.samplecrd.k8s.io/native-sidecar";
pub const NETWORK: &str = "sidecar.samplecrd.k8s.io/network";
pub const MULTUS: &str = "k8s.v1.cni.cncf.io/networks";
const OVERRIDE: &str = "sidecar.samplecrd.k8s.io/override.";

/// Which namespace pair a shape goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// No labels: annotations opt in.
    Plain,
    /// `sidecar.samplecrd.k8s.io/inject=enabled` and template label `canary`.
    Labelled,
    /// Opt-in label and a template label naming no template.
    MissingTemplate,
    /// `sidecar.samplecrd.k8s.io/inject=disabled`: no injector acts there.
    Disabled,
    /// No injection labels; `pod-security.kubernetes.io/enforce=restricted`.
    Restricted,
}

pub struct Shape {
    pub name: &'static str,
    pub place: Place,
    pub dry_run: bool,
    /// The Pod, without namespace.
    pub pod: Value,
}

const IMAGE: &str = "registry.k8s.io/pause:3.10";

fn app(name: &str) -> Value {
    json!({"name": name, "image": IMAGE})
}

fn with_annotations(name: &str, annotations: &[(&str, &str)], spec: Value) -> Value {
    let annotations: serde_json::Map<String, Value> =
        annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let mut metadata = json!({"name": name});
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

fn containers(list: Value) -> Value {
    json!({"containers": list})
}

fn shape(name: &'static str, annotations: &[(&str, &str)], spec: Value) -> Shape {
    Shape {
        name,
        place: Place::Plain,
        dry_run: false,
        pod: with_annotations(name, annotations, spec),
    }
}

fn opted(name: &'static str, more: &[(&str, &str)], spec: Value) -> Shape {
    let mut annotations = vec![(INJECT, "true")];
    annotations.extend_from_slice(more);
    shape(name, &annotations, spec)
}

fn override_key(name: &str) -> String {
    format!("{OVERRIDE}{name}")
}

/// Every shape of the corpus.
pub fn corpus() -> Vec<Shape> {
    let one = || containers(json!([app("app")]));
    let ov = |n: &str| override_key(n);
    let (cpu, mem, cpu_limit, storage, log, pod_ip, mode, init_mode, tag) = (
        ov("cpu-request"),
        ov("memory-limit"),
        ov("cpu-limit"),
        ov("init-storage"),
        ov("log-level"),
        ov("pod-ip"),
        ov("mode"),
        ov("init-mode"),
        ov("tag"),
    );
    let mut all = vec![
        // Who is injected.
        opted("annotated", &[], one()),
        shape("legacy", &[(LEGACY, "true")], one()),
        shape("trimmed-true", &[(INJECT, " TRUE ")], one()),
        shape("annotation-opted-out", &[(INJECT, "false")], one()),
        shape("legacy-out-wins", &[(INJECT, "true"), (LEGACY, "False")], one()),
        shape("not-opted-in", &[], one()),
        shape("unreadable-flag", &[(INJECT, "yes")], one()),
        // Which template.
        opted("native-template", &[(TEMPLATE, "native")], one()),
        opted("canary-template", &[(TEMPLATE, "canary")], one()),
        opted("trimmed-template", &[(TEMPLATE, " native ")], one()),
        opted("blank-template", &[(TEMPLATE, "  ")], one()),
        opted("unknown-template", &[(TEMPLATE, "nope")], one()),
        // Native sidecars.
        opted("native-annotation", &[(NATIVE, "true")], one()),
        opted("regular-annotation", &[(TEMPLATE, "native"), (NATIVE, "False")], one()),
        opted(
            "restart-never",
            &[],
            json!({"restartPolicy": "Never", "containers": [app("app")]}),
        ),
        opted(
            "restart-on-failure",
            &[],
            json!({"restartPolicy": "OnFailure", "containers": [app("app")]}),
        ),
        opted(
            "regular-template-job",
            &[(TEMPLATE, "regular")],
            json!({"restartPolicy": "Never", "containers": [app("app")]}),
        ),
        // Volumes and mounts.
        opted(
            "own-volumes-and-mounts",
            &[],
            json!({"containers": [{"name": "app", "image": IMAGE, "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
                   "volumes": [{"name": "cache", "emptyDir": {}}]}),
        ),
        opted(
            "same-volume-already",
            &[],
            json!({"containers": [app("app")], "volumes": [{"name": "envoy-data", "emptyDir": {}}]}),
        ),
        opted(
            "same-volume-mounted-already",
            &[],
            json!({"containers": [{"name": "app", "image": IMAGE, "volumeMounts": [{"name": "envoy-data", "mountPath": "/var/run/envoy"}]}],
                   "volumes": [{"name": "envoy-data", "emptyDir": {}}]}),
        ),
        opted(
            "volume-collision-hostpath",
            &[],
            json!({"containers": [app("app")], "volumes": [{"name": "envoy-data", "hostPath": {"path": "/tmp/a, b", "type": "Directory"}}]}),
        ),
        opted(
            // Cut after 120 characters on both paths: CEL counts characters, not bytes.
            "volume-collision-long-non-ascii",
            &[],
            json!({"containers": [app("app")], "volumes": [{"name": "envoy-data", "hostPath": {"path": format!("/données/{}", "é".repeat(150))}}]}),
        ),
        opted(
            "volume-collision-configmap",
            &[],
            json!({"containers": [app("app")], "volumes": [{"name": "envoy-conf", "configMap": {"name": "other", "items": [{"key": "a", "path": "b"}, {"key": "c", "path": "d"}]}}]}),
        ),
        opted(
            "volume-collision-secret",
            &[(TEMPLATE, "regular")],
            json!({"containers": [app("app")], "volumes": [{"name": "creds", "secret": {"secretName": "other"}}]}),
        ),
        opted(
            "mount-collision",
            &[],
            json!({"containers": [app("first"), {"name": "app", "image": IMAGE, "volumeMounts": [{"name": "cache", "mountPath": "/var/run/envoy"}]}],
                   "volumes": [{"name": "cache", "emptyDir": {}}]}),
        ),
        opted(
            "two-apps-and-an-init",
            &[],
            json!({"initContainers": [app("migrate")], "containers": [app("web"), app("worker")]}),
        ),
        opted(
            "two-apps-native-template",
            &[(TEMPLATE, "native")],
            json!({"initContainers": [app("migrate")], "containers": [app("web"), {"name": "worker", "image": IMAGE, "volumeMounts": [{"name": "w", "mountPath": "/w"}]}],
                   "volumes": [{"name": "w", "emptyDir": {}}]}),
        ),
        // Ports.
        opted(
            "port-collision",
            &[],
            json!({"containers": [{"name": "app", "image": IMAGE, "ports": [{"containerPort": 8080}, {"containerPort": 15000}]}]}),
        ),
        opted(
            "port-other-protocol",
            &[],
            json!({"containers": [{"name": "app", "image": IMAGE, "ports": [{"containerPort": 15000, "protocol": "UDP"}]}]}),
        ),
        opted(
            "port-collision-udp",
            &[],
            json!({"containers": [{"name": "app", "image": IMAGE, "ports": [{"containerPort": 15053, "protocol": "UDP"}]}]}),
        ),
        opted(
            "port-collision-in-init",
            &[],
            json!({"initContainers": [{"name": "init", "image": IMAGE, "ports": [{"containerPort": 15090}]}], "containers": [app("app")]}),
        ),
        // Already there.
        opted(
            "all-containers-present",
            &[],
            json!({"initContainers": [app("envoy-init")], "containers": [app("app"), app("envoy")]}),
        ),
        opted(
            "half-present",
            &[],
            json!({"containers": [app("app"), app("envoy")]}),
        ),
        opted(
            "pull-secrets-present",
            &[],
            json!({"containers": [app("app")], "imagePullSecrets": [{"name": "mine"}, {"name": "registry-a"}]}),
        ),
        opted(
            "own-init-containers",
            &[],
            json!({"initContainers": [app("one"), app("two")], "containers": [app("app")]}),
        ),
        // Metadata.
        Shape {
            name: "no-labels-slashed-keys",
            place: Place::Plain,
            dry_run: false,
            pod: json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "no-labels-slashed-keys", "annotations": {INJECT: "true", "example.com/a.b": "1", "x.io/y_z": "2"}},
                "spec": one()}),
        },
        Shape {
            name: "labelled-pod",
            place: Place::Plain,
            dry_run: false,
            pod: json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "labelled-pod", "labels": {"app": "web", "tier": "front"}, "annotations": {INJECT: "true"}},
                "spec": one()}),
        },
        Shape {
            name: "generate-name",
            place: Place::Plain,
            dry_run: false,
            pod: json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "generated-", "annotations": {INJECT: "true"}},
                "spec": one()}),
        },
        Shape {
            name: "dry-run",
            place: Place::Plain,
            dry_run: true,
            pod: with_annotations("dry-run", &[(INJECT, "true"), (&cpu, "1")], one()),
        },
        // Overrides.
        opted("cpu-request", &[(&cpu, "500m")], one()),
        opted("cpu-request-decimal", &[(&cpu, "0.5")], one()),
        opted("cpu-request-above-max", &[(&cpu, "3")], one()),
        opted("memory-below-min", &[(&mem, "32Mi")], one()),
        opted("memory-not-a-quantity", &[(&mem, "lots \"of\" memory")], one()),
        opted("memory-empty", &[(&mem, "")], one()),
        opted("memory-too-large", &[(&mem, "1e30")], one()),
        // More digits than an i128 holds, and a binary suffix Kubernetes caps at the
        // largest int64: compared as the API server compares them.
        opted(
            "cpu-request-41-digits",
            &[(&cpu, "1.0000000000000000000000000000000000000001")],
            one(),
        ),
        opted(
            "cpu-request-41-digits-above-max",
            &[(&cpu, "2.0000000000000000000000000000000000000001")],
            one(),
        ),
        opted("memory-binary-capped", &[(&mem, "200000000000Ei")], one()),
        opted("cpu-limit-added", &[(&cpu_limit, "2")], one()),
        opted("cpu-limit-below-min", &[(&cpu_limit, "50m")], one()),
        opted("init-storage", &[(&storage, "512Mi")], one()),
        opted("log-level", &[(&log, "debug")], one()),
        opted("log-level-not-allowed", &[(&log, "trace")], one()),
        // Control characters in a refused value: escaped as JSON escapes them, on both paths.
        opted(
            "log-level-control-characters",
            &[(&log, "debug\u{1}\u{8}\u{c}\u{1b}[31m\u{7f}")],
            one(),
        ),
        opted("memory-control-characters", &[(&mem, "1\u{7}Gi\t")], one()),
        opted("undeclared-control-characters", &[(&ov("bogus"), "\u{1f}\u{b}x")], one()),
        opted("pod-ip-replaces-value-from", &[(&pod_ip, "127.0.0.1")], one()),
        opted("mode-added", &[(&mode, "slow \"and\" safe")], one()),
        opted("init-mode-added", &[(&init_mode, "once")], one()),
        opted("image-tag", &[(&tag, "v1.32.0")], one()),
        opted("image-tag-not-allowed", &[(&tag, "latest")], one()),
        opted("undeclared-override", &[(&ov("bogus"), "1")], one()),
        opted(
            "two-refusals",
            &[(&ov("bogus"), "1"), (&cpu, "9"), (&log, "info")],
            one(),
        ),
        opted(
            "every-override",
            &[
                (&cpu, "1500m"),
                (&mem, "512Mi"),
                (&cpu_limit, "3"),
                (&storage, "100Mi"),
                (&log, "warn"),
                (&pod_ip, "127.0.0.1"),
                (&mode, "fast"),
                (&init_mode, "once"),
                (&tag, "v1.32.0"),
            ],
            one(),
        ),
        opted(
            "override-on-template-without",
            &[(TEMPLATE, "canary"), (&cpu, "1")],
            one(),
        ),
        opted(
            "overrides-native",
            &[(NATIVE, "true"), (&cpu, "1"), (&log, "debug")],
            one(),
        ),
        // The shipped templates: the default on an app's usual ports, its overrides;
        // `classic`, whose Envoy declares port 80.
        opted(
            "shipped-app-on-80",
            &[(TEMPLATE, "shipped")],
            json!({"containers": [{"name": "web", "image": IMAGE, "ports": [{"containerPort": 80}, {"containerPort": 443}]}]}),
        ),
        // `fromPod`: APP_PORT is the one TCP port the app declares (UDP aside), on either
        // kind of sidecar; the same port twice is one; an override wins.
        opted(
            "shipped-app-port-from-pod",
            &[(TEMPLATE, "shipped")],
            json!({"containers": [{"name": "web", "image": IMAGE, "ports": [{"containerPort": 3001}, {"containerPort": 53, "protocol": "UDP"}]}]}),
        ),
        opted(
            "shipped-app-port-from-pod-native",
            &[(TEMPLATE, "shipped")],
            json!({"restartPolicy": "Never", "containers": [{"name": "web", "image": IMAGE, "ports": [{"containerPort": 3001}]}]}),
        ),
        opted(
            "shipped-app-port-one-port-twice",
            &[(TEMPLATE, "shipped")],
            json!({"containers": [
                {"name": "web", "image": IMAGE, "ports": [{"containerPort": 8000, "protocol": "TCP"}]},
                {"name": "tail", "image": IMAGE, "ports": [{"containerPort": 8000, "name": "web"}]},
            ]}),
        ),
        opted(
            "shipped-app-port-override-wins",
            &[(TEMPLATE, "shipped"), (&ov("app-port"), "443")],
            json!({"containers": [{"name": "web", "image": IMAGE, "ports": [{"containerPort": 3001}]}]}),
        ),
        opted(
            "shipped-every-override",
            &[
                (TEMPLATE, "shipped"),
                (&ov("cpu-request"), "250m"),
                (&ov("memory-limit"), "128Mi"),
                (&ov("log-level"), "debug"),
                (&ov("app-port"), "80"),
                (&ov("image-tag"), "distroless-v1.40.0"),
            ],
            json!({"restartPolicy": "Never", "containers": [{"name": "web", "image": IMAGE, "ports": [{"containerPort": 80}]}]}),
        ),
        opted("shipped-app-port-refused", &[(TEMPLATE, "shipped"), (&ov("app-port"), "81")], one()),
        opted("classic", &[(TEMPLATE, "classic")], one()),
        opted(
            "classic-on-80",
            &[(TEMPLATE, "classic")],
            json!({"containers": [{"name": "web", "image": IMAGE, "ports": [{"containerPort": 80}]}]}),
        ),
        // Networks.
        opted("network", &[(NETWORK, "blue")], one()),
        opted(
            "network-with-overrides",
            &[(NETWORK, "blue"), (&log, "debug"), (&mode, "fast")],
            one(),
        ),
        opted(
            "network-multus-kept",
            &[(NETWORK, "blue"), (MULTUS, "other")],
            one(),
        ),
        opted("network-missing", &[(NETWORK, "nowhere")], one()),
        // Two faults, one of them the Network: both paths name the template's first.
        opted(
            "network-missing-and-override-undeclared",
            &[(NETWORK, "nowhere"), (&ov("bogus"), "1")],
            one(),
        ),
        opted(
            "network-missing-and-template-unknown",
            &[(NETWORK, "nowhere"), (TEMPLATE, "nope")],
            one(),
        ),
        // Namespace-wide opt-in and template.
        in_place(Place::Labelled, shape("by-label", &[], one())),
        in_place(Place::Labelled, opted("label-annotation-wins", &[(TEMPLATE, "native")], one())),
        in_place(Place::Labelled, shape("label-opted-out", &[(INJECT, "false")], one())),
        in_place(Place::Labelled, shape("label-override", &[(&cpu, "1")], one())),
        in_place(Place::MissingTemplate, shape("label-names-no-template", &[], one())),
        in_place(
            Place::MissingTemplate,
            opted("missing-label-annotation-wins", &[(TEMPLATE, "config")], one()),
        ),
    ];
    for shape in &mut all {
        if shape.pod["metadata"]["labels"].is_null() && shape.name != "no-labels-slashed-keys" {
            shape.pod["metadata"]["labels"] = json!({"corpus": shape.name});
        }
    }
    all
}

fn in_place(place: Place, mut shape: Shape) -> Shape {
    shape.place = place;
    shape
}

/// `shape` with the Pod labels `labels` (besides the corpus label).
fn with_labels(mut shape: Shape, labels: &[(&str, &str)]) -> Shape {
    let labels: serde_json::Map<String, Value> = labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    shape.pod["metadata"]["labels"] = Value::Object(labels);
    shape
}

/// Who is opted in, every way and in every kind of namespace: the Pod label, the
/// annotation, both, neither, and each opt-out, in a plain, an opted-in and a disabled
/// namespace; and a refusal reached through the label. Each is told by the selectors first
/// on the policies' side, by the decision in CEL after them.
pub fn opt_in_corpus() -> Vec<Shape> {
    let one = || containers(json!([app("app")]));
    let clash = || containers(json!([{"name": "app", "image": IMAGE, "ports": [{"containerPort": 15001}]}]));
    let mut all = Vec::new();
    for place in [Place::Plain, Place::Labelled, Place::Disabled] {
        let at = |shape: Shape| in_place(place, shape);
        let cases: Vec<Shape> = vec![
            shape("optin-none", &[], one()),
            with_labels(shape("optin-label", &[], one()), &[(INJECT, "true")]),
            opted("optin-annotation", &[], one()),
            with_labels(opted("optin-both", &[], one()), &[(INJECT, "true")]),
            with_labels(shape("optin-label-annotation-out", &[(INJECT, "false")], one()), &[(INJECT, "true")]),
            with_labels(opted("optin-annotation-label-out", &[], one()), &[(INJECT, "false")]),
            with_labels(shape("optin-label-out", &[], one()), &[(INJECT, "false")]),
            with_labels(shape("optin-label-wrong-case", &[], one()), &[(INJECT, "True")]),
            with_labels(shape("optin-label-legacy", &[(LEGACY, "true")], one()), &[(INJECT, "true")]),
            with_labels(shape("optin-label-unknown-template", &[(TEMPLATE, "nope")], one()), &[(INJECT, "true")]),
            with_labels(shape("optin-label-port-clash", &[], clash()), &[(INJECT, "true")]),
        ];
        all.extend(cases.into_iter().map(at));
    }
    // Names unique across places: a shape's name is its Pod's.
    for shape in &mut all {
        let place = match shape.place {
            Place::Plain => "plain",
            Place::Labelled => "labelled",
            Place::MissingTemplate => "missing",
            Place::Disabled => "disabled",
            Place::Restricted => "restricted",
        };
        let name = format!("{}-{place}", shape.name);
        shape.pod["metadata"]["name"] = json!(name);
        shape.name = Box::leak(name.into_boxed_str());
    }
    all
}

/// Pods in a namespace that enforces Pod Security `restricted`, opted in by annotation: an
/// app that meets the level itself, with the shipped default (which meets it: stored) and
/// with `classic` (which does not: refused by Pod Security admission, after either path
/// injected it, in the same words); and one that does not meet it, opted out (refused
/// alike, nothing injected).
pub fn restricted() -> Vec<Shape> {
    let compliant = || {
        json!({
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "app", "image": IMAGE,
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        })
    };
    let mut all = vec![
        opted("psa-restricted-shipped", &[(TEMPLATE, "shipped")], compliant()),
        opted("psa-restricted-shipped-regular", &[(TEMPLATE, "shipped"), (NATIVE, "false")], compliant()),
        opted("psa-restricted-classic", &[(TEMPLATE, "classic")], compliant()),
        shape("psa-restricted-app-breaks", &[(INJECT, "false")], containers(json!([app("app")]))),
    ];
    for shape in &mut all {
        shape.place = Place::Restricted;
    }
    all
}

/// Pods on the node's network (`hostNetwork: true`), opted in: left alone (`hostnet-left-`)
/// unless the template they name by annotation is `host`, which allows it
/// (`hostnet-allowed-`); one their namespace's label picks is not enough.
pub fn host_network() -> Vec<Shape> {
    let spec = || json!({"hostNetwork": true, "containers": [app("app")]});
    vec![
        opted("hostnet-left-default", &[], spec()),
        opted("hostnet-left-config", &[(TEMPLATE, "config")], spec()),
        // A template the ConfigMap lacks: left alone, not denied.
        opted("hostnet-left-missing-template", &[(TEMPLATE, "nope")], spec()),
        in_place(Place::Labelled, opted("hostnet-left-labelled", &[], spec())),
        opted("hostnet-allowed", &[(TEMPLATE, "host")], spec()),
        in_place(Place::Labelled, opted("hostnet-allowed-labelled", &[(TEMPLATE, "host")], spec())),
    ]
}

/// A Pod choosing each of `templates` by annotation, opted in by the label.
pub fn choosing(templates: &[&str]) -> Vec<Shape> {
    templates
        .iter()
        .map(|template| {
            let name: &'static str = Box::leak(format!("choose-{template}").into_boxed_str());
            with_labels(shape(name, &[(TEMPLATE, template)], containers(json!([app("app")]))), &[(INJECT, "true")])
        })
        .collect()
}

/// `resources` of a container or a Pod: `requests` and `limits` as given (each omitted
/// when empty).
fn resources(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Value {
    let map = |list: &[(&str, &str)]| -> Value {
        Value::Object(list.iter().map(|(k, v)| (k.to_string(), json!(v))).collect())
    };
    let mut out = json!({});
    if !requests.is_empty() {
        out["requests"] = map(requests);
    }
    if !limits.is_empty() {
        out["limits"] = map(limits);
    }
    out
}

/// An app container with `resources`.
fn app_with(name: &str, resources: Value) -> Value {
    json!({"name": name, "image": IMAGE, "resources": resources})
}

/// Pod-level resources (`spec.resources`) and the QoS class: each Pod is stored by both
/// paths alike (the Pod-level values raised by what the template adds, the added
/// containers' resources kept to the class) with the class it has without injection, or
/// refused alike. Mostly on the shipped template (its sidecar requests cpu 100m and
/// memory 64Mi, limits cpu 1 and memory 256Mi, and takes `cpu-request` and `memory-limit`
/// overrides); the tier's `config` (an init container without resources), `native`
/// (none at all) and `largest` (four sidecars with requests only) for the rest.
pub fn resource_shapes() -> Vec<Shape> {
    let shipped = (TEMPLATE, "shipped");
    let guaranteed = || resources(&[("cpu", "500m"), ("memory", "512Mi")], &[("cpu", "500m"), ("memory", "512Mi")]);
    let pod = |pod_resources: Value, containers: Value| json!({"resources": pod_resources, "containers": containers});
    let plain_app = || json!([app("app")]);
    let requests_app = || json!([app_with("app", resources(&[("cpu", "250m"), ("memory", "256Mi")], &[]))]);
    let big_init = || json!([app_with("setup", resources(&[("cpu", "3"), ("memory", "3Gi")], &[]))]);
    let with_init = |pod_resources: Value| json!({"resources": pod_resources, "initContainers": big_init(), "containers": requests_app()});
    let cpu_request = override_key("cpu-request");
    let memory_limit = override_key("memory-limit");
    let mut all = vec![
        // An empty `spec.resources` makes the Pod's QoS class the Pod level's (BestEffort)
        // whatever its containers say: the sidecar goes in without cpu and memory.
        opted(
            "res-pod-empty-containers-guaranteed",
            &[shipped],
            pod(json!({}), json!([app_with("app", guaranteed())])),
        ),
        // Pod-level requests only, limits only (the API server defaults the requests from
        // them, or from the containers' aggregate), both.
        opted(
            "res-pod-requests-only",
            &[shipped],
            pod(resources(&[("cpu", "1"), ("memory", "1Gi")], &[]), plain_app()),
        ),
        opted(
            "res-pod-limits-only",
            &[shipped],
            pod(resources(&[], &[("cpu", "2"), ("memory", "2Gi")]), plain_app()),
        ),
        opted(
            "res-pod-limits-app-requests",
            &[shipped],
            pod(resources(&[], &[("cpu", "2"), ("memory", "2Gi")]), requests_app()),
        ),
        opted(
            "res-pod-both",
            &[shipped],
            pod(
                resources(&[("cpu", "500m"), ("memory", "512Mi")], &[("cpu", "500m"), ("memory", "1Gi")]),
                json!([app_with("app", resources(&[("cpu", "250m")], &[]))]),
            ),
        ),
        opted(
            "res-pod-both-app-limits",
            &[shipped],
            pod(
                resources(&[("cpu", "500m"), ("memory", "512Mi")], &[("cpu", "1"), ("memory", "1Gi")]),
                json!([app_with("app", resources(&[("cpu", "250m"), ("memory", "128Mi")], &[("cpu", "500m"), ("memory", "256Mi")]))]),
            ),
        ),
        // Decimal and fractional values: the sums written as integers, millis or nano-units.
        opted(
            "res-pod-decimal-and-fractions",
            &[shipped],
            pod(resources(&[("cpu", "0.15")], &[("cpu", "1.5"), ("memory", "1G")]), plain_app()),
        ),
        // Guaranteed: at Pod level (with and without container resources), and by its
        // containers (the added ones' requests set to their limits).
        opted(
            "res-pod-guaranteed",
            &[shipped],
            pod(guaranteed(), plain_app()),
        ),
        opted(
            "res-pod-guaranteed-app-limits",
            &[shipped],
            pod(guaranteed(), json!([app_with("app", guaranteed())])),
        ),
        opted("res-guaranteed-containers", &[shipped], json!({"containers": [app_with("app", guaranteed())]})),
        opted(
            "res-guaranteed-containers-limits-only",
            &[shipped],
            json!({"containers": [app_with("app", resources(&[], &[("cpu", "1"), ("memory", "1Gi")]))]}),
        ),
        opted(
            "res-burstable-containers",
            &[shipped],
            json!({"containers": [app_with("app", resources(&[("cpu", "100m")], &[]))]}),
        ),
        opted("res-besteffort", &[shipped], json!({"containers": [app("app")]})),
        // An override of the sidecar's request or limit: added at Pod level as asked, or
        // set to the limit in a Guaranteed Pod.
        opted(
            "res-override-cpu-request-pod-level",
            &[shipped, (&cpu_request, "300m")],
            pod(resources(&[("cpu", "1")], &[("cpu", "2")]), plain_app()),
        ),
        opted(
            "res-override-cpu-request-guaranteed",
            &[shipped, (&cpu_request, "300m")],
            json!({"containers": [app_with("app", guaranteed())]}),
        ),
        opted(
            "res-override-memory-limit-pod-level",
            &[shipped, (&memory_limit, "1Gi")],
            pod(resources(&[], &[("memory", "3Gi")]), plain_app()),
        ),
        // Native and regular sidecars, and the Pod's own init container: the aggregate of
        // requests counts a native sidecar beside each init container after it.
        opted(
            "res-native-pod-limits",
            &[shipped, (NATIVE, "true")],
            pod(resources(&[], &[("cpu", "2"), ("memory", "2Gi")]), requests_app()),
        ),
        opted(
            "res-regular-pod-limits",
            &[shipped, (NATIVE, "false")],
            pod(resources(&[], &[("cpu", "2"), ("memory", "2Gi")]), requests_app()),
        ),
        opted(
            "res-native-guaranteed",
            &[shipped, (NATIVE, "true")],
            json!({"containers": [app_with("app", guaranteed())]}),
        ),
        opted(
            "res-own-init-pod-level",
            &[shipped, (NATIVE, "false")],
            with_init(resources(&[("cpu", "3"), ("memory", "3Gi")], &[("cpu", "4"), ("memory", "4Gi")])),
        ),
        opted(
            "res-own-init-pod-level-native",
            &[shipped, (NATIVE, "true")],
            with_init(resources(&[("cpu", "3"), ("memory", "3Gi")], &[("cpu", "4"), ("memory", "4Gi")])),
        ),
        opted(
            "res-own-init-guaranteed",
            &[shipped],
            json!({"initContainers": [app_with("setup", guaranteed())], "containers": [app_with("app", guaranteed())]}),
        ),
        opted(
            "res-own-init-besteffort",
            &[shipped],
            json!({"initContainers": [app("setup")], "containers": [app("app")]}),
        ),
        // The tier's templates: an init container without resources refuses a Guaranteed
        // Pod (with the webhook's words); a BestEffort Pod keeps its class; Pod-level
        // values with an init container of the template and its cpu-limit override; four
        // sidecars that request only.
        opted("res-config-guaranteed-refused", &[], json!({"containers": [app_with("app", guaranteed())]})),
        opted("res-native-template-guaranteed-refused", &[(TEMPLATE, "native")], json!({"containers": [app_with("app", guaranteed())]})),
        opted("res-config-besteffort", &[], json!({"containers": [app("app")]})),
        opted(
            "res-config-pod-level",
            &[(&override_key("cpu-limit"), "2")],
            pod(resources(&[("cpu", "1"), ("memory", "1Gi")], &[("cpu", "3"), ("memory", "2Gi")]), requests_app()),
        ),
        opted(
            "res-largest-pod-level",
            &[(TEMPLATE, "largest"), ("sidecar.samplecrd.k8s.io/override.mem-0", "512Mi")],
            pod(resources(&[("cpu", "1")], &[("cpu", "2"), ("memory", "1Gi")]), requests_app()),
        ),
    ];
    for shape in &mut all {
        shape.pod["metadata"]["labels"] = json!({"corpus": shape.name});
    }
    all
}
