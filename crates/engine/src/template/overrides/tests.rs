use super::*;
use crate::template::{Template, TemplateError};

/// The issue's own example, on a template that adds the `envoy` container it names.
pub(crate) const EXAMPLE: &str = include_str!("../../../../../tests/fixtures/overrides/template.yaml");

fn parse(text: &str) -> Result<Template, TemplateError> {
    Template::parse("config", text, crate::template::KubeVersion::NEWEST)
}

fn q(text: &str) -> Quantity {
    Quantity::parse(text).unwrap()
}

#[test]
fn the_example_loads_with_every_bound() {
    let template = parse(EXAMPLE).unwrap();
    let cpu = template.overrides.get("cpu-request").unwrap();
    assert_eq!(cpu.container, "envoy");
    assert_eq!(
        cpu.target,
        Target::Resource {
            limits: false,
            resource: "cpu".into()
        }
    );
    assert_eq!(
        cpu.bound,
        Bound::Range {
            min: None,
            max: Some(q("2"))
        }
    );
    let memory = template.overrides.get("memory-limit").unwrap();
    assert_eq!(
        memory.bound,
        Bound::Range {
            min: Some(q("64Mi")),
            max: Some(q("1Gi"))
        }
    );
    assert_eq!(
        template.overrides.get("log-level").unwrap().target,
        Target::Env("LOG_LEVEL".into())
    );
    assert_eq!(template.overrides.get("image-tag").unwrap().target, Target::ImageTag);
    assert_eq!(template.overrides.iter().count(), 4);
}

#[test]
fn numbers_in_yaml_are_read_as_the_text_they_are() {
    let template = parse(&EXAMPLE.replace(r#"max: "2""#, "max: 2")).unwrap();
    assert_eq!(
        template.overrides.get("cpu-request").unwrap().bound,
        Bound::Range {
            min: None,
            max: Some(q("2"))
        }
    );
}

#[test]
fn bounds_compare_as_kubernetes_compares_quantities() {
    let template = parse(EXAMPLE).unwrap();
    let cpu = template.overrides.get("cpu-request").unwrap();
    for ok in ["2", "2000m", "1.5", "500m", "0"] {
        assert_eq!(cpu.check(ok), Ok(()), "{ok}");
    }
    assert_eq!(cpu.check("8"), Err(OutOfBounds::AboveMax(q("2"))));
    assert_eq!(cpu.check("2001m"), Err(OutOfBounds::AboveMax(q("2"))));
    assert!(matches!(cpu.check("two"), Err(OutOfBounds::NotAQuantity(m)) if m.contains("\"two\"")));
    let memory = template.overrides.get("memory-limit").unwrap();
    assert_eq!(memory.check("256Mi"), Ok(()));
    assert_eq!(memory.check("1073741824"), Ok(()), "1Gi in bytes is within max 1Gi");
    assert_eq!(memory.check("1073741825"), Err(OutOfBounds::AboveMax(q("1Gi"))));
    assert_eq!(memory.check("64M"), Err(OutOfBounds::BelowMin(q("64Mi"))));
    let level = template.overrides.get("log-level").unwrap();
    assert_eq!(level.check("debug"), Ok(()));
    assert!(matches!(level.check("Debug"), Err(OutOfBounds::NotOneOf(_))));
}

#[test]
fn applying_sets_the_one_value_where_it_lands() {
    let template = parse(EXAMPLE).unwrap();
    let envoy = &template.spec.containers[0];
    let mut changed = envoy.clone();
    template
        .overrides
        .get("cpu-request")
        .unwrap()
        .apply(&mut changed, "500m");
    template
        .overrides
        .get("log-level")
        .unwrap()
        .apply(&mut changed, "debug");
    template
        .overrides
        .get("image-tag")
        .unwrap()
        .apply(&mut changed, "v1.32.0");
    let resources = changed.resources.as_ref().unwrap();
    assert_eq!(resources.requests.as_ref().unwrap()["cpu"].0, "500m");
    assert_eq!(
        resources.requests.as_ref().unwrap()["memory"].0,
        "64Mi",
        "other values untouched"
    );
    assert_eq!(resources.limits, envoy.resources.as_ref().unwrap().limits);
    let env = changed.env.as_ref().unwrap();
    assert_eq!(env.len(), 1, "the var is replaced, not added twice: {env:?}");
    assert_eq!(env[0].value.as_deref(), Some("debug"));
    assert_eq!(changed.image.as_deref(), Some("envoyproxy/envoy:v1.32.0"));

    // A container without resources or env gets them created.
    let mut bare = Container {
        name: "envoy".into(),
        image: Some("registry.local:5000/envoy".into()),
        ..Container::default()
    };
    template
        .overrides
        .get("memory-limit")
        .unwrap()
        .apply(&mut bare, "256Mi");
    template.overrides.get("log-level").unwrap().apply(&mut bare, "warn");
    template.overrides.get("image-tag").unwrap().apply(&mut bare, "v1.32.0");
    assert_eq!(bare.resources.unwrap().limits.unwrap()["memory"].0, "256Mi");
    assert_eq!(bare.env.unwrap()[0].value.as_deref(), Some("warn"));
    assert_eq!(
        bare.image.as_deref(),
        Some("registry.local:5000/envoy:v1.32.0"),
        "a registry port is not a tag"
    );
}

/// Each mistake is a load error naming the field and its line.
#[test]
fn mistakes_are_load_errors_naming_field_and_line() {
    let cases = [
        (
            "cpu-request:  {container: envoy, field: resources.requests.cpu, max: \"2\"}",
            "cpu-request:  {container: envoy, field: resources.requests.cpu, max: \"2\", step: 1}",
            "overrides.cpu-request.step",
            "unknown field",
        ),
        (
            "log-level:    {container: envoy,",
            "log-level:    {container: proxy,",
            "overrides.log-level.container",
            "expected a container this template adds (`envoy`), found `proxy`",
        ),
        (
            "oneOf: [debug, info, warn, error]}",
            "oneOf: [debug, info, warn, error], max: \"2\"}",
            "overrides.log-level.max",
            "`max` bounds a resource quantity",
        ),
        (
            "max: \"2\"}",
            "max: 50m}",
            "overrides.cpu-request",
            "the template's own value \"100m\" (resources.requests.cpu of container `envoy`) is outside the override's bounds: above max \"50m\"",
        ),
        (
            "oneOf: [debug, info, warn, error]}",
            "oneOf: [debug, warn]}",
            "overrides.log-level",
            "own value \"info\" (env `LOG_LEVEL` of container `envoy`)",
        ),
        (
            "oneOf: [\"v1.31.2\", \"v1.32.0\"]}",
            "oneOf: [\"v1.32.0\"]}",
            "overrides.image-tag",
            "own value \"v1.31.2\" (the image's tag",
        ),
        (
            "field: resources.limits.memory, min: 64Mi, max: 1Gi}",
            "field: resources.limits.memory, oneOf: [1Gi]}",
            "overrides.memory-limit.oneOf",
            "a resource quantity takes `min` and/or `max`",
        ),
        (
            "field: resources.limits.memory, min: 64Mi, max: 1Gi}",
            "field: resources.limits.memory}",
            "overrides.memory-limit",
            "expected `min`, `max` or both",
        ),
        (
            "min: 64Mi, max: 1Gi}",
            "min: 2Gi, max: 1Gi}",
            "overrides.memory-limit.min",
            "min \"2Gi\" is above max \"1Gi\"",
        ),
        (
            "min: 64Mi, max: 1Gi}",
            "min: 64Mi, max: 1GB}",
            "overrides.memory-limit.max",
            "found \"1GB\"",
        ),
        (
            "field: resources.requests.cpu,",
            "field: requests.cpu,",
            "overrides.cpu-request.field",
            "`resources.requests.NAME` or `resources.limits.NAME`",
        ),
        (
            "env: LOG_LEVEL,",
            "env: LOG_LEVEL, imageTag: true,",
            "overrides.log-level.imageTag",
            "found both `env` and `imageTag`",
        ),
        (
            "log-level:    {container: envoy, env: LOG_LEVEL,",
            "log-level:    {container: envoy,",
            "overrides.log-level",
            "expected one of `field`, `env` or `imageTag: true`",
        ),
        (
            "env: LOG_LEVEL, oneOf: [debug, info, warn, error]}",
            "env: LOG_LEVEL}",
            "overrides.log-level.oneOf",
            "expected `oneOf` listing the values a Pod may choose",
        ),
        (
            "log-level:    {container: envoy, env:",
            "log-level:    {env:",
            "overrides.log-level",
            "expected `container`",
        ),
        (
            "cpu-request:  {",
            "cpu request:  {",
            "overrides.cpu request",
            "can follow `override.` in an annotation name",
        ),
        (
            "oneOf: [\"v1.31.2\", \"v1.32.0\"]}",
            "oneOf: [\"v1.31.2\", \"latest/x\"]}",
            "overrides.image-tag.oneOf",
            "expected image tags",
        ),
    ];
    for (from, to, path, message) in cases {
        assert!(EXAMPLE.contains(from), "{from}");
        let text = EXAMPLE.replacen(from, to, 1);
        let err = parse(&text).unwrap_err().to_string();
        let line = 1 + text.lines().position(|l| l.contains(to.trim_end_matches('}'))).unwrap();
        assert!(err.contains(path), "{path}: {err}");
        assert!(err.contains(&format!("at line {line}")), "line {line}: {err}");
        assert!(err.contains(message), "{message}: {err}");
    }
}

#[test]
fn an_image_pinned_by_digest_has_no_tag_to_override() {
    let text = EXAMPLE.replace("envoyproxy/envoy:v1.31.2", "envoyproxy/envoy@sha256:abc");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("overrides.image-tag.imageTag"), "{err}");
    assert!(err.contains("pins its image by digest"), "{err}");
}

#[test]
fn overrides_of_an_init_container_are_allowed_and_unknown_top_level_keys_still_refused() {
    let text = "initContainers:\n- {name: setup, image: busybox:1.36}\noverrides:\n  setup-tag: {container: setup, imageTag: true, oneOf: [\"1.36\", \"1.37\"]}\n";
    assert!(parse(text).unwrap().overrides.get("setup-tag").is_some());
    let err = parse("containers: [{name: a, image: x}]\noverride: {}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `override` at line 2"), "{err}");
    assert!(err.contains("overrides"), "the hint lists `overrides`: {err}");
}
