//! The hold-back queue: applies sequenced operations in sequence-number order, whatever
//! order they arrive in, and joins a state snapshot with the stream that follows it.
//!
//! Sans-IO: it only decides what is applied when. A replica starts *awaiting a snapshot*
//! (everything that arrives is held); a snapshot covering operation `s` is installed,
//! held operations up to `s` are dropped and the rest become applicable in order.

use std::collections::BTreeMap;

/// Where an arriving sequence number stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// It is the next one to apply: apply it now, then call [`HoldBack::advance`].
    Next,
    /// It comes later (or no snapshot is installed yet): hold it.
    Later,
    /// It is covered already (applied, or part of the installed snapshot): drop it.
    Stale,
}

/// More operations held than the limit allows (a stuck stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("hold-back queue full ({0} operations waiting for an earlier one)")]
pub struct Overflow(pub usize);

/// Operations waiting for their turn.
#[derive(Debug)]
pub struct HoldBack<E> {
    applied: u64,
    ready: bool,
    held: BTreeMap<u64, E>,
    limit: usize,
}

impl<E> HoldBack<E> {
    /// A queue that has applied everything up to `applied` (a sequencer's own copy).
    pub fn started(applied: u64, limit: usize) -> Self {
        HoldBack {
            applied,
            ready: true,
            held: BTreeMap::new(),
            limit,
        }
    }

    /// A queue that waits for a snapshot before anything is applicable.
    pub fn awaiting_snapshot(limit: usize) -> Self {
        HoldBack {
            applied: 0,
            ready: false,
            held: BTreeMap::new(),
            limit,
        }
    }

    /// The last sequence number applied (or covered by the snapshot).
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Whether a snapshot is installed (operations are applicable).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Operations held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Classifies an arriving sequence number.
    pub fn classify(&self, seq: u64) -> Slot {
        if seq <= self.applied {
            Slot::Stale
        } else if self.ready && seq == self.applied + 1 {
            Slot::Next
        } else {
            Slot::Later
        }
    }

    /// Holds an operation that came early. A duplicate replaces the earlier copy.
    pub fn hold(&mut self, seq: u64, e: E) -> Result<(), Overflow> {
        if self.held.len() >= self.limit && !self.held.contains_key(&seq) {
            return Err(Overflow(self.held.len()));
        }
        self.held.insert(seq, e);
        Ok(())
    }

    /// Records that the next operation was applied.
    pub fn advance(&mut self) {
        self.applied += 1;
    }

    /// Takes the next held operation if it is applicable now, and counts it as applied.
    pub fn pop_next(&mut self) -> Option<(u64, E)> {
        if !self.ready {
            return None;
        }
        let next = self.applied + 1;
        let e = self.held.remove(&next)?;
        self.applied = next;
        Some((next, e))
    }

    /// Installs a snapshot that covers every operation up to `seq`: held operations up
    /// to it are dropped, the rest wait for [`pop_next`](Self::pop_next).
    pub fn install(&mut self, seq: u64) {
        self.applied = seq;
        self.ready = true;
        self.held = self.held.split_off(&(seq + 1));
    }

    /// Waits for a new snapshot again (a refresh): arriving operations are held until it
    /// is installed.
    pub fn await_snapshot(&mut self) {
        self.ready = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(h: &mut HoldBack<&'static str>) -> Vec<(u64, &'static str)> {
        std::iter::from_fn(|| h.pop_next()).collect()
    }

    #[test]
    fn out_of_order_arrivals_are_applied_in_sequence_order() {
        let mut h = HoldBack::started(0, 10);
        assert_eq!(h.classify(3), Slot::Later);
        h.hold(3, "c").unwrap();
        assert_eq!(h.classify(2), Slot::Later);
        h.hold(2, "b").unwrap();
        assert!(drain(&mut h).is_empty(), "1 is missing");
        assert_eq!(h.classify(1), Slot::Next);
        h.advance();
        assert_eq!(drain(&mut h), vec![(2, "b"), (3, "c")]);
        assert_eq!(h.applied(), 3);
        assert_eq!(h.classify(2), Slot::Stale);
        assert_eq!(h.classify(4), Slot::Next);
    }

    #[test]
    fn snapshot_drops_what_it_covers_and_releases_the_rest() {
        let mut h = HoldBack::awaiting_snapshot(10);
        for (s, e) in [(5, "e"), (3, "c"), (4, "d"), (6, "f")] {
            assert_eq!(
                h.classify(s),
                Slot::Later,
                "nothing applies before a snapshot"
            );
            h.hold(s, e).unwrap();
        }
        assert!(drain(&mut h).is_empty());
        h.install(4);
        assert_eq!(h.held(), 2);
        assert_eq!(drain(&mut h), vec![(5, "e"), (6, "f")]);
        assert_eq!(h.classify(3), Slot::Stale);
    }

    #[test]
    fn refresh_holds_until_the_new_snapshot() {
        let mut h = HoldBack::started(2, 10);
        h.await_snapshot();
        assert_eq!(h.classify(3), Slot::Later);
        h.hold(3, "c").unwrap();
        h.hold(4, "d").unwrap();
        h.install(3);
        assert_eq!(drain(&mut h), vec![(4, "d")]);
    }

    #[test]
    fn the_limit_is_enforced_but_duplicates_fit() {
        let mut h = HoldBack::awaiting_snapshot(2);
        h.hold(5, "a").unwrap();
        h.hold(6, "b").unwrap();
        h.hold(6, "b2").unwrap();
        assert_eq!(h.hold(7, "c"), Err(Overflow(2)));
    }
}
