//! The live template set, swapped whole on reload and read lock-free-ish by admission.

use std::sync::{Arc, RwLock};

use crate::template::TemplateSet;

/// Holds the template set admission uses now. A reload replaces the `Arc` in one step,
/// so a request sees either the old set or the new one, never a mix.
#[derive(Debug, Default)]
pub struct LiveTemplates {
    current: RwLock<Option<Arc<TemplateSet>>>,
}

impl LiveTemplates {
    pub fn new(initial: Option<TemplateSet>) -> LiveTemplates {
        LiveTemplates {
            current: RwLock::new(initial.map(Arc::new)),
        }
    }

    /// The live set, or `None` before the first successful load.
    pub fn current(&self) -> Option<Arc<TemplateSet>> {
        // A poisoned lock only means a writer panicked mid-swap of an Arc, which cannot
        // leave the Option half-written: keep serving what is there.
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn replace(&self, set: TemplateSet) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(set));
    }

    pub fn is_loaded(&self) -> bool {
        self.current.read().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}
