//! The floor under a spawn that a thief could take: the owner's side of a split deque
//! (Lace, van Dijk and van de Pol 2014), specialised to fib, with nothing else.
//!
//! A spawn writes the job's argument at the top of the worker's task array, bumps the
//! top and tests the one flag by which a thief asks the owner to share work (Lace's
//! "move the split" request). A sync takes the top back and, if the task is still
//! below the split point's private side, runs it as a direct call. Nothing here is
//! type-erased, counted, recycled or looked up: no runtime that lets thieves take
//! spawned work does less on its owner's path, so fib on this deque is the floor for
//! Satin's `fib_overhead_queued` (every spawn queued), as a tuned socket ping-pong is
//! the floor for a transport. The thief side is left out: a one-worker run never
//! shares (the flag stays clear and the split stays at 0), so the sync's shared path
//! is only a test that never passes here.
//!
//! Two shapes, both with every call of fib a real spawn or call that a thief could
//! have taken:
//! - [`fib_spawn2`]: both children spawned, then synced (Satin's fib, `ibis_apps::fib`);
//! - [`fib_join`]: one child spawned, the other called, then the spawned one synced
//!   (the shape of Cilk's and Lace's fib, and of `rayon::join`).

use std::sync::atomic::{AtomicBool, Ordering};

/// The deepest task array fib needs: fib(n) spawns at most 2 per level, n levels.
const TASKS: usize = 256;

/// The largest fib argument the floor takes (its stack of tasks is at most `2 n` deep).
pub const MAX_N: u32 = (TASKS / 2 - 1) as u32;

/// A worker's split deque of fib arguments (the owner's side).
pub struct SplitDeque<'a> {
    /// The task array; the top is `top`, the shared part is below `split`.
    tasks: [u32; TASKS],
    top: usize,
    split: usize,
    /// Set by a thief that found nothing to steal (never, in a one-worker run).
    steal_request: &'a AtomicBool,
    /// Requests the owner saw (they would move the split).
    pub requests: u64,
}

impl<'a> SplitDeque<'a> {
    /// An empty deque whose thieves ask through `steal_request`.
    pub fn new(steal_request: &'a AtomicBool) -> SplitDeque<'a> {
        SplitDeque {
            tasks: [0; TASKS],
            top: 0,
            split: 0,
            steal_request,
            requests: 0,
        }
    }

    #[inline(always)]
    fn spawn(&mut self, n: u32) {
        // The mask keeps the index in bounds without a test; fib never wraps (MAX_N).
        self.tasks[self.top % TASKS] = n;
        self.top += 1;
        if self.steal_request.load(Ordering::Relaxed) {
            self.grant();
        }
    }

    /// A thief asked for work: Lace moves the split up here (never reached when run
    /// by one worker).
    #[cold]
    #[inline(never)]
    fn grant(&mut self) {
        self.requests += 1;
    }

    /// Takes the newest task back: its argument if it is still private, else `None`
    /// (the shared path, where a thief may hold it; never taken by one worker).
    #[inline(always)]
    fn take(&mut self) -> Option<u32> {
        self.top -= 1;
        if self.top >= self.split {
            Some(self.tasks[self.top % TASKS])
        } else {
            None
        }
    }
}

/// fib(n) with both children spawned and synced, `None` if `n > MAX_N`.
pub fn fib_spawn2(n: u32) -> Option<u64> {
    if n > MAX_N {
        return None;
    }
    let flag = AtomicBool::new(false);
    let mut d = SplitDeque::new(&flag);
    Some(spawn2(&mut d, n))
}

fn spawn2(d: &mut SplitDeque, n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    d.spawn(n - 1);
    d.spawn(n - 2);
    let b = d.take().map_or(0, |m| spawn2(d, m));
    let a = d.take().map_or(0, |m| spawn2(d, m));
    a + b
}

/// fib(n) with one child spawned and the other called (the join shape), `None` if
/// `n > MAX_N`.
pub fn fib_join(n: u32) -> Option<u64> {
    if n > MAX_N {
        return None;
    }
    let flag = AtomicBool::new(false);
    let mut d = SplitDeque::new(&flag);
    Some(join(&mut d, n))
}

fn join(d: &mut SplitDeque, n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    d.spawn(n - 1);
    let b = join(d, n - 2);
    let a = d.take().map_or(0, |m| join(d, m));
    a + b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fib(n: u32) -> u64 {
        let (mut a, mut b) = (0u64, 1u64);
        for _ in 0..n {
            (a, b) = (b, a + b);
        }
        a
    }

    #[test]
    fn both_shapes_compute_fib_and_refuse_what_the_array_cannot_hold() {
        for n in 0..=25 {
            assert_eq!(fib_spawn2(n), Some(fib(n)), "spawn2 {n}");
            assert_eq!(fib_join(n), Some(fib(n)), "join {n}");
        }
        assert_eq!(fib_spawn2(MAX_N + 1), None);
        assert_eq!(fib_join(MAX_N + 1), None);
    }

    #[test]
    fn a_steal_request_reaches_the_owner_at_its_next_spawn() {
        let flag = AtomicBool::new(true);
        let mut d = SplitDeque::new(&flag);
        assert_eq!(spawn2(&mut d, 10), fib(10));
        // fib(10) makes 2 * (fib(11) - 1) spawns, each of which saw the request.
        assert_eq!(d.requests, 2 * (fib(11) - 1));
        assert_eq!(d.top, 0);
    }
}
