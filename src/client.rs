//! The kube `Client` of `serve`: every request counted, and rate-limited on its way out.
//!
//! * **Counted** by verb and resource into `envoy_injector_api_requests_total`, after the
//!   rate limit: what the API server actually received (the benchmark reads its writes
//!   there).
//! * **Rate-limited** by a token bucket (`--api-qps`, `--api-burst`; governor): a burst of
//!   Networks queues here instead of starving the API server. Lease requests
//!   (coordination.k8s.io) are exempt, so leadership is never lost to our own queue.
//! * **Not retried by the client.** kube's default retry resends each 429/503/504 up to
//!   15 times from 5 ms, every request on its own: a storm against a throttling server. A
//!   failed reconcile is retried per Network instead, with jittered exponential backoff
//!   ([`crate::backoff`]); watches keep their own backoff.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Method, Request};
use kube::client::{Body, ClientBuilder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::buffer::Buffer;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::backoff::Exponential;
use crate::metrics::{ApiLabels, Metrics};
use crate::template::KubeVersion;

/// Requests queued in front of the rate limiter's inner service.
const BUFFER: usize = 1024;

/// The client-side rate limit. `qps` 0 turns it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub qps: u32,
    pub burst: u32,
}

/// A client for the cluster in `KUBECONFIG` (or the in-cluster config), counted into
/// `metrics` and limited to `limits`.
pub async fn connect(limits: Limits, metrics: &Metrics) -> Result<kube::Client, kube::Error> {
    let mut config = kube::Config::infer().await.map_err(kube::Error::InferConfig)?;
    // See the module docs: retries are per Network, with jitter.
    config.default_retry = false;
    let client = ClientBuilder::try_from(config)?
        .with_layer(&CountLayer::new(metrics))
        .with_layer(&RateLimitLayer::new(limits))
        .build();
    Ok(client)
}

/// Tries to read the API server's version before the newest supported is assumed.
const VERSION_TRIES: u32 = 5;

/// The Kubernetes version of the API server (`/version`): the value rules templates are
/// checked with. Asked a few times with backoff; a release newer than the rules known is
/// checked with the newest rules, one older than the oldest supported with the oldest,
/// either said in one warning; when nothing readable answers, the newest rules are used.
pub async fn kube_version(client: &kube::Client) -> KubeVersion {
    let backoff = Exponential::new(std::time::Duration::from_millis(200), std::time::Duration::from_secs(3));
    for failures in 1..=VERSION_TRIES {
        let info = match client.apiserver_version().await {
            Ok(info) => info,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the API server's version; asking again");
                tokio::time::sleep(backoff.jittered(failures)).await;
                continue;
            }
        };
        match KubeVersion::from_server(&info.major, &info.minor) {
            Ok((version, note)) => {
                if let Some(note) = note {
                    tracing::warn!("{note}");
                }
                tracing::info!(%version, rules = %version.rules(), "checking template values with the rules of the API server's version");
                return version;
            }
            Err(err) => {
                tracing::warn!(error = %err, "the API server's version is not one this injector knows");
                break;
            }
        }
    }
    tracing::warn!(
        version = %KubeVersion::NEWEST,
        "checking template values with the rules of the newest supported Kubernetes"
    );
    KubeVersion::NEWEST
}

/// The verb and resource of a request to the Kubernetes API, from its method, path and
/// query. Paths outside `/api` and `/apis` (discovery, `/version`) are resource `other`.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> ApiLabels {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _namespace, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("other".to_string(), false),
        [plural] => (plural.to_string(), false),
        [plural, _name] => (plural.to_string(), true),
        [plural, _name, subresource, ..] => (format!("{plural}/{subresource}"), true),
    };
    let watch = query.is_some_and(|q| q.split('&').any(|pair| pair == "watch=true" || pair == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    ApiLabels { verb, resource }
}

/// Counts every request into `envoy_injector_api_requests_total`.
#[derive(Clone)]
pub struct CountLayer {
    requests: Family<ApiLabels, Counter>,
}

impl CountLayer {
    pub fn new(metrics: &Metrics) -> CountLayer {
        CountLayer {
            requests: metrics.api_requests.clone(),
        }
    }
}

impl<S> Layer<S> for CountLayer {
    type Service = Count<S>;

    fn layer(&self, inner: S) -> Count<S> {
        Count {
            inner,
            requests: self.requests.clone(),
        }
    }
}

pub struct Count<S> {
    inner: S,
    requests: Family<ApiLabels, Counter>,
}

impl<S, B> Service<Request<B>> for Count<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> S::Future {
        let labels = classify(request.method(), request.uri().path(), request.uri().query());
        self.requests.get_or_create(&labels).inc();
        self.inner.call(request)
    }
}

/// Holds each request until the token bucket grants it; Lease requests pass at once.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
}

impl RateLimitLayer {
    pub fn new(limits: Limits) -> RateLimitLayer {
        let limiter = NonZeroU32::new(limits.qps).map(|qps| {
            let burst = NonZeroU32::new(limits.burst).unwrap_or(qps);
            Arc::new(RateLimiter::direct(Quota::per_second(qps).allow_burst(burst)))
        });
        RateLimitLayer { limiter }
    }
}

fn exempt(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/")
}

impl<S> Layer<S> for RateLimitLayer
where
    S: Service<Request<Body>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + Send + Sync,
{
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        // The requests wait in their own futures, not in `poll_ready` (that would hold up
        // the exempt Lease requests behind them), so each needs a handle on the inner
        // service: a Buffer is the cloneable one.
        RateLimit {
            inner: Buffer::new(inner, BUFFER),
            limiter: self.limiter.clone(),
        }
    }
}

pub struct RateLimit<S: Service<Request<Body>>> {
    inner: Buffer<Request<Body>, S::Future>,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
}

impl<S> Service<Request<Body>> for RateLimit<S>
where
    S: Service<Request<Body>> + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let limiter = self.limiter.clone().filter(|_| !exempt(request.uri().path()));
        let inner = self.inner.clone();
        Box::pin(async move {
            if let Some(limiter) = limiter {
                limiter.until_ready().await;
            }
            inner.oneshot(request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb_resource(method: Method, uri: &str) -> (&'static str, String) {
        let uri: http::Uri = uri.parse().unwrap();
        let labels = classify(&method, uri.path(), uri.query());
        (labels.verb, labels.resource)
    }

    #[test]
    fn requests_are_classified_by_verb_and_resource() {
        let nets = "/apis/samplecrd.k8s.io/v1/namespaces/default/networks";
        assert_eq!(
            verb_resource(Method::GET, &format!("{nets}?limit=500")),
            ("list", "networks".into())
        );
        assert_eq!(
            verb_resource(
                Method::GET,
                "/apis/samplecrd.k8s.io/v1/networks?watch=true&resourceVersion=5"
            ),
            ("watch", "networks".into())
        );
        assert_eq!(
            verb_resource(Method::PATCH, &format!("{nets}/a/status")),
            ("patch", "networks/status".into())
        );
        assert_eq!(
            verb_resource(Method::PATCH, &format!("{nets}/a?fieldManager=x")),
            ("patch", "networks".into())
        );
        assert_eq!(
            verb_resource(Method::GET, "/api/v1/namespaces/kube-system"),
            ("get", "namespaces".into())
        );
        assert_eq!(
            verb_resource(Method::GET, "/api/v1/namespaces"),
            ("list", "namespaces".into())
        );
        assert_eq!(
            verb_resource(Method::POST, "/apis/events.k8s.io/v1/namespaces/default/events"),
            ("create", "events".into())
        );
        assert_eq!(
            verb_resource(Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/ei/leases/l"),
            ("update", "leases".into())
        );
        assert_eq!(
            verb_resource(Method::DELETE, &format!("{nets}/a")),
            ("delete", "networks".into())
        );
        assert_eq!(verb_resource(Method::GET, "/version"), ("list", "other".into()));
    }

    #[tokio::test]
    async fn the_bucket_spaces_requests_beyond_the_burst_but_never_a_lease() {
        use std::time::{Duration, Instant};
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, http::Response<Body>>();
        let service = RateLimitLayer::new(Limits { qps: 10, burst: 2 }).layer(mock);
        let answer = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some((request, respond)) = handle.next_request().await {
                seen.push((Instant::now(), request.uri().path().to_string()));
                respond.send_response(http::Response::new(Body::empty()));
            }
            seen
        });
        let mut calls = Vec::new();
        for _ in 0..4 {
            calls.push(service.clone_request("/api/v1/namespaces/default/pods"));
        }
        calls.push(service.clone_request("/apis/coordination.k8s.io/v1/namespaces/ei/leases/l"));
        futures::future::try_join_all(calls).await.unwrap();
        drop(service);
        let seen = answer.await.unwrap();
        let lease = seen.iter().position(|(_, p)| p.contains("leases")).unwrap();
        assert!(lease < 3, "the Lease passed ahead of the queued requests: {seen:?}");
        // Two at once (the burst), then one per 100 ms: a lower bound, so never flaky.
        let spread = seen.last().unwrap().0 - seen.first().unwrap().0;
        assert!(spread >= Duration::from_millis(150), "{spread:?}");
    }

    trait CloneRequest {
        fn clone_request(&self, path: &str) -> BoxFuture<'static, Result<http::Response<Body>, BoxError>>;
    }

    impl<S> CloneRequest for RateLimit<S>
    where
        S: Service<Request<Body>, Response = http::Response<Body>> + Send + 'static,
        S::Future: Send,
        S::Error: Into<BoxError> + Send + Sync,
    {
        fn clone_request(&self, path: &str) -> BoxFuture<'static, Result<http::Response<Body>, BoxError>> {
            let mut service = RateLimit::<S> {
                inner: self.inner.clone(),
                limiter: self.limiter.clone(),
            };
            service.call(Request::get(path).body(Body::empty()).unwrap())
        }
    }
}
