//! Overlap verdicts through the controller, on the index the cache keeps: chains, a deleted
//! winner promoting the next once it is gone, CIDR edits moving a Network in and out of
//! conflict. Each edit
//! requeues exactly the Networks whose verdict it can change (collected in the pending set).
//! `--network-backend none`: the status is the only write.

use futures::{FutureExt, StreamExt};

use super::*;

/// Reconciles `name` as the store holds it, answering its status patch and Events as the
/// API server would, then feeds the patched copy back as the watch would. Returns the
/// Event reasons published.
async fn settle(fx: &mut Fixture, server: &mut ApiServer, name: &str) -> Vec<String> {
    let network = fx
        .ctx
        .networks
        .get(&ObjectRef::new(name).within(NS))
        .expect("in the store");
    let reconcile = controller::reconcile(network.clone(), fx.ctx.clone());
    futures::pin_mut!(reconcile);
    let mut events = Vec::new();
    let mut stored = None;
    loop {
        tokio::select! {
            result = &mut reconcile => {
                result.expect("an overlap is a condition, not an error");
                break;
            }
            call = server.next() => match (call.method.clone(), call.path.as_str()) {
                (Method::PATCH, path) if path == format!("{}/status", mock_api::network(NS, name)) => {
                    let version: u64 = network.metadata.resource_version.as_deref().unwrap().parse().unwrap();
                    stored = Some(call.reply_merged(&*network, Some(&(version + 1).to_string())));
                }
                (Method::POST, path) if path == mock_api::events(NS) => {
                    events.push(call.body["reason"].as_str().unwrap().to_string());
                    call.echo(201);
                }
                (method, path) => panic!("unexpected request {method} {path}"),
            },
        }
    }
    if let Some(updated) = stored {
        fx.network_event(watcher::Event::Apply(updated));
    }
    events
}

fn verdict(fx: &Fixture, name: &str) -> (String, String, String) {
    let n = fx.ctx.networks.get(&ObjectRef::new(name).within(NS)).unwrap();
    let ready = n.ready_condition().expect("a Ready condition");
    (ready.status.clone(), ready.reason.clone(), ready.message.clone())
}

fn ready(fx: &Fixture, name: &str) -> bool {
    verdict(fx, name).0 == "True"
}

/// The `Overlaps` verdict of `name` names `senior` and its cidr.
fn overlaps(fx: &Fixture, name: &str, senior: &str, senior_cidr: &str) -> bool {
    let (status, reason, message) = verdict(fx, name);
    status == "False"
        && reason == "Overlaps"
        && message.contains(&format!("cidr {senior_cidr} of Network {NS}/{senior}"))
}

fn created(name: &str, cidr: &str, gateway: &str, second: i64) -> Network {
    let mut n = network(name, cidr, gateway);
    n.metadata.creation_timestamp = Some(at(second));
    n
}

fn edited(fx: &Fixture, name: &str, cidr: &str, gateway: &str) -> Network {
    let mut n = (*fx.ctx.networks.get(&ObjectRef::new(name).within(NS)).unwrap()).clone();
    n.spec.cidr = cidr.into();
    n.spec.gateway = gateway.into();
    n.metadata.generation = n.metadata.generation.map(|g| g + 1);
    let version: u64 = n.metadata.resource_version.as_deref().unwrap().parse().unwrap();
    n.metadata.resource_version = Some((version + 1).to_string());
    n
}

/// What the index asked to requeue since the last call, sorted.
fn requeued(requests: &mut (impl futures::Stream<Item = ObjectRef<Network>> + Unpin)) -> Vec<String> {
    let mut names = Vec::new();
    while let Some(Some(network)) = requests.next().now_or_never() {
        names.push(network.name);
    }
    names.sort();
    names
}

/// A ∩ B and B ∩ C but not A ∩ C: B yields to A, C yields to B (a senior counts even when
/// it is itself not Ready); D over all of them names the senior-most, A.
#[tokio::test]
async fn chains_name_the_senior_most_overlap() {
    let a = created("a", "10.0.0.0/24", "10.0.0.1", 0);
    let b = created("b", "10.0.0.0/16", "10.0.0.1", 60);
    let c = created("c", "10.0.128.0/24", "10.0.128.1", 120);
    let d = created("d", "10.0.0.0/8", "10.0.0.1", 180);
    let (mut fx, mut server) = scripted(no_backend, &[&a, &b, &c, &d], &[]);

    for name in ["a", "b", "c", "d"] {
        settle(&mut fx, &mut server, name).await;
    }
    assert!(ready(&fx, "a"), "{:?}", verdict(&fx, "a"));
    assert!(overlaps(&fx, "b", "a", "10.0.0.0/24"), "{:?}", verdict(&fx, "b"));
    assert!(overlaps(&fx, "c", "b", "10.0.0.0/16"), "{:?}", verdict(&fx, "c"));
    assert!(overlaps(&fx, "d", "a", "10.0.0.0/24"), "{:?}", verdict(&fx, "d"));

    drop(fx);
    server.assert_no_more_requests().await;
}

/// The winner is deleted: while it is being deleted it still holds its range (its Pods keep
/// their interfaces), nothing is requeued; once it is gone exactly its overlapping juniors
/// are requeued, the next senior-most wins, the others now name it.
#[tokio::test]
async fn deleting_the_winner_promotes_the_next() {
    let a = created("a", "10.1.0.0/16", "10.1.0.1", 0);
    let b = created("b", "10.1.0.0/24", "10.1.0.1", 60);
    let c = created("c", "10.1.0.0/25", "10.1.0.1", 120);
    let elsewhere = created("e", "10.9.0.0/16", "10.9.0.1", 30);
    let (mut fx, mut server) = scripted(no_backend, &[&a, &b, &c, &elsewhere], &[]);
    let mut requests = Box::pin(fx.ctx.indexes.pending.start());

    for name in ["a", "b", "c", "e"] {
        settle(&mut fx, &mut server, name).await;
    }
    assert!(overlaps(&fx, "b", "a", "10.1.0.0/16"));
    assert!(overlaps(&fx, "c", "a", "10.1.0.0/16"));
    assert_eq!(
        requeued(&mut requests),
        Vec::<String>::new(),
        "status writes move no CIDR"
    );

    let mut going = (*fx.ctx.networks.get(&ObjectRef::new("a").within(NS)).unwrap()).clone();
    going.metadata.deletion_timestamp = Some(at(600));
    fx.network_event(watcher::Event::Apply(going.clone()));
    assert_eq!(
        requeued(&mut requests),
        Vec::<String>::new(),
        "being deleted, it still holds its range"
    );
    assert!(
        settle(&mut fx, &mut server, "b").await.is_empty(),
        "b still yields to a"
    );
    assert!(overlaps(&fx, "b", "a", "10.1.0.0/16"));

    fx.network_event(watcher::Event::Delete(going));
    assert_eq!(requeued(&mut requests), ["b", "c"], "its juniors, not every Network");
    let events = settle(&mut fx, &mut server, "b").await;
    assert!(ready(&fx, "b"), "{:?}", verdict(&fx, "b"));
    assert_eq!(events, ["Ready"]);
    settle(&mut fx, &mut server, "c").await;
    assert!(overlaps(&fx, "c", "b", "10.1.0.0/24"), "{:?}", verdict(&fx, "c"));

    fx.ctx.indexes.pending.stop();
    drop(fx);
    server.assert_no_more_requests().await;
}

/// Editing a CIDR moves a Network into conflict and out again; editing the senior's CIDR
/// requeues the junior, whose message then quotes the new CIDR. The shipped CRD refuses
/// such edits (`cidr` and `gateway` are immutable); the index still follows one, as under a
/// CRD without that rule.
#[tokio::test]
async fn editing_a_cidr_moves_networks_in_and_out_of_conflict() {
    let a = created("a", "10.2.0.0/16", "10.2.0.1", 0);
    let b = created("b", "10.3.0.0/16", "10.3.0.1", 60);
    let (mut fx, mut server) = scripted(no_backend, &[&a, &b], &[]);
    let mut requests = Box::pin(fx.ctx.indexes.pending.start());
    settle(&mut fx, &mut server, "a").await;
    settle(&mut fx, &mut server, "b").await;
    assert!(ready(&fx, "a") && ready(&fx, "b"));

    // The junior moves into the senior's range (its own watch event reconciles it).
    fx.network_event(watcher::Event::Apply(edited(&fx, "b", "10.2.5.0/24", "10.2.5.1")));
    assert_eq!(requeued(&mut requests), Vec::<String>::new(), "no junior of b overlaps");
    assert_eq!(settle(&mut fx, &mut server, "b").await, ["Overlaps"]);
    assert!(overlaps(&fx, "b", "a", "10.2.0.0/16"));

    // The senior shrinks but still covers b: b's message follows.
    fx.network_event(watcher::Event::Apply(edited(&fx, "a", "10.2.0.0/20", "10.2.0.1")));
    assert_eq!(requeued(&mut requests), ["b"]);
    settle(&mut fx, &mut server, "a").await;
    assert_eq!(
        settle(&mut fx, &mut server, "b").await,
        ["Overlaps"],
        "new message, new Event"
    );
    assert!(overlaps(&fx, "b", "a", "10.2.0.0/20"), "{:?}", verdict(&fx, "b"));

    // The senior moves away: b is free.
    fx.network_event(watcher::Event::Apply(edited(&fx, "a", "10.4.0.0/16", "10.4.0.1")));
    assert_eq!(requeued(&mut requests), ["b"]);
    settle(&mut fx, &mut server, "a").await;
    assert_eq!(settle(&mut fx, &mut server, "b").await, ["Ready"]);
    assert!(ready(&fx, "b"));

    fx.ctx.indexes.pending.stop();
    drop(fx);
    server.assert_no_more_requests().await;
}
