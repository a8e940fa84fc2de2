//! All-pairs shortest paths: Floyd-Warshall with rows distributed over the members of a
//! pool (thesis 2.7.2). In iteration k the owner of row k broadcasts it; here the
//! broadcast is a write to a Satin-style shared object (`ibis_repmi::SharedObject`) and
//! every member waits for row k with a guard.
//!
//! `asp [N] [--members P] [--seed S] [--density D] [--seq] [--check]`
//! (defaults N = 400, P = 4, S = 1, D = 30 percent of the edges present)
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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ibis_apps::members::{in_process, rank_of, under_ipl_run, Res};
use ibis_repmi::{declare, Options, Replicated, SharedObject};
use ipl::{Ibis, IbisBuilder, IbisCapabilities as C};
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

/// splitmix64: a small deterministic generator, so every member builds the same graph.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
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

/// The member's Ibis builder: elections for the shared object, its port types.
fn builder() -> IbisBuilder {
    declare(Ibis::builder().capabilities(C::MEMBERSHIP | C::ELECTIONS))
}

fn parse() -> Res<(Params, usize, bool)> {
    let mut p = Params {
        n: 400,
        seed: 1,
        density: 30,
        check: false,
    };
    let mut members = 4;
    let mut seq_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| -> Res<u64> {
            let v = args.next().ok_or(format!("{name} needs a value"))?;
            Ok(v.parse()
                .map_err(|_| format!("{name}: {v:?} is not a number"))?)
        };
        match a.as_str() {
            "--members" => members = val("--members")? as usize,
            "--seed" => p.seed = val("--seed")?,
            "--density" => p.density = val("--density")?.min(100),
            "--check" => p.check = true,
            "--seq" => seq_only = true,
            "-h" | "--help" => {
                println!("asp [N] [--members P] [--seed S] [--density D] [--seq] [--check]");
                std::process::exit(0);
            }
            n => p.n = n.parse().map_err(|_| format!("unknown argument {n:?}"))?,
        }
    }
    if p.n == 0 || members == 0 {
        return Err("N and P must be positive".into());
    }
    Ok((p, members, seq_only))
}

fn main() {
    ipl_tools::init_tracing("warn");
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("asp: {e}");
            std::process::exit(1);
        }
    }
}

fn report(p: &Params, mode: &str, members: usize, secs: f64, sum: (u64, u64)) {
    println!(
        "asp n={} seed={} density={}% {mode} members={members}: checksum {} unreachable {} time {secs:.3} s",
        p.n, p.seed, p.density, sum.0, sum.1
    );
    println!("asp_time {secs:.6} s");
    println!("asp_checksum {} sum", sum.0);
}

fn run() -> Res<bool> {
    let (p, members, seq_only) = parse()?;
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
        let ibis = builder().from_env()?.build()?;
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
                println!("check: {}", if ok { "ok" } else { "FAILED: rows differ" });
            }
        }
        ibis.end()?;
        return Ok(ok);
    }
    // In this process: `members` Ibis instances on an embedded registry.
    let start = Instant::now();
    let mut outs = in_process("asp", members, builder, |ibis, rank, size| {
        member(ibis, rank, size, &p, seq.as_deref())
    })?;
    let wall = start.elapsed().as_secs_f64();
    outs.sort_by_key(|o| o.rank);
    let secs = outs.iter().map(|o| o.secs).fold(0.0, f64::max);
    let all: Vec<&Vec<i32>> = outs.iter().flat_map(|o| o.rows.iter()).collect();
    let sum = checksum(all.iter().copied());
    report(&p, "parallel (in-process)", members, secs, sum);
    println!("(wall time including joining: {wall:.3} s)");
    if sum != (outs[0].totals.0, outs[0].totals.1) {
        println!(
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
                        println!("row {} differs from the sequential answer", o.lo + i);
                    }
                    bad += 1;
                }
            }
        }
        if bad > 0 {
            println!("check: FAILED: {bad} rows differ");
            return Ok(false);
        }
        println!("check: ok (parallel == sequential, all {} rows)", p.n);
    }
    Ok(true)
}
