//! The state the workers of one Satin instance share: the stealers of their deques,
//! the injector, sleeping and waking, panics on their way to a parent, and counters.

use super::lookup::ResultLookup;
use super::IdleHook;
use crate::kernel::{Ctx, JobRef};
use crate::stats::{NetCounters, SharedStats};
use crate::wire::JobRegistry;
use crossbeam_deque::{Injector, Stealer, Worker};
use parking_lot::{Condvar, Mutex, RwLock};
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

/// A panic payload on its way from a thief to the parent.
type Panic = Box<dyn Any + Send>;

/// Work that enters a worker from outside its own deque.
pub(crate) enum Injected {
    /// A record stolen from a deque or given back by the external stealer; it runs in
    /// redo mode if it carries the redo mark (and is offered to the result lookup
    /// first).
    Record(JobRef),
    /// A record given back to run in redo mode
    /// ([`StolenJob::give_back_redo`](crate::StolenJob::give_back_redo), or a marked
    /// record given back): it runs in redo mode without being offered to the lookup
    /// again.
    Redo(JobRef),
    /// A root job or a job that came from the wire, run in redo mode if `redo`.
    Task {
        run: Box<dyn FnOnce(&mut Ctx) + Send>,
        redo: bool,
    },
}

/// State shared by all workers of one Satin instance.
pub(crate) struct Shared {
    pub(crate) stealers: Vec<Stealer<JobRef>>,
    pub(crate) injector: Injector<Injected>,
    pub(super) threads: OnceLock<Vec<Thread>>,
    /// Root and wire tasks submitted and not yet finished; workers sleep when zero.
    pub(super) active: AtomicUsize,
    pub(super) shutdown: AtomicBool,
    pub(super) sleep: Mutex<()>,
    pub(super) wake: Condvar,
    pub(crate) stats: Vec<SharedStats>,
    pub(crate) net: NetCounters,
    pub(super) registry: JobRegistry,
    /// Panic payloads of stolen jobs, by record address, until the parent takes them.
    panics: Mutex<Vec<(usize, Panic)>>,
    /// Workers that found no work (idle loop or a sync waiting for stolen children).
    pub(super) hungry: AtomicUsize,
    /// Called when a worker becomes hungry (see [`crate::Satin::set_idle_hook`]).
    pub(super) idle_hook: OnceLock<IdleHook>,
    /// Spawns run inline once a worker holds this many unstarted jobs.
    pub(crate) inline_depth: usize,
    /// Whether anyone may steal: several workers, or an external stealer exists.
    /// Workers keep one job published on their deque only then.
    pub(super) thieves: AtomicBool,
    /// The lookup asked by workers in redo mode (read only in redo mode).
    lookup: RwLock<Option<Arc<dyn ResultLookup>>>,
    /// Whether root jobs run in redo mode ([`crate::Satin::set_redo_roots`]).
    pub(super) redo_roots: AtomicBool,
}

impl Shared {
    /// The shared state of `workers` workers, and their deques.
    pub(super) fn new(
        workers: usize,
        registry: JobRegistry,
        inline_depth: usize,
    ) -> (Arc<Shared>, Vec<Worker<JobRef>>) {
        let deques: Vec<Worker<JobRef>> = (0..workers).map(|_| Worker::new_lifo()).collect();
        let shared = Arc::new(Shared {
            stealers: deques.iter().map(|d| d.stealer()).collect(),
            injector: Injector::new(),
            threads: OnceLock::new(),
            active: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            stats: (0..workers).map(|_| SharedStats::default()).collect(),
            net: NetCounters::default(),
            registry,
            panics: Mutex::new(Vec::new()),
            hungry: AtomicUsize::new(0),
            idle_hook: OnceLock::new(),
            thieves: AtomicBool::new(workers > 1),
            inline_depth,
            lookup: RwLock::new(None),
            redo_roots: AtomicBool::new(false),
        });
        (shared, deques)
    }

    /// Whether some worker found no work (so spawns should make stealable jobs).
    #[inline(always)]
    pub(crate) fn any_hungry(&self) -> bool {
        self.hungry.load(Ordering::Relaxed) != 0
    }

    /// Whether a worker's jobs may be stolen (see `thieves`).
    pub(crate) fn has_thieves(&self) -> bool {
        self.thieves.load(Ordering::Relaxed)
    }

    /// The installed result lookup, if any (asked only by workers in redo mode).
    pub(crate) fn result_lookup(&self) -> Option<Arc<dyn ResultLookup>> {
        self.lookup.read().clone()
    }

    pub(super) fn set_result_lookup(&self, l: Option<Arc<dyn ResultLookup>>) {
        *self.lookup.write() = l;
    }

    /// Wakes a worker that may be parked waiting for a stolen child.
    pub(crate) fn wake_worker(&self, w: usize) {
        if let Some(t) = self.threads.get().and_then(|t| t.get(w)) {
            t.unpark();
        }
    }

    pub(crate) fn put_panic(&self, rec: usize, p: Panic) {
        self.panics.lock().push((rec, p));
    }

    pub(crate) fn take_panic(&self, rec: usize) -> Option<Panic> {
        let mut v = self.panics.lock();
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
    pub(super) fn has_visible_work(&self) -> bool {
        !self.injector.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }

    pub(super) fn submit(&self, task: Injected) {
        self.injector.push(task);
        let _g = self.sleep.lock();
        self.active.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_all();
    }

    pub(super) fn task_done(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}
