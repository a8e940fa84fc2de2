//! Satin micro-benchmark: the cost of spawn+sync and the Fibonacci overhead factor,
//! against `rayon::join` measured in the same run, with the same loop shapes.
//!
//! ```text
//! satin-bench [--iters N] [--fib N] [--redo-fib N] [--repeat R]
//! ```
//!
//! Everything runs on ONE worker thread (a Satin pool with `workers(1)`, a rayon pool
//! with `num_threads(1)`), placed by the OS; the sequential baseline runs on the main
//! thread. The loop figures are the best of `--repeat` runs; the fib runs alternate
//! within each of `--repeat` repetitions and the figures are medians of the
//! per-repetition ratios (this VM's speed drifts by 20 % from one second to the next).
//!
//! - `satin.spawn_sync_ns`: a loop of frames, each spawning one trivial job and syncing
//!   it (one spawn+sync pair per iteration).
//! - `satin.spawn2_sync_ns`: frames spawning two trivial jobs then syncing, per frame:
//!   the shape of `rayon::join` (one child goes through the deque, one is run by sync).
//! - `rayon.join_ns`: `rayon::join` of two trivial closures per iteration.
//! - `satin.fib_overhead` / `rayon.fib_overhead`: fib(N) with every call spawning
//!   (Satin: two spawns and a sync; rayon: a join) over the plain sequential fib(N).
//!   Satin runs with its default adaptive inlining (spawns deeper than
//!   `DEFAULT_INLINE_DEPTH` queued jobs run as calls).
//! - `satin.fib_overhead_queued`: the same with inlining off (`inline_depth(usize::MAX)`):
//!   every spawn makes a record and goes through the worker's queue.
//! - `satin.fib_overhead_stealer`: default inlining, with an external stealer attached
//!   (as in a pool of processes), so the worker keeps one job published on its deque.
//! - `satin.fib_overhead_plain`: default inlining, with fib written as one function
//!   (base case and spawns in the same `run`, as `FibPlain` below) instead of
//!   `ibis_apps::fib::Fib`'s small inlinable `run` that tests the base case before
//!   calling the spawning part: the price of that layout, which the compiler does not
//!   find by itself (it saves six registers in every call, leaves included).
//! - `floor.fib_overhead` / `floor.fib_join_overhead`: fib(N) on the owner's side of a
//!   split deque and nothing else (`ibis_bench::split_floor`), both children spawned
//!   (Satin's shape) or one spawned and one called (the join shape), over the
//!   sequential fib: the floor under any spawn a thief could take.
//!   `ratio.fib_queued_vs_floor` is `satin.fib_overhead_queued` over the first.
//! - `satin.redo.fib<N>.*` (N = `--redo-fib`): the cost of a redo after a crash. The
//!   root fib(N) runs redone (`set_redo_roots(true)`) with a result lookup that is
//!   active but never hits, so every job the redo offers costs its serialization,
//!   key (SHA-256) and lookup and then runs anyway: `ratio` with the default
//!   `redo_depth` (offers down to 12 levels below the root), `unbounded_ratio` with
//!   `redo_depth(usize::MAX)` (every call offered, inlining off), both over the same
//!   fib(N) run normally on the same kind of instance, alternating in each
//!   repetition (medians of the per-repetition ratios); `lookups` and
//!   `unbounded_lookups` are the offers of one run.

#![forbid(unsafe_code)]

use clap::Parser;
use ibis_apps::fib::{fib_seq, Fib};
use ibis_bench::split_floor;
use ibis_bench::{report, Figure};
use satin::satin_core::JobKey;
use satin::{Ctx, Job, ResultLookup, Satin, StolenJob};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Triv(u64);
impl Job for Triv {
    type Output = u64;
    fn run(self, _ctx: &mut Ctx) -> u64 {
        black_box(self.0)
    }
}

struct Loop1(u64);
impl Job for Loop1 {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let mut s = 0;
        for i in 0..self.0 {
            let mut f = ctx.frame();
            let a = f.spawn(Triv(i));
            let r = f.sync();
            s += r.get(a);
        }
        s
    }
}

struct Loop2(u64);
impl Job for Loop2 {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let mut s = 0;
        for i in 0..self.0 {
            let mut f = ctx.frame();
            let a = f.spawn(Triv(i));
            let b = f.spawn(Triv(i + 1));
            let r = f.sync();
            s += r.get(a) + r.get(b);
        }
        s
    }
}

fn fib_rayon(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1), || fib_rayon(n - 2));
    a + b
}

fn best<F: FnMut() -> u64>(repeat: usize, mut f: F) -> Duration {
    (0..repeat)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// Satin micro-benchmark: spawn+sync cost and the fib overhead against rayon.
#[derive(Parser, Debug)]
#[command(name = "satin-bench")]
struct Cli {
    /// Iterations of the spawn+sync loops.
    #[arg(long, value_name = "N", default_value_t = 20_000_000)]
    iters: u64,
    /// The fib argument.
    #[arg(long = "fib", value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(0..=i64::from(ibis_apps::fib::MAX_N)))]
    fib: u32,
    /// The fib argument of the redo figures (`satin.redo.fib<N>.*`).
    #[arg(long = "redo-fib", value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(2..=40))]
    redo_fib: u32,
    /// Repetitions (best of for the loops, median for the fib ratios).
    #[arg(long, value_name = "R", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
}

/// Fib as one function: the base case inside the spawning body (see the module doc).
#[derive(Clone, Copy)]
struct FibPlain(u32);
impl Job for FibPlain {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let n = self.0;
        if n < 2 {
            return n as u64;
        }
        let mut f = ctx.frame();
        let a = f.spawn(FibPlain(n - 1));
        let b = f.spawn(FibPlain(n - 2));
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}

/// A result lookup that is active but never holds a result: each offer costs the
/// job's key and a call, then the job runs where it was offered.
struct NeverHits;
impl ResultLookup for NeverHits {
    fn active(&self) -> bool {
        true
    }
    fn lookup(&self, key: JobKey, job: StolenJob) -> Result<(), StolenJob> {
        black_box(key);
        Err(job)
    }
}

/// One worker that runs every root redone with a [`NeverHits`] lookup, offering jobs
/// down to `depth` levels below the root.
fn redoing(depth: usize) -> Satin {
    let s = Satin::builder()
        .workers(1)
        .redo_depth(depth)
        .build()
        .expect("satin");
    s.set_result_lookup(Arc::new(NeverHits));
    s.set_redo_roots(true);
    s
}

/// The `satin.redo.fib<rn>.*` figures (see the module doc): fib(rn) on `satin` (not
/// redone), redone with the default depth, and redone unbounded, alternating within
/// each repetition.
#[inline(never)]
fn redo_figures(satin: &Satin, rn: u32, repeat: usize) -> Vec<Figure> {
    let (redo_default, redo_all) = (redoing(satin::DEFAULT_REDO_DEPTH), redoing(usize::MAX));
    let fib_redo = |s: &Satin| {
        s.run(Fib {
            n: black_box(rn),
            threshold: 0,
        })
    };
    let mut redo_reps: Vec<[f64; 3]> = Vec::with_capacity(repeat);
    for _ in 0..repeat.max(1) {
        redo_reps.push([
            best(1, || fib_redo(satin)).as_secs_f64(),
            best(1, || fib_redo(&redo_default)).as_secs_f64(),
            best(1, || fib_redo(&redo_all)).as_secs_f64(),
        ]);
    }
    let redo_med = |f: &dyn Fn(&[f64; 3]) -> f64| {
        let mut v: Vec<f64> = redo_reps.iter().map(f).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let lookups_per_run = |s: &Satin| {
        s.reset_stats();
        assert_eq!(fib_redo(s), fib_seq(rn));
        s.stats().total.lookups as f64
    };
    let (redo_lookups, redo_all_lookups) =
        (lookups_per_run(&redo_default), lookups_per_run(&redo_all));
    vec![
        Figure {
            name: format!("satin.redo.fib{rn}.normal_ms"),
            value: redo_med(&|r| r[0]) * 1e3,
            unit: "ms",
            what: format!("satin fib({rn}), all spawn, 1 worker, not redone"),
        },
        Figure {
            name: format!("satin.redo.fib{rn}.ms"),
            value: redo_med(&|r| r[1]) * 1e3,
            unit: "ms",
            what: format!(
                "fib({rn}) redone, lookup never hits, redo_depth {}",
                satin::DEFAULT_REDO_DEPTH
            ),
        },
        Figure {
            name: format!("satin.redo.fib{rn}.ratio"),
            value: redo_med(&|r| r[1] / r[0]),
            unit: "x",
            what: "redone (default redo_depth) / not redone".into(),
        },
        Figure {
            name: format!("satin.redo.fib{rn}.lookups"),
            value: redo_lookups,
            unit: "jobs",
            what: "offers to the lookup per redone run (default redo_depth)".into(),
        },
        Figure {
            name: format!("satin.redo.fib{rn}.unbounded_ms"),
            value: redo_med(&|r| r[2]) * 1e3,
            unit: "ms",
            what: format!("fib({rn}) redone, lookup never hits, redo_depth unbounded"),
        },
        Figure {
            name: format!("satin.redo.fib{rn}.unbounded_ratio"),
            value: redo_med(&|r| r[2] / r[0]),
            unit: "x",
            what: "redone (unbounded) / not redone".into(),
        },
        Figure {
            name: format!("satin.redo.fib{rn}.unbounded_lookups"),
            value: redo_all_lookups,
            unit: "jobs",
            what: "offers to the lookup per redone run (unbounded)".into(),
        },
    ]
}

/// The split-deque floor's fib, both children spawned (`--fib` is at most 93, within
/// the floor's [`split_floor::MAX_N`]).
fn floor2(n: u32) -> u64 {
    split_floor::fib_spawn2(n).expect("--fib is within the floor's range")
}

/// The split-deque floor's fib, one child spawned and one called.
fn floor_join(n: u32) -> u64 {
    split_floor::fib_join(n).expect("--fib is within the floor's range")
}

fn main() {
    ipl_tools::init_tracing("warn");
    let Cli {
        iters,
        fib: n,
        redo_fib: rn,
        repeat,
    } = Cli::parse();
    let repeat = usize::try_from(repeat).unwrap_or(usize::MAX);

    let satin = Satin::builder().workers(1).build().expect("satin");
    let queued = Satin::builder()
        .workers(1)
        .inline_depth(usize::MAX)
        .build()
        .expect("satin");
    let stolen = Satin::builder().workers(1).build().expect("satin");
    let _stealer = stolen.external_stealer();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("rayon");

    let t1 = best(repeat, || satin.run(Loop1(iters)));
    let t2 = best(repeat, || satin.run(Loop2(iters)));
    let tj = best(repeat, || {
        pool.install(|| {
            let mut s = 0u64;
            for i in 0..iters {
                let (a, b) = rayon::join(|| black_box(i), || black_box(i + 1));
                s += a + b;
            }
            s
        })
    });
    // The fib runs alternate within each repetition (sequential, Satin three ways,
    // rayon), so that each ratio compares runs made under the same machine state; the
    // figures are the medians of the per-repetition ratios and times.
    let fib_satin = |s: &Satin| {
        s.run(Fib {
            n: black_box(n),
            threshold: 0,
        })
    };
    let mut reps: Vec<[f64; 8]> = Vec::with_capacity(repeat);
    for _ in 0..repeat.max(1) {
        reps.push([
            best(1, || fib_seq(black_box(n))).as_secs_f64(),
            best(1, || fib_satin(&satin)).as_secs_f64(),
            best(1, || fib_satin(&queued)).as_secs_f64(),
            best(1, || fib_satin(&stolen)).as_secs_f64(),
            best(1, || pool.install(|| fib_rayon(black_box(n)))).as_secs_f64(),
            best(1, || satin.run(FibPlain(black_box(n)))).as_secs_f64(),
            best(1, || floor2(black_box(n))).as_secs_f64(),
            best(1, || floor_join(black_box(n))).as_secs_f64(),
        ]);
    }
    let med = |f: &dyn Fn(&[f64; 8]) -> f64| {
        let mut v: Vec<f64> = reps.iter().map(f).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let secs = Duration::from_secs_f64;
    let (ts, tf, tr) = (
        secs(med(&|r| r[0])),
        secs(med(&|r| r[1])),
        secs(med(&|r| r[4])),
    );
    let (lf, lj) = (med(&|r| r[6] / r[0]), med(&|r| r[7] / r[0]));
    let tl = secs(med(&|r| r[6]));
    let (sf, qf, stf, rf, pf) = (
        med(&|r| r[1] / r[0]),
        med(&|r| r[2] / r[0]),
        med(&|r| r[3] / r[0]),
        med(&|r| r[4] / r[0]),
        med(&|r| r[5] / r[0]),
    );
    let redo_figs = redo_figures(&satin, rn, repeat);

    assert_eq!(satin.run(Fib { n, threshold: 0 }), fib_seq(n));
    assert_eq!(satin.run(FibPlain(n)), fib_seq(n));
    assert_eq!(queued.run(Fib { n, threshold: 0 }), fib_seq(n));
    assert_eq!(floor2(n), fib_seq(n));
    assert_eq!(floor_join(n), fib_seq(n));

    let ns = |d: Duration| d.as_secs_f64() * 1e9 / iters as f64;
    let mut figs = vec![
        Figure {
            name: "satin.spawn_sync_ns".into(),
            value: ns(t1),
            unit: "ns",
            what: "satin: frame + 1 spawn + sync (1 worker)".into(),
        },
        Figure {
            name: "satin.spawn2_sync_ns".into(),
            value: ns(t2),
            unit: "ns",
            what: "satin: frame + 2 spawns + sync (join shape)".into(),
        },
        Figure {
            name: "rayon.join_ns".into(),
            value: ns(tj),
            unit: "ns",
            what: "rayon: join of 2 trivial closures (1 thread)".into(),
        },
        Figure {
            name: "ratio.spawn2_sync_vs_join".into(),
            value: ns(t2) / ns(tj),
            unit: "x",
            what: "satin 2-spawn frame / rayon join".into(),
        },
        Figure {
            name: "seq.fib_ms".into(),
            value: ts.as_secs_f64() * 1e3,
            unit: "ms",
            what: format!("sequential fib({n})"),
        },
        Figure {
            name: "satin.fib_ms".into(),
            value: tf.as_secs_f64() * 1e3,
            unit: "ms",
            what: format!("satin fib({n}), all spawn, 1 worker"),
        },
        Figure {
            name: "rayon.fib_ms".into(),
            value: tr.as_secs_f64() * 1e3,
            unit: "ms",
            what: format!("rayon fib({n}), join per call, 1 thread"),
        },
        Figure {
            name: "satin.fib_overhead".into(),
            value: sf,
            unit: "x",
            what: "satin fib / sequential fib".into(),
        },
        Figure {
            name: "satin.fib_overhead_queued".into(),
            value: qf,
            unit: "x",
            what: "satin fib / sequential, inlining off (every spawn queued)".into(),
        },
        Figure {
            name: "satin.fib_overhead_stealer".into(),
            value: stf,
            unit: "x",
            what: "satin fib / sequential, external stealer attached".into(),
        },
        Figure {
            name: "satin.fib_overhead_plain".into(),
            value: pf,
            unit: "x",
            what: "satin fib / sequential, fib as one function (FibPlain)".into(),
        },
        Figure {
            name: "rayon.fib_overhead".into(),
            value: rf,
            unit: "x",
            what: "rayon fib / sequential fib".into(),
        },
        Figure {
            name: "floor.fib_ms".into(),
            value: tl.as_secs_f64() * 1e3,
            unit: "ms",
            what: format!("split-deque floor fib({n}), 2 spawns per call"),
        },
        Figure {
            name: "floor.fib_overhead".into(),
            value: lf,
            unit: "x",
            what: "split-deque floor fib (2 spawns) / sequential".into(),
        },
        Figure {
            name: "floor.fib_join_overhead".into(),
            value: lj,
            unit: "x",
            what: "split-deque floor fib (spawn + call) / sequential".into(),
        },
        Figure {
            name: "ratio.fib_queued_vs_floor".into(),
            value: qf / lf,
            unit: "x",
            what: "satin inlining off / split-deque floor (2 spawns)".into(),
        },
        Figure {
            name: "ratio.fib_overhead_vs_rayon".into(),
            value: sf / rf,
            unit: "x",
            what: "satin fib overhead / rayon fib overhead".into(),
        },
    ];
    figs.extend(redo_figs);
    report(
        &format!("satin-bench: 1 worker, {iters} iterations, fib({n}), best of {repeat}"),
        &figs,
    );
}
