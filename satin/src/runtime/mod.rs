//! The worker pool of one process: the [`Satin`] handle, its builder, the state the
//! workers share, their loop, and the stealer for threads outside the pool.

#![forbid(unsafe_code)]

mod builder;
mod inbox;
mod lookup;
mod shared;
mod stealer;
mod worker;

pub(crate) use builder::Config;
pub use builder::{SatinBuilder, DEFAULT_INLINE_DEPTH, DEFAULT_REDO_DEPTH};
pub(crate) use inbox::{GivenBack, Rerun};
pub use lookup::ResultLookup;
pub(crate) use shared::{Injected, Shared};
pub use stealer::ExternalStealer;

use crate::error::SatinError;
use crate::kernel::{AbortHandle, Ctx};
use crate::shared::GuardPolicy;
use crate::stats::{NetCounters, Stats};
use crate::wire::{ErasedJob, JobRegistry};
use crate::Job;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// The callback of [`Satin::set_idle_hook`].
type IdleHook = Box<dyn Fn() + Send + Sync>;

/// A Satin instance: a pool of worker threads with work-stealing deques.
///
/// Dropping it stops the workers (after the running jobs).
pub struct Satin {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Satin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Satin")
            .field("workers", &self.workers())
            .finish()
    }
}

impl Satin {
    /// A builder; `Satin::builder().workers(2).build()?`.
    pub fn builder() -> SatinBuilder {
        SatinBuilder::default()
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.shared.stealers.len()
    }

    /// Runs a root job on the workers and returns its result.
    ///
    /// Must not be called from inside a job. A panic in the job (or in any job it
    /// spawned) is propagated here, on the calling thread, after the computation has
    /// been unwound; the pool stays usable. See [`Satin::try_run`].
    pub fn run<J: Job>(&self, job: J) -> J::Output {
        match self.run_raw(job) {
            Ok(v) => v,
            Err(p) => panic::resume_unwind(p),
        }
    }

    /// Like [`Satin::run`], but a panic is returned as [`SatinError::JobPanicked`].
    pub fn try_run<J: Job>(&self, job: J) -> Result<J::Output, SatinError> {
        self.run_raw(job).map_err(SatinError::from_panic)
    }

    fn run_raw<J: Job>(&self, job: J) -> Result<J::Output, Box<dyn std::any::Any + Send>> {
        let (tx, rx) = mpsc::sync_channel(1);
        let shared = self.shared.clone();
        self.shared.submit(Injected::Task {
            run: Box::new(move |ctx: &mut Ctx| {
                let r = panic::catch_unwind(AssertUnwindSafe(|| job.run(ctx)));
                ctx.release_deferred();
                ctx.flush_stats();
                shared.task_done();
                let _ = tx.send(r);
            }),
            redo: self.shared.redo_roots.load(Ordering::SeqCst),
        });
        rx.recv().expect("satin: worker pool stopped")
    }

    /// Runs a job that came from the wire on a worker; `done` receives its serialized
    /// result (or the error, e.g. [`SatinError::JobPanicked`]) on the worker thread.
    ///
    /// With `redone` the job runs in redo mode (see [`ResultLookup`]): the thief's
    /// side of a job that was stolen from a worker in redo mode
    /// ([`StolenJob::is_redone`](crate::StolenJob::is_redone)). The job itself is not
    /// offered to the lookup here (the owner's side may do that with
    /// [`StolenJob::key`](crate::StolenJob::key) before sending it); the jobs it
    /// spawns are.
    ///
    /// The job stops early, with [`SatinError::Aborted`], once `abort` is aborted (its
    /// owner aborted it; see [`Inlet::abort`](crate::Inlet::abort)).
    ///
    /// Before it runs, the job's [`Job::guard`] must hold: while it does not, the
    /// worker waits for writes to the shared objects (see [`crate::shared`]), and
    /// fails the job with [`SatinError::GuardTimeout`] after
    /// [`SatinBuilder::guard_patience`]. [`Satin::execute_wire_job_from`] also fetches the
    /// sender's copies.
    pub fn execute_wire_job(
        &self,
        job: Box<dyn ErasedJob>,
        redone: bool,
        abort: AbortHandle,
        done: impl FnOnce(Result<Vec<u8>, SatinError>) + Send + 'static,
    ) {
        self.execute_wire_job_from(job, redone, abort, None, done)
    }

    /// [`Satin::execute_wire_job`], where `fetch` asks the process the job came
    /// from for its copies of the shared objects, when the job's guard does not
    /// hold ([`GuardPolicy`] says when); the copies replace the local ones as they
    /// arrive (the distributed layer does that).
    pub fn execute_wire_job_from(
        &self,
        job: Box<dyn ErasedJob>,
        redone: bool,
        abort: AbortHandle,
        fetch: Option<Box<dyn Fn() + Send>>,
        done: impl FnOnce(Result<Vec<u8>, SatinError>) + Send + 'static,
    ) {
        let shared = self.shared.clone();
        self.shared.submit(Injected::Task {
            run: Box::new(move |ctx: &mut Ctx| {
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    if abort.is_aborted() {
                        // Aborted before it started: not run.
                        return Err(SatinError::Aborted);
                    }
                    if !job.guard() {
                        let (w, r) = crate::shared::wait_for_guard(
                            job.name(),
                            &|| job.guard(),
                            &|| abort.is_aborted(),
                            fetch.as_deref().map(|f| f as &dyn Fn()),
                            GuardPolicy {
                                patience: shared.guard_patience,
                                ..GuardPolicy::default()
                            },
                        );
                        shared.net.add_guard(w);
                        r?;
                    }
                    ctx.with_abort_handle(&abort, |ctx| job.run_to_wire(ctx))
                }))
                .unwrap_or_else(|p| {
                    if crate::kernel::is_abort_payload(&*p) {
                        Err(SatinError::Aborted)
                    } else {
                        Err(SatinError::from_panic(p))
                    }
                });
                ctx.release_deferred();
                ctx.flush_stats();
                shared.task_done();
                done(r);
            }),
            redo: redone,
        });
    }

    /// Installs the lookup that workers in redo mode ask before they run a job (see
    /// [`ResultLookup`]); replaces an earlier one. Without one, redo mode only turns
    /// adaptive inlining off.
    pub fn set_result_lookup(&self, lookup: Arc<dyn ResultLookup>) {
        self.shared.set_result_lookup(Some(lookup));
    }

    /// Removes the lookup installed with [`Satin::set_result_lookup`].
    pub fn clear_result_lookup(&self) {
        self.shared.set_result_lookup(None);
    }

    /// Makes [`Satin::run`] and [`Satin::try_run`] run their root job in redo mode
    /// (`true`) or not (`false`, the default): a new master that restarts the root
    /// after the old one died, so that the root's subtree looks up every saved
    /// result. Applies to root jobs submitted after the call.
    pub fn set_redo_roots(&self, on: bool) {
        self.shared.redo_roots.store(on, Ordering::SeqCst);
    }

    /// The registry of remote-capable job types.
    pub fn registry(&self) -> &JobRegistry {
        &self.shared.registry
    }

    /// Rebuilds a job from the wire; [`SatinError::UnknownJobType`] for an unknown name.
    pub fn from_wire(&self, name: &str, bytes: &[u8]) -> Result<Box<dyn ErasedJob>, SatinError> {
        self.shared.registry.from_wire(name, bytes)
    }

    /// A handle for a thread outside the pool (the network thread) to steal jobs from
    /// the FIFO end of the workers' deques without stopping the workers.
    ///
    /// From then on the workers keep one job published for it at all times (without a
    /// stealer a single worker keeps its jobs private). Workers notice this when they
    /// next take a root job or stolen work, so create the stealer before submitting.
    pub fn external_stealer(&self) -> ExternalStealer {
        self.shared.thieves.store(true, Ordering::Relaxed);
        ExternalStealer::new(self.shared.clone())
    }

    /// Whether this instance is starving: some worker found no work (it idles, or a
    /// sync waits for children that run elsewhere) and no deque nor the injector holds
    /// any. Cheap (a few atomic loads): the distributed layer polls it to decide when
    /// to steal from other processes.
    pub fn is_starving(&self) -> bool {
        self.shared.hungry.load(Ordering::SeqCst) > 0 && !self.shared.has_visible_work()
    }

    /// Installs a callback run (on the worker thread) each time a worker runs out of
    /// work, so that a driver waiting for that can wake up instead of polling. It must
    /// be cheap and must not block. Returns `false` if a hook was already installed.
    pub fn set_idle_hook(&self, hook: impl Fn() + Send + Sync + 'static) -> bool {
        self.shared.idle_hook.set(Box::new(hook)).is_ok()
    }

    /// Installs the callback called when a frame aborts children that threads outside
    /// the pool may hold ([`StolenJob`](crate::StolenJob)s of the external stealer or
    /// the result lookup): they should look at
    /// [`StolenJob::is_aborted`](crate::StolenJob::is_aborted). Called on the aborting
    /// worker: must be cheap and must not block. Returns `false` if a hook was already
    /// installed.
    pub fn set_abort_hook(&self, hook: impl Fn() + Send + Sync + 'static) -> bool {
        self.shared.abort_hook.set(Box::new(hook)).is_ok()
    }

    /// The counters the distributed layer fills in (messages, bytes, (de)serialization
    /// time, remote steals).
    pub fn net_counters(&self) -> &NetCounters {
        &self.shared.net
    }

    /// Statistics per worker and total. Print them with `{}` (Java Satin style).
    pub fn stats(&self) -> Stats {
        Stats::collect(&self.shared.stats, &self.shared.net)
    }

    /// Sets all counters to zero.
    pub fn reset_stats(&self) {
        for s in &self.shared.stats {
            s.reset();
        }
        self.shared.net.reset();
    }
}

impl Drop for Satin {
    fn drop(&mut self) {
        {
            let _g = self.shared.sleep.lock();
            self.shared.shutdown.store(true, Ordering::SeqCst);
            self.shared.wake.notify_all();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}
