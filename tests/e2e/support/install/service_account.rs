//! A kubeconfig for the Deployment's ServiceAccount, so the processes run with exactly its
//! permissions.

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

use super::super::{Suite, api_error, step};
use super::Install;

impl Suite {
    /// A kubeconfig for the Deployment's ServiceAccount: a token from the TokenRequest API
    /// (what `kubectl create token` asks for), the same server and certificate authority as
    /// `KUBECONFIG`.
    pub(super) async fn service_account_kubeconfig(&self, install: &Install, dir: &Path) -> PathBuf {
        let account = &install.service_account;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &install.namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let token = accounts
            .create_token_request(account, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "expected a token for ServiceAccount {account}, found: {}",
                    api_error(&e)
                )
            })
            .status
            .expect("a TokenRequest answer has a status")
            .token;
        let kubeconfig = Kubeconfig::read().expect("KUBECONFIG is readable");
        let context = kubeconfig
            .contexts
            .iter()
            .find(|c| Some(&c.name) == kubeconfig.current_context.as_ref())
            .and_then(|c| c.context.clone())
            .expect("KUBECONFIG has a current context");
        let cluster = kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)
            .and_then(|c| c.cluster.clone())
            .expect("the current context names a cluster");
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "cluster", "cluster": cluster }],
            "users": [{ "name": account, "user": { "token": token } }],
            "contexts": [{ "name": "sa", "context": { "cluster": "cluster", "user": account } }],
            "current-context": "sa",
        });
        let path = dir.join("serviceaccount.kubeconfig");
        std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("JSON")).expect("write the kubeconfig");
        step!(
            "kubeconfig for ServiceAccount {}/{account}: {}",
            install.namespace,
            path.display()
        );
        path
    }
}

impl Install {
    /// An API client that is the Deployment's ServiceAccount: its token, the suite's server.
    pub async fn service_account_client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.kubeconfig.display()));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{} names no usable cluster: {e}", self.kubeconfig.display()));
        Client::try_from(config).expect("a client for the ServiceAccount")
    }
}
