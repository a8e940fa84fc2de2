//! Abort (thesis 8.3.5): a frame stops its outstanding children, recursively and
//! asynchronously, and a job that was aborted stops at its next safe point.
//!
//! - A frame aborts its children ([`abort_children`]): the ones still queued on its
//!   worker are dropped unrun at once; every other one (stolen by another worker, taken
//!   by the external stealer for another process, offered to the result lookup, or
//!   already done) gets [`ABORT_BIT`] in its state. The frame never reads the result of
//!   a child with that bit and runs no inlet for it; it still waits for the thieves to
//!   let go of the records before it releases them (the records are its memory).
//! - A thief's transitions keep the bit: it takes a record with a read-modify-write
//!   that reports an abort that came first (the job is then not run), and finishes it
//!   by adding to the state, not storing it.
//! - A job running on a thief sees the abort at its safe points: when one of its frames
//!   queues its first child, while a sync waits for stolen children, and in
//!   [`Ctx::poll`]. The worker knows the flag of the job it runs for others (the
//!   record's state, or a wire job's [`AbortHandle`]): only that flag is tested, one
//!   load per frame, and a job it runs nested inside a wait is not stopped by an abort
//!   of the one it waits in (it is not its descendant; the outer one stops once the
//!   nested one returns). The job stops by unwinding with a private payload: each of its
//!   frames on the way aborts its own stolen children (so the abort goes down the
//!   whole tree, on every worker and process) and waits for them, and the worker that
//!   took the job catches the payload and marks the record done, without a result.
//! - The distributed layer learns that one of the jobs it sent away was aborted
//!   through the abort hook ([`crate::Satin::set_abort_hook`]) and
//!   [`StolenJob::is_aborted`](crate::StolenJob::is_aborted); it tells the thief's
//!   process, which stops the job through the job's [`AbortHandle`].

use super::ctx::Ctx;
use super::record::{base_state, Record, ABORT_BIT, DONE, PUBLISHED, SEEN_BIT, STOLEN};
use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The payload a job unwinds with when it stops because it was aborted.
pub(super) struct Aborted;

/// The flag of jobs that nobody can abort (root jobs).
pub(super) static NEVER: AtomicU32 = AtomicU32::new(0);

/// Whether a panic payload is an abort's (not a failure).
pub(super) fn is_abort(p: &(dyn Any + Send)) -> bool {
    p.is::<Aborted>()
}

/// Stops the running job: unwinds to the worker that took it.
#[cold]
#[inline(never)]
pub(super) fn raise(ctx: &mut Ctx) -> ! {
    ctx.stats.aborted += 1;
    std::panic::resume_unwind(Box::new(Aborted))
}

/// The abort flag of a job run for another process (a wire job): the distributed layer
/// keeps it while the job runs and calls [`AbortHandle::abort`] when the job's owner
/// aborts it.
#[derive(Clone, Debug, Default)]
pub struct AbortHandle(pub(super) Arc<AtomicU32>);

impl AbortHandle {
    /// A flag not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the job to stop at its next safe point.
    pub fn abort(&self) {
        self.0.fetch_or(ABORT_BIT, Ordering::Relaxed);
    }

    /// Whether [`AbortHandle::abort`] was called.
    pub fn is_aborted(&self) -> bool {
        self.0.load(Ordering::Relaxed) & ABORT_BIT != 0
    }
}

impl Ctx {
    /// Whether the job running here (the one this worker runs for another worker or
    /// process, with everything it spawned and runs here) was aborted by its spawner.
    /// For long sequential work: return early when it says so (the result is not
    /// used), or call [`Ctx::poll`].
    #[inline]
    pub fn aborted(&self) -> bool {
        // SAFETY: `abort_flag` points to `NEVER`, to the state of the record this
        // worker runs (live until it stores DONE, I3, after the flag is put back), or
        // to the `AbortHandle` a wire job's closure holds while it runs.
        unsafe { (*self.abort_flag).load(Ordering::Relaxed) & ABORT_BIT != 0 }
    }

    /// A safe point for long sequential work: if the job running here was aborted,
    /// it stops here (unwinds to the worker that took it; see [`Ctx::aborted`]).
    #[inline]
    pub fn poll(&mut self) {
        if self.aborted() {
            raise(self);
        }
    }

    /// Runs `f` with `flag` as the abort flag of the running job (a wire job's), then
    /// puts the earlier one back.
    pub(crate) fn with_abort_handle<R>(
        &mut self,
        flag: &AbortHandle,
        f: impl FnOnce(&mut Ctx) -> R,
    ) -> R {
        let was = self.abort_flag;
        self.abort_flag = Arc::as_ptr(&flag.0);
        struct Restore<'c>(&'c mut Ctx, *const AtomicU32);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.abort_flag = self.1;
            }
        }
        let g = Restore(self, was);
        f(g.0)
    }
}

/// Aborts the outstanding children of frame `id` (list at `head`): drops the ones still
/// queued here unrun and sets [`ABORT_BIT`] on the others that are not done and
/// looked at. Returns the number aborted.
pub(super) fn abort_children(ctx: &mut Ctx, id: u64, head: *mut Record) -> u64 {
    let mut n = 0u64;
    while let Some(j) = ctx.pop_own(id) {
        // SAFETY: popped by us from our own stack or deque: the record is live (I3) and
        // we hold it (I2); it is not run, the release of the list drops the job.
        unsafe {
            (*j.0.as_ptr())
                .state
                .store(DONE | ABORT_BIT, Ordering::Relaxed)
        };
        n += 1;
    }
    // Children given back to this frame (by the result lookup or the external stealer)
    // and waiting in the inbox: taken unrun (marked done).
    while ctx.take_given_back(id, false) {}
    let mut away = false;
    let mut p = head;
    while let Some(r) = NonNull::new(p) {
        // SAFETY: our own live records (I1, I3); the state is atomic and `next`
        // immutable until the list is released.
        let rec = unsafe { r.as_ref() };
        let s = rec.state.load(Ordering::Acquire);
        if s & (ABORT_BIT | SEEN_BIT) == 0 {
            let b = base_state(s);
            if b == PUBLISHED || b == STOLEN || b == DONE {
                // Only this thread sets the bit; a thief's transitions keep it.
                rec.state.fetch_or(ABORT_BIT, Ordering::AcqRel);
                n += 1;
                away |= b != DONE;
            }
        }
        p = rec.next;
    }
    if away {
        ctx.shared.notify_abort();
    }
    if n > 0 {
        ctx.stats.aborts += 1;
        ctx.stats.aborted += n;
    }
    n
}
