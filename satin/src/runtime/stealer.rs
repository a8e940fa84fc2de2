//! The stealer of a thread outside the worker pool (the distributed layer's driver).

use super::Shared;
use crate::kernel::StolenJob;
use crossbeam_deque::Steal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Steals jobs from the workers' deques (oldest first) for another process.
pub struct ExternalStealer {
    shared: Arc<Shared>,
    next: AtomicUsize,
}

impl std::fmt::Debug for ExternalStealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalStealer").finish_non_exhaustive()
    }
}

impl ExternalStealer {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        ExternalStealer {
            shared,
            next: AtomicUsize::new(0),
        }
    }

    /// Number of workers (valid victims are `0..workers()`).
    pub fn workers(&self) -> usize {
        self.shared.stealers.len()
    }

    /// Steals the oldest job of worker `victim`, if it has one.
    pub fn steal_from(&self, victim: usize) -> Option<StolenJob> {
        let s = self.shared.stealers.get(victim)?;
        loop {
            match s.steal() {
                Steal::Success(j) => return Some(StolenJob::new(j, self.shared.clone())),
                Steal::Retry => continue,
                Steal::Empty => return None,
            }
        }
    }

    /// Steals the oldest job of some worker (trying each once, round robin).
    pub fn steal(&self) -> Option<StolenJob> {
        let n = self.workers();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).find_map(|k| self.steal_from((start + k) % n))
    }
}
