//! Command-line interface: names as in DESIGN.md (`serve`, `inject`, `certs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use envoy_injector::policies::Mode;
use envoy_injector::template::KubeVersion;

#[derive(Debug, Parser)]
#[command(
    name = "envoy-injector",
    version,
    about = "Sidecar-injecting admission webhook and Network controller",
    long_about = "Sidecar-injecting admission webhook and Network controller.\n\n\
        In a cluster, `serve` runs as a Deployment: it injects the sidecar template of the \
        `envoy-injector` ConfigMap into the Pods that opt in, and reconciles `Network` \
        resources. The other commands work on files or read the cluster; none of them \
        changes it.",
    after_help = "Examples:\n  \
        envoy-injector inject -f deployment.yaml | kubectl apply -f -\n  \
        envoy-injector check my-pod -n shop\n  \
        envoy-injector serve --standalone\n\n\
        Run `envoy-injector <COMMAND> --help` for a command's flags."
)]
pub struct Cli {
    /// Log format: human-readable text or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter in tracing's EnvFilter syntax (e.g. `info`, `envoy_injector=debug`).
    #[arg(long, global = true, default_value = "info", env = "RUST_LOG")]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the admission webhook (and, in cluster mode, the Network controller).
    #[command(
        long_about = "Run the admission webhook (and, in cluster mode, the Network controller).\n\n\
            Cluster mode (the default, in a Pod): templates from the `envoy-injector` \
            ConfigMap in --namespace, a self-managed certificate in a Secret unless \
            --tls-cert/--tls-key are given, and the Network controller on the replica \
            that holds the Lease. --standalone: no cluster, the embedded templates (the \
            default `config` and `classic`, as the shipped ConfigMap holds them; or \
            --config) and a self-signed certificate, for trying the webhook locally.",
        after_help = "Examples:\n  \
            envoy-injector serve --standalone --addr 127.0.0.1:8443\n  \
            envoy-injector serve --namespace envoy-injector --network-backend none"
    )]
    // Boxed: by far the largest variant.
    Serve(Box<ServeArgs>),
    /// Inject the sidecar into manifests offline and print the result.
    #[command(after_help = "Examples:\n  \
        envoy-injector inject -f deployment.yaml | kubectl apply -f -\n  \
        kubectl get deploy web -o yaml | envoy-injector inject -f - --config my-template.yaml\n  \
        envoy-injector inject -f job.yaml -o jsonpatch")]
    Inject(InjectArgs),
    /// Generate a CA and a serving certificate for the webhook Service.
    #[command(after_help = "Example:\n  \
        envoy-injector certs --service envoy-injector --namespace envoy-injector --out-dir certs/")]
    Certs(CertsArgs),
    /// Print the Network CustomResourceDefinition (YAML) generated from the Rust type.
    Crd,
    /// Explain why Pods would (not) be injected and check the installation (read-only).
    #[command(
        long_about = "Explain why Pods would (not) be injected and check the installation (read-only).\n\n\
            Uses the current kubeconfig and only reads. With -f and no kubeconfig (or \
            --offline) it needs no cluster: each Pod of the file is explained from the file and \
            the template (--config, else the embedded default). Exit code 1 when a check fails, \
            a Pod would be denied, or --missing or --drift finds Pods; stale sidecars and a Pod that would \
            simply not be injected are not failures.",
        after_help = "Examples:\n  \
            envoy-injector check                      # the installation's health\n  \
            envoy-injector check my-pod -n shop       # why this Pod is (not) injected\n  \
            envoy-injector check -f deployment.yaml   # the Pods a manifest would make\n  \
            envoy-injector check -f deployment.yaml --config cm.yaml --offline   # no cluster\n  \
            envoy-injector check --stale --missing    # Pods to restart, cluster-wide"
    )]
    Check(CheckArgs),
    /// Remove what the injector added to manifests (as their status annotation records).
    #[command(after_help = "Example:\n  \
        kubectl get deploy web -o yaml | envoy-injector uninject -f - | kubectl apply -f -")]
    Uninject(UninjectArgs),
    /// Print the admission policies the templates compile to (MutatingAdmissionPolicy,
    /// ValidatingAdmissionPolicy and their bindings).
    #[command(
        long_about = "Print the admission policies the templates compile to (MutatingAdmissionPolicy, \
            ValidatingAdmissionPolicy and their bindings, admissionregistration.k8s.io/v1, Kubernetes \
            1.36 or later).\n\n\
            Applied to a cluster, they inject as the webhook does, run by the API server itself: \
            Pods opted in are injected with no injector replica running. Reads only the file; \
            a template that cannot be compiled is named on stderr and left to the webhook.",
        after_help = "Examples:\n  \
            envoy-injector policies -f manifests/configmap.yaml | kubectl apply --server-side -f -\n  \
            envoy-injector policies -f my-template.yaml -o json"
    )]
    Policies(PoliciesArgs),
    /// Restart the workloads whose Pods run an older template revision, one after the
    /// other, each until its new Pods are Ready with the live revision.
    #[command(
        long_about = "Restart the workloads whose Pods run an older template revision, one after the other, \
            each until its new Pods are Ready with the live revision.\n\n\
            Each Deployment, StatefulSet and DaemonSet with stale Pods (as `check --stale` lists them) \
            is restarted as `kubectl rollout restart` does, once the live templates are in step where \
            they are served (the compiled admission policies, every replica's reload, a dry run of the \
            workload's Pod template); the run waits \
            until its rollout completes and every Pod is Ready with the live revision, then goes on. \
            The first failure or timeout stops the run: the workloads after it are left untouched. \
            Bare Pods, Jobs, CronJobs and workloads that will not roll (OnDelete, paused, a partition) \
            are listed with what to do, never deleted. Their own update strategies bound how many Pods \
            are unavailable. Exit code 1 when a rollout fails or times out, or the templates do not get \
            in step in time. `kubectl rollout undo` brings back a workload's template, not the old sidecar.",
        after_help = "Examples:\n  \
            envoy-injector rollout -n shop --dry-run\n  \
            envoy-injector rollout -n shop\n  \
            envoy-injector rollout -A --selector tier=web --max-parallel 2 --timeout 10m -o json"
    )]
    Rollout(RolloutArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Webhook only, no cluster: the embedded templates, `config` and `classic` (or
    /// --config), self-signed TLS unless --tls-cert/--tls-key are given.
    #[arg(long)]
    pub standalone: bool,
    /// Template file (a bare template or a whole ConfigMap manifest); standalone only.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The Kubernetes version whose API server checks the Pods, for the value rules of the
    /// templates (standalone only: in cluster mode, the API server's own version).
    #[arg(long = "kube-version", value_name = "VERSION", default_value_t = KubeVersion::NEWEST)]
    pub kube_version: KubeVersion,
    /// Namespace of the `envoy-injector` ConfigMap (cluster mode).
    #[arg(long, env = "POD_NAMESPACE", default_value = "envoy-injector")]
    pub namespace: String,
    /// How opted-in Pods are injected (cluster mode): `policy`, the templates compiled into
    /// admission policies the API server runs itself, kept in step by the Lease holder
    /// (injection goes on while no replica runs); `webhook`, by this webhook alone (the
    /// Lease holder deletes the policies it wrote before); `auto`, `policy` when the API
    /// server serves MutatingAdmissionPolicy v1 (Kubernetes 1.36), else `webhook`.
    #[arg(long, default_value = "auto", env = "INJECTION", value_parser = injection_mode())]
    pub injection: Mode,
    /// Whether a Pod's annotation `sidecar.samplecrd.k8s.io/inject: "true"` (and the legacy
    /// `initializer.kubernetes.io/envoy`) opts it in. Its label of the same key and its
    /// namespace's label always do. `false`: annotations opt nothing in, so no Pod costs the
    /// API server any CEL unless a label selects it (the compiled policies then hold no
    /// annotation path; the webhook configuration's annotation entry is to be removed too).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "ANNOTATION_OPT_IN")]
    pub annotation_opt_in: bool,
    /// The ValidatingWebhookConfiguration that owns (ownerReferences) every admission
    /// policy policy mode writes: deleting it, as removing the installation does, lets the
    /// garbage collector delete them. None is written while it does not exist.
    #[arg(long, value_name = "NAME", default_value = "envoy-injector", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub policy_owner: String,
    /// HTTPS listener for `POST /mutate`.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub addr: SocketAddr,
    /// Plain-HTTP admin listener: /healthz, /readyz, /metrics.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub admin_addr: SocketAddr,
    /// Open the webhook listener with SO_REUSEPORT, so that several processes can listen on
    /// one --addr and the kernel spreads new connections over them: a new version starts
    /// beside the old one before the old one is stopped (hot restart on a VM), or two
    /// replicas share one address. Every process on the address must set it.
    #[arg(long)]
    pub reuse_port: bool,
    /// PEM certificate chain; reloaded when the file changes.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key; reloaded when the file changes.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// How often the cert/key files are checked for changes.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub tls_reload_interval: Duration,
    // Self-managed TLS (cluster mode without --tls-cert/--tls-key). Boxed: keeps the
    // `Command` variants of similar size.
    #[command(flatten)]
    pub self_tls: Box<SelfTlsArgs>,
    // Connection limits and timeouts of both listeners. Boxed: keeps the `Command`
    // variants of similar size.
    #[command(flatten)]
    pub connections: Box<ConnectionArgs>,
    /// Run the Network controller and watch Networks (cluster mode). `--networks=false`:
    /// neither, so the Network CRD need not be installed; a Pod naming a Network is then
    /// refused, as naming one that does not exist.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub networks: bool,
    /// Backend that realises Networks: `multus` (a NetworkAttachmentDefinition per
    /// Network) or `none` (status only).
    #[arg(long, value_enum, default_value_t = NetworkBackendKind::Multus)]
    pub network_backend: NetworkBackendKind,
    /// Only the holder of a coordination.k8s.io Lease runs the Network controller; every
    /// replica serves the webhook. `--leader-elect=false` runs the controller here always.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the Lease (in `--namespace`).
    #[arg(long, default_value = "envoy-injector-controller")]
    pub lease_name: String,
    /// Seconds a Lease is valid without renewal; a replica that cannot renew stops
    /// reconciling within this time.
    #[arg(long, default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// This replica's identity in the Lease; default: the `POD_NAME` env, else the hostname.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Client-side rate limit on requests to the Kubernetes API (token bucket refill per
    /// second; 0: unlimited). Lease renewals are exempt. The default is above what a
    /// 2-core API server sustains for us (about 450 writes/s, `make bench-scale`), so the
    /// API server stays the bottleneck of a burst, and caps a runaway controller.
    #[arg(long, value_name = "QPS", default_value_t = 500)]
    pub api_qps: u32,
    /// Requests that may go at once before `--api-qps` spaces them.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub api_burst: u32,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish.
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    pub shutdown_timeout: Duration,
    /// Watch every Pod's metadata (cluster mode) to keep `envoy_injector_pods_uninjected`:
    /// opted-in Pods without the sidecar, per namespace (about 100 bytes per Pod held).
    /// `--watch-uninjected=false` skips that watch; the gauge then has no series at all.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub watch_uninjected: bool,
    /// The Lease holder restarts, after a template change, the workloads whose Pods run an
    /// older revision in namespaces labelled `sidecar.samplecrd.k8s.io/rollout=auto`, one at a
    /// time per namespace, as `rollout` does. Needs the rights of manifests/auto-rollout/
    /// (patch on Deployments, StatefulSets, DaemonSets), which the default RBAC lacks.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub auto_rollout: bool,
    /// With --auto-rollout: the least time between two restarts in one namespace.
    #[arg(long, value_name = "D", value_parser = parse_duration, default_value = "30s")]
    pub auto_rollout_interval: Duration,
    /// With --auto-rollout: how long one workload may take to roll out; longer is a failure,
    /// which stops the automatic rollout of that template revision.
    #[arg(long, value_name = "D", value_parser = parse_duration, default_value = "10m")]
    pub auto_rollout_timeout: Duration,
}

const CONNECTIONS_HEADING: &str = "Connections (webhook and admin listeners)";

/// `serve` flags bounding what clients can hold: connections, their phases, body memory.
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// Largest accepted request body; larger ones get HTTP 413.
    #[arg(help_heading = CONNECTIONS_HEADING, long, default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Time allowed for an HTTP/1.1 request's headers once the request started.
    #[arg(help_heading = CONNECTIONS_HEADING, long, value_parser = parse_duration, default_value = "5s")]
    pub header_read_timeout: Duration,
    /// Upper bound on answering one request (the API server's `?timeout=` is honoured
    /// when shorter).
    #[arg(help_heading = CONNECTIONS_HEADING, long, value_parser = parse_duration, default_value = "10s")]
    pub request_timeout: Duration,
    /// Request bodies held in memory at once, across all connections; a request that does
    /// not fit waits up to 1s for room, then gets 503 with `Retry-After: 1`.
    #[arg(help_heading = CONNECTIONS_HEADING, long, default_value_t = 64 * 1024 * 1024)]
    pub max_inflight_body_bytes: usize,
    /// Time allowed from accept to a completed TLS handshake.
    #[arg(help_heading = CONNECTIONS_HEADING, long, value_parser = parse_duration, default_value = "5s")]
    pub tls_handshake_timeout: Duration,
    /// Time allowed from the handshake (accept, on the admin listener) to the first
    /// request's headers; a connection that sends none is closed.
    #[arg(help_heading = CONNECTIONS_HEADING, long, value_parser = parse_duration, default_value = "10s")]
    pub first_request_timeout: Duration,
    /// A connection with no request in flight for this long is closed (HTTP/1.1
    /// keep-alive and HTTP/2 alike).
    #[arg(help_heading = CONNECTIONS_HEADING, long, value_parser = parse_duration, default_value = "60s")]
    pub idle_timeout: Duration,
    /// HTTP/2: send a PING this often to check that the peer is alive (`0`: never).
    #[arg(help_heading = CONNECTIONS_HEADING, long = "http2-keepalive-interval", value_parser = parse_duration, default_value = "20s")]
    pub http2_keepalive_interval: Duration,
    /// HTTP/2: close the connection when a PING is not answered within this.
    #[arg(help_heading = CONNECTIONS_HEADING, long = "http2-keepalive-timeout", value_parser = parse_duration, default_value = "10s")]
    pub http2_keepalive_timeout: Duration,
    /// Connections open at once on the webhook listener; more are accepted and closed at
    /// once (counted in `envoy_injector_connections_rejected_total`).
    #[arg(help_heading = CONNECTIONS_HEADING, long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Connections open at once on the admin listener.
    #[arg(help_heading = CONNECTIONS_HEADING, long, default_value_t = 128)]
    pub admin_max_connections: usize,
}

const SELF_TLS_HEADING: &str = "Self-managed TLS (cluster mode without --tls-cert/--tls-key)";

/// `serve` flags for the self-managed certificate (`envoy_injector::tls::secret`).
#[derive(Debug, Clone, Args)]
pub struct SelfTlsArgs {
    /// The `kubernetes.io/tls` Secret (in --namespace) holding the self-managed CA and
    /// serving certificate: created if missing, renewed before expiry, re-read by every replica.
    #[arg(help_heading = SELF_TLS_HEADING, long, value_name = "NAME", default_value = "envoy-injector-tls")]
    pub tls_secret: String,
    /// MutatingWebhookConfiguration whose webhooks' `clientConfig.caBundle` is kept equal
    /// to the Secret's `ca.crt` (self-managed TLS only); empty: touch none.
    #[arg(help_heading = SELF_TLS_HEADING, long, value_name = "NAME", default_value = "envoy-injector")]
    pub webhook_config: String,
    /// ValidatingWebhookConfiguration (the template check, `POST /validate`) whose webhooks'
    /// `clientConfig.caBundle` is kept equal to the Secret's `ca.crt`; empty: touch none.
    #[arg(help_heading = SELF_TLS_HEADING, long, value_name = "NAME", default_value = "envoy-injector")]
    pub validating_webhook_config: String,
    /// The webhook's Service: the self-managed certificate is for `S`, `S.N`, `S.N.svc` and
    /// `S.N.svc.cluster.local` (N = --namespace).
    #[arg(help_heading = SELF_TLS_HEADING, long, value_name = "NAME", default_value = "envoy-injector")]
    pub service: String,
    /// Validity of a self-managed serving certificate, in days (its CA gets ten times as long).
    #[arg(help_heading = SELF_TLS_HEADING, long, value_name = "DAYS", default_value_t = 365)]
    pub cert_validity_days: u32,
    /// Renew a self-managed serving certificate this many days before it expires.
    #[arg(help_heading = SELF_TLS_HEADING, long, value_name = "DAYS", default_value_t = 30)]
    pub cert_renew_before_days: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NetworkBackendKind {
    Multus,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The injected manifests, as multi-document YAML.
    Yaml,
    /// The injected manifests as JSON (several documents become a `List`).
    Json,
    /// RFC 6902 JSON Patch per object (each item of a `List` too), one JSON array per line.
    Jsonpatch,
    /// Strategic merge patch per object (each item of a `List` too), one JSON object per line.
    Strategic,
}

#[derive(Debug, Clone, Args)]
pub struct InjectArgs {
    /// Manifest file to read, `-` for stdin: multi-document YAML, `List`s, JSON or a stream
    /// of JSON objects, read the way kubectl reads them.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Template file (a bare template or a ConfigMap manifest); default: the embedded
    /// templates, `config` and `classic`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The Kubernetes version whose API server will check the Pods: the value rules the
    /// templates of --config are checked with.
    #[arg(long = "kube-version", value_name = "VERSION", default_value_t = KubeVersion::NEWEST)]
    pub kube_version: KubeVersion,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
}

/// `serve --injection`: the library's modes, by name.
fn injection_mode() -> impl TypedValueParser<Value = Mode> {
    PossibleValuesParser::new(Mode::ALL.map(Mode::as_str)).try_map(|name| Mode::parse(&name).ok_or("not a mode"))
}

#[derive(Debug, Clone, Args)]
pub struct PoliciesArgs {
    /// Template file: a bare template (compiled as `config`) or a whole ConfigMap manifest.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// The injector's namespace, which the policies leave alone as the webhook does.
    #[arg(long, default_value = "envoy-injector")]
    pub namespace: String,
    /// The value rules the templates are checked with, for this Kubernetes version (the
    /// policies themselves need 1.36).
    #[arg(long = "kube-version", value_name = "VERSION", default_value_t = KubeVersion::NEWEST)]
    pub kube_version: KubeVersion,
    /// As `serve --annotation-opt-in`: `false` leaves out the policy for Pods that opt in
    /// by annotation.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub annotation_opt_in: bool,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = PoliciesFormat::Yaml)]
    pub output: PoliciesFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PoliciesFormat {
    /// Multi-document YAML, one object a document.
    Yaml,
    /// A `List` of the objects as JSON.
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct UninjectArgs {
    /// Manifest file to read, `-` for stdin, read as `inject` reads it.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = UninjectFormat::Yaml)]
    pub output: UninjectFormat,
}

/// `uninject` output: a strategic merge patch cannot remove list entries by name here, so
/// it is not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UninjectFormat {
    /// The manifests without the injection, as multi-document YAML.
    Yaml,
    /// The same as JSON (several documents become a `List`).
    Json,
    /// RFC 6902 JSON Patch (`remove` operations) per object, one JSON array per line.
    Jsonpatch,
}

#[derive(Debug, Clone, Args)]
pub struct CertsArgs {
    /// Name of the webhook Service.
    #[arg(long)]
    pub service: String,
    /// Namespace of the webhook Service.
    #[arg(long)]
    pub namespace: String,
    /// Directory for ca.crt, tls.crt and tls.key (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
    /// Extra subject alternative names: DNS names or IP addresses. Repeatable.
    #[arg(long = "san", value_name = "HOST_OR_IP")]
    pub sans: Vec<String>,
    /// Validity of the serving certificate in days (the CA gets ten times as long).
    #[arg(long, default_value_t = 365)]
    pub days: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckOutput {
    /// One line per check, a paragraph per Pod.
    Text,
    /// The whole report as one JSON object, for scripts.
    Json,
}

/// `check`'s arguments: one target (a Pod, a namespace, a file, or the installation).
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// A Pod to explain (in --namespace, default: the kubeconfig context's namespace).
    #[arg(value_name = "POD", conflicts_with = "file")]
    pub pod: Option<String>,
    /// Explain every Pod of this namespace (with POD or -f: where they are, by default).
    #[arg(short = 'n', long = "namespace", value_name = "NS")]
    pub namespace: Option<String>,
    /// Explain the Pods and Pod templates of a manifest file (`-` for stdin) instead.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Template file (a bare template or a ConfigMap manifest) to explain the Pods of -f
    /// against, instead of the live ConfigMap (or, offline, the embedded default).
    #[arg(long, value_name = "FILE", requires = "file")]
    pub config: Option<PathBuf>,
    /// With -f: consult no cluster even when a kubeconfig is found.
    #[arg(long, requires = "file", conflicts_with_all = ["stale", "missing", "drift"])]
    pub offline: bool,
    /// With -f and no cluster: the Kubernetes version whose value rules the templates are
    /// checked with (with a cluster, its API server's version).
    #[arg(long = "kube-version", value_name = "VERSION", default_value_t = KubeVersion::NEWEST)]
    pub kube_version: KubeVersion,
    /// Also list injected Pods running an older template revision, by workload, with the
    /// `kubectl rollout restart` that replaces them (within --namespace, else everywhere).
    #[arg(long)]
    pub stale: bool,
    /// Also list Pods opted in now (by annotation, or by namespace label and not opted out)
    /// that carry no sidecar, by workload, with why they were most likely missed and the
    /// `kubectl rollout restart` that fixes them (within --namespace, else everywhere).
    /// Any found: exit code 1.
    #[arg(long)]
    pub missing: bool,
    /// Also list injected Pods at their template's live revision whose sidecar differs
    /// from what the template makes of them (changed after injection, e.g. by a later
    /// mutating webhook), field by field (within --namespace, else everywhere). Any found:
    /// exit code 1.
    #[arg(long)]
    pub drift: bool,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = CheckOutput::Text)]
    pub output: CheckOutput,
    /// Namespace of the injector's ConfigMap, Secret, Service and Lease.
    #[arg(long, value_name = "NS", default_value = "envoy-injector")]
    pub injector_namespace: String,
    /// The MutatingWebhookConfiguration to check and evaluate; empty: none.
    #[arg(long, value_name = "NAME", default_value = "envoy-injector")]
    pub webhook_config: String,
    /// The ValidatingWebhookConfiguration (template check) to check; empty: none.
    #[arg(long, value_name = "NAME", default_value = "envoy-injector")]
    pub validating_webhook_config: String,
    /// The Secret holding the serving certificate (`tls.crt`) the caBundles must verify;
    /// empty: no certificate checks.
    #[arg(long, value_name = "NAME", default_value = "envoy-injector-tls")]
    pub tls_secret: String,
    /// The controller Lease; empty: not checked (`serve --leader-elect=false`).
    #[arg(long, value_name = "NAME", default_value = "envoy-injector-controller")]
    pub lease_name: String,
    /// The Deployment running `serve` (in --injector-namespace): its `--injection` says
    /// which path injects; empty: serve's default (`auto`) is taken.
    #[arg(long, value_name = "NAME", default_value = "envoy-injector")]
    pub deployment: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RolloutOutput {
    /// The plan and each workload's result, as lines.
    Text,
    /// The whole report as one JSON object, for scripts.
    Json,
}

/// `rollout`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct RolloutArgs {
    /// Roll out the workloads of this namespace (default: the kubeconfig context's).
    #[arg(
        short = 'n',
        long = "namespace",
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Roll out the workloads of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only the workloads whose labels this selector selects (`app=web,tier!=db`); bare
    /// Pods and Jobs are then not listed.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Print the plan (and whether the templates are in step now) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Workloads rolling out at once; after a failure none is started, those in flight
    /// finish.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_parallel: u16,
    /// How long each workload may take to roll out (and the live templates to get in step
    /// before the first restart).
    #[arg(long, value_name = "D", value_parser = parse_duration, default_value = "5m")]
    pub timeout: Duration,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = RolloutOutput::Text)]
    pub output: RolloutOutput,
    /// Namespace of the injector's ConfigMap and Deployment.
    #[arg(long, value_name = "NS", default_value = "envoy-injector")]
    pub injector_namespace: String,
    /// The Deployment running `serve` (in --injector-namespace): each of its Ready replicas
    /// must have reloaded the live templates (read from its /metrics through the API
    /// server: `get pods/proxy`), and its `--injection` says which path injects; empty: the
    /// replicas are not checked and `serve`'s default (`auto`) is taken.
    #[arg(long, value_name = "NAME", default_value = "envoy-injector")]
    pub deployment: String,
}

/// Parses the command line as [`Cli::parse`] does, and says how to pass a file to a
/// command that reads one with `-f` when it was given bare (`inject app.yaml`).
pub fn parse() -> Cli {
    Cli::try_parse().unwrap_or_else(|err| with_filename_hint(err, std::env::args_os().skip(1)).exit())
}

fn with_filename_hint(mut err: clap::Error, args: impl Iterator<Item = std::ffi::OsString>) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let Some(ContextValue::String(stray)) = err.get(ContextKind::InvalidArg) else {
        return err;
    };
    if err.kind() != ErrorKind::UnknownArgument || stray.starts_with('-') {
        return err;
    }
    let cli = Cli::command();
    let args: Vec<_> = args.collect();
    let command = args
        .iter()
        .find_map(|arg| cli.get_subcommands().find(|sub| arg.to_str() == Some(sub.get_name())));
    let reads_a_file = command.is_some_and(|sub| sub.get_arguments().any(|a| a.get_short() == Some('f')));
    if !reads_a_file {
        return err;
    }
    let hint = format!("to read the file '{stray}', use '-f {stray}'");
    let mut suggestions = match err.get(ContextKind::Suggested) {
        Some(ContextValue::StyledStrs(existing)) => existing.clone(),
        _ => Vec::new(),
    };
    suggestions.insert(0, hint.into());
    err.insert(ContextKind::Suggested, ContextValue::StyledStrs(suggestions));
    err
}

/// Parses a duration flag: Go syntax (`250ms`, `10s`, `2m`, `1m30s`), or a bare number of
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map(Duration::from_secs)
            .map_err(|e| format!("{text:?}: {e}"));
    }
    envoy_injector::duration::parse(text)
        .ok_or_else(|| format!("expected a duration like 500ms, 10s, 2m or 1m30s, found {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// `inject app.yaml` (no `-f`) says to use `-f`; an unknown flag gets no such hint.
    #[test]
    fn a_bare_file_is_answered_with_the_flag_that_reads_it() {
        let hint = |argv: &[&str]| {
            let err = Cli::try_parse_from(argv).unwrap_err();
            let args = argv[1..].iter().map(std::ffi::OsString::from);
            with_filename_hint(err, args).render().to_string()
        };
        for argv in [
            &["envoy-injector", "inject", "app.yaml"][..],
            &[
                "envoy-injector",
                "--log-level",
                "warn",
                "uninject",
                "-o",
                "json",
                "app.yaml",
            ],
            &["envoy-injector", "check", "my-pod", "app.yaml"],
        ] {
            let shown = hint(argv);
            assert!(shown.contains("use '-f app.yaml'"), "{argv:?}: {shown}");
        }
        assert!(!hint(&["envoy-injector", "inject", "--nope"]).contains("use '-f"));
        assert!(
            !hint(&["envoy-injector", "crd", "x.yaml"]).contains("use '-f"),
            "crd reads no file"
        );
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Help is for users: every command says what it does, and no note meant for the code
    /// (why a field is boxed) reaches it.
    #[test]
    fn help_is_written_for_users() {
        const INTERNAL: [&str; 3] = ["Boxed", "variant", "`Command`"];
        let mut cli = Cli::command();
        // The command list shows each command's short description.
        let top = cli.render_long_help().to_string();
        assert!(top.contains("Examples:"), "{top}");
        for internal in INTERNAL {
            assert!(!top.contains(internal), "`--help` shows {internal:?}:\n{top}");
        }
        for sub in cli.get_subcommands_mut().filter(|s| s.get_name() != "help") {
            let name = sub.get_name().to_string();
            assert!(sub.get_about().is_some(), "`{name}` has no description");
            for help in [sub.render_help().to_string(), sub.render_long_help().to_string()] {
                for internal in INTERNAL {
                    assert!(!help.contains(internal), "`{name} --help` shows {internal:?}:\n{help}");
                }
            }
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("fast").unwrap_err().contains("fast"));
        assert!(parse_duration("5x").unwrap_err().contains("5x"));
    }
}
