//! The bounded store of results this member computed for other members.
//!
//! Every result of a stolen job (and of an orphan) stays here after it was sent
//! home, so that a redo after a crash can fetch it instead of recomputing it. The
//! store holds at most a byte budget (result bytes plus [`ENTRY_OVERHEAD`] per
//! entry, so many tiny results are bounded too) and evicts the oldest entries
//! first: eviction only costs reuse, never correctness, because a fetch of an
//! evicted key is answered "not found" and the asker then runs the job itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::key::JobKey;
use crate::topology::NodeId;

/// Bytes charged to the budget per entry on top of its result: the key, the
/// eviction order and the map nodes, roughly.
pub const ENTRY_OVERHEAD: usize = 64;

/// What an entry with `len` result bytes costs against the budget.
fn cost(len: usize) -> usize {
    len.saturating_add(ENTRY_OVERHEAD)
}

/// One stored result.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The serialized result (shared, so a checkpoint snapshot costs no copy).
    pub(crate) bytes: Arc<[u8]>,
    /// The live owners the result was sent to; when one of them dies the key is
    /// announced (the owner's redo will need it). Sorted, without duplicates, and
    /// at most one per member.
    pub(crate) returned_to: Vec<NodeId>,
    /// Whether other members were told that we hold it.
    pub(crate) announced: bool,
    /// Position in the eviction order (larger is newer).
    seq: u64,
}

/// What [`Store::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// Stored (or refreshed); this many older entries were evicted to make room.
    Stored {
        /// Entries evicted.
        evicted: u64,
    },
    /// The result alone costs more than the whole budget: not stored.
    TooLarge,
}

/// Results keyed by [`JobKey`], bounded by a byte budget, oldest evicted first.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    budget: usize,
    bytes: usize,
    next_seq: u64,
    entries: BTreeMap<JobKey, Entry>,
    /// Eviction order: sequence number -> key.
    order: BTreeMap<u64, JobKey>,
}

impl Store {
    /// An empty store costing at most `budget` bytes (see [`ENTRY_OVERHEAD`]).
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            budget,
            bytes: 0,
            next_seq: 0,
            entries: BTreeMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// Stores `bytes` as the result of `key`. A key already stored keeps its bytes
    /// (same parameters, same result), gains `returned_to` and `announced`, and
    /// becomes the newest entry.
    pub(crate) fn insert(
        &mut self,
        key: JobKey,
        bytes: Vec<u8>,
        returned_to: Option<NodeId>,
        announced: bool,
    ) -> Inserted {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(e) = self.entries.get_mut(&key) {
            if let Some(owner) = returned_to {
                if let Err(i) = e.returned_to.binary_search(&owner) {
                    e.returned_to.insert(i, owner);
                }
            }
            e.announced |= announced;
            self.order.remove(&e.seq);
            e.seq = seq;
            self.order.insert(seq, key);
            return Inserted::Stored { evicted: 0 };
        }
        let size = cost(bytes.len());
        if size > self.budget {
            return Inserted::TooLarge;
        }
        let mut evicted = 0;
        while self.bytes + size > self.budget {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            if let Some(e) = self.entries.remove(&old) {
                self.bytes -= cost(e.bytes.len());
                evicted += 1;
            }
        }
        self.bytes += size;
        self.order.insert(seq, key);
        self.entries.insert(
            key,
            Entry {
                bytes: bytes.into(),
                returned_to: returned_to.into_iter().collect(),
                announced,
                seq,
            },
        );
        Inserted::Stored { evicted }
    }

    /// The stored result of `key`.
    pub(crate) fn get(&self, key: &JobKey) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// Drops the result of `key`; whether there was one.
    pub(crate) fn remove(&mut self, key: &JobKey) -> bool {
        let Some(e) = self.entries.remove(key) else {
            return false;
        };
        self.order.remove(&e.seq);
        self.bytes -= cost(e.bytes.len());
        true
    }

    /// `dead` died: forgets it as an owner, marks the not yet announced results
    /// returned to it announced and returns their keys (in key order).
    pub(crate) fn owner_died(&mut self, dead: NodeId) -> Vec<JobKey> {
        let mut keys = Vec::new();
        for (key, e) in &mut self.entries {
            if let Ok(i) = e.returned_to.binary_search(&dead) {
                e.returned_to.remove(i);
                if !e.announced {
                    e.announced = true;
                    keys.push(*key);
                }
            }
        }
        keys
    }

    /// `gone` left gracefully: it is no longer an owner of any result (nothing is
    /// announced: it will redo nothing).
    pub(crate) fn owner_left(&mut self, gone: NodeId) {
        for e in self.entries.values_mut() {
            if let Ok(i) = e.returned_to.binary_search(&gone) {
                e.returned_to.remove(i);
            }
        }
    }

    /// The keys other members were told about (in key order).
    pub(crate) fn announced_keys(&self) -> impl Iterator<Item = JobKey> + '_ {
        self.entries
            .iter()
            .filter(|(_, e)| e.announced)
            .map(|(k, _)| *k)
    }

    /// All entries as `(key, bytes)`, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (JobKey, &[u8])> + '_ {
        self.order
            .values()
            .filter_map(|k| self.entries.get(k).map(|e| (*k, &e.bytes[..])))
    }

    /// All entries as `(key, shared bytes)`, oldest first: no result is copied.
    pub(crate) fn snapshot(&self) -> Vec<(JobKey, Arc<[u8]>)> {
        self.iter_shared().collect()
    }

    fn iter_shared(&self) -> impl Iterator<Item = (JobKey, Arc<[u8]>)> + '_ {
        self.order
            .values()
            .filter_map(|k| self.entries.get(k).map(|e| (*k, e.bytes.clone())))
    }

    /// Empties the store, returning its entries oldest first.
    pub(crate) fn take_all(&mut self) -> Vec<(JobKey, Vec<u8>)> {
        let order = std::mem::take(&mut self.order);
        let mut entries = std::mem::take(&mut self.entries);
        self.bytes = 0;
        order
            .into_values()
            .filter_map(|k| entries.remove(&k).map(|e| (k, e.bytes.to_vec())))
            .collect()
    }

    /// Number of results stored.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is stored.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes charged to the budget: result bytes plus [`ENTRY_OVERHEAD`] per
    /// entry (never more than the budget).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> JobKey {
        JobKey([i; 16])
    }

    #[test]
    fn evicts_oldest_first_and_stays_within_budget() {
        let mut s = Store::new(2 * cost(4) + 2);
        assert_eq!(
            s.insert(k(1), vec![1; 4], None, false),
            Inserted::Stored { evicted: 0 }
        );
        assert_eq!(
            s.insert(k(2), vec![2; 4], None, false),
            Inserted::Stored { evicted: 0 }
        );
        // Three entries of 4 do not fit: the oldest (k1) goes.
        assert_eq!(
            s.insert(k(3), vec![3; 4], None, false),
            Inserted::Stored { evicted: 1 }
        );
        assert!(s.get(&k(1)).is_none());
        assert_eq!(s.bytes(), 2 * cost(4));
        // Re-storing k2 makes it the newest: k3 goes next.
        s.insert(k(2), vec![2; 4], Some(NodeId(5)), false);
        assert_eq!(
            s.insert(k(4), vec![4; 4], None, false),
            Inserted::Stored { evicted: 1 }
        );
        assert!(s.get(&k(3)).is_none());
        assert_eq!(s.get(&k(2)).unwrap().returned_to, vec![NodeId(5)]);
        let order: Vec<JobKey> = s.iter().map(|(k, _)| k).collect();
        assert_eq!(order, vec![k(2), k(4)]);
    }

    #[test]
    fn a_result_larger_than_the_budget_is_not_stored_and_evicts_nothing() {
        let mut s = Store::new(cost(10));
        s.insert(k(1), vec![1; 6], None, false);
        assert_eq!(s.insert(k(2), vec![2; 11], None, false), Inserted::TooLarge);
        assert_eq!(s.len(), 1);
        assert_eq!(s.bytes(), cost(6));
    }

    #[test]
    fn empty_results_are_bounded_by_their_overhead() {
        let mut s = Store::new(10 * ENTRY_OVERHEAD);
        for i in 0..=255u8 {
            s.insert(k(i), Vec::new(), None, false);
        }
        assert_eq!(s.len(), 10);
        assert_eq!(s.bytes(), 10 * ENTRY_OVERHEAD);
    }

    #[test]
    fn owner_death_announces_each_key_once() {
        let mut s = Store::new(10 * ENTRY_OVERHEAD);
        s.insert(k(1), vec![1], Some(NodeId(1)), false);
        s.insert(k(1), vec![1], Some(NodeId(2)), false);
        s.insert(k(2), vec![2], Some(NodeId(2)), false);
        assert_eq!(s.owner_died(NodeId(1)), vec![k(1)]);
        // k1 is announced already; only k2 is new.
        assert_eq!(s.owner_died(NodeId(2)), vec![k(2)]);
        assert_eq!(s.owner_died(NodeId(2)), vec![]);
        assert_eq!(s.announced_keys().collect::<Vec<_>>(), vec![k(1), k(2)]);
    }

    #[test]
    fn take_all_empties_oldest_first() {
        let mut s = Store::new(10 * ENTRY_OVERHEAD);
        s.insert(k(3), vec![3], None, false);
        s.insert(k(1), vec![1, 1], None, false);
        assert_eq!(s.take_all(), vec![(k(3), vec![3]), (k(1), vec![1, 1])]);
        assert!(s.is_empty());
        assert_eq!(s.bytes(), 0);
    }
}
