//! Tier `network`: Networks that Pods really join, on a node where every Pod goes through
//! Multus (`MULTUS=on node.sh`, or `make e2e E2E_MULTUS=1` on kind).
//!
//! 1. The deployed controller uses the Multus backend: without the NetworkAttachmentDefinition
//!    CRD, Network `blue` reports `BackendUnavailable` (and the injector's Pods count it under
//!    `reconcile_errors_total{reason="backend_unavailable"}`); the tier then installs the CRD
//!    (removed at the end) and `blue` turns Ready.
//! 2. The network itself: two Pods join `blue` (198.18.64.0/24), one joins `red`
//!    (198.18.65.0/24), one joins nothing. Each joined Pod runs with `net1` at an address in
//!    its Network's CIDR, read inside the Pod (`ip addr`) and in Multus's
//!    `k8s.v1.cni.cncf.io/network-status`; it reaches its gateway (`ping`); the two `blue`
//!    Pods reach each other (`ping`, and a TCP reply through `nc`); the `red` Pod and the
//!    Pod that joined none reach neither (checked where Pods have no default route, as on
//!    `node.sh`: where they have one, the node may route between its bridges). The sidecar has `NETWORK_CIDR`/`NETWORK_GATEWAY`;
//!    the Networks count their attached Pods.
//! 3. Overlaps are cluster-wide: in a second namespace, `blue` with the same CIDR (another
//!    gateway) and `wide` (198.18.64.0/23) are `Overlaps` naming the first `blue`, get no
//!    NAD, and a Pod naming them is denied.
//! 4. Protection: deleting the first `blue` leaves it Terminating while its Pods run, with
//!    an `InUse` condition counting them and an Event naming them; a new Pod naming it is
//!    denied as being deleted; once its Pods are gone, its NAD and the Network go, the second
//!    `blue` turns Ready (`wide` now names `red`, the senior-most left), and a Pod joining it
//!    on the same node, where the first one's bridge stays, reaches its own gateway.
//!
//! Throughout, the promise the overlap rule exists for is checked from inside every Pod:
//! never a Running Pod that cannot reach its own Network's gateway while its Network says
//! Ready.
//!
//! Every CIDR here lies in 198.18.64.0/18: a node with this project's `node.sh` refuses any
//! other, and nothing of ours puts a private-range address on an interface.

use envoy_injector::network::backend::nad_resource;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use serde_json::Value;

use crate::common::crd::{self, NAD_CRD};
use crate::common::metrics::metric_sum;
use crate::common::process::Admin;
use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "network",
    run: |suite| Box::pin(run(suite)),
};

const MULTUS: &str = "k8s.v1.cni.cncf.io/networks";
const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
const BLUE: (&str, &str, &str) = ("blue", "198.18.64.0/24", "198.18.64.1");
const RED: (&str, &str, &str) = ("red", "198.18.65.0/24", "198.18.65.1");
/// `blue` again, in the second namespace, on the same range with another gateway: once the
/// first is gone, its Pods must reach this gateway on the bridge the first left behind.
const BLUE_B: (&str, &str, &str) = ("blue", "198.18.64.0/24", "198.18.64.254");
/// Over `blue` and `red` both: overlaps `blue` whatever its namespace.
const WIDE: (&str, &str, &str) = ("wide", "198.18.64.0/23", "198.18.64.1");
/// The port each app listens on with `nc`, answering [`REPLY`] and its Pod's name.
const PORT: &str = "7000";
const REPLY: &str = "reply-from";
/// The admin listener's port in `manifests/deployment.yaml`.
const ADMIN_PORT: u16 = 9090;

async fn run(suite: &Suite) -> TierResult {
    let (installation, images) = installation(suite).await?;
    let scope = Scope::new(suite.settings.mode);
    let first = TestNs::create(&suite.client, &scope, "network", &[NAMESPACE_OPT_IN]).await;
    let had_crd = crd::installed(&suite.client, NAD_CRD)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // 1. No NAD CRD: BackendUnavailable, then the CRD, then Ready.
    first.create_network(BLUE.0, BLUE.1, BLUE.2).await;
    if had_crd {
        skipped(
            "pods tier network's BackendUnavailable step",
            &format!("CRD {NAD_CRD} was installed before the tier started: run it on a cluster without it"),
        );
    } else {
        backend_unavailable_first(suite, &installation, &first).await;
    }
    first.create_network(RED.0, RED.1, RED.2).await;
    for (name, ..) in [BLUE, RED] {
        first.network_ready(name, RUN_PATIENCE).await;
    }
    step!("Networks {} ({}) and {} ({}) Ready", BLUE.0, BLUE.1, RED.0, RED.1);

    // 2. The network itself.
    let started = std::time::Instant::now();
    let blue_1 = Member::start(&first, "blue-1", Some(BLUE), None, &images).await;
    let node = blue_1.node.clone();
    let blue_2 = Member::start(&first, "blue-2", Some(BLUE), Some(&node), &images).await;
    let red_1 = Member::start(&first, "red-1", Some(RED), Some(&node), &images).await;
    let alone = Member::start(&first, "alone", None, Some(&node), &images).await;
    step!(
        "4 Pods running on node {node} in {:.1} s: blue-1 {}, blue-2 {}, red-1 {}, alone (no Network)",
        started.elapsed().as_secs_f64(),
        blue_1.address(),
        blue_2.address(),
        red_1.address()
    );
    sidecar_env(&first, &blue_1).await;
    for member in [&blue_1, &blue_2, &red_1] {
        member.reaches_its_gateway().await;
    }
    step!("blue-1, blue-2 and red-1 each reach their gateway ({} / {}) over net1", BLUE.2, RED.2);
    blue_1.reaches(&blue_2).await;
    blue_2.reaches(&blue_1).await;
    step!("blue-1 and blue-2 reach each other over net1 (ping, and a TCP reply through nc on port {PORT})");
    if let Some(route) = alone.default_route().await {
        // Then the node routes between its bridges, and only a firewall or a NetworkPolicy
        // keeps Networks apart: not a property of the bridge backend (docs/networks.md).
        skipped(
            "pods tier network's isolation step",
            &format!(
                "expected Pods without a default route, found {route}: a Pod of another Network, or of none, may \
                 reach a Network's Pods through the node, so isolation is not the bridge's to prove here"
            ),
        );
    } else {
        for outsider in [&red_1, &alone] {
            outsider.cannot_reach(&blue_1).await;
            outsider.cannot_reach(&blue_2).await;
        }
        step!("red-1 (Network {}) and alone (no Network) reach neither blue Pod", RED.0);
    }
    first.attached_pods(BLUE.0, 2).await;
    first.attached_pods(RED.0, 1).await;
    step!("status.attachedPods: {} 2, {} 1", BLUE.0, RED.0);
    every_ready_network_reaches_its_gateway(&[&first], "after the Pods joined").await;

    // 3. The same CIDR, and a wider one, in another namespace.
    let second = TestNs::create(&suite.client, &scope, "network-b", &[NAMESPACE_OPT_IN]).await;
    for (name, cidr, gateway) in [BLUE_B, WIDE] {
        second.create_network(name, cidr, gateway).await;
    }
    let senior = format!("{}/{}", first.name, BLUE.0);
    for (name, ..) in [BLUE, WIDE] {
        let message = overlaps(&second, name, &senior).await;
        step!("{}/{name}: Ready=False Overlaps: {message}", second.name);
        // The verdict came with the status write; no NAD was made before it, nor since.
        assert!(
            !nad_exists(&second, name).await,
            "expected no NetworkAttachmentDefinition {}/{name} for an overlapping Network",
            second.name
        );
        let denied = denied(&second, &format!("{name}-joiner"), name, &images, "is not Ready").await;
        step!("a Pod naming {}/{name} is denied: {denied}", second.name);
    }
    every_ready_network_reaches_its_gateway(&[&first, &second], "with the overlapping Networks there").await;

    // 4. Protection, then promotion.
    first
        .networks
        .delete(BLUE.0, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("expected to delete Network {}, found: {}", BLUE.0, api_error(&e)));
    let waiting = in_use(&first, BLUE.0, 2).await;
    step!("{senior} deleted: Terminating, InUse: {waiting}");
    let named = in_use_event(&first, BLUE.0, &["blue-1", "blue-2"]).await;
    step!("Event InUse: {named}");
    assert!(
        nad_exists(&first, BLUE.0).await,
        "expected NAD {}/{} in place while Pods use the Network",
        first.name,
        BLUE.0
    );
    let denied = denied(&first, "blue-late", BLUE.0, &images, "is being deleted").await;
    step!("a new Pod naming {senior} is denied: {denied}");
    every_ready_network_reaches_its_gateway(&[&first, &second], "while the deletion waits").await;
    for member in [&blue_1, &blue_2] {
        member.delete(&first).await;
    }
    gone(&first, BLUE.0).await;
    let promoted = second.network_ready(BLUE.0, RUN_PATIENCE).await;
    step!(
        "blue-1 and blue-2 deleted: {senior} and its NAD gone; {}/{} Ready (generation {:?})",
        second.name,
        BLUE.0,
        promoted.metadata.generation
    );
    // `wide` covers `red` too, created before anything of the second namespace.
    let message = overlaps(&second, WIDE.0, &format!("{}/{}", first.name, RED.0)).await;
    step!("{}/{}: still Overlaps, now naming the senior-most left, {}/{}: {message}", second.name, WIDE.0, first.name, RED.0);
    let successor = Member::start(&second, "blue-b", Some(BLUE_B), Some(&node), &images).await;
    successor.reaches_its_gateway().await;
    second.attached_pods(BLUE_B.0, 1).await;
    step!(
        "blue-b joined {}/{} on node {node}: {}, reaches its gateway {} on the bridge the gone {senior} left there",
        second.name,
        BLUE_B.0,
        successor.address(),
        BLUE_B.2
    );
    let checked = every_ready_network_reaches_its_gateway(&[&first, &second], "after the promotion").await;
    Ok(format!(
        "net1 in the CIDR, gateway and peer reachable, other Network and none isolated; overlap across namespaces \
         held off until the in-use Network was gone, then promoted ({checked} Pods checked at the end)"
    ))
}

/// Step 1: Network `blue` reports `BackendUnavailable`, the injector's Pods count it, and
/// the CRD is installed.
async fn backend_unavailable_first(suite: &Suite, installation: &Installation, ns: &TestNs) {
    let reason = wait_for(
        "the Network to report BackendUnavailable without the NAD CRD",
        PATIENCE,
        async || {
            let obj = ns.network(BLUE.0).await?;
            match ready_condition(&obj) {
                Some(c) if c["status"] == "False" && c["reason"] == "BackendUnavailable" => Ok(c["message"].to_string()),
                _ => Err(network_summary(&obj)),
            }
        },
    )
    .await;
    step!("Network {} without the NAD CRD: Ready=False, BackendUnavailable: {reason}", BLUE.0);
    let errors = wait_for(
        "the injector to count the reconcile error under reason backend_unavailable",
        PATIENCE,
        async || {
            let errors = reconcile_errors(installation, "backend_unavailable").await?;
            if errors >= 1.0 { Ok(errors) } else { Err(format!("{errors} counted")) }
        },
    )
    .await;
    step!("envoy_injector_reconcile_errors_total{{reason=\"backend_unavailable\"}} {errors} across the injector's Pods");
    suite.install_nad_crd().await;
}

/// A running Pod of the tier: its name, namespace, node, and (when it joined a Network) the
/// Network and the address of its `net1`.
struct Member {
    name: String,
    namespace: String,
    node: String,
    network: Option<(&'static str, &'static str, &'static str)>,
    address: Option<String>,
}

/// The app: answers each TCP connection on [`PORT`] with a line naming the Pod, and exits
/// at once on SIGTERM (`wait` returns when a trapped signal arrives).
fn listener_command() -> Vec<String> {
    let script = format!(
        "trap 'exit 0' TERM; while true; do echo \"{REPLY} $HOSTNAME\" | nc -l -p {PORT} & wait $!; done"
    );
    ["sh", "-c", &script].iter().map(|s| s.to_string()).collect()
}

impl Member {
    /// Creates Pod `name` (joining `network`, on `node` when given) and waits until it runs
    /// with its sidecar, and (when it joined) until `net1` has its address, in the CIDR both
    /// inside the Pod and in Multus's network-status.
    async fn start(
        ns: &TestNs,
        name: &str,
        network: Option<(&'static str, &'static str, &'static str)>,
        node: Option<&str>,
        images: &Images,
    ) -> Member {
        let annotations: Vec<(&str, &str)> = network.iter().map(|(net, ..)| (NETWORK, *net)).collect();
        let mut pod = app_pod(name, &annotations, images);
        let spec = pod.spec.as_mut().expect("the builder makes a Pod spec");
        spec.containers[0].command = Some(listener_command());
        // One node: a Network is one L2 segment per node, so Pods that must reach each
        // other share one (the node of the first, on a cluster of several).
        spec.node_name = node.map(str::to_string);
        let stored = ns.create_stored(&pod).await;
        if let Some((net, ..)) = network {
            let multus = annotation(&stored, MULTUS).unwrap_or_default();
            assert!(
                multus.split(',').any(|n| n.trim() == net),
                "expected the Multus annotation naming {net} on Pod {name}, found {}",
                describe_pod(&stored)
            );
        }
        let running = wait_for(&format!("Pod {name} to run with its sidecar"), RUN_PATIENCE, async || {
            let p = ns.pods.get(name).await.map_err(|e| api_error(&e))?;
            running(&p, &["app", SIDECAR]).map(|()| p)
        })
        .await;
        let node = running
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("a running Pod has a node");
        let mut member = Member {
            name: name.to_string(),
            namespace: ns.name.clone(),
            node,
            network,
            address: None,
        };
        if let Some((net, cidr, _)) = network {
            let inside = member.net1_address().await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                ip_in_cidr(&inside, cidr),
                Some(true),
                "expected net1 of Pod {name} in {cidr}, found {inside}"
            );
            let reported = wait_for(
                &format!("Multus to report {net} of Pod {name} in {NETWORK_STATUS}"),
                PATIENCE,
                async || {
                    let p = ns.pods.get(name).await.map_err(|e| api_error(&e))?;
                    let status = annotation(&p, NETWORK_STATUS)
                        .ok_or_else(|| format!("no {NETWORK_STATUS} annotation: {}", describe_pod(&p)))?;
                    attachment_ips(status, &ns.name, net)
                },
            )
            .await;
            let ip = inside.split('/').next().unwrap_or_default().to_string();
            assert!(
                reported.iter().any(|r| r.split('/').next() == Some(ip.as_str())),
                "expected {NETWORK_STATUS} of Pod {name} to report net1's address {ip}, found {reported:?}"
            );
            member.address = Some(ip);
        }
        member
    }

    /// net1's address as `ip addr` shows it inside the Pod (`a.b.c.d/prefix`).
    async fn net1_address(&self) -> Result<String, String> {
        let out = exec(&self.namespace, &self.name, "app", &["ip", "-4", "addr", "show", "dev", "net1"]).await;
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .skip_while(|word| *word != "inet")
            .nth(1)
            .map(str::to_string)
            .filter(|_| out.status.success())
            .ok_or_else(|| format!("expected net1 with an IPv4 address in Pod {}, found {}", self.name, describe_output(&out)))
    }

    fn address(&self) -> String {
        self.address.clone().unwrap_or_else(|| "no net1".to_string())
    }

    /// `ping -c 1` from inside the Pod.
    async fn ping(&self, ip: &str) -> std::process::Output {
        exec(&self.namespace, &self.name, "app", &["ping", "-c", "1", "-W", "2", ip]).await
    }

    async fn reaches_its_gateway(&self) {
        let (_, _, gateway) = self.network.expect("a member of a Network");
        let out = self.ping(gateway).await;
        assert!(
            out.status.success(),
            "expected Pod {} to reach its gateway {gateway} over net1, found {}",
            self.name,
            describe_output(&out)
        );
    }

    /// `ping` and a TCP reply from `peer`'s listener.
    async fn reaches(&self, peer: &Member) {
        let ip = peer.address.as_deref().expect("a peer on a Network");
        let ping = self.ping(ip).await;
        assert!(
            ping.status.success(),
            "expected Pod {} to reach {} at {ip}, found {}",
            self.name,
            peer.name,
            describe_output(&ping)
        );
        let reply = wait_for(&format!("a TCP reply from {} to {}", peer.name, self.name), PATIENCE, async || {
            let out = self.connect(ip).await;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if text.contains(&format!("{REPLY} {}", peer.name)) { Ok(text) } else { Err(describe_output(&out)) }
        })
        .await;
        assert!(reply.contains(&peer.name));
    }

    /// `nc` to `ip`:[`PORT`] from inside the Pod, with a 2 s bound.
    async fn connect(&self, ip: &str) -> std::process::Output {
        exec(&self.namespace, &self.name, "app", &["nc", "-w", "2", ip, PORT]).await
    }

    /// Neither `ping` nor a TCP connection gets through to `peer`.
    async fn cannot_reach(&self, peer: &Member) {
        let ip = peer.address.as_deref().expect("a peer on a Network");
        let ping = self.ping(ip).await;
        let tcp = self.connect(ip).await;
        let replied = String::from_utf8_lossy(&tcp.stdout).contains(REPLY);
        assert!(
            !ping.status.success() && !replied,
            "expected Pod {} not to reach {} at {ip}, found ping {} and nc {}",
            self.name,
            peer.name,
            describe_output(&ping),
            describe_output(&tcp)
        );
    }

    /// The Pod's default route, if it has one (`ip route` inside it).
    async fn default_route(&self) -> Option<String> {
        let out = exec(&self.namespace, &self.name, "app", &["ip", "route"]).await;
        assert!(out.status.success(), "expected `ip route` in Pod {}, found {}", self.name, describe_output(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|line| line.starts_with("default"))
            .map(|line| line.trim().to_string())
    }

    /// Deletes the Pod and waits until it is gone.
    async fn delete(&self, ns: &TestNs) {
        ns.pods
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("expected to delete Pod {}, found: {}", self.name, api_error(&e)));
        wait_for(&format!("Pod {} to be gone", self.name), RUN_PATIENCE, async || {
            match ns.pods.get_opt(&self.name).await {
                Ok(None) => Ok(()),
                Ok(Some(p)) => Err(describe_pod(&p)),
                Err(e) => Err(api_error(&e)),
            }
        })
        .await;
    }
}

/// The sidecar of a joined Pod has the Network's CIDR and gateway.
async fn sidecar_env(ns: &TestNs, member: &Member) {
    let (_, cidr, gateway) = member.network.expect("a member of a Network");
    let env = exec(&ns.name, &member.name, SIDECAR, &["env"]).await;
    let text = String::from_utf8_lossy(&env.stdout);
    let (cidr, gateway) = (format!("NETWORK_CIDR={cidr}"), format!("NETWORK_GATEWAY={gateway}"));
    assert!(
        env.status.success() && text.lines().any(|l| l == cidr) && text.lines().any(|l| l == gateway),
        "expected {cidr} and {gateway} in the environment of the running sidecar of {}, found {}",
        member.name,
        describe_output(&env)
    );
    step!("`kubectl exec {} -c {SIDECAR} -- env` shows {cidr}, {gateway}", member.name);
}

/// The promise of the overlap rule, from inside: every Running Pod of `spaces` that joined
/// a Network which says Ready reaches that Network's gateway. Returns how many were checked.
async fn every_ready_network_reaches_its_gateway(spaces: &[&TestNs], when: &str) -> usize {
    let mut checked = Vec::new();
    for ns in spaces {
        let pods = ns
            .pods
            .list(&ListParams::default().labels(NETWORK))
            .await
            .unwrap_or_else(|e| panic!("expected to list the joined Pods of {}, found: {}", ns.name, api_error(&e)))
            .items;
        for pod in pods.iter().filter(|p| is_running(p)) {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let Some(network) = label(pod, NETWORK) else { continue };
            let Ok(obj) = ns.network(network).await else { continue };
            if !ready_condition(&obj).is_some_and(|c| c["status"] == "True") {
                continue;
            }
            let gateway = obj.data["spec"]["gateway"].as_str().unwrap_or_default().to_string();
            let out = exec(&ns.name, &name, "app", &["ping", "-c", "1", "-W", "2", &gateway]).await;
            assert!(
                out.status.success(),
                "{when}: Pod {}/{name} is Running and its Network {network} says Ready, yet it cannot reach the \
                 gateway {gateway}: {}; {}",
                ns.name,
                describe_output(&out),
                network_summary(&obj)
            );
            checked.push(format!("{}/{name}", ns.name));
        }
    }
    step!("{when}: every Running Pod of a Ready Network reaches its gateway ({checked:?})");
    checked.len()
}

fn is_running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Waits until Network `name` is `Overlaps` naming `senior` (`namespace/name`); returns the
/// message.
async fn overlaps(ns: &TestNs, name: &str, senior: &str) -> String {
    let what = format!("Network {}/{name} Ready=False reason Overlaps naming {senior}", ns.name);
    wait_for(&what, PATIENCE, async || {
        let obj = ns.network(name).await?;
        match ready_condition(&obj) {
            Some(c)
                if c["status"] == "False"
                    && c["reason"] == "Overlaps"
                    && c["message"].as_str().is_some_and(|m| m.contains(&format!("Network {senior},"))) =>
            {
                Ok(c["message"].as_str().unwrap_or_default().to_string())
            }
            _ => Err(network_summary(&obj)),
        }
    })
    .await
}

fn nads(ns: &TestNs) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client.clone(), &ns.name, &nad_resource())
}

/// Whether NAD `name` exists in the namespace.
async fn nad_exists(ns: &TestNs, name: &str) -> bool {
    nads(ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("expected to read NAD {}/{name}, found: {}", ns.name, api_error(&e)))
        .is_some()
}

/// A Pod joining `network` is refused, saying `because`; returns the message.
async fn denied(ns: &TestNs, pod_name: &str, network: &str, images: &Images, because: &str) -> String {
    let pod = app_pod(pod_name, &[(NETWORK, network)], images);
    // The injector's replicas follow the Networks by watch: a moment after a change, any
    // of them must deny.
    wait_for(&format!("a Pod naming {}/{network} to be denied ({because})", ns.name), PATIENCE, async || {
        match ns.create_pod(&pod, true).await {
            Ok(_) => Err("admitted".to_string()),
            Err(kube::Error::Api(status)) if status.message.contains(because) && status.message.contains(network) => {
                Ok(status.message)
            }
            Err(e) => Err(api_error(&e)),
        }
    })
    .await
}

/// Waits until Network `name` is being deleted and its `InUse` condition counts `pods`
/// Pods; returns the condition's message.
async fn in_use(ns: &TestNs, name: &str, pods: usize) -> String {
    let counted = format!("waits for {pods} Pods");
    wait_for(&format!("Network {}/{name} Terminating with InUse counting {pods} Pods", ns.name), PATIENCE, async || {
        let obj = ns.network(name).await?;
        let condition = obj.data["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "InUse"))
            .cloned()
            .unwrap_or(Value::Null);
        let message = condition["message"].as_str().unwrap_or_default();
        if obj.metadata.deletion_timestamp.is_some() && condition["status"] == "True" && message.contains(&counted) {
            Ok(message.to_string())
        } else {
            Err(network_summary(&obj))
        }
    })
    .await
}

/// Waits for the `InUse` Event about Network `name` naming each of `pods`; returns its
/// message.
async fn in_use_event(ns: &TestNs, name: &str, pods: &[&str]) -> String {
    wait_for(&format!("an InUse Event about Network {}/{name} naming {pods:?}", ns.name), PATIENCE, async || {
        let events = ns.events_about("Network", name).await?;
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("InUse"))
            .filter_map(|e| e.message.clone())
            .find(|m| pods.iter().all(|p| m.contains(p)))
            .ok_or_else(|| format!("{} Events, none InUse naming them", events.len()))
    })
    .await
}

/// Waits until Network `name` and its NAD are gone.
async fn gone(ns: &TestNs, name: &str) {
    wait_for(&format!("Network {}/{name} and its NAD to be gone", ns.name), RUN_PATIENCE, async || {
        match (ns.networks.get_opt(name).await, nads(ns).get_opt(name).await) {
            (Ok(None), Ok(None)) => Ok(()),
            (Ok(Some(obj)), _) => Err(network_summary(&obj)),
            (Ok(None), Ok(Some(_))) => Err("the NAD is still there".to_string()),
            (Err(e), _) | (_, Err(e)) => Err(api_error(&e)),
        }
    })
    .await;
}

/// `envoy_injector_reconcile_errors_total{reason}` summed over the injector's live Pods,
/// read from their admin port on the node's Pod network (only the Lease holder reconciles).
async fn reconcile_errors(installation: &Installation, reason: &str) -> Result<f64, String> {
    let mut total = 0.0;
    for pod in installation.live_pods().await {
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).ok_or("a Pod without an IP")?;
        let addr = format!("{ip}:{ADMIN_PORT}").parse().map_err(|e| format!("{ip}: {e}"))?;
        let text = Admin::new(addr, PATIENCE).metrics().await?;
        total += metric_sum(&text, "envoy_injector_reconcile_errors_total", &[("reason", reason)]);
    }
    Ok(total)
}
