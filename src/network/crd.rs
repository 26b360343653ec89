//! The `Network` custom resource (`samplecrd.k8s.io/v1`): its Rust type is the source of
//! the CRD (`envoy-injector crd`), so schema, printer columns and CEL rules live here.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::inject::join::NetworkView;

pub const GROUP: &str = "samplecrd.k8s.io";
pub const VERSION: &str = "v1";
pub const FINALIZER: &str = "samplecrd.k8s.io/network-cleanup";
/// The Ready condition's type.
pub const READY: &str = "Ready";
/// The condition a Network being deleted carries while joined Pods still use it.
pub const IN_USE: &str = "InUse";

/// The API server's answer to an edit of `cidr` (a CEL transition rule).
pub const CIDR_IMMUTABLE: &str = "cidr is immutable: Pods that joined keep the addresses they got; create a new Network with the new cidr and move the Pods to it";
/// The API server's answer to an edit of `gateway` (a CEL transition rule).
pub const GATEWAY_IMMUTABLE: &str = "gateway is immutable: Pods that joined keep the gateway they got; create a new Network with the new gateway and move the Pods to it";

/// Desired state of a Network: an IP range and its gateway.
///
/// The API server enforces the CEL rules below, so a bad spec is refused at `kubectl
/// apply`; the controller validates again (and reports overlaps, which need every other
/// Network of the cluster). `cidr` and `gateway` are immutable (transition rules): a Pod
/// that joined keeps the addressing it got, so its Network must keep it too.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "samplecrd.k8s.io",
    version = "v1",
    kind = "Network",
    plural = "networks",
    singular = "network",
    shortname = "net",
    namespaced,
    status = "NetworkStatus",
    annotation(
        "api-approved.kubernetes.io",
        "unapproved, sample API outside the Kubernetes project"
    ),
    printcolumn = r#"{"name":"CIDR","type":"string","jsonPath":".spec.cidr"}"#,
    printcolumn = r#"{"name":"Gateway","type":"string","jsonPath":".spec.gateway"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Pods","type":"integer","jsonPath":".status.attachedPods"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(
    cel,
    validation = Rule::new("!isCIDR(self.cidr) || cidr(self.cidr) == cidr(self.cidr).masked()").message("cidr must be a network address: its host bits must be zero"),
    validation = Rule::new("!isCIDR(self.cidr) || !isIP(self.gateway) || cidr(self.cidr).containsIP(self.gateway)").message("gateway must be an address inside cidr")
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// IP range of the network, e.g. `192.168.0.0/16`.
    #[x_kube(
        validation = Rule::new("isCIDR(self)").message("cidr must be a CIDR such as 192.168.0.0/16"),
        validation = Rule::new("self == oldSelf").message(CIDR_IMMUTABLE)
    )]
    #[schemars(length(min = 1, max = 64))]
    pub cidr: String,
    /// Gateway address inside `cidr`, e.g. `192.168.0.1`.
    #[x_kube(
        validation = Rule::new("isIP(self)").message("gateway must be an IP address such as 192.168.0.1"),
        validation = Rule::new("self == oldSelf").message(GATEWAY_IMMUTABLE)
    )]
    #[schemars(length(min = 1, max = 45))]
    pub gateway: String,
}

/// Observed state, written only by the controller.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// `Ready` (True/False/Unknown) with a reason and a message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<NetworkCondition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of Pods that joined this Network.
    #[serde(default)]
    pub attached_pods: i64,
    /// The backend object that realises this Network, e.g.
    /// `NetworkAttachmentDefinition/default/example-network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_ref: Option<String>,
}

/// A condition in the shape of `metav1.Condition`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason, e.g. `Ready`, `InvalidSpec`, `Overlaps`, `BackendUnavailable`.
    pub reason: String,
    pub message: String,
    /// RFC 3339 time of the last status change.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Network {
    /// The Ready condition, if the controller wrote one.
    pub fn ready_condition(&self) -> Option<&NetworkCondition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == READY)
    }

    /// Ready=True for the current generation.
    pub fn is_ready(&self) -> bool {
        self.ready_condition().is_some_and(|c| c.status == "True")
            && self.status.as_ref().and_then(|s| s.observed_generation) == self.metadata.generation
    }

    /// What a Pod joining this Network needs to know of it: its addresses, whether it is
    /// Ready for its current generation (else why not), and whether it is being deleted.
    pub fn join_view(&self) -> NetworkView {
        let ready = if self.is_ready() {
            Ok(())
        } else {
            Err(match self.ready_condition() {
                Some(c) if self.status.as_ref().and_then(|s| s.observed_generation) == self.metadata.generation => {
                    format!("{}: {}", c.reason, c.message)
                }
                Some(_) => String::from("the controller has not processed its latest spec yet"),
                None => format!("it has no {READY} condition yet"),
            })
        };
        NetworkView {
            cidr: self.spec.cidr.clone(),
            gateway: self.spec.gateway.clone(),
            ready,
            deleting: self.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// The CRD as YAML, as `envoy-injector crd` prints it and `manifests/` holds it.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    // A derived CRD is plain data: serialising it cannot fail.
    serde_yaml_ng::to_string(&Network::crd()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;
    use serde_json::json;

    fn spec_ok(cidr: &str, gateway: &str) -> Result<(), String> {
        NetworkSpec::validate_cel(&json!({"cidr": cidr, "gateway": gateway}), None).map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn cel_rules_accept_the_seed_example_and_refuse_bad_specs() {
        assert_eq!(spec_ok("192.168.0.0/16", "192.168.0.1"), Ok(()));
        assert_eq!(spec_ok("fd00:10::/64", "fd00:10::1"), Ok(()));
        let outside = spec_ok("192.168.0.0/16", "10.0.0.1").unwrap_err();
        assert!(outside.contains("gateway must be an address inside cidr"), "{outside}");
        assert!(
            spec_ok("192.168.0.0", "192.168.0.1")
                .unwrap_err()
                .contains("cidr must be a CIDR")
        );
        assert!(
            spec_ok("192.168.0.0/16", "gw")
                .unwrap_err()
                .contains("gateway must be an IP")
        );
        assert!(
            spec_ok("192.168.0.5/16", "192.168.0.1")
                .unwrap_err()
                .contains("host bits")
        );
    }

    #[test]
    fn cidr_and_gateway_cannot_change_once_created() {
        let old = json!({"cidr": "198.18.64.0/24", "gateway": "198.18.64.1"});
        let update = |cidr: &str, gateway: &str| {
            NetworkSpec::validate_cel(&json!({"cidr": cidr, "gateway": gateway}), Some(&old))
                .map_err(|e| format!("{e:?}"))
        };
        assert_eq!(
            update("198.18.64.0/24", "198.18.64.1"),
            Ok(()),
            "an unchanged spec passes"
        );
        let cidr = update("198.18.64.0/23", "198.18.64.1").unwrap_err();
        assert!(
            cidr.contains(CIDR_IMMUTABLE) && !cidr.contains(GATEWAY_IMMUTABLE),
            "{cidr}"
        );
        let gateway = update("198.18.64.0/24", "198.18.64.2").unwrap_err();
        assert!(gateway.contains(GATEWAY_IMMUTABLE), "{gateway}");
        assert!(GATEWAY_IMMUTABLE.contains("create a new Network") && CIDR_IMMUTABLE.contains("create a new Network"));
        // At create there is no old spec: the transition rules do not apply.
        assert_eq!(spec_ok("198.18.64.0/23", "198.18.64.1"), Ok(()));
    }

    #[test]
    fn crd_has_names_columns_status_and_approval_annotation() {
        let crd = serde_json::to_value(Network::crd()).unwrap();
        assert_eq!(crd["metadata"]["name"], "networks.samplecrd.k8s.io");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert!(crd["metadata"]["annotations"]["api-approved.kubernetes.io"].is_string());
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["subresources"]["status"], json!({}));
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns, ["CIDR", "Gateway", "Ready", "Pods", "Age"]);
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["x-kubernetes-validations"].as_array().unwrap().len(), 2);
        assert_eq!(spec["properties"]["cidr"]["maxLength"], 64);
        for field in ["cidr", "gateway"] {
            let rules = spec["properties"][field]["x-kubernetes-validations"]
                .as_array()
                .unwrap();
            assert!(
                rules.iter().any(|r| r["rule"] == "self == oldSelf"),
                "{field} is immutable: {rules:?}"
            );
        }
    }
}
