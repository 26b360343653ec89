//! Which Networks overlap which, in the whole cluster: the index the controller decides
//! overlaps with, kept current from the Network watch's events (on every replica: it is
//! small).
//!
//! Overlaps are cluster-wide: a node holds the bridges of every Network whose Pods it runs,
//! whatever their namespaces, and each bridge puts its gateway address on the node; two
//! overlapping Networks would give a node two routes into one range, and Pods of one of
//! them would lose their gateway.
//!
//! Two CIDRs overlap exactly when one contains the other, so a prefix trie per address
//! family answers "which Networks overlap this CIDR" with the covering prefixes (its
//! ancestors) plus its subtree: O(prefix length + k) for k overlapping Networks, one
//! lookup per change however many Networks the cluster holds.
//!
//! The verdict is the one `status::spec_problem` reports: a Network *overlaps* when another
//! Network with a valid spec and **senior** to it (created earlier; same second: smaller
//! namespace, then name) has an overlapping CIDR. A Network being deleted still counts
//! until it is gone: its Pods keep their interfaces (and its bridge its gateway) until then.
//! Seniority is fixed at creation, so every replica and every restart decides a conflict
//! the same way.
//!
//! Every change returns the Networks whose verdict it can change, so only those are
//! requeued: a change of Network X matters only to the *juniors* of X that overlap X's
//! old or new CIDR (a senior's verdict never depends on a junior).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use prefix_trie::{Prefix, PrefixMap};

use super::crd::Network;
use super::subnet::{self, Subnet};
use crate::relist::{Relisting, Step};

/// Order of creation: `creationTimestamp`, then namespace, then name. The smaller one is
/// senior and wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seniority {
    created: Option<Timestamp>,
    namespace: Arc<str>,
    name: Arc<str>,
}

impl Seniority {
    fn is(&self, namespace: &str, name: &str) -> bool {
        &*self.namespace == namespace && &*self.name == name
    }

    fn object_ref(&self) -> ObjectRef<Network> {
        ObjectRef::new(&self.name).within(&self.namespace)
    }
}

/// What the index keeps of one Network that takes part in overlaps.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    subnet: Subnet,
    created: Option<Timestamp>,
}

impl Entry {
    /// `None` for Networks that cannot overlap anything: an invalid spec gets no backend
    /// state. One being deleted keeps its entry until it is gone.
    fn of(network: &Network) -> Option<Entry> {
        let (subnet, _) = subnet::validate(&network.spec.cidr, &network.spec.gateway).ok()?;
        Some(Entry {
            subnet,
            created: network.metadata.creation_timestamp.as_ref().map(|t| t.0),
        })
    }
}

/// Several Networks may hold the same CIDR: each prefix keeps its holders.
type Holders = Vec<Seniority>;

/// Every holder of a prefix that overlaps `prefix`: its ancestors and itself (`cover`),
/// then its strict descendants (`children` without the prefix itself, seen already).
fn visit_family<'a, P: Prefix>(trie: &'a PrefixMap<P, Holders>, prefix: &P, mut visit: impl FnMut(&'a Seniority)) {
    for (_, holders) in trie.cover(prefix) {
        holders.iter().for_each(&mut visit);
    }
    for (found, holders) in trie.children(prefix) {
        if found.prefix_len() != prefix.prefix_len() {
            holders.iter().for_each(&mut visit);
        }
    }
}

fn holders_mut<P: Prefix + Copy>(
    trie: &mut PrefixMap<P, Holders>,
    prefix: P,
    add: Option<Seniority>,
    remove: Option<(&str, &str)>,
) {
    let holders = trie.entry(prefix).or_default();
    if let Some((namespace, name)) = remove {
        holders.retain(|h| !h.is(namespace, name));
    }
    if let Some(holder) = add {
        holders.push(holder);
    }
    if holders.is_empty() {
        trie.remove(&prefix);
    }
}

/// All Networks: a trie per address family, and each Network's current entry by
/// namespace and name (to find it again on update and delete).
#[derive(Default)]
struct Table {
    v4: PrefixMap<(u32, u8), Holders>,
    v6: PrefixMap<(u128, u8), Holders>,
    entries: HashMap<Arc<str>, HashMap<Arc<str>, Entry>>,
    len: usize,
}

impl Table {
    fn visit<'a>(&'a self, subnet: &Subnet, visit: impl FnMut(&'a Seniority)) {
        match subnet.network() {
            IpAddr::V4(address) => visit_family(&self.v4, &(u32::from(address), subnet.prefix()), visit),
            IpAddr::V6(address) => visit_family(&self.v6, &(u128::from(address), subnet.prefix()), visit),
        }
    }

    fn place(&mut self, subnet: &Subnet, add: Option<Seniority>, remove: Option<(&str, &str)>) {
        match subnet.network() {
            IpAddr::V4(address) => holders_mut(&mut self.v4, (u32::from(address), subnet.prefix()), add, remove),
            IpAddr::V6(address) => holders_mut(&mut self.v6, (u128::from(address), subnet.prefix()), add, remove),
        }
    }

    fn entry(&self, namespace: &str, name: &str) -> Option<&Entry> {
        self.entries.get(namespace)?.get(name)
    }

    /// Replaces the entry of `namespace/name`; returns the previous one.
    fn set(&mut self, namespace: &str, name: &str, entry: Option<Entry>) -> Option<Entry> {
        let previous = self.entry(namespace, name).cloned();
        if previous == entry {
            return previous;
        }
        if let Some(old) = &previous {
            self.place(&old.subnet, None, Some((namespace, name)));
            if let Some(space) = self.entries.get_mut(namespace) {
                space.remove(name);
                if space.is_empty() {
                    self.entries.remove(namespace);
                }
            }
            self.len -= 1;
        }
        if let Some(new) = entry {
            // One allocation per namespace name, shared by its Networks' holders.
            let namespace: Arc<str> = match self.entries.get_key_value(namespace) {
                Some((key, _)) => key.clone(),
                None => Arc::from(namespace),
            };
            let name: Arc<str> = Arc::from(name);
            let holder = Seniority {
                created: new.created,
                namespace: namespace.clone(),
                name: name.clone(),
            };
            self.place(&new.subnet, Some(holder), None);
            self.entries.entry(namespace).or_default().insert(name, new);
            self.len += 1;
        }
        previous
    }

    fn apply(&mut self, network: &Network) -> Option<Change> {
        let namespace = network.metadata.namespace.as_deref()?;
        let name = network.metadata.name.as_deref()?;
        let entry = Entry::of(network);
        let previous = self.set(namespace, name, entry.clone());
        (previous != entry).then(|| Change::new(namespace, name, previous, entry))
    }

    fn remove(&mut self, network: &Network) -> Option<Change> {
        let namespace = network.metadata.namespace.as_deref()?;
        let name = network.metadata.name.as_deref()?;
        let previous = self.set(namespace, name, None)?;
        Some(Change::new(namespace, name, Some(previous), None))
    }

    /// The juniors of `who` (other than `who`) whose CIDR overlaps `subnet`.
    fn juniors_overlapping(&self, who: &Seniority, subnet: &Subnet, out: &mut HashSet<ObjectRef<Network>>) {
        self.visit(subnet, |holder| {
            if holder > who {
                out.insert(holder.object_ref());
            }
        });
    }
}

/// One Network's entry before and after an event.
struct Change {
    who: Seniority,
    before: Option<Entry>,
    after: Option<Entry>,
}

impl Change {
    fn new(namespace: &str, name: &str, before: Option<Entry>, after: Option<Entry>) -> Change {
        let created = after.as_ref().or(before.as_ref()).and_then(|e| e.created);
        Change {
            who: Seniority {
                created,
                namespace: Arc::from(namespace),
                name: Arc::from(name),
            },
            before,
            after,
        }
    }

    /// The Networks whose verdict this change can alter: juniors overlapping the old CIDR
    /// (looked up in the table as it was) or the new one (as it is now).
    fn affected(&self, old: &Table, new: &Table, out: &mut HashSet<ObjectRef<Network>>) {
        if let Some(before) = &self.before {
            old.juniors_overlapping(&self.who, &before.subnet, out);
        }
        if let Some(after) = &self.after {
            new.juniors_overlapping(&self.who, &after.subnet, out);
        }
    }
}

/// The senior Network an `Overlaps` condition names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    pub namespace: String,
    pub name: String,
    pub subnet: Subnet,
}

/// The overlap index of all Networks. Cheap to share (`Arc`); queries take a read lock.
#[derive(Default)]
pub struct OverlapIndex {
    state: RwLock<Relisting<Table>>,
}

impl OverlapIndex {
    pub fn new() -> OverlapIndex {
        OverlapIndex::default()
    }

    /// Applies one watcher event; returns the Networks whose overlap verdict it can change
    /// (never every Network: see the module docs).
    pub fn apply(&self, event: &Event<Network>) -> Vec<ObjectRef<Network>> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let mut affected = HashSet::new();
        match state.step(event) {
            Step::Apply(network, live) => {
                if let Some(change) = live.apply(network) {
                    // Other entries did not move: before and after share the table.
                    change.affected(live, live, &mut affected);
                }
            }
            Step::Delete(network, live) => {
                if let Some(change) = live.remove(network) {
                    change.affected(live, live, &mut affected);
                }
            }
            Step::Listed(network, fresh) => {
                fresh.apply(network);
            }
            Step::Swapped { previous, live } => {
                for change in differences(&previous, live) {
                    change.affected(&previous, live, &mut affected);
                }
            }
            Step::Nothing => {}
        }
        affected.into_iter().collect()
    }

    /// The senior-most Network, in any namespace, that `namespace/name` (created at
    /// `created`, holding `subnet`) overlaps among its seniors: the one its `Overlaps`
    /// condition names.
    pub fn senior_overlap(
        &self,
        namespace: &str,
        name: &str,
        created: Option<Timestamp>,
        subnet: &Subnet,
    ) -> Option<Overlap> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let table = state.live();
        let me = Seniority {
            created,
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        };
        let mut best: Option<&Seniority> = None;
        table.visit(subnet, |holder| {
            if *holder < me && best.is_none_or(|b| holder < b) {
                best = Some(holder);
            }
        });
        let best = best?;
        let entry = table.entry(&best.namespace, &best.name)?;
        Some(Overlap {
            namespace: best.namespace.to_string(),
            name: best.name.to_string(),
            subnet: entry.subnet,
        })
    }

    /// Networks in the index (valid specs), for the store metrics.
    pub fn len(&self) -> usize {
        self.state.read().unwrap_or_else(PoisonError::into_inner).live().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The entries that differ between two tables, as changes from `old` to `new`.
fn differences(old: &Table, new: &Table) -> Vec<Change> {
    let mut changes = Vec::new();
    for (namespace, space) in &new.entries {
        for (name, entry) in space {
            let before = old.entry(namespace, name);
            if before != Some(entry) {
                changes.push(Change::new(namespace, name, before.cloned(), Some(entry.clone())));
            }
        }
    }
    for (namespace, space) in &old.entries {
        for (name, entry) in space {
            if new.entry(namespace, name).is_none() {
                changes.push(Change::new(namespace, name, Some(entry.clone()), None));
            }
        }
    }
    changes
}

#[cfg(test)]
mod tests;
