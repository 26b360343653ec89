//! Which Networks of a namespace overlap which: the index the controller decides overlaps
//! with, kept current from the Network watch's events (on every replica: it is small).
//!
//! Two CIDRs overlap exactly when one contains the other, so a prefix trie per namespace
//! and address family answers "which Networks overlap this CIDR" with the covering
//! prefixes (its ancestors) plus its subtree: O(prefix length + k) for k overlapping
//! Networks, where a scan of the namespace was O(N) per reconcile.
//!
//! The verdict is the one `status::spec_problem` reports: a Network *overlaps* when another
//! Network of its namespace, not being deleted, with a valid spec and **senior** to it
//! (created earlier; same second: smaller name), has an overlapping CIDR. Seniority is
//! fixed at creation, so every replica and every restart decides a conflict the same way.
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

/// Order of creation: `creationTimestamp`, then name. The smaller one is senior and wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seniority {
    created: Option<Timestamp>,
    name: Arc<str>,
}

/// What the index keeps of one Network that takes part in overlaps.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    subnet: Subnet,
    created: Option<Timestamp>,
}

impl Entry {
    /// `None` for Networks that cannot overlap anything: being deleted, or an invalid spec.
    fn of(network: &Network) -> Option<Entry> {
        if network.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let (subnet, _) = subnet::validate(&network.spec.cidr, &network.spec.gateway).ok()?;
        Some(Entry {
            subnet,
            created: network.metadata.creation_timestamp.as_ref().map(|t| t.0),
        })
    }
}

/// Several Networks may hold the same CIDR: each prefix keeps its holders.
type Holders = Vec<Seniority>;

/// One namespace: a trie per address family and each Network's current entry (to find it
/// again on update and delete).
#[derive(Default)]
struct Namespace {
    v4: PrefixMap<(u32, u8), Holders>,
    v6: PrefixMap<(u128, u8), Holders>,
    entries: HashMap<Arc<str>, Entry>,
}

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
    remove: Option<&str>,
) {
    let holders = trie.entry(prefix).or_default();
    if let Some(name) = remove {
        holders.retain(|h| &*h.name != name);
    }
    if let Some(holder) = add {
        holders.push(holder);
    }
    if holders.is_empty() {
        trie.remove(&prefix);
    }
}

impl Namespace {
    fn visit<'a>(&'a self, subnet: &Subnet, visit: impl FnMut(&'a Seniority)) {
        match subnet.network() {
            IpAddr::V4(address) => visit_family(&self.v4, &(u32::from(address), subnet.prefix()), visit),
            IpAddr::V6(address) => visit_family(&self.v6, &(u128::from(address), subnet.prefix()), visit),
        }
    }

    fn place(&mut self, subnet: &Subnet, add: Option<Seniority>, remove: Option<&str>) {
        match subnet.network() {
            IpAddr::V4(address) => holders_mut(&mut self.v4, (u32::from(address), subnet.prefix()), add, remove),
            IpAddr::V6(address) => holders_mut(&mut self.v6, (u128::from(address), subnet.prefix()), add, remove),
        }
    }

    /// Replaces `name`'s entry; returns the previous one.
    fn set(&mut self, name: &str, entry: Option<Entry>) -> Option<Entry> {
        let previous = self.entries.get(name).cloned();
        if previous == entry {
            return previous;
        }
        if let Some(old) = &previous {
            self.place(&old.subnet, None, Some(name));
            self.entries.remove(name);
        }
        if let Some(new) = entry {
            let name: Arc<str> = Arc::from(name);
            let holder = Seniority {
                created: new.created,
                name: name.clone(),
            };
            self.place(&new.subnet, Some(holder), None);
            self.entries.insert(name, new);
        }
        previous
    }
}

/// All namespaces.
#[derive(Default)]
struct Table {
    namespaces: HashMap<String, Namespace>,
}

impl Table {
    fn entry(&self, namespace: &str, name: &str) -> Option<&Entry> {
        self.namespaces.get(namespace)?.entries.get(name)
    }

    fn set(&mut self, namespace: &str, name: &str, entry: Option<Entry>) -> Option<Entry> {
        if entry.is_none() && !self.namespaces.contains_key(namespace) {
            return None;
        }
        let space = self.namespaces.entry(namespace.to_string()).or_default();
        let previous = space.set(name, entry);
        if space.entries.is_empty() {
            self.namespaces.remove(namespace);
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
    fn juniors_overlapping(
        &self,
        namespace: &str,
        who: &Seniority,
        subnet: &Subnet,
        out: &mut HashSet<ObjectRef<Network>>,
    ) {
        if let Some(space) = self.namespaces.get(namespace) {
            space.visit(subnet, |holder| {
                if holder > who {
                    out.insert(ObjectRef::new(&holder.name).within(namespace));
                }
            });
        }
    }
}

/// One Network's entry before and after an event.
struct Change {
    namespace: String,
    who: Seniority,
    before: Option<Entry>,
    after: Option<Entry>,
}

impl Change {
    fn new(namespace: &str, name: &str, before: Option<Entry>, after: Option<Entry>) -> Change {
        let created = after.as_ref().or(before.as_ref()).and_then(|e| e.created);
        Change {
            namespace: namespace.to_string(),
            who: Seniority {
                created,
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
            old.juniors_overlapping(&self.namespace, &self.who, &before.subnet, out);
        }
        if let Some(after) = &self.after {
            new.juniors_overlapping(&self.namespace, &self.who, &after.subnet, out);
        }
    }
}

/// The overlap index of all Networks. Cheap to share (`Arc`); queries take a read lock.
#[derive(Default)]
pub struct CidrIndex {
    state: RwLock<Relisting<Table>>,
}

impl CidrIndex {
    pub fn new() -> CidrIndex {
        CidrIndex::default()
    }

    /// Applies one watcher event; returns the Networks whose overlap verdict it can change
    /// (never the whole namespace: see the module docs).
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

    /// The senior-most Network that `name` (in `namespace`, created at `created`, holding
    /// `subnet`) overlaps among its seniors, with its CIDR: the one its `Overlaps`
    /// condition names.
    pub fn senior_overlap(
        &self,
        namespace: &str,
        name: &str,
        created: Option<Timestamp>,
        subnet: &Subnet,
    ) -> Option<(String, Subnet)> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let space = state.live().namespaces.get(namespace)?;
        let me = Seniority {
            created,
            name: Arc::from(name),
        };
        let mut best: Option<&Seniority> = None;
        space.visit(subnet, |holder| {
            if *holder < me && best.is_none_or(|b| holder < b) {
                best = Some(holder);
            }
        });
        let best = best?;
        let entry = space.entries.get(&best.name)?;
        Some((best.name.to_string(), entry.subnet))
    }

    /// Networks in the index (valid, not being deleted), for the store metrics.
    pub fn len(&self) -> usize {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state.live().namespaces.values().map(|s| s.entries.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The entries that differ between two tables, as changes from `old` to `new`.
fn differences(old: &Table, new: &Table) -> Vec<Change> {
    let mut changes = Vec::new();
    for (namespace, space) in &new.namespaces {
        for (name, entry) in &space.entries {
            let before = old.entry(namespace, name);
            if before != Some(entry) {
                changes.push(Change::new(namespace, name, before.cloned(), Some(entry.clone())));
            }
        }
    }
    for (namespace, space) in &old.namespaces {
        for (name, entry) in &space.entries {
            if new.entry(namespace, name).is_none() {
                changes.push(Change::new(namespace, name, Some(entry.clone()), None));
            }
        }
    }
    changes
}

#[cfg(test)]
mod tests;
