//! A worker's inbox: records of its frames given back by whoever held them (the result
//! lookup, the external stealer), so that the frame waiting for one finds it there.
//!
//! Each worker has one; any thread may push to it, the owner takes the records of the
//! frame it waits for (a waiting sync runs them, an unwinding frame drops them), and
//! an idle worker may take the oldest of another worker's inbox. Given-back records
//! are rare (only after a failure, or a lookup that does not hold its job), so a mutex
//! around a `VecDeque` is enough; the owner can pick the records of one frame out of
//! it, which a lock-free FIFO (crossbeam's `SegQueue`) does not allow. The count
//! beside it is read without the lock, so the fault-free path pays one load per wait
//! step of a sync whose children were stolen, and nothing per spawn or sync.

use crate::kernel::JobRef;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A record given back to the worker whose frame spawned it.
#[derive(Clone, Copy)]
pub(crate) struct GivenBack {
    pub(crate) job: JobRef,
    /// The id of the record's frame (unique per worker).
    pub(crate) frame: u64,
    /// How it runs once taken.
    pub(crate) rerun: Rerun,
}

/// How a record taken from an inbox (or stolen) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rerun {
    /// As its mark says: in normal mode if unmarked; if marked, offered to the result
    /// lookup first, then run in redo mode at the depth of its mark (a stolen record,
    /// or one the external stealer gave back unsent).
    AsMarked,
    /// In the mode of its mark, not offered again (the result lookup was offered it
    /// and gave it back with [`StolenJob::give_back`](crate::StolenJob::give_back)).
    Offered,
    /// In redo mode as a redone job, at depth 0 of a new redone subtree, not offered
    /// ([`StolenJob::give_back_redo`](crate::StolenJob::give_back_redo)).
    Redone,
}

/// The records given back to one worker.
#[derive(Default)]
pub(crate) struct Inbox {
    /// How many records `queue` holds; read without the lock.
    len: AtomicUsize,
    queue: Mutex<VecDeque<GivenBack>>,
}

impl Inbox {
    /// Adds a record (from any thread). The lock orders the giver's last access to
    /// the record before the taker's first.
    pub(crate) fn push(&self, g: GivenBack) {
        let mut q = self.queue.lock();
        q.push_back(g);
        self.len.store(q.len(), Ordering::Release);
    }

    /// Whether the inbox holds no record (without taking the lock).
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Takes the oldest record of frame `frame`, if there is one.
    pub(crate) fn take_frame(&self, frame: u64) -> Option<GivenBack> {
        self.take(|q| q.iter().position(|g| g.frame == frame))
    }

    /// Takes the oldest record, whatever its frame.
    pub(crate) fn take_oldest(&self) -> Option<GivenBack> {
        self.take(|q| if q.is_empty() { None } else { Some(0) })
    }

    fn take(&self, pick: impl FnOnce(&VecDeque<GivenBack>) -> Option<usize>) -> Option<GivenBack> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.queue.lock();
        let i = pick(&q)?;
        let g = q.remove(i);
        self.len.store(q.len(), Ordering::Release);
        g
    }
}
