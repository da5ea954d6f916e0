//! The watcher's relist protocol, written once for every kind the operator watches
//! (EtcdCluster, EtcdBackup, EtcdRestore): which objects exist, from the events of a watch
//! stream, and what their owner does on each event. Pure: the owner
//! ([`crate::children::Children`]) applies the [`Change`]s to its actors, and the roster
//! asks it which objects it runs ([`Live`]) rather than keeping the same keys again.
//!
//! The objects listed between [`WatchEvent::RelistStarted`] and [`WatchEvent::RelistDone`]
//! are the whole truth: an object missing from a relist is gone. Nothing is applied before
//! the first list is complete, and a change that arrives during a relist waits for its end.

use std::collections::{BTreeMap, BTreeSet};

/// One event of a watch stream, reduced to the object's key and what the owner needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent<K, V> {
    /// A full (re)list begins.
    RelistStarted,
    /// An object that is part of the list.
    Relisted(K, V),
    /// The list is complete: objects not listed are gone.
    RelistDone,
    /// An object was created or changed.
    Applied(K, V),
    /// An object was deleted.
    Deleted(K),
}

impl<K: 'static, V: 'static> actix::Message for WatchEvent<K, V> {
    type Result = ();
}

/// What the owner does after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<K, V> {
    /// The object exists as `V`: start its actor, or tell the running one.
    Apply(K, V),
    /// The object is gone: retire its actor.
    Retire(K),
    /// A change came before the first list was complete, and is left out (the list will
    /// bring the object): for the owner's log.
    BeforeFirstList(K),
}

/// The objects an owner runs now (applied and not retired). The roster asks its owner
/// rather than keeping a copy of the same keys.
pub trait Live<K> {
    /// Whether `key` is applied and not retired.
    fn is_live(&self, key: &K) -> bool;
    /// Every live key, in order.
    fn live_keys(&self) -> Vec<K>;
}

impl<K: Ord + Clone, V> Live<K> for BTreeMap<K, V> {
    fn is_live(&self, key: &K) -> bool {
        self.contains_key(key)
    }

    fn live_keys(&self) -> Vec<K> {
        self.keys().cloned().collect()
    }
}

impl<K: Ord + Clone> Live<K> for BTreeSet<K> {
    fn is_live(&self, key: &K) -> bool {
        self.contains(key)
    }

    fn live_keys(&self) -> Vec<K> {
        self.iter().cloned().collect()
    }
}

/// Where the watch stands: whether the first list is complete, and the relist in progress.
#[derive(Debug)]
pub struct Roster<K, V> {
    /// The objects of the relist in progress, if one is.
    relist: Option<BTreeMap<K, V>>,
    /// The first list has completed.
    synced: bool,
}

impl<K: Ord + Clone, V> Default for Roster<K, V> {
    fn default() -> Self {
        Roster {
            relist: None,
            synced: false,
        }
    }
}

impl<K: Ord + Clone, V> Roster<K, V> {
    /// The first list has completed.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// A relist is in progress.
    pub fn relisting(&self) -> bool {
        self.relist.is_some()
    }

    /// Takes in one event, given what the owner runs now (`live`); returns what to do, in
    /// order. The owner applies every change before the next event.
    pub fn on(&mut self, event: WatchEvent<K, V>, live: &impl Live<K>) -> Vec<Change<K, V>> {
        match event {
            WatchEvent::RelistStarted => {
                self.relist = Some(BTreeMap::new());
                Vec::new()
            }
            WatchEvent::Relisted(key, value) => {
                let relist = self.relist.get_or_insert_with(BTreeMap::new);
                relist.insert(key, value);
                Vec::new()
            }
            WatchEvent::RelistDone => self.relist_done(live),
            WatchEvent::Applied(key, value) => match (&mut self.relist, self.synced) {
                (Some(pending), _) => {
                    pending.insert(key, value);
                    Vec::new()
                }
                (None, true) => vec![Change::Apply(key, value)],
                (None, false) => vec![Change::BeforeFirstList(key)],
            },
            WatchEvent::Deleted(key) => {
                if let Some(pending) = &mut self.relist {
                    pending.remove(&key);
                }
                if live.is_live(&key) {
                    vec![Change::Retire(key)]
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// The end of a list: every live object it did not list retires, then every listed
    /// object is applied.
    fn relist_done(&mut self, live: &impl Live<K>) -> Vec<Change<K, V>> {
        let listed = self.relist.take().unwrap_or_default();
        let mut changes: Vec<Change<K, V>> = live
            .live_keys()
            .into_iter()
            .filter(|key| !listed.contains_key(key))
            .map(Change::Retire)
            .collect();
        changes.extend(
            listed
                .into_iter()
                .map(|(key, value)| Change::Apply(key, value)),
        );
        self.synced = true;
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Event = WatchEvent<&'static str, u32>;

    /// A roster and what its owner runs, the owner applying every change.
    #[derive(Default)]
    struct Owner {
        roster: Roster<&'static str, u32>,
        live: BTreeSet<&'static str>,
    }

    impl Owner {
        fn on(&mut self, event: Event) -> Vec<Change<&'static str, u32>> {
            let changes = self.roster.on(event, &self.live);
            for change in &changes {
                match change {
                    Change::Apply(key, _) => {
                        self.live.insert(key);
                    }
                    Change::Retire(key) => {
                        self.live.remove(key);
                    }
                    Change::BeforeFirstList(_) => {}
                }
            }
            changes
        }

        fn live(&self) -> Vec<&'static str> {
            self.live.iter().copied().collect()
        }
    }

    fn run(owner: &mut Owner, events: Vec<Event>) -> Vec<Change<&'static str, u32>> {
        events.into_iter().flat_map(|e| owner.on(e)).collect()
    }

    #[test]
    fn nothing_is_applied_before_the_first_list_is_complete() {
        let mut roster = Owner::default();
        let changes = run(
            &mut roster,
            vec![
                WatchEvent::Applied("early", 1),
                WatchEvent::RelistStarted,
                WatchEvent::Relisted("a", 1),
                WatchEvent::Relisted("b", 2),
            ],
        );
        assert_eq!(changes, [Change::BeforeFirstList("early")]);
        assert!(!roster.roster.synced());
        assert_eq!(
            roster.on(WatchEvent::RelistDone),
            [Change::Apply("a", 1), Change::Apply("b", 2)]
        );
        assert!(roster.roster.synced());
        assert_eq!(roster.live(), ["a", "b"]);
    }

    #[test]
    fn an_object_missing_from_a_relist_is_retired_and_the_listed_ones_applied() {
        let mut roster = Owner::default();
        run(
            &mut roster,
            vec![
                WatchEvent::RelistStarted,
                WatchEvent::Relisted("a", 1),
                WatchEvent::Relisted("b", 1),
                WatchEvent::RelistDone,
            ],
        );
        let changes = run(
            &mut roster,
            vec![
                WatchEvent::RelistStarted,
                WatchEvent::Relisted("b", 2),
                WatchEvent::RelistDone,
            ],
        );
        assert_eq!(changes, [Change::Retire("a"), Change::Apply("b", 2)]);
        assert_eq!(roster.live(), ["b"]);
    }

    #[test]
    fn a_change_during_a_relist_waits_for_its_end_and_a_deletion_cancels_it() {
        let mut roster = Owner::default();
        run(
            &mut roster,
            vec![WatchEvent::RelistStarted, WatchEvent::RelistDone],
        );
        let during = run(
            &mut roster,
            vec![
                WatchEvent::RelistStarted,
                WatchEvent::Applied("a", 1),
                WatchEvent::Applied("b", 1),
                WatchEvent::Deleted("b"),
            ],
        );
        assert_eq!(during, []);
        assert!(roster.roster.relisting());
        assert_eq!(roster.on(WatchEvent::RelistDone), [Change::Apply("a", 1)]);
    }

    #[test]
    fn after_the_first_list_changes_apply_at_once_and_deletions_retire_only_live_objects() {
        let mut roster = Owner::default();
        run(
            &mut roster,
            vec![WatchEvent::RelistStarted, WatchEvent::RelistDone],
        );
        assert_eq!(
            roster.on(WatchEvent::Applied("a", 1)),
            [Change::Apply("a", 1)]
        );
        assert_eq!(
            roster.on(WatchEvent::Applied("a", 2)),
            [Change::Apply("a", 2)]
        );
        assert_eq!(roster.on(WatchEvent::Deleted("a")), [Change::Retire("a")]);
        assert_eq!(roster.on(WatchEvent::Deleted("a")), []);
    }
}
