//! Leader election: only the holder of a coordination.k8s.io Lease runs the Network
//! controller; every replica keeps its caches and serves the webhook.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::backoff::{Episode, Exponential, Streak};
use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;

/// Retries of the Lease set-up while the API server is unreachable: 1 s doubling to 1 min.
/// Also the backoff of the watch of the Lease.
const LEASE_SETUP_BACKOFF: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(60));

/// A failure streak of the Lease watch ends after this long without an error.
const LEASE_WATCH_QUIET: Duration = Duration::from_secs(120);

/// Retries after a failed Lease request (get, renew, acquire): kube-lease-manager's own
/// watch loop waits 1 s doubling to 30 s.
const LEASE_RETRY_BACKOFF: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(30));

/// How long a stopping controller may take to finish its current reconciles.
const CONTROLLER_STOP_GRACE: Duration = Duration::from_secs(5);

/// How long releasing the Lease on shutdown may take; after that it expires on its own.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The Lease to hold, or none (`--leader-elect=false`).
pub struct Election {
    pub client: Client,
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    pub duration_seconds: u64,
}

impl Election {
    /// A manager that knows nothing yet: its first `changed()` reads the Lease.
    async fn manager(&self) -> Result<LeaseManager, LeaseManagerError> {
        LeaseManagerBuilder::new(self.client.clone(), &self.lease_name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(self.duration_seconds)
            // Renew a third of the way before expiry, so a slow API call does not lose
            // the Lease.
            .with_grace((self.duration_seconds / 3).max(1))
            .build()
            .await
    }
}

/// This replica's name in the Lease: `--identity`/`POD_NAME`, else the hostname.
pub fn default_identity() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("envoy-injector-{}", std::process::id()))
}

/// A controller run: `start(stop)` returns a future that reconciles until `stop` is
/// cancelled.
struct Running {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

async fn stop(running: Running) {
    running.stop.cancel();
    let mut task = running.task;
    if tokio::time::timeout(CONTROLLER_STOP_GRACE, &mut task).await.is_err() {
        warn!("the controller did not stop in time; aborting it");
        task.abort();
    }
}

/// The next change of this replica's leadership (true: it holds the Lease). While leading,
/// polling it renews the Lease; while not, it acquires the Lease once it is free or expired.
fn next_change(manager: Arc<LeaseManager>) -> BoxFuture<'static, Result<bool, LeaseManagerError>> {
    Box::pin(async move { manager.changed().await })
}

/// True when `lease` shows a holder (an empty identity is none).
fn is_held(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .is_some_and(|holder| !holder.is_empty())
}

/// Yields each time the Lease goes from held to free (its holder released it on
/// shutdown), as a watch of that one object (a field selector on its name) shows it.
///
/// kube-lease-manager, when another replica holds the Lease, sleeps until the expiry it
/// last read: a released Lease would wait up to the lease duration for a new holder, with
/// no controller running. A failing watch only loses that shortcut, so it is logged once
/// per failure streak and retried with backoff.
fn releases(election: &Election) -> impl Stream<Item = ()> + Send + 'static {
    let api: Api<Lease> = Api::namespaced(election.client.clone(), &election.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", election.lease_name));
    let lease = election.lease_name.clone();
    let mut held = false;
    let mut failing = Episode::default();
    watcher(api, config)
        .backoff(Streak::new(LEASE_SETUP_BACKOFF, LEASE_WATCH_QUIET))
        .filter_map(move |event| {
            let released = match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    let now = is_held(&object);
                    std::mem::replace(&mut held, now) && !now
                }
                Ok(watcher::Event::Delete(_)) => std::mem::replace(&mut held, false),
                Ok(watcher::Event::InitDone) => {
                    if let Some((failures, lasted)) = failing.recover() {
                        info!(%lease, failures, lasted_ms = lasted.as_millis() as u64, "watching the Lease again");
                    }
                    false
                }
                Ok(watcher::Event::Init) => false,
                Err(error) => {
                    if failing.fail() {
                        warn!(
                            %lease,
                            %error,
                            "cannot watch the Lease (RBAC list/watch?); a released Lease is taken only at its expiry"
                        );
                    }
                    false
                }
            };
            futures::future::ready(released.then_some(()))
        })
}

/// Runs the controller while leading (always, without `election`), until `shutdown`.
/// `start` is called each time leadership is gained, with the token that ends that run (a
/// child of `shutdown`).
pub async fn supervise<F, Fut>(election: Option<Election>, metrics: Metrics, shutdown: CancellationToken, start: F)
where
    F: Fn(CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let launch = |metrics: &Metrics| {
        let stop = shutdown.child_token();
        metrics.leader.set(1);
        Running {
            task: tokio::spawn(start(stop.clone())),
            stop,
        }
    };
    let Some(election) = election else {
        info!("leader election off: running the Network controller");
        let running = launch(&metrics);
        shutdown.cancelled().await;
        stop(running).await;
        metrics.leader.set(0);
        return;
    };

    // The webhook must keep serving while the API server is unreachable: retry setting up
    // the Lease with backoff instead of failing the process.
    let mut failures = 0;
    let mut manager = loop {
        match election.manager().await {
            Ok(manager) => break Arc::new(manager),
            Err(err) => {
                failures += 1;
                warn!(
                    namespace = %election.namespace,
                    lease = %election.lease_name,
                    error = %err,
                    retry_in_s = LEASE_SETUP_BACKOFF.delay(failures).as_secs(),
                    "cannot set up leader election yet"
                )
            }
        }
        tokio::select! {
            () = tokio::time::sleep(LEASE_SETUP_BACKOFF.delay(failures)) => {}
            () = shutdown.cancelled() => return,
        }
    };
    let releases = releases(&election);
    futures::pin_mut!(releases);
    info!(identity = %election.identity, lease = %election.lease_name, "waiting for the controller Lease");

    let mut change = next_change(manager.clone());
    let mut lease_errors = Episode::default();
    let mut running: Option<Running> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            result = &mut change => {
                match result {
                    Ok(leading) => {
                        if let Some((failures, lasted)) = lease_errors.recover() {
                            info!(failures, lasted_ms = lasted.as_millis() as u64, "Lease requests work again");
                        }
                        match (leading, running.take()) {
                            (true, None) => {
                                info!(identity = %election.identity, "acquired the Lease: starting the Network controller");
                                running = Some(launch(&metrics));
                            }
                            (false, Some(run)) => {
                                warn!(identity = %election.identity, "lost the Lease: stopping the Network controller");
                                stop(run).await;
                                metrics.leader.set(0);
                            }
                            (_, current) => running = current,
                        }
                    }
                    Err(err) => {
                        if lease_errors.fail() {
                            warn!(error = %err, lease = %election.lease_name, "Lease request failed; retrying with backoff");
                        }
                        tokio::select! {
                            () = tokio::time::sleep(LEASE_RETRY_BACKOFF.delay(lease_errors.failures())) => {}
                            () = shutdown.cancelled() => break,
                        }
                    }
                }
                change = next_change(manager.clone());
            }
            Some(()) = releases.next() => {
                // Only a standby's manager is replaced: it holds nothing, and the fresh
                // one reads the Lease at once instead of sleeping until the expiry the
                // old one last saw. Acquiring stays the manager's own conditional write.
                if running.is_none() {
                    match election.manager().await {
                        Ok(fresh) => {
                            debug!(lease = %election.lease_name, "the Lease was released: trying to acquire it now");
                            manager = Arc::new(fresh);
                            change = next_change(manager.clone());
                        }
                        Err(err) => debug!(error = %err, "cannot read the released Lease; taking it at its expiry"),
                    }
                }
            }
        }
    }
    let leading = running.is_some();
    if let Some(run) = running.take() {
        stop(run).await;
    }
    metrics.leader.set(0);
    // Released only by its holder, after its controller stopped, for the next replica; a
    // standby's release could clear a Lease another replica has just acquired.
    drop(change);
    if leading {
        match tokio::time::timeout(RELEASE_TIMEOUT, manager.release()).await {
            Ok(Ok(())) => info!("released the controller Lease"),
            Ok(Err(err)) => warn!(error = %err, "could not release the Lease; it expires on its own"),
            Err(_) => warn!("timed out releasing the Lease; it expires on its own"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_lease_without_a_holder_or_with_an_empty_one_is_free() {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        let lease = |holder: Option<&str>| Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        };
        assert!(is_held(&lease(Some("a"))));
        assert!(!is_held(&lease(Some(""))), "what a release leaves");
        assert!(!is_held(&lease(None)));
        assert!(!is_held(&Lease::default()), "no spec at all");
    }

    #[tokio::test]
    async fn without_election_the_controller_runs_until_shutdown() {
        let metrics = Metrics::unregistered();
        let shutdown = CancellationToken::new();
        let started = Arc::new(AtomicUsize::new(0));
        let stopped = Arc::new(AtomicUsize::new(0));
        let start = {
            let (started, stopped) = (started.clone(), stopped.clone());
            move |stop: CancellationToken| {
                let (started, stopped) = (started.clone(), stopped.clone());
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    stop.cancelled().await;
                    stopped.fetch_add(1, Ordering::SeqCst);
                }
            }
        };
        let supervisor = tokio::spawn(supervise(None, metrics.clone(), shutdown.clone(), start));
        while started.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(metrics.leader.get(), 1);
        assert_eq!(stopped.load(Ordering::SeqCst), 0, "runs until shutdown");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), supervisor)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stopped.load(Ordering::SeqCst),
            1,
            "stopped through its signal, not aborted"
        );
        assert_eq!(metrics.leader.get(), 0);
    }
}
