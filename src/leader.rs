//! Leader election: only the holder of a coordination.k8s.io Lease runs the Network
//! controller; every replica keeps its caches and serves the webhook.

use std::future::Future;
use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::backoff::Exponential;
use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;

/// Retries of the Lease set-up while the API server is unreachable: 1 s doubling to 1 min.
const LEASE_SETUP_BACKOFF: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(60));

/// How long a stopping controller may take to finish its current reconciles.
const CONTROLLER_STOP_GRACE: Duration = Duration::from_secs(5);

/// The Lease to hold, or none (`--leader-elect=false`).
pub struct Election {
    pub client: Client,
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    pub duration_seconds: u64,
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

    // Renew a third of the way before expiry, so a slow API call does not lose the Lease.
    let grace = (election.duration_seconds / 3).max(1);
    // The webhook must keep serving while the API server is unreachable: retry setting up
    // the Lease with backoff instead of failing the process.
    let mut failures = 0;
    let manager = loop {
        let built = LeaseManagerBuilder::new(election.client.clone(), &election.lease_name)
            .with_namespace(&election.namespace)
            .with_identity(&election.identity)
            .with_duration(election.duration_seconds)
            .with_grace(grace)
            .build()
            .await;
        match built {
            Ok(manager) => break manager,
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
    let (mut leading, lease_task) = manager.watch().await;
    info!(identity = %election.identity, lease = %election.lease_name, "waiting for the controller Lease");

    let mut running: Option<Running> = None;
    loop {
        let is_leader = *leading.borrow_and_update();
        match (is_leader, running.take()) {
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
        tokio::select! {
            changed = leading.changed() => {
                if changed.is_err() {
                    warn!("the Lease manager stopped; stopping the controller");
                    break;
                }
            }
            () = shutdown.cancelled() => break,
        }
    }
    if let Some(run) = running.take() {
        stop(run).await;
    }
    metrics.leader.set(0);
    // Dropping the receiver makes the manager release the Lease for the next replica.
    drop(leading);
    match tokio::time::timeout(Duration::from_secs(5), lease_task).await {
        Ok(Ok(Ok(_))) => info!("released the controller Lease"),
        Ok(Ok(Err(err))) => warn!(error = %err, "could not release the Lease; it expires on its own"),
        Ok(Err(err)) => warn!(error = %err, "the Lease manager task failed"),
        Err(_) => warn!("timed out releasing the Lease; it expires on its own"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
