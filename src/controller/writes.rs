//! The Networks this controller just wrote, until the watch shows them back.
//!
//! Two things go wrong without it. Every write comes back as a watch event that would
//! trigger one more reconcile with nothing to do (doubling the reconciles of a burst and
//! making each member Pod cost two). And a reconcile triggered by something else (an index)
//! before that event arrives reads the store's older copy: it would write the same status
//! again and publish the same Event twice.
//!
//! So each write's answer is kept, with the resourceVersions it went through:
//! * a watch event whose resourceVersion is one of ours is our echo, not a trigger;
//! * a reconcile given a copy whose resourceVersion is one we wrote over works on our
//!   newer copy instead.
//!
//! The echo often arrives *before* the answer to the write is processed (both leave the
//! API server together). So while a reconcile of a Network runs, its watch events are held
//! back; when it ends, they are dropped if they only show versions that reconcile started
//! from or wrote, and the Network is requeued once if any shows someone else's change.
//!
//! resourceVersions are only compared for equality (they are opaque). A record ends when
//! the watch delivers our last write, or when another writer's version shows up (then the
//! store is the newer copy). At most one record per Network written and not yet seen back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::reflector::ObjectRef;

use crate::network::crd::Network;

struct Record {
    /// The versions our copy replaced: where we started from and our earlier writes.
    superseded: Vec<String>,
    /// Versions our own writes produced, the last one included.
    ours: Vec<String>,
    latest: Arc<Network>,
}

/// A reconcile in flight: the version it started from, and the versions the watch showed
/// meanwhile.
struct Busy {
    started: Option<String>,
    seen: Vec<String>,
}

#[derive(Default)]
struct State {
    records: HashMap<ObjectRef<Network>, Record>,
    busy: HashMap<ObjectRef<Network>, Busy>,
}

#[derive(Default)]
pub struct Written {
    state: Mutex<State>,
}

fn version(network: &Network) -> Option<&str> {
    network.metadata.resource_version.as_deref()
}

impl Written {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers that a write turned `before` into `after` (the API server's answer).
    pub fn record(&self, before: &Network, after: Network) {
        let (Some(from), Some(to)) = (version(before), version(&after)) else {
            return;
        };
        let (from, to) = (from.to_string(), to.to_string());
        let key = ObjectRef::from_obj(&after);
        let latest = Arc::new(after);
        let mut state = self.lock();
        let record = state.records.entry(key).or_insert_with(|| Record {
            superseded: Vec::new(),
            ours: Vec::new(),
            latest: latest.clone(),
        });
        if from != to {
            record.superseded.push(from);
        }
        record.ours.push(to);
        record.latest = latest;
    }

    /// The newest copy of `network` known here: ours when the given one is older.
    pub fn freshest(&self, network: Arc<Network>) -> Arc<Network> {
        let key = ObjectRef::from_obj(&*network);
        let mut state = self.lock();
        let Some(record) = state.records.get(&key) else {
            return network;
        };
        let given = version(&network).unwrap_or_default();
        let latest = version(&record.latest).unwrap_or_default();
        if given != latest && (record.superseded.iter().any(|v| v == given) || record.ours.iter().any(|v| v == given)) {
            return record.latest.clone();
        }
        // Our last write, or a version someone else made after it: the given copy is current.
        state.records.remove(&key);
        network
    }

    /// A reconcile of `network` (this copy) starts: hold back its watch events until
    /// [`Written::finish`].
    pub fn begin(&self, network: &Network) {
        let busy = Busy {
            started: version(network).map(String::from),
            seen: Vec::new(),
        };
        self.lock().busy.insert(ObjectRef::from_obj(network), busy);
    }

    /// The reconcile of `network` ended. True when an event held back meanwhile showed a
    /// change that is not ours: the Network needs another reconcile.
    pub fn finish(&self, network: &ObjectRef<Network>) -> bool {
        let mut state = self.lock();
        let Some(busy) = state.busy.remove(network) else {
            return false;
        };
        let mut news = false;
        for seen in &busy.seen {
            if busy.started.as_deref() == Some(seen.as_str()) {
                continue;
            }
            news |= !Self::settle_echo(&mut state, network, seen);
        }
        news
    }

    /// True when `seen` is a version our writes produced or replaced; seeing our last write
    /// ends the record.
    fn settle_echo(state: &mut State, key: &ObjectRef<Network>, seen: &str) -> bool {
        let Some(record) = state.records.get(key) else {
            return false;
        };
        let ours = record.ours.iter().chain(&record.superseded).any(|v| v == seen);
        if version(&record.latest) == Some(seen) {
            state.records.remove(key);
        }
        ours
    }

    /// False when a watch event needs no reconcile (yet): it only shows back one of our
    /// writes, or a reconcile of that Network is running (see [`Written::finish`]).
    pub fn is_trigger(&self, network: &Network) -> bool {
        let key = ObjectRef::from_obj(network);
        let Some(seen) = version(network) else {
            return true;
        };
        let mut state = self.lock();
        if let Some(busy) = state.busy.get_mut(&key) {
            busy.seen.push(seen.to_string());
            return false;
        }
        !Self::settle_echo(&mut state, &key, seen)
    }

    /// Forgets a Network (it is gone).
    pub fn forget(&self, network: &ObjectRef<Network>) {
        self.lock().records.remove(network);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().records.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::crd::NetworkSpec;

    fn at(version: &str, attached: i64) -> Network {
        let mut n = Network::new(
            "n",
            NetworkSpec {
                cidr: "10.0.0.0/24".into(),
                gateway: "10.0.0.1".into(),
            },
        );
        n.metadata.namespace = Some("default".into());
        n.metadata.resource_version = Some(version.into());
        n.status = Some(crate::network::crd::NetworkStatus {
            attached_pods: attached,
            ..Default::default()
        });
        n
    }

    #[test]
    fn our_echoes_are_not_triggers_and_stale_copies_are_replaced() {
        let written = Written::default();
        // Finalizer added (1 → 2), then status written (2 → 3).
        written.record(&at("1", 0), at("2", 0));
        written.record(&at("2", 0), at("3", 5));
        // A reconcile handed the store's stale copy works on ours.
        assert_eq!(
            written
                .freshest(Arc::new(at("1", 0)))
                .metadata
                .resource_version
                .as_deref(),
            Some("3")
        );
        assert_eq!(
            written
                .freshest(Arc::new(at("2", 0)))
                .status
                .as_ref()
                .unwrap()
                .attached_pods,
            5
        );
        // The watch shows our writes back: no trigger; the last one ends the record.
        assert!(!written.is_trigger(&at("2", 0)));
        assert_eq!(written.len(), 1);
        assert!(!written.is_trigger(&at("3", 5)));
        assert!(written.is_empty());
        assert!(written.is_trigger(&at("3", 5)), "without a record every event triggers");
    }

    #[test]
    fn another_writer_ends_the_record() {
        let written = Written::default();
        written.record(&at("1", 0), at("2", 1));
        assert!(written.is_trigger(&at("7", 9)), "someone else's version triggers");
        let theirs = written.freshest(Arc::new(at("7", 9)));
        assert_eq!(theirs.metadata.resource_version.as_deref(), Some("7"));
        assert!(written.is_empty());
    }

    #[test]
    fn echoes_that_beat_the_answer_are_held_and_dropped() {
        let written = Written::default();
        let key = ObjectRef::from_obj(&at("1", 0));
        written.begin(&at("1", 0));
        // The echo of our write arrives before its answer is recorded: held.
        assert!(!written.is_trigger(&at("2", 1)));
        assert!(!written.is_trigger(&at("1", 0)), "the version we started from: no news");
        written.record(&at("1", 0), at("2", 1));
        assert!(!written.finish(&key), "only our own versions were seen");
        assert!(written.is_empty(), "our last write was seen back");

        // Someone else's change during a reconcile: one more reconcile after it.
        written.begin(&at("2", 1));
        assert!(!written.is_trigger(&at("5", 1)));
        assert!(written.finish(&key));
        assert!(!written.finish(&key), "finished once");
    }
}
