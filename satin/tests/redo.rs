//! Redo mode and result lookups (fault tolerance): a redone job and everything it
//! spawns offer each job to the installed `ResultLookup` before it runs; outside redo
//! mode nothing is offered.
//!
//! The lookups here are fakes: a map from a job's key to deliberately wrong "saved"
//! results (markers), so that a result that was used shows in the answer.

use satin::satin_core::JobKey;
use satin::{Ctx, Job, ResultLookup, Satin, StolenJob, DEFAULT_REDO_DEPTH};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

mod common;
use common::{bounded, Fib};

/// The bound of each wait for another thread in these tests.
const STEP: Duration = Duration::from_secs(30);

/// The "saved result" of Fib(15) the lookups supply: not fib(15) = 610.
const MARK15: u64 = 1_000_000;
/// The "saved result" of Fib(12): not fib(12) = 144.
const MARK12: u64 = 7_000;

fn key_of<J: Job>(job: &J) -> JobKey {
    let (name, bytes) = satin::to_wire(job).expect("remote-capable");
    JobKey::of(name, &bytes)
}

fn fib_output(v: u64) -> Vec<u8> {
    <Fib as Job>::REMOTE.unwrap().encode_output(&v).unwrap()
}

/// Fib(n) where the jobs of `saved` give their (wrong) saved result.
fn fib_with(n: u32, saved: &[(u32, u64)]) -> u64 {
    if let Some(&(_, v)) = saved.iter().find(|(k, _)| *k == n) {
        return v;
    }
    if n < 2 {
        n as u64
    } else {
        fib_with(n - 1, saved) + fib_with(n - 2, saved)
    }
}

/// Jobs spawned below a redone Fib(n) that are offered to the lookup in redo mode
/// with the default redo depth, when the lookup takes the jobs of `taken` (their
/// subtrees never run).
fn offered_below(n: u32, taken: &[u32]) -> u64 {
    offered_within(n, DEFAULT_REDO_DEPTH, taken, &[])
}

/// Jobs spawned at most `depth` levels below a redone Fib(n) (every call is a record
/// in redo mode, and each is offered once), when the lookup takes the jobs of `taken`
/// and gives back to be redone those of `redone` (their subtrees count from 0 again).
fn offered_within(n: u32, depth: usize, taken: &[u32], redone: &[u32]) -> u64 {
    if n < 2 || depth == 0 {
        return 0;
    }
    [n - 1, n - 2]
        .iter()
        .map(|&c| {
            1 + if taken.contains(&c) {
                0
            } else if redone.contains(&c) {
                offered_within(c, DEFAULT_REDO_DEPTH, taken, redone)
            } else {
                offered_within(c, depth - 1, taken, redone)
            }
        })
        .sum()
}

/// How a [`FakeLookup`] finishes a job it knows.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    /// Completes it inside `lookup`.
    Now,
    /// Completes it later from the completer thread.
    Later,
    /// Gives it back (`give_back_redo`) later from the completer thread.
    GiveBack,
}

/// A result lookup with a fixed map of saved results.
struct FakeLookup {
    saved: Arc<HashMap<JobKey, Vec<u8>>>,
    answer: Answer,
    active: AtomicBool,
    active_calls: AtomicUsize,
    /// Every offer, by key.
    offered: Mutex<HashMap<JobKey, usize>>,
    /// To the completer thread (`Later`, `GiveBack`).
    later: Mutex<Option<mpsc::Sender<StolenJob>>>,
    /// What was wrong with an offer (a panic in `lookup` is caught by the worker, so
    /// it is recorded here and checked by [`FakeLookup::check`]).
    wrong: Mutex<Vec<String>>,
}

impl FakeLookup {
    fn new(saved: &[(JobKey, Vec<u8>)], answer: Answer) -> Arc<FakeLookup> {
        Arc::new(FakeLookup {
            saved: Arc::new(saved.iter().cloned().collect()),
            answer,
            active: AtomicBool::new(true),
            active_calls: AtomicUsize::new(0),
            offered: Mutex::new(HashMap::new()),
            later: Mutex::new(None),
            wrong: Mutex::new(Vec::new()),
        })
    }

    /// Fails if an offered job was not marked redone or had another key.
    fn check(&self) {
        let wrong = self.wrong.lock().unwrap();
        assert!(wrong.is_empty(), "{wrong:?}");
    }

    fn offers(&self) -> usize {
        self.offered.lock().unwrap().values().sum()
    }

    fn offers_of(&self, key: JobKey) -> usize {
        self.offered.lock().unwrap().get(&key).copied().unwrap_or(0)
    }
}

impl ResultLookup for FakeLookup {
    fn active(&self) -> bool {
        self.active_calls.fetch_add(1, Ordering::SeqCst);
        self.active.load(Ordering::SeqCst)
    }

    fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        *self.offered.lock().unwrap().entry(key).or_default() += 1;
        if !job.is_redone() {
            let msg = format!("offered, but not redone: {key}");
            self.wrong.lock().unwrap().push(msg);
        }
        if job.key() != Some(key) {
            let msg = format!("offered as {key}, but its key is {:?}", job.key());
            self.wrong.lock().unwrap().push(msg);
        }
        let Some(bytes) = self.saved.get(&key) else {
            return Err(job);
        };
        match self.answer {
            Answer::Now => job.complete_from_wire(bytes).unwrap(),
            Answer::Later | Answer::GiveBack => {
                let tx = self.later.lock().unwrap().clone();
                tx.expect("completer running").send(job).unwrap();
            }
        }
        Ok(())
    }
}

/// The thread that finishes the jobs a `Later`/`GiveBack` lookup took: it holds each
/// job until a worker of `satin` runs out of work after the hand-over (the idle hook:
/// the owner's sync then waits for that job), or, failing that, for a while, then
/// completes it with its saved result or gives it back. Returns the join handle
/// (the number of jobs it finished); it ends when the lookup's sender is dropped.
fn start_completer(satin: &Satin, lookup: &Arc<FakeLookup>) -> std::thread::JoinHandle<usize> {
    let (tx, rx) = mpsc::channel::<StolenJob>();
    *lookup.later.lock().unwrap() = Some(tx);
    let (hungry_tx, hungry) = mpsc::sync_channel::<()>(1);
    let hungry_tx = Mutex::new(hungry_tx);
    assert!(satin.set_idle_hook(move || {
        let _ = hungry_tx.lock().unwrap().try_send(());
    }));
    let saved = lookup.saved.clone();
    let give_back = lookup.answer == Answer::GiveBack;
    std::thread::spawn(move || {
        let mut finished = 0;
        while let Ok(job) = rx.recv_timeout(STEP) {
            // Forget hunger from before the hand-over; wait for a new one (bounded:
            // a worker may already have been hungry and not report it again).
            while hungry.try_recv().is_ok() {}
            let _ = hungry.recv_timeout(Duration::from_millis(50));
            if give_back {
                job.give_back_redo();
            } else {
                let bytes = &saved[&job.key().expect("remote-capable")];
                job.complete_from_wire(bytes).unwrap();
            }
            finished += 1;
        }
        finished
    })
}

/// Ends the completer (drops the lookup's sender) and returns how many it finished.
fn stop_completer(lookup: &FakeLookup, h: std::thread::JoinHandle<usize>) -> usize {
    lookup.later.lock().unwrap().take();
    h.join().unwrap()
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
fn outside_redo_mode_nothing_is_offered() {
    bounded(|| {
        for workers in [1, 2] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let _stealer = s.external_stealer();
            let l = FakeLookup::new(&[(key_of(&Fib(15)), fib_output(MARK15))], Answer::Now);
            s.set_result_lookup(l.clone());
            assert_eq!(s.run(Fib(20)), 6765);
            assert_eq!(s.run(Probe), (false, 55));
            assert_eq!(l.active_calls.load(Ordering::SeqCst), 0);
            assert_eq!(l.offers(), 0);
            let st = s.stats();
            assert_eq!(
                (
                    st.total.redo_jobs,
                    st.total.lookups,
                    st.total.lookups_handed_over
                ),
                (0, 0, 0)
            );
            assert!(!st.to_string().contains("REDO"), "{st}");
            l.check();
        }
    })
}

#[test]
fn a_redone_root_uses_saved_results_and_computes_the_rest() {
    bounded(|| {
        for workers in [1, 2, 4] {
            // Unbounded: the whole tree is redone.
            let s = Satin::builder()
                .workers(workers)
                .redo_depth(usize::MAX)
                .build()
                .unwrap();
            let l = FakeLookup::new(&[(key_of(&Fib(15)), fib_output(MARK15))], Answer::Now);
            s.set_result_lookup(l.clone());
            s.set_redo_roots(true);
            assert_eq!(s.run(Fib(20)), fib_with(20, &[(15, MARK15)]));
            let st = s.stats();
            // Fib(15) occurs fib(6) = 8 times in Fib(20); each was offered once and
            // taken; every other spawned job was offered once and ran.
            assert_eq!(l.offers_of(key_of(&Fib(15))), 8);
            assert_eq!(st.total.lookups_handed_over, 8, "{st}");
            assert_eq!(
                st.total.lookups,
                offered_within(20, usize::MAX, &[15], &[]),
                "{st}"
            );
            assert_eq!(l.offers() as u64, st.total.lookups);
            // No inlining in redo mode: every job got a record and an offer.
            assert_eq!(st.total.inlined, 0, "{st}");
            assert!(st.total.redo_jobs > 0, "{st}");
            assert!(st.to_string().contains("REDO: jobs = "), "{st}");
            assert_eq!(s.run(Probe), (true, fib_with(10, &[])));

            // Roots that are not redone again: no offers, inlining back on.
            s.set_redo_roots(false);
            s.reset_stats();
            let before = l.offers();
            assert_eq!(s.run(Fib(20)), 6765);
            assert_eq!(l.offers(), before);
            let st = s.stats();
            assert_eq!(st.total.lookups, 0, "{st}");
            if workers == 1 {
                assert!(st.total.inlined > 0, "{st}");
            }
            l.check();
        }
    })
}

#[test]
fn a_lookup_that_completes_later_from_another_thread() {
    bounded(|| {
        for workers in [1, 2, 4] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let l = FakeLookup::new(
                &[
                    (key_of(&Fib(15)), fib_output(MARK15)),
                    (key_of(&Fib(12)), fib_output(MARK12)),
                ],
                Answer::Later,
            );
            let completer = start_completer(&s, &l);
            s.set_result_lookup(l.clone());
            s.set_redo_roots(true);
            let saved = [(15, MARK15), (12, MARK12)];
            assert_eq!(s.run(Fib(19)), fib_with(19, &saved));
            let st = s.stats();
            let taken = stop_completer(&l, completer);
            assert_eq!(taken as u64, st.total.lookups_handed_over, "{st}");
            assert_eq!(st.total.lookups, offered_below(19, &[15, 12]), "{st}");
            l.check();
        }
    })
}

#[test]
fn a_lookup_that_gives_the_job_back_gets_it_computed_in_redo_mode() {
    bounded(|| {
        for workers in [1, 2] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let l = FakeLookup::new(&[(key_of(&Fib(15)), fib_output(MARK15))], Answer::GiveBack);
            let completer = start_completer(&s, &l);
            s.set_result_lookup(l.clone());
            s.set_redo_roots(true);
            assert_eq!(s.run(Fib(20)), 6765);
            let st = s.stats();
            assert_eq!(stop_completer(&l, completer), 8);
            // Each Fib(15) was offered once (not again once given back), and its
            // subtree ran in redo mode as a redone job: its children were offered
            // too, down to the redo depth below it (not below the root).
            assert_eq!(l.offers_of(key_of(&Fib(15))), 8);
            assert_eq!(
                st.total.lookups,
                offered_within(20, DEFAULT_REDO_DEPTH, &[], &[15]),
                "{st}"
            );
            assert_eq!(st.total.lookups_handed_over, 8, "{st}");
            l.check();
        }
    })
}

/// A root that spawns Fib(18) and Fib(17), publishes both, reports that on `ready`
/// and keeps its frame open until `go` (so that the external stealer takes Fib(18)).
struct Gate {
    ready: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
}
impl Job for Gate {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let mut f = ctx.frame();
        let a = f.spawn(Fib(18));
        let b = f.spawn(Fib(17));
        f.publish();
        self.ready.send(()).unwrap();
        // bounded: if the test thread never answers, it has failed already
        let _ = self.go.recv_timeout(STEP);
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

/// Runs a [`Gate`] root on `s` (1 worker); the test thread steals Fib(18) with the
/// external stealer and hands it to `with`. Returns the root's result.
fn run_gate(s: &Satin, with: impl FnOnce(StolenJob) + Send) -> u64 {
    let stealer = s.external_stealer();
    let (ready_tx, ready) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let root = scope.spawn(|| {
            s.run(Gate {
                ready: ready_tx,
                go: go_rx,
            })
        });
        ready.recv_timeout(STEP).expect("the root did not start");
        let job = stealer.steal().expect("Fib(18) is published");
        assert_eq!(job.key(), Some(key_of(&Fib(18))));
        with(job);
        go.send(()).unwrap();
        root.join().unwrap()
    })
}

#[test]
fn give_back_redo_of_a_stolen_job_runs_it_in_redo_mode() {
    bounded(|| {
        let s = Satin::builder().workers(1).build().unwrap();
        let l = FakeLookup::new(&[(key_of(&Fib(15)), fib_output(MARK15))], Answer::Now);
        s.set_result_lookup(l.clone());
        let r = run_gate(&s, |job| {
            assert!(!job.is_redone(), "spawned outside redo mode");
            job.give_back_redo();
        });
        // Only the given-back Fib(18) ran in redo mode: Fib(15) occurs fib(4) = 3
        // times in it, and its saved result was used there, not in Fib(17).
        assert_eq!(r, fib_with(18, &[(15, MARK15)]) + fib_with(17, &[]));
        assert_eq!(l.offers_of(key_of(&Fib(18))), 0);
        assert_eq!(l.offers_of(key_of(&Fib(15))), 3);
        let st = s.stats();
        assert_eq!(st.total.lookups, offered_below(18, &[15]), "{st}");
        assert!(st.total.redo_jobs > 0, "{st}");
        l.check();
    })
}

#[test]
fn a_job_stolen_from_a_redone_root_is_marked_and_offered_when_given_back() {
    bounded(|| {
        let s = Satin::builder().workers(1).build().unwrap();
        let l = FakeLookup::new(&[(key_of(&Fib(15)), fib_output(MARK15))], Answer::Now);
        s.set_result_lookup(l.clone());
        s.set_redo_roots(true);
        let r = run_gate(&s, |job| {
            assert!(job.is_redone(), "spawned in redo mode");
            job.give_back();
        });
        let saved = [(15, MARK15)];
        assert_eq!(r, fib_with(18, &saved) + fib_with(17, &saved));
        // Fib(17) was offered at the root's sync (and once more inside Fib(18));
        // Fib(18), never offered while the external stealer held it, was offered
        // once given back; both subtrees ran in redo mode.
        assert_eq!(l.offers_of(key_of(&Fib(17))), 2);
        assert_eq!(l.offers_of(key_of(&Fib(18))), 1);
        let st = s.stats();
        assert_eq!(
            st.total.lookups,
            // Both at depth 1 below the redone root.
            2 + offered_within(18, DEFAULT_REDO_DEPTH - 1, &[15], &[])
                + offered_within(17, DEFAULT_REDO_DEPTH - 1, &[15], &[]),
            "{st}"
        );
        l.check();
    })
}

/// Spawns Bang and Fib(12); the sync runs Fib(12) first (newest), then Bang panics.
struct Explode;
impl Job for Explode {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let mut f = ctx.frame();
        let a = f.spawn(Bang);
        let b = f.spawn(Fib(12));
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

struct Bang;
impl Job for Bang {
    type Output = u64;
    fn run(self, _ctx: &mut Ctx) -> u64 {
        panic!("bang");
    }
}

/// Sends the worker index, the mode and Fib(10) spawned from it.
struct ProbeTo(mpsc::Sender<(usize, bool, u64)>);
impl Job for ProbeTo {
    type Output = ();
    fn run(self, ctx: &mut Ctx) {
        let (worker, (mode, fib10)) = (ctx.worker_index(), Probe.run(ctx));
        let _ = self.0.send((worker, mode, fib10));
    }
}

/// A root (on one of two workers) that runs a [`ProbeTo`] here and spawns one that the
/// other worker steals (the root waits for its report before the sync); returns the
/// reports (worker index, mode, Fib(10)).
struct Both;
impl Job for Both {
    type Output = Vec<(usize, bool, u64)>;
    fn run(self, ctx: &mut Ctx) -> Vec<(usize, bool, u64)> {
        let (tx, rx) = mpsc::channel();
        let mut f = ctx.frame();
        let child = f.spawn(ProbeTo(tx.clone()));
        f.publish();
        // bounded: if no worker steals it, the sync runs it here (and the test fails
        // on the worker indices)
        let stolen = rx.recv_timeout(STEP).ok();
        ProbeTo(tx).run(f.ctx());
        let r = f.sync();
        r.get(child);
        stolen.into_iter().chain(rx.try_iter()).collect()
    }
}

#[test]
fn a_panic_in_redo_mode_restores_the_mode() {
    bounded(|| {
        for workers in [1, 2] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let l = FakeLookup::new(&[], Answer::Now);
            s.set_result_lookup(l.clone());
            s.set_redo_roots(true);
            let err = s.try_run(Explode).unwrap_err();
            assert!(err.to_string().contains("bang"), "{err}");
            assert!(l.offers() > 0, "the failed root ran in redo mode");
            s.set_redo_roots(false);
            s.reset_stats();
            let before = l.offers();
            // With one worker the probes run on the worker that unwound; with two,
            // `Both` runs one on each worker.
            if workers == 1 {
                assert_eq!(s.run(Probe), (false, 55));
            } else {
                let mut seen = s.run(Both);
                seen.sort();
                assert_eq!(seen, [(0, false, 55), (1, false, 55)]);
            }
            assert_eq!(s.run(Fib(20)), 6765);
            assert_eq!(l.offers(), before);
            let st = s.stats();
            assert_eq!((st.total.lookups, st.total.redo_jobs), (0, 0), "{st}");
            if workers == 1 {
                assert!(st.total.inlined > 0, "inlining is back on: {st}");
            }
            l.check();
        }
    })
}

/// Like [`Gate`], with Bang as the child the external stealer takes; catches the
/// panic of its sync and returns whether it caught one and its own mode after it.
struct GateBang {
    ready: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
}
impl Job for GateBang {
    type Output = (bool, bool);
    fn run(self, ctx: &mut Ctx) -> (bool, bool) {
        let mut f = ctx.frame();
        let a = f.spawn(Bang);
        let b = f.spawn(Fib(10));
        f.publish();
        self.ready.send(()).unwrap();
        let _ = self.go.recv_timeout(STEP);
        let synced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let r = f.sync();
            r.get(a) + r.get(b)
        }));
        (synced.is_err(), ctx.in_redo_mode())
    }
}

#[test]
fn a_panic_in_a_job_given_back_to_be_redone_restores_the_mode() {
    bounded(|| {
        let s = Satin::builder().workers(1).build().unwrap();
        let l = FakeLookup::new(&[], Answer::Now);
        s.set_result_lookup(l.clone());
        let stealer = s.external_stealer();
        let (ready_tx, ready) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let r = std::thread::scope(|scope| {
            let root = scope.spawn(|| {
                s.run(GateBang {
                    ready: ready_tx,
                    go: go_rx,
                })
            });
            ready.recv_timeout(STEP).expect("the root did not start");
            let job = stealer.steal().expect("Bang is published");
            assert_eq!(job.key(), None, "Bang is not remote-capable");
            job.give_back_redo();
            go.send(()).unwrap();
            root.join().unwrap()
        });
        // Bang ran in redo mode (the only redo job) on the only worker, inside the
        // root's sync, and panicked; the root went on in its own mode.
        assert_eq!(r, (true, false));
        assert_eq!(s.stats().total.redo_jobs, 1);
        s.reset_stats();
        assert_eq!(s.run(Probe), (false, 55));
        assert_eq!(s.run(Fib(20)), 6765);
        let st = s.stats();
        assert_eq!((st.total.lookups, st.total.redo_jobs), (0, 0), "{st}");
        assert!(st.total.inlined > 0, "inlining is back on: {st}");
        l.check();
    })
}

/// How many times a [`Counted`] was serialized.
static SERIALIZED: AtomicUsize = AtomicUsize::new(0);

/// Fib whose serialization is counted (a key costs one).
#[derive(Deserialize)]
struct Counted(u32);
impl Serialize for Counted {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SERIALIZED.fetch_add(1, Ordering::SeqCst);
        s.serialize_newtype_struct("Counted", &self.0)
    }
}
#[satin::job]
impl Job for Counted {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        if self.0 < 2 {
            return self.0 as u64;
        }
        let mut f = ctx.frame();
        let a = f.spawn(Counted(self.0 - 1));
        let b = f.spawn(Counted(self.0 - 2));
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

#[test]
fn an_inactive_lookup_computes_no_key() {
    bounded(|| {
        let s = Satin::builder().workers(2).build().unwrap();
        let l = FakeLookup::new(&[], Answer::Now);
        l.active.store(false, Ordering::SeqCst);
        s.set_result_lookup(l.clone());
        s.set_redo_roots(true);
        assert_eq!(s.run(Counted(15)), 610);
        assert!(l.active_calls.load(Ordering::SeqCst) > 0);
        assert_eq!(SERIALIZED.load(Ordering::SeqCst), 0);
        assert_eq!(l.offers(), 0);
        assert_eq!(s.stats().total.lookups, 0);
        // Active: every spawned job gets a key (one serialization each, and one more
        // for the fake's own check).
        l.active.store(true, Ordering::SeqCst);
        assert_eq!(s.run(Counted(15)), 610);
        let offers = offered_below(15, &[]);
        assert_eq!(l.offers() as u64, offers);
        assert_eq!(SERIALIZED.load(Ordering::SeqCst) as u64, 2 * offers);
        l.check();
    })
}
