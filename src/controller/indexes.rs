//! The controller's indexes, kept current by the cache from every event of its Network and
//! member-Pod watches (the cache sees them through [`Follower`], and names no type of
//! ours), and the reconcile requests their changes raise.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;

use super::queue::Pending;
use crate::cache::{Follower, Followers, PodIndexWatch};
use crate::inject::join::NETWORK_LABEL;
use crate::network::crd::Network;
use crate::network::members::{self, MemberIndex};
use crate::network::overlaps::OverlapIndex;

/// Overlaps, member Pods, and the Networks their changes ask to reconcile.
#[derive(Clone, Default)]
pub struct Indexes {
    pub overlaps: Arc<OverlapIndex>,
    pub members: Arc<MemberIndex>,
    pub pending: Arc<Pending>,
}

impl Indexes {
    /// What the cache follows its watches with: the Networks into the overlap index, and a
    /// watch of member Pods' metadata kept as nothing but the member index.
    pub fn followers(&self) -> Followers {
        let this = Arc::new(self.clone());
        let members = self.members.clone();
        Followers {
            networks: this.clone(),
            member_pods: PodIndexWatch {
                labels: NETWORK_LABEL,
                fields: members::NOT_TERMINAL,
                index: this,
                count: Arc::new(move || members.len()),
            },
        }
    }
}

impl Follower<Network> for Indexes {
    fn observe(&self, event: &Event<Network>) {
        self.pending.push(self.overlaps.apply(event));
    }
}

impl Follower<PartialObjectMeta<Pod>> for Indexes {
    fn observe(&self, event: &Event<PartialObjectMeta<Pod>>) {
        self.pending.push(self.members.apply(event));
    }
}
