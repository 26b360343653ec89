//! The exchanges the injector makes with the API server, named once: each step takes the
//! next request, checks its method, path, and the query and content type every request of
//! its kind carries, and hands it back for the test to check its body and answer it.

use http::Method;
use serde_json::Value;

use super::{ApiServer, Call};

/// The field manager every write of the injector names.
pub const FIELD_MANAGER: &str = "envoy-injector";

pub fn secrets(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/secrets")
}

pub fn secret(namespace: &str, name: &str) -> String {
    format!("{}/{name}", secrets(namespace))
}

/// A webhook configuration the injector publishes its caBundle to, by name.
#[derive(Clone, Copy)]
pub enum WebhookConfig<'a> {
    Mutating(&'a str),
    Validating(&'a str),
}

impl WebhookConfig<'_> {
    pub fn path(self) -> String {
        let (resource, name) = match self {
            WebhookConfig::Mutating(name) => ("mutatingwebhookconfigurations", name),
            WebhookConfig::Validating(name) => ("validatingwebhookconfigurations", name),
        };
        format!("/apis/admissionregistration.k8s.io/v1/{resource}/{name}")
    }
}

pub fn networks(namespace: &str) -> String {
    format!("/apis/samplecrd.k8s.io/v1/namespaces/{namespace}/networks")
}

pub fn network(namespace: &str, name: &str) -> String {
    format!("{}/{name}", networks(namespace))
}

pub fn nads(namespace: &str) -> String {
    format!("/apis/k8s.cni.cncf.io/v1/namespaces/{namespace}/network-attachment-definitions")
}

pub fn nad(namespace: &str, name: &str) -> String {
    format!("{}/{name}", nads(namespace))
}

pub fn events(namespace: &str) -> String {
    format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events")
}

fn assert_field_manager(call: &Call) {
    assert!(
        call.query.contains(&format!("fieldManager={FIELD_MANAGER}")),
        "expected {} {} to name the field manager {FIELD_MANAGER}, found query {:?}",
        call.method,
        call.path,
        call.query
    );
}

fn assert_content_type(call: &Call, content_type: &str) {
    assert_eq!(
        call.content_type, content_type,
        "expected {} {} as {content_type}",
        call.method, call.path
    );
}

impl ApiServer {
    // ------------------------------------------------------------ Secrets (tls::secret)

    pub async fn expect_secret_get(&mut self, namespace: &str, name: &str) -> Call {
        self.expect(Method::GET, &secret(namespace, name)).await
    }

    pub async fn expect_secret_create(&mut self, namespace: &str) -> Call {
        let call = self.expect(Method::POST, &secrets(namespace)).await;
        assert_field_manager(&call);
        call
    }

    /// A PUT: the test checks the `resourceVersion` it is guarded by.
    pub async fn expect_secret_replace(&mut self, namespace: &str, name: &str) -> Call {
        let call = self.expect(Method::PUT, &secret(namespace, name)).await;
        assert_field_manager(&call);
        call
    }

    // ------------------------------------------------------------ webhook configurations

    pub async fn expect_webhook_config_get(&mut self, config: WebhookConfig<'_>) -> Call {
        self.expect(Method::GET, &config.path()).await
    }

    /// The caBundle update: a strategic merge patch under the injector's field manager.
    pub async fn expect_webhook_config_patch(&mut self, config: WebhookConfig<'_>) -> Call {
        let call = self.expect(Method::PATCH, &config.path()).await;
        assert_content_type(&call, "application/strategic-merge-patch+json");
        assert_field_manager(&call);
        call
    }

    // ------------------------------------------------------------ Networks (the controller)

    /// Adding the finalizer: server-side apply under the injector's field manager, never
    /// forced (a conflict with another manager must surface).
    pub async fn expect_finalizer_apply(&mut self, namespace: &str, name: &str) -> Call {
        let call = self.expect(Method::PATCH, &network(namespace, name)).await;
        assert_content_type(&call, "application/apply-patch+yaml");
        assert_field_manager(&call);
        assert!(!call.query.contains("force"), "not forced: {}", call.query);
        call
    }

    /// Removing the finalizer: a JSON patch whose `test` op guards against a stale copy.
    pub async fn expect_finalizer_removal(&mut self, namespace: &str, name: &str) -> Call {
        let call = self.expect(Method::PATCH, &network(namespace, name)).await;
        assert_content_type(&call, "application/json-patch+json");
        assert_field_manager(&call);
        call
    }

    /// The status write: a merge patch of the status subresource.
    pub async fn expect_status_patch(&mut self, namespace: &str, name: &str) -> Call {
        let call = self
            .expect(Method::PATCH, &format!("{}/status", network(namespace, name)))
            .await;
        assert_content_type(&call, "application/merge-patch+json");
        assert_field_manager(&call);
        call
    }

    /// An Event about a Network, posted by the controller: checked, stored (201), returned.
    pub async fn expect_network_event(&mut self, namespace: &str, type_: &str, reason: &str) -> Value {
        let call = self.expect(Method::POST, &events(namespace)).await;
        let body = call.body.clone();
        assert_eq!(body["type"], type_, "{body}");
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["regarding"]["kind"], "Network", "{body}");
        assert_eq!(body["reportingController"], "envoy-injector", "{body}");
        call.echo(201);
        body
    }

    /// Before a deleted Network goes: the live list of its Pods that are not Succeeded or
    /// Failed (metadata only, at most one), answered with `names`.
    pub async fn expect_network_pods(&mut self, namespace: &str, network: &str, names: &[&str]) {
        let call = self
            .expect(Method::GET, &format!("/api/v1/namespaces/{namespace}/pods"))
            .await;
        for wanted in [
            format!("labelSelector=sidecar.samplecrd.k8s.io%2Fnetwork%3D{network}"),
            "fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed".to_string(),
            "limit=1".to_string(),
        ] {
            assert!(call.query.contains(&wanted), "expected {wanted} in {:?}", call.query);
        }
        let items: Vec<Value> = names
            .iter()
            .map(|name| {
                serde_json::json!({
                    "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                    "metadata": {"name": name, "namespace": namespace},
                })
            })
            .collect();
        call.reply(
            200,
            &serde_json::json!({
                "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                "metadata": {"resourceVersion": "1"}, "items": items,
            }),
        );
    }

    // ------------------------------------------------------------ NetworkAttachmentDefinitions

    pub async fn expect_nad_get(&mut self, namespace: &str, name: &str) -> Call {
        self.expect(Method::GET, &nad(namespace, name)).await
    }

    pub async fn expect_nad_create(&mut self, namespace: &str) -> Call {
        self.expect(Method::POST, &nads(namespace)).await
    }

    pub async fn expect_nad_replace(&mut self, namespace: &str, name: &str) -> Call {
        self.expect(Method::PUT, &nad(namespace, name)).await
    }

    pub async fn expect_nad_delete(&mut self, namespace: &str, name: &str) -> Call {
        self.expect(Method::DELETE, &nad(namespace, name)).await
    }
}
