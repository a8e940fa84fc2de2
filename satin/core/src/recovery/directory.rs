//! The directory: which member holds (or is computing) which result.
//!
//! Filled from the announcements of other members (the journal's
//! `(jobID, processorID)` tuples); this member's own results are in its
//! [store](super::store) and take precedence at lookup time.

use std::collections::BTreeMap;

use crate::key::JobKey;
use crate::topology::NodeId;

/// Where a result is: its holder and whether it is still being computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    /// The member that holds (or computes) it.
    pub(crate) holder: NodeId,
    /// `true` while the holder is still computing it (an orphan).
    pub(crate) pending: bool,
}

/// Key -> location, at most `capacity` keys.
#[derive(Debug, Clone)]
pub(crate) struct Directory {
    capacity: usize,
    entries: BTreeMap<JobKey, Location>,
}

impl Directory {
    /// An empty directory of at most `capacity` keys.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: BTreeMap::new(),
        }
    }

    /// Records that `holder` has `key` (or is computing it if `pending`). A done
    /// entry replaces a pending one; an existing done entry is kept (any holder
    /// will do). Returns `false` if the entry was dropped because the directory
    /// is full.
    pub(crate) fn learn(&mut self, key: JobKey, holder: NodeId, pending: bool) -> bool {
        let full = self.entries.len() >= self.capacity;
        match self.entries.get_mut(&key) {
            Some(loc) => {
                if loc.pending && (!pending || loc.holder == holder) {
                    *loc = Location { holder, pending };
                }
                true
            }
            None if !full => {
                self.entries.insert(key, Location { holder, pending });
                true
            }
            None => false,
        }
    }

    /// Where `key` is, if known.
    pub(crate) fn get(&self, key: &JobKey) -> Option<Location> {
        self.entries.get(key).copied()
    }

    /// Forgets every entry held by `holder` (it died).
    pub(crate) fn forget_holder(&mut self, holder: NodeId) {
        self.entries.retain(|_, loc| loc.holder != holder);
    }

    /// Forgets `key` if `holder` is where it was said to be (it had nothing).
    pub(crate) fn forget(&mut self, key: &JobKey, holder: NodeId) {
        if self.entries.get(key).is_some_and(|l| l.holder == holder) {
            self.entries.remove(key);
        }
    }

    /// Number of keys known.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is known.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> JobKey {
        JobKey([i; 16])
    }

    #[test]
    fn done_replaces_pending_but_not_the_other_way_round() {
        let mut d = Directory::new(10);
        d.learn(k(1), NodeId(1), true);
        d.learn(k(1), NodeId(2), true);
        // The first pending holder stays: a second pending one is no better.
        assert_eq!(
            d.get(&k(1)),
            Some(Location {
                holder: NodeId(1),
                pending: true
            })
        );
        d.learn(k(1), NodeId(2), false);
        assert_eq!(
            d.get(&k(1)),
            Some(Location {
                holder: NodeId(2),
                pending: false
            })
        );
        d.learn(k(1), NodeId(3), true);
        d.learn(k(1), NodeId(3), false);
        assert_eq!(
            d.get(&k(1)),
            Some(Location {
                holder: NodeId(2),
                pending: false
            })
        );
    }

    #[test]
    fn the_same_holder_finishing_turns_pending_into_done() {
        let mut d = Directory::new(10);
        d.learn(k(1), NodeId(1), true);
        d.learn(k(1), NodeId(1), false);
        assert_eq!(
            d.get(&k(1)),
            Some(Location {
                holder: NodeId(1),
                pending: false
            })
        );
    }

    #[test]
    fn capacity_bounds_the_keys_and_forgetting_frees_room() {
        let mut d = Directory::new(2);
        assert!(d.learn(k(1), NodeId(1), false));
        assert!(d.learn(k(2), NodeId(2), false));
        assert!(!d.learn(k(3), NodeId(1), false));
        assert_eq!(d.len(), 2);
        d.forget_holder(NodeId(1));
        assert!(d.get(&k(1)).is_none());
        assert!(d.learn(k(3), NodeId(1), false));
        d.forget(&k(2), NodeId(7));
        assert!(
            d.get(&k(2)).is_some(),
            "only the holder's entry is forgotten"
        );
        d.forget(&k(2), NodeId(2));
        assert!(d.get(&k(2)).is_none());
    }
}
