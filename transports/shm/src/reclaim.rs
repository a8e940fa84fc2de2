//! In-order reclamation of ring space released out of order.
//!
//! Slots are handed to the host in ring order but released whenever the host is done
//! with them. The reclaimer keeps one "released" flag per consumed slot (in the
//! receiver's private memory, where the peer cannot tamper with it) and advances the
//! tail over the released prefix; the tail is the credit grant the producer sees.

use std::collections::VecDeque;

/// One consumed slot awaiting release.
#[derive(Debug, Clone, Copy)]
struct Entry {
    slot: u64,
    released: bool,
}

/// The reclaimer: the consumed, unreclaimed slots between `tail` and the consumer's
/// read position, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Reclaimer {
    tail: u64,
    /// Sequence number of `entries[0]`.
    first: u64,
    entries: VecDeque<Entry>,
    /// Bytes of slots consumed and not yet reclaimed.
    held: u64,
}

impl Reclaimer {
    /// An empty reclaimer at position 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The position reclaimed so far: the credits this side granted (kept here, in
    /// private memory; the copy in the ring is only what the producer reads).
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// Bytes consumed but not yet reclaimed (held by unreleased slots and the released
    /// ones behind them).
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Records a consumed slot of `slot` bytes; returns its sequence number for
    /// [`release`](Self::release). A slot pushed as `released` (padding, control, a
    /// copied message) only waits for the ones before it.
    pub fn push(&mut self, slot: u64, released: bool) -> u64 {
        let seq = self.first + self.entries.len() as u64;
        self.entries.push_back(Entry { slot, released });
        self.held += slot;
        seq
    }

    /// Marks slot `seq` released and reclaims the released prefix. Returns the new tail
    /// when it moved. Unknown or already released sequence numbers are ignored.
    pub fn release(&mut self, seq: u64) -> Option<u64> {
        let i = seq.checked_sub(self.first)?;
        let e = self.entries.get_mut(usize::try_from(i).ok()?)?;
        if e.released {
            return None;
        }
        e.released = true;
        self.advance()
    }

    /// Reclaims the released prefix; returns the new tail when it moved.
    pub fn advance(&mut self) -> Option<u64> {
        let before = self.tail;
        while let Some(e) = self.entries.front() {
            if !e.released {
                break;
            }
            self.tail += e.slot;
            self.held -= e.slot;
            self.first += 1;
            self.entries.pop_front();
        }
        (self.tail != before).then_some(self.tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_order_releases_reclaim_in_order() {
        let mut r = Reclaimer::new();
        let a = r.push(32, false);
        let b = r.push(64, false);
        let pad = r.push(16, true);
        let c = r.push(48, false);
        assert_eq!(r.held(), 160);
        assert_eq!(r.release(c), None, "c waits behind a and b");
        assert_eq!(r.release(b), None, "b waits behind a");
        assert_eq!(r.release(a), Some(160), "a frees everything");
        assert_eq!(r.held(), 0);
        let _ = pad;
        // Double and unknown releases change nothing.
        assert_eq!(r.release(a), None);
        assert_eq!(r.release(99), None);
        let d = r.push(32, false);
        assert_eq!(d, 4);
        assert_eq!(r.release(d), Some(192));
    }

    #[test]
    fn released_on_push_only_waits_for_predecessors() {
        let mut r = Reclaimer::new();
        let x = r.push(16, true);
        assert_eq!(x, 0);
        assert_eq!(r.advance(), Some(16));
        let y = r.push(32, false);
        r.push(32, true);
        assert_eq!(r.advance(), None);
        assert_eq!(r.release(y), Some(80));
    }
}
