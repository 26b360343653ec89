//! The one relist-and-swap rule of every index kept from a watch (the CIDR overlaps, the
//! member Pods, the owned NADs, the stale-sidecar tracker).
//!
//! A watcher lists as `Init`, `InitApply`…, `InitDone`, after a start and after every
//! watch it could not resume. The index builds a fresh copy from the `InitApply`s while
//! its readers keep the old one, and swaps the copy in whole at `InitDone`, as the
//! kube-runtime reflector swaps its store: what the list no longer holds is gone then, and
//! a half-done list is never read. `Apply` and `Delete` change the live copy directly,
//! also during a relist (the watcher sends none then; were one sent, the swap would undo
//! it). Pure: no I/O, no lock; the index that holds a [`Relisting`] locks it.

use kube::runtime::watcher::Event;

/// An index's live state and, during a relist, the fresh copy being built.
#[derive(Debug, Default)]
pub struct Relisting<T> {
    live: T,
    fresh: Option<T>,
}

/// What one watcher event asks of the index, with the copy it applies to.
#[derive(Debug)]
pub enum Step<'a, K, T> {
    /// `Apply`: the object as it is now, for the live copy.
    Apply(&'a K, &'a mut T),
    /// `Delete`: the object is gone, from the live copy.
    Delete(&'a K, &'a mut T),
    /// `InitApply` during a relist: for the fresh copy, which no reader sees yet.
    Listed(&'a K, &'a mut T),
    /// `InitDone` of a relist: the fresh copy is `live` now; `previous` is the copy it
    /// replaced, to tell what the relist changed.
    Swapped { previous: T, live: &'a T },
    /// `Init` (an empty fresh copy is started, replacing one in progress), or an
    /// `InitApply` or `InitDone` with no relist in progress: nothing for the index to do.
    Nothing,
}

impl<T: Default> Relisting<T> {
    pub fn new() -> Relisting<T> {
        Relisting::default()
    }

    /// The copy readers see.
    pub fn live(&self) -> &T {
        &self.live
    }

    /// The copy readers see, for changes that come from elsewhere than the watch (a write
    /// of our own, recorded before its event arrives).
    pub fn live_mut(&mut self) -> &mut T {
        &mut self.live
    }

    /// Between `Init` and `InitDone`.
    pub fn is_relisting(&self) -> bool {
        self.fresh.is_some()
    }

    /// Moves the state machine on by one event and says what is left for the index to do.
    pub fn step<'a, K>(&'a mut self, event: &'a Event<K>) -> Step<'a, K, T> {
        match event {
            Event::Apply(object) => Step::Apply(object, &mut self.live),
            Event::Delete(object) => Step::Delete(object, &mut self.live),
            Event::Init => {
                self.fresh = Some(T::default());
                Step::Nothing
            }
            Event::InitApply(object) => match self.fresh.as_mut() {
                Some(fresh) => Step::Listed(object, fresh),
                None => Step::Nothing,
            },
            Event::InitDone => match self.fresh.take() {
                Some(fresh) => Step::Swapped {
                    previous: std::mem::replace(&mut self.live, fresh),
                    live: &self.live,
                },
                None => Step::Nothing,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    type Map = BTreeMap<&'static str, i32>;

    /// A minimal index over `(key, value)` objects; returns the keys a swap changed.
    fn feed(index: &mut Relisting<Map>, event: Event<(&'static str, i32)>) -> Vec<&'static str> {
        match index.step(&event) {
            Step::Apply((key, value), live) | Step::Listed((key, value), live) => {
                live.insert(*key, *value);
                Vec::new()
            }
            Step::Delete((key, _), live) => {
                live.remove(key);
                Vec::new()
            }
            Step::Swapped { previous, live } => {
                let mut keys: Vec<&str> = previous.keys().chain(live.keys()).copied().collect();
                keys.sort_unstable();
                keys.dedup();
                keys.retain(|key| previous.get(key) != live.get(key));
                keys
            }
            Step::Nothing => Vec::new(),
        }
    }

    fn listed(objects: &[(&'static str, i32)]) -> Relisting<Map> {
        let mut index = Relisting::new();
        feed(&mut index, Event::Init);
        for object in objects {
            feed(&mut index, Event::InitApply(*object));
        }
        feed(&mut index, Event::InitDone);
        index
    }

    #[test]
    fn a_relist_swaps_in_what_it_listed_and_names_what_moved() {
        let mut index = listed(&[("kept", 1), ("changed", 2), ("removed", 3)]);
        feed(&mut index, Event::Init);
        feed(&mut index, Event::InitApply(("kept", 1)));
        feed(&mut index, Event::InitApply(("changed", 20)));
        feed(&mut index, Event::InitApply(("added", 4)));
        assert!(index.is_relisting());
        assert_eq!(
            index.live(),
            &Map::from([("kept", 1), ("changed", 2), ("removed", 3)]),
            "the old copy serves until InitDone"
        );
        assert_eq!(feed(&mut index, Event::InitDone), ["added", "changed", "removed"]);
        assert!(!index.is_relisting());
        assert_eq!(index.live(), &Map::from([("kept", 1), ("changed", 20), ("added", 4)]));
    }

    #[test]
    fn apply_and_delete_change_the_live_copy_and_a_relist_replaces_them() {
        let mut index = listed(&[("a", 1), ("b", 2)]);
        feed(&mut index, Event::Init);
        feed(&mut index, Event::InitApply(("a", 1)));
        feed(&mut index, Event::Apply(("c", 3)));
        feed(&mut index, Event::Delete(("b", 2)));
        assert_eq!(index.live(), &Map::from([("a", 1), ("c", 3)]), "seen at once");
        // The list did not hold them: the swap drops `c` and brings nothing back of `b`.
        assert_eq!(feed(&mut index, Event::InitDone), ["c"]);
        assert_eq!(index.live(), &Map::from([("a", 1)]));
    }

    #[test]
    fn a_second_init_starts_the_fresh_copy_over() {
        let mut index = listed(&[("a", 1)]);
        feed(&mut index, Event::Init);
        feed(&mut index, Event::InitApply(("half", 9)));
        feed(&mut index, Event::Init);
        feed(&mut index, Event::InitApply(("a", 1)));
        assert!(feed(&mut index, Event::InitDone).is_empty());
        assert_eq!(index.live(), &Map::from([("a", 1)]));
    }

    #[test]
    fn list_events_without_an_init_change_nothing() {
        let mut index = listed(&[("a", 1)]);
        assert!(feed(&mut index, Event::InitApply(("stray", 5))).is_empty());
        assert!(feed(&mut index, Event::InitDone).is_empty());
        assert_eq!(index.live(), &Map::from([("a", 1)]));
        // An empty list empties the index.
        let mut index = listed(&[("a", 1)]);
        feed(&mut index, Event::Init);
        assert_eq!(feed(&mut index, Event::InitDone), ["a"]);
        assert!(index.live().is_empty());
    }
}
