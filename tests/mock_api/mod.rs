//! A scripted Kubernetes API server for tests: each request the client makes is taken in
//! order, checked, and answered by the test (tower-test's mock service under kube's Client).
//! `steps` names the exchanges the injector makes (a Secret read, a caBundle patch, a
//! finalizer apply, a status patch, an Event...), each checking what every such request
//! carries; the answers below are the API server's own (its `Status` bodies, a merge patch
//! applied to the stored object).

#![allow(dead_code)]

use std::time::Duration;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::time::timeout;
use tower_test::mock::{self, Handle, SendResponse};

mod steps;
pub use steps::*;

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

    /// 200 with `object` as the server holds it.
    pub fn reply_ok(self, object: &impl Serialize) {
        let body = serde_json::to_value(object).unwrap();
        self.reply(200, &body);
    }

    /// `stored` with this request's JSON merge patch (a status patch) applied, as the
    /// server would store it, at `resource_version` when given.
    pub fn merged<K: Serialize + DeserializeOwned>(&self, stored: &K, resource_version: Option<&str>) -> K {
        let mut object = serde_json::to_value(stored).unwrap();
        json_patch::merge(&mut object, &self.body);
        if let Some(version) = resource_version {
            object["metadata"]["resourceVersion"] = json!(version);
        }
        serde_json::from_value(object).expect("the merged object keeps its type")
    }

    /// Answers a JSON merge patch as the server does, with [`Call::merged`]; returns it.
    pub fn reply_merged<K: Serialize + DeserializeOwned>(self, stored: &K, resource_version: Option<&str>) -> K {
        let object = self.merged(stored, resource_version);
        self.reply_ok(&object);
        object
    }

    /// 404 for the requested object, naming it as the API server does (`details.name`).
    pub fn reply_not_found(self) {
        let target = Target::of(&self.path);
        let name = target.name.expect("a 404 for an object needs an object path");
        let message = format!("{} \"{name}\" not found", target.group_resource());
        let mut body = status(404, "NotFound", &message);
        body["details"] = json!({"name": name, "group": target.group, "kind": target.resource});
        self.reply(404, &body);
    }

    /// 404 for the resource type itself (its CRD is not installed): no object name.
    pub fn reply_unknown_resource(self) {
        let target = Target::of(&self.path);
        let mut body = status(404, "NotFound", "the server could not find the requested resource");
        body["details"] = json!({"group": target.group, "kind": target.resource});
        self.reply(404, &body);
    }

    /// 409 AlreadyExists for a create, naming the object it carried.
    pub fn reply_already_exists(self) {
        let target = Target::of(&self.path);
        let name = self.body["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let message = format!("{} \"{name}\" already exists", target.group_resource());
        self.reply(409, &status(409, "AlreadyExists", &message));
    }

    /// A `Status` failure: `code`, `reason`, `message`.
    pub fn reply_status(self, code: u16, reason: &str, message: &str) {
        self.reply(code, &status(code, reason, message));
    }
}

/// What a request path addresses: `/api/v1/[namespaces/NS/]RESOURCE[/NAME]` or
/// `/apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME]`.
struct Target<'a> {
    group: &'a str,
    resource: &'a str,
    name: Option<&'a str>,
}

impl<'a> Target<'a> {
    fn of(path: &'a str) -> Target<'a> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, mut rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => panic!("expected an API path, found {path}"),
        };
        if let ["namespaces", _namespace, inner @ ..] = rest
            && !inner.is_empty()
        {
            rest = inner;
        }
        match rest {
            [resource] => Target {
                group,
                resource,
                name: None,
            },
            [resource, name, ..] => Target {
                group,
                resource,
                name: Some(name),
            },
            _ => panic!("expected a resource in {path}"),
        }
    }

    /// `resource.group` as the API server prints it (`resource` for the core group).
    fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
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
