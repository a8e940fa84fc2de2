//! Bounded spinning for the shared-memory baselines: both sides of a raw ping-pong
//! spin on words in shared memory, and every spin gives up after [`PATIENCE`] with a
//! `TimedOut` error, so a dead peer never hangs the caller.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long any spin waits for the peer before giving up.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The turns of one spin loop: the clock is read every 4096 turns only, and every
/// 65536 turns the thread yields, so that a peer on the same CPU runs.
#[derive(Debug, Default)]
pub struct Spin {
    turns: u32,
    start: Option<Instant>,
}

impl Spin {
    /// A spin that has not turned yet.
    pub fn new() -> Spin {
        Spin::default()
    }

    /// One more turn; a `TimedOut` error saying `what` once [`PATIENCE`] has passed
    /// since the first clock reading.
    #[inline]
    pub fn turn(&mut self, what: &str) -> io::Result<()> {
        self.turns = self.turns.wrapping_add(1);
        if self.turns.is_multiple_of(4096) {
            let s = *self.start.get_or_insert_with(Instant::now);
            if s.elapsed() > PATIENCE {
                return Err(io::Error::new(io::ErrorKind::TimedOut, what.to_string()));
            }
            if self.turns.is_multiple_of(1 << 16) {
                // Let a peer on the same CPU run.
                std::thread::yield_now();
            }
        }
        std::hint::spin_loop();
        Ok(())
    }
}

/// Spins until `ok(word)` (an Acquire load); a `TimedOut` error saying `what` after
/// [`PATIENCE`].
#[inline]
pub fn until(word: &AtomicU64, ok: impl Fn(u64) -> bool, what: &str) -> io::Result<()> {
    let mut spin = Spin::new();
    while !ok(word.load(Ordering::Acquire)) {
        spin.turn(what)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_returns_once_the_word_is_right() {
        let w = AtomicU64::new(3);
        until(&w, |v| v == 3, "never").unwrap();
    }
}
