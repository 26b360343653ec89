//! The Networks the indexes asked to re-evaluate (an overlap, an attached-Pod count or a
//! NAD changed), on their way to the controller.
//!
//! A set, not a channel: it holds each Network at most once however many events named it,
//! so it is bounded by the number of Networks, never by the event rate. It fills only while
//! the controller runs (this replica leads); starting the controller clears it, because the
//! start reconciles every Network anyway.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::Stream;
use indexmap::IndexSet;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use crate::network::crd::Network;

#[derive(Default)]
pub struct Pending {
    set: Mutex<IndexSet<ObjectRef<Network>>>,
    ready: Notify,
    active: AtomicBool,
}

impl Pending {
    pub fn new() -> Pending {
        Pending::default()
    }

    /// Asks for a reconcile of each of `networks`; dropped while no controller runs.
    pub fn push(&self, networks: impl IntoIterator<Item = ObjectRef<Network>>) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let added = {
            let mut set = self.set.lock().unwrap_or_else(PoisonError::into_inner);
            let before = set.len();
            set.extend(networks);
            set.len() > before
        };
        if added {
            self.ready.notify_one();
        }
    }

    /// Starts collecting, empty, and returns the stream of Networks to reconcile (oldest
    /// request first). One consumer at a time: the running controller.
    pub fn start(self: &Arc<Self>) -> impl Stream<Item = ObjectRef<Network>> + Send + 'static {
        self.set.lock().unwrap_or_else(PoisonError::into_inner).clear();
        self.active.store(true, Ordering::Release);
        let batch = std::collections::VecDeque::new();
        futures::stream::unfold((self.clone(), batch), |(pending, mut batch)| async move {
            loop {
                if let Some(network) = batch.pop_front() {
                    return Some((network, (pending, batch)));
                }
                // Take everything at once (O(1) per item); later pushes start a new set.
                let taken = std::mem::take(&mut *pending.set.lock().unwrap_or_else(PoisonError::into_inner));
                if taken.is_empty() {
                    // `notify_one` stores a permit when nobody waits: a push between the
                    // check above and this wait is not lost.
                    pending.ready.notified().await;
                } else {
                    batch.extend(taken);
                }
            }
        })
    }

    /// Stops collecting (the controller stopped) and drops what was pending.
    pub fn stop(&self) {
        self.active.store(false, Ordering::Release);
        self.set.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    pub fn len(&self) -> usize {
        self.set.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn net(name: &str) -> ObjectRef<Network> {
        ObjectRef::new(name).within("default")
    }

    #[tokio::test]
    async fn holds_each_network_once_and_only_while_started() {
        let pending = Arc::new(Pending::new());
        pending.push([net("early")]);
        assert!(pending.is_empty(), "nothing is collected before the controller starts");
        let stream = pending.start();
        futures::pin_mut!(stream);
        for _ in 0..1000 {
            pending.push([net("a"), net("b")]);
        }
        pending.push([net("a"), net("c")]);
        assert_eq!(pending.len(), 3, "bounded by the Networks, not the requests");
        let drained: Vec<_> = stream.as_mut().take(3).collect().await;
        assert_eq!(drained, vec![net("a"), net("b"), net("c")]);
        // A push while the consumer waits wakes it.
        let waiter = tokio::spawn({
            let pending = pending.clone();
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                pending.push([net("d")]);
            }
        });
        assert_eq!(stream.next().await, Some(net("d")));
        waiter.await.unwrap();
        pending.stop();
        pending.push([net("e")]);
        assert!(pending.is_empty());
    }
}
