//! The state the workers of one Satin instance share: the stealers of their deques,
//! the injector, their inboxes, sleeping and waking, panics on their way to a parent,
//! the result lookup, and counters.

use super::inbox::Inbox;
use super::lookup::ResultLookup;
use super::IdleHook;
use crate::kernel::{Ctx, JobRef};
use crate::stats::{NetCounters, SharedStats};
use crate::wire::JobRegistry;
use crossbeam_deque::{Injector, Stealer, Worker};
use parking_lot::{Condvar, Mutex, RwLock};
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

/// A panic payload on its way from a thief to the parent.
type Panic = Box<dyn Any + Send>;

/// Work that enters a worker from outside its own deque.
pub(crate) enum Injected {
    /// A record stolen from a deque (`Rerun::AsMarked`), or taken from an inbox
    /// (given back by the external stealer or the result lookup), run as `Rerun`
    /// says.
    Record(JobRef, super::Rerun),
    /// A root job or a job that came from the wire, run in redo mode if `redo`.
    Task {
        run: Box<dyn FnOnce(&mut Ctx) + Send>,
        redo: bool,
    },
}

/// State shared by all workers of one Satin instance.
pub(crate) struct Shared {
    pub(crate) stealers: Vec<Stealer<JobRef>>,
    /// Root and wire tasks (records never go here: see `inboxes`).
    pub(crate) injector: Injector<Injected>,
    /// Per worker, the records of its frames given back to it.
    pub(crate) inboxes: Vec<Inbox>,
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
    /// Called when a frame aborted a child that another thread holds (see
    /// [`crate::Satin::set_abort_hook`]).
    pub(super) abort_hook: OnceLock<IdleHook>,
    /// Spawns run inline once a worker holds this many unstarted jobs.
    pub(crate) inline_depth: usize,
    /// How long a job from another process waits for its guard (see
    /// [`crate::SatinBuilder::guard_patience`]).
    pub(crate) guard_patience: std::time::Duration,
    /// Jobs of a redone subtree down to this depth below the redone job are marked
    /// and offered to the result lookup (`u32::MAX`: unbounded; see
    /// [`crate::SatinBuilder::redo_depth`]).
    pub(crate) redo_depth: u32,
    /// Whether anyone may steal: several workers, or an external stealer exists.
    /// Workers keep one job published on their deque only then.
    pub(super) thieves: AtomicBool,
    /// The lookup asked by workers in redo mode (read only in redo mode, and only
    /// when `lookup_gen` says it changed: each worker keeps its own `Arc` of it).
    lookup: RwLock<Option<Arc<dyn ResultLookup>>>,
    /// Bumped after each change of `lookup`.
    lookup_gen: AtomicU64,
    /// Whether root jobs run in redo mode ([`crate::Satin::set_redo_roots`]).
    pub(super) redo_roots: AtomicBool,
}

impl Shared {
    /// The shared state of `workers` workers, and their deques.
    pub(super) fn new(
        workers: usize,
        registry: JobRegistry,
        inline_depth: usize,
        redo_depth: usize,
        guard_patience: std::time::Duration,
    ) -> (Arc<Shared>, Vec<Worker<JobRef>>) {
        let deques: Vec<Worker<JobRef>> = (0..workers).map(|_| Worker::new_lifo()).collect();
        let shared = Arc::new(Shared {
            stealers: deques.iter().map(|d| d.stealer()).collect(),
            injector: Injector::new(),
            inboxes: (0..workers).map(|_| Inbox::default()).collect(),
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
            abort_hook: OnceLock::new(),
            thieves: AtomicBool::new(workers > 1),
            inline_depth,
            guard_patience,
            // Depths in owner words saturate at MAX_REDO_DEPTH: from there on, no bound.
            redo_depth: if redo_depth >= crate::kernel::MAX_REDO_DEPTH {
                u32::MAX
            } else {
                redo_depth as u32
            },
            lookup: RwLock::new(None),
            lookup_gen: AtomicU64::new(0),
            redo_roots: AtomicBool::new(false),
        });
        (shared, deques)
    }

    /// A frame aborted children that other threads hold: tells the abort hook.
    pub(crate) fn notify_abort(&self) {
        if let Some(h) = self.abort_hook.get() {
            h();
        }
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

    /// The generation of the installed result lookup: it changes with the lookup.
    #[inline]
    pub(crate) fn lookup_generation(&self) -> u64 {
        self.lookup_gen.load(Ordering::Acquire)
    }

    /// The installed result lookup, if any, and its generation (asked only by
    /// workers in redo mode, which keep it until the generation changes).
    pub(crate) fn result_lookup(&self) -> (Option<Arc<dyn ResultLookup>>, u64) {
        let l = self.lookup.read();
        // Read under the lock: the generation bumped by the writer that installed
        // `l`, or a later one (then the next offer reads again).
        (l.clone(), self.lookup_gen.load(Ordering::Acquire))
    }

    pub(super) fn set_result_lookup(&self, l: Option<Arc<dyn ResultLookup>>) {
        let mut g = self.lookup.write();
        *g = l;
        self.lookup_gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Hands a record back to its owner's inbox and wakes the owner (whose frame may
    /// be parked waiting for it).
    pub(crate) fn give_back_to(&self, owner: usize, g: super::GivenBack) {
        // In bounds: owner words are written from worker indices only.
        self.inboxes[owner].push(g);
        self.wake_worker(owner);
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

    /// Whether some deque, inbox or the injector holds work.
    pub(super) fn has_visible_work(&self) -> bool {
        !self.injector.is_empty()
            || self.stealers.iter().any(|s| !s.is_empty())
            || self.inboxes.iter().any(|i| !i.is_empty())
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
