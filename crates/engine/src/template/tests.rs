use std::collections::BTreeMap;

use super::*;

fn parse_err(text: &str) -> String {
    Template::parse("config", text, crate::template::KubeVersion::NEWEST)
        .expect_err("template must be refused")
        .to_string()
}

/// The embedded set is what the shipped ConfigMap holds: the default and `classic`. (The
/// default's own promises are checked in tests/default_template.rs.)
#[test]
fn embedded_set_is_the_default_and_classic() {
    let set = TemplateSet::embedded();
    assert_eq!(set.names().collect::<Vec<_>>(), [CLASSIC_TEMPLATE, DEFAULT_TEMPLATE]);
    assert_eq!(set.source, "embedded");
    let default = set.get(DEFAULT_TEMPLATE).unwrap();
    assert_eq!(default.revision, template_revision(EMBEDDED_DEFAULT));
    assert_eq!(
        set.get(CLASSIC_TEMPLATE).unwrap().revision,
        template_revision(EMBEDDED_CLASSIC)
    );
    assert_eq!(default.spec.containers[0].name, "envoy");
    assert!(
        default.spec.volumes.is_empty(),
        "the default needs nothing in the Pod's namespace"
    );
}

#[test]
fn embedded_classic_is_the_seed_sidecar_put_right() {
    let set = TemplateSet::embedded();
    let template = set.get(CLASSIC_TEMPLATE).expect("classic template");
    let envoy = &template.spec.containers[0];
    assert_eq!(envoy.name, "envoy");
    assert_eq!(
        envoy.image.as_deref(),
        Some("lyft/envoy:845747db88f102c0fd262ab234308e9e22f693a1")
    );
    assert_eq!(
        envoy.args.as_ref().unwrap()[..2],
        ["--concurrency".to_string(), "4".to_string()]
    );
    let limits = envoy.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "512Mi");
    let mounts = envoy.volume_mounts.as_ref().unwrap();
    assert_eq!(
        (mounts[0].name.as_str(), mounts[0].mount_path.as_str()),
        ("envoy-conf", "/etc/envoy")
    );
    assert_eq!(template.spec.volumes[0].config_map.as_ref().unwrap().name, "envoy");
    assert_eq!(template.revision.len(), 12);
}

#[test]
fn seed_configmap_is_refused_naming_misplaced_fields_and_lines() {
    let seed = include_str!("../../../../tests/fixtures/seed-configmap.yaml");
    let data: BTreeMap<String, String> = {
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(seed).unwrap();
        serde_yaml_ng::from_value(value["data"].clone()).unwrap()
    };
    let err = TemplateSet::from_data("default/envoy-initializer", &data, crate::template::KubeVersion::NEWEST)
        .unwrap_err()
        .to_string();
    // Lines are counted inside the `config` value: `resources` is its 12th line.
    assert!(err.contains("unknown field `resources` at line 12"), "{err}");
    assert!(err.contains("is a container field"), "{err}");
    // Top-level volumeMounts is a valid field, but mounts a volume the template lacks.
    assert!(!err.contains("unknown field `volumeMounts`"), "{err}");

    // From the file, the line is the file's: `config: |` is its line 9.
    let from_file = TemplateSet::from_text("seed-configmap.yaml", seed, crate::template::KubeVersion::NEWEST)
        .unwrap_err()
        .to_string();
    assert!(
        from_file.contains("unknown field `resources` at line 21"),
        "{from_file}"
    );
}

/// `inject --config cm.yaml` with a typo: the error names the line the user sees in the
/// file, for every error that has a line; the cluster's path (`from_data`) keeps the line
/// within the key.
#[test]
fn a_configmap_file_error_names_the_line_of_the_file() {
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: envoy-injector\n  namespace: envoy-injector\ndata:\n  config: |\n    containers:\n    - name: envoy\n      image: envoyproxy/envoy:v1.31.2\n      imagePullPolicyy: IfNotPresent\n  broken: |\n    containers: [\n  typed: |\n    containers:\n    - name: x\n      image: y\n      ports:\n      - containerPort: eighty\n";
    let err = TemplateSet::from_text("cm.yaml", manifest, crate::template::KubeVersion::NEWEST)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("template `config`: unknown field `containers[0].imagePullPolicyy` at line 11"),
        "{err}"
    );
    assert!(err.contains("template `typed`"), "{err}");
    assert!(err.contains("at line 19"), "a type error names the file's line: {err}");
    assert!(err.contains("template `broken`"), "{err}");
    let broken = err.split("; ").find(|e| e.contains("`broken`")).unwrap();
    assert!(
        ["at line 13", "at line 14"].iter().any(|l| broken.contains(l)),
        "a syntax error names the file's line: {broken}"
    );

    let data = BTreeMap::from([(
        "config".to_string(),
        "containers:\n- name: envoy\n  image: e\n  imagePullPolicyy: IfNotPresent\n".to_string(),
    )]);
    let in_cluster = TemplateSet::from_data(
        "envoy-injector/envoy-injector",
        &data,
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap_err()
    .to_string();
    assert!(
        in_cluster.contains("template `config`: unknown field `containers[0].imagePullPolicyy` at line 4"),
        "{in_cluster}"
    );
}

/// An override's error line is mapped too.
#[test]
fn an_override_error_in_a_configmap_file_names_the_line_of_the_file() {
    let manifest = "kind: ConfigMap\napiVersion: v1\ndata:\n  config: |\n    containers:\n    - name: envoy\n      image: e:1\n      resources:\n        requests: {cpu: 100m}\n    overrides:\n      cpu-request: {container: envoy, field: resources.requests.cpu, max: 50m}\n";
    let err = TemplateSet::from_text("cm.yaml", manifest, crate::template::KubeVersion::NEWEST)
        .unwrap_err()
        .to_string();
    assert!(err.contains("field `overrides.cpu-request` at line 11"), "{err}");
}

#[test]
fn top_level_mount_of_undefined_volume_is_refused() {
    let err = parse_err(
        "containers:\n- name: envoy\n  image: envoy\nvolumeMounts:\n- name: envoy-conf\n  mountPath: /etc/envoy\n",
    );
    assert!(
        err.contains("field `volumeMounts[0].name` at line 5: a mount of volume `envoy-conf`"),
        "{err}"
    );
    assert!(err.contains("its volumes: none"), "{err}");
}

#[test]
fn container_mount_of_undefined_volume_names_the_container() {
    let err = parse_err(
        "containers:\n- name: envoy\n  volumeMounts:\n  - {name: conf, mountPath: /etc}\nvolumes:\n- {name: other, emptyDir: {}}\n",
    );
    assert!(
        err.contains("field `containers[0].volumeMounts[0].name` at line 4: a mount of volume `conf`"),
        "{err}"
    );
    assert!(err.contains("`other`"), "{err}");
}

#[test]
fn unknown_nested_field_names_path_and_line() {
    let err = parse_err("containers:\n- name: envoy\n  imagee: envoy:1\n");
    assert!(err.contains("unknown field `containers[0].imagee` at line 3"), "{err}");
}

#[test]
fn every_unknown_field_is_reported() {
    let err = parse_err("containers:\n- name: a\n  foo: 1\nbar: 2\n");
    assert!(err.contains("`containers[0].foo` at line 3"), "{err}");
    assert!(err.contains("`bar` at line 4"), "{err}");
}

#[test]
fn wrong_type_names_the_line() {
    let err = parse_err("containers:\n- name: envoy\n  ports:\n  - containerPort: eighty\n");
    assert!(err.contains("at line 4"), "{err}");
    assert!(err.contains("containerPort") || err.contains("invalid"), "{err}");
}

#[test]
fn duplicates_are_refused() {
    let err = parse_err("containers:\n- name: a\n- name: a\n");
    assert!(
        err.contains("field `containers[1].name` at line 3: two containers are named `a`"),
        "{err}"
    );
    let err = parse_err("initContainers:\n- name: a\ncontainers:\n- name: a\n");
    assert!(
        err.contains("field `containers[0].name` at line 4: two containers are named `a`"),
        "{err}"
    );
    let err = parse_err("volumes:\n- {name: v, emptyDir: {}}\n- {name: v, emptyDir: {}}\n");
    assert!(
        err.contains("field `volumes[1].name` at line 3: two volumes are named `v`"),
        "{err}"
    );
    let err = parse_err("imagePullSecrets:\n- name: s\n- name: s\n");
    assert!(err.contains("two imagePullSecrets are named `s`"), "{err}");
}

#[test]
fn nameless_container_and_empty_template_are_refused() {
    let err = parse_err("containers:\n- image: x\n");
    assert!(
        err.contains("field `containers[0]` at line 2: an entry of `containers` (entry 0) has no `name`"),
        "{err}"
    );
    assert!(parse_err("").contains("is empty"));
    assert!(parse_err("containers: []\n").contains("is empty"));
}

#[test]
fn syntax_error_names_line() {
    let err = parse_err("containers:\n- name: a\n  image: [unclosed\n");
    assert!(err.contains("expected YAML of a PodSpec fragment at line"), "{err}");
}

#[test]
fn named_templates_are_further_keys() {
    let mut data = BTreeMap::new();
    data.insert("config".to_string(), EMBEDDED_DEFAULT.to_string());
    data.insert(
        "debug".to_string(),
        "containers:\n- name: debug\n  image: busybox\n".to_string(),
    );
    let set = TemplateSet::from_data("ns/envoy-injector", &data, crate::template::KubeVersion::NEWEST).unwrap();
    assert_eq!(set.names().collect::<Vec<_>>(), ["config", "debug"]);
    assert_eq!(set.get("debug").unwrap().spec.containers[0].name, "debug");
}

#[test]
fn one_bad_key_refuses_the_whole_set() {
    let mut data = BTreeMap::new();
    data.insert("config".to_string(), EMBEDDED_DEFAULT.to_string());
    data.insert("broken".to_string(), "containers:\n- nam: x\n".to_string());
    let err = TemplateSet::from_data("ns/cm", &data, crate::template::KubeVersion::NEWEST)
        .unwrap_err()
        .to_string();
    assert!(err.contains("template `broken`"), "{err}");
}

#[test]
fn configmap_manifest_and_bare_template_both_load() {
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: envoy-injector\ndata:\n  config: |\n{}",
        EMBEDDED_DEFAULT
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    let set = TemplateSet::from_text("cm.yaml", &manifest, crate::template::KubeVersion::NEWEST).unwrap();
    assert_eq!(
        set.get("config").unwrap().spec,
        TemplateSet::embedded().get("config").unwrap().spec
    );
    let bare = TemplateSet::from_text("t.yaml", EMBEDDED_DEFAULT, crate::template::KubeVersion::NEWEST).unwrap();
    assert_eq!(bare.len(), 1);
}

#[test]
fn configmap_with_non_string_data_names_key_and_line() {
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  config: |\n    containers: []\n  volumes:\n  - name: v\n";
    let err = TemplateSet::from_text("cm.yaml", text, crate::template::KubeVersion::NEWEST)
        .unwrap_err()
        .to_string();
    assert!(err.contains("data key `volumes` at line 7 holds a list"), "{err}");
}

#[test]
fn other_kinds_are_refused() {
    let err = TemplateSet::from_text(
        "x.yaml",
        "apiVersion: v1\nkind: Secret\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("expected kind ConfigMap"), "{err}");
    assert!(err.contains("found Secret"), "{err}");
}

#[test]
fn native_sidecar_flag_parses() {
    let t = Template::parse(
        "n",
        "nativeSidecar: true\ncontainers:\n- name: proxy\n  image: envoy\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap();
    assert_eq!(t.spec.native_sidecar, Some(true));
}

/// `false` is the platform team's explicit choice, kept apart from absent (the Pod's
/// restartPolicy decides).
#[test]
fn native_sidecar_is_true_false_or_absent() {
    let parsed = |text: &str| {
        Template::parse("n", text, crate::template::KubeVersion::NEWEST)
            .unwrap()
            .spec
            .native_sidecar
    };
    assert_eq!(
        parsed("nativeSidecar: false\ncontainers:\n- name: proxy\n  image: envoy\n"),
        Some(false)
    );
    assert_eq!(parsed("containers:\n- name: proxy\n  image: envoy\n"), None);
}

#[test]
fn native_sidecar_other_than_a_boolean_names_field_and_line() {
    for value in ["\"true\"", "yes", "1", "", "null", "[true]"] {
        let err = parse_err(&format!("containers:\n- name: proxy\nnativeSidecar: {value}\n"));
        assert!(err.contains("nativeSidecar"), "{value}: {err}");
        assert!(err.contains("line 3"), "{value}: {err}");
        assert!(err.contains("expected a boolean"), "{value}: {err}");
    }
}

#[test]
fn allow_host_network_is_a_boolean_off_by_default() {
    let parsed = |text: &str| {
        Template::parse("config", text, crate::template::KubeVersion::NEWEST)
            .expect("parses")
            .spec
            .allow_host_network
    };
    assert!(
        !parsed("containers:\n- name: proxy\n  image: envoy\n"),
        "expected off when absent"
    );
    assert!(parsed(
        "allowHostNetwork: true\ncontainers:\n- name: proxy\n  image: envoy\n"
    ));
    for value in ["\"true\"", "yes", "1", "", "null", "[true]"] {
        let err = parse_err(&format!("containers:\n- name: proxy\nallowHostNetwork: {value}\n"));
        assert!(
            err.contains("allowHostNetwork") && err.contains("line 3") && err.contains("expected a boolean"),
            "allowHostNetwork: {value}: expected refused as not a boolean, naming field and line, found: {err}"
        );
    }
    // The PodSpec's own name is not a template field: refused, not taken for the allowance.
    let err = parse_err("containers:\n- name: proxy\nhostNetwork: true\n");
    assert!(
        err.contains("hostNetwork"),
        "expected `hostNetwork` refused as unknown, found: {err}"
    );
}

/// A syntax error names one line: the file's, not also the template's own count.
#[test]
fn a_syntax_error_names_one_line_the_file_s() {
    let file = "apiVersion: v1\nkind: ConfigMap\ndata:\n  config: |\n    containers:\n    - name: envoy\n      args: [a, b\n    volumes: []\n";
    let err = TemplateSet::from_text("cm.yaml", file, crate::template::KubeVersion::NEWEST)
        .unwrap_err()
        .to_string();
    assert_eq!(err.matches(" line ").count(), 1, "{err}");
    assert!(err.contains("at line 8: did not find expected ',' or ']'"), "{err}");
    let bare = TemplateSet::from_text(
        "t.yaml",
        "containers:\n- name: a\n  args: [a\n",
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(bare.matches(" line ").count(), 1, "{bare}");
}

#[test]
fn a_config_file_holds_one_document() {
    let version = crate::template::KubeVersion::NEWEST;
    let two = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: envoy-injector}\ndata:\n  config: |\n    containers: [{name: a, image: a}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\n";
    let err = TemplateSet::from_text("all.yaml", two, version)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "config all.yaml: expected one document, a template or the `envoy-injector` ConfigMap (its `data` keys are the templates), found several: ConfigMap envoy-injector, Service web"
    );
    // Document markers around the one document are fine, and its lines stay the file's.
    let marked = "---\ncontainers:\n- name: a\n  image: a\n  imagePullPolicy: x\n---\n";
    let err = TemplateSet::from_text("t.yaml", marked, version)
        .unwrap_err()
        .to_string();
    assert!(err.contains("field `containers[0].imagePullPolicy` at line 5"), "{err}");
    assert!(TemplateSet::from_text("t.yaml", &marked.replace(" x", " Never"), version).is_ok());
}

/// `fromPod` names a container the template adds and an env var of it with a default.
#[test]
fn from_pod_is_checked_at_load_with_its_field_and_line() {
    let with = |entry: &str| {
        format!(
            "containers:\n- name: proxy\n  image: envoy\n  env: [{{name: PORT, value: \"8080\"}}]\nfromPod:\n- {entry}\n"
        )
    };
    assert!(
        Template::parse(
            "t",
            &with("{value: appPort, container: proxy, env: PORT}"),
            crate::template::KubeVersion::NEWEST
        )
        .is_ok()
    );
    let err = parse_err(&with("{value: appPort, container: other, env: PORT}"));
    assert!(
        err.contains(
            "field `fromPod[0].container` at line 6: expected a container the template adds (`proxy`), found `other`"
        ),
        "{err}"
    );
    let err = parse_err(&with("{value: appPort, container: proxy, env: NOPE}"));
    assert!(
        err.contains("field `fromPod[0].env` at line 6") && err.contains("no such var `NOPE`"),
        "{err}"
    );
    let err = parse_err(&with("{value: hostName, container: proxy, env: PORT}"));
    assert!(err.contains("line 6") && err.contains("appPort"), "{err}");
    let twice = with("{value: appPort, container: proxy, env: PORT}\n- {value: appPort, container: proxy, env: PORT}");
    assert!(parse_err(&twice).contains("`PORT` of container `proxy` again"));
}

/// Issue 45: one run names every fault it can find, in the order of the text, each with
/// its field and line; only what stops serde stops the reading.
const SEVERAL_FAULTS: &str = "\
containers:
- name: envoy
  image: envoyproxy/envoy:v1.31.2
  imagePullPolcy: IfNotPresent
  imagePullPolicy: always
  ports:
  - containerPort: 15001
    protocol: tcp
  resources:
    requests: {cpu: \"2\"}
    limits: {cpu: \"1\"}
  volumeMounts:
  - name: envoy-conf
    mountPath: /etc/envoy
volumes:
- name: Data
  emptyDir: {}
";

#[test]
fn one_run_names_every_fault_in_the_order_of_the_text() {
    let err = Template::parse("config", SEVERAL_FAULTS, crate::template::KubeVersion::NEWEST).unwrap_err();
    let found: Vec<(String, Option<usize>)> = err
        .faults()
        .iter()
        .map(|fault| {
            let text = fault.to_string();
            let field = text.split('`').nth(1).unwrap_or_default().to_string();
            (field, fault.line())
        })
        .collect();
    let expected = [
        ("containers[0].imagePullPolcy", 4),
        ("containers[0].imagePullPolicy", 5),
        ("containers[0].ports[0].protocol", 8),
        ("containers[0].resources.requests.cpu", 10),
        ("containers[0].volumeMounts[0].name", 13),
        ("volumes[0].name", 16),
    ]
    .map(|(field, line)| (field.to_string(), Some(line)));
    assert_eq!(found, expected, "{err}");
    let message = err.to_string();
    assert!(
        message.starts_with(
            "template `config`: unknown field `containers[0].imagePullPolcy` at line 4 (did you mean `imagePullPolicy`?); field `containers[0].imagePullPolicy` at line 5: expected one of \"Always\", \"IfNotPresent\", \"Never\", found \"always\"; "
        ),
        "{message}"
    );
    assert!(
        message.contains("a mount of volume `envoy-conf`, which the template does not define (its volumes: `Data`)"),
        "{message}"
    );
    assert!(!message.contains("more fault"), "{message}");
    // Not only values: such a template is refused even where values alone are kept.
    assert!(Template::parse_keeping_values("config", SEVERAL_FAULTS, crate::template::KubeVersion::NEWEST).is_err());
}

#[test]
fn an_unknown_field_suggests_the_nearest_known_one_of_its_object() {
    let err = parse_err(
        "containers:\n- name: envoy\n  image: e\n  readinessProbe:\n    httpGet: {path: /, prot: 80}\nvolumes:\n- name: v\n  emptyDir: {}\n  readOnly: true\nimagePullSecret: [{name: s}]\ncontainer: []\n",
    );
    assert!(
        err.contains("unknown field `containers[0].readinessProbe.httpGet.prot` at line 5 (did you mean `port`?)"),
        "{err}"
    );
    // Nothing near: the place is named as before.
    assert!(
        err.contains(
            "unknown field `volumes[0].readOnly` at line 9 (not a field of the Kubernetes type at that place)"
        ),
        "{err}"
    );
    assert!(
        err.contains("unknown field `imagePullSecret` at line 10 (did you mean `imagePullSecrets`? a template's top level takes containers, "),
        "{err}"
    );
    assert!(
        err.contains("unknown field `container` at line 11 (did you mean `containers`?"),
        "{err}"
    );
}

#[test]
fn a_hundred_faults_are_cut_with_the_count_of_the_rest() {
    let text: String = (0..100)
        .map(|i| format!("- {{name: c{i}, image: e, imagePullPolicy: always}}\n"))
        .collect();
    let err = Template::parse(
        "config",
        &format!("containers:\n{text}"),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap_err();
    assert_eq!(err.faults().len(), 100);
    let message = err.to_string();
    assert_eq!(
        message.matches("found \"always\"").count(),
        super::MAX_FAULTS,
        "{message}"
    );
    assert!(message.ends_with("; and 70 more faults"), "{message}");
    assert!(
        message.contains("`containers[29].imagePullPolicy` at line 31"),
        "{message}"
    );
    assert!(message.len() <= super::MAX_REPORT_BYTES);
}

/// What serde cannot read stops the reading: one error, whatever else is wrong.
#[test]
fn a_syntax_error_or_a_wrong_type_stops_with_one_error() {
    let broken = format!("{SEVERAL_FAULTS}  args: [unclosed\n");
    let err = Template::parse("config", &broken, crate::template::KubeVersion::NEWEST).unwrap_err();
    assert!(matches!(err, TemplateError::Syntax { .. }), "{err:?}");
    assert_eq!(err.to_string().matches("line").count(), 1, "{err}");
    let typed = SEVERAL_FAULTS.replace("containerPort: 15001", "containerPort: eighty");
    let err = Template::parse("config", &typed, crate::template::KubeVersion::NEWEST).unwrap_err();
    assert!(matches!(err, TemplateError::Syntax { line: Some(7), .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("containerPort"), "{message}");
    assert!(
        !message.contains("imagePullPolcy") && !message.contains("; "),
        "{message}"
    );
}

/// The revision follows the injector's rules as well as the text: a release that changes
/// what a template makes of a Pod gives every template a new revision, so its Pods show
/// as stale (and `rollout` moves them) rather than as drift.
#[test]
fn the_revision_follows_the_rules_and_the_text() {
    let text = "containers:\n- name: proxy\n  image: envoy\n";
    let revision = template_revision(text);
    assert_eq!(revision, template_revision(text), "stable");
    assert_eq!(revision.len(), 12);
    assert_ne!(
        revision,
        content_revision(text),
        "the text alone was the revision of rules 1"
    );
    assert_ne!(revision, template_revision(&format!("{text}# edited\n")));
    assert_eq!(
        revision,
        content_revision(&format!("envoy-injector rules {INJECTION_RULES}\n{text}"))
    );
}
