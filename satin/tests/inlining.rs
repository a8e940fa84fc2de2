//! Adaptive inlining and the private/published split of a worker's jobs: every inline
//! depth computes the sequential answer, inlined children keep the semantics of
//! spawned ones (results after sync, panics, drop of unread results), and a worker
//! keeps work published for an external stealer.

use satin::{Ctx, Job, Satin, SatinError};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{bounded, wait_until, Fib, PATIENCE};

fn fib_seq(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

/// A tree whose results own heap memory (drop glue in the record slots), with a
/// variable number of children per frame.
struct Names(u32, String);
impl Job for Names {
    type Output = Vec<String>;
    fn run(self, ctx: &mut Ctx) -> Vec<String> {
        if self.0 == 0 {
            return vec![self.1];
        }
        let mut f = ctx.frame();
        let kids: Vec<_> = (0..self.0)
            .map(|i| f.spawn(Names(self.0 - 1, format!("{}.{i}", self.1))))
            .collect();
        let r = f.sync();
        kids.into_iter().flat_map(|t| r.get(t)).collect()
    }
}

fn names_seq(depth: u32, name: String, out: &mut Vec<String>) {
    if depth == 0 {
        out.push(name);
        return;
    }
    for i in 0..depth {
        names_seq(depth - 1, format!("{name}.{i}"), out);
    }
}

const DEPTHS: [usize; 5] = [0, 1, 2, 4, usize::MAX];

#[test]
fn every_inline_depth_computes_the_sequential_answer() {
    bounded(|| {
        let mut names = Vec::new();
        names_seq(6, "r".into(), &mut names);
        for workers in [1, 3] {
            for depth in DEPTHS {
                let s = Satin::builder()
                    .workers(workers)
                    .inline_depth(depth)
                    .build()
                    .unwrap();
                assert_eq!(
                    s.run(Fib(20)),
                    fib_seq(20),
                    "{workers} workers, depth {depth}"
                );
                assert_eq!(
                    s.run(Names(6, "r".into())),
                    names,
                    "{workers} workers, depth {depth}"
                );
            }
        }
    })
}

#[test]
fn the_inline_depth_decides_how_many_spawns_become_calls() {
    bounded(|| {
        // fib(n) spawns twice per call with n >= 2: 2 * (number of calls with n >= 2).
        fn inner_calls(n: u32) -> u64 {
            if n < 2 {
                0
            } else {
                1 + inner_calls(n - 1) + inner_calls(n - 2)
            }
        }
        let expect = 2 * inner_calls(18);
        let count = |depth: usize| {
            let s = Satin::builder()
                .workers(1)
                .inline_depth(depth)
                .build()
                .unwrap();
            assert_eq!(s.run(Fib(18)), fib_seq(18));
            let t = s.stats().total;
            assert_eq!(t.spawns, expect, "depth {depth}");
            t.inlined
        };
        assert_eq!(count(0), expect, "depth 0: every spawn is a call");
        assert_eq!(count(usize::MAX), 0, "no inlining: every spawn is queued");
        let some = count(2);
        assert!(some > 0 && some < expect, "depth 2 inlines some: {some}");
        assert!(count(4) < some, "a deeper limit inlines fewer");
    })
}

struct Boom(u32);
impl Job for Boom {
    type Output = u32;
    fn run(self, ctx: &mut Ctx) -> u32 {
        if self.0 == 0 {
            panic!("inlined boom");
        }
        let mut f = ctx.frame();
        let a = f.spawn(Boom(self.0 - 1));
        let b = f.spawn(Boom(self.0 - 1));
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

#[test]
fn a_panic_in_an_inlined_child_reaches_the_caller_and_the_pool_survives() {
    bounded(|| {
        for depth in DEPTHS {
            for workers in [1, 2] {
                let s = Satin::builder()
                    .workers(workers)
                    .inline_depth(depth)
                    .build()
                    .unwrap();
                let e = s.try_run(Boom(6)).unwrap_err();
                assert_eq!(e, SatinError::JobPanicked("inlined boom".into()));
                assert_eq!(s.run(Fib(15)), 610, "usable afterwards");
            }
        }
    })
}

/// Counts the drops of its values, to check that unread results are dropped once.
struct Tracked(Arc<AtomicUsize>);
impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct MakeTracked(Arc<AtomicUsize>);
impl Job for MakeTracked {
    type Output = Tracked;
    fn run(self, _ctx: &mut Ctx) -> Tracked {
        Tracked(self.0)
    }
}

struct Unread(Arc<AtomicUsize>, usize);
impl Job for Unread {
    type Output = ();
    fn run(self, ctx: &mut Ctx) {
        let mut f = ctx.frame();
        let tickets: Vec<_> = (0..self.1)
            .map(|_| f.spawn(MakeTracked(self.0.clone())))
            .collect();
        let r = f.sync();
        // read half of the results, leave the others in their tickets or records
        for t in tickets.into_iter().step_by(2) {
            drop(r.get(t));
        }
    }
}

#[test]
fn unread_results_are_dropped_exactly_once() {
    bounded(|| {
        for depth in DEPTHS {
            let drops = Arc::new(AtomicUsize::new(0));
            let s = Satin::builder()
                .workers(1)
                .inline_depth(depth)
                .build()
                .unwrap();
            s.run(Unread(drops.clone(), 9));
            // records are recycled lazily: run another job so the last frame's go back
            s.run(Fib(5));
            drop(s);
            assert_eq!(drops.load(Ordering::SeqCst), 9, "depth {depth}");
        }
    })
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Sleepy(u32);

#[satin::job]
impl Job for Sleepy {
    type Output = u32;
    fn run(self, _ctx: &mut Ctx) -> u32 {
        std::thread::sleep(Duration::from_millis(2));
        self.0
    }
}

/// What the thief thread of [`offer`] has done: jobs it took, steal attempts that
/// found nothing, and whether the run is over; `go` is set by the frame once all its
/// children are spawned (a thief that stole during the spawn loop would make the
/// worker publish the next child at its next spawn, which the test does not count).
#[derive(Default)]
struct Thief {
    go: AtomicUsize,
    taken: AtomicUsize,
    misses: AtomicUsize,
    over: AtomicUsize,
}

/// Spawns `n` children, publishes them if asked, then keeps the frame open until the
/// external stealer took `want` of them and then found nothing once more (so no
/// further child was stealable while the frame was open); returns the sum of the
/// results and how many were stolen while the frame was open.
struct Offer {
    n: u32,
    publish: bool,
    want: usize,
    thief: Arc<Thief>,
}
impl Job for Offer {
    type Output = (u32, usize);
    fn run(self, ctx: &mut Ctx) -> (u32, usize) {
        let mut f = ctx.frame();
        let kids: Vec<_> = (0..self.n).map(|i| f.spawn(Sleepy(i))).collect();
        if self.publish {
            f.publish();
        }
        let t = &self.thief;
        t.go.store(1, Ordering::SeqCst);
        wait_until(|| t.taken.load(Ordering::SeqCst) >= self.want);
        let misses = t.misses.load(Ordering::SeqCst);
        wait_until(|| t.misses.load(Ordering::SeqCst) > misses);
        let before_sync = t.taken.load(Ordering::SeqCst);
        let r = f.sync();
        (kids.into_iter().map(|t| r.get(t)).sum(), before_sync)
    }
}

/// Runs an [`Offer`] of 8 children (the root waits for `want` steals) against a thief
/// thread that steals until the run is over; returns (sum, stolen before sync, stolen
/// in all).
fn offer(publish: bool, want: usize) -> (u32, usize, usize) {
    let s = Satin::builder()
        .workers(1)
        .inline_depth(64)
        .build()
        .unwrap();
    let st = s.external_stealer();
    let thief = Arc::new(Thief::default());
    let t2 = thief.clone();
    let handle = std::thread::spawn(move || {
        // steal whatever is published, finish it "remotely" (result + 100)
        let deadline = Instant::now() + PATIENCE;
        while t2.over.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            if t2.go.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
                continue;
            }
            match st.steal() {
                Some(job) => {
                    let (_, bytes) = job.to_wire().expect("remote-capable");
                    let v: Sleepy = postcard::from_bytes(&bytes).unwrap();
                    let out = postcard::to_allocvec(&(v.0 + 100)).unwrap();
                    job.complete_from_wire(&out).unwrap();
                    t2.taken.fetch_add(1, Ordering::SeqCst);
                }
                None => {
                    t2.misses.fetch_add(1, Ordering::SeqCst);
                    std::thread::yield_now();
                }
            }
        }
    });
    let (r, before_sync) = s.run(Offer {
        n: 8,
        publish,
        want,
        thief: thief.clone(),
    });
    thief.over.store(1, Ordering::SeqCst);
    handle.join().unwrap();
    (r, before_sync, thief.taken.load(Ordering::SeqCst))
}

#[test]
fn a_worker_keeps_one_job_published_for_an_external_stealer() {
    bounded(|| {
        // Without publish(): the oldest child is published at once, the rest stays
        // private while the frame is open (the worker publishes the next one only
        // when it pops or spawns), so a stealer that starts after the spawns gets
        // exactly one before the sync.
        let (r, before_sync, taken) = offer(false, 1);
        assert_eq!(before_sync, 1);
        assert_eq!(r, (0..8).sum::<u32>() + 100 * taken as u32);
        // publish() makes all of them stealable at once.
        let (r, before_sync, taken) = offer(true, 8);
        assert_eq!((before_sync, taken), (8, 8));
        assert_eq!(r, (0..8).sum::<u32>() + 800);
    })
}

/// Counts its starts (low half) and ends (high half) in one counter.
struct SlowDone(Arc<AtomicUsize>);
impl Job for SlowDone {
    type Output = u32;
    fn run(self, _ctx: &mut Ctx) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(30));
        self.0.fetch_add(1 << 16, Ordering::SeqCst);
        1
    }
}

/// Panics once the slow sibling (whose counter it holds) has started on the other
/// worker (or a bounded wait ran out: then the sibling is dropped unrun).
struct PanicNow(Arc<AtomicUsize>);
impl Job for PanicNow {
    type Output = u32;
    fn run(self, _ctx: &mut Ctx) -> u32 {
        wait_until(|| self.0.load(Ordering::SeqCst) & 0xffff > 0);
        panic!("local child");
    }
}

/// Spawns a slow child (stolen by the other worker) and a child that panics here,
/// by explicit sync or by dropping the frame.
struct LocalPanic(Arc<AtomicUsize>, bool);
impl Job for LocalPanic {
    type Output = u32;
    fn run(self, ctx: &mut Ctx) -> u32 {
        let mut f = ctx.frame();
        let a = f.spawn(SlowDone(self.0.clone()));
        f.publish();
        let b = f.spawn(PanicNow(self.0.clone()));
        if self.1 {
            let r = f.sync();
            r.get(a) + r.get(b)
        } else {
            drop(f);
            0
        }
    }
}

#[test]
fn a_local_panic_waits_for_the_stolen_siblings_before_unwinding() {
    bounded(|| {
        for explicit_sync in [true, false] {
            let s = Satin::builder()
                .workers(2)
                .inline_depth(usize::MAX)
                .build()
                .unwrap();
            for _ in 0..5 {
                let done = Arc::new(AtomicUsize::new(0));
                let e = s
                    .try_run(LocalPanic(done.clone(), explicit_sync))
                    .unwrap_err();
                assert_eq!(e, SatinError::JobPanicked("local child".into()));
                // The slow sibling was stolen and finished before the frame unwound,
                // or it was dropped unrun: never still running.
                let c = done.load(Ordering::SeqCst);
                assert_eq!(
                    c & 0xffff,
                    c >> 16,
                    "started {} finished {}",
                    c & 0xffff,
                    c >> 16
                );
            }
            assert_eq!(s.run(Fib(12)), 144);
        }
    })
}

/// Spawns two children, publishes them, and syncs once the thief of the test took one
/// (and failed it).
struct FailedThief(Arc<AtomicUsize>);
impl Job for FailedThief {
    type Output = u32;
    fn run(self, ctx: &mut Ctx) -> u32 {
        let mut f = ctx.frame();
        let a = f.spawn(Sleepy(1));
        let b = f.spawn(Sleepy(2));
        f.publish();
        self.0.store(1, Ordering::SeqCst);
        assert!(wait_until(|| self.0.load(Ordering::SeqCst) == 2));
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

#[test]
fn a_stolen_child_that_failed_elsewhere_is_that_error_not_a_panic() {
    bounded(|| {
        let s = Satin::builder().workers(1).build().unwrap();
        let st = s.external_stealer();
        let flag = Arc::new(AtomicUsize::new(0));
        let f2 = flag.clone();
        let thief = std::thread::spawn(move || {
            assert!(wait_until(|| f2.load(Ordering::SeqCst) == 1));
            let deadline = Instant::now() + PATIENCE;
            loop {
                if let Some(job) = st.steal() {
                    job.fail(SatinError::Remote("the thief's process died".into()));
                    f2.store(2, Ordering::SeqCst);
                    return;
                }
                assert!(Instant::now() < deadline, "nothing to steal");
                std::thread::yield_now();
            }
        });
        let e = s.try_run(FailedThief(flag)).unwrap_err();
        thief.join().unwrap();
        assert_eq!(e, SatinError::Remote("the thief's process died".into()));
    })
}

/// A job of one type that spawns children of three types into one frame, in an order
/// given by `mix` (the sync of a frame with one job type calls the children's `run`
/// directly; a frame with several must run each child by its own type).
struct Mixed {
    n: u32,
    mix: u32,
}

/// Doubles its argument (a second job type, with another output type).
struct Twice(u32);
impl Job for Twice {
    type Output = u64;
    fn run(self, _: &mut Ctx) -> u64 {
        2 * self.0 as u64
    }
}

/// Its argument as text (a third job type, whose output owns memory).
struct Text(u32);
impl Job for Text {
    type Output = String;
    fn run(self, _: &mut Ctx) -> String {
        self.0.to_string()
    }
}

impl Job for Mixed {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        if self.n == 0 {
            return 1;
        }
        let mut f = ctx.frame();
        let (a, b, c) = match self.mix % 3 {
            0 => {
                let a = f.spawn(Mixed {
                    n: self.n - 1,
                    mix: self.mix + 1,
                });
                let b = f.spawn(Twice(self.n));
                let c = f.spawn(Text(self.n));
                (a, b, c)
            }
            1 => {
                let c = f.spawn(Text(self.n));
                let a = f.spawn(Mixed {
                    n: self.n - 1,
                    mix: self.mix + 1,
                });
                let b = f.spawn(Twice(self.n));
                (a, b, c)
            }
            _ => {
                let b = f.spawn(Twice(self.n));
                let c = f.spawn(Text(self.n));
                let a = f.spawn(Mixed {
                    n: self.n - 1,
                    mix: self.mix + 1,
                });
                (a, b, c)
            }
        };
        let r = f.sync();
        let text: u64 = r.get(c).parse().expect("a number");
        r.get(a) + r.get(b) + text
    }
}

/// [`Mixed`]'s answer, computed sequentially.
fn mixed_seq(n: u32) -> u64 {
    if n == 0 {
        1
    } else {
        mixed_seq(n - 1) + 3 * n as u64
    }
}

#[test]
fn a_frame_of_several_job_types_runs_each_child_as_its_own_type() {
    bounded(|| {
        for workers in [1, 2] {
            for depth in DEPTHS {
                let s = Satin::builder()
                    .workers(workers)
                    .inline_depth(depth)
                    .build()
                    .unwrap();
                for mix in 0..3 {
                    assert_eq!(
                        s.run(Mixed { n: 40, mix }),
                        mixed_seq(40),
                        "workers {workers}, inline depth {depth}, mix {mix}"
                    );
                }
            }
        }
    });
}
