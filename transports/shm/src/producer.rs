//! The sending side of a ring as a pure state machine: where the next slot goes and
//! whether the receiver's credits allow it.
//!
//! Credits are free ring space granted by the receiver: the producer may write while
//! `head + need + HEADER_LEN - tail <= cap`, `tail` being the position up to which the
//! receiver has reclaimed (released) slots; the last [`HEADER_LEN`] bytes stay unused,
//! for the zeroed header that follows every published slot (see `layout.rs`).

use crate::layout::{ring_offset, slot_size, HEADER_LEN, SLOT_ALIGN};

/// How far the head may run from the start of the data area before a small slot that
/// finds the ring drained goes back to the start (see [`Producer::plan`]).
pub const REWIND_AT: u64 = 64 << 10;

/// The part of the ring that slots of `slot` bytes keep to while the receiver keeps up:
/// [`REWIND_AT`] for small slots, four slots' worth for larger ones.
fn hot_window(slot: u64) -> u64 {
    REWIND_AT.max(4 * slot)
}

/// Where one slot goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// A padding slot to write first (position, payload length), when the slot would
    /// cross the end of the data area.
    pub pad: Option<(u64, u32)>,
    /// Position of the slot's header.
    pub pos: u64,
    /// The head once the slot is written: the position of the next slot, whose header
    /// is zeroed before this one is published.
    pub new_head: u64,
}

/// Not enough credits: the receiver must release `need - free` more bytes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Bytes the write needs (padding and the header kept free included).
    pub need: u64,
    /// Bytes free now.
    pub free: u64,
}

/// The receiver published an impossible credit grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("receiver's tail {tail} is inconsistent with head {head} (capacity {cap})")]
pub struct BadTail {
    /// The tail read.
    pub tail: u64,
    /// Our head.
    pub head: u64,
    /// The ring capacity.
    pub cap: u64,
}

/// The producer's state: its own head (it is the only writer of it).
#[derive(Debug, Clone)]
pub struct Producer {
    cap: u64,
    head: u64,
}

impl Producer {
    /// A producer for a fresh ring of `cap` bytes (a power of two).
    pub fn new(cap: u64) -> Self {
        Producer { cap, head: 0 }
    }

    /// The position published so far.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The largest payload one slot may carry: a quarter of the ring, so that a slot and
    /// its padding always fit an empty ring and several slots are in flight.
    pub fn max_slot_payload(&self) -> u32 {
        let q = self.cap / 4 - HEADER_LEN as u64;
        let q = q - q % SLOT_ALIGN as u64;
        u32::try_from(q).unwrap_or(u32::MAX - (SLOT_ALIGN as u32 - 1))
    }

    /// Checks a tail read from the receiver.
    pub fn check_tail(&self, tail: u64) -> Result<u64, BadTail> {
        if tail > self.head || self.head - tail > self.cap {
            return Err(BadTail {
                tail,
                head: self.head,
                cap: self.cap,
            });
        }
        Ok(tail)
    }

    /// Plans a slot with a `len`-byte payload given the receiver's `tail` (already
    /// checked). `len` must not exceed [`max_slot_payload`](Self::max_slot_payload).
    ///
    /// A slot that would end beyond its hot window (the first [`REWIND_AT`] bytes for
    /// small slots, four slots' worth for larger ones) goes back to the start of the
    /// data area, behind a padding slot, when what is in flight leaves room for it
    /// there: while the receiver keeps up, messages keep reusing the same cache lines,
    /// which stay in the caches of both sides, instead of walking through the whole
    /// ring and missing every time (a request and its reply reuse a few lines; a
    /// stream of 1 MiB messages cycles through 4 MiB of an 8 MiB ring, as much as a
    /// plain four-buffer copy loop touches).
    pub fn plan(&self, len: u32, tail: u64) -> Result<Plan, Wait> {
        let slot = slot_size(u64::from(len));
        let off = ring_offset(self.head, self.cap);
        let in_flight = self.head - tail;
        let hot = hot_window(slot);
        let rewind = hot < self.cap
            && off + slot > hot
            && in_flight + slot + HEADER_LEN as u64 <= off
            && in_flight <= hot / 4;
        let pad = if off + slot > self.cap || rewind {
            self.cap - off
        } else {
            0
        };
        let need = pad + slot + HEADER_LEN as u64;
        let free = self.cap - (self.head - tail);
        if need > free {
            return Err(Wait { need, free });
        }
        Ok(Plan {
            pad: (pad > 0).then(|| (self.head, (pad - HEADER_LEN as u64) as u32)),
            pos: self.head + pad,
            new_head: self.head + pad + slot,
        })
    }

    /// Whether a slot with a `len`-byte payload would go back to the start of the ring
    /// if the ring were drained (its plan then depends on the current tail).
    pub fn may_rewind(&self, len: u32) -> bool {
        let slot = slot_size(u64::from(len));
        let hot = hot_window(slot);
        hot < self.cap && ring_offset(self.head, self.cap) + slot > hot
    }

    /// Records that the planned slot was written and its head published.
    pub fn commit(&mut self, plan: &Plan) {
        self.head = plan.new_head;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: u64 = 1 << 16;

    #[test]
    fn credits_bound_the_writes() {
        let mut p = Producer::new(CAP);
        let max = p.max_slot_payload();
        assert_eq!(slot_size(max as u64), CAP / 4);
        // Three quarter-ring slots fit; the fourth would leave no room for the zeroed
        // header after it and waits for credits.
        for i in 0..3 {
            let plan = p.plan(max, 0).unwrap();
            assert_eq!(plan.pos, i * CAP / 4);
            assert_eq!(plan.pad, None);
            p.commit(&plan);
        }
        assert_eq!(
            p.plan(max, 0),
            Err(Wait {
                need: CAP / 4 + 16,
                free: CAP / 4
            })
        );
        let small = (CAP / 4 - 32) as u32;
        p.commit(&p.plan(small, 0).unwrap());
        assert_eq!(p.head(), CAP - 16);
        assert_eq!(p.plan(0, 0), Err(Wait { need: 32, free: 16 }));
        // Releasing one slot grants exactly its space back.
        let plan = p.plan(0, CAP / 4).unwrap();
        assert_eq!((plan.pos, plan.pad), (CAP - 16, None));
        assert_eq!(
            p.plan(max, CAP / 4),
            Err(Wait {
                need: 16 + CAP / 4 + 16,
                free: CAP / 4 + 16
            })
        );
    }

    #[test]
    fn a_slot_never_crosses_the_end() {
        let mut p = Producer::new(CAP);
        let plan = p.plan((CAP - 64) as u32 - 16, 0).unwrap();
        p.commit(&plan);
        assert_eq!(p.head(), CAP - 64);
        // 100 bytes need a 128-byte slot: 64 bytes of padding, then the slot at 0.
        assert_eq!(
            p.plan(100, 0),
            Err(Wait {
                need: 64 + 128 + 16,
                free: 64
            })
        );
        let plan = p.plan(100, CAP - 64).unwrap();
        assert_eq!(plan.pad, Some((CAP - 64, 48)));
        assert_eq!(plan.pos, CAP);
        assert_eq!(plan.new_head, CAP + 128);
        // A slot that ends exactly at the end needs no padding.
        let mut p = Producer::new(CAP);
        p.commit(&p.plan((CAP - 64) as u32 - 16, 0).unwrap());
        assert_eq!(p.plan(48, 16).unwrap().pad, None);
    }

    #[test]
    fn small_slots_rewind_to_the_start_of_a_drained_ring() {
        let cap = 1 << 20;
        let mut p = Producer::new(cap);
        // Request-sized slots walk up to REWIND_AT while each is taken at once...
        while p.head() < REWIND_AT {
            let plan = p.plan(8, p.head()).unwrap();
            assert_eq!(plan.pad, None);
            p.commit(&plan);
        }
        // ...then the next one pads to the end and starts over at offset 0.
        let at = p.head();
        let plan = p.plan(8, at).unwrap();
        assert_eq!(plan.pad, Some((at, (cap - at - 16) as u32)));
        assert_eq!(plan.pos, cap);
        assert_eq!(plan.new_head, cap + 32);
        // Not while much is in flight (a stream), nor for a larger slot that still
        // fits its own (larger) hot window.
        assert_eq!(p.plan(8, at - REWIND_AT / 2).unwrap().pad, None);
        assert_eq!(p.plan((REWIND_AT / 2) as u32, at).unwrap().pad, None);
        // A ring no larger than REWIND_AT never rewinds.
        let mut p = Producer::new(REWIND_AT);
        for _ in 0..10_000 {
            let plan = p.plan(8, p.head()).unwrap();
            assert!(plan.pad.is_none() || p.head() % REWIND_AT + 32 > REWIND_AT);
            p.commit(&plan);
        }
    }

    #[test]
    fn large_slots_cycle_through_four_slots_while_the_receiver_keeps_up() {
        let cap = 8 << 20;
        let mut p = Producer::new(cap);
        let len = 1 << 20;
        let slot = slot_size(len as u64);
        let mut offsets = Vec::new();
        // One message in flight at a time (the receiver releases each soon).
        let mut tail = 0;
        for _ in 0..20 {
            let plan = p.plan(len, tail).unwrap();
            tail = plan.pos; // everything before this slot was released
            offsets.push(plan.pos % cap);
            p.commit(&plan);
        }
        assert!(
            offsets.iter().all(|&o| o + slot <= 4 * slot),
            "1 MiB slots stay in the first four slots' worth: {offsets:?}"
        );
        assert_eq!(offsets[4], 0, "the fifth goes back to the start");
        // A receiver that lags (several in flight) gets the whole ring.
        let mut p = Producer::new(cap);
        for _ in 0..7 {
            let plan = p.plan(len, 0).unwrap();
            assert_eq!(plan.pad, None);
            p.commit(&plan);
        }
        assert!(p.head() > 6 * slot);
    }

    #[test]
    fn impossible_tails_are_rejected() {
        let mut p = Producer::new(CAP);
        p.commit(&p.plan(1000, 0).unwrap());
        assert!(p.check_tail(0).is_ok());
        assert!(p.check_tail(p.head()).is_ok());
        assert!(p.check_tail(p.head() + 16).is_err());
        let mut p = Producer::new(CAP);
        for _ in 0..8 {
            let plan = p
                .plan(p.max_slot_payload(), p.head().saturating_sub(CAP / 2))
                .unwrap();
            p.commit(&plan);
        }
        assert!(p.check_tail(p.head() - CAP - 16).is_err());
    }
}
