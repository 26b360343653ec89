//! The Deployment (replicas, probes, resources, security context) and its wiring to the
//! Service, the PodDisruptionBudget and the ServiceAccount.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::support::*;

fn container(deployment: &Deployment) -> &Container {
    let spec = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a Pod template");
    assert_eq!(spec.containers.len(), 1, "one container in the injector Pod");
    &spec.containers[0]
}

pub fn deployment_is_hardened_and_wired_to_service_and_pdb() -> Outcome {
    let docs = rendered()?;
    let deployment: Deployment = one(docs, "Deployment").typed();
    let spec = deployment.spec.as_ref().expect("Deployment spec");
    assert_eq!(spec.replicas, Some(2), "replicas");
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert!(
        selects(&spec.selector, &template_labels),
        "the Deployment's selector matches its Pod template"
    );
    let pod = spec.template.spec.as_ref().expect("Pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(NAME), "serviceAccountName");
    assert_eq!(
        pod.automount_service_account_token,
        Some(true),
        "automountServiceAccountToken"
    );
    assert_eq!(
        pod.termination_grace_period_seconds,
        Some(30),
        "terminationGracePeriodSeconds"
    );

    let anti = pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.clone())
        .unwrap_or_default();
    assert!(
        anti.iter()
            .any(|t| t.pod_affinity_term.topology_key == "kubernetes.io/hostname"
                && t.pod_affinity_term
                    .label_selector
                    .as_ref()
                    .is_some_and(|s| selects(s, &template_labels))),
        "preferred podAntiAffinity on kubernetes.io/hostname over its own Pods, found {anti:?}"
    );

    let pod_security = pod.security_context.as_ref().expect("Pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true), "Pod runAsNonRoot");
    assert_eq!(pod_security.run_as_user, Some(65532), "Pod runAsUser");
    assert_eq!(
        pod_security.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "Pod seccompProfile"
    );

    let c = container(&deployment);
    assert_eq!(
        c.image.as_deref(),
        Some("envoy-injector:dev"),
        "image (kind load target)"
    );
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args, ["serve", "--log-format", "json"], "args");
    let security = c.security_context.as_ref().expect("container securityContext");
    assert_eq!(security.run_as_non_root, Some(true), "runAsNonRoot");
    assert_eq!(security.run_as_user, Some(65532), "runAsUser");
    assert_eq!(security.read_only_root_filesystem, Some(true), "readOnlyRootFilesystem");
    assert_eq!(
        security.allow_privilege_escalation,
        Some(false),
        "allowPrivilegeEscalation"
    );
    assert_ne!(security.privileged, Some(true), "privileged");
    assert_eq!(
        security.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_string()]),
        "capabilities.drop"
    );
    assert!(
        security
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .is_none_or(Vec::is_empty),
        "no capability added"
    );
    assert_eq!(
        security.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "seccompProfile"
    );

    let env: BTreeMap<&str, Option<&str>> = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            let field = e
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str());
            (e.name.as_str(), field)
        })
        .collect();
    assert_eq!(
        env.get("POD_NAMESPACE"),
        Some(&Some("metadata.namespace")),
        "env POD_NAMESPACE"
    );
    assert_eq!(env.get("POD_NAME"), Some(&Some("metadata.name")), "env POD_NAME");

    let ports: BTreeMap<&str, i32> = c
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref().unwrap_or("?"), p.container_port))
        .collect();
    assert_eq!(
        ports,
        BTreeMap::from([("admin", 9090), ("webhook", 8443)]),
        "container ports"
    );
    let probe_path = |probe: Option<&k8s_openapi::api::core::v1::Probe>| {
        let get = probe.and_then(|p| p.http_get.as_ref()).expect("an httpGet probe");
        let port = match &get.port {
            IntOrString::Int(n) => *n,
            IntOrString::String(name) => ports[name.as_str()],
        };
        (get.path.clone().unwrap_or_default(), port)
    };
    assert_eq!(
        probe_path(c.liveness_probe.as_ref()),
        ("/healthz".to_string(), 9090),
        "livenessProbe"
    );
    assert_eq!(
        probe_path(c.readiness_probe.as_ref()),
        ("/readyz".to_string(), 9090),
        "readinessProbe"
    );
    assert_eq!(
        probe_path(c.startup_probe.as_ref()),
        ("/healthz".to_string(), 9090),
        "startupProbe"
    );
    let startup = c.startup_probe.as_ref().expect("startupProbe");
    let budget = startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
    assert!(
        budget >= 60,
        "a generous startupProbe (period x threshold = {budget} s)"
    );

    let resources = c.resources.as_ref().expect("resources");
    for (what, list) in [("requests", &resources.requests), ("limits", &resources.limits)] {
        let list = list.clone().unwrap_or_default();
        assert!(
            list.contains_key("cpu") && list.contains_key("memory"),
            "resources.{what} has cpu and memory, found {list:?}"
        );
    }

    let service: Service = one(docs, "Service").typed();
    let service_spec = service.spec.as_ref().expect("Service spec");
    let selector = service_spec.selector.clone().unwrap_or_default();
    assert!(
        !selector.is_empty() && selector.iter().all(|(k, v)| template_labels.get(k) == Some(v)),
        "the Service selects the injector Pods: {selector:?} vs {template_labels:?}"
    );
    let service_ports = service_spec.ports.clone().unwrap_or_default();
    assert_eq!(service_ports.len(), 1, "one Service port");
    let target = match service_ports[0].target_port.as_ref().expect("targetPort") {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => ports[name.as_str()],
    };
    assert_eq!((service_ports[0].port, target), (443, 8443), "Service 443 -> 8443");
    assert_eq!(
        service.metadata.name.as_deref(),
        Some(NAME),
        "the Service the webhook calls"
    );

    let pdb: PodDisruptionBudget = one(docs, "PodDisruptionBudget").typed();
    let pdb_spec = pdb.spec.as_ref().expect("PDB spec");
    assert_eq!(pdb_spec.min_available, Some(IntOrString::Int(1)), "PDB minAvailable");
    assert!(
        pdb_spec.selector.as_ref().is_some_and(|s| selects(s, &template_labels)),
        "the PDB selects the injector Pods"
    );
    Ok(())
}
