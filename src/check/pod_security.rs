//! A Pod's `pod security` lines: the level its namespace's `pod-security.kubernetes.io/*`
//! labels ask for (enforce, warn, audit) and whether what its template adds meets each,
//! field by field, judged by `template::pod_security` with the Pod's own securityContext.
//! Pure: the namespace's labels come from what `check` listed (or the file declares).

use crate::check::report::{ModeReport, NamespaceLabels, PodSecurityReport};
use crate::cluster::snapshot::{Snapshot, Subject};
use crate::template::Template;
use crate::template::pod_security::{self, NamespacePolicy, PodLevel};

/// What `template`'s additions do to the level `subject`'s namespace asks for. `offline`:
/// no cluster was consulted, so a namespace the file does not declare has labels no one
/// knows (with a cluster, one not listed was not found).
pub fn judge(subject: &Subject, template: &Template, snapshot: &Snapshot, offline: bool) -> PodSecurityReport {
    let listed = snapshot.namespaces.get(&subject.namespace);
    let labels = match (listed, offline) {
        (Some(_), _) => NamespaceLabels::Known,
        (None, true) => NamespaceLabels::Unknown,
        (None, false) => NamespaceLabels::NotFound,
    };
    let policy = NamespacePolicy::from_labels(&listed.cloned().unwrap_or_default());
    let pod = PodLevel::from_pod(&subject.pod);
    let name = template.name.as_str();
    let modes = match labels {
        NamespaceLabels::Unknown => Vec::new(),
        NamespaceLabels::Known | NamespaceLabels::NotFound => policy
            .modes()
            .into_iter()
            .map(|mode| {
                let findings = pod_security::judge(name, &template.spec, mode.applied, Some(&pod));
                ModeReport {
                    policy: mode.clone(),
                    met: findings.is_empty(),
                    findings,
                }
            })
            .collect(),
    };
    PodSecurityReport {
        namespace: subject.namespace.clone(),
        labels,
        modes,
        template: name.to_string(),
        meets: pod_security::strictest_met(name, &template.spec, policy.enforce.applied.version, Some(&pod)),
    }
}
