//! A job taken out of a worker's hands: by a thread outside the worker pool (the
//! distributed layer's driver, through the external stealer), which sends it to
//! another process and completes it with the result that comes back, or by the result
//! lookup, to which a worker in redo mode offers it (see [`super::redo`]).

use super::ctx::{finish_state, take_state};
use super::record::{owner_index, owner_redone, JobRef, Record, ABORT_BIT, DONE, PANICKED};
use crate::error::SatinError;
use crate::runtime::{GivenBack, Rerun, Shared};
use satin_core::JobKey;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A job taken from a worker's deque (FIFO end) by a thread outside the worker pool,
/// such as the network thread of the distributed layer.
///
/// It must be finished exactly once: [`StolenJob::complete_from_wire`] (or a
/// successful [`StolenJob::try_complete_from_wire`]), [`StolenJob::fail`], [`StolenJob::give_back`] or [`StolenJob::give_back_redo`].
/// Dropping it gives it back. A [`ResultLookup`](crate::ResultLookup) receives the
/// jobs it is offered as `StolenJob`s too.
pub struct StolenJob {
    rec: Option<JobRef>,
    shared: Arc<Shared>,
    /// The offer to the result lookup this job was made for (`None`: taken by the
    /// external stealer).
    offer: Option<OfferToken>,
}

/// Identifies one offer to the result lookup: the offering worker and its count of
/// offers. Unlike the record's address (which a later spawn may reuse), no other
/// `StolenJob` carries it, so the worker knows whether the lookup returned the job it
/// was offered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct OfferToken {
    pub(super) worker: usize,
    pub(super) seq: u64,
}

impl std::fmt::Debug for StolenJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StolenJob")
            .field("name", &self.name())
            .finish()
    }
}

impl StolenJob {
    /// A job the external stealer took from a deque.
    pub(crate) fn new(j: JobRef, shared: Arc<Shared>) -> Self {
        // SAFETY: crossbeam handed the live record to the external stealer alone (I2,
        // I3).
        unsafe { Self::taken(j, shared, None) }
    }

    /// A job a worker offers to the result lookup.
    ///
    /// # Safety
    /// The offering worker holds the slot of the live, unrun record `j` (I2) and
    /// gives it up to the new `StolenJob`; `j`'s frame waits for it while it is
    /// `STOLEN` (I3).
    pub(super) unsafe fn offered(j: JobRef, shared: Arc<Shared>, token: OfferToken) -> Self {
        // SAFETY: the caller's contract.
        unsafe { Self::taken(j, shared, Some(token)) }
    }

    /// # Safety
    /// The caller (the external stealer, or the worker offering the record to the
    /// result lookup) holds the slot of the live, unrun record `j` alone (I2, I3).
    unsafe fn taken(j: JobRef, shared: Arc<Shared>, offer: Option<OfferToken>) -> Self {
        // SAFETY: the caller's contract: the record is live and ours alone. The frame
        // may abort it meanwhile: the update keeps its bit.
        take_state(unsafe { &(*j.0.as_ptr()).state });
        StolenJob {
            rec: Some(j),
            shared,
            offer,
        }
    }

    fn rec(&self) -> NonNull<Record> {
        // An unfinished StolenJob always holds its record; `finish` and `give_back`
        // consume it.
        self.rec.expect("StolenJob used after completion").0
    }

    /// The offer this job was made for (for the offering worker's check that the
    /// lookup returned the job it offered).
    pub(super) fn offer_token(&self) -> Option<OfferToken> {
        self.offer
    }

    /// Takes the record out, so that it is neither given back nor finished: the
    /// caller holds it again (the result lookup gave it back to the worker that
    /// offered it).
    pub(super) fn into_record(mut self) -> JobRef {
        self.rec.take().expect("StolenJob used after completion")
    }

    /// The job's identity ([`JobKey::of`] its registered type name and serialized
    /// parameters), or `None` if its type is not remote-capable or fails to
    /// serialize. Serializes the job (as [`StolenJob::to_wire`] does).
    pub fn key(&self) -> Option<JobKey> {
        self.to_wire().map(|(name, bytes)| JobKey::of(name, &bytes))
    }

    /// Whether the job belongs to a redone subtree: it was spawned by a job running in
    /// redo mode (see [`ResultLookup`](crate::ResultLookup)), at most
    /// [`SatinBuilder::redo_depth`](crate::SatinBuilder::redo_depth) levels below the
    /// redone job (deeper jobs are not marked). A job sent to another
    /// process must carry this mark, and run there in redo mode
    /// ([`Satin::execute_wire_job`](crate::Satin::execute_wire_job) with `redone`).
    pub fn is_redone(&self) -> bool {
        // SAFETY: the record is live while stolen and unfinished (I3); `owner` is
        // immutable.
        owner_redone(unsafe { (*self.rec().as_ptr()).owner })
    }

    /// Whether the job's spawner aborted it (see [`crate::Inlet::abort`]): its result
    /// is not wanted; finish it with [`StolenJob::finish_aborted`] and tell whoever
    /// runs it to stop.
    pub fn is_aborted(&self) -> bool {
        // SAFETY: the record is live while stolen and unfinished (I3); the state is
        // atomic.
        unsafe { (*self.rec().as_ptr()).state.load(Ordering::Acquire) & ABORT_BIT != 0 }
    }

    /// Finishes an aborted job without a result; gives the job back (`Err`) if it was
    /// not aborted.
    pub fn finish_aborted(mut self) -> Result<(), StolenJob> {
        if !self.is_aborted() {
            return Err(self);
        }
        // The job stays in the slot; the parent's release drops it.
        self.finish(DONE);
        Ok(())
    }

    /// The registered name of the job's type, if it is remote-capable.
    pub fn name(&self) -> Option<&'static str> {
        // SAFETY: the record is live while stolen and unfinished (I3).
        unsafe { ((*self.rec().as_ptr()).vtable.name)() }
    }

    /// Serializes the job for another process: `(type name, bytes)`, or `None` if the
    /// job type is not registered as remote-capable or fails to serialize (give it
    /// back then).
    pub fn to_wire(&self) -> Option<(&'static str, Vec<u8>)> {
        let r = self.rec();
        // SAFETY: the record is live while stolen and unfinished (I3); the vtable is
        // immutable.
        let to_wire = unsafe { (*r.as_ptr()).vtable.to_wire };
        // SAFETY: we hold the slot (I2) and the vtable is the record's own (I5).
        match unsafe { to_wire(r) } {
            Some(Ok(w)) => Some(w),
            _ => None,
        }
    }

    /// Finishes the job with a result that came back as bytes (its serialized
    /// `Output`). On a decoding error the parent's sync panics with that error.
    pub fn complete_from_wire(mut self, bytes: &[u8]) -> Result<(), SatinError> {
        let r = self.rec();
        // SAFETY: the record is live while stolen and unfinished (I3); the vtable is
        // immutable.
        let complete = unsafe { (*r.as_ptr()).vtable.complete_wire };
        // SAFETY: we hold the slot until DONE (I2) and the vtable is the record's own
        // (I5).
        let res = unsafe { complete(r, bytes) };
        match &res {
            Ok(()) => self.finish(DONE),
            Err(e) => {
                self.shared
                    .put_panic(r.as_ptr() as usize, Box::new(e.clone()));
                self.finish(PANICKED);
            }
        }
        res
    }

    /// Finishes the job with a result that came back as bytes, if they decode: else
    /// the job is handed back untouched (still taken, unfinished) with the decoding
    /// error, so the caller can finish it otherwise, e.g. redo it with
    /// [`StolenJob::give_back_redo`]. For results that may be stale or foreign (saved
    /// results fetched, looked up or restored from a checkpoint): a bad one costs a
    /// recomputation, never the run.
    pub fn try_complete_from_wire(mut self, bytes: &[u8]) -> Result<(), (StolenJob, SatinError)> {
        let r = self.rec();
        // SAFETY: the record is live while stolen and unfinished (I3); the vtable is
        // immutable.
        let complete = unsafe { (*r.as_ptr()).vtable.complete_wire };
        // SAFETY: we hold the slot until DONE (I2) and the vtable is the record's own
        // (I5). `complete_wire` decodes before it writes the slot: on an error the
        // slot still holds the unrun job, so the record may be given back and run.
        match unsafe { complete(r, bytes) } {
            Ok(()) => {
                self.finish(DONE);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }

    /// Finishes the job with an error: the parent's sync unwinds with it, and
    /// [`Satin::try_run`](crate::Satin::try_run) returns it as it is (not as a panic).
    pub fn fail(mut self, err: SatinError) {
        let r = self.rec();
        // The job stays in the slot; the parent's release drops it.
        self.shared.put_panic(r.as_ptr() as usize, Box::new(err));
        self.finish(PANICKED);
    }

    /// Returns the job to the pool: its owner (or an idle worker) will run it. A job
    /// that [is redone](StolenJob::is_redone) runs in redo mode; it is first offered to
    /// the result lookup if it was taken by the external stealer (it was never
    /// offered), not if the lookup gives it back (it was offered once).
    pub fn give_back(mut self) {
        self.push_back(false);
    }

    /// Returns the job to the pool to be redone: a local worker runs it in redo mode,
    /// as the redone job of a new redone subtree (depth 0), so every job it spawns down
    /// to [`SatinBuilder::redo_depth`](crate::SatinBuilder::redo_depth) levels below
    /// it is first offered to the result lookup (the job itself is not). For a job
    /// given to a process that died, and for a job a result lookup took and cannot
    /// complete.
    pub fn give_back_redo(mut self) {
        self.push_back(true);
    }

    /// Gives the record back to the inbox of its owner (whose frame waits for it):
    /// in redo mode and without an offer if `redo` or if it was offered already.
    fn push_back(&mut self, redo: bool) {
        if let Some(j) = self.rec.take() {
            // SAFETY: the record is live until it is given back (I3); `owner` and
            // `frame_id` are immutable. They are read first: after the push the owner
            // may run and release it. A shared reference is sound: the slot is an
            // `UnsafeCell` and the state atomic.
            let rec = unsafe { &*j.0.as_ptr() };
            let (owner, frame) = (rec.owner, rec.frame_id);
            let g = GivenBack {
                job: j,
                frame,
                rerun: if redo {
                    Rerun::Redone
                } else if self.offer.is_some() {
                    Rerun::Offered
                } else {
                    Rerun::AsMarked
                },
            };
            self.shared.give_back_to(owner_index(owner), g);
        }
    }

    fn finish(&mut self, state: u32) {
        if let Some(j) = self.rec.take() {
            // SAFETY: the record is live until the store below (I3); `owner` is
            // immutable. It is read first: after the store the owner may free it.
            let owner = owner_index(unsafe { (*j.0.as_ptr()).owner });
            // SAFETY: live until this update, after which it is not touched again; the
            // update keeps an abort of the frame's.
            finish_state(unsafe { &(*j.0.as_ptr()).state }, state);
            self.shared.wake_worker(owner);
        }
    }
}

impl Drop for StolenJob {
    fn drop(&mut self) {
        self.push_back(false);
    }
}
