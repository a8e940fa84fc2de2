//! The depth bound of redo mode (`SatinBuilder::redo_depth`): the jobs of a redone
//! subtree down to that many levels below the redone job are marked and offered to
//! the result lookup; deeper jobs run in normal mode (inlining on, no offers, no
//! mark), so a saved result deeper than that is recomputed.
//!
//! The redone job is at depth 0 (its children at 1), and every call of `Fib` spawns,
//! so the expected offers follow from the call tree.

use satin::satin_core::JobKey;
use satin::{Ctx, Job, ResultLookup, Satin, StolenJob, DEFAULT_REDO_DEPTH, MAX_REDO_DEPTH};
use std::collections::HashMap;
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

fn fib_output(v: u64) -> Vec<u8> {
    <Fib as Job>::REMOTE.unwrap().encode_output(&v).unwrap()
}

/// How many times each Fib(m) occurs at depths `1..=k` below a Fib(n) at depth 0.
fn calls_within(n: u32, k: usize, into: &mut HashMap<u32, usize>) {
    if n < 2 || k == 0 {
        return;
    }
    for c in [n - 1, n - 2] {
        *into.entry(c).or_default() += 1;
        calls_within(c, k - 1, into);
    }
}

/// The answer of a redone Fib(n) at depth `d` when the lookup supplies the values of
/// `saved` for the jobs it is offered, i.e. those at depths `1..=k`.
fn answer(n: u32, d: usize, k: usize, saved: &[(u32, u64)]) -> u64 {
    if (1..=k).contains(&d) {
        if let Some(&(_, v)) = saved.iter().find(|(m, _)| *m == n) {
            return v;
        }
    }
    if n < 2 {
        n as u64
    } else {
        answer(n - 1, d + 1, k, saved) + answer(n - 2, d + 1, k, saved)
    }
}

/// A lookup that counts the offers per key and completes the jobs of `saved` with
/// their (deliberately wrong) values; it runs every other job here.
#[derive(Default)]
struct Counting {
    saved: HashMap<JobKey, Vec<u8>>,
    offered: Mutex<HashMap<JobKey, usize>>,
    /// Offered jobs that did not carry the redo mark.
    unmarked: AtomicUsize,
}

impl Counting {
    fn with(saved: &[(u32, u64)]) -> Arc<Counting> {
        Arc::new(Counting {
            saved: saved
                .iter()
                .map(|&(n, v)| (key_of(&Fib(n)), fib_output(v)))
                .collect(),
            ..Counting::default()
        })
    }

    fn offers(&self) -> usize {
        self.offered.lock().unwrap().values().sum()
    }

    /// The offers per Fib argument (of the arguments `0..=n`).
    fn offers_by_arg(&self, n: u32) -> HashMap<u32, usize> {
        let offered = self.offered.lock().unwrap();
        (0..=n)
            .filter_map(|m| offered.get(&key_of(&Fib(m))).map(|&c| (m, c)))
            .collect()
    }
}

impl ResultLookup for Counting {
    fn active(&self) -> bool {
        true
    }
    fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        *self.offered.lock().unwrap().entry(key).or_default() += 1;
        if !job.is_redone() {
            self.unmarked.fetch_add(1, Ordering::SeqCst);
        }
        match self.saved.get(&key) {
            Some(bytes) => {
                job.complete_from_wire(bytes).unwrap();
                Ok(())
            }
            None => Err(job),
        }
    }
}

/// A Satin instance with `workers` workers and redo depth `k` (`None`: the default,
/// from a builder that ignores the environment).
fn satin(workers: usize, k: Option<usize>) -> Satin {
    let b = Satin::builder().workers(workers).use_env(false);
    match k {
        Some(k) => b.redo_depth(k),
        None => b,
    }
    .build()
    .unwrap()
}

#[test]
fn a_redone_root_offers_exactly_the_jobs_down_to_the_redo_depth() {
    bounded(|| {
        const N: u32 = 18; // its call tree is 17 levels deep
        let depths = [
            (Some(0), 0),
            (Some(1), 1),
            (Some(2), 2),
            (Some(5), 5),
            (None, DEFAULT_REDO_DEPTH),
            (Some(MAX_REDO_DEPTH), usize::MAX),
            (Some(usize::MAX), usize::MAX),
        ];
        for workers in [1, 2] {
            for (set, k) in depths {
                let s = satin(workers, set);
                let l = Counting::with(&[]);
                s.set_result_lookup(l.clone());
                s.set_redo_roots(true);
                assert_eq!(s.run(Fib(N)), 2584);
                let mut want = HashMap::new();
                calls_within(N, k, &mut want);
                // Each job at depth 1..=k was offered once, no other job at all.
                assert_eq!(l.offers_by_arg(N), want, "{workers} workers, depth {k}");
                let st = s.stats();
                assert_eq!(st.total.lookups as usize, l.offers(), "{st}");
                assert_eq!(l.unmarked.load(Ordering::SeqCst), 0);
                if workers == 1 {
                    // Below the bound inlining is back on; unbounded, never.
                    let inlined = st.total.inlined > 0;
                    assert_eq!(inlined, k < N as usize - 1, "depth {k}: {st}");
                }
            }
        }
    })
}

#[test]
fn a_redone_wire_job_counts_the_depth_from_itself() {
    bounded(|| {
        let s = satin(2, Some(2));
        let l = Counting::with(&[]);
        s.set_result_lookup(l.clone());
        let (name, bytes) = satin::to_wire(&Fib(14)).unwrap();
        let job = s.from_wire(name, &bytes).unwrap();
        let (tx, rx) = mpsc::channel();
        s.execute_wire_job(job, true, satin::AbortHandle::new(), move |r| {
            let _ = tx.send(r);
        });
        let out = rx.recv_timeout(STEP).unwrap().unwrap();
        let v: u64 = <Fib as Job>::REMOTE.unwrap().decode_output(&out).unwrap();
        assert_eq!(v, 377);
        let mut want = HashMap::new();
        calls_within(14, 2, &mut want);
        assert_eq!(l.offers_by_arg(14), want);
    })
}

#[test]
fn a_saved_result_is_used_within_the_redo_depth_and_recomputed_below_it() {
    bounded(|| {
        // Fib(16) occurs at depths 2, 3 and 4 below Fib(20); Fib(10) only below
        // depth 5. The saved values are wrong on purpose: where one was used shows
        // in the answer.
        let saved = [(16, 1_000_000), (10, 7_000)];
        for workers in [1, 2] {
            for k in [1, 3, 12, usize::MAX] {
                let s = satin(workers, Some(k));
                let l = Counting::with(&saved);
                s.set_result_lookup(l.clone());
                s.set_redo_roots(true);
                let got = s.run(Fib(20));
                assert_eq!(got, answer(20, 0, k, &saved), "depth {k}");
                if k == 3 {
                    // Within the bound Fib(16) is used, below it computed.
                    assert_ne!(got, answer(20, 0, 4, &saved));
                    assert_ne!(got, 6765);
                }
            }
        }
    })
}

/// The redone root of [`gated`] (depth 0): spawns [`Inner`] (depth 1).
struct Outer(Inner);
impl Job for Outer {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let mut f = ctx.frame();
        let a = f.spawn(self.0);
        let r = f.sync();
        r.get(a)
    }
}

/// Spawns Fib(18) and Fib(17) (depth 2), publishes both, reports that on `ready`
/// and keeps its frame open until `go` (so that the external stealer takes Fib(18)).
struct Inner {
    ready: mpsc::Sender<bool>,
    go: mpsc::Receiver<()>,
}
impl Job for Inner {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let mode = ctx.in_redo_mode();
        let mut f = ctx.frame();
        let a = f.spawn(Fib(18));
        let b = f.spawn(Fib(17));
        f.publish();
        self.ready.send(mode).unwrap();
        // bounded: if the test thread never answers, it has failed already
        let _ = self.go.recv_timeout(STEP);
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

/// Runs a redone [`Outer`] root on a one-worker instance with redo depth `k`; the test
/// thread steals Fib(18) (depth 2) with the external stealer and gives it back.
/// Returns whether Fib(18) was marked, whether `Inner` ran in redo mode, and the
/// offers of Fib(18).
fn gated(k: usize) -> (bool, bool, usize) {
    let s = satin(1, Some(k));
    let l = Counting::with(&[]);
    s.set_result_lookup(l.clone());
    s.set_redo_roots(true);
    let stealer = s.external_stealer();
    let (ready_tx, ready) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let root = scope.spawn(|| {
            s.run(Outer(Inner {
                ready: ready_tx,
                go: go_rx,
            }))
        });
        let inner_mode = ready.recv_timeout(STEP).expect("Inner did not start");
        let job = stealer.steal().expect("Fib(18) is published");
        assert_eq!(job.key(), Some(key_of(&Fib(18))));
        let marked = job.is_redone();
        job.give_back();
        go.send(()).unwrap();
        assert_eq!(root.join().unwrap(), 2584 + 1597);
        assert_eq!(l.unmarked.load(Ordering::SeqCst), 0);
        (
            marked,
            inner_mode,
            l.offers_by_arg(18).get(&18).copied().unwrap_or(0),
        )
    })
}

#[test]
fn a_job_stolen_beyond_the_redo_depth_is_not_marked() {
    bounded(|| {
        // Depth 1: Inner (depth 1) was offered, but runs in normal mode; its
        // children (depth 2) are unmarked, and Fib(18) given back is not offered.
        assert_eq!(gated(1), (false, false, 0));
        // Depth 2: Fib(18) is marked, so a thief in another process would redo it;
        // given back, it is offered before it runs.
        assert_eq!(gated(2), (true, true, 1));
    })
}
