//! The stand-in for a classic Go injector (morvencao/kube-sidecar-injector): a TLS webhook
//! that decodes the review, and answers every Pod with one fixed JSON Patch of the
//! operations such an injector returns — one container, one volume, one annotation. No Go
//! toolchain with Kubernetes' modules is reachable here, so this is what our webhook's
//! added latency is compared with, in the same run.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::scale::Result;

/// The annotation the Go injector writes on a Pod it injected.
const STATUS: &str = "sidecar-injector-webhook.morven.me/status";

/// A running stand-in; stops with the benchmark's runtime.
pub struct StandIn {
    pub addr: SocketAddr,
}

/// The fixed patch: `container` appended, `volume` appended (the API server's
/// ServiceAccount admission has given every Pod its token volume by then), the status
/// annotation set (the benchmark's Pods carry annotations).
pub fn patch(container: &Value, volume: &Value) -> Value {
    json!([
        {"op": "add", "path": "/spec/containers/-", "value": container},
        {"op": "add", "path": "/spec/volumes/-", "value": volume},
        {"op": "add", "path": format!("/metadata/annotations/{}", STATUS.replace('/', "~1")), "value": "injected"},
    ])
}

/// Serves `/mutate` on 127.0.0.1 with the serving pair in `certs` (`tls.crt`, `tls.key`).
pub async fn start(certs: &Path, patch: &Value) -> Result<StandIn> {
    let read = |name: &str| std::fs::read(certs.join(name)).map_err(|e| format!("cannot read {name}: {e}"));
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(&read("tls.crt")?)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("tls.crt: {e}"))?;
    let private =
        rustls::pki_types::PrivateKeyDer::from_pem_slice(&read("tls.key")?).map_err(|e| format!("tls.key: {e}"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(envoy_injector::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind the stand-in: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let encoded = base64_std(patch.to_string().as_bytes());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, encoded) = (acceptor.clone(), encoded.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else { return };
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let encoded = encoded.clone();
                    async move { Ok::<_, hyper::Error>(answer(request, &encoded).await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok(StandIn { addr })
}

/// Decodes the review (as the Go injector decodes it whole) and answers with the patch.
async fn answer(request: Request<Incoming>, encoded: &str) -> Response<Full<Bytes>> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return Response::builder()
                .status(400)
                .body(Full::default())
                .unwrap_or_default();
        }
    };
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let uid = review["request"]["uid"].clone();
    let reply = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": encoded},
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .unwrap_or_default()
}

fn base64_std(bytes: &[u8]) -> String {
    crate::common::webhooks::base64(bytes)
}
