//! The index against a brute-force pairwise check: after any sequence of watcher events
//! its verdicts are the scan's, and every Network whose verdict an event changed is among
//! the Networks that event returned for requeue.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::*;
use crate::network::crd::NetworkSpec;

const NAMESPACES: [&str; 2] = ["a", "b"];
/// CIDRs that nest, touch and differ in family; the last gateway is outside its CIDR.
const SPECS: [(&str, &str); 12] = [
    ("10.0.0.0/8", "10.0.0.1"),
    ("10.0.0.0/16", "10.0.0.1"),
    ("10.0.0.0/24", "10.0.0.1"),
    ("10.0.1.0/24", "10.0.1.1"),
    ("10.0.0.0/25", "10.0.0.1"),
    ("10.0.0.128/25", "10.0.0.129"),
    ("10.1.0.0/16", "10.1.0.1"),
    ("0.0.0.0/0", "10.9.9.9"),
    ("fd00::/8", "fd00::1"),
    ("fd00:1::/32", "fd00:1::1"),
    ("fd00:1::/32", "fd00:1::2"),
    ("10.0.0.0/24", "10.0.1.1"),
];

fn network(namespace: &str, name: &str, spec: usize, created: i64, deleting: bool) -> Network {
    let (cidr, gateway) = SPECS[spec];
    let mut n = Network::new(
        name,
        NetworkSpec {
            cidr: cidr.into(),
            gateway: gateway.into(),
        },
    );
    n.metadata.namespace = Some(namespace.into());
    n.metadata.creation_timestamp = Some(Time(Timestamp::from_second(1_700_000_000 + created).unwrap()));
    if deleting {
        n.metadata.deletion_timestamp = n.metadata.creation_timestamp.clone();
    }
    n
}

type Key = (String, String);
type Verdict = Option<(String, String)>;

/// The Networks that get an overlap verdict: not being deleted (a deleting Network's
/// reconcile cleans up instead; it still counts as a senior until it is gone).
fn judged(all: &BTreeMap<Key, Network>) -> impl Iterator<Item = (&Key, &Network)> {
    all.iter().filter(|(_, n)| n.metadata.deletion_timestamp.is_none())
}

/// The O(N) rule, per Network: the senior-most overlapping senior in any namespace (being
/// deleted or not), with its CIDR.
fn brute_force(all: &BTreeMap<Key, Network>) -> BTreeMap<Key, Verdict> {
    let order = |n: &Network| {
        (
            n.metadata.creation_timestamp.clone(),
            n.metadata.namespace.clone(),
            n.metadata.name.clone(),
        )
    };
    let mut verdicts = BTreeMap::new();
    for (key, n) in judged(all) {
        let Ok((mine, _)) = subnet::validate(&n.spec.cidr, &n.spec.gateway) else {
            continue;
        };
        let winner = all
            .iter()
            .filter(|(other, _)| *other != key)
            .filter(|(_, o)| order(o) < order(n))
            .filter(|(_, o)| subnet::validate(&o.spec.cidr, &o.spec.gateway).is_ok_and(|(s, _)| s.overlaps(&mine)))
            .min_by_key(|(_, o)| order(o))
            .map(|((ns, name), o)| (format!("{ns}/{name}"), o.spec.cidr.clone()));
        verdicts.insert(key.clone(), winner);
    }
    verdicts
}

fn indexed(index: &OverlapIndex, all: &BTreeMap<Key, Network>) -> BTreeMap<Key, Verdict> {
    let mut verdicts = BTreeMap::new();
    for (key, n) in judged(all) {
        let Ok((mine, _)) = subnet::validate(&n.spec.cidr, &n.spec.gateway) else {
            continue;
        };
        let created = n.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let winner = index.senior_overlap(&key.0, &key.1, created, &mine).map(|senior| {
            let theirs = &all[&(senior.namespace.clone(), senior.name.clone())];
            assert_eq!(subnet::Subnet::parse(&theirs.spec.cidr).unwrap(), senior.subnet);
            (
                format!("{}/{}", senior.namespace, senior.name),
                theirs.spec.cidr.clone(),
            )
        });
        verdicts.insert(key.clone(), winner);
    }
    verdicts
}

#[derive(Debug, Clone)]
enum Op {
    Apply {
        namespace: usize,
        name: usize,
        spec: usize,
        created: i64,
        deleting: bool,
    },
    Delete {
        namespace: usize,
        name: usize,
    },
    Relist,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..2usize, 0..6usize, 0..SPECS.len(), 0..3i64, prop::bool::weighted(0.15)).prop_map(
            |(namespace, name, spec, created, deleting)| Op::Apply { namespace, name, spec, created, deleting }
        ),
        2 => (0..2usize, 0..6usize).prop_map(|(namespace, name)| Op::Delete { namespace, name }),
        1 => Just(Op::Relist),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn verdicts_and_requeues_match_a_pairwise_scan(ops in prop::collection::vec(op(), 1..40)) {
        let index = OverlapIndex::new();
        let mut all: BTreeMap<Key, Network> = BTreeMap::new();
        for op in ops {
            let before = brute_force(&all);
            let (changed, affected) = match op {
                Op::Apply { namespace, name, spec, created, deleting } => {
                    let key = (NAMESPACES[namespace].to_string(), format!("n{name}"));
                    // creationTimestamp is immutable: an update keeps the original one.
                    let created = all
                        .get(&key)
                        .and_then(|n| n.metadata.creation_timestamp.as_ref())
                        .map_or(created, |t| t.0.as_second() - 1_700_000_000);
                    let n = network(&key.0, &key.1, spec, created, deleting);
                    all.insert(key.clone(), n.clone());
                    (Some(key), index.apply(&Event::Apply(n)))
                }
                Op::Delete { namespace, name } => {
                    let key = (NAMESPACES[namespace].to_string(), format!("n{name}"));
                    match all.remove(&key) {
                        Some(n) => (Some(key), index.apply(&Event::Delete(n))),
                        None => (None, Vec::new()),
                    }
                }
                Op::Relist => {
                    let mut affected = index.apply(&Event::Init);
                    for n in all.values() {
                        affected.extend(index.apply(&Event::InitApply(n.clone())));
                    }
                    affected.extend(index.apply(&Event::InitDone));
                    (None, affected)
                }
            };
            let after = brute_force(&all);
            prop_assert_eq!(&indexed(&index, &all), &after);
            let affected: HashSet<Key> = affected
                .into_iter()
                .map(|r| (r.namespace.unwrap_or_default(), r.name))
                .collect();
            for (key, verdict) in &after {
                let moved = before.get(key).is_some_and(|old| old != verdict);
                if moved && Some(key) != changed.as_ref() {
                    prop_assert!(affected.contains(key), "{key:?} went from {:?} to {verdict:?} but was not requeued", before[key]);
                }
            }
        }
    }
}

#[test]
fn same_cidr_twice_and_both_families() {
    let index = OverlapIndex::new();
    let a = network("a", "x", 2, 0, false);
    let b = network("a", "y", 2, 1, false);
    let v6 = network("a", "z", 8, 2, false);
    assert!(index.apply(&Event::Apply(a.clone())).is_empty());
    assert!(
        index.apply(&Event::Apply(b.clone())).is_empty(),
        "the junior's arrival changes no senior"
    );
    assert!(index.apply(&Event::Apply(v6)).is_empty(), "IPv6 never overlaps IPv4");
    let (subnet, _) = subnet::validate("10.0.0.0/24", "10.0.0.1").unwrap();
    let created = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let x = Overlap {
        namespace: "a".into(),
        name: "x".into(),
        subnet,
    };
    assert_eq!(index.senior_overlap("a", "y", created, &subnet), Some(x.clone()));
    assert_eq!(
        index.senior_overlap("b", "y", created, &subnet),
        Some(x),
        "a senior in another namespace counts: the node is shared"
    );
    // Being deleted, the senior still holds its CIDR: nothing moves until it is gone.
    let mut going = a.clone();
    going.metadata.deletion_timestamp = going.metadata.creation_timestamp.clone();
    assert!(index.apply(&Event::Apply(going)).is_empty());
    assert!(index.senior_overlap("a", "y", created, &subnet).is_some());
    // The senior goes: its junior is requeued and then wins nothing.
    assert_eq!(index.apply(&Event::Delete(a)), vec![ObjectRef::new("y").within("a")]);
    assert_eq!(index.senior_overlap("a", "y", created, &subnet), None);
    assert_eq!(index.len(), 2);
}
