//! The command-line driver the Satin application binaries share (`fib`, `nqueens`, ...):
//! one process, or a member of a pool when started by `ipl-run` ([`satin::launched`]).
//!
//! Every application takes its own arguments and the options of [`Options`]:
//! `ARGS... [--workers N] [--seq] [--check] [--stats] [--policy P] [--report FILE]`.
//! `--seq` runs the sequential version, `--check` compares the Satin result with the
//! sequential one (exit status 1 on a mismatch), `--stats` prints the statistics
//! (always printed on a pool). On a pool only the master prints.
//!
//! The command lines are parsed with clap: `--help` prints the usage, and a bad
//! argument is an error message and exit status 2. Every argument has a range the
//! program can run (`--help` states it): a result that fits its integer type, a
//! recursion that fits a thread's stack, an allocation the machine can hold, a
//! tolerance the search reaches, and at most [`max_workers`] worker threads.

use crate::{
    barnes, fib, ida, integrate, knapsack, matmul, noverk, nqueens, othello, primes, raytrace, sat,
    scp, setcover, sphereflake, tsp, tsplib, uts,
};
use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use satin::satin_core::Policy;
use satin::{Satin, SatinBuilder, SatinError};
use std::fmt::{Debug, Display};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The options every application takes.
#[derive(Args, Debug, Clone, Default)]
pub struct Options {
    /// Worker threads per process (default: the number of cores; at most 64 per core,
    /// at least 64 in all: more threads only contend for the cores, and starting and
    /// ending thousands of spinning thieves takes longer than any run).
    #[arg(long, value_name = "N", value_parser = parse_workers)]
    pub workers: Option<usize>,
    /// Run the sequential version only.
    #[arg(long)]
    pub seq: bool,
    /// Compare the Satin result with the sequential one (exit status 1 on a mismatch).
    #[arg(long)]
    pub check: bool,
    /// Print the statistics (always printed on a pool).
    #[arg(long)]
    pub stats: bool,
    /// The load-balancing policy on a pool: rs, crs, acrs or cmrs:K (overrides
    /// `SATIN_POLICY`).
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// The process that prints the result also writes a summary to FILE (`key = value`
    /// lines: `result`, `check`, `processes`, `remote_steal_successes`, `jobs_given`,
    /// `seconds`, `spawns`; on a pool also `master` (the member that printed it),
    /// `aborted` and `inlets` (jobs aborted, inlets run),
    /// `restarted` (it became the master after the first one died), and crash
    /// recovery's counters: `jobs_redone`, `orphans_kept`, `results_announced`,
    /// `lookups`, `results_reused`, `lookup_misses`, `lookups_awaited`, `own_orphan_lookups`, `bytes_fetched`, `restored`,
    /// `elections`, `redo_jobs`, `work_lost_ms`, `recovery_ms`, `restart_ms`;
    /// adaptivity's `adapt_added`, `adapt_removed`; `bytes_sent` (all members'
    /// messages), the shared objects' `shared_writes`, `shared_bytes`, `guard_waits`,
    /// `guard_fetches`; and `executed_by`, the jobs
    /// stolen from others that each member ran: `member-0:12 member-1:30`), for
    /// tests and scripts.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

/// The largest `--workers`: 64 per core of this machine, at least 64.
pub fn max_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_mul(64).max(64)
}

fn parse_workers(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    let max = max_workers();
    if (1..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{n} is not in 1..={max} (at most 64 worker threads per core of this machine)"
        ))
    }
}

/// A finite number (not NaN, not infinite).
fn finite(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x.abs() <= integrate::MAX_BOUND {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a finite number in -{m:e}..={m:e}",
            m = integrate::MAX_BOUND
        ))
    }
}

/// A tolerance the adaptive search can reach.
fn tolerance(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x >= integrate::MIN_EPS {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a finite tolerance >= {:e}",
            integrate::MIN_EPS
        ))
    }
}

fn parse_policy(s: &str) -> Result<Policy, SatinError> {
    satin::dist::parse_policy(s)
}

impl Options {
    fn builder(&self) -> SatinBuilder {
        let mut b = Satin::builder();
        if let Some(w) = self.workers {
            b = b.workers(w);
        }
        if let Some(p) = self.policy {
            b = b.policy(p);
        }
        b
    }
}

/// An application's command line: its own arguments `A` and the common [`Options`].
#[derive(Parser, Debug, Clone)]
pub struct Cli<A: Args> {
    /// The application's arguments.
    #[command(flatten)]
    pub app: A,
    /// The options every application takes.
    #[command(flatten)]
    pub options: Options,
}

/// A Satin application: its arguments (a clap [`Args`] struct) and how to run it.
pub trait Application: Args {
    /// The program name.
    const NAME: &'static str;
    /// One line about the application (the `--help` text starts with it).
    const ABOUT: &'static str;
    /// Runs the application with the common options (see [`drive`]).
    fn run(&self, options: &Options) -> Result<(), String>;
    /// Checks what the value parsers of single arguments cannot (how arguments relate);
    /// an error is a usage error (exit status 2).
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

/// `fib N [--threshold T]`: Fibonacci with every call spawning.
#[derive(Args, Debug, Clone)]
pub struct FibArgs {
    /// The argument, 0..=93 (fib(93) is the largest Fibonacci number in a u64).
    #[arg(default_value_t = 37, value_parser = clap::value_parser!(u32).range(0..=fib::MAX_N as i64))]
    pub n: u32,
    /// Calls below this N run sequentially (0: every call spawns).
    #[arg(long, value_name = "T", default_value_t = 0)]
    pub threshold: u32,
}

impl Application for FibArgs {
    const NAME: &'static str = "fib";
    const ABOUT: &'static str =
        "Fibonacci with every call spawning (or sequential below --threshold)";
    fn run(&self, o: &Options) -> Result<(), String> {
        let (n, threshold) = (self.n, self.threshold);
        drive(
            o,
            &format!("fib({n})"),
            || fib::fib_seq(n),
            |s| s.run(fib::Fib { n, threshold }),
        )
    }
}

/// `nqueens N`: the number of ways to place N queens on an N x N board.
#[derive(Args, Debug, Clone)]
pub struct NQueensArgs {
    /// The board size, 1..=32 (the board holds 32 rows).
    #[arg(default_value_t = 15, value_parser = RangedU64ValueParser::<usize>::new().range(1..=nqueens::MAX_N as u64))]
    pub n: usize,
}

impl Application for NQueensArgs {
    const NAME: &'static str = "nqueens";
    const ABOUT: &'static str = "The number of solutions of the N-queens problem";
    fn run(&self, o: &Options) -> Result<(), String> {
        let n = self.n;
        drive(
            o,
            &format!("nqueens({n})"),
            || nqueens::nqueens_seq(n),
            |s| s.run(nqueens::NQueens::new(n)),
        )
    }
}

/// `integrate A B EPS`: adaptive integration of 0.1 x sin(x) over [A, B].
#[derive(Args, Debug, Clone)]
pub struct IntegrateArgs {
    /// The lower bound, a finite number with |A| <= 1e6.
    #[arg(default_value_t = 0.0, allow_negative_numbers = true, value_parser = finite)]
    pub a: f64,
    /// The upper bound, a finite number with A <= B <= 1e6.
    #[arg(default_value_t = 100000.0, allow_negative_numbers = true, value_parser = finite)]
    pub b: f64,
    /// The tolerance, at least 1e-12 (smaller is below the rounding error of the
    /// sums: the bisection would never end).
    #[arg(default_value_t = 1e-6, allow_negative_numbers = true, value_parser = tolerance)]
    pub eps: f64,
}

impl Application for IntegrateArgs {
    const NAME: &'static str = "integrate";
    const ABOUT: &'static str =
        "Adaptive integration of f(x) = 0.1 x sin(x) over [A, B] to tolerance EPS \
         (--check compares the bits of the two results)";
    fn run(&self, o: &Options) -> Result<(), String> {
        let (a, b, eps) = (self.a, self.b, self.eps);
        drive(
            o,
            &format!("integrate({a}, {b}, {eps})"),
            || Bits(integrate::integrate(a, b, eps)),
            |s| Bits(s.run(integrate::Integrate::new(a, b, eps))),
        )
    }
    fn validate(&self) -> Result<(), String> {
        if self.a <= self.b {
            Ok(())
        } else {
            Err(format!(
                "the bounds are reversed: A = {} is greater than B = {} (A <= B)",
                self.a, self.b
            ))
        }
    }
}

/// `knapsack N`: the best value of a 0/1 knapsack of N items.
#[derive(Args, Debug, Clone)]
pub struct KnapsackArgs {
    /// The number of items, 0..=64 (the search is exhaustive, one recursion level per
    /// item: 2^64 subsets is beyond any machine).
    #[arg(default_value_t = 32, value_parser = RangedU64ValueParser::<usize>::new().range(0..=knapsack::MAX_ITEMS as u64))]
    pub n: usize,
}

impl Application for KnapsackArgs {
    const NAME: &'static str = "knapsack";
    const ABOUT: &'static str = "The best value of a 0/1 knapsack of N generated items";
    fn run(&self, o: &Options) -> Result<(), String> {
        let n = self.n;
        let (items, cap) = knapsack::instance(n);
        let shared = Arc::new(items.clone());
        drive(
            o,
            &format!("knapsack({n} items, capacity {cap})"),
            || knapsack::knapsack_seq(&items, cap),
            |s| {
                s.run(knapsack::Knapsack {
                    items: shared.clone(),
                    i: 0,
                    cap,
                })
            },
        )
    }
}

/// `noverk N K`: the binomial coefficient by Pascal's recursion.
#[derive(Args, Debug, Clone)]
pub struct NOverKArgs {
    /// N, 0..=67 (C(67, 33) is the largest middle coefficient in a u64).
    #[arg(default_value_t = 33, value_parser = clap::value_parser!(u32).range(0..=noverk::MAX_N as i64))]
    pub n: u32,
    /// K, 0..=N.
    #[arg(default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=noverk::MAX_N as i64))]
    pub k: u32,
}

impl Application for NOverKArgs {
    const NAME: &'static str = "noverk";
    const ABOUT: &'static str = "The binomial coefficient N over K by Pascal's recursion";
    fn run(&self, o: &Options) -> Result<(), String> {
        let (n, k) = (self.n, self.k);
        drive(
            o,
            &format!("noverk({n}, {k})"),
            || noverk::noverk_seq(n, k),
            |s| s.run(noverk::NOverK { n, k }),
        )
    }
    fn validate(&self) -> Result<(), String> {
        if self.k <= self.n {
            Ok(())
        } else {
            Err(format!(
                "K = {} is greater than N = {} (0 <= K <= N)",
                self.k, self.n
            ))
        }
    }
}

/// `primes N`: the prime factors of N.
#[derive(Args, Debug, Clone)]
pub struct PrimesArgs {
    /// The number to factorize.
    #[arg(default_value_t = 1_234_567_890)]
    pub n: u64,
}

impl Application for PrimesArgs {
    const NAME: &'static str = "primes";
    const ABOUT: &'static str = "The prime factors of N by divide-and-conquer trial division";
    fn run(&self, o: &Options) -> Result<(), String> {
        let n = self.n;
        drive(
            o,
            &format!("primes({n})"),
            || primes::primes_seq(n),
            |s| s.run(primes::Primes::new(n)),
        )
    }
}

/// `matmul N`: the product of two N x N matrices (N = 64 * 2^k).
#[derive(Args, Debug, Clone)]
pub struct MatMulArgs {
    /// The matrix size, 64 * 2^k up to 4096 (three matrices of 128 MiB).
    #[arg(default_value_t = 1024, value_parser = matrix_size)]
    pub n: usize,
}

fn matrix_size(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if (64..=matmul::MAX_N).contains(&n) && n.is_multiple_of(64) && (n / 64).is_power_of_two() {
        Ok(n)
    } else {
        Err(format!("{n} is not 64 * 2^k in 64..={}", matmul::MAX_N))
    }
}

impl Application for MatMulArgs {
    const NAME: &'static str = "matmul";
    const ABOUT: &'static str =
        "The product of two random N x N matrices by recursive blocks; prints the sum of \
         its elements (--check compares its bits)";
    fn run(&self, o: &Options) -> Result<(), String> {
        let n = self.n;
        let a = Arc::new(matmul::Mat::random(n, 1));
        let b = Arc::new(matmul::Mat::random(n, 2));
        let sum = |d: &[f64]| Bits(d.iter().sum::<f64>());
        drive(
            o,
            &format!("matmul({n}x{n}) checksum"),
            || sum(&matmul::matmul_seq(&a, &b).d),
            |s| sum(&s.run(matmul::MatMul::new(a.clone(), b.clone()))),
        )
    }
}

/// `uts -t 1 -a 3 -d 10 -b 4 -r 19`: the Unbalanced Tree Search benchmark, with the
/// reference program's options and defaults.
#[derive(Args, Debug, Clone)]
pub struct UtsArgs {
    /// The tree type: 0 binomial, 1 geometric, 2 hybrid, 3 balanced.
    #[arg(short = 't', default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub tree: u8,
    /// The geometric shape: 0 linear, 1 exponential decrease, 2 cyclic, 3 fixed.
    #[arg(short = 'a', default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub shape: u8,
    /// The depth limit of geometric and balanced trees, 1..=100000.
    #[arg(short = 'd', default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub depth: u32,
    /// The branching factor: the root's (binomial), the mean (geometric), every
    /// node's (balanced); 0..=100000.
    #[arg(short = 'b', default_value_t = 4.0, value_parser = branching)]
    pub b: f64,
    /// The root's seed.
    #[arg(short = 'r', default_value_t = 0, allow_negative_numbers = true)]
    pub seed: i32,
    /// A binomial node's number of children when it has any, 0..=100.
    #[arg(short = 'm', default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=uts::MAX_CHILDREN as i64))]
    pub m: u32,
    /// A binomial node's probability of having children, 0..=1.
    #[arg(short = 'q', default_value_t = 15.0 / 64.0, value_parser = probability)]
    pub q: f64,
    /// The hybrid tree's switch from geometric to binomial, as a fraction of the depth
    /// limit, 0..=1.
    #[arg(short = 'f', default_value_t = 0.5, value_parser = probability)]
    pub shift: f64,
    /// SHA-1 evaluations per child (extra work per node), 1..=1000.
    #[arg(short = 'g', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub granularity: u32,
    /// Nodes above this height spawn a job per child; deeper subtrees are walked
    /// sequentially (0..=1000: each level is a nested frame on a worker's stack).
    #[arg(long, value_name = "H", default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub spawn_depth: u32,
    /// Below the spawn depth a job walks C nodes at a time and after each C the older
    /// half of the nodes left becomes a job of its own (0: a job walks its whole
    /// subtree), 0 or 16..=10^12 (each split is a nested frame on a worker's stack: at
    /// least 16 nodes per split keeps a thousands of levels deep binomial tree within
    /// it).
    #[arg(long, value_name = "C", default_value_t = uts::DEFAULT_CHUNK, value_parser = chunk)]
    pub chunk: u64,
}

fn chunk(s: &str) -> Result<u64, String> {
    let x: u64 = s.parse().map_err(|e| format!("{e}"))?;
    if x == 0 || (16..=1_000_000_000_000).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{s} is not 0 or in 16..=1000000000000"))
    }
}

fn branching(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=100_000.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{s} is not a branching factor in 0..=100000"))
    }
}

fn probability(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{s} is not in 0..=1"))
    }
}

impl UtsArgs {
    /// The tree's parameters.
    pub fn params(&self) -> uts::Params {
        uts::Params {
            tree: uts::TreeType::from_number(self.tree).unwrap_or(uts::TreeType::Geometric),
            shape: uts::Shape::from_number(self.shape).unwrap_or(uts::Shape::Linear),
            b0: self.b,
            depth: self.depth,
            q: self.q,
            m: self.m,
            shift: self.shift,
            seed: self.seed,
            granularity: self.granularity,
        }
    }
}

impl Application for UtsArgs {
    const NAME: &'static str = "uts";
    const ABOUT: &'static str =
        "The Unbalanced Tree Search benchmark: the size, depth and leaves of a random \
         tree (the reference program's options: uts -t 1 -a 3 -d 10 -b 4 -r 19)";
    fn run(&self, o: &Options) -> Result<(), String> {
        let p = self.params();
        let (spawn_depth, chunk) = (self.spawn_depth, self.chunk);
        drive(
            o,
            &format!(
                "uts(-t {} -a {} -d {} -b {} -r {} -q {} -m {} -f {} -g {})",
                self.tree,
                self.shape,
                self.depth,
                self.b,
                self.seed,
                self.q,
                self.m,
                self.shift,
                self.granularity
            ),
            || uts::uts_seq(&p),
            |s| s.run(uts::Uts::new(p, spawn_depth).with_chunk(chunk)),
        )
    }
}

/// `sat FILE.cnf` or `sat --random VARS CLAUSES`: is a CNF formula satisfiable (DPLL,
/// both branches searched at once, the loser aborted)?
#[derive(Args, Debug, Clone)]
pub struct SatArgs {
    /// A DIMACS CNF file (`p cnf VARIABLES CLAUSES`, clauses ended by 0).
    #[arg(required_unless_present = "random", conflicts_with = "random")]
    pub file: Option<PathBuf>,
    /// A uniform random 3-SAT formula instead: VARS (3..=100000) and CLAUSES
    /// (1..=1000000); about 4.26 clauses per variable are the hardest.
    #[arg(long, num_args = 2, value_names = ["VARS", "CLAUSES"], value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub random: Option<Vec<usize>>,
    /// The random formula's seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Branches with fewer decisions spawn both children, 0..=64.
    #[arg(long, value_name = "D", default_value_t = 12, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub spawn_depth: u32,
    /// A branch that finds a model does not abort its sibling (for comparison: the
    /// search then visits every node of the spawned branches).
    #[arg(long)]
    pub no_abort: bool,
}

impl SatArgs {
    /// The formula: read from the file, or generated.
    pub fn formula(&self) -> Result<sat::Cnf, String> {
        match (&self.file, &self.random) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                sat::Cnf::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
            }
            (None, Some(r)) => Ok(sat::random_3sat(r[0], r[1], self.seed)),
            (None, None) => Err("a FILE or --random VARS CLAUSES is needed".into()),
        }
    }
}

impl Application for SatArgs {
    const NAME: &'static str = "sat";
    const ABOUT: &'static str = "Is a CNF formula (DIMACS) satisfiable? DPLL with both \
         branches searched at once and the loser aborted";
    fn validate(&self) -> Result<(), String> {
        match &self.random {
            Some(r) if !(3..=100_000).contains(&r[0]) => {
                Err(format!("--random: {} variables is not in 3..=100000", r[0]))
            }
            _ => Ok(()),
        }
    }
    fn run(&self, o: &Options) -> Result<(), String> {
        let cnf = self.formula()?;
        let what = format!(
            "sat({} variables, {} clauses{})",
            cnf.vars,
            cnf.clauses.len(),
            if self.no_abort { ", no abort" } else { "" }
        );
        let key = sat::set_formula(cnf.clone());
        let (depth, abort) = (self.spawn_depth, !self.no_abort);
        drive(
            o,
            &what,
            || sat::sat_seq(&cnf),
            |s| sat::sat_satin(s, key, depth, abort),
        )
    }
}

/// `ida FILE`: IDA* on the 15-puzzle instances of FILE.
#[derive(Args, Debug, Clone)]
pub struct IdaArgs {
    /// The instances: one per line, 16 tiles 0..=15 row by row (0 the blank, the goal
    /// 0 1 2 ... 15), optionally after the instance's number; `#` starts a comment
    /// line.
    pub file: PathBuf,
    /// Nodes fewer than H moves from the start spawn a job per child; deeper subtrees
    /// are searched sequentially (0..=80: an optimal solution is at most 80 moves).
    #[arg(long, value_name = "H", default_value_t = ida::DEFAULT_SPAWN_DEPTH, value_parser = clap::value_parser!(u8).range(0..=ida::MAX_MOVES as i64))]
    pub spawn_depth: u8,
}

/// The per-instance results of `ida`, one line each (the result `drive` prints and
/// checks is the list).
fn print_solved(solved: &[ida::Solved]) {
    for s in solved {
        out!("{s}");
    }
}

impl Application for IdaArgs {
    const NAME: &'static str = "ida";
    const ABOUT: &'static str =
        "IDA* on the 15-puzzle with the Manhattan distance: for every instance of FILE the \
         optimal number of moves, the nodes expanded and the number of optimal solutions";
    fn run(&self, o: &Options) -> Result<(), String> {
        let puzzles = ida::read_puzzles(&self.file)?;
        let spawn_depth = self.spawn_depth;
        let root = ida::Ida {
            puzzles: puzzles.clone(),
            spawn_depth,
        };
        let seq_only = o.seq;
        drive(
            o,
            &format!("ida({}, {} instances)", self.file.display(), puzzles.len()),
            || {
                let r = ida::ida_seq(&puzzles);
                if seq_only {
                    print_solved(&r);
                }
                r
            },
            |s| {
                let r = s.run(root.clone());
                print_solved(&r);
                r
            },
        )
    }
}

/// `tsp FILE.tsp`: the shortest tour of a symmetric TSPLIB instance by branch and
/// bound.
#[derive(Args, Debug, Clone)]
pub struct TspArgs {
    /// The instance: a TSPLIB file of TYPE TSP (EUC_2D, EUC_3D, CEIL_2D, MAN_2D, MAN_3D,
    /// MAX_2D, MAX_3D, ATT, GEO or EXPLICIT in any matrix layout) with at most 64 cities.
    /// On a pool every process reads it: give a path valid on every host.
    pub file: PathBuf,
    /// Paths of fewer cities than this spawn a job per next city; longer ones are
    /// searched sequentially (1..=64).
    #[arg(long, value_name = "D", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=tsp::MAX_CITIES as i64))]
    pub spawn_depth: u32,
}

/// Reads and checks a TSPLIB file: the problem of the branch and bound and its name.
pub fn read_tsp(path: &std::path::Path) -> Result<(tsp::Problem, String), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let inst =
        tsplib::Instance::parse_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let problem = tsp::Problem::new(&inst).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = if inst.name.is_empty() {
        path.display().to_string()
    } else {
        inst.name.clone()
    };
    Ok((problem, name))
}

/// The answer of `tsp`: the optimal tour, or why the Satin run has none.
pub struct Solved(pub Result<tsp::Tour, String>);

impl PartialEq for Solved {
    /// Equal lengths (two optimal tours are equal), see [`tsp::Tour`].
    fn eq(&self, o: &Solved) -> bool {
        matches!((&self.0, &o.0), (Ok(a), Ok(b)) if a == b)
    }
}

impl Debug for Solved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Ok(t) => Debug::fmt(t, f),
            Err(e) => write!(f, "error: {e}"),
        }
    }
}

impl Application for TspArgs {
    const NAME: &'static str = "tsp";
    const ABOUT: &'static str =
        "The shortest tour through the cities of a symmetric TSPLIB instance by branch and \
         bound; prints its length and the tour (--check compares the lengths)";
    fn run(&self, o: &Options) -> Result<(), String> {
        let (problem, name) = read_tsp(&self.file)?;
        // Before the run, in every process of a pool: the jobs name it by its key.
        let problem = tsp::register(problem);
        let spawn_depth = self.spawn_depth;
        drive(
            o,
            &format!("tsp({name}, {} cities)", problem.cities()),
            || Solved(Ok(problem.solve_seq())),
            |s| Solved(tsp::solve(s, &problem, spawn_depth)),
        )?;
        Ok(())
    }
}

/// `barnes`: a Barnes-Hut N-body simulation of a Plummer model, with the bodies as a
/// Satin shared object (default) or sent with every job (`--no-shared`).
#[derive(Args, Debug, Clone)]
pub struct BarnesArgs {
    /// The number of bodies, 2..=10000000.
    #[arg(long, default_value_t = 20_000, value_parser = RangedU64ValueParser::<usize>::new().range(2..=barnes::MAX_BODIES as u64))]
    pub bodies: usize,
    /// The iterations (time steps), 1..=100000.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=barnes::MAX_ITERATIONS as i64))]
    pub iterations: u32,
    /// The seed of the initial model.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Force jobs of at most this many bodies run sequentially, 1..=10000000.
    #[arg(long, default_value_t = 256, value_parser = RangedU64ValueParser::<usize>::new().range(1..=barnes::MAX_BODIES as u64))]
    pub leaf: usize,
    /// Send all bodies with every job that leaves its process instead of keeping them
    /// in a shared object (for comparing the bytes sent).
    #[arg(long)]
    pub no_shared: bool,
}

impl Application for BarnesArgs {
    const NAME: &'static str = "barnes";
    const ABOUT: &'static str = "Barnes-Hut N-body simulation of a Plummer model: the bodies \
         as a Satin shared object updated once per iteration (guards make stolen jobs wait \
         for their iteration), or sent with every job (--no-shared)";
    fn run(&self, o: &Options) -> Result<(), String> {
        let model = barnes::plummer(self.bodies, self.seed);
        let (iterations, leaf) = (self.iterations, self.leaf);
        let what = format!(
            "barnes({} bodies, {} iterations, {})",
            self.bodies,
            iterations,
            if self.no_shared {
                "bodies as job parameters"
            } else {
                "bodies as a shared object"
            }
        );
        // Every process makes its copy before the run (the jobs name it).
        let shared = if self.no_shared {
            None
        } else {
            Some(barnes::share(&model).map_err(err)?)
        };
        drive(
            o,
            &what,
            || barnes::simulate_seq(model.clone(), iterations),
            |s| match &shared {
                Some(b) => barnes::simulate_shared(s, b, model.clone(), iterations, leaf),
                None => barnes::simulate_copied(s, model.clone(), iterations, leaf),
            },
        )
    }
}

/// `raytrace --size N --width W --height H --output FILE.png`: the SPD sphereflake
/// rendered by a Whitted raytracer.
#[derive(Args, Debug, Clone)]
pub struct RaytraceArgs {
    /// The sphereflake's size: levels of 9 spheres below the root, 0..=7
    /// (1 + 9 + ... + 9^N spheres: 7381 at 4, 5.4 million at 7).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=sphereflake::MAX_SIZE as i64))]
    pub size: u32,
    /// The image's width in pixels, 1..=16384.
    #[arg(long, value_name = "W", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=raytrace::MAX_SIDE as i64))]
    pub width: u32,
    /// The image's height in pixels, 1..=16384 (at most 2^26 pixels in all).
    #[arg(long, value_name = "H", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=raytrace::MAX_SIDE as i64))]
    pub height: u32,
    /// The PNG file to write (on a pool the master writes it).
    #[arg(long, value_name = "FILE.png")]
    pub output: PathBuf,
    /// Rectangles of at most B x B pixels are rendered without spawning, 1..=16384.
    #[arg(long, value_name = "B", default_value_t = raytrace::DEFAULT_BLOCK, value_parser = clap::value_parser!(u32).range(1..=raytrace::MAX_SIDE as i64))]
    pub block: u32,
}

/// The image `raytrace` rendered, or why the Satin run has none. Equal when both are
/// images with the same pixels; printed as the size and a digest of the pixels.
pub struct Rendered(pub Result<Arc<raytrace::Image>, String>);

impl PartialEq for Rendered {
    fn eq(&self, o: &Rendered) -> bool {
        matches!((&self.0, &o.0), (Ok(a), Ok(b)) if a == b)
    }
}

impl Debug for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Ok(i) => Debug::fmt(i, f),
            Err(e) => write!(f, "error: {e}"),
        }
    }
}

impl Application for RaytraceArgs {
    const NAME: &'static str = "raytrace";
    const ABOUT: &'static str =
        "A Whitted raytracer (shadows, reflection, Phong shading) of the SPD \"balls\" \
         scene, the sphereflake, to a PNG file; prints the size and a digest of the pixels \
         (--check compares every pixel)";
    fn validate(&self) -> Result<(), String> {
        raytrace::check_dimensions(self.width, self.height)
    }
    fn run(&self, o: &Options) -> Result<(), String> {
        let (size, w, h, block) = (self.size, self.width, self.height, self.block);
        let scene = raytrace::scene(size)
            .ok_or_else(|| format!("size {size} is beyond {}", sphereflake::MAX_SIZE))?;
        // The image to write: the Satin one (or the sequential one of `--seq`), kept
        // by the process that rendered the root.
        let written: parking_lot::Mutex<Option<Arc<raytrace::Image>>> = Default::default();
        let seq_only = o.seq;
        drive(
            o,
            &format!(
                "raytrace(size {size}: {} spheres, {w}x{h})",
                scene.flake.nodes.len()
            ),
            || {
                let img = Arc::new(raytrace::render_seq(&scene, w, h));
                if seq_only {
                    *written.lock() = Some(img.clone());
                }
                Rendered(Ok(img))
            },
            |s| {
                let r = raytrace::render_satin(s, size, w, h, block).map(Arc::new);
                if let Ok(img) = &r {
                    *written.lock() = Some(img.clone());
                }
                Rendered(r)
            },
        )?;
        if let Some(img) = written.lock().take() {
            img.write_png(&self.output)?;
            out!("wrote {}", self.output.display());
        }
        Ok(())
    }
}

/// `setcover FILE | --random ROWS COLUMNS DENSITY`: the minimum-cost set cover by
/// branch and bound.
#[derive(Args, Debug, Clone)]
pub struct SetCoverArgs {
    /// An instance in the OR-Library's SCP format (rows and columns, every column's
    /// cost, then each row's number of columns and their 1-based numbers). On a pool
    /// every process reads it: give a path valid on every host.
    #[arg(required_unless_present = "random", conflicts_with = "random")]
    pub file: Option<PathBuf>,
    /// A random instance instead: ROWS and COLUMNS (1..=100000 each, at most 2^26
    /// pairs), each column covering each row with probability DENSITY (0 < DENSITY <=
    /// 1), costs 1..=100.
    #[arg(long, num_args = 3, value_names = ["ROWS", "COLUMNS", "DENSITY"])]
    pub random: Option<Vec<String>>,
    /// The random instance's seed.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Every column costs 1: the fewest columns that cover every row.
    #[arg(long)]
    pub unicost: bool,
    /// Nodes with fewer include/exclude decisions spawn both children, 0..=64.
    #[arg(long, value_name = "D", default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub spawn_depth: u32,
}

impl SetCoverArgs {
    /// The random instance's sizes and density, checked.
    fn random_args(r: &[String]) -> Result<(usize, usize, f64), String> {
        let count = |what: &str, s: &str| -> Result<usize, String> {
            match s.parse::<usize>() {
                Ok(n) if (1..=100_000).contains(&n) => Ok(n),
                _ => Err(format!("--random: {what} `{s}` is not in 1..=100000")),
            }
        };
        let [rows, columns, density] = r else {
            return Err("--random takes ROWS COLUMNS DENSITY".into());
        };
        let (rows, columns) = (count("ROWS", rows)?, count("COLUMNS", columns)?);
        if rows * columns > 1 << 26 {
            return Err(format!(
                "--random: {rows} x {columns} is more than 2^26 (row, column) pairs"
            ));
        }
        match density.parse::<f64>() {
            Ok(d) if d > 0.0 && d <= 1.0 => Ok((rows, columns, d)),
            _ => Err(format!("--random: DENSITY `{density}` is not in (0, 1]")),
        }
    }

    /// The instance: read from the file, or generated.
    pub fn instance(&self) -> Result<scp::Instance, String> {
        let inst = match (&self.file, &self.random) {
            (Some(path), _) => scp::Instance::read(path)?,
            (None, Some(r)) => {
                let (rows, columns, density) = Self::random_args(r)?;
                scp::Instance::random(rows, columns, density, self.seed)
            }
            (None, None) => return Err("a FILE or --random ROWS COLUMNS DENSITY is needed".into()),
        };
        Ok(if self.unicost { inst.unicost() } else { inst })
    }
}

/// The answer of `setcover`: the optimal cover, or why the Satin run has none.
pub struct Covered(pub Result<setcover::Cover, String>);

impl PartialEq for Covered {
    /// Equal costs (two optimal covers are equal), see [`setcover::Cover`].
    fn eq(&self, o: &Covered) -> bool {
        matches!((&self.0, &o.0), (Ok(a), Ok(b)) if a == b)
    }
}

impl Debug for Covered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Ok(c) => Debug::fmt(c, f),
            Err(e) => write!(f, "error: {e}"),
        }
    }
}

impl Application for SetCoverArgs {
    const NAME: &'static str = "setcover";
    const ABOUT: &'static str =
        "The minimum-cost set cover of an OR-Library SCP instance (or a random one) by \
         branch and bound; prints the cost and the columns (--check compares the costs)";
    fn validate(&self) -> Result<(), String> {
        match &self.random {
            Some(r) => Self::random_args(r).map(|_| ()),
            None => Ok(()),
        }
    }
    fn run(&self, o: &Options) -> Result<(), String> {
        let inst = self.instance()?;
        let what = format!(
            "setcover({}{} rows, {} columns{})",
            self.file
                .as_ref()
                .map_or(String::new(), |p| format!("{}: ", p.display())),
            inst.rows,
            inst.columns(),
            if self.unicost { ", unicost" } else { "" }
        );
        // Before the run, in every process of a pool: the jobs name it by its key.
        let problem = setcover::register(setcover::Problem::new(&inst));
        let spawn_depth = self.spawn_depth;
        drive(
            o,
            &what,
            || Covered(Ok(problem.solve_seq())),
            |s| Covered(setcover::solve(s, &problem, spawn_depth)),
        )
    }
}

/// `othello [FILE | --position TEXT] --depth D`: the value of an Othello position to D
/// plies, a best move and the nodes searched, with speculative children aborted on a
/// cutoff.
#[derive(Args, Debug, Clone)]
pub struct OthelloArgs {
    /// A file holding the position: 64 squares from a1 to h8 (`X` black, `O` white, `-`
    /// empty), then the side to move (`X` or `O`); blanks and line ends anywhere, `;` or
    /// `#` start a comment. Without FILE or --position: the initial position. On a
    /// pool every process reads it: give a path valid on every host.
    #[arg(conflicts_with = "position")]
    pub file: Option<PathBuf>,
    /// The position as text instead of a file (the same format; it may start with
    /// `-`).
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub position: Option<String>,
    /// Plies to search, 1..=60 (a pass is a ply).
    #[arg(long, value_name = "D", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=othello::MAX_DEPTH as i64))]
    pub depth: u32,
    /// Nodes fewer than S plies from the root spawn their children after the first;
    /// deeper subtrees are searched sequentially (0..=60).
    #[arg(long, value_name = "S", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=othello::MAX_DEPTH as i64))]
    pub spawn_depth: u32,
    /// A cutoff does not abort the other children (for comparison: they run to their
    /// end).
    #[arg(long)]
    pub no_abort: bool,
}

/// The largest position file `othello` reads (a position is 66 characters; the rest
/// is room for comments).
pub const MAX_POSITION_FILE: u64 = 64 * 1024;

impl OthelloArgs {
    /// The position: read from the file or the text, or the initial one.
    pub fn position(&self) -> Result<othello::board::Position, String> {
        use othello::board::Position;
        match (&self.file, &self.position) {
            (Some(path), _) => {
                let text =
                    crate::input::read_text(path, MAX_POSITION_FILE, "a position is 66 characters")
                        .map_err(|e| format!("reading {e}"))?;
                Position::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
            }
            (None, Some(text)) => Position::parse(text).map_err(|e| format!("--position: {e}")),
            (None, None) => Ok(Position::INITIAL),
        }
    }
}

impl Application for OthelloArgs {
    const NAME: &'static str = "othello";
    const ABOUT: &'static str =
        "The value of an Othello position to --depth plies by alpha-beta, a best move and \
         the nodes searched; speculative children are aborted on a cutoff (--check \
         compares the values)";
    fn run(&self, o: &Options) -> Result<(), String> {
        let p = self.position()?;
        let (depth, spawn_depth, abort) = (self.depth, self.spawn_depth, !self.no_abort);
        let b = p.board;
        drive(
            o,
            &format!(
                "othello({p}, depth {depth}, spawn depth {spawn_depth}{})",
                if abort { "" } else { ", no abort" }
            ),
            || othello::othello_seq(&b, depth),
            |s| othello::othello_satin(s, &b, depth, spawn_depth, abort),
        )
    }
}

/// Every application, by name: the command line of `satin-app APP ARGS...`.
#[derive(Subcommand, Debug, Clone)]
pub enum App {
    /// Fibonacci with every call spawning (or sequential below --threshold).
    Fib(Cli<FibArgs>),
    /// The number of solutions of the N-queens problem.
    Nqueens(Cli<NQueensArgs>),
    /// Adaptive integration of f(x) = 0.1 x sin(x) over [A, B] to tolerance EPS.
    Integrate(Cli<IntegrateArgs>),
    /// The best value of a 0/1 knapsack of N generated items.
    Knapsack(Cli<KnapsackArgs>),
    /// The binomial coefficient N over K by Pascal's recursion.
    Noverk(Cli<NOverKArgs>),
    /// The prime factors of N.
    Primes(Cli<PrimesArgs>),
    /// The product of two random N x N matrices.
    Matmul(Cli<MatMulArgs>),
    /// The Unbalanced Tree Search benchmark.
    Uts(Cli<UtsArgs>),
    /// Is a CNF formula satisfiable (DPLL with speculative branches and abort)?
    Sat(Cli<SatArgs>),
    /// IDA* on the 15-puzzle instances of a file.
    Ida(Cli<IdaArgs>),
    /// The shortest tour of a TSPLIB instance by branch and bound.
    Tsp(Cli<TspArgs>),
    /// Barnes-Hut N-body simulation, the bodies as a shared object or as parameters.
    Barnes(Cli<BarnesArgs>),
    /// The value of an Othello position by alpha-beta with speculative children.
    Othello(Cli<OthelloArgs>),
    /// The SPD sphereflake rendered by a raytracer to a PNG file.
    Raytrace(Cli<RaytraceArgs>),
    /// The minimum-cost set cover of an SCP instance by branch and bound.
    Setcover(Cli<SetCoverArgs>),
}

impl App {
    /// Runs the application.
    pub fn run(&self) -> Result<(), String> {
        fn go<A: Application>(c: &Cli<A>) -> Result<(), String> {
            c.app.validate()?;
            c.app.run(&c.options)
        }
        match self {
            App::Fib(c) => go(c),
            App::Nqueens(c) => go(c),
            App::Integrate(c) => go(c),
            App::Knapsack(c) => go(c),
            App::Noverk(c) => go(c),
            App::Primes(c) => go(c),
            App::Matmul(c) => go(c),
            App::Uts(c) => go(c),
            App::Sat(c) => go(c),
            App::Ida(c) => go(c),
            App::Tsp(c) => go(c),
            App::Barnes(c) => go(c),
            App::Othello(c) => go(c),
            App::Raytrace(c) => go(c),
            App::Setcover(c) => go(c),
        }
    }
}

/// An `f64` result: compared by its bits (the check of `integrate` and `matmul`),
/// printed with `{}` (the shortest decimal that reads back to the same bits).
#[derive(Clone, Copy)]
pub struct Bits(pub f64);

impl PartialEq for Bits {
    fn eq(&self, o: &Bits) -> bool {
        self.0.to_bits() == o.0.to_bits()
    }
}

impl Display for Bits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Display::fmt(&self.0, f)
    }
}

impl Debug for Bits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Display::fmt(&self.0, f)
    }
}

fn err(e: SatinError) -> String {
    e.to_string()
}

/// What a Satin run gave: the result and what the report says about it.
struct Outcome<T> {
    result: T,
    processes: usize,
    steals: u64,
    given: u64,
    elapsed: Duration,
    /// More `key = value` lines of the report.
    extra: Vec<(&'static str, String)>,
}

/// The report's lines about the pool: the master, and crash recovery's counters.
fn pool_report(
    name: &str,
    restarted: bool,
    s: &satin::dist::PoolStats,
) -> Vec<(&'static str, String)> {
    let t = &s.total;
    let ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6);
    vec![
        ("master", name.to_string()),
        ("restarted", restarted.to_string()),
        ("spawns", t.spawns.to_string()),
        ("aborted", t.aborted.to_string()),
        ("inlets", t.inlets.to_string()),
        ("jobs_redone", t.jobs_redone.to_string()),
        ("orphans_kept", t.orphans_kept.to_string()),
        ("results_announced", t.results_announced.to_string()),
        ("lookups", t.lookups.to_string()),
        ("results_reused", t.results_reused.to_string()),
        ("lookup_misses", t.lookup_misses.to_string()),
        ("lookups_awaited", t.lookups_awaited.to_string()),
        ("own_orphan_lookups", t.own_orphan_lookups.to_string()),
        ("bytes_fetched", t.bytes_fetched.to_string()),
        ("restored", t.restored.to_string()),
        ("elections", t.elections.to_string()),
        ("redo_jobs", t.redo_jobs.to_string()),
        ("work_lost_ms", ms(t.work_lost_nanos)),
        ("recovery_ms", ms(t.recovery_nanos)),
        ("restart_ms", ms(t.restart_nanos)),
        ("adapt_added", t.adapt_added.to_string()),
        ("adapt_removed", t.adapt_removed.to_string()),
        (
            "bytes_sent",
            t.intra_bytes.saturating_add(t.inter_bytes).to_string(),
        ),
        ("shared_writes", t.shared_writes.to_string()),
        ("shared_bytes", t.shared_bytes.to_string()),
        ("guard_waits", t.guard_waits.to_string()),
        ("guard_fetches", t.guard_fetches.to_string()),
        (
            "executed_by",
            s.members
                .iter()
                .map(|m| format!("{}:{}", m.name, m.remote_jobs_executed))
                .collect::<Vec<_>>()
                .join(" "),
        ),
    ]
}

/// Runs the sequential version (`--seq`) or the Satin version — in this process, or
/// on the pool when [`satin::launched`] — and prints the result and the time (on a
/// pool: the master, with every member's statistics). With `--check` a result that
/// differs from the sequential one is an error.
pub fn drive<T: PartialEq + Debug>(
    o: &Options,
    what: &str,
    seq: impl Fn() -> T,
    par: impl Fn(&Satin) -> T,
) -> Result<(), String> {
    if o.seq {
        let t = Instant::now();
        let r = seq();
        out!("{what} sequential: result = {r:?}");
        out!("time: {:.3} s", t.elapsed().as_secs_f64());
        return Ok(());
    }
    // The master's pool ends (its members exit) when its `PoolRun` is dropped: kept
    // until the result is printed and the report written, so that a master that dies
    // before is replaced and the result is not lost.
    let mut pool_run = None;
    let run = if satin::launched() {
        let pool = o.builder().build_distributed().map_err(err)?;
        let processes = pool.size();
        let header = format!(
            "{} processes in {} clusters x {} workers, {}",
            pool.size(),
            pool.clusters(),
            pool.satin().workers(),
            pool.policy().name()
        );
        let name = pool.name().to_string();
        let mut run = pool.run(par).map_err(err)?;
        let Some(result) = run.result.take() else {
            return Ok(()); // not the master
        };
        if run.restarted {
            out!("{name} became the master after the first one died and restarted the root");
        }
        out!("{what} satin ({header}): result = {result:?}");
        let elapsed = run.elapsed.unwrap_or_default();
        out!("time: {:.3} s", elapsed.as_secs_f64());
        let (steals, given) = run.stats.as_ref().map_or((0, 0), |s| {
            (s.total.remote_steal_successes(), s.total.jobs_given)
        });
        let extra = run
            .stats
            .as_ref()
            .map(|s| pool_report(&name, run.restarted, s))
            .unwrap_or_default();
        if let Some(s) = run.stats.take() {
            out_raw!("{s}");
        }
        pool_run = Some(run);
        Outcome {
            result,
            processes,
            steals,
            given,
            elapsed,
            extra,
        }
    } else {
        let satin = o.builder().build().map_err(err)?;
        let t = Instant::now();
        let result = par(&satin);
        let elapsed = t.elapsed();
        out!(
            "{what} satin ({} workers): result = {result:?}",
            satin.workers()
        );
        out!("time: {:.3} s", elapsed.as_secs_f64());
        let stats = satin.stats();
        if o.stats {
            out_raw!("{stats}");
        }
        Outcome {
            result,
            processes: 1,
            steals: 0,
            given: 0,
            elapsed,
            extra: vec![("spawns", stats.total.spawns.to_string())],
        }
    };
    let mut check = "skipped";
    let mut outcome = Ok(());
    if o.check {
        let want = seq();
        if want == run.result {
            out!("check: OK (equals the sequential result)");
            check = "ok";
        } else {
            check = "failed";
            outcome = Err(format!("check: FAILED: sequential result = {want:?}"));
        }
    }
    if let Some(path) = &o.report {
        let mut text = format!(
            "result = {:?}\ncheck = {check}\nprocesses = {}\n\
             remote_steal_successes = {}\njobs_given = {}\nseconds = {:.6}\n",
            run.result,
            run.processes,
            run.steals,
            run.given,
            run.elapsed.as_secs_f64()
        );
        for (k, v) in &run.extra {
            text.push_str(&format!("{k} = {v}\n"));
        }
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if let Some(r) = pool_run {
        r.end().map_err(err)?;
    }
    outcome
}

/// The exit status of a finished run: success, or the error printed and status 1.
pub fn exit_status(name: &str, r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The `main` of application `A`: parses the process's arguments (`--help` prints the
/// usage; a bad argument prints an error and exits with status 2), runs it and returns
/// the exit status (1 for a failure or a failed check).
pub fn main<A: Application>() -> ExitCode {
    ipl_tools::init_tracing("warn");
    let mut cmd = Cli::<A>::command()
        .name(A::NAME)
        .bin_name(A::NAME)
        .about(A::ABOUT);
    let cli = cmd
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut m| Cli::<A>::from_arg_matches_mut(&mut m));
    let cli = cli.and_then(|cli| match cli.app.validate() {
        Ok(()) => Ok(cli),
        Err(msg) => Err(cmd.error(ErrorKind::ValueValidation, msg)),
    });
    match cli {
        Ok(cli) => exit_status(A::NAME, cli.app.run(&cli.options)),
        Err(e) => e.format(&mut cmd).exit(),
    }
}
