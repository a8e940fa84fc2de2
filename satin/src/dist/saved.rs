//! The crash-recovery state of one member ([`satin_core::recovery::Recovery`]) shared
//! by the driver thread, which feeds it every event and carries out its actions, and
//! the workers, which ask it for saved results while they redo jobs
//! ([`SavedResults`], the installed [`ResultLookup`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use satin_core::recovery::{Action, Lookup, Recovery, RecoveryStats};
use satin_core::{JobKey, JobRef};

use super::driver::Input;
use crate::{ResultLookup, StolenJob};

/// How long a job handed over to a lookup waits for another member's result (a
/// pending orphan there) before it is redone here after all.
///
/// Waiting for a result that is still being computed is what saves the work, but a
/// wait can close a cycle: a worker waiting in a sync runs other jobs on top of its
/// stack, so the orphan another member computes may sit below a job that, through
/// further steals, waits for this one. The bound turns such a cycle into a delay.
/// A worker never waits for an orphan of its own member (that orphan may sit right
/// below it on its own stack): such a lookup runs the job here at once.
pub(crate) const LOOKUP_PATIENCE: Duration = Duration::from_millis(500);

/// The recovery bookkeeping and the jobs handed over to lookups, behind one lock.
struct Inner {
    recovery: Recovery,
    /// Jobs a lookup took, by handle, until a fetched result completes them, they are
    /// redone here, or their patience runs out.
    lookups: HashMap<u64, (StolenJob, Instant)>,
    /// Lookups the bookkeeping still waits for but whose job runs here already (own
    /// orphans, patience run out): their completions are not reuse.
    abandoned: u64,
    /// Of those, the ones that ended in a completion after all (subtracted from the
    /// reuse counted by the bookkeeping).
    stale_completions: u64,
    /// The run ended ([`Shared::release_lookups`]): no lookup takes a job any more
    /// (nobody would finish it).
    closed: bool,
}

/// A member's [`Recovery`], shared by its driver and its workers.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// `Recovery::active()` as of the last change: read by workers without the lock.
    active: AtomicBool,
    /// The handle space of given jobs and handed-over lookups (one space: both end
    /// in `Action::Redo`).
    next_handle: AtomicU64,
    /// Wakes the driver when a lookup queued an action (a fetch).
    wake: Mutex<mpsc::Sender<Input>>,
}

impl Shared {
    pub(crate) fn new(recovery: Recovery, wake: mpsc::Sender<Input>) -> Shared {
        let active = recovery.active();
        Shared {
            inner: Mutex::new(Inner {
                recovery,
                lookups: HashMap::new(),
                abandoned: 0,
                stale_completions: 0,
                closed: false,
            }),
            active: AtomicBool::new(active),
            next_handle: AtomicU64::new(1),
            wake: Mutex::new(wake),
        }
    }

    /// A fresh handle for a given job or a lookup.
    pub(crate) fn next_handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    /// Feeds one event to the bookkeeping (the actions it emits wait for
    /// [`Shared::drain`]).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Recovery) -> R) -> R {
        let mut g = self.inner.lock();
        let r = f(&mut g.recovery);
        self.active
            .store(g.recovery.active() && !g.closed, Ordering::Release);
        r
    }

    /// The actions queued so far, each with the job a lookup had taken when the
    /// action ends it (`Complete`, `Redo` of a lookup's handle).
    pub(crate) fn drain(&self) -> Vec<(Action, Option<StolenJob>)> {
        let mut g = self.inner.lock();
        let mut out = Vec::new();
        while let Some(a) = g.recovery.poll_action() {
            let job = match &a {
                Action::Complete { handle, .. } => {
                    let job = g.lookups.remove(&handle.0).map(|(j, _)| j);
                    if job.is_none() && g.abandoned > 0 {
                        g.abandoned -= 1;
                        g.stale_completions += 1;
                    }
                    job
                }
                Action::Redo { handle } => g.lookups.remove(&handle.0).map(|(j, _)| j),
                _ => None,
            };
            out.push((a, job));
        }
        self.active
            .store(g.recovery.active() && !g.closed, Ordering::Release);
        out
    }

    /// The statistics so far (hits whose job had already been redone here are not
    /// counted as reuse).
    pub(crate) fn stats(&self) -> RecoveryStats {
        let g = self.inner.lock();
        let mut s = *g.recovery.stats();
        let stale = g.stale_completions;
        let local = stale.min(s.hits_local);
        s.hits_local -= local;
        s.hits_remote = s.hits_remote.saturating_sub(stale - local);
        s
    }

    /// Jobs whose lookup waited longer than [`LOOKUP_PATIENCE`]: taken back, to be
    /// redone here.
    pub(crate) fn impatient(&self, now: Instant) -> Vec<StolenJob> {
        let mut g = self.inner.lock();
        let late: Vec<u64> = g
            .lookups
            .iter()
            .filter(|(_, (_, since))| now.duration_since(*since) >= LOOKUP_PATIENCE)
            .map(|(h, _)| *h)
            .collect();
        g.abandoned += late.len() as u64;
        late.into_iter()
            .filter_map(|h| g.lookups.remove(&h).map(|(j, _)| j))
            .collect()
    }

    /// A snapshot of the store's results for a checkpoint (shared bytes, no copy:
    /// cheap under the lock; the writer thread encodes it), and how many results
    /// were stored so far (to skip writing an unchanged store).
    pub(crate) fn checkpoint(&self) -> (super::checkpoint::Snapshot, u64) {
        let g = self.inner.lock();
        let stored = g.recovery.stats().results_stored;
        (
            super::checkpoint::Snapshot(g.recovery.checkpoint_snapshot()),
            stored,
        )
    }

    /// Results stored so far (changes whenever the store does).
    pub(crate) fn results_stored(&self) -> u64 {
        self.inner.lock().recovery.stats().results_stored
    }

    /// The run ended: the jobs lookups still hold are given back, and lookups are
    /// closed (a worker still in redo mode runs its jobs itself: nobody would finish
    /// a job handed over now).
    pub(crate) fn release_lookups(&self) {
        let jobs: Vec<StolenJob> = {
            let mut g = self.inner.lock();
            g.closed = true;
            self.active.store(false, Ordering::Release);
            g.lookups.drain().map(|(_, (j, _))| j).collect()
        };
        for j in jobs {
            j.give_back_redo();
        }
    }
}

/// The [`ResultLookup`] the workers of a member ask in redo mode.
pub(crate) struct SavedResults(pub(crate) Arc<Shared>);

impl ResultLookup for SavedResults {
    fn active(&self) -> bool {
        self.0.active.load(Ordering::Acquire)
    }

    fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        self.0.lookup(key, job)
    }
}

impl Shared {
    /// Whether a lookup can hit (cheap).
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Looks `job` (key `key`) up among the saved results: `Err(job)` to run it, or
    /// taken (completed now from this member's store, or held until a fetch ends).
    pub(crate) fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        let shared = self;
        let handle = shared.next_handle();
        let mut g = shared.inner.lock();
        if g.closed {
            return Err(job);
        }
        match g.recovery.lookup(JobRef(handle), key) {
            Lookup::Miss => Err(job),
            Lookup::Local(bytes) => {
                drop(g);
                match job.try_complete_from_wire(&bytes) {
                    Ok(()) => Ok(()),
                    Err((job, e)) => {
                        tracing::warn!(job = %key, error = %e, "a saved result did not decode: the job runs here, the result is dropped");
                        // Not reuse after all, and never again.
                        let mut g = shared.inner.lock();
                        g.stale_completions += 1;
                        g.recovery.discard(key);
                        Err(job)
                    }
                }
            }
            Lookup::Remote { holder } if holder == g.recovery.me() => {
                // An orphan of this member: maybe right below on this worker's stack.
                g.abandoned += 1;
                Err(job)
            }
            Lookup::Remote { .. } | Lookup::Awaiting => {
                // Held until a fetch ends, or the survivors' accounts of a death
                // came (at most `LOOKUP_PATIENCE`).
                g.lookups.insert(handle, (job, Instant::now()));
                drop(g);
                // The driver sends the fetch.
                let _ = shared.wake.lock().send(Input::Recovery);
                Ok(())
            }
        }
    }
}

/// Completes `job` with a saved result (fetched from another member, found in this
/// member's store or restored from a checkpoint); if the bytes do not decode as the
/// job's result (a stale or foreign result), warns and redoes the job here instead:
/// a bad saved result costs a recomputation, never the run.
pub(crate) fn complete_or_redo(job: StolenJob, bytes: &[u8]) {
    if let Err((job, e)) = job.try_complete_from_wire(bytes) {
        tracing::warn!(job = ?job.name(), error = %e, "a saved result did not decode: the job is redone");
        job.give_back_redo();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ctx, Job, Remote, Satin};
    use satin_core::recovery::Announcement;
    use satin_core::NodeId;
    use serde::{Deserialize, Serialize};

    /// Fibonacci, every call spawning; remote-capable (not registered: keys only).
    #[derive(Serialize, Deserialize)]
    struct TFib(u32);
    impl Job for TFib {
        type Output = u64;
        fn run(self, ctx: &mut Ctx) -> u64 {
            if self.0 < 2 {
                return self.0 as u64;
            }
            let mut f = ctx.frame();
            let a = f.spawn(TFib(self.0 - 1));
            let b = f.spawn(TFib(self.0 - 2));
            let r = f.sync();
            r.get(a) + r.get(b)
        }
        const REMOTE: Option<Remote<Self>> = Some(Remote::serde("saved-tests-fib"));
    }

    fn key(n: u32) -> JobKey {
        let (name, bytes) = crate::to_wire(&TFib(n)).expect("remote-capable");
        JobKey::of(name, &bytes)
    }

    /// Asks `Shared::lookup` whatever `active` says, as a worker that read `active`
    /// just before the release does.
    struct Racing(Arc<Shared>);
    impl ResultLookup for Racing {
        fn active(&self) -> bool {
            true
        }
        fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
            self.0.lookup(key, job)
        }
    }

    #[test]
    fn after_release_a_lookup_takes_no_job() {
        // Member 0 learns that member 1 holds Fib(5): a lookup of it would hand the
        // job over and wait for a fetch, which no driver sends after the run ended.
        let mut recovery = Recovery::new(NodeId(0), [NodeId(0), NodeId(1)], NodeId(0), 1);
        recovery.announce_received(
            NodeId(1),
            &[Announcement {
                key: key(5),
                pending: false,
            }],
        );
        let (tx, _rx) = mpsc::channel();
        let shared = Arc::new(Shared::new(recovery, tx));
        let lookup = Arc::new(SavedResults(shared.clone()));
        assert!(lookup.active(), "a remote result is known");
        shared.release_lookups();
        assert!(!lookup.active(), "closed lookups cannot hit");

        let satin = Satin::builder().workers(1).build().unwrap();
        satin.set_result_lookup(Arc::new(Racing(shared)));
        satin.set_redo_roots(true);
        let (done_tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done_tx.send(satin.run(TFib(8)));
        });
        // Bounded: a job handed to the closed lookup would never be finished.
        let r = done
            .recv_timeout(Duration::from_secs(60))
            .expect("the run hangs: a lookup took a job after the release");
        assert_eq!(r, 21);
    }
}
