//! The hook through which workers in redo mode ask whether a job's result was saved
//! somewhere (the distributed layer's directory of saved results).

use crate::kernel::StolenJob;
use satin_core::JobKey;

/// Answers "is this job's result saved somewhere?" for workers in redo mode.
///
/// A worker runs in *redo mode* while it runs a redone job (one given back with
/// [`StolenJob::give_back_redo`], a wire job run with
/// [`Satin::execute_wire_job`](crate::Satin::execute_wire_job)`(.., true, ..)`, or a
/// root job while [`Satin::set_redo_roots`](crate::Satin::set_redo_roots) is on) and
/// everything that job spawns. In redo mode, before a spawned job of a remote-capable
/// type runs, the worker asks the lookup installed with
/// [`Satin::set_result_lookup`](crate::Satin::set_result_lookup). Outside redo mode the
/// lookup is never called.
///
/// Both methods run on a worker thread, in the middle of a job: they must be quick
/// and must not block (hand the job to another thread to wait for a result).
pub trait ResultLookup: Send + Sync + 'static {
    /// Cheap: `false` when no lookup can hit (no saved result is known); then the
    /// worker does not even compute the job's key.
    fn active(&self) -> bool;

    /// `job` is about to run in redo mode and has key `key`. Return `Err(job)` to run
    /// it here, or take it (`Ok(())`): then the lookup must finish it exactly once,
    /// later and from any thread, with [`StolenJob::complete_from_wire`] (the saved
    /// result's bytes), [`StolenJob::fail`] or [`StolenJob::give_back_redo`] (run it
    /// here after all, in redo mode, without asking the lookup about it again). The
    /// worker goes on with other work meanwhile, as if a thief had stolen the job.
    ///
    /// Returning a different `StolenJob` than the one given is not an error: that one
    /// is given back, and the given one counts as taken. A panic counts as taken too
    /// (the job, dropped by the unwinding, is given back and redone). A panic in
    /// [`ResultLookup::active`] (or in the job's serialization for its key) makes the
    /// job run here.
    ///
    /// A job given back (by any of its holders) goes to the worker whose frame waits
    /// for it, which takes it before any other work.
    ///
    /// Each worker keeps its own reference to the installed lookup; a lookup replaced
    /// or cleared is dropped once every worker has made its next offer or gone idle.
    fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob>;
}
