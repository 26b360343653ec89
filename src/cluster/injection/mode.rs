//! The mode `serve` runs with and what it means on this API server. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;

use crate::cluster::health::{Check, Fetched, Status};

/// `serve`'s flag choosing the path.
pub const INJECTION_FLAG: &str = "--injection";
/// The environment variable `serve` reads the same choice from when the flag is absent.
pub const INJECTION_ENV: &str = "INJECTION";

use crate::inject::AnnotationOptIn;
pub use crate::policies::{Mode, Path};

/// The mode `serve` runs with, and where that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Configured {
    /// `from` says where: `` `--injection=policy` in the args of Deployment ns/name ``.
    Mode { mode: Mode, from: String },
    /// A value `serve` refuses (it does not start).
    Invalid { value: String, from: String },
    /// Cannot be read; why.
    Unknown(String),
}

/// The container that runs `serve`: the one named `envoy-injector`, else the first whose
/// command or args say `serve`, else the first.
fn serve_container(deployment: &Deployment) -> Option<&Container> {
    let containers = &deployment.spec.as_ref()?.template.spec.as_ref()?.containers;
    let says_serve = |c: &&Container| {
        c.command
            .iter()
            .chain(c.args.iter())
            .flatten()
            .any(|word| word == "serve")
    };
    containers
        .iter()
        .find(|c| c.name == crate::NAME)
        .or_else(|| containers.iter().find(says_serve))
        .or_else(|| containers.first())
}

/// `$(NAME)` references replaced by the container's literal env values, as the kubelet
/// expands args (`$$` escapes one `$`); an unknown name stays as written.
pub(super) fn expand(word: &str, env: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = env.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The mode of the `serve` the Deployment runs: `--injection` in its container's command
/// and args (the last one given), else [`INJECTION_ENV`], else `auto`. `deployment` is
/// `None` when none is to be read (`check --deployment ""`): `serve`'s default is taken.
pub fn configured(namespace: &str, deployment: Option<(&str, &Fetched<Deployment>)>) -> Configured {
    let Some((name, deployment)) = deployment else {
        return Configured::Mode {
            mode: Mode::Auto,
            from: String::from("serve's default (no Deployment read: --deployment \"\")"),
        };
    };
    let label = format!("Deployment {namespace}/{name}");
    let deployment = match deployment {
        Err(err) => return Configured::Unknown(format!("cannot read {label}: {err}")),
        Ok(None) => {
            return Configured::Unknown(format!(
                "expected {label}, found none (name the injector's Deployment with --deployment, or pass --deployment \"\" when serve runs elsewhere with the default mode)"
            ));
        }
        Ok(Some(deployment)) => deployment,
    };
    let Some(container) = serve_container(deployment) else {
        return Configured::Unknown(format!("expected a container in {label}, found none"));
    };
    let container_label = format!("container `{}` of {label}", container.name);
    let (value, from) = match setting(container, &container_label, INJECTION_FLAG, INJECTION_ENV) {
        Err(why) => return Configured::Unknown(why),
        Ok(Some(given)) => given,
        Ok(None) => {
            return Configured::Mode {
                mode: Mode::Auto,
                from: format!("`{INJECTION_FLAG}=auto`, serve's default (not set in {container_label})"),
            };
        }
    };
    match Mode::parse(&value) {
        Some(mode) => Configured::Mode { mode, from },
        None => Configured::Invalid { value, from },
    }
}

/// A `serve` setting as `container` gives it: `flag` in its command and args (the last one
/// given), else the env var `env`; with where it was read. `None` when neither sets it;
/// `Err` when the env var comes from `valueFrom`, which `check` does not resolve.
fn setting(
    container: &Container,
    container_label: &str,
    flag: &str,
    env_name: &str,
) -> Result<Option<(String, String)>, String> {
    let env: BTreeMap<&str, &str> = container
        .env
        .iter()
        .flatten()
        .filter_map(|var| Some((var.name.as_str(), var.value.as_deref()?)))
        .collect();
    let words: Vec<String> = container
        .command
        .iter()
        .chain(container.args.iter())
        .flatten()
        .map(|word| expand(word, &env))
        .collect();
    let mut given = None;
    let mut words_iter = words.iter();
    while let Some(word) = words_iter.next() {
        if let Some(value) = word.strip_prefix(flag).and_then(|v| v.strip_prefix('=')) {
            given = Some(value.to_string());
        } else if word == flag {
            given = words_iter.next().cloned();
        }
    }
    if let Some(value) = given {
        let from = format!("`{flag}={value}` in the args of {container_label}");
        return Ok(Some((value, from)));
    }
    match container.env.iter().flatten().find(|var| var.name == env_name) {
        Some(var) => match &var.value {
            Some(value) => Ok(Some((
                value.clone(),
                format!("env `{env_name}={value}` of {container_label}"),
            ))),
            None => Err(format!(
                "env `{env_name}` of {container_label} comes from `valueFrom`, which check does not resolve"
            )),
        },
        None => Ok(None),
    }
}

/// `serve`'s flag turning annotation opt-in off, and its environment variable.
pub const ANNOTATION_OPT_IN_FLAG: &str = "--annotation-opt-in";
pub const ANNOTATION_OPT_IN_ENV: &str = "ANNOTATION_OPT_IN";

/// Whether the Deployment's `serve` lets annotations opt Pods in: off only where it says
/// `--annotation-opt-in=false` (or its env var does); on where it cannot be read, as
/// `serve`'s default.
pub fn annotation_opt_in(deployment: Option<&Fetched<Deployment>>) -> AnnotationOptIn {
    let Some(Ok(Some(deployment))) = deployment else {
        return AnnotationOptIn::On;
    };
    let Some(container) = serve_container(deployment) else {
        return AnnotationOptIn::On;
    };
    match setting(container, "", ANNOTATION_OPT_IN_FLAG, ANNOTATION_OPT_IN_ENV) {
        Ok(Some((value, _))) if value == "false" => AnnotationOptIn::Off,
        _ => AnnotationOptIn::On,
    }
}

/// Whether the API server serves `admissionregistration.k8s.io/v1`
/// `mutatingadmissionpolicies` (discovery).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    Yes,
    No,
    Unknown(String),
}

/// What the configured mode means on this API server: the path, and the `injection` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    /// The path `serve` sets up; `None` when it cannot be told (the policies found are
    /// checked as they are).
    pub expected: Option<Path>,
    /// Where the mode was read, for messages (empty when it could not be).
    pub from: String,
    pub check: Check,
}

/// What policy mode needs the API server to serve, as messages name it.
pub(super) struct ServedApi;

impl std::fmt::Display for ServedApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use k8s_openapi::Resource;
        use k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy;
        write!(
            f,
            "{} ({})",
            MutatingAdmissionPolicy::KIND,
            MutatingAdmissionPolicy::API_VERSION
        )
    }
}

pub(super) const SERVED: ServedApi = ServedApi;
const POLICY_PATH: &str = "the Lease holder applies the compiled admission policies and keeps them in step with the ConfigMap; the webhook joins Networks and injects the templates left to it";
const WEBHOOK_PATH: &str = "the webhook injects every template";

/// The `injection` line: which path `serve` sets up, from its mode and discovery.
pub fn expectation(configured: &Configured, served: &Served) -> Expectation {
    let line = |expected, from: &str, status, message: String| Expectation {
        expected,
        from: from.to_string(),
        check: Check::new("injection", status, message),
    };
    match configured {
        Configured::Invalid { value, from } => line(
            None,
            "",
            Status::Fail,
            format!(
                "expected `{INJECTION_FLAG}` auto, policy or webhook, found `{value}` ({from}): serve refuses to start"
            ),
        ),
        Configured::Unknown(why) => line(
            None,
            "",
            Status::Warn,
            format!(
                "cannot tell which path serve sets up: {why}; the admission policies found are checked as they are"
            ),
        ),
        Configured::Mode { mode, from } => match (mode, served) {
            (Mode::Webhook, _) => line(
                Some(Path::Webhook),
                from,
                Status::Ok,
                format!("webhook: {from}: {WEBHOOK_PATH}"),
            ),
            (Mode::Policy, Served::Yes) => line(
                Some(Path::Policy),
                from,
                Status::Ok,
                format!("policies: {from}: {POLICY_PATH}"),
            ),
            (Mode::Policy, Served::No) => line(
                Some(Path::Policy),
                from,
                Status::Fail,
                format!(
                    "{from}, but the API server does not serve {SERVED} (Kubernetes 1.36 or later): no policy can be applied; use `{INJECTION_FLAG}=auto` or `webhook`"
                ),
            ),
            (Mode::Policy, Served::Unknown(err)) => line(
                Some(Path::Policy),
                from,
                Status::Warn,
                format!("policies: {from}; cannot tell whether the API server serves {SERVED}: {err}"),
            ),
            (Mode::Auto, Served::Yes) => line(
                Some(Path::Policy),
                from,
                Status::Ok,
                format!("policies: {from}, and the API server serves {SERVED}: {POLICY_PATH}"),
            ),
            (Mode::Auto, Served::No) => line(
                Some(Path::Webhook),
                from,
                Status::Ok,
                format!("webhook: {from}, and the API server does not serve {SERVED}: {WEBHOOK_PATH}"),
            ),
            (Mode::Auto, Served::Unknown(err)) => line(
                None,
                from,
                Status::Warn,
                format!(
                    "cannot tell which path {from} sets up: whether the API server serves {SERVED} is not known: {err}"
                ),
            ),
        },
    }
}
