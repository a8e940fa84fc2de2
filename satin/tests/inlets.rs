//! Inlets and abort inside one process: errors of children handled by their spawner,
//! more children spawned by an inlet, an inlet's error passed up, and aborts of
//! queued, stolen and recursively spawned children.

mod common;

use common::{bounded, wait_until, PATIENCE};
use satin::{Ctx, Job, Satin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Fails with its number when it is a multiple of 3.
struct Probe(u32);
impl Job for Probe {
    type Output = Result<u32, u32>;
    fn run(self, _: &mut Ctx) -> Result<u32, u32> {
        if self.0.is_multiple_of(3) {
            Err(self.0)
        } else {
            Ok(self.0)
        }
    }
}

/// Spawns `Probe(0..n)`; the inlet collects the errors and, for each, spawns a
/// replacement `Probe(e + 1)` when `retry` (which succeeds). Returns the sum of the
/// values and the errors seen.
struct Collect {
    n: u32,
    retry: bool,
}
impl Job for Collect {
    type Output = (u32, Vec<u32>);
    fn run(self, ctx: &mut Ctx) -> (u32, Vec<u32>) {
        let mut f = ctx.catch_frame::<u32>();
        let mut tickets: Vec<_> = (0..self.n).map(|i| f.spawn(Probe(i))).collect();
        let mut errors = Vec::new();
        let mut extra = Vec::new();
        let r = f
            .sync(|inlet, e| -> Result<(), ()> {
                errors.push(e);
                if self.retry {
                    extra.push(inlet.spawn(Probe(e + 1)));
                }
                Ok(())
            })
            .unwrap();
        tickets.append(&mut extra);
        let sum = tickets.into_iter().filter_map(|t| r.get_ok(t)).sum();
        errors.sort_unstable();
        (sum, errors)
    }
}

#[test]
fn every_error_goes_to_the_inlet_and_an_inlet_may_spawn_more() {
    bounded(|| {
        for workers in [1, 2, 4] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let n: u32 = 40;
            let failing: Vec<u32> = (0..n).filter(|i| i.is_multiple_of(3)).collect();
            let ok: u32 = (0..n).filter(|i| !i.is_multiple_of(3)).sum();
            let (sum, errors) = s.run(Collect { n, retry: false });
            assert_eq!((sum, &errors), (ok, &failing), "{workers} workers");
            // The replacements (e + 1, never a multiple of 3) are waited for too.
            let (sum, errors) = s.run(Collect { n, retry: true });
            let replaced: u32 = failing.iter().map(|e| e + 1).sum();
            assert_eq!(
                (sum, &errors),
                (ok + replaced, &failing),
                "{workers} workers"
            );
            let st = s.stats().total;
            assert_eq!(st.inlets, 2 * failing.len() as u64, "{workers} workers");
        }
    })
}

/// Sums `Probe(0..n)`, passing the first error up: the inlet returns it.
struct FirstError(u32);
impl Job for FirstError {
    type Output = Result<u32, String>;
    fn run(self, ctx: &mut Ctx) -> Result<u32, String> {
        let mut f = ctx.catch_frame::<u32>();
        let tickets: Vec<_> = (1..=self.0).map(|i| f.spawn(Probe(i))).collect();
        let r = f.sync(|_, e| Err(format!("probe {e} failed")))?;
        Ok(tickets.into_iter().filter_map(|t| r.get_ok(t)).sum())
    }
}

/// A parent of `FirstError`s: the errors passed up reach its own inlet.
struct Outer;
impl Job for Outer {
    type Output = (u32, Vec<String>);
    fn run(self, ctx: &mut Ctx) -> (u32, Vec<String>) {
        let mut f = ctx.catch_frame::<String>();
        let a = f.spawn(FirstError(2));
        let b = f.spawn(FirstError(8));
        let mut errors = Vec::new();
        let r = f
            .sync(|_, e| -> Result<(), ()> {
                errors.push(e);
                Ok(())
            })
            .unwrap();
        (r.get_ok(a).unwrap_or(0) + r.get_ok(b).unwrap_or(0), errors)
    }
}

#[test]
fn an_inlets_error_aborts_the_frame_and_travels_up() {
    bounded(|| {
        let s = Satin::builder().workers(1).build().unwrap();
        // One worker: children run newest first, so FirstError(8) sees 8, 7, 6 (the
        // first failure) and gives up; FirstError(2) sees 2 and 1 and succeeds.
        let (sum, errors) = s.run(Outer);
        assert_eq!((sum, errors), (3, vec!["probe 6 failed".to_string()]));
        let st = s.stats().total;
        // 5..=1 of the second frame were still queued when its inlet failed.
        assert!(st.aborts >= 1 && st.aborted >= 5, "{st:?}");
        for workers in [2, 4] {
            let s = Satin::builder().workers(workers).build().unwrap();
            let (sum, errors) = s.run(Outer);
            assert_eq!(sum, 3, "{workers} workers");
            assert_eq!(errors.len(), 1, "{workers} workers");
            assert!(
                ["probe 3 failed", "probe 6 failed"].contains(&errors[0].as_str()),
                "{errors:?}"
            );
        }
    })
}

/// What the children of [`Search`] saw: started, ended because they were aborted,
/// ended without an abort.
#[derive(Default)]
struct Seen {
    started: AtomicUsize,
    aborted: AtomicUsize,
    completed: AtomicUsize,
    /// Workers the long child started on (bit per worker).
    on: AtomicUsize,
}

/// Runs until it is aborted (polling), or until `PATIENCE` ran out (then it completes,
/// and the test fails on the count).
struct Spin(Arc<Seen>);
impl Job for Spin {
    type Output = Result<u32, u32>;
    fn run(self, ctx: &mut Ctx) -> Result<u32, u32> {
        self.0.started.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if ctx.aborted() {
                self.0.aborted.fetch_add(1, Ordering::SeqCst);
                // The safe point: unwinds to the worker that took the job.
                ctx.poll();
                unreachable!("poll returns only if not aborted");
            }
            std::thread::yield_now();
        }
        self.0.completed.fetch_add(1, Ordering::SeqCst);
        Ok(1)
    }
}

/// A subtree of spinning leaves, `depth` levels of `width` children each: stolen as a
/// whole, then partly stolen back by the parent's waiting worker.
struct Tree {
    depth: u32,
    width: u32,
    seen: Arc<Seen>,
}
impl Job for Tree {
    type Output = Result<u32, u32>;
    fn run(self, ctx: &mut Ctx) -> Result<u32, u32> {
        if self.depth == 0 {
            return Spin(self.seen).run(ctx);
        }
        self.seen
            .on
            .fetch_or(1 << ctx.worker_index(), Ordering::SeqCst);
        let mut f = ctx.catch_frame::<u32>();
        for _ in 0..self.width {
            let _ = f.spawn(Tree {
                depth: self.depth - 1,
                width: self.width,
                seen: self.seen.clone(),
            });
        }
        f.publish();
        let r = f.sync(|_, e| Err(e));
        r.map(|_| 0)
    }
}

/// Fails once the long sibling started on another worker.
struct FailWhenStolen(Arc<Seen>, usize);
impl Job for FailWhenStolen {
    type Output = Result<u32, u32>;
    fn run(self, _: &mut Ctx) -> Result<u32, u32> {
        let me = self.1;
        assert!(
            wait_until(|| self.0.on.load(Ordering::SeqCst) & !(1 << me) != 0
                && self.0.started.load(Ordering::SeqCst) > 0),
            "the long child was not stolen"
        );
        Err(7)
    }
}

/// Spawns the long subtree and the failing child; the inlet aborts.
struct Search(Arc<Seen>);
impl Job for Search {
    type Output = (Option<u32>, Vec<u32>);
    fn run(self, ctx: &mut Ctx) -> (Option<u32>, Vec<u32>) {
        let me = ctx.worker_index();
        let mut f = ctx.catch_frame::<u32>();
        let long = f.spawn(Tree {
            depth: 3,
            width: 3,
            seen: self.0.clone(),
        });
        f.publish();
        let fail = f.spawn(FailWhenStolen(self.0.clone(), me));
        let mut errors = Vec::new();
        let r = f
            .sync(|inlet, e| -> Result<(), ()> {
                errors.push(e);
                inlet.abort();
                Ok(())
            })
            .unwrap();
        assert_eq!(r.get_ok(fail), None);
        (r.get_ok(long), errors)
    }
}

#[test]
fn an_abort_stops_stolen_children_and_everything_they_spawned() {
    bounded(|| {
        for workers in [2, 3] {
            let s = Satin::builder().workers(workers).build().unwrap();
            for round in 0..3 {
                let seen = Arc::new(Seen::default());
                let (long, errors) = s.run(Search(seen.clone()));
                let what = format!("{workers} workers, round {round}");
                // The aborted child's result is not assigned; only the failure reached
                // the inlet.
                assert_eq!(long, None, "{what}");
                assert_eq!(errors, vec![7], "{what}");
                let started = seen.started.load(Ordering::SeqCst);
                // Every leaf that started stopped because of the abort (none ran to
                // its end), and the abort kept most of the 27 leaves from starting.
                assert_eq!(seen.completed.load(Ordering::SeqCst), 0, "{what}");
                assert_eq!(seen.aborted.load(Ordering::SeqCst), started, "{what}");
                assert!(started < 27, "{what}: {started} leaves started");
            }
            let st = s.stats().total;
            assert!(st.aborts >= 3 && st.aborted >= 3, "{st:?}");
            // The pool still computes.
            assert_eq!(s.run(common::Fib(15)), 610);
        }
    })
}

/// Spawns `n` children that count their runs; the inlet of the newest (failing) one
/// aborts the rest: none of them runs after the abort.
struct AbortQueued {
    n: u32,
    runs: Arc<AtomicUsize>,
}
struct Counted(Arc<AtomicUsize>, bool);
impl Job for Counted {
    type Output = Result<(), ()>;
    fn run(self, _: &mut Ctx) -> Result<(), ()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        if self.1 {
            Err(())
        } else {
            Ok(())
        }
    }
}
impl Job for AbortQueued {
    type Output = (usize, usize);
    fn run(self, ctx: &mut Ctx) -> (usize, usize) {
        let mut f = ctx.catch_frame::<()>();
        let ts: Vec<_> = (0..self.n)
            .map(|i| f.spawn(Counted(self.runs.clone(), i + 1 == self.n)))
            .collect();
        let mut at_abort = usize::MAX;
        let r = f
            .sync(|inlet, ()| -> Result<(), ()> {
                inlet.abort();
                at_abort = self.runs.load(Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        let ok = ts.into_iter().filter_map(|t| r.get_ok(t)).count();
        (at_abort, ok)
    }
}

#[test]
fn queued_children_are_dropped_by_an_abort() {
    bounded(|| {
        let s = Satin::builder().workers(1).build().unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let (at_abort, ok) = s.run(AbortQueued {
            n: 10,
            runs: runs.clone(),
        });
        // The failing child ran first (newest first) and aborted the nine others.
        assert_eq!((at_abort, ok), (1, 0));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(s.stats().total.aborted, 9);
    })
}

/// A remote-capable leaf (the only kind of job the result lookup is offered).
#[derive(serde::Serialize, serde::Deserialize)]
struct Leaf(u32);
#[satin::job]
impl Job for Leaf {
    type Output = u32;
    fn run(self, _: &mut Ctx) -> u32 {
        self.0
    }
}

struct Fails;
impl Job for Fails {
    type Output = Result<u32, u32>;
    fn run(self, _: &mut Ctx) -> Result<u32, u32> {
        Err(7)
    }
}

/// Spawns a leaf (taken by the lookup, given back later) and waits for it: its wait
/// helps with other work of this worker.
struct Waits;
impl Job for Waits {
    type Output = Result<u32, u32>;
    fn run(self, ctx: &mut Ctx) -> Result<u32, u32> {
        let mut f = ctx.frame();
        let t = f.spawn(Leaf(5));
        let s = f.sync();
        Ok(s.get(t))
    }
}

struct FailAndWait;
impl Job for FailAndWait {
    type Output = (Vec<u32>, Option<u32>, Option<u32>);
    fn run(self, ctx: &mut Ctx) -> Self::Output {
        let mut f = ctx.catch_frame::<u32>();
        let a = f.spawn(Fails);
        let b = f.spawn(Waits);
        let mut errors = vec![];
        let s = f
            .sync(|_, e| -> Result<(), ()> {
                errors.push(e);
                Ok(())
            })
            .unwrap();
        (errors, s.get_ok(a), s.get_ok(b))
    }
}

/// Takes every job offered and gives it back from another thread once it is taken.
struct GiveBackLater;
impl satin::ResultLookup for GiveBackLater {
    fn active(&self) -> bool {
        true
    }
    fn lookup(
        &self,
        _key: satin::satin_core::JobKey,
        job: satin::StolenJob,
    ) -> Result<(), satin::StolenJob> {
        std::thread::spawn(move || job.give_back());
        Ok(())
    }
}

/// A failed child of a frame with inlets is run by that frame's sync, not by the wait
/// of a sibling's frame helping with this worker's other work (which would lose its
/// error): in redo mode the sibling's child is handed to the lookup, so the sibling's
/// sync waits while the failing child is still queued below it. (Failed before the
/// fix: the inlet saw no error.)
#[test]
fn the_inlet_sees_a_failure_while_a_sibling_waits() {
    bounded(|| {
        let s = Satin::builder().workers(1).redo_depth(8).build().unwrap();
        assert_eq!(s.run(FailAndWait), (vec![7], None, Some(5)));
        s.set_result_lookup(Arc::new(GiveBackLater));
        s.set_redo_roots(true);
        assert_eq!(s.run(FailAndWait), (vec![7], None, Some(5)));
    })
}

/// The phases of [`an_abort_does_not_stop_an_unrelated_root_job`].
#[derive(Default)]
struct Phases {
    blocked: std::sync::atomic::AtomicBool,
    other_root: std::sync::atomic::AtomicBool,
    aborted: std::sync::atomic::AtomicBool,
}

fn wait_for(flag: &std::sync::atomic::AtomicBool) {
    assert!(
        wait_until(|| flag.load(Ordering::SeqCst)),
        "a phase never came"
    );
}

/// Holds its worker until the abort happened.
struct Hold(Arc<Phases>);
impl Job for Hold {
    type Output = u32;
    fn run(self, _: &mut Ctx) -> u32 {
        self.0.blocked.store(true, Ordering::SeqCst);
        wait_for(&self.0.aborted);
        1
    }
}

/// Stolen; waits in its sync for `Hold` (stolen by the third worker).
struct WaitsForHold(Arc<Phases>);
impl Job for WaitsForHold {
    type Output = Result<u32, u32>;
    fn run(self, ctx: &mut Ctx) -> Result<u32, u32> {
        let mut f = ctx.frame();
        let t = f.spawn(Hold(self.0.clone()));
        f.publish();
        wait_for(&self.0.blocked);
        let s = f.sync();
        Ok(s.get(t))
    }
}

/// Aborts `WaitsForHold` once the other root runs (inside that job's wait: every
/// other worker is busy).
struct AbortingRoot(Arc<Phases>);
impl Job for AbortingRoot {
    type Output = ();
    fn run(self, ctx: &mut Ctx) {
        let mut f = ctx.catch_frame::<u32>();
        let _ = f.spawn(WaitsForHold(self.0.clone()));
        f.publish();
        wait_for(&self.0.other_root);
        let _ = f.spawn(Fails);
        let _ = f
            .sync(|inlet, _| -> Result<(), ()> {
                inlet.abort();
                self.0.aborted.store(true, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
    }
}

/// Polls until the abort happened, then once more.
struct OtherRoot(Arc<Phases>);
impl Job for OtherRoot {
    type Output = u32;
    fn run(self, ctx: &mut Ctx) -> u32 {
        self.0.other_root.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + PATIENCE;
        while !self.0.aborted.load(Ordering::SeqCst) && Instant::now() < deadline {
            ctx.poll();
            std::thread::yield_now();
        }
        ctx.poll();
        42
    }
}

/// A root job that a worker takes while it waits inside a stolen job is not stopped
/// when that stolen job is aborted. (Failed before the fix: the root unwound with the
/// abort's payload.)
#[test]
fn an_abort_does_not_stop_an_unrelated_root_job() {
    bounded(|| {
        let s = Arc::new(Satin::builder().workers(3).build().unwrap());
        let p = Arc::new(Phases::default());
        let (s2, p2) = (s.clone(), p.clone());
        let a = std::thread::spawn(move || s2.run(AbortingRoot(p2)));
        // Every worker is busy but the one waiting inside WaitsForHold.
        wait_for(&p.blocked);
        let b = s.try_run(OtherRoot(p.clone()));
        a.join().unwrap();
        assert_eq!(b, Ok(42));
    })
}
