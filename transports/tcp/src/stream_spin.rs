//! When a connection's reader thread reads on at once instead of waiting for the
//! socket to be readable: while a large frame is coming in. A large message arrives as
//! many segments; a reader that waits in `poll` after each is woken once a segment,
//! and on loopback the sender's CPU pays for each of those wake-ups in its own send.
//! So once bytes of a frame that still misses at least [`LARGE`] arrived, the reader
//! keeps reading without blocking until `spin` passes with no byte more, or less than
//! that is missing. Otherwise it waits for readability as before: a connection that
//! carries small messages (64 KiB ones arrive in one or two segments), or none, costs
//! no spinning. No I/O here: the reader thread reports each drain
//! ([`StreamSpin::after_drain`]) and asks before it waits ([`StreamSpin::read_on`]).

use std::time::{Duration, Instant};

/// The least a frame must still miss for its reader to spin: a loopback segment (the
/// loopback MTU is 64 KiB).
pub(crate) const LARGE: usize = 64 << 10;

/// The reader's spin state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamSpin {
    spin: Duration,
    /// Reads on without waiting until then (None: waits).
    until: Option<Instant>,
}

impl StreamSpin {
    /// A reader that spins up to `spin` after the last byte of a frame that still
    /// misses [`LARGE`] or more (zero: never).
    pub(crate) fn new(spin: Duration) -> Self {
        StreamSpin { spin, until: None }
    }

    /// After a drain at `now`: whether it read any byte (`moved`), and how many bytes
    /// the frame being assembled still misses after it (`missing`; 0 between frames).
    pub(crate) fn after_drain(&mut self, moved: bool, missing: usize, now: Instant) {
        if missing < LARGE || self.spin.is_zero() {
            self.until = None;
        } else if moved {
            self.until = Some(now + self.spin);
        }
    }

    /// Whether the reader reads again at `now` without waiting for readability.
    pub(crate) fn read_on(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_reader_waits_between_frames_and_near_a_frames_end() {
        let t = Instant::now();
        let mut s = StreamSpin::new(US * 50);
        assert!(!s.read_on(t), "nothing read yet");
        s.after_drain(true, 0, t);
        assert!(!s.read_on(t), "whole frames only: wait for the next");
        s.after_drain(true, LARGE - 1, t);
        assert!(!s.read_on(t), "the rest of a frame comes in one segment");
    }

    #[test]
    fn bytes_of_a_large_frame_keep_the_reader_reading_for_the_spin() {
        let t = Instant::now();
        let mut s = StreamSpin::new(US * 50);
        s.after_drain(true, LARGE, t);
        assert!(s.read_on(t));
        assert!(s.read_on(t + US * 49));
        assert!(!s.read_on(t + US * 50), "the spin is over");
        // Empty reads do not extend it; bytes do, from their own time.
        s.after_drain(false, LARGE, t + US * 40);
        assert!(!s.read_on(t + US * 50));
        s.after_drain(true, 1 << 20, t + US * 45);
        assert!(s.read_on(t + US * 94));
        assert!(!s.read_on(t + US * 95));
    }

    #[test]
    fn a_frame_completed_or_nearly_ends_the_spin() {
        let t = Instant::now();
        let mut s = StreamSpin::new(US * 50);
        s.after_drain(true, 1 << 20, t);
        s.after_drain(true, 0, t + US);
        assert!(!s.read_on(t + US));
        s.after_drain(true, 1 << 20, t);
        s.after_drain(true, 100, t + US);
        assert!(!s.read_on(t + US));
    }

    #[test]
    fn a_large_frame_without_new_bytes_does_not_start_a_spin() {
        let t = Instant::now();
        let mut s = StreamSpin::new(US * 50);
        s.after_drain(false, 1 << 20, t);
        assert!(!s.read_on(t), "woken for nothing new: wait again");
    }

    #[test]
    fn a_zero_spin_never_spins() {
        let t = Instant::now();
        let mut s = StreamSpin::new(Duration::ZERO);
        s.after_drain(true, 1 << 20, t);
        assert!(!s.read_on(t));
    }
}
