//! A receive port's common path, lent to its one connection: one atomic word that lets
//! a receive hand out that connection's next message, and its finish return the
//! message's credits, without the port's lock.
//!
//! The port's protocol state lives in [`Admission`](crate::port_protocol::Admission),
//! under the port's lock. While the port has exactly one connection, nothing queued,
//! no deferred connect and no outstanding message, the port *lends* the part of that
//! state a data message touches (whether a message is outstanding, and the bytes
//! finished since the connection's credits were last returned) to a [`Lane`]. Every
//! locked operation of the port first takes it back ([`Lane::revoke`]), so under the
//! lock the `Admission` is the whole truth; the operations that may make the port
//! eligible again lend it anew at their end. A hand-out or finish that finds the lane
//! revoked goes the locked way.
//!
//! The word: bit 0 lent, bit 1 a message is outstanding, the bits above it the bytes
//! finished and not yet returned as credits (below half the window, which a lane
//! needs to fit: [`Lane::fits`]).

use std::sync::atomic::{AtomicU64, Ordering};

const LENT: u64 = 1;
const OUTSTANDING: u64 = 2;
const SHIFT: u32 = 2;

/// The lent state of one connection (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Lane {
    word: AtomicU64,
}

/// What [`Lane::finish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// The message is finished; return these credits to its sender now, if any.
    Done(Option<u64>),
    /// The lane was revoked: finish the message the locked way.
    Revoked,
}

impl Lane {
    /// Whether a window of `window` bytes lets its owed bytes (below half of it) fit
    /// in the word.
    pub(crate) fn fits(window: u64) -> bool {
        window / 2 <= u64::MAX >> SHIFT
    }

    /// Lends the lane, with no message outstanding and `owed` bytes finished but not
    /// returned yet (below half the window). Only under the port's lock, while it is
    /// revoked.
    pub(crate) fn lend(&self, owed: u64) {
        debug_assert_eq!(self.word.load(Ordering::Relaxed) & LENT, 0);
        debug_assert!(owed <= u64::MAX >> SHIFT);
        self.word.store(LENT | (owed << SHIFT), Ordering::Release);
    }

    /// Takes the lane back: whether a message is outstanding and the bytes owed, or
    /// None if it was not lent. Only under the port's lock.
    pub(crate) fn revoke(&self) -> Option<(bool, u64)> {
        let v = self.word.swap(0, Ordering::AcqRel);
        (v & LENT != 0).then_some((v & OUTSTANDING != 0, v >> SHIFT))
    }

    /// Hands out a message, if the lane is lent and none is outstanding.
    pub(crate) fn try_hand_out(&self) -> bool {
        let v = self.word.load(Ordering::Acquire);
        v & (LENT | OUTSTANDING) == LENT
            && self
                .word
                .compare_exchange(v, v | OUTSTANDING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Finishes the outstanding message, which cost `cost` bytes of the window: the
    /// credits to return once `half` (half the window) is finished.
    pub(crate) fn finish(&self, cost: u64, half: u64) -> Finish {
        let mut v = self.word.load(Ordering::Acquire);
        loop {
            if v & (LENT | OUTSTANDING) != (LENT | OUTSTANDING) {
                return Finish::Revoked;
            }
            let owed = (v >> SHIFT).saturating_add(cost);
            let (credit, keep) = if owed >= half {
                (Some(owed), 0)
            } else {
                (None, owed)
            };
            match self.word.compare_exchange_weak(
                v,
                LENT | (keep << SHIFT),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Finish::Done(credit),
                Err(now) => v = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lane_not_lent_hands_out_nothing_and_finishes_nothing() {
        let l = Lane::default();
        assert!(!l.try_hand_out());
        assert_eq!(l.finish(10, 100), Finish::Revoked);
        assert_eq!(l.revoke(), None);
    }

    #[test]
    fn one_message_at_a_time_and_credits_at_half_the_window() {
        let l = Lane::default();
        l.lend(30);
        assert!(l.try_hand_out());
        assert!(
            !l.try_hand_out(),
            "a second message while one is outstanding"
        );
        assert_eq!(l.finish(40, 100), Finish::Done(None));
        assert_eq!(l.finish(1, 100), Finish::Revoked, "nothing outstanding");
        assert!(l.try_hand_out());
        assert_eq!(l.finish(30, 100), Finish::Done(Some(100)));
        assert!(l.try_hand_out());
        assert_eq!(l.revoke(), Some((true, 0)));
        assert_eq!(l.finish(5, 100), Finish::Revoked);
    }

    #[test]
    fn a_revoke_returns_what_was_lent_and_what_was_finished() {
        let l = Lane::default();
        l.lend(7);
        assert_eq!(l.revoke(), Some((false, 7)));
        assert_eq!(l.revoke(), None);
        l.lend(0);
        assert!(l.try_hand_out());
        assert_eq!(l.finish(u64::MAX, 100), Finish::Done(Some(u64::MAX)));
        assert_eq!(l.revoke(), Some((false, 0)));
    }

    #[test]
    fn windows_whose_half_fits_the_word() {
        assert!(Lane::fits(64 << 20));
        assert!(Lane::fits(u64::MAX >> 1));
        assert!(!Lane::fits(u64::MAX));
    }

    /// A receiver hands out and finishes while another thread revokes and lends again,
    /// as the port's locked operations do: a message outstanding at a revoke is
    /// finished the locked way (which the receiver publishes), and only then may the
    /// lane be lent again. Every finish that found the lane revoked matches a revoke
    /// that saw its message outstanding, and every byte finished on the lane comes back,
    /// as credits or through a revoke.
    #[test]
    fn concurrent_revokes_lose_no_finish_and_no_byte() {
        use std::sync::atomic::AtomicBool;
        const ROUNDS: u64 = 20_000;
        const COST: u64 = 3;
        let l = Arc::new(Lane::default());
        // Finishes that found the lane revoked (the locked way).
        let locked = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        l.lend(0);
        let worker = {
            let (l, locked, done) = (Arc::clone(&l), Arc::clone(&locked), Arc::clone(&done));
            std::thread::spawn(move || {
                let (mut on_lane, mut credited) = (0u64, 0u64);
                for _ in 0..ROUNDS {
                    if !l.try_hand_out() {
                        std::hint::spin_loop();
                        continue;
                    }
                    match l.finish(COST, 50) {
                        Finish::Done(c) => {
                            on_lane += COST;
                            credited += c.unwrap_or(0);
                        }
                        Finish::Revoked => {
                            locked.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                }
                done.store(true, Ordering::Release);
                (on_lane, credited)
            })
        };
        let (mut owed_back, mut outstanding_at_revoke) = (0u64, 0u64);
        let mut bounded = 0u64;
        while !done.load(Ordering::Acquire) {
            bounded += 1;
            assert!(bounded < 100_000_000, "the worker made no progress");
            if let Some((out, owed)) = l.revoke() {
                owed_back += owed;
                if out {
                    outstanding_at_revoke += 1;
                    // As the port: not lent again before that message is finished.
                    while locked.load(Ordering::Acquire) < outstanding_at_revoke {
                        std::thread::yield_now();
                    }
                }
            }
            l.lend(0);
            std::thread::yield_now();
        }
        if let Some((out, owed)) = l.revoke() {
            owed_back += owed;
            assert!(!out, "the worker ended with no message outstanding");
        }
        let (on_lane, credited) = worker.join().unwrap();
        assert_eq!(
            locked.load(Ordering::Acquire),
            outstanding_at_revoke,
            "a finish the locked way for each message outstanding at a revoke"
        );
        assert_eq!(credited + owed_back, on_lane, "every byte came back");
        assert!(on_lane > 0, "some messages were finished on the lane");
    }
}
