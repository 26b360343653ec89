//! The live template set, swapped whole on reload and read lock-free-ish by admission;
//! `reload` builds it anew from each change of the ConfigMap.

pub mod reload;

use std::sync::{Arc, RwLock};

use crate::template::TemplateSet;

/// Holds the template set admission uses now. A reload replaces the `Arc` in one step,
/// so a request sees either the old set or the new one, never a mix.
#[derive(Debug)]
pub struct LiveTemplates {
    current: RwLock<Option<Arc<TemplateSet>>>,
    /// Counts the swaps, for whoever follows the live set (the policy sync).
    swaps: tokio::sync::watch::Sender<u64>,
}

impl Default for LiveTemplates {
    fn default() -> LiveTemplates {
        LiveTemplates::new(None)
    }
}

impl LiveTemplates {
    pub fn new(initial: Option<TemplateSet>) -> LiveTemplates {
        LiveTemplates {
            current: RwLock::new(initial.map(Arc::new)),
            swaps: tokio::sync::watch::Sender::new(0),
        }
    }

    /// A receiver that sees each swap of the live set (marked seen when subscribed).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.swaps.subscribe()
    }

    /// The live set, or `None` before the first successful load.
    pub fn current(&self) -> Option<Arc<TemplateSet>> {
        // A poisoned lock only means a writer panicked mid-swap of an Arc, which cannot
        // leave the Option half-written: keep serving what is there.
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn replace(&self, set: TemplateSet) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(set));
        self.swaps.send_modify(|n| *n += 1);
    }

    pub fn is_loaded(&self) -> bool {
        self.current.read().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}
