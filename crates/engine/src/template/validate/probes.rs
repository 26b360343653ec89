//! Probes and lifecycle hooks: exactly one handler each, ports and schemes, the numbers
//! a probe takes, and the sleep a hook may take.

use k8s_openapi::api::core::v1::{ExecAction, HTTPGetAction, Lifecycle, LifecycleHandler, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::names::{self, HTTP_HEADER_NAME, PORT_NAME};
use super::walk::{Walk, quoted};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Liveness,
    Readiness,
    Startup,
}

/// The handler fields a probe may set.
const PROBE_HANDLERS: &str = "exactly one of exec, httpGet, tcpSocket, grpc";
/// The handler fields a lifecycle hook may set.
const HOOK_HANDLERS: &str = "exactly one of exec, httpGet, tcpSocket, sleep";

pub fn probe(walk: &mut Walk, p: &Probe, kind: Kind) {
    let set = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ];
    handler_count(walk, &set, PROBE_HANDLERS);
    shared_handlers(walk, p.exec.as_ref(), p.http_get.as_ref(), p.tcp_socket.as_ref());
    walk.opt("grpc", p.grpc.as_ref(), |walk, g| {
        walk.within("port", Some(i64::from(g.port)), 1, 65535)
    });
    let numbers = [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ];
    for (key, value) in numbers {
        walk.within(key, value.map(i64::from), 0, i64::from(i32::MAX));
    }
    // 0 is defaulted to 1.
    if kind != Kind::Readiness
        && let Some(threshold) = p.success_threshold.filter(|t| *t > 1)
    {
        walk.fail_at(
            "successThreshold",
            "1 for a liveness or startup probe",
            threshold.to_string(),
        );
    }
    match (kind, p.termination_grace_period_seconds) {
        (Kind::Readiness, Some(seconds)) => walk.fail_at(
            "terminationGracePeriodSeconds",
            "none on a readiness probe",
            seconds.to_string(),
        ),
        (_, Some(seconds)) if seconds <= 0 => {
            walk.fail_at("terminationGracePeriodSeconds", "a number above 0", seconds.to_string());
        }
        _ => {}
    }
}

pub fn lifecycle(walk: &mut Walk, l: &Lifecycle) {
    // `stopSignal` is dropped by the API servers this project supports (ContainerStopSignals
    // is off through 1.36), so any value passes.
    walk.opt("postStart", l.post_start.as_ref(), hook);
    walk.opt("preStop", l.pre_stop.as_ref(), hook);
}

fn hook(walk: &mut Walk, h: &LifecycleHandler) {
    let set = [
        h.exec.is_some(),
        h.http_get.is_some(),
        h.tcp_socket.is_some(),
        h.sleep.is_some(),
    ];
    handler_count(walk, &set, HOOK_HANDLERS);
    shared_handlers(walk, h.exec.as_ref(), h.http_get.as_ref(), h.tcp_socket.as_ref());
    walk.opt("sleep", h.sleep.as_ref(), |walk, s| {
        // Its upper bound, the Pod's terminationGracePeriodSeconds, is checked with the Pod.
        let (low, expected) = if walk.version.sleep_zero() {
            (0, "0 or more seconds")
        } else {
            (1, "1 or more seconds (0 from Kubernetes 1.33)")
        };
        if s.seconds < low {
            walk.fail_at("seconds", expected, s.seconds.to_string());
        }
    });
}

/// The handlers probes and hooks have in common.
fn shared_handlers(
    walk: &mut Walk,
    exec: Option<&ExecAction>,
    http: Option<&HTTPGetAction>,
    tcp: Option<&TCPSocketAction>,
) {
    walk.opt("exec", exec, |walk, e| {
        if e.command.as_deref().is_none_or(<[String]>::is_empty) {
            walk.fail_at("command", "a command", "none");
        }
    });
    walk.opt("httpGet", http, http_get);
    walk.opt("tcpSocket", tcp, |walk, t| port(walk, &t.port));
}

fn handler_count(walk: &mut Walk, set: &[bool], expected: &str) {
    match set.iter().filter(|s| **s).count() {
        1 => {}
        0 => walk.fail(expected, "none"),
        n => walk.fail(expected, format!("{n} handlers")),
    }
}

fn http_get(walk: &mut Walk, h: &HTTPGetAction) {
    port(walk, &h.port);
    walk.one_of(
        "scheme",
        h.scheme.as_deref().filter(|s| !s.is_empty()),
        &["HTTP", "HTTPS"],
    );
    walk.list(
        "httpHeaders",
        h.http_headers.as_deref().unwrap_or_default(),
        |walk, header| {
            walk.text("name", &header.name, names::is_http_header_name, HTTP_HEADER_NAME);
        },
    );
}

/// A port by number (1 to 65535) or by a container port's name.
fn port(walk: &mut Walk, port: &IntOrString) {
    match port {
        IntOrString::Int(number) => walk.within("port", Some(i64::from(*number)), 1, 65535),
        IntOrString::String(name) => {
            if !names::is_port_name(name) {
                walk.fail_at(
                    "port",
                    format!("a port number from 1 to 65535, or {PORT_NAME}"),
                    quoted(name),
                );
            }
        }
    }
}
