//! Processes of this machine's binary playing the Deployment's Pods: its args and env, the
//! Service's ClusterIP at the Service port, the ServiceAccount's credentials.

use std::ffi::OsString;
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::EnvVar;

use super::super::{Injector, temp_dir};
use super::Install;
use crate::common::process::ANY_LOOPBACK_PORT;

impl Install {
    /// The webhook address: the Service's ClusterIP at the Service port.
    pub fn webhook_addr(&self) -> SocketAddr {
        SocketAddr::new(self.service_ip, self.service_port)
    }

    /// Starts a process as Pod `name` of the Deployment would run: its args, except `--addr`
    /// (the ClusterIP at the Service port) and `--admin-addr` (a port of 127.0.0.1 it
    /// picks), plus `--reuse-port` if asked; its env, the Downward API's fields filled in;
    /// the ServiceAccount's credentials.
    pub async fn start(&self, name: &str, reuse_port: bool) -> Injector {
        self.start_with(name, reuse_port, &[]).await
    }

    /// [`Install::start`] with `extra` args after the Deployment's.
    pub async fn start_with(&self, name: &str, reuse_port: bool, extra: &[&str]) -> Injector {
        let mut args = without_flag(&without_flag(&self.args, "--addr"), "--admin-addr");
        args.extend(extra.iter().map(|a| a.to_string()));
        args.extend([
            "--addr".to_string(),
            self.webhook_addr().to_string(),
            "--admin-addr".to_string(),
            ANY_LOOPBACK_PORT.to_string(),
        ]);
        if reuse_port {
            args.push("--reuse-port".to_string());
        }
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .map(|var| (var.name.clone(), self.env_value(var, name)))
            .collect();
        env.push(("KUBECONFIG".to_string(), self.kubeconfig.display().to_string()));
        let dir = temp_dir("envoy-injector-e2e");
        Injector::spawn(name, args.into_iter().map(OsString::from).collect(), env, dir).await
    }

    /// What the kubelet would put in `var` for Pod `pod`.
    fn env_value(&self, var: &EnvVar, pod: &str) -> String {
        if let Some(value) = &var.value {
            return value.clone();
        }
        let field = var
            .value_from
            .as_ref()
            .and_then(|from| from.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        match field {
            Some("metadata.namespace") => self.namespace.clone(),
            Some("metadata.name") => pod.to_string(),
            other => panic!(
                "env {} of the Deployment comes from {other:?}; the suite knows metadata.namespace and metadata.name",
                var.name
            ),
        }
    }
}

/// `args` without `--name VALUE` / `--name=VALUE`.
fn without_flag(args: &[String], name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == name {
            iter.next();
        } else if !arg.starts_with(&format!("{name}=")) {
            out.push(arg.clone());
        }
    }
    out
}
