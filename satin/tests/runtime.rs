//! Sync semantics, stealing, serialization on demand and panics.

use satin::{Ctx, Job, Satin, SatinError};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

mod common;
use common::{bounded, Fib};

/// Records the order in which leaves run.
struct Leaf(u32, Arc<Mutex<Vec<u32>>>);
impl Job for Leaf {
    type Output = u32;
    fn run(self, _ctx: &mut Ctx) -> u32 {
        self.1.lock().unwrap().push(self.0);
        self.0 * 10
    }
}

struct Order(Arc<Mutex<Vec<u32>>>);
impl Job for Order {
    type Output = (u32, u32, u32);
    fn run(self, ctx: &mut Ctx) -> (u32, u32, u32) {
        let mut f = ctx.frame();
        let a = f.spawn(Leaf(1, self.0.clone()));
        let b = f.spawn(Leaf(2, self.0.clone()));
        let c = f.spawn(Leaf(3, self.0.clone()));
        assert!(
            self.0.lock().unwrap().is_empty(),
            "nothing runs before sync on 1 worker"
        );
        let r = f.sync();
        (r.get(a), r.get(b), r.get(c))
    }
}

#[test]
fn one_worker_runs_children_at_sync_newest_first() {
    bounded(|| {
        // (With inlining a spawn beyond the inline depth would run at once.)
        let s = Satin::builder()
            .workers(1)
            .inline_depth(usize::MAX)
            .build()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        assert_eq!(s.run(Order(log.clone())), (10, 20, 30));
        assert_eq!(*log.lock().unwrap(), vec![3, 2, 1]);
    })
}

struct Count(Arc<AtomicUsize>);
impl Job for Count {
    type Output = ();
    fn run(self, _ctx: &mut Ctx) {
        // some work, so that children are still running on other workers when the
        // frame is dropped
        let mut x = 0u64;
        for i in 0..100_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct ImplicitSync(Arc<AtomicUsize>);
impl Job for ImplicitSync {
    type Output = usize;
    fn run(self, ctx: &mut Ctx) -> usize {
        {
            let mut f = ctx.frame();
            for _ in 0..10 {
                let _ = f.spawn(Count(self.0.clone()));
            }
            // dropped without sync: waits for all ten
        }
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn dropping_a_frame_is_an_implicit_sync() {
    bounded(|| {
        for w in [1, 3] {
            let s = Satin::builder().workers(w).build().unwrap();
            let n = Arc::new(AtomicUsize::new(0));
            assert_eq!(s.run(ImplicitSync(n)), 10);
        }
    })
}

struct Nested(u32);
impl Job for Nested {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        // two frames in sequence, the second using the first's results, plus a
        // nested frame opened through the outer frame's context
        let mut f = ctx.frame();
        let a = f.spawn(Fib(self.0));
        let inner = {
            let mut g = f.ctx().frame();
            let x = g.spawn(Fib(5));
            let r = g.sync();
            r.get(x)
        };
        let r = f.sync();
        let first = r.get(a);
        let mut f2 = ctx.frame();
        let b = f2.spawn(Fib(self.0 + 1));
        let seq = Fib(3).run(f2.ctx());
        let r2 = f2.sync();
        first + r2.get(b) + inner + seq
    }
}

#[test]
fn nested_and_sequential_frames() {
    bounded(|| {
        for w in [1, 2] {
            let s = Satin::builder().workers(w).build().unwrap();
            assert_eq!(s.run(Nested(15)), 610 + 987 + 5 + 2);
        }
    })
}

struct Wide(u32);
impl Job for Wide {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        if self.0 == 0 {
            let mut x = 0u64;
            for i in 0..20_000u64 {
                x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
            }
            return x & 1;
        }
        let mut f = ctx.frame();
        let t: Vec<_> = (0..4).map(|_| f.spawn(Wide(self.0 - 1))).collect();
        let r = f.sync();
        t.into_iter().map(|t| r.get(t)).sum()
    }
}

#[test]
fn stealing_happens_with_several_workers() {
    bounded(|| {
        let s = Satin::builder().workers(3).build().unwrap();
        let one = Satin::builder().workers(1).build().unwrap();
        assert_eq!(s.run(Wide(6)), one.run(Wide(6)));
        let st = s.stats();
        assert!(st.total.steal_successes > 0, "{st}");
        assert!(st.total.stolen_executed > 0, "{st}");
        assert_eq!(st.total.spawns, (1..=6).map(|d| 4u64.pow(d)).sum::<u64>());
        assert_eq!(st.workers.len(), 3);
        let text = st.to_string();
        assert!(
            text.contains("SATIN 'total': SPAWN_SYNC: spawns = 5460"),
            "{text}"
        );
    })
}

#[test]
fn wire_round_trip_and_unknown_type() {
    let s = Satin::builder().workers(1).build().unwrap();
    let (name, bytes) = satin::to_wire(&Fib(20)).expect("Fib is remote-capable");
    assert!(name.ends_with("::Fib"), "{name}");
    assert!(s.registry().contains(name));
    let job = s.from_wire(name, &bytes).unwrap();
    assert_eq!(job.name(), name);
    let (tx, rx) = mpsc::channel();
    s.execute_wire_job(job, false, satin::AbortHandle::new(), move |r| {
        tx.send(r).unwrap()
    });
    let out = rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
    let remote = <Fib as Job>::REMOTE.unwrap();
    assert_eq!(remote.decode_output(&out).unwrap(), 6765);
    assert_eq!(
        s.from_wire("no::Such", &bytes).err(),
        Some(SatinError::UnknownJobType("no::Such".into()))
    );
    assert!(satin::to_wire(&Count(Arc::new(AtomicUsize::new(0)))).is_none());
}

/// How long the external-stealer test waits for each step before it fails.
const STEP: Duration = Duration::from_secs(30);

/// A root that spawns two remote-capable children and keeps its frame open until the
/// external stealer reports (on the channel) that it took the first.
struct Slow(mpsc::Receiver<()>);
#[derive(Serialize, Deserialize)]
struct SlowChild(u32);
#[satin::job]
impl Job for SlowChild {
    type Output = u32;
    fn run(self, _ctx: &mut Ctx) -> u32 {
        self.0 + 1
    }
}
impl Job for Slow {
    type Output = u32;
    fn run(self, ctx: &mut Ctx) -> u32 {
        let mut f = ctx.frame();
        let a = f.spawn(SlowChild(41));
        let b = f.spawn(SlowChild(1));
        // keep the frame open until the external stealer took `a` (bounded: if it
        // never does, the test fails on the stealer's side)
        let _ = self.0.recv_timeout(STEP);
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

#[test]
fn external_stealer_completes_from_wire() {
    bounded(|| {
        let s = Satin::builder().workers(1).build().unwrap();
        let st = s.external_stealer();
        let (taken, taken_rx) = mpsc::channel();
        let net = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + STEP;
            while std::time::Instant::now() < deadline {
                if let Some(job) = st.steal() {
                    taken.send(()).unwrap();
                    let (name, bytes) = job.to_wire().expect("remote-capable");
                    // "another process": rebuild it by name, run it, send the result back
                    let reg = satin::JobRegistry::from_inventory();
                    let remote_job = reg.from_wire(name, &bytes).unwrap();
                    assert!(remote_job.name().ends_with("SlowChild"));
                    let mut v: SlowChild = postcard::from_bytes(&bytes).unwrap();
                    v.0 += 1; // the remote result
                    let out = postcard::to_allocvec(&v.0).unwrap();
                    job.complete_from_wire(&out).unwrap();
                    return true;
                }
                std::thread::yield_now();
            }
            false
        });
        let r = s.run(Slow(taken_rx));
        assert!(net.join().unwrap(), "the external stealer found nothing");
        assert_eq!(r, 42 + 2);
    })
}

struct Boom(u32);
impl Job for Boom {
    type Output = u32;
    fn run(self, ctx: &mut Ctx) -> u32 {
        if self.0 == 0 {
            panic!("boom");
        }
        let mut f = ctx.frame();
        let t: Vec<_> = (0..3)
            .map(|i| f.spawn(Boom(if i == 1 { self.0 - 1 } else { 0 })))
            .collect();
        let r = f.sync();
        t.into_iter().map(|t| r.get(t)).sum()
    }
}

struct Panicky(u32);
impl Job for Panicky {
    type Output = u32;
    fn run(self, ctx: &mut Ctx) -> u32 {
        if self.0 == 0 {
            panic!("boom");
        }
        let mut f = ctx.frame();
        let a = f.spawn(Wide(3));
        let b = f.spawn(Panicky(self.0 - 1));
        let c = f.spawn(Wide(3));
        let r = f.sync();
        (r.get(a) + r.get(c)) as u32 + r.get(b)
    }
}

#[test]
fn a_panic_is_reported_and_the_pool_survives() {
    bounded(|| {
        for w in [1, 3] {
            let s = Satin::builder().workers(w).build().unwrap();
            let e = s.try_run(Panicky(4)).unwrap_err();
            assert_eq!(e, SatinError::JobPanicked("boom".into()));
            let e = s.try_run(Boom(3)).unwrap_err();
            assert!(matches!(e, SatinError::JobPanicked(_)));
            let caught =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.run(Panicky(2))));
            assert!(caught.is_err());
            // still works afterwards
            assert_eq!(s.run(Fib(20)), 6765);
        }
    })
}

#[test]
fn many_runs_and_large_jobs() {
    bounded(|| {
        // a job larger than the inline slot is boxed into the record
        #[derive(Clone)]
        struct Big([u64; 32], u32);
        impl Job for Big {
            type Output = [u64; 32];
            fn run(self, ctx: &mut Ctx) -> [u64; 32] {
                if self.1 == 0 {
                    return self.0;
                }
                let mut f = ctx.frame();
                let a = f.spawn(Big(self.0, self.1 - 1));
                let b = f.spawn(Big(self.0, self.1 - 1));
                let r = f.sync();
                let (x, y) = (r.get(a), r.get(b));
                std::array::from_fn(|i| x[i] + y[i])
            }
        }
        let s = Satin::builder().workers(2).build().unwrap();
        for _ in 0..50 {
            assert_eq!(s.run(Big([1; 32], 8)), [256; 32]);
            assert_eq!(s.run(Fib(15)), 610);
        }
    })
}

#[test]
fn more_workers_than_a_record_can_name_is_a_config_error() {
    match Satin::builder().workers(satin::MAX_WORKERS + 1).build() {
        Err(satin::SatinError::Config(m)) => assert!(m.contains("workers"), "{m}"),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("built with more than MAX_WORKERS workers"),
    }
}

/// A shared object's version, and a job whose guard wants a version.
#[derive(Serialize, Deserialize)]
struct Version(u32);
impl satin::Replicated for Version {
    type Op = u32;
    type Output = ();
    fn apply(&mut self, v: &u32) {
        self.0 = self.0.max(*v);
    }
}

#[derive(Serialize, Deserialize)]
struct NeedsVersion(u32, satin::Shared<Version>);
#[satin::job]
impl Job for NeedsVersion {
    type Output = u32;
    fn run(self, _ctx: &mut Ctx) -> u32 {
        self.1.read(|v| v.0)
    }
    fn guard(&self) -> bool {
        self.1.read(|v| v.0 >= self.0)
    }
}

/// A job from the wire runs once its guard holds (a write that comes while it waits
/// lets it go), and fails with `GuardTimeout` after the builder's guard patience when
/// the guard never holds, fetching the sender's copies (here: a counter) meanwhile.
#[test]
fn a_wire_job_waits_for_its_guard_and_times_out_after_the_patience() {
    let s = Satin::builder()
        .workers(1)
        .guard_patience(Duration::from_millis(300))
        .build()
        .unwrap();
    let v = satin::Shared::new("runtime-test-version", Version(0)).unwrap();
    let run = |want: u32, fetched: Arc<AtomicUsize>| {
        let (name, bytes) = satin::to_wire(&NeedsVersion(want, v.clone())).unwrap();
        let job = s.from_wire(name, &bytes).unwrap();
        let (tx, rx) = mpsc::channel();
        let fetch: Box<dyn Fn() + Send> = Box::new(move || {
            fetched.fetch_add(1, Ordering::Relaxed);
        });
        s.execute_wire_job_from(
            job,
            false,
            satin::AbortHandle::new(),
            Some(fetch),
            move |r| tx.send(r).unwrap(),
        );
        rx
    };
    // The guard holds at once.
    let fetched = Arc::new(AtomicUsize::new(0));
    let out = run(0, fetched.clone()).recv_timeout(STEP).unwrap().unwrap();
    let remote = <NeedsVersion as Job>::REMOTE.unwrap();
    assert_eq!(remote.decode_output(&out).unwrap(), 0);
    assert_eq!(fetched.load(Ordering::Relaxed), 0);
    // It never holds: the job fails after the patience, having asked for copies.
    let r = run(7, fetched.clone()).recv_timeout(STEP).unwrap();
    assert!(
        matches!(r, Err(SatinError::GuardTimeout { ref job, .. }) if job.ends_with("::NeedsVersion")),
        "{r:?}"
    );
    assert!(fetched.load(Ordering::Relaxed) >= 1);
    assert_eq!(s.net_counters().guard_waits.load(Ordering::Relaxed), 1);
    // It holds once a write arrives (while it waits, or before it starts).
    let rx = run(2, Arc::new(AtomicUsize::new(0)));
    v.write(2);
    let out = rx.recv_timeout(STEP).unwrap().unwrap();
    assert_eq!(remote.decode_output(&out).unwrap(), 2);
}
