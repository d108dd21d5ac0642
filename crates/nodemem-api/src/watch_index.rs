//! How an in-memory index learns from a watch, once for every index (the agent's
//! [`NodeIndex`](crate::node_index::NodeIndex), the controller's world): objects
//! applied and deleted one by one, and a relist that names every object there is, so
//! that one deleted while the watch was away is forgotten (as kubert's index does).
//!
//! kube-runtime's watcher delivers a relist as `Init`, `InitApply` for each object,
//! `InitDone`; [`Watched`] turns those events into calls of [`WatchIndex`] and says what
//! changed.

use std::collections::BTreeSet;
use std::marker::PhantomData;

use kube::runtime::watcher::Event;

/// An index of the objects of kind `K`.
pub trait WatchIndex<K> {
    /// What names an object in a relist (a name, or a uid where names are reused).
    fn key(object: &K) -> Option<String>;
    /// The object was created or changed; true when anything the index's readers
    /// read changed.
    fn upsert(&mut self, object: &K) -> bool;
    /// The object was deleted; true when the index held it.
    fn delete(&mut self, object: &K) -> bool;
    /// A relist finished and `listed` are the keys of every object there is: any other
    /// is gone. True when any was.
    fn relisted(&mut self, listed: &BTreeSet<String>) -> bool;
}

/// What one watch event changed in the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Learned {
    /// Nothing the index keeps.
    Nothing,
    /// One object, created, changed or deleted: its key.
    Object(String),
    /// The index as a whole: an object changed during a relist, or a relist finished
    /// (the objects it listed were not passed on one by one).
    Whole,
}

/// One watch's progress: the relist under way, and whether a list has completed.
#[derive(Debug)]
pub struct Watched<K> {
    relisting: Option<BTreeSet<String>>,
    listed: bool,
    kind: PhantomData<fn(K)>,
}

impl<K> Default for Watched<K> {
    fn default() -> Self {
        Watched {
            relisting: None,
            listed: false,
            kind: PhantomData,
        }
    }
}

impl<K> Watched<K> {
    /// A list has completed and no relist is under way: the index holds the objects.
    pub fn listed(&self) -> bool {
        self.listed && self.relisting.is_none()
    }

    /// Feeds one watch event to `index`.
    pub fn learn<I: WatchIndex<K>>(&mut self, index: &mut I, event: Event<K>) -> Learned {
        match event {
            Event::Apply(object) => {
                let key = I::key(&object);
                match (index.upsert(&object), key) {
                    (true, Some(key)) => Learned::Object(key),
                    (true, None) => Learned::Whole,
                    (false, _) => Learned::Nothing,
                }
            }
            Event::Delete(object) => {
                let key = I::key(&object);
                match (index.delete(&object), key) {
                    (true, Some(key)) => Learned::Object(key),
                    (true, None) => Learned::Whole,
                    (false, _) => Learned::Nothing,
                }
            }
            Event::Init => {
                self.relisting = Some(BTreeSet::new());
                Learned::Nothing
            }
            Event::InitApply(object) => {
                if let (Some(seen), Some(key)) = (&mut self.relisting, I::key(&object)) {
                    seen.insert(key);
                }
                if index.upsert(&object) {
                    Learned::Whole
                } else {
                    Learned::Nothing
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.relisting.take() {
                    index.relisted(&seen);
                }
                self.listed = true;
                Learned::Whole
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Objects are (key, value) pairs.
    #[derive(Default)]
    struct Store(BTreeMap<String, u32>);

    impl WatchIndex<(&'static str, u32)> for Store {
        fn key(object: &(&'static str, u32)) -> Option<String> {
            Some(object.0.to_string())
        }
        fn upsert(&mut self, (key, value): &(&'static str, u32)) -> bool {
            self.0.insert(key.to_string(), *value) != Some(*value)
        }
        fn delete(&mut self, (key, _): &(&'static str, u32)) -> bool {
            self.0.remove(*key).is_some()
        }
        fn relisted(&mut self, listed: &BTreeSet<String>) -> bool {
            let before = self.0.len();
            self.0.retain(|k, _| listed.contains(k));
            self.0.len() != before
        }
    }

    #[test]
    fn a_relist_forgets_what_was_deleted_while_the_watch_was_away() {
        let mut store = Store::default();
        let mut watched = Watched::default();
        assert!(!watched.listed());
        for event in [
            Event::Init,
            Event::InitApply(("a", 1)),
            Event::InitApply(("b", 1)),
        ] {
            watched.learn(&mut store, event);
            assert!(!watched.listed(), "not before InitDone");
        }
        assert_eq!(watched.learn(&mut store, Event::InitDone), Learned::Whole);
        assert!(watched.listed());
        assert_eq!(
            watched.learn(&mut store, Event::Apply(("a", 2))),
            Learned::Object("a".into())
        );
        assert_eq!(
            watched.learn(&mut store, Event::Apply(("a", 2))),
            Learned::Nothing
        );
        // The watch is away while b is deleted; the relist lists a only.
        watched.learn(&mut store, Event::Init);
        assert!(!watched.listed(), "relisting");
        assert_eq!(
            watched.learn(&mut store, Event::InitApply(("a", 2))),
            Learned::Nothing
        );
        assert_eq!(
            watched.learn(&mut store, Event::InitApply(("c", 5))),
            Learned::Whole
        );
        watched.learn(&mut store, Event::InitDone);
        assert_eq!(store.0.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(
            watched.learn(&mut store, Event::Delete(("c", 5))),
            Learned::Object("c".into())
        );
        assert_eq!(
            watched.learn(&mut store, Event::Delete(("c", 5))),
            Learned::Nothing
        );
    }
}
