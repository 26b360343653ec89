//! What a Network's status should say: the Ready condition from the spec check and the
//! backend's answer, the rest of the status computed from facts, and the patch that
//! writes it. Pure functions, tested with plain data.

use serde_json::Value;

use crate::network::crd::{IN_USE, Network, NetworkCondition, NetworkStatus, READY};
use crate::network::overlaps::OverlapIndex;
use crate::network::subnet;

/// Condition reasons (and Event reasons).
pub const REASON_READY: &str = "Ready";
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
pub const REASON_OVERLAPS: &str = "Overlaps";
pub const REASON_BACKEND_UNAVAILABLE: &str = "BackendUnavailable";
pub const REASON_BACKEND_CONFLICT: &str = "BackendConflict";
pub const REASON_CLEANUP: &str = "Cleanup";
/// Reason of the `InUse` condition of a Network being deleted while Pods use it.
pub const REASON_PODS_ATTACHED: &str = "PodsAttached";
/// Reason of the Event that names the Pods a deletion waits for.
pub const REASON_IN_USE: &str = "InUse";
/// How many Pods the `InUse` Event names before it says how many more there are.
pub const NAMED_USERS: usize = 10;

/// The outcome the Ready condition reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Readiness {
    pub fn ready(message: impl Into<String>) -> Readiness {
        Readiness {
            ready: true,
            reason: REASON_READY,
            message: message.into(),
        }
    }

    pub fn not_ready(reason: &'static str, message: impl Into<String>) -> Readiness {
        Readiness {
            ready: false,
            reason,
            message: message.into(),
        }
    }
}

/// A condition of `type_`, keeping the previous `lastTransitionTime` when its status did
/// not change.
fn condition(
    type_: &str,
    previous: Option<&NetworkCondition>,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &str,
) -> NetworkCondition {
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now.to_string(),
    };
    NetworkCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// The Ready condition for `readiness`, keeping the previous `lastTransitionTime` when
/// the condition's status (True/False) did not change.
pub fn ready_condition(
    previous: Option<&NetworkCondition>,
    readiness: &Readiness,
    generation: Option<i64>,
    now: &str,
) -> NetworkCondition {
    let status = if readiness.ready { "True" } else { "False" };
    condition(
        READY,
        previous,
        status,
        readiness.reason,
        readiness.message.clone(),
        generation,
        now,
    )
}

/// "1 Pod", "3 Pods".
fn pods(count: i64) -> String {
    if count == 1 {
        "1 Pod".to_string()
    } else {
        format!("{count} Pods")
    }
}

/// The `InUse` condition of a Network being deleted that `users` Pods still use.
pub fn in_use_condition(
    previous: Option<&NetworkCondition>,
    users: i64,
    generation: Option<i64>,
    now: &str,
) -> NetworkCondition {
    let message = format!(
        "being deleted: waits for {} that joined it and are not Succeeded or Failed; new Pods naming it are denied",
        pods(users)
    );
    condition(IN_USE, previous, "True", REASON_PODS_ATTACHED, message, generation, now)
}

/// The note of the Event a waiting deletion publishes: the first [`NAMED_USERS`] Pods by
/// name (`first`, sorted), then how many more of the `users` there are.
pub fn users_note(first: &[String], users: i64) -> String {
    let shown = first.iter().take(NAMED_USERS).map(String::as_str).collect::<Vec<_>>();
    let more = users - shown.len() as i64;
    let mut names = shown.join(", ");
    if more > 0 {
        names.push_str(&format!(" and {more} more"));
    }
    format!(
        "deletion waits for {} that joined this Network and are not Succeeded or Failed: {names}; \
         the Network and its backend state go when the last one is gone",
        pods(users)
    )
}

/// Puts `next` in place of the condition of its type (others kept, order kept).
fn put_condition(conditions: &mut Vec<NetworkCondition>, next: NetworkCondition) {
    match conditions.iter_mut().find(|c| c.type_ == next.type_) {
        Some(slot) => *slot = next,
        None => conditions.push(next),
    }
}

/// The status of a Network being deleted while `users` Pods use it: its `InUse` condition,
/// `attachedPods` recounted, the rest as it is (the backend state stays until the last one
/// is gone).
pub fn deleting_status(
    current: &NetworkStatus,
    users: i64,
    attached_pods: i64,
    generation: Option<i64>,
    now: &str,
) -> NetworkStatus {
    let previous = current.conditions.iter().find(|c| c.type_ == IN_USE);
    let mut next = current.clone();
    put_condition(&mut next.conditions, in_use_condition(previous, users, generation, now));
    next.attached_pods = attached_pods;
    next
}

/// The status the controller wants, from the current one: the Ready condition replaced in
/// place (other conditions kept), the rest recomputed.
pub fn desired_status(
    current: &NetworkStatus,
    readiness: &Readiness,
    generation: Option<i64>,
    attached_pods: i64,
    backend_ref: Option<String>,
    now: &str,
) -> NetworkStatus {
    let previous = current.conditions.iter().find(|c| c.type_ == READY);
    let mut conditions = current.conditions.clone();
    put_condition(&mut conditions, ready_condition(previous, readiness, generation, now));
    NetworkStatus {
        conditions,
        observed_generation: generation,
        attached_pods,
        backend_ref,
    }
}

/// The merge patch that sets `status` to exactly `desired`: absent optional fields are
/// sent as `null` so a stale value is removed, `conditions` is sent whole.
pub fn status_patch(desired: &NetworkStatus) -> Value {
    let mut status = serde_json::to_value(desired).unwrap_or_else(|_| Value::Object(Default::default()));
    if let Value::Object(map) = &mut status {
        for key in ["conditions", "observedGeneration", "backendRef"] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    serde_json::json!({ "status": status })
}

/// True when the Ready condition says something new (status, reason or message): the
/// moments an Event is published.
pub fn is_transition(previous: Option<&NetworkCondition>, next: &NetworkCondition) -> bool {
    previous.is_none_or(|p| p.status != next.status || p.reason != next.reason || p.message != next.message)
}

/// True when a condition appears or changes status or reason (a new count in its message
/// is no news): the `InUse` Event is published once per deletion that has to wait, not
/// once per Pod that leaves.
pub fn is_new(previous: Option<&NetworkCondition>, next: &NetworkCondition) -> bool {
    previous.is_none_or(|p| p.status != next.status || p.reason != next.reason)
}

/// What is wrong with `network`'s spec: an invalid cidr/gateway, or an overlap with a
/// *senior* Network in any namespace (created earlier; same second: smaller namespace, then
/// name), as [`OverlapIndex`] finds it. The senior stays Ready. Networks whose own spec is
/// invalid are not in the index, so they never count; one being deleted counts until it is
/// gone. `cidr_of` gives a Network's cidr as its spec writes it (the message quotes it).
pub fn spec_problem(
    network: &Network,
    overlaps: &OverlapIndex,
    cidr_of: impl Fn(&str, &str) -> Option<String>,
) -> Option<Readiness> {
    let subnet = match subnet::validate(&network.spec.cidr, &network.spec.gateway) {
        Ok((subnet, _)) => subnet,
        Err(error) => return Some(Readiness::not_ready(REASON_INVALID_SPEC, error.to_string())),
    };
    let namespace = network.metadata.namespace.as_deref().unwrap_or("");
    let name = network.metadata.name.as_deref().unwrap_or("");
    let created = network.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let senior = overlaps.senior_overlap(namespace, name, created, &subnet)?;
    let senior_cidr = cidr_of(&senior.namespace, &senior.name).unwrap_or_else(|| senior.subnet.to_string());
    Some(Readiness::not_ready(
        REASON_OVERLAPS,
        format!(
            "cidr {} overlaps cidr {senior_cidr} of Network {}/{}, which was created earlier; expected a cidr \
             that overlaps no other Network in any namespace (a node holds the bridges of all of them): \
             create a new Network with a free cidr, or delete {}/{}",
            network.spec.cidr, senior.namespace, senior.name, senior.namespace, senior.name,
        ),
    ))
}

/// RFC 3339, second precision, UTC.
pub fn now_rfc3339() -> String {
    use k8s_openapi::jiff::Timestamp;
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::crd::NetworkSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::sync::Arc;

    fn network(name: &str, cidr: &str, gateway: &str, created_second: i64) -> Arc<Network> {
        let mut n = Network::new(
            name,
            NetworkSpec {
                cidr: cidr.into(),
                gateway: gateway.into(),
            },
        );
        n.metadata.namespace = Some("default".into());
        n.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + created_second).unwrap(),
        ));
        Arc::new(n)
    }

    fn condition(status: &str, reason: &str, message: &str, time: &str) -> NetworkCondition {
        NetworkCondition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: time.into(),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn condition_keeps_transition_time_unless_status_flips() {
        let old = condition("False", REASON_INVALID_SPEC, "bad", "2020-01-01T00:00:00Z");
        let now = "2030-01-01T00:00:00Z";
        // Same status, other reason: time kept.
        let same = ready_condition(Some(&old), &Readiness::not_ready(REASON_OVERLAPS, "x"), Some(2), now);
        assert_eq!(same.last_transition_time, "2020-01-01T00:00:00Z");
        assert_eq!(same.reason, REASON_OVERLAPS);
        assert_eq!(same.observed_generation, Some(2));
        // Flip: time moves.
        let flipped = ready_condition(Some(&old), &Readiness::ready("ok"), Some(2), now);
        assert_eq!(flipped.last_transition_time, now);
        assert_eq!(flipped.status, "True");
        // First condition: now.
        assert_eq!(
            ready_condition(None, &Readiness::ready("ok"), None, now).last_transition_time,
            now
        );
    }

    #[test]
    fn status_diff_is_empty_when_nothing_changed() {
        let readiness = Readiness::ready("multus backend: NAD is in place");
        let first = desired_status(
            &NetworkStatus::default(),
            &readiness,
            Some(3),
            2,
            Some("ref".into()),
            "2020-01-01T00:00:00Z",
        );
        assert_ne!(first, NetworkStatus::default());
        // Recomputed later with the same facts: identical, so no patch.
        let again = desired_status(
            &first,
            &readiness,
            Some(3),
            2,
            Some("ref".into()),
            "2031-01-01T00:00:00Z",
        );
        assert_eq!(again, first);
        // Any fact that changes makes a diff.
        assert_ne!(
            desired_status(&first, &readiness, Some(4), 2, Some("ref".into()), "x"),
            first
        );
        assert_ne!(
            desired_status(&first, &readiness, Some(3), 3, Some("ref".into()), "x"),
            first
        );
        assert_ne!(desired_status(&first, &readiness, Some(3), 2, None, "x"), first);
    }

    #[test]
    fn other_conditions_are_kept_and_ready_replaced_in_place() {
        let mut other = condition("True", "Foo", "", "t");
        other.type_ = "Other".into();
        let current = NetworkStatus {
            conditions: vec![other.clone(), condition("True", REASON_READY, "ok", "t0")],
            ..NetworkStatus::default()
        };
        let next = desired_status(
            &current,
            &Readiness::not_ready(REASON_OVERLAPS, "o"),
            Some(1),
            0,
            None,
            "t1",
        );
        assert_eq!(next.conditions.len(), 2);
        assert_eq!(next.conditions[0], other);
        assert_eq!(next.conditions[1].reason, REASON_OVERLAPS);
        assert_eq!(next.conditions[1].last_transition_time, "t1");
    }

    #[test]
    fn status_patch_nulls_absent_fields() {
        let patch = status_patch(&NetworkStatus::default());
        assert_eq!(patch["status"]["backendRef"], Value::Null);
        assert!(patch["status"].as_object().unwrap().contains_key("backendRef"));
        assert!(patch["status"].as_object().unwrap().contains_key("observedGeneration"));
        assert_eq!(patch["status"]["attachedPods"], 0);
    }

    #[test]
    fn transitions_are_status_reason_or_message_changes() {
        let a = condition("True", REASON_READY, "ok", "t");
        assert!(is_transition(None, &a));
        assert!(!is_transition(Some(&a), &a));
        let mut b = a.clone();
        b.observed_generation = Some(9);
        b.last_transition_time = "other".into();
        assert!(!is_transition(Some(&a), &b), "generation/time alone is no Event");
        b.message = "new".into();
        assert!(is_transition(Some(&a), &b));
        assert!(is_transition(Some(&a), &condition("False", REASON_READY, "ok", "t")));
    }

    /// The verdict for `network` among `all`, as the controller computes it.
    fn problem(network: &Network, all: &[Arc<Network>]) -> Option<Readiness> {
        let index = OverlapIndex::new();
        for n in all {
            index.apply(&kube::runtime::watcher::Event::Apply((**n).clone()));
        }
        let cidr_of = |namespace: &str, name: &str| {
            all.iter()
                .find(|n| {
                    n.metadata.name.as_deref() == Some(name) && n.metadata.namespace.as_deref() == Some(namespace)
                })
                .map(|n| n.spec.cidr.clone())
        };
        spec_problem(network, &index, cidr_of)
    }

    #[test]
    fn invalid_spec_and_overlap_go_to_the_later_network() {
        let bad = network("bad", "10.0.0.0/24", "10.0.1.1", 0);
        let problem = problem(&bad, &[]).unwrap();
        assert_eq!(problem.reason, REASON_INVALID_SPEC);
        assert!(problem.message.contains("not inside"), "{}", problem.message);

        let a = network("a", "10.0.0.0/16", "10.0.0.1", 0);
        let b = network("b", "10.0.5.0/24", "10.0.5.1", 10);
        let all = [a.clone(), b.clone()];
        assert_eq!(self::problem(&a, &all), None, "the earlier one stays");
        let overlap = self::problem(&b, &all).unwrap();
        assert_eq!(overlap.reason, REASON_OVERLAPS);
        assert_eq!(
            overlap.message,
            "cidr 10.0.5.0/24 overlaps cidr 10.0.0.0/16 of Network default/a, which was created earlier; \
             expected a cidr that overlaps no other Network in any namespace (a node holds the bridges of all \
             of them): create a new Network with a free cidr, or delete default/a"
        );
        // Same creation time: the name decides.
        let a2 = network("a2", "10.0.5.0/24", "10.0.5.1", 0);
        assert_eq!(self::problem(&a, &[a.clone(), a2.clone()]), None);
        assert!(self::problem(&a2, &[a.clone(), a2.clone()]).is_some());
        // Another namespace counts (a node is shared), and so does a senior being deleted:
        // its Pods keep their interfaces until it is gone.
        let mut elsewhere = (*a).clone();
        elsewhere.metadata.namespace = Some("other".into());
        let named = self::problem(&b, &[Arc::new(elsewhere), b.clone()]).unwrap();
        assert!(named.message.contains("Network other/a"), "{}", named.message);
        let mut going = (*a).clone();
        going.metadata.deletion_timestamp = a.metadata.creation_timestamp.clone();
        assert_eq!(
            self::problem(&b, &[Arc::new(going), b.clone()]).unwrap().reason,
            REASON_OVERLAPS
        );
        // Same second: the namespace decides before the name.
        let mut first_ns = (*network("z", "10.0.5.0/24", "10.0.5.1", 0)).clone();
        first_ns.metadata.namespace = Some("aaa".into());
        let first_ns = Arc::new(first_ns);
        assert_eq!(self::problem(&first_ns, &[a.clone(), first_ns.clone()]), None);
        assert!(self::problem(&a, &[a.clone(), first_ns.clone()]).is_some());
        // Disjoint: fine.
        let c = network("c", "10.1.0.0/16", "10.1.0.1", 20);
        assert_eq!(self::problem(&c, &[a, b, c.clone()]), None);
    }

    #[test]
    fn a_deletion_that_waits_counts_and_names_its_pods() {
        let names: Vec<String> = (1..=12).map(|i| format!("pod-{i:02}")).collect();
        let note = users_note(&names, 12);
        assert!(note.starts_with("deletion waits for 12 Pods"), "{note}");
        assert!(
            note.contains("pod-01, pod-02") && note.contains("pod-10 and 2 more"),
            "{note}"
        );
        assert!(!note.contains("pod-11"), "{note}");
        assert!(
            users_note(&names[..1], 1)
                .contains("1 Pod that joined this Network and are not Succeeded or Failed: pod-01;")
        );
        assert!(!users_note(&names[..3], 3).contains("more"));

        let ready = condition("True", REASON_READY, "ok", "t0");
        let current = NetworkStatus {
            conditions: vec![ready.clone()],
            observed_generation: Some(1),
            attached_pods: 3,
            backend_ref: Some("ref".into()),
        };
        let waiting = deleting_status(&current, 3, 2, Some(1), "t1");
        assert_eq!(waiting.conditions[0], ready, "Ready stays as it was");
        let in_use = &waiting.conditions[1];
        assert_eq!(
            (in_use.type_.as_str(), in_use.status.as_str(), in_use.reason.as_str()),
            (IN_USE, "True", REASON_PODS_ATTACHED)
        );
        assert!(in_use.message.contains("waits for 3 Pods"), "{}", in_use.message);
        assert_eq!(
            (waiting.attached_pods, waiting.backend_ref.as_deref()),
            (2, Some("ref"))
        );
        assert!(is_new(None, in_use));
        // One Pod left: the message counts it, the time and the Event stay.
        let later = deleting_status(&waiting, 1, 0, Some(1), "t2");
        assert!(
            later.conditions[1].message.contains("waits for 1 Pod "),
            "{}",
            later.conditions[1].message
        );
        assert_eq!(later.conditions[1].last_transition_time, "t1");
        assert!(!is_new(Some(in_use), &later.conditions[1]));
    }

    #[test]
    fn now_is_second_precision_rfc3339() {
        let now = now_rfc3339();
        assert!(now.ends_with('Z') && !now.contains('.'), "{now}");
        assert_eq!(now.len(), "2024-01-01T00:00:00Z".len());
    }
}
