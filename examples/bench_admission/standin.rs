//! The stand-in for a classic Go injector (morvencao/kube-sidecar-injector): a TLS webhook
//! that decodes the review, and answers every Pod with one fixed JSON Patch of the
//! operations such an injector returns — one container, one volume, one annotation. No Go
//! toolchain with Kubernetes' modules is reachable here, so this is what our webhook's
//! added latency is compared with, in the same run. Each stand-in is a process of its own,
//! as the Go injector and our `serve` are: the benchmark runs itself as
//! `bench_admission stand-in CERTS PATCH_FILE`, which prints the address it serves.

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

/// A running stand-in process; killed when dropped.
pub struct StandIn {
    pub addr: SocketAddr,
    child: std::process::Child,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The argument that makes the benchmark a stand-in.
pub const ARGUMENT: &str = "stand-in";

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

/// Starts a stand-in process answering with `patch`, serving with the pair in `certs`
/// (`tls.crt`, `tls.key`), and waits for its address.
pub fn start(certs: &Path, name: &str, patch: &Value) -> Result<StandIn> {
    let patch_file = certs.join(format!("{name}.patch.json"));
    std::fs::write(&patch_file, patch.to_string())
        .map_err(|e| format!("cannot write {}: {e}", patch_file.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the benchmark's own binary: {e}"))?;
    let mut child = std::process::Command::new(exe)
        .arg(ARGUMENT)
        .arg(certs)
        .arg(&patch_file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start stand-in {name}: {e}"))?;
    let mut line = String::new();
    let read = child
        .stdout
        .take()
        .map(|out| std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line));
    let addr = match (read, line.trim().parse::<SocketAddr>()) {
        (Some(Ok(_)), Ok(addr)) => addr,
        _ => {
            let _ = child.kill();
            return Err(format!(
                "stand-in {name}: expected its address on its first line, found {line:?}"
            ));
        }
    };
    Ok(StandIn { addr, child })
}

/// The stand-in process: serves `/mutate` on 127.0.0.1 with the pair in `certs`, answering
/// every review with the patch in `patch_file`; prints its address, then serves until killed.
pub fn serve(certs: &Path, patch_file: &Path) -> Result<()> {
    let patch = std::fs::read(patch_file).map_err(|e| format!("cannot read {}: {e}", patch_file.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(listen(certs, base64_std(&patch)))
}

async fn listen(certs: &Path, encoded: String) -> Result<()> {
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
    println!("{addr}");
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
