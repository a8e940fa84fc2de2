//! All-pairs shortest paths: Floyd-Warshall with rows distributed over the members of a
//! pool (thesis 2.7.2). In iteration k the owner of row k broadcasts it; here the
//! broadcast is a write to a Satin-style shared object (`ibis_repmi::SharedObject`) and
//! every member waits for row k with a guard.
//!
//! `asp [N] [--members P] [--seed S] [--density D] [--seq] [--check]`
//! (defaults N = 400, P = 4, S = 1, D = 30 percent of the edges present; `--help`)
//!
//! Runs:
//! - by default, in this process: P Ibis instances (threads) in one pool with an
//!   embedded registry, over the best in-process transport — a single command;
//! - under `ipl-run -n P -- asp N ...` (when `IPL_POOL` is set): each process is one
//!   member; member 0 prints the result;
//! - `--seq`: the sequential algorithm only.
//!
//! Prints the checksum of the distance matrix (sum of the finite distances and the
//! number of unreachable pairs) and the time. `--check` also runs the sequential
//! version and fails (exit 1) if any distance differs.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use ibis_apps::members::{
    exit_code, in_process, mix, positive, rank_of, replicated_builder, under_ipl_run, Res,
};
use ibis_repmi::{Options, Replicated, SharedObject};
use ipl::Ibis;
use serde::{Deserialize, Serialize};

/// "No path".
const INF: i32 = i32::MAX / 4;
const PATIENCE: Duration = Duration::from_secs(300);

#[derive(Clone, Copy)]
struct Params {
    n: usize,
    seed: u64,
    density: u64,
    check: bool,
}

/// Row `i` of the input graph: weights 1..=100 on a `density` percent of the edges.
fn input_row(p: &Params, i: usize) -> Vec<i32> {
    (0..p.n)
        .map(|j| {
            if i == j {
                return 0;
            }
            let r = mix(p.seed ^ mix((i * p.n + j) as u64));
            if r % 100 < p.density {
                1 + ((r >> 8) % 100) as i32
            } else {
                INF
            }
        })
        .collect()
}

/// Relaxes `row` through the pivot row `k`.
fn relax(row: &mut [i32], k: usize, pivot: &[i32]) {
    let dik = row[k];
    if dik >= INF {
        return;
    }
    for (d, &pk) in row.iter_mut().zip(pivot) {
        let v = dik + pk;
        if v < *d {
            *d = v;
        }
    }
}

fn sequential(p: &Params) -> Vec<Vec<i32>> {
    let mut m: Vec<Vec<i32>> = (0..p.n).map(|i| input_row(p, i)).collect();
    for k in 0..p.n {
        let pivot = m[k].clone();
        for row in m.iter_mut() {
            relax(row, k, &pivot);
        }
    }
    m
}

/// (sum of finite distances, unreachable pairs) of some rows.
fn checksum<'a>(rows: impl IntoIterator<Item = &'a Vec<i32>>) -> (u64, u64) {
    let (mut sum, mut inf) = (0u64, 0u64);
    for r in rows {
        for &d in r {
            if d >= INF {
                inf += 1;
            } else {
                sum += d as u64;
            }
        }
    }
    (sum, inf)
}

/// The shared object: pivot rows as they are published, and each member's result.
#[derive(Default, Serialize, Deserialize)]
struct Board {
    rows: BTreeMap<u32, Vec<i32>>,
    /// rank -> (sum, unreachable, rows that differ from the sequential answer)
    results: BTreeMap<u32, (u64, u64, u64)>,
}

#[derive(Serialize, Deserialize)]
enum BoardOp {
    Publish(u32, Vec<i32>),
    Result {
        rank: u32,
        sum: u64,
        inf: u64,
        wrong: u64,
    },
}

impl Replicated for Board {
    type Op = BoardOp;
    type Output = ();
    fn apply(&mut self, op: &BoardOp) {
        match op {
            BoardOp::Publish(k, row) => {
                self.rows.insert(*k, row.clone());
            }
            BoardOp::Result {
                rank,
                sum,
                inf,
                wrong,
            } => {
                self.results.insert(*rank, (*sum, *inf, *wrong));
            }
        }
    }
}

/// The rows of rank `r` of `size`: a block distribution.
fn block(n: usize, r: usize, size: usize) -> std::ops::Range<usize> {
    r * n / size..(r + 1) * n / size
}

struct MemberOut {
    rank: usize,
    lo: usize,
    rows: Vec<Vec<i32>>,
    /// (sum, unreachable, wrong rows) of all members, when the board is complete.
    totals: (u64, u64, u64),
    secs: f64,
}

fn member(
    ibis: &Ibis,
    rank: usize,
    size: usize,
    p: &Params,
    seq: Option<&[Vec<i32>]>,
) -> Res<MemberOut> {
    let opts = Options::default().timeout(Duration::from_secs(120));
    let board = SharedObject::join_with(ibis, "asp", Board::default, opts)?;
    let mine = block(p.n, rank, size);
    let mut rows: Vec<Vec<i32>> = mine.clone().map(|i| input_row(p, i)).collect();
    let start = Instant::now();
    let mut pivot = vec![0; p.n];
    for k in 0..p.n {
        if mine.contains(&k) {
            let row = rows[k - mine.start].clone();
            board.write(BoardOp::Publish(k as u32, row))?;
        }
        board.guard(|b| b.rows.contains_key(&(k as u32)), PATIENCE)?;
        board.read(|b| {
            if let Some(r) = b.rows.get(&(k as u32)) {
                pivot.copy_from_slice(r);
            }
        });
        for row in rows.iter_mut() {
            relax(row, k, &pivot);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let (sum, inf) = checksum(&rows);
    let wrong = match seq {
        Some(s) => rows
            .iter()
            .zip(&s[mine.clone()])
            .filter(|(a, b)| a != b)
            .count() as u64,
        None => 0,
    };
    board.write(BoardOp::Result {
        rank: rank as u32,
        sum,
        inf,
        wrong,
    })?;
    board.guard(|b| b.results.len() == size, PATIENCE)?;
    let totals = board.read(|b| {
        b.results
            .values()
            .fold((0, 0, 0), |t, r| (t.0 + r.0, t.1 + r.1, t.2 + r.2))
    });
    Ok(MemberOut {
        rank,
        lo: mine.start,
        rows,
        totals,
        secs,
    })
}

/// All-pairs shortest paths (Floyd-Warshall) with the rows spread over the members of a
/// pool; the pivot rows travel through a shared object.
#[derive(Parser)]
#[command(name = "asp")]
struct Args {
    /// Vertices of the graph.
    #[arg(default_value_t = 400, value_parser = positive)]
    n: usize,
    /// Members, as threads of this process (under ipl-run the pool is the members).
    #[arg(long, default_value_t = 4, value_parser = positive)]
    members: usize,
    /// Seed of the random graph.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Percent of the edges present (above 100 counts as 100).
    #[arg(long, default_value_t = 30)]
    density: u64,
    /// Run the sequential algorithm only.
    #[arg(long)]
    seq: bool,
    /// Also run the sequential algorithm and fail unless every distance agrees.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    ipl_tools::init_tracing("warn");
    let args = Args::parse();
    exit_code("asp", run(args))
}

fn report(p: &Params, mode: &str, members: usize, secs: f64, sum: (u64, u64)) {
    ibis_apps::out!(
        "asp n={} seed={} density={}% {mode} members={members}: checksum {} unreachable {} time {secs:.3} s",
        p.n, p.seed, p.density, sum.0, sum.1
    );
    ibis_apps::out!("asp_time {secs:.6} s");
    ibis_apps::out!("asp_checksum {} sum", sum.0);
}

fn run(args: Args) -> Res<bool> {
    let p = Params {
        n: args.n,
        seed: args.seed,
        density: args.density.min(100),
        check: args.check,
    };
    let (members, seq_only) = (args.members, args.seq);
    if seq_only {
        let t = Instant::now();
        let m = sequential(&p);
        report(&p, "sequential", 1, t.elapsed().as_secs_f64(), checksum(&m));
        return Ok(true);
    }
    let seq = if p.check {
        let t = Instant::now();
        let m = sequential(&p);
        report(&p, "sequential", 1, t.elapsed().as_secs_f64(), checksum(&m));
        Some(m)
    } else {
        None
    };
    if under_ipl_run() {
        // Under ipl-run: this process is one member.
        let ibis = replicated_builder().from_env()?.build()?;
        let (rank, size) = rank_of(&ibis)?;
        let out = member(&ibis, rank, size, &p, seq.as_deref())?;
        let ok = out.totals.2 == 0;
        if rank == 0 {
            report(
                &p,
                "parallel (processes)",
                size,
                out.secs,
                (out.totals.0, out.totals.1),
            );
            if p.check {
                ibis_apps::out!("check: {}", if ok { "ok" } else { "FAILED: rows differ" });
            }
        }
        ibis.end()?;
        return Ok(ok);
    }
    // In this process: `members` Ibis instances on an embedded registry.
    let start = Instant::now();
    let mut outs = in_process("asp", members, replicated_builder, |ibis, rank, size| {
        member(ibis, rank, size, &p, seq.as_deref())
    })?;
    let wall = start.elapsed().as_secs_f64();
    outs.sort_by_key(|o| o.rank);
    let secs = outs.iter().map(|o| o.secs).fold(0.0, f64::max);
    let all: Vec<&Vec<i32>> = outs.iter().flat_map(|o| o.rows.iter()).collect();
    let sum = checksum(all.iter().copied());
    report(&p, "parallel (in-process)", members, secs, sum);
    ibis_apps::out!("(wall time including joining: {wall:.3} s)");
    if sum != (outs[0].totals.0, outs[0].totals.1) {
        ibis_apps::out!(
            "check: FAILED: the shared board's totals {:?} differ from the rows' {sum:?}",
            outs[0].totals
        );
        return Ok(false);
    }
    if let Some(s) = seq.as_ref() {
        let mut bad = 0;
        for o in &outs {
            for (i, row) in o.rows.iter().enumerate() {
                if *row != s[o.lo + i] {
                    if bad < 5 {
                        ibis_apps::out!("row {} differs from the sequential answer", o.lo + i);
                    }
                    bad += 1;
                }
            }
        }
        if bad > 0 {
            ibis_apps::out!("check: FAILED: {bad} rows differ");
            return Ok(false);
        }
        ibis_apps::out!("check: ok (parallel == sequential, all {} rows)", p.n);
    }
    Ok(true)
}
