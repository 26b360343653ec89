//! A scripted Kubernetes API server for tests: each request the client makes is taken in
//! order, checked, and answered by the test (tower-test's mock service under kube's Client).

#![allow(dead_code)]

use std::time::Duration;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::time::timeout;
use tower_test::mock::{self, Handle, SendResponse};

/// Safety bound on waiting for the next request; never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
}

/// One request the client made, waiting for its answer.
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub content_type: String,
    /// The JSON body, or the raw text as a JSON string when it is not JSON.
    pub body: Value,
    respond: SendResponse<Response<Body>>,
}

impl Call {
    pub fn reply(self, status: u16, body: &Value) {
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap();
        self.respond.send_response(response);
    }

    pub fn reply_text(self, status: u16, text: &str) {
        let response = Response::builder()
            .status(status)
            .header("content-type", "text/plain")
            .body(Body::from(text.as_bytes().to_vec()))
            .unwrap();
        self.respond.send_response(response);
    }

    /// Answers a create/update with the object it carried.
    pub fn echo(self, status: u16) {
        let body = self.body.clone();
        self.reply(status, &body);
    }

    /// Like [`Call::echo`], with the stored object's new `resourceVersion`.
    pub fn echo_at(self, status: u16, resource_version: &str) {
        let mut body = self.body.clone();
        body["metadata"]["resourceVersion"] = json!(resource_version);
        self.reply(status, &body);
    }
}

/// A `Status` failure body as the API server sends it.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
}

impl ApiServer {
    pub async fn next(&mut self) -> Call {
        let (request, respond) = timeout(PATIENCE, self.handle.next_request())
            .await
            .expect("expected another API request within the safety bound")
            .expect("expected another API request, but the client is gone");
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        let content_type = request
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Call {
            method,
            path,
            query,
            content_type,
            body,
            respond,
        }
    }

    /// The next request must be `method path`.
    pub async fn expect(&mut self, method: Method, path: &str) -> Call {
        let call = self.next().await;
        assert_eq!(
            (&call.method, call.path.as_str()),
            (&method, path),
            "expected {method} {path}, found {} {} with body {}",
            call.method,
            call.path,
            call.body
        );
        call
    }

    /// Once every client clone is dropped, the transport must have seen no other request.
    pub async fn assert_no_more_requests(mut self) {
        match timeout(PATIENCE, self.handle.next_request()).await {
            Ok(None) => {}
            Ok(Some((request, _))) => {
                panic!(
                    "expected no further request, found {} {}",
                    request.method(),
                    request.uri()
                )
            }
            Err(_) => panic!("the mocked client was never released (a Client clone is still alive)"),
        }
    }
}

/// A kube Client whose every request goes to the returned [`ApiServer`].
pub fn mock_client(default_namespace: &str) -> (Client, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, default_namespace), ApiServer { handle })
}
