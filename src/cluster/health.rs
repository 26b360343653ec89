//! The installation's health, as `linkerd check` reports it: one line per check, each `ok`,
//! `warn` or `fail`. [`evaluate`] is pure over [`Facts`] (what `fetch` read from the
//! cluster) and the time.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Serialize;
use time::OffsetDateTime;

use crate::template::{KubeVersion, TemplateSet};
use crate::tls::{self, WebhookConfig, rfc3339};

/// What a read found: the object, `None` when it does not exist, or the API error.
pub type Fetched<T> = Result<Option<T>, String>;

/// Days before expiry from which a serving certificate is a warning (the self-managed one
/// renews 30 days before, by default).
pub const EXPIRY_WARNING_DAYS: i64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// A stable id: `mutating-webhook`, `validating-webhook`, `ca-bundle`,
    /// `serving-certificate`, `service`, `templates`, `lease`, `stale-sidecars`.
    pub check: &'static str,
    pub status: Status,
    pub message: String,
}

impl Check {
    pub fn new(check: &'static str, status: Status, message: impl Into<String>) -> Check {
        Check {
            check,
            status,
            message: message.into(),
        }
    }
}

/// A Service and its EndpointSlices.
#[derive(Debug, Clone)]
pub struct ServiceFacts {
    pub service: Fetched<Service>,
    pub endpoint_slices: Result<Vec<EndpointSlice>, String>,
}

/// Everything the health checks read. `None` fields were not asked for (their flag is "").
#[derive(Debug, Clone)]
pub struct Facts {
    /// The injector's namespace.
    pub namespace: String,
    pub mutating: Option<(String, Fetched<MutatingWebhookConfiguration>)>,
    pub validating: Option<(String, Fetched<ValidatingWebhookConfiguration>)>,
    pub tls_secret: Option<(String, Fetched<Secret>)>,
    /// Every Service a webhook names, by (namespace, name).
    pub services: BTreeMap<(String, String), ServiceFacts>,
    pub configmap: Fetched<ConfigMap>,
    pub lease: Option<(String, Fetched<Lease>)>,
    /// The API server's version: the value rules the live templates are checked with.
    pub kube_version: KubeVersion,
    /// The nodes whose kubelet cannot run native sidecars, read only where the version skew
    /// policy allows such kubelets (a 1.31 API server); `None`: not read.
    pub old_kubelets: Option<Result<Vec<OldKubelet>, String>>,
}

/// A node whose kubelet is older than 1.29: a native sidecar never leaves its init phase
/// there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldKubelet {
    pub node: String,
    pub version: String,
}

/// A webhook configuration's entries, whatever its kind.
pub struct Hooks<'a> {
    pub kind: &'static str,
    pub name: &'a str,
    pub hooks: Vec<(&'a str, &'a WebhookClientConfig)>,
}

fn hooks_of<'a, T: WebhookConfig>(named: &'a Option<(String, Fetched<T>)>) -> Option<Hooks<'a>> {
    match named {
        Some((name, Ok(Some(config)))) => Some(Hooks {
            kind: T::KIND,
            name,
            hooks: config.clients(),
        }),
        _ => None,
    }
}

impl Facts {
    /// Each webhook configuration that exists, with its entries.
    pub fn hooks(&self) -> Vec<Hooks<'_>> {
        [hooks_of(&self.mutating), hooks_of(&self.validating)]
            .into_iter()
            .flatten()
            .collect()
    }

    /// The Services the webhooks name, by (namespace, name).
    pub fn service_refs(&self) -> Vec<(String, String)> {
        let mut refs: Vec<(String, String)> = self
            .hooks()
            .iter()
            .flat_map(|h| h.hooks.iter())
            .filter_map(|(_, client)| client.service.as_ref())
            .map(|s| (s.namespace.clone(), s.name.clone()))
            .collect();
        refs.sort();
        refs.dedup();
        refs
    }
}

/// The host name the API server dials for a webhook (and verifies the certificate for).
pub fn dialed_name(client: &WebhookClientConfig) -> Option<String> {
    if let Some(service) = &client.service {
        return Some(format!("{}.{}.svc", service.name, service.namespace));
    }
    let url = client.url.as_deref()?;
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    };
    Some(host.to_string())
}

fn where_to(client: &WebhookClientConfig) -> String {
    match (&client.service, &client.url) {
        (Some(s), _) => format!(
            "Service {}/{}:{}{}",
            s.namespace,
            s.name,
            s.port.unwrap_or(443),
            s.path.as_deref().unwrap_or("")
        ),
        (None, Some(url)) => url.clone(),
        (None, None) => String::from("nowhere (no service, no url)"),
    }
}

/// Whether compiled admission policies labelled as ours were found (`injection` lists
/// them): they act on Pods without the injector, so what a missing ConfigMap does depends
/// on them too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoliciesFound {
    None,
    Some,
    /// They could not be listed.
    Unknown,
}

/// Every check, in report order.
pub fn evaluate(facts: &Facts, policies: PoliciesFound, now: OffsetDateTime) -> Vec<Check> {
    evaluate_with(facts, &live_templates(facts), policies, now)
}

/// [`evaluate`], with the ConfigMap's templates already parsed by the caller (who needs
/// them for the decisions too, and parses them once).
pub fn evaluate_with(
    facts: &Facts,
    templates: &Result<Live, String>,
    policies: PoliciesFound,
    now: OffsetDateTime,
) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some((name, config)) = &facts.mutating {
        out.push(configuration("mutating-webhook", name, config, Status::Fail));
    }
    if let Some((name, config)) = &facts.validating {
        // Optional: without it templates are checked on reload only.
        out.push(configuration("validating-webhook", name, config, Status::Warn));
    }
    let serving = facts
        .tls_secret
        .as_ref()
        .map(|(name, secret)| (name, serving_chain(secret)));
    out.extend(ca_bundles(facts, serving.as_ref().map(|(n, c)| (n.as_str(), c)), now));
    if let Some((name, chain)) = &serving {
        out.push(serving_certificate(&facts.namespace, name, chain, now));
    }
    out.push(services(facts));
    out.push(templates_check(facts, templates, policies));
    if let Some((name, lease)) = &facts.lease {
        out.push(lease_check(&facts.namespace, name, lease, now));
    }
    out.push(kubelets_check(facts));
    out
}

/// Whether the nodes run the native sidecars injected by default.
fn kubelets_check(facts: &Facts) -> Check {
    const CHECK: &str = "kubelets";
    let minor = crate::template::NATIVE_SIDECAR_KUBELET_MINOR;
    match &facts.old_kubelets {
        None => Check::new(
            CHECK,
            Status::Ok,
            format!(
                "the API server is {}: by the version skew policy every kubelet is 1.{minor} or later and runs native sidecars",
                facts.kube_version
            ),
        ),
        Some(Err(error)) => Check::new(
            CHECK,
            Status::Warn,
            format!("cannot tell whether every node runs native sidecars (kubelet 1.{minor}+): {error}"),
        ),
        Some(Ok(old)) if old.is_empty() => Check::new(
            CHECK,
            Status::Ok,
            format!("every node's kubelet is 1.{minor} or later and runs native sidecars"),
        ),
        Some(Ok(old)) => {
            let shown: Vec<String> = old
                .iter()
                .take(5)
                .map(|k| format!("{} ({})", k.node, k.version))
                .collect();
            let more = old.len().saturating_sub(shown.len());
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            Check::new(
                CHECK,
                Status::Warn,
                format!(
                    "{} node(s) run a kubelet older than 1.{minor}, where a native sidecar never leaves its init phase and the Pod stays Init: {}{more}; upgrade them, or set `nativeSidecar: false` in the templates their Pods use (or annotation `sidecar.samplecrd.k8s.io/native-sidecar: \"false\"` on those Pods)",
                    old.len(),
                    shown.join(", ")
                ),
            )
        }
    }
}

fn configuration<T: WebhookConfig>(check: &'static str, name: &str, config: &Fetched<T>, absent: Status) -> Check {
    let kind = T::KIND;
    match config {
        Err(err) => Check::new(check, Status::Fail, format!("cannot read {kind} {name}: {err}")),
        Ok(None) => Check::new(
            check,
            absent,
            match absent {
                Status::Fail => {
                    format!("expected {kind} {name}, found none: the API server sends no Pod to the injector")
                }
                _ => format!(
                    "expected {kind} {name}, found none: templates are checked only when the injector reloads them"
                ),
            },
        ),
        Ok(Some(config)) => {
            let hooks = config.clients();
            if hooks.is_empty() {
                return Check::new(
                    check,
                    Status::Fail,
                    format!("expected webhooks in {kind} {name}, found none"),
                );
            }
            let list: Vec<String> = hooks.iter().map(|(n, to)| format!("{n} → {}", where_to(to))).collect();
            Check::new(check, Status::Ok, format!("{kind} {name}: {}", list.join(", ")))
        }
    }
}

/// The Secret's `tls.crt`, or why there is none.
fn serving_chain(secret: &Fetched<Secret>) -> Result<Vec<u8>, String> {
    match secret {
        Err(err) => Err(format!("cannot read it: {err}")),
        Ok(None) => Err(String::from("found no such Secret")),
        Ok(Some(secret)) => secret
            .data
            .as_ref()
            .and_then(|d| d.get("tls.crt"))
            .map(|b| b.0.clone())
            .filter(|b| !b.is_empty())
            .ok_or_else(|| String::from("found no `tls.crt` in it")),
    }
}

fn ca_bundles(facts: &Facts, serving: Option<(&str, &Result<Vec<u8>, String>)>, now: OffsetDateTime) -> Vec<Check> {
    let mut out = Vec::new();
    for hooks in facts.hooks() {
        let label = format!("{} {}", hooks.kind, hooks.name);
        let chain = match serving {
            None => continue,
            Some((secret, Err(why))) => {
                out.push(Check::new(
                    "ca-bundle",
                    Status::Warn,
                    format!(
                        "{label}: cannot compare caBundle with the serving certificate: Secret {}/{secret}: {why}",
                        facts.namespace
                    ),
                ));
                continue;
            }
            Some((_, Ok(chain))) => chain,
        };
        let mut problems = Vec::new();
        let mut names = Vec::new();
        for (webhook, client) in &hooks.hooks {
            let bundle = client.ca_bundle.as_ref().map(|b| b.0.as_slice()).unwrap_or_default();
            let Some(name) = dialed_name(client) else {
                problems.push(format!(
                    "webhook {webhook}: expected clientConfig.service or an https:// url, found {}",
                    where_to(client)
                ));
                continue;
            };
            if bundle.is_empty() {
                problems.push(format!("webhook {webhook}: caBundle is empty"));
                continue;
            }
            match tls::verify_with_bundle(bundle, chain, &name, now) {
                Ok(()) => names.push(name),
                Err(err) => problems.push(format!("webhook {webhook}: {err}")),
            }
        }
        names.sort();
        names.dedup();
        out.push(if problems.is_empty() {
            Check::new(
                "ca-bundle",
                Status::Ok,
                format!(
                    "{label}: caBundle verifies the serving certificate for {}",
                    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                ),
            )
        } else {
            Check::new("ca-bundle", Status::Fail, format!("{label}: {}", problems.join("; ")))
        });
    }
    out
}

fn serving_certificate(namespace: &str, secret: &str, chain: &Result<Vec<u8>, String>, now: OffsetDateTime) -> Check {
    let label = format!("Secret {namespace}/{secret}");
    let chain = match chain {
        Ok(chain) => chain,
        Err(why) => {
            return Check::new(
                "serving-certificate",
                Status::Fail,
                format!("{label}: expected the serving certificate in `tls.crt`, {why}"),
            );
        }
    };
    let Some(leaf) = tls::certificates(chain).next() else {
        return Check::new(
            "serving-certificate",
            Status::Fail,
            format!("{label}: expected a PEM certificate in `tls.crt`, found none"),
        );
    };
    let info = match tls::inspect_cert(&leaf) {
        Ok(info) => info,
        Err(err) => return Check::new("serving-certificate", Status::Fail, format!("{label}: {err}")),
    };
    let until = rfc3339(info.not_after);
    if info.not_after <= now {
        return Check::new(
            "serving-certificate",
            Status::Fail,
            format!("{label}: expected a valid serving certificate, found it expired at {until}"),
        );
    }
    if info.not_before > now {
        return Check::new(
            "serving-certificate",
            Status::Fail,
            format!(
                "{label}: expected a valid serving certificate, found it valid only from {}",
                rfc3339(info.not_before)
            ),
        );
    }
    let days = (info.not_after - now).whole_days();
    if days < EXPIRY_WARNING_DAYS {
        return Check::new(
            "serving-certificate",
            Status::Warn,
            format!("{label}: expires at {until} ({days} days left): renewal is due"),
        );
    }
    Check::new(
        "serving-certificate",
        Status::Ok,
        format!("{label}: valid until {until} ({days} days left)"),
    )
}

fn services(facts: &Facts) -> Check {
    let refs = facts.service_refs();
    if refs.is_empty() {
        let urls: Vec<String> = facts
            .hooks()
            .iter()
            .flat_map(|h| h.hooks.iter().filter_map(|(_, c)| c.url.clone()))
            .collect();
        return Check::new(
            "service",
            Status::Ok,
            if urls.is_empty() {
                String::from("no webhook names a Service: nothing to check")
            } else {
                format!("webhooks are reached by url ({}): no Service to check", urls.join(", "))
            },
        );
    }
    let mut problems = Vec::new();
    let mut fine = Vec::new();
    for (namespace, name) in refs {
        let label = format!("Service {namespace}/{name}");
        let Some(service) = facts.services.get(&(namespace.clone(), name.clone())) else {
            problems.push(format!("{label}: not read"));
            continue;
        };
        match &service.service {
            Err(err) => {
                problems.push(format!("{label}: cannot read it: {err}"));
                continue;
            }
            Ok(None) => {
                problems.push(format!("{label}: expected it to exist, found none"));
                continue;
            }
            Ok(Some(_)) => {}
        }
        let ready = match &service.endpoint_slices {
            Err(err) => {
                problems.push(format!("{label}: cannot list its EndpointSlices: {err}"));
                continue;
            }
            Ok(slices) => ready_endpoints(slices),
        };
        if ready == 0 {
            problems.push(format!(
                "{label}: expected a ready endpoint (a running injector replica), found none"
            ));
        } else {
            fine.push(format!("{label}: {ready} ready endpoint(s)"));
        }
    }
    if problems.is_empty() {
        Check::new("service", Status::Ok, fine.join("; "))
    } else {
        Check::new("service", Status::Fail, problems.join("; "))
    }
}

/// Ready addresses over every slice (an endpoint without conditions counts as ready, as
/// the API documents).
pub fn ready_endpoints(slices: &[EndpointSlice]) -> usize {
    slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .map(|e| e.addresses.len())
        .sum()
}

/// The templates of the live ConfigMap as the injector serves them, and the values in
/// them the API server would refuse: templates the injector loaded before it checked
/// values are served on, and fail the `templates` line.
pub struct Live {
    pub set: TemplateSet,
    pub refused: Option<String>,
}

/// The templates of the ConfigMap, or why there are none (shared with the decisions).
pub fn live_templates(facts: &Facts) -> Result<Live, String> {
    templates_of(&facts.namespace, &facts.configmap, facts.kube_version)
}

/// The templates of `configmap` (the `envoy-injector` ConfigMap of `namespace`, as read),
/// checked for `version`, or why there are none (`rollout` reads them alike).
pub fn templates_of(namespace: &str, configmap: &Fetched<ConfigMap>, version: KubeVersion) -> Result<Live, String> {
    let name = crate::NAME;
    match configmap {
        Err(err) => Err(format!("cannot read ConfigMap {namespace}/{name}: {err}")),
        // What that does depends on what is installed: the `templates` line says it.
        Ok(None) => Err(format!("expected ConfigMap {namespace}/{name}, found none")),
        Ok(Some(configmap)) => {
            let source = format!("{namespace}/{name}");
            let data = configmap.data.clone().unwrap_or_default();
            match TemplateSet::from_data_keeping(&source, &data, version) {
                Ok((set, refused)) => Ok(Live {
                    set,
                    refused: refused.map(|e| e.to_string()),
                }),
                Err(err) => Err(format!("{err}; the injector keeps its last good templates")),
            }
        }
    }
}

fn templates_check(facts: &Facts, templates: &Result<Live, String>, policies: PoliciesFound) -> Check {
    let (namespace, version) = (&facts.namespace, facts.kube_version);
    match templates {
        Err(why) if matches!(facts.configmap, Ok(None)) => Check::new(
            "templates",
            Status::Fail,
            format!("{why}: {}", without_configmap(facts, policies)),
        ),
        Err(why) => Check::new("templates", Status::Fail, why.as_str()),
        Ok(Live {
            refused: Some(refused), ..
        }) => Check::new(
            "templates",
            Status::Fail,
            format!(
                "{refused}: the API server (Kubernetes {version}) refuses every Pod injected with these values; an injector that loaded them before it checked values serves them on, and refuses an edit that keeps them: fix the values"
            ),
        ),
        Ok(Live { set, refused: None }) => {
            let names: Vec<String> = set
                .names()
                .filter_map(|n| set.get(n))
                .map(|t| format!("`{}` (revision {})", t.name, t.revision))
                .collect();
            Check::new(
                "templates",
                Status::Ok,
                format!("ConfigMap {namespace}/{}: templates {}", crate::NAME, names.join(", ")),
            )
        }
    }
}

/// What a missing ConfigMap does, by what is installed to act on Pods: the webhook
/// configuration sends opted-in Pods to an injector that has no templates to give them,
/// while admission policies act with those they were compiled from.
fn without_configmap(facts: &Facts, policies: PoliciesFound) -> &'static str {
    if !matches!(facts.mutating, Some((_, Ok(None)))) {
        // It exists, or was not read: Pods may be sent to the injector.
        return "opted-in Pods the API server sends to the injector are denied until it exists";
    }
    match policies {
        PoliciesFound::None => {
            "no Pod is injected or denied for want of it, as neither the webhook configuration (see `mutating-webhook`) nor an admission policy of the injector is installed"
        }
        PoliciesFound::Some => {
            "no Pod is sent to the injector (see `mutating-webhook`); the admission policies found act with the templates they were compiled from (see `admission-policies`)"
        }
        PoliciesFound::Unknown => {
            "no Pod is sent to the injector (see `mutating-webhook`); whether admission policies act is not known (see `admission-policies`)"
        }
    }
}

fn lease_check(namespace: &str, name: &str, lease: &Fetched<Lease>, now: OffsetDateTime) -> Check {
    let label = format!("Lease {namespace}/{name}");
    let lease = match lease {
        Err(err) => return Check::new("lease", Status::Fail, format!("cannot read {label}: {err}")),
        Ok(None) => {
            return Check::new(
                "lease",
                Status::Fail,
                format!(
                    "expected {label}, found none: no replica has run the Network controller (with `serve --leader-elect=false` there is none: pass --lease-name \"\")"
                ),
            );
        }
        Ok(Some(lease)) => lease,
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let Some(holder) = spec.holder_identity.filter(|h| !h.is_empty()) else {
        return Check::new(
            "lease",
            Status::Fail,
            format!("{label}: expected a holder, found none: no replica runs the Network controller"),
        );
    };
    let renewed = spec
        .renew_time
        .or(spec.acquire_time)
        .and_then(|t| OffsetDateTime::from_unix_timestamp(t.0.as_second()).ok());
    let duration = time::Duration::seconds(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    match renewed {
        Some(renewed) if renewed + duration >= now => Check::new(
            "lease",
            Status::Ok,
            format!("{label}: held by `{holder}` (renewed at {})", rfc3339(renewed)),
        ),
        Some(renewed) => Check::new(
            "lease",
            Status::Fail,
            format!(
                "{label}: expected `{holder}` to keep renewing it, found it expired at {}: no replica runs the Network controller",
                rfc3339(renewed + duration)
            ),
        ),
        None => Check::new(
            "lease",
            Status::Fail,
            format!("{label}: held by `{holder}` but never renewed"),
        ),
    }
}

#[cfg(test)]
mod tests;
