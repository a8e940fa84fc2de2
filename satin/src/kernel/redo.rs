//! Redo mode: how a worker runs a redone job and everything inside it, offering each
//! job to the installed [`ResultLookup`](crate::ResultLookup) before it runs.
//!
//! A worker is in redo mode while it runs a job that must be redone after a failure:
//! a record given back with [`StolenJob::give_back_redo`], a wire job run with
//! `redone`, a root job while `Satin::set_redo_roots` is on, or a record that carries
//! the redo mark. The mode is a flag of [`Ctx`], constant while a job runs its own
//! code: every nested run that needs another mode switches it and restores it after,
//! also when the nested run unwinds.
//!
//! In redo mode:
//! - spawns are never inlined (`inline_at` is `usize::MAX`), so every child gets a
//!   record and a lookup; `Frame::spawn` is unchanged;
//! - spawns write the redo mark into their records (the top bit of the owner word,
//!   taken from `Ctx::owner_tag`, so a spawn does not test the mode), so that whoever
//!   runs a record knows its mode: the owner at its sync, a local thief, or the
//!   external stealer ([`StolenJob::is_redone`]), which sends the mark with the job so
//!   that a thief in another process runs it in redo mode too;
//! - before a marked record runs (popped by its frame's sync, or stolen by another
//!   worker), the worker computes its key and asks the lookup (only if a lookup is
//!   installed and `active()`, and the job type is remote-capable). A lookup that
//!   takes the record holds it exactly like the external stealer holds a job it stole:
//!   the state is `STOLEN`, the frame's sync waits for `DONE` and runs other work
//!   meanwhile. A record given back to be redone is not offered again.
//!
//! Outside redo mode none of this runs: the fault-free path pays one test of the
//! mode flag per sync that has children, and nothing per spawn.

use super::ctx::Ctx;
use super::record::{JobRef, LOCAL, REDO_BIT};
use super::stolen::StolenJob;
use satin_core::JobKey;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;

impl Ctx {
    /// Whether the job running now runs in redo mode (see
    /// [`ResultLookup`](crate::ResultLookup)).
    pub fn in_redo_mode(&self) -> bool {
        self.redo
    }

    /// Switches the mode; adaptive inlining is off in redo mode.
    pub(super) fn set_redo(&mut self, on: bool) {
        self.redo = on;
        self.owner_tag = self.worker as u32 | if on { REDO_BIT } else { 0 };
        self.inline_depth = if on {
            usize::MAX
        } else {
            self.shared.inline_depth
        };
        // Recomputes `inline_at` from the new depth.
        self.set_private_base(self.private_base);
    }

    /// Runs `f` in redo mode `on`, then restores the mode (also when `f` unwinds).
    #[inline]
    pub(crate) fn with_redo<R>(&mut self, on: bool, f: impl FnOnce(&mut Ctx) -> R) -> R {
        if self.redo == on {
            return f(self);
        }
        self.with_redo_switched(on, f)
    }

    #[cold]
    #[inline(never)]
    fn with_redo_switched<R>(&mut self, on: bool, f: impl FnOnce(&mut Ctx) -> R) -> R {
        let was = self.redo;
        self.set_redo(on);
        let r = panic::catch_unwind(AssertUnwindSafe(|| f(self)));
        self.set_redo(was);
        r.unwrap_or_else(|p| panic::resume_unwind(p))
    }

    /// [`Ctx::run_local`] in redo mode: offers the record (popped from this worker's
    /// own stack or deque) to the lookup, runs it here if the lookup does not take it.
    /// Returns whether it ran here: if not, the record is `STOLEN` and its frame must
    /// wait for its `DONE` (I3).
    #[cold]
    #[inline(never)]
    pub(super) fn run_local_redo(&mut self, j: JobRef) -> bool {
        // SAFETY: popped from our own stack or deque by its frame's sync: live (I3),
        // unrun, and we hold the slot (I2).
        let Some(j) = (unsafe { self.offer(j) }) else {
            return false;
        };
        // SAFETY: the lookup gave the record back to us (`offer` checked it is the
        // same one): we hold the slot again (I2). It runs here, so LOCAL (done for its
        // frame once run), not the STOLEN the offer stored.
        unsafe { (*j.0.as_ptr()).state.store(LOCAL, Ordering::Relaxed) };
        self.stats.redo_jobs += 1;
        let r = j.0;
        // SAFETY: live (I3); the vtable is immutable.
        let run = unsafe { (*r.as_ptr()).vtable.run };
        // SAFETY: we hold the slot (I2); the vtable is the record's own (I5).
        unsafe { run(r, self) };
        true
    }

    /// Offers a record about to run in redo mode to the result lookup. Returns it if
    /// it must run here (no lookup, an inactive one, a type that is not
    /// remote-capable or fails to serialize, or the lookup gave it back; its state is
    /// then `STOLEN` if the lookup saw it), or `None` if the lookup took it: then the
    /// record is `STOLEN`, held by a [`StolenJob`] that stores `DONE` (or `PANICKED`)
    /// or gives it back, and the caller must not touch it again.
    ///
    /// # Safety
    /// The caller holds the slot of the live, unrun record `j` (I2): it popped or
    /// stole it; its frame waits for `DONE` while it is `STOLEN` (I3).
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn offer(&mut self, j: JobRef) -> Option<JobRef> {
        let lookup = self.shared.result_lookup()?;
        if !lookup.active() {
            return Some(j);
        }
        let r = j.0;
        // SAFETY: live (caller contract); the vtable is immutable.
        let to_wire = unsafe { (*r.as_ptr()).vtable.to_wire };
        // SAFETY: we hold the slot (caller contract, I2); the vtable is the record's
        // own (I5).
        let key = match unsafe { to_wire(r) } {
            Some(Ok((name, bytes))) => JobKey::of(name, &bytes),
            _ => return Some(j),
        };
        let stats = &self.shared.stats[self.worker];
        stats.offering();
        // It stores STOLEN before the lookup sees it: a lookup that completes it at
        // once (from any thread) stores DONE after that.
        let job = StolenJob::new(j, self.shared.clone());
        match panic::catch_unwind(AssertUnwindSafe(|| lookup.lookup(key, job))) {
            Ok(Err(back)) => {
                if back.record() == r {
                    stats.offer_returned();
                    return Some(back.into_record());
                }
                // Another StolenJob: it goes back to the pool; ours stays with the
                // lookup, which took it after all.
                tracing::warn!("satin: a result lookup returned another job than the one offered");
                back.give_back();
            }
            Ok(Ok(())) => {}
            Err(_) => {
                // The job was dropped by the unwinding (so given back) or kept: either
                // way it is no longer ours, as if the lookup had taken it.
                tracing::error!("satin: the result lookup panicked; the job counts as taken");
            }
        }
        None
    }
}
