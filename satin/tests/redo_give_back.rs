//! Result lookups that give jobs back, fail or misbehave: the owner gets a given-back
//! job back (also while its frame unwinds), the stack does not grow with the number of
//! jobs given back, and a panic or a wrong answer of the lookup or of a job's
//! serialization costs at most a recomputation.
//!
//! (Apart from `redo.rs` because a failure here may be a stack overflow, which aborts
//! the whole test binary.)

use satin::satin_core::JobKey;
use satin::{Ctx, Job, ResultLookup, Satin, StolenJob};
use serde::{Deserialize, Serialize, Serializer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

mod common;
use common::{bounded, Fib};

/// The bound of each wait for another thread in these tests.
const STEP: Duration = Duration::from_secs(30);

fn key_of<J: Job>(job: &J) -> JobKey {
    let (name, bytes) = satin::to_wire(job).expect("remote-capable");
    JobKey::of(name, &bytes)
}

fn fib(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

/// Jobs spawned below Fib(n) (each is offered once in redo mode).
fn spawned_below(n: u32) -> u64 {
    if n < 2 {
        0
    } else {
        2 + spawned_below(n - 1) + spawned_below(n - 2)
    }
}

/// Gives the offered jobs of one key back at once (as a lookup does whose holder is
/// known to be dead), runs the others here; counts the offers of that key.
struct GiveBackKey(JobKey, AtomicUsize);
impl ResultLookup for GiveBackKey {
    fn active(&self) -> bool {
        true
    }
    fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        if key != self.0 {
            return Err(job);
        }
        self.1.fetch_add(1, Ordering::SeqCst);
        job.give_back_redo();
        Ok(())
    }
}

/// Gives every offered job back at once.
struct GiveBackAll;
impl ResultLookup for GiveBackAll {
    fn active(&self) -> bool {
        true
    }
    fn lookup(&self, _key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        job.give_back_redo();
        Ok(())
    }
}

struct Bang;
impl Job for Bang {
    type Output = u64;
    fn run(self, _ctx: &mut Ctx) -> u64 {
        panic!("bang")
    }
}

/// The sync pops Fib(15) first (newest): the lookup takes it and gives it back; then
/// Bang runs here and panics, and the frame unwinds while Fib(15) waits to be run.
struct Explode;
impl Job for Explode {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let mut f = ctx.frame();
        let a = f.spawn(Bang);
        let b = f.spawn(Fib(15));
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

#[test]
fn a_frame_unwinds_while_a_child_given_back_by_the_lookup_waits() {
    bounded(|| {
        for workers in [1, 2] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let l = Arc::new(GiveBackKey(key_of(&Fib(15)), AtomicUsize::new(0)));
            s.set_result_lookup(l.clone());
            s.set_redo_roots(true);
            let err = s.try_run(Explode).unwrap_err();
            assert!(err.to_string().contains("bang"), "{err}");
            assert_eq!(l.1.load(Ordering::SeqCst), 1, "Fib(15) was offered");
            // The pool is usable afterwards (the given-back job did not stay queued).
            s.set_redo_roots(false);
            assert_eq!(s.run(Fib(20)), fib(20));
        }
    })
}

#[test]
fn a_lookup_that_gives_every_job_back_keeps_the_stack_bounded() {
    bounded(|| {
        for workers in [1, 2] {
            let s = Satin::builder().workers(workers).build().unwrap();
            s.set_result_lookup(Arc::new(GiveBackAll));
            s.set_redo_roots(true);
            assert_eq!(s.run(Fib(22)), fib(22));
            let st = s.stats();
            // Every spawned job was offered once, taken, given back and run in redo
            // mode without a second offer.
            assert_eq!(st.total.lookups, spawned_below(22), "{st}");
            assert_eq!(st.total.lookups_handed_over, spawned_below(22), "{st}");
            assert_eq!(st.total.inlined, 0, "{st}");
        }
    })
}

/// A lookup that panics in `lookup` (after the hand-over), in `active` (before), or
/// never; counts the calls.
struct Panicky {
    in_active: bool,
    in_lookup: bool,
    calls: AtomicUsize,
}
impl ResultLookup for Panicky {
    fn active(&self) -> bool {
        if self.in_active {
            self.calls.fetch_add(1, Ordering::SeqCst);
            panic!("lookup bug in active");
        }
        true
    }
    fn lookup(&self, _key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.in_lookup {
            panic!("lookup bug in lookup");
        }
        Err(job)
    }
}

#[test]
fn a_lookup_that_panics_costs_a_recomputation() {
    bounded(|| {
        for (in_active, in_lookup) in [(false, true), (true, false)] {
            for workers in [1, 2] {
                let s = Satin::builder().workers(workers).build().unwrap();
                let l = Arc::new(Panicky {
                    in_active,
                    in_lookup,
                    calls: AtomicUsize::new(0),
                });
                s.set_result_lookup(l.clone());
                s.set_redo_roots(true);
                assert_eq!(s.run(Fib(12)), fib(12));
                // Each spawned job reached the lookup once: a job dropped by a
                // panicking `lookup` is given back and not offered again; a job
                // whose `active` panicked ran here without an offer.
                assert_eq!(
                    l.calls.load(Ordering::SeqCst) as u64,
                    spawned_below(12),
                    "active {in_active}, lookup {in_lookup}"
                );
                let st = s.stats();
                let taken = if in_lookup { spawned_below(12) } else { 0 };
                assert_eq!(st.total.lookups_handed_over, taken, "{st}");
            }
        }
    })
}

/// How a [`Touchy`] serializes: normally, with an error, or with a panic.
static TOUCHY_MODE: AtomicUsize = AtomicUsize::new(0);
const SER_OK: usize = 0;
const SER_ERR: usize = 1;
const SER_PANIC: usize = 2;

/// Fib whose serialization may fail or panic (set by [`TOUCHY_MODE`]).
#[derive(Deserialize)]
struct Touchy(u32);
impl Serialize for Touchy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match TOUCHY_MODE.load(Ordering::SeqCst) {
            SER_ERR => Err(serde::ser::Error::custom("no wire form")),
            SER_PANIC => panic!("serialize bug"),
            _ => s.serialize_newtype_struct("Touchy", &self.0),
        }
    }
}
#[satin::job]
impl Job for Touchy {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        if self.0 < 2 {
            return self.0 as u64;
        }
        let mut f = ctx.frame();
        let a = f.spawn(Touchy(self.0 - 1));
        let b = f.spawn(Touchy(self.0 - 2));
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

/// Counts offers; runs every job here.
#[derive(Default)]
struct Counting(AtomicUsize);
impl ResultLookup for Counting {
    fn active(&self) -> bool {
        true
    }
    fn lookup(&self, _key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(job)
    }
}

#[test]
fn a_job_that_cannot_be_serialized_runs_here_without_an_offer() {
    bounded(|| {
        for mode in [SER_ERR, SER_PANIC, SER_OK] {
            for workers in [1, 2] {
                TOUCHY_MODE.store(mode, Ordering::SeqCst);
                let s = Satin::builder().workers(workers).build().unwrap();
                let l = Arc::new(Counting::default());
                s.set_result_lookup(l.clone());
                s.set_redo_roots(true);
                assert_eq!(s.run(Touchy(12)), fib(12));
                let want = if mode == SER_OK { spawned_below(12) } else { 0 };
                assert_eq!(l.0.load(Ordering::SeqCst) as u64, want, "mode {mode}");
                assert_eq!(s.stats().total.lookups, want, "mode {mode}");
            }
        }
        TOUCHY_MODE.store(SER_OK, Ordering::SeqCst);
    })
}

/// Keeps the first offered job and returns it at the second offer (keeping that
/// one); gives the kept job back at the third offer.
#[derive(Default)]
struct Swapper {
    held: Mutex<Option<StolenJob>>,
    offers: AtomicUsize,
}
impl ResultLookup for Swapper {
    fn active(&self) -> bool {
        true
    }
    fn lookup(&self, _key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        let n = self.offers.fetch_add(1, Ordering::SeqCst);
        let mut held = self.held.lock().unwrap();
        match n {
            0 => {
                *held = Some(job);
                Ok(())
            }
            1 => {
                let first = held.replace(job).expect("held since the first offer");
                Err(first)
            }
            _ => {
                if let Some(second) = held.take() {
                    second.give_back_redo();
                }
                Err(job)
            }
        }
    }
}

#[test]
fn a_lookup_that_returns_another_job() {
    bounded(|| {
        for workers in [1, 2] {
            // Unbounded, so that every job is offered (the depth of the jobs given
            // back would otherwise decide how many).
            let s = Satin::builder()
                .workers(workers)
                .redo_depth(usize::MAX)
                .build()
                .unwrap();
            let l = Arc::new(Swapper::default());
            s.set_result_lookup(l.clone());
            s.set_redo_roots(true);
            assert_eq!(s.run(Fib(16)), fib(16));
            assert!(l.held.lock().unwrap().is_none());
            let st = s.stats();
            // The first and the second offered job count as taken; each job was
            // offered once.
            assert_eq!(st.total.lookups, spawned_below(16), "{st}");
            assert_eq!(st.total.lookups_handed_over, 2, "{st}");
        }
    })
}

/// 2n (remote-capable, same parameters and result type as Fib, another job).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Twice(u32);
#[satin::job]
impl Job for Twice {
    type Output = u64;
    fn run(self, _ctx: &mut Ctx) -> u64 {
        2 * self.0 as u64
    }
}

/// The "saved result" the [`Reuse`] lookup gives Fib(9): not fib(9) = 34.
const MARK9: u64 = 900;

/// On worker 1, takes the stolen Fib(9), completes it with [`MARK9`], reports that to
/// the root and waits (bounded) for the job the root offers next, Twice(5), which it
/// returns in place of Fib(9). On worker 0 it keeps Twice(5) and hands it over.
struct Reuse {
    fib_taken: Mutex<Option<mpsc::Sender<()>>>,
    twice_tx: Mutex<mpsc::Sender<StolenJob>>,
    twice_rx: Mutex<mpsc::Receiver<StolenJob>>,
}
impl ResultLookup for Reuse {
    fn active(&self) -> bool {
        true
    }
    fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        if key == key_of(&Fib(9)) {
            let out = <Fib as Job>::REMOTE.unwrap().encode_output(&MARK9).unwrap();
            job.complete_from_wire(&out).unwrap();
            if let Some(tx) = self.fib_taken.lock().unwrap().take() {
                let _ = tx.send(());
            }
            // Bounded: without Twice(5) the lookup took Fib(9) and completed it.
            match self.twice_rx.lock().unwrap().recv_timeout(STEP) {
                Ok(twice) => Err(twice),
                Err(_) => Ok(()),
            }
        } else if key == key_of(&Twice(5)) {
            self.twice_tx.lock().unwrap().send(job).unwrap();
            Ok(())
        } else {
            Err(job)
        }
    }
}

/// Spawns Fib(9) and publishes it (worker 1 steals it), waits until the lookup took
/// it, syncs, then spawns Twice(5) in a new frame: its record is the one Fib(9) had.
struct ReuseRoot(mpsc::Receiver<()>);
impl Job for ReuseRoot {
    type Output = (u64, u64);
    fn run(self, ctx: &mut Ctx) -> (u64, u64) {
        let mut f = ctx.frame();
        let a = f.spawn(Fib(9));
        f.publish();
        // bounded: if nobody steals Fib(9), the sync runs it here
        let _ = self.0.recv_timeout(STEP);
        let r = f.sync();
        let fib9 = r.get(a);
        let mut f = ctx.frame();
        let b = f.spawn(Twice(5));
        let r = f.sync();
        (fib9, r.get(b))
    }
}

#[test]
fn a_lookup_that_returns_a_job_at_the_address_of_the_offered_one() {
    bounded(|| {
        let s = Satin::builder().workers(2).build().unwrap();
        let (fib_tx, fib_rx) = mpsc::channel();
        let (twice_tx, twice_rx) = mpsc::channel();
        s.set_result_lookup(Arc::new(Reuse {
            fib_taken: Mutex::new(Some(fib_tx)),
            twice_tx: Mutex::new(twice_tx),
            twice_rx: Mutex::new(twice_rx),
        }));
        s.set_redo_roots(true);
        // Twice(5) is run by the worker it was given back to, as Twice, not with the
        // operations of the Fib(9) whose record it reuses.
        assert_eq!(s.run(ReuseRoot(fib_rx)), (MARK9, 10));
    })
}

#[test]
fn a_cleared_lookup_is_not_asked() {
    bounded(|| {
        for workers in [1, 2] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let l = Arc::new(Counting::default());
            s.set_result_lookup(l.clone());
            s.set_redo_roots(true);
            assert_eq!(s.run(Fib(10)), fib(10));
            let asked = l.0.load(Ordering::SeqCst) as u64;
            assert_eq!(asked, spawned_below(10));
            s.clear_result_lookup();
            assert_eq!(s.run(Fib(10)), fib(10));
            assert_eq!(l.0.load(Ordering::SeqCst) as u64, asked);
            let st = s.stats();
            assert_eq!(st.total.lookups, asked, "{st}");
            // Installed again: asked again.
            s.set_result_lookup(l.clone());
            assert_eq!(s.run(Fib(10)), fib(10));
            assert_eq!(l.0.load(Ordering::SeqCst) as u64, 2 * asked);
        }
    })
}

/// Whether the job runs in redo mode, and Fib(10) spawned from it.
struct Probe;
impl Job for Probe {
    type Output = (bool, u64);
    fn run(self, ctx: &mut Ctx) -> (bool, u64) {
        let mode = ctx.in_redo_mode();
        let mut f = ctx.frame();
        let a = f.spawn(Fib(10));
        let r = f.sync();
        (mode, r.get(a))
    }
}

#[test]
fn a_redone_wire_job_runs_in_redo_mode_and_offers_its_children() {
    bounded(|| {
        let s = Satin::builder().workers(2).build().unwrap();
        let l = Arc::new(Counting::default());
        s.set_result_lookup(l.clone());
        for redone in [false, true] {
            let (name, bytes) = satin::to_wire(&Fib(12)).unwrap();
            let job = s.from_wire(name, &bytes).unwrap();
            let (tx, rx) = mpsc::channel();
            let before = l.0.load(Ordering::SeqCst) as u64;
            s.execute_wire_job(job, redone, satin::AbortHandle::new(), move |r| {
                let _ = tx.send(r);
            });
            let out = rx.recv_timeout(STEP).unwrap().unwrap();
            let v: u64 = <Fib as Job>::REMOTE.unwrap().decode_output(&out).unwrap();
            assert_eq!(v, fib(12));
            let offered = l.0.load(Ordering::SeqCst) as u64 - before;
            // The wire job itself is not offered; its children are, in redo mode only.
            let want = if redone { spawned_below(12) } else { 0 };
            assert_eq!(offered, want, "redone {redone}");
        }
        // The workers are back in normal mode.
        assert_eq!(s.run(Probe), (false, fib(10)));
    })
}

/// Completes each offered job with bytes that do not decode as its result (or, for
/// one key, with its right result); counts the results refused.
struct BadBytes {
    good: (JobKey, Vec<u8>),
    refused: AtomicUsize,
    completed: AtomicUsize,
}
impl ResultLookup for BadBytes {
    fn active(&self) -> bool {
        true
    }
    fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        // A varint cut short: no `u64` decodes from it.
        let bytes: &[u8] = if key == self.good.0 {
            &self.good.1
        } else {
            &[0xff]
        };
        match job.try_complete_from_wire(bytes) {
            Ok(()) => {
                self.completed.fetch_add(1, Ordering::SeqCst);
            }
            Err((job, e)) => {
                assert!(job.key() == Some(key), "handed back another job: {e}");
                self.refused.fetch_add(1, Ordering::SeqCst);
                job.give_back_redo();
            }
        }
        Ok(())
    }
}

#[test]
fn a_result_that_does_not_decode_hands_the_job_back_for_a_redo() {
    bounded(|| {
        for workers in [1, 2] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let good = postcard::to_allocvec(&fib(8)).unwrap();
            let l = Arc::new(BadBytes {
                good: (key_of(&Fib(8)), good),
                refused: AtomicUsize::new(0),
                completed: AtomicUsize::new(0),
            });
            s.set_result_lookup(l.clone());
            s.set_redo_roots(true);
            assert_eq!(s.run(Fib(12)), fib(12), "workers {workers}");
            // Every bad result was refused and its job redone; Fib(8) (spawned
            // once below Fib(12) on each path: fib(12-8+1) times) completed.
            let completed = l.completed.load(Ordering::SeqCst) as u64;
            assert_eq!(completed, fib(5), "workers {workers}");
            assert!(l.refused.load(Ordering::SeqCst) > 0);
        }
    })
}
