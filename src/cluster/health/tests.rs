//! The health checks on plain objects: a healthy installation, then one fault at a time.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, ServiceReference, ValidatingWebhook, WebhookClientConfig,
};
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::ObjectMeta;
use time::Duration;

use super::*;
use crate::tls::ServiceCerts;

const NS: &str = "envoy-injector";

fn client(bundle: &[u8], path: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        ca_bundle: Some(ByteString(bundle.to_vec())),
        service: Some(ServiceReference {
            name: "envoy-injector".into(),
            namespace: NS.into(),
            path: Some(path.into()),
            port: Some(443),
        }),
        url: None,
    }
}

fn mutating(bundle: &[u8]) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("envoy-injector".into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(
            ["namespace.sidecar.samplecrd.k8s.io", "pod.sidecar.samplecrd.k8s.io"]
                .into_iter()
                .map(|name| MutatingWebhook {
                    name: name.into(),
                    client_config: client(bundle, "/mutate"),
                    admission_review_versions: vec!["v1".into()],
                    side_effects: "None".into(),
                    ..MutatingWebhook::default()
                })
                .collect(),
        ),
    }
}

fn validating(bundle: &[u8]) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("envoy-injector".into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "templates.sidecar.samplecrd.k8s.io".into(),
            client_config: client(bundle, "/validate"),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            ..ValidatingWebhook::default()
        }]),
    }
}

fn secret(chain: &str) -> Secret {
    Secret {
        data: Some(BTreeMap::from([(
            "tls.crt".to_string(),
            ByteString(chain.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

fn slice(ready: Option<bool>) -> EndpointSlice {
    EndpointSlice {
        address_type: "IPv4".into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec!["192.0.2.1".into()],
            conditions: Some(EndpointConditions {
                ready,
                ..EndpointConditions::default()
            }),
            ..Endpoint::default()
        }]),
        ..EndpointSlice::default()
    }
}

fn lease(renewed: OffsetDateTime) -> Lease {
    let timestamp = k8s_openapi::jiff::Timestamp::from_second(renewed.unix_timestamp()).unwrap();
    Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some("replica-a".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(timestamp)),
            ..LeaseSpec::default()
        }),
        ..Lease::default()
    }
}

fn configmap(template: &str) -> ConfigMap {
    ConfigMap {
        data: Some(BTreeMap::from([("config".to_string(), template.to_string())])),
        ..ConfigMap::default()
    }
}

fn healthy(certs: &ServiceCerts, now: OffsetDateTime) -> Facts {
    let bundle = certs.ca.cert_pem.as_bytes();
    Facts {
        namespace: NS.into(),
        mutating: Some(("envoy-injector".into(), Ok(Some(mutating(bundle))))),
        validating: Some(("envoy-injector".into(), Ok(Some(validating(bundle))))),
        tls_secret: Some(("envoy-injector-tls".into(), Ok(Some(secret(&certs.serving.cert_pem))))),
        services: BTreeMap::from([(
            (NS.to_string(), "envoy-injector".to_string()),
            ServiceFacts {
                service: Ok(Some(Service::default())),
                endpoint_slices: Ok(vec![slice(Some(true)), slice(Some(false))]),
            },
        )]),
        configmap: Ok(Some(configmap("containers:\n- name: envoy\n  image: envoy\n"))),
        lease: Some((
            "envoy-injector-controller".into(),
            Ok(Some(lease(now - Duration::seconds(5)))),
        )),
        kube_version: crate::template::KubeVersion::NEWEST,
        old_kubelets: None,
    }
}

fn by_id(checks: &[Check]) -> Vec<(&'static str, Status)> {
    checks.iter().map(|c| (c.check, c.status)).collect()
}

fn message<'a>(checks: &'a [Check], id: &str) -> &'a str {
    &checks.iter().find(|c| c.check == id).unwrap().message
}

#[test]
fn a_healthy_installation_passes_every_check() {
    let now = OffsetDateTime::now_utc();
    let certs = crate::tls::generate("envoy-injector", NS, &[], 365).unwrap();
    let checks = evaluate(&healthy(&certs, now), PoliciesFound::None, now);
    assert_eq!(
        by_id(&checks),
        [
            ("mutating-webhook", Status::Ok),
            ("validating-webhook", Status::Ok),
            ("ca-bundle", Status::Ok),
            ("ca-bundle", Status::Ok),
            ("serving-certificate", Status::Ok),
            ("service", Status::Ok),
            ("templates", Status::Ok),
            ("lease", Status::Ok),
            ("kubelets", Status::Ok),
        ],
        "{checks:#?}"
    );
    assert!(
        checks[2].message.contains("`envoy-injector.envoy-injector.svc`"),
        "{checks:#?}"
    );
    assert_eq!(
        message(&checks, "service"),
        "Service envoy-injector/envoy-injector: 1 ready endpoint(s)"
    );
    assert!(message(&checks, "lease").contains("held by `replica-a`"), "{checks:#?}");
}

#[test]
fn each_fault_is_named() {
    let now = OffsetDateTime::now_utc();
    let certs = crate::tls::generate("envoy-injector", NS, &[], 365).unwrap();
    let other = crate::tls::generate("envoy-injector", NS, &[], 365).unwrap();

    // A caBundle from another CA.
    let mut facts = healthy(&certs, now);
    facts.mutating = Some((
        "envoy-injector".into(),
        Ok(Some(mutating(other.ca.cert_pem.as_bytes()))),
    ));
    let checks = evaluate(&facts, PoliciesFound::None, now);
    let bundle = &checks[2];
    assert_eq!((bundle.check, bundle.status), ("ca-bundle", Status::Fail));
    assert!(
        bundle
            .message
            .contains("webhook namespace.sidecar.samplecrd.k8s.io: expected the serving certificate to verify"),
        "{}",
        bundle.message
    );

    // An expired serving certificate.
    let issued = now - Duration::days(30);
    let ca = crate::tls::generate_ca("envoy-injector", NS, 3650, issued).unwrap();
    let leaf = crate::tls::sign_serving_cert(&ca, "envoy-injector", NS, issued, now - Duration::days(1)).unwrap();
    let expired = ServiceCerts { ca, serving: leaf };
    let checks = evaluate(&healthy(&expired, now), PoliciesFound::None, now);
    assert!(
        message(&checks, "serving-certificate").contains("expired at"),
        "{checks:#?}"
    );
    assert!(
        checks
            .iter()
            .filter(|c| c.check == "ca-bundle")
            .all(|c| c.status == Status::Fail),
        "{checks:#?}"
    );
    // Expiring soon is a warning.
    let soon = crate::tls::generate("envoy-injector", NS, &[], 10).unwrap();
    let checks = evaluate(&healthy(&soon, now), PoliciesFound::None, now);
    assert_eq!(
        checks.iter().find(|c| c.check == "serving-certificate").unwrap().status,
        Status::Warn
    );

    // No configurations: the mutating one is a failure, the validating one a warning.
    let mut facts = healthy(&certs, now);
    facts.mutating = Some(("envoy-injector".into(), Ok(None)));
    facts.validating = Some(("envoy-injector".into(), Ok(None)));
    let checks = evaluate(&facts, PoliciesFound::None, now);
    assert_eq!(
        &by_id(&checks)[..2],
        [("mutating-webhook", Status::Fail), ("validating-webhook", Status::Warn)]
    );

    // No ready endpoint, missing Secret, a template that does not parse, an expired Lease.
    let mut facts = healthy(&certs, now);
    facts
        .services
        .values_mut()
        .for_each(|s| s.endpoint_slices = Ok(vec![slice(Some(false))]));
    facts.tls_secret = Some(("envoy-injector-tls".into(), Ok(None)));
    facts.configmap = Ok(Some(configmap("containers:\n- name: envoy\n  imag: envoy\n")));
    facts.lease = Some((
        "envoy-injector-controller".into(),
        Ok(Some(lease(now - Duration::minutes(5)))),
    ));
    let checks = evaluate(&facts, PoliciesFound::None, now);
    assert!(
        message(&checks, "service").contains("expected a ready endpoint"),
        "{checks:#?}"
    );
    assert!(
        message(&checks, "ca-bundle").contains("cannot compare caBundle"),
        "{checks:#?}"
    );
    assert!(
        message(&checks, "serving-certificate")
            .ends_with("expected the serving certificate in `tls.crt`, found no such Secret"),
        "{checks:#?}"
    );
    assert!(
        message(&checks, "templates").contains("unknown field `containers[0].imag` at line 3"),
        "{checks:#?}"
    );
    assert!(message(&checks, "lease").contains("expired at"), "{checks:#?}");
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.check)
        .collect();
    assert_eq!(failed, ["serving-certificate", "service", "templates", "lease"]);
}

#[test]
fn templates_the_api_server_refuses_fail_the_templates_line_by_its_version() {
    let certs = tls::generate("envoy-injector", NS, &[], 365).unwrap();
    let now = OffsetDateTime::now_utc();
    let mut facts = healthy(&certs, now);
    facts.configmap = Ok(Some(configmap(
        "containers:\n- name: envoy\n  image: envoy\n  env: [{name: 1st, value: x}]\n",
    )));
    let checks = evaluate(&facts, PoliciesFound::None, now);
    assert_eq!(
        by_id(&checks).iter().find(|(id, _)| *id == "templates").unwrap().1,
        Status::Ok
    );
    facts.kube_version = "1.31".parse().unwrap();
    let checks = evaluate(&facts, PoliciesFound::None, now);
    assert_eq!(
        by_id(&checks).iter().find(|(id, _)| *id == "templates").unwrap().1,
        Status::Fail
    );
    let why = message(&checks, "templates");
    assert!(
        why.contains("field `containers[0].env[0].name` at line 4")
            && why.contains("Kubernetes 1.31")
            && why.contains("serves them on"),
        "{why}"
    );
    // The decisions still read the set the injector serves.
    assert!(live_templates(&facts).unwrap().set.get("config").is_some());
}

#[test]
fn url_webhooks_are_verified_for_their_host() {
    let client = WebhookClientConfig {
        url: Some("https://127.0.0.1:8443/mutate".into()),
        ..WebhookClientConfig::default()
    };
    assert_eq!(dialed_name(&client).as_deref(), Some("127.0.0.1"));
    let v6 = WebhookClientConfig {
        url: Some("https://[::1]:8443/mutate".into()),
        ..WebhookClientConfig::default()
    };
    assert_eq!(dialed_name(&v6).as_deref(), Some("::1"));
    let host = WebhookClientConfig {
        url: Some("https://hooks.example.com/mutate".into()),
        ..WebhookClientConfig::default()
    };
    assert_eq!(dialed_name(&host).as_deref(), Some("hooks.example.com"));
}

/// Nothing of the injector installed: each object's own line fails, and the `templates`
/// line words what the missing ConfigMap does by what else is installed.
fn nothing_installed() -> Facts {
    Facts {
        namespace: NS.into(),
        mutating: Some(("envoy-injector".into(), Ok(None))),
        validating: Some(("envoy-injector".into(), Ok(None))),
        tls_secret: Some(("envoy-injector-tls".into(), Ok(None))),
        services: BTreeMap::new(),
        configmap: Ok(None),
        lease: Some(("envoy-injector-controller".into(), Ok(None))),
        kube_version: crate::template::KubeVersion::NEWEST,
        old_kubelets: None,
    }
}

#[test]
fn with_nothing_installed_no_line_says_pods_are_denied() {
    let now = OffsetDateTime::now_utc();
    let checks = evaluate(&nothing_installed(), PoliciesFound::None, now);
    assert_eq!(
        by_id(&checks),
        [
            ("mutating-webhook", Status::Fail),
            ("validating-webhook", Status::Warn),
            ("serving-certificate", Status::Fail),
            ("service", Status::Ok),
            ("templates", Status::Fail),
            ("lease", Status::Fail),
            ("kubelets", Status::Ok),
        ],
        "{checks:#?}"
    );
    assert_eq!(
        message(&checks, "templates"),
        "expected ConfigMap envoy-injector/envoy-injector, found none: no Pod is injected or denied for want of it, \
         as neither the webhook configuration (see `mutating-webhook`) nor an admission policy of the injector is installed"
    );
    assert!(
        checks.iter().all(|c| !c.message.contains("denied until")),
        "{checks:#?}"
    );
}

#[test]
fn a_missing_configmap_is_worded_by_what_acts_on_pods() {
    let now = OffsetDateTime::now_utc();
    let templates = |facts: &Facts, policies| message(&evaluate(facts, policies, now), "templates").to_string();
    let facts = nothing_installed();
    // No webhook, but policies: they act alone, with what they were compiled from.
    let with_policies = templates(&facts, PoliciesFound::Some);
    assert!(
        with_policies.ends_with(
            "found none: no Pod is sent to the injector (see `mutating-webhook`); the admission policies found act with the templates they were compiled from (see `admission-policies`)"
        ),
        "{with_policies}"
    );
    let unknown = templates(&facts, PoliciesFound::Unknown);
    assert!(
        unknown.contains("whether admission policies act is not known"),
        "{unknown}"
    );
    // A webhook configuration sends opted-in Pods to an injector without templates.
    let certs = crate::tls::generate("envoy-injector", NS, &[], 365).unwrap();
    let mut webhook = healthy(&certs, now);
    webhook.configmap = Ok(None);
    for policies in [PoliciesFound::None, PoliciesFound::Some] {
        assert_eq!(
            templates(&webhook, policies),
            "expected ConfigMap envoy-injector/envoy-injector, found none: opted-in Pods the API server sends to the injector are denied until it exists"
        );
    }
    // Not asked for (`--webhook-config ""`): Pods may be sent to it.
    webhook.mutating = None;
    assert!(templates(&webhook, PoliciesFound::None).ends_with("denied until it exists"));
    // A ConfigMap that does not parse is worded as before, whatever is installed.
    let mut broken = nothing_installed();
    broken.configmap = Ok(Some(configmap("containers: [")));
    let why = templates(&broken, PoliciesFound::None);
    assert!(why.ends_with("the injector keeps its last good templates"), "{why}");
}

/// Native sidecars are the default: the `kubelets` line names the nodes that cannot run
/// them, and says why it read none under an API server whose kubelets all can.
#[test]
fn the_kubelets_line_names_nodes_that_cannot_run_native_sidecars() {
    let certs = tls::generate("envoy-injector", NS, &[], 365).unwrap();
    let now = OffsetDateTime::now_utc();
    let mut facts = healthy(&certs, now);
    let status = |facts: &Facts| {
        let checks = evaluate(facts, PoliciesFound::None, now);
        let status = by_id(&checks).iter().find(|(id, _)| *id == "kubelets").unwrap().1;
        (status, message(&checks, "kubelets").to_string())
    };
    let (ok, why) = status(&facts);
    assert_eq!(ok, Status::Ok);
    assert!(why.contains("version skew policy") && why.contains("1.29"), "{why}");

    facts.kube_version = "1.31".parse().unwrap();
    facts.old_kubelets = Some(Ok(vec![]));
    assert_eq!(status(&facts).0, Status::Ok);
    facts.old_kubelets = Some(Ok((0..7)
        .map(|i| OldKubelet {
            node: format!("node-{i}"),
            version: String::from("v1.28.15"),
        })
        .collect()));
    let (warn, why) = status(&facts);
    assert_eq!(warn, Status::Warn);
    assert!(
        why.starts_with("7 node(s) run a kubelet older than 1.29")
            && why.contains("node-0 (v1.28.15)")
            && why.contains("and 2 more")
            && why.contains("nativeSidecar: false"),
        "{why}"
    );
    facts.old_kubelets = Some(Err(String::from("HTTP 403 Forbidden: nodes is forbidden")));
    let (warn, why) = status(&facts);
    assert_eq!(warn, Status::Warn);
    assert!(why.contains("403"), "{why}");
}
