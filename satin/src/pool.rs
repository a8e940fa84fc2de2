//! The worker threads, the idle loop, the injector, and the public `Satin` handle.

use crate::error::{panic_message, SatinError};
use crate::kernel::{Ctx, JobRef, StolenJob};
use crate::stats::{NetCounters, SharedStats, Stats};
use crate::wire::{ErasedJob, Registry};
use crate::Job;
use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

/// Work that enters a worker from outside its own deque.
pub(crate) enum Injected {
    /// A record stolen from a deque or given back by the external stealer.
    Record(JobRef),
    /// A root job or a job that came from the wire.
    Task(Box<dyn FnOnce(&mut Ctx) + Send>),
}

/// State shared by all workers of one Satin instance.
pub(crate) struct Shared {
    pub(crate) stealers: Vec<Stealer<JobRef>>,
    pub(crate) injector: Injector<Injected>,
    threads: OnceLock<Vec<Thread>>,
    /// Root and wire tasks submitted and not yet finished; workers sleep when zero.
    active: AtomicUsize,
    shutdown: AtomicBool,
    sleep: Mutex<()>,
    wake: Condvar,
    pub(crate) stats: Vec<SharedStats>,
    pub(crate) net: NetCounters,
    registry: Registry,
    /// Panic payloads of stolen jobs, by record address, until the parent takes them.
    panics: Mutex<Vec<(usize, Box<dyn std::any::Any + Send>)>>,
    /// Workers that found no work (idle loop or a sync waiting for stolen children).
    hungry: AtomicUsize,
    /// Called when a worker becomes hungry (see [`Satin::set_idle_hook`]).
    idle_hook: OnceLock<IdleHook>,
    /// Spawns run inline once a worker holds this many unstarted jobs.
    pub(crate) inline_depth: usize,
    /// Whether anyone may steal: several workers, or an external stealer exists.
    /// Workers keep one job published on their deque only then.
    thieves: AtomicBool,
}

/// The callback of [`Satin::set_idle_hook`].
type IdleHook = Box<dyn Fn() + Send + Sync>;

impl Shared {
    /// Whether some worker found no work (so spawns should make stealable jobs).
    #[inline(always)]
    pub(crate) fn any_hungry(&self) -> bool {
        self.hungry.load(Ordering::Relaxed) != 0
    }

    /// Whether a worker's jobs may be stolen (see `thieves`).
    pub(crate) fn has_thieves(&self) -> bool {
        self.thieves.load(Ordering::Relaxed)
    }

    /// Wakes a worker that may be parked waiting for a stolen child.
    pub(crate) fn wake_worker(&self, w: usize) {
        if let Some(t) = self.threads.get().and_then(|t| t.get(w)) {
            t.unpark();
        }
    }

    pub(crate) fn put_panic(&self, rec: usize, p: Box<dyn std::any::Any + Send>) {
        self.panics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((rec, p));
    }

    pub(crate) fn take_panic(&self, rec: usize) -> Option<Box<dyn std::any::Any + Send>> {
        let mut v = self.panics.lock().unwrap_or_else(|e| e.into_inner());
        let i = v.iter().position(|(r, _)| *r == rec)?;
        Some(v.swap_remove(i).1)
    }

    pub(crate) fn set_hungry(&self, hungry: bool) {
        if hungry {
            self.hungry.fetch_add(1, Ordering::SeqCst);
            if let Some(h) = self.idle_hook.get() {
                h();
            }
        } else {
            self.hungry.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether some deque or the injector holds work.
    fn has_visible_work(&self) -> bool {
        !self.injector.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }

    fn submit(&self, task: Injected) {
        self.injector.push(task);
        let _g = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        self.active.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_all();
    }

    fn task_done(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}

fn worker_main(mut ctx: Ctx) {
    let shared = ctx.shared.clone();
    let mut idle = 0u32;
    loop {
        if ctx.steal_and_run() {
            idle = 0;
            continue;
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        idle += 1;
        if shared.active.load(Ordering::SeqCst) == 0 {
            ctx.flush_stats();
            let mut g = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            while shared.active.load(Ordering::SeqCst) == 0
                && !shared.shutdown.load(Ordering::SeqCst)
            {
                g = shared.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            idle = 0;
        } else if idle < 32 {
            std::hint::spin_loop();
        } else if idle < 64 {
            std::thread::yield_now();
        } else {
            ctx.flush_stats();
            std::thread::park_timeout(Duration::from_micros(100));
        }
    }
    ctx.flush_stats();
}

/// The default of [`SatinBuilder::inline_depth`].
pub const DEFAULT_INLINE_DEPTH: usize = 4;

/// `SATIN_INLINE_DEPTH` if set to a number (`max` or `off`: never inline), else the
/// default.
fn default_inline_depth() -> usize {
    match std::env::var("SATIN_INLINE_DEPTH") {
        Ok(v) if v == "max" || v == "off" => usize::MAX,
        Ok(v) => v.trim().parse().unwrap_or(DEFAULT_INLINE_DEPTH),
        Err(_) => DEFAULT_INLINE_DEPTH,
    }
}

/// Configures and starts a [`Satin`] instance.
#[derive(Debug, Default)]
pub struct SatinBuilder {
    workers: Option<usize>,
    inline_depth: Option<usize>,
    registry: Option<Registry>,
}

impl SatinBuilder {
    /// Number of worker threads (default: `std::thread::available_parallelism`).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n.max(1));
        self
    }

    /// Adaptive inlining: once a worker holds `depth` spawned jobs that have not
    /// started, further spawns run at once as plain calls (their tickets carry the
    /// result) instead of being queued. The queued jobs are the oldest and largest, the
    /// ones thieves take, so this keeps the parallelism and drops the cost of jobs too
    /// deep to be stolen. `usize::MAX` queues every spawn. Default:
    /// [`DEFAULT_INLINE_DEPTH`], or the environment variable `SATIN_INLINE_DEPTH`.
    pub fn inline_depth(mut self, depth: usize) -> Self {
        self.inline_depth = Some(depth);
        self
    }

    /// Registers a remote-capable job type explicitly (besides the `#[satin::job]`
    /// types, which are found automatically).
    pub fn job<J: Job>(mut self) -> Self {
        self.registry
            .get_or_insert_with(Registry::from_inventory)
            .add::<J>();
        self
    }

    /// Starts the worker threads.
    pub fn build(self) -> Result<Satin, SatinError> {
        let n = self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        let deques: Vec<Worker<JobRef>> = (0..n).map(|_| Worker::new_lifo()).collect();
        let shared = Arc::new(Shared {
            stealers: deques.iter().map(|d| d.stealer()).collect(),
            injector: Injector::new(),
            threads: OnceLock::new(),
            active: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            stats: (0..n).map(|_| SharedStats::default()).collect(),
            net: NetCounters::default(),
            registry: self.registry.unwrap_or_else(Registry::from_inventory),
            panics: Mutex::new(Vec::new()),
            hungry: AtomicUsize::new(0),
            idle_hook: OnceLock::new(),
            thieves: AtomicBool::new(n > 1),
            inline_depth: self.inline_depth.unwrap_or_else(default_inline_depth),
        });
        let mut handles = Vec::with_capacity(n);
        for (i, d) in deques.into_iter().enumerate() {
            let sh = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("satin-worker-{i}"))
                .spawn(move || worker_main(Ctx::new(i, d, sh)));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let s = Satin { shared, handles };
                    drop(s);
                    return Err(SatinError::Spawn(e.to_string()));
                }
            }
        }
        let _ = shared
            .threads
            .set(handles.iter().map(|h| h.thread().clone()).collect());
        Ok(Satin { shared, handles })
    }
}

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
        self.run_raw(job)
            .map_err(|p| SatinError::JobPanicked(panic_message(&*p)))
    }

    fn run_raw<J: Job>(&self, job: J) -> Result<J::Output, Box<dyn std::any::Any + Send>> {
        let (tx, rx) = mpsc::sync_channel(1);
        let shared = self.shared.clone();
        self.shared
            .submit(Injected::Task(Box::new(move |ctx: &mut Ctx| {
                let r = panic::catch_unwind(AssertUnwindSafe(|| job.run(ctx)));
                ctx.release_deferred();
                ctx.flush_stats();
                shared.task_done();
                let _ = tx.send(r);
            })));
        rx.recv().expect("satin: worker pool stopped")
    }

    /// Runs a job that came from the wire on a worker; `done` receives its serialized
    /// result (or the error, e.g. [`SatinError::JobPanicked`]) on the worker thread.
    pub fn execute_wire_job(
        &self,
        job: Box<dyn ErasedJob>,
        done: impl FnOnce(Result<Vec<u8>, SatinError>) + Send + 'static,
    ) {
        let shared = self.shared.clone();
        self.shared
            .submit(Injected::Task(Box::new(move |ctx: &mut Ctx| {
                let r = panic::catch_unwind(AssertUnwindSafe(|| job.run_to_wire(ctx)))
                    .unwrap_or_else(|p| Err(SatinError::JobPanicked(panic_message(&*p))));
                ctx.release_deferred();
                ctx.flush_stats();
                shared.task_done();
                done(r);
            })));
    }

    /// The registry of remote-capable job types.
    pub fn registry(&self) -> &Registry {
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
        ExternalStealer {
            shared: self.shared.clone(),
            next: AtomicUsize::new(0),
        }
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
            let _g = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.shutdown.store(true, Ordering::SeqCst);
            self.shared.wake.notify_all();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

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
