//! The one rule of an uninjected Pod, over its metadata. Pure.

use kube::api::ObjectMeta;

use crate::inject::policy::{self, MetaMap, PodMeta};
use crate::inject::{AnnotationOptIn, NamespaceOptIn, OptIn};

/// What a Pod's own metadata says about its injection, before its namespace is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Opted in by its own annotation: it should carry the sidecar wherever it runs.
    Own(OptIn),
    /// No annotation either way: it should carry the sidecar when its namespace is labelled.
    FollowsNamespace,
}

impl Standing {
    /// How the Pod is opted in under its namespace's label; `None`: it is not.
    pub fn under(self, namespace: NamespaceOptIn) -> Option<OptIn> {
        match self {
            Standing::Own(opt_in) => Some(opt_in),
            Standing::FollowsNamespace => (namespace == NamespaceOptIn::Labeled).then_some(OptIn::NamespaceLabel),
        }
    }
}

/// A Pod's standing from its metadata; `None` when it never counts: it carries the
/// `status` annotation (injected), opts out, or is being deleted (its replacement is on
/// the way already).
/// `annotations` says whether the Pod's annotations opt it in.
pub fn standing(meta: &ObjectMeta, annotations: AnnotationOptIn) -> Option<Standing> {
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    let pod = PodMeta::new(
        meta.annotations.as_ref().map(|a| a as &dyn MetaMap),
        meta.labels.as_ref().map(|l| l as &dyn MetaMap),
    );
    // With the label assumed, `decide` answers for the Pod's own metadata alone.
    match policy::decide(pod, NamespaceOptIn::Labeled, annotations) {
        Ok(OptIn::NamespaceLabel) => Some(Standing::FollowsNamespace),
        Ok(own) => Some(Standing::Own(own)),
        Err(_) => None,
    }
}

/// The rule: how the Pod is opted in, when it is and carries no `status` annotation.
pub fn uninjected(meta: &ObjectMeta, namespace: NamespaceOptIn, annotations: AnnotationOptIn) -> Option<OptIn> {
    standing(meta, annotations)?.under(namespace)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::inject::{INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION};
    use crate::uninjected::fixtures::{IN, INJECTED, OUT, meta};

    #[test]
    fn the_rule_is_the_policy_with_the_namespace_label_applied_apart() {
        let labelled = NamespaceOptIn::Labeled;
        let plain = NamespaceOptIn::NotLabeled;
        // (annotations, opted in when labelled, when not)
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<OptIn>, Option<OptIn>);
        let cases: [Case; 7] = [
            (&[IN], Some(OptIn::Annotation), Some(OptIn::Annotation)),
            (
                &[(LEGACY_INJECT_ANNOTATION, "true")],
                Some(OptIn::LegacyAnnotation),
                Some(OptIn::LegacyAnnotation),
            ),
            (&[], Some(OptIn::NamespaceLabel), None),
            // An unreadable value opts nothing in by itself; the label still does.
            (&[(INJECT_ANNOTATION, "yes")], Some(OptIn::NamespaceLabel), None),
            // Opt-out wins over the label, and an injected Pod never counts.
            (&[OUT], None, None),
            (&[IN, INJECTED], None, None),
            (&[INJECTED], None, None),
        ];
        for (annotations, in_labelled, in_plain) in cases {
            let meta = meta("ns", annotations);
            assert_eq!(
                uninjected(&meta, labelled, AnnotationOptIn::On),
                in_labelled,
                "{annotations:?} in a labelled namespace"
            );
            assert_eq!(
                uninjected(&meta, plain, AnnotationOptIn::On),
                in_plain,
                "{annotations:?} in a plain namespace"
            );
        }
        let mut going = meta("ns", &[IN]);
        going.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            uninjected(&going, labelled, AnnotationOptIn::On),
            None,
            "a Pod being deleted is being replaced already"
        );
    }
}
