//! Redo mode: how a worker runs a redone job and everything inside it, offering each
//! job to the installed [`ResultLookup`](crate::ResultLookup) before it runs.
//!
//! A worker is in redo mode while it runs a job that must be redone after a failure:
//! a record given back with [`StolenJob::give_back_redo`], a wire job run with
//! `redone`, a root job while `Satin::set_redo_roots` is on (these are the redone
//! jobs, at depth 0), or a record that carries the redo mark (at the depth in the
//! mark). The mode is the owner word of [`Ctx`] (`Ctx::owner_tag`, with the flag
//! `Ctx::redo` beside it), constant while a job runs its own code: every nested run
//! that needs another mode or depth switches it and restores it after, also when the
//! nested run unwinds (`Ctx::with_tag`, or the explicit restore of
//! `Ctx::execute_stolen`, which catches the unwinding).
//!
//! The depth bound: a job at depth `d` of a redone subtree runs in redo mode only if
//! its children, at `d + 1`, are at most `SatinBuilder::redo_depth` deep
//! (`Ctx::tag_below`); otherwise it runs in normal mode, and so does everything below
//! it. A job at the bound was marked and offered itself, but spawns like any job.
//!
//! In redo mode:
//! - spawns are never inlined (`inline_at` is `usize::MAX`), so every child gets a
//!   record and a lookup; `Frame::spawn` is unchanged;
//! - spawns write the redo mark and their depth into their records (the top bit and
//!   the 15 bits below it of the owner word, precomputed in `Ctx::owner_tag` when
//!   the job started, so a spawn does not test the mode), so that whoever runs a
//!   record knows its mode and depth: the owner at its sync, a local thief, or the
//!   external stealer ([`StolenJob::is_redone`]), which sends the mark with the job
//!   so that a thief in another process runs it in redo mode too (from depth 0
//!   there: the depth is not sent);
//! - before a marked record runs (popped by its frame's sync, or stolen by another
//!   worker), the worker computes its key and asks the lookup (only if a lookup is
//!   installed and `active()`, and the job type is remote-capable). A lookup that
//!   takes the record holds it exactly like the external stealer holds a job it stole:
//!   the state is `STOLEN`, the frame's sync waits for `DONE` and runs other work
//!   meanwhile. A record the lookup gives back goes to its owner's inbox and is not
//!   offered again; the frame's sync takes it from there before other work (so the
//!   nesting of runs on the stack stays that of the job tree, however many jobs the
//!   lookup gives back), and an unwinding frame drops it. A marked record the
//!   external stealer gives back unsent was never offered: it is offered when it runs.
//! - A panic in the lookup's `active` or in the job's serialization runs the job here;
//!   a panic in `lookup` counts as taken (the job, dropped by the unwinding, is given
//!   back). The lookup's `Arc` is kept per worker and read again only when
//!   `Satin::set_result_lookup` changed it (a generation counter).
//!
//! Outside redo mode none of this runs: the fault-free path pays one test of the
//! mode flag per sync that has children, and nothing per spawn (the owner word it
//! writes is the worker index, as without redo mode).

use super::ctx::Ctx;
use super::record::{marked_owner, owner_depth, owner_redone, JobRef, LOCAL};
use super::stolen::{OfferToken, StolenJob};
use satin_core::JobKey;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;

impl Ctx {
    /// Whether the job running now runs in redo mode (see
    /// [`ResultLookup`](crate::ResultLookup)): the jobs it spawns are marked, get
    /// records (no inlining) and are offered to the result lookup before they run.
    /// `false` outside a redone subtree, and for a job of one that is
    /// [`SatinBuilder::redo_depth`](crate::SatinBuilder::redo_depth) below its redone
    /// job (it was offered itself, but its children are beyond the depth).
    pub fn in_redo_mode(&self) -> bool {
        self.redo
    }

    /// The owner word for the children of a job that runs at `depth` of a redone
    /// subtree (0: the redone job itself), or outside one (`None`): marked with
    /// their depth while that is at most the redo depth, else the plain worker index
    /// (normal mode).
    #[inline]
    pub(super) fn tag_below(&self, depth: Option<u32>) -> u32 {
        match depth {
            // `redo_depth` is u32::MAX when unbounded: greater than any depth.
            Some(d) if d < self.shared.redo_depth => marked_owner(self.worker, d + 1),
            _ => self.worker as u32,
        }
    }

    /// Switches the mode to the one whose spawns write owner word `tag` (see
    /// [`Ctx::tag_below`]): redo mode, with adaptive inlining off, if it is marked.
    pub(super) fn set_tag(&mut self, tag: u32) {
        self.owner_tag = tag;
        self.redo = owner_redone(tag);
        self.inline_depth = if self.redo {
            usize::MAX
        } else {
            self.shared.inline_depth
        };
        // Recomputes `inline_at` from the new depth.
        self.set_private_base(self.private_base);
    }

    /// Runs `f` in the mode of owner word `tag` (see [`Ctx::set_tag`]), then restores
    /// the mode (also when `f` unwinds).
    #[inline]
    pub(crate) fn with_tag<R>(&mut self, tag: u32, f: impl FnOnce(&mut Ctx) -> R) -> R {
        if self.owner_tag == tag {
            return f(self);
        }
        self.with_tag_switched(tag, f)
    }

    #[cold]
    #[inline(never)]
    fn with_tag_switched<R>(&mut self, tag: u32, f: impl FnOnce(&mut Ctx) -> R) -> R {
        let was = self.owner_tag;
        self.set_tag(tag);
        let r = panic::catch_unwind(AssertUnwindSafe(|| f(self)));
        self.set_tag(was);
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
        // SAFETY: live (I3); the vtable and owner word are immutable, and a shared
        // reference is sound (the slot is an `UnsafeCell`, the state atomic); it is
        // not used once the job runs.
        let rec = unsafe { &*r.as_ptr() };
        let (run, word) = (rec.vtable.run, rec.owner);
        // It runs one level deeper than its parent: its own children are marked
        // only while within the redo depth.
        let tag = self.tag_below(Some(owner_depth(word)));
        self.with_tag(tag, |ctx| {
            // SAFETY: we hold the slot (I2); the vtable is the record's own (I5).
            unsafe { run(r, ctx) }
        });
        true
    }

    /// Offers a record about to run in redo mode to the result lookup. Returns it if
    /// it must run here (a type that is not remote-capable, no lookup, an inactive
    /// one, a job that fails to serialize, a panic before the hand-over, or the lookup
    /// returned it; its state is then `STOLEN` if the lookup saw it), or `None` if the
    /// lookup took it: then the record is `STOLEN`, held by a [`StolenJob`] that stores
    /// `DONE` (or `PANICKED`) or gives it back, and the caller must not touch it again.
    ///
    /// # Safety
    /// The caller holds the slot of the live, unrun record `j` (I2): it popped or
    /// stole it; its frame waits for `DONE` while it is `STOLEN` (I3).
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn offer(&mut self, j: JobRef) -> Option<JobRef> {
        let r = j.0;
        // SAFETY: live (caller contract); the vtable is immutable.
        let vtable = unsafe { (*r.as_ptr()).vtable };
        if (vtable.name)().is_none() {
            return Some(j); // not remote-capable: no key, no lookup
        }
        self.refresh_lookup();
        let Some(lookup) = self.lookup.as_deref() else {
            return Some(j); // no lookup installed: it runs here
        };
        self.offers += 1;
        let token = OfferToken {
            worker: self.worker,
            seq: self.offers,
        };
        let shared = &self.shared;
        let stats = &shared.stats[self.worker];
        let mut handed_over = false;
        let res = panic::catch_unwind(AssertUnwindSafe(|| {
            if !lookup.active() {
                return Some(j);
            }
            // SAFETY: we hold the slot (caller contract, I2); the vtable is the
            // record's own (I5). Serializing only reads the job.
            let key = match unsafe { (vtable.to_wire)(r) } {
                Some(Ok((name, bytes))) => JobKey::of(name, &bytes),
                _ => return Some(j),
            };
            stats.offering();
            handed_over = true;
            // SAFETY: we hold the slot and give it up (caller contract); it stores
            // STOLEN before the lookup sees it, so a lookup that completes it at once
            // (from any thread) stores DONE after that.
            let job = unsafe { StolenJob::offered(j, shared.clone(), token) };
            match lookup.lookup(key, job) {
                Ok(()) => None,
                Err(back) if back.offer_token() == Some(token) => {
                    stats.offer_returned();
                    Some(back.into_record())
                }
                Err(back) => {
                    // Another StolenJob: it goes back to its owner; ours stays with
                    // the lookup, which took it after all.
                    tracing::warn!(
                        "satin: a result lookup returned another job than the one offered"
                    );
                    back.give_back();
                    None
                }
            }
        }));
        match res {
            Ok(back) => back,
            // Before the hand-over (in `active` or in the job's serialization): the
            // record is untouched and ours; it runs here.
            Err(_) if !handed_over => {
                tracing::error!(
                    "satin: the result lookup or a job's serialization panicked; the job runs here"
                );
                Some(j)
            }
            Err(_) => {
                // The job was dropped by the unwinding (so given back) or kept: either
                // way it is no longer ours, as if the lookup had taken it.
                tracing::error!("satin: the result lookup panicked; the job counts as taken");
                None
            }
        }
    }

    /// Brings the worker's own reference to the result lookup up to date (one load
    /// while the lookup does not change).
    #[inline]
    fn refresh_lookup(&mut self) {
        if self.shared.lookup_generation() != self.lookup_gen {
            (self.lookup, self.lookup_gen) = self.shared.result_lookup();
        }
    }

    /// Drops the worker's reference to the result lookup (when it goes to sleep), so
    /// that a replaced lookup is not kept alive by an idle worker.
    pub(crate) fn forget_lookup(&mut self) {
        self.lookup = None;
        self.lookup_gen = u64::MAX;
    }
}
