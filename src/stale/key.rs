//! Compact keys of the trackers (`stale`, `uninjected`): a Pod uid as 16 bytes, and the
//! strings they hold (template names, revisions, namespaces) interned once each.

use std::collections::HashMap;
use std::sync::Arc;

/// A uid as 16 bytes: Kubernetes uids are UUIDs; anything else is hashed.
pub(crate) fn uid_key(uid: &str) -> u128 {
    let hex: String = uid.chars().filter(|c| *c != '-').collect();
    if hex.len() == 32
        && let Ok(value) = u128::from_str_radix(&hex, 16)
    {
        return value;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, uid.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    u128::from_be_bytes(bytes)
}

/// Strings seen (template names, revisions; namespaces in `uninjected`), each stored once.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

impl Interner {
    pub(crate) fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        let name: Arc<str> = Arc::from(name);
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }

    /// The id of a string seen before.
    pub(crate) fn find(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map(|n| &**n).unwrap_or_default()
    }

    pub(crate) fn shared(&self, id: u32) -> Arc<str> {
        self.names.get(id as usize).cloned().unwrap_or_else(|| Arc::from(""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_sixteen_bytes_and_others_are_hashed() {
        assert_eq!(uid_key("00000000-0000-0000-0000-00000000000a"), 10);
        assert_ne!(uid_key("not-a-uuid"), uid_key("not-a-uuid-either"));
    }
}
