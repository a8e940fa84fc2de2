//! The scheduling kernel: invocation records, the per-worker record pool, frames,
//! `spawn`/`sync`, and the execution paths of local and stolen jobs.
//!
//! This is the only module tree of the crate with `unsafe` code (the crate root denies
//! it everywhere else). The design follows the invocation records of Satin (Euro-Par
//! 2000, section 3):
//!
//! - An invocation record ([`Record`]) holds the job's parameters (the job value), the
//!   place where its result is stored, and a state word. Records come from a per-worker
//!   free list ([`RecordPool`]), so a spawn does not allocate (jobs larger than
//!   [`INLINE_BYTES`] are boxed into the record instead of stored inline).
//! - A spawn writes the record and pushes a pointer to it onto the worker's *private
//!   stack*, a plain vector no other thread sees: no fence, no atomic read-modify-write.
//!   The oldest part of a worker's work lives in its crossbeam deque instead (owner
//!   LIFO, thieves FIFO): every deque entry is older than every private one, so the
//!   two together form one deque, popped private end first.
//! - Publishing moves the oldest private record to the deque. A worker publishes when
//!   its deque is empty and someone could steal (other workers, or an
//!   [`ExternalStealer`](crate::ExternalStealer) of the distributed layer): then one
//!   job, the oldest and usually largest, is always there for a thief, and the fenced
//!   deque operations happen only when that job is taken or popped back, not per spawn.
//!   With one worker and no external stealer nothing is ever published (the split
//!   deque of Lace, van Dijk and van de Pol 2014, with a fixed one-job shared part).
//! - Adaptive inlining (lazy task creation): when the worker already holds
//!   `inline_depth` unstarted jobs, a spawn runs the child at once as a plain call and
//!   its ticket carries the result; no record is made. Thieves take the oldest jobs,
//!   which stay queued, so parallelism is not lost; the deep, small jobs that nobody
//!   would steal cost a call. `SatinBuilder::inline_depth` sets the depth
//!   (`usize::MAX`: never inline).
//! - The record lives until the frame that spawned it has been synced and its results
//!   are dead. Frames are strictly nested on a worker's stack, a job runs to completion
//!   on one thread, and a frame never returns (not even by unwinding) while one of its
//!   children is still running elsewhere, so a thief's pointer stays valid.
//! - Redo mode (fault tolerance): a worker that runs a redone job does not inline, marks
//!   the records it spawns (down to the redo depth below the redone job; the depth is
//!   in the mark), and offers each marked record to the installed result lookup before
//!   running it; a record the lookup takes is held like a job the
//!   external stealer took. A job given back goes to its owner's inbox, where the
//!   frame waiting for it takes it first (also when the frame unwinds). Outside redo mode the only cost is one test of a flag of
//!   the context per sync that has children ([`redo`]).
//!
//! The modules, one concept each: [`record`] (the invocation record, its slot and the
//! type-erased operations on it), [`record_pool`] (the per-worker free list),
//! [`ctx`] (the worker's context: private stack, deque, stealing), [`frame`] (a frame,
//! its tickets, `spawn` and `sync`), [`stolen`] (a job taken by a thread outside the
//! pool) and [`redo`] (redo mode and the offers to the result lookup).
//!
//! # Safety argument
//!
//! Invariants a reviewer can check (referred to as I1..I5 in the SAFETY comments of
//! every module below):
//!
//! - I1: a record pointer taken from the free list is owned exclusively by the frame
//!   that spawned it until that frame's list is released; a released record is only in
//!   the free list.
//! - I2: the slot of a record is accessed by exactly one thread at a time: the spawning
//!   thread until the record is published on the deque; then the single thread that
//!   popped/stole it (crossbeam hands each element to exactly one taker) until it
//!   stores `DONE` with `Release`; then the spawning thread again after it observed
//!   `DONE` with `Acquire` (or after it ran the record itself). A thread that holds a
//!   record (popped or stolen it) may hand it on as a `StolenJob` (to the result
//!   lookup in redo mode): it stores `STOLEN` first and does not touch the record
//!   after the hand-over; the `StolenJob`'s holder then has the slot until it stores
//!   `DONE`/`PANICKED` (`Release`) or gives it back through the inbox of the record's
//!   owner (whose lock orders the giver's accesses before the taker's: the owner, or
//!   an idle worker), or returns it to the worker that offered it within the same call
//!   (recognized by the offer's token, not by the record's address), which then has
//!   the slot again.
//! - I3: a frame's records are released only after every child is `DONE`, was run by
//!   this thread (`QUEUED`: never published; `LOCAL`: popped back from the deque, or
//!   given back to this thread by the result lookup within the offer), or was popped
//!   back (or taken from this worker's inbox) and dropped unrun by this thread. Only
//!   `PUBLISHED` and `STOLEN` children may still be in another thread's hands; a
//!   child popped by its frame's sync and handed to the result lookup is `STOLEN` and
//!   the sync does not count it as run, so the frame waits for its `DONE` like for any
//!   stolen child (a child given back later waits in the inbox, `STOLEN`, until its
//!   frame's wait or an idle worker takes it).
//! - I4: the pool memory (chunks) lives as long as the worker's `Ctx`, which outlives
//!   every record of that worker (the worker thread leaves its loop only when idle).
//! - I5: `Slot<J>` of a record is accessed only through the vtable or ticket of the
//!   same `J` it was created with (the vtable is written at spawn; tickets carry `J`
//!   in their type). A frame's sync may call its children's `run` through a function
//!   pointer the frame noted at its spawns instead of each record's vtable: only when
//!   every spawn of the frame had that same `run` (`Frame::run`, `Frame::mixed`), so
//!   it is the `run` of every record's own vtable.
//!
//! A synced frame's records go back to the pool in one splice of its list (head to
//! tail) when no child's type needs a release (known per type at compile time,
//! `record::needs_release`); otherwise each record's `release` is called (I3, I5).

mod abort;
mod ctx;
mod frame;
mod inlet;
mod record;
mod record_pool;
mod redo;
mod stolen;

pub use abort::AbortHandle;
pub use ctx::Ctx;
pub use frame::{Frame, Spawned, Synced};
pub use inlet::{CatchFrame, Caught, Inlet};
pub(crate) use record::JobRef;
pub use record::{INLINE_BYTES, MAX_REDO_DEPTH, MAX_WORKERS};
pub use stolen::StolenJob;

/// Whether a caught unwinding is an aborted job stopping (not a failure).
pub(crate) fn is_abort_payload(p: &(dyn std::any::Any + Send)) -> bool {
    abort::is_abort(p)
}
