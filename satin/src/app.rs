//! The command-line driver the application binaries share (`fib`, `nqueens`, ...):
//! one process, or a member of a pool when started by `ipl-run` ([`crate::launched`]).
//!
//! Every application takes `ARGS... [--workers N] [--seq] [--check] [--stats]`:
//! `--seq` runs the sequential version, `--check` compares the Satin result with the
//! sequential one (exit status 1 on a mismatch), `--stats` prints the statistics
//! (always printed on a pool). On a pool only the master prints.

use crate::apps;
use crate::{Satin, SatinError};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

/// The applications [`run`] knows, with their usage lines.
pub const APPS: &[(&str, &str)] = &[
    ("fib", "fib N [--threshold T] (default 37)"),
    ("nqueens", "nqueens N (default 15)"),
    ("integrate", "integrate A B EPS (default 0 100000 1e-6)"),
    ("knapsack", "knapsack N (default 32)"),
    ("noverk", "noverk N K (default 33 16)"),
    ("primes", "primes N (default 1234567890)"),
    ("matmul", "matmul N (N = 64 * 2^k, default 1024)"),
];

/// The usage text of an application.
pub fn usage(app: &str) -> String {
    let line = APPS
        .iter()
        .find(|(n, _)| *n == app)
        .map(|(_, u)| *u)
        .unwrap_or("APP ARGS...");
    format!(
        "usage: {line} [--workers N] [--seq] [--check] [--stats] [--policy rs|crs] [--report FILE]"
    )
}

/// A parsed command line: positional arguments, the common flags, and named options.
#[derive(Debug, Clone, Default)]
pub struct Cli {
    /// Positional arguments.
    pub pos: Vec<String>,
    /// `--workers N`: worker threads per process.
    pub workers: Option<usize>,
    /// `--seq`: run the sequential version only.
    pub seq: bool,
    /// `--check`: compare with the sequential result.
    pub check: bool,
    /// `--stats`: print statistics.
    pub stats: bool,
    /// `-h`/`--help`.
    pub help: bool,
    /// `--policy P`: the load-balancing policy on a pool (overrides `SATIN_POLICY`).
    pub policy: Option<String>,
    /// `--report FILE`: the process that prints the result also writes a summary to
    /// `FILE` (`key = value` lines: `result`, `check`, `processes`,
    /// `remote_steal_successes`, `jobs_given`), for tests and scripts.
    pub report: Option<String>,
    /// Named options with a value (those listed as `valued`).
    pub named: Vec<(String, String)>,
}

impl Cli {
    /// Parses arguments (without the program name); options in `valued` take a value.
    pub fn from_args(args: impl IntoIterator<Item = String>, valued: &[&str]) -> Cli {
        let mut c = Cli::default();
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--workers" => c.workers = it.next().and_then(|v| v.parse().ok()),
                "--seq" => c.seq = true,
                "--check" => c.check = true,
                "--stats" => c.stats = true,
                "-h" | "--help" => c.help = true,
                "--policy" => c.policy = it.next(),
                "--report" => c.report = it.next(),
                s if valued.contains(&s) => {
                    c.named.push((s.to_string(), it.next().unwrap_or_default()))
                }
                _ => c.pos.push(a),
            }
        }
        c
    }

    /// Positional argument `i`, or `default` when absent.
    pub fn pos<T: std::str::FromStr>(&self, i: usize, default: T) -> Result<T, String> {
        match self.pos.get(i) {
            Some(v) => v.parse().map_err(|_| format!("bad argument `{v}`")),
            None => Ok(default),
        }
    }

    /// The value of a named option, or `default`.
    pub fn named<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        self.named
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(default)
    }

    fn builder(&self) -> crate::SatinBuilder {
        let mut b = Satin::builder();
        if let Some(w) = self.workers {
            b = b.workers(w);
        }
        b
    }
}

/// An `f64` compared by its bits (the check of `integrate`), shown in `e` notation.
#[derive(Clone, Copy)]
pub struct Bits(pub f64);

impl PartialEq for Bits {
    fn eq(&self, o: &Bits) -> bool {
        self.0.to_bits() == o.0.to_bits()
    }
}

impl Debug for Bits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.12e}", self.0)
    }
}

fn err(e: SatinError) -> String {
    e.to_string()
}

/// Runs the sequential version (`--seq`) or the Satin version — in this process, or
/// on the pool when [`crate::launched`] — and prints the result and the time (on a
/// pool: the master, with every member's statistics). With `--check` a result that
/// differs from the sequential one is an error.
pub fn drive<T: PartialEq + Debug>(
    cli: &Cli,
    what: &str,
    seq: impl Fn() -> T,
    par: impl FnOnce(&Satin) -> T,
) -> Result<(), String> {
    if cli.seq {
        let t = Instant::now();
        let r = seq();
        println!("{what} sequential: result = {r:?}");
        println!("time: {:.3} s", t.elapsed().as_secs_f64());
        return Ok(());
    }
    let r = if crate::launched() {
        let mut config = crate::DistConfig::from_env().map_err(err)?;
        if let Some(p) = &cli.policy {
            config.policy = crate::dist::parse_policy(p).map_err(err)?;
        }
        let pool = cli.builder().build_distributed_with(config).map_err(err)?;
        let processes = pool.size();
        let header = format!(
            "{} processes in {} clusters x {} workers, {}",
            pool.size(),
            pool.clusters(),
            pool.satin().workers(),
            pool.policy().name()
        );
        let run = pool.run(par).map_err(err)?;
        let Some(r) = run.result else {
            return Ok(()); // not the master
        };
        println!("{what} satin ({header}): result = {r:?}");
        let el = run.elapsed.unwrap_or_default();
        println!("time: {:.3} s", el.as_secs_f64());
        let (steals, given) = run.stats.as_ref().map_or((0, 0), |s| {
            (s.total.remote_steal_successes(), s.total.jobs_given)
        });
        if let Some(s) = run.stats {
            print!("{s}");
        }
        (r, processes, steals, given, el)
    } else {
        let satin = cli.builder().build().map_err(err)?;
        let t = Instant::now();
        let r = par(&satin);
        let el = t.elapsed();
        println!("{what} satin ({} workers): result = {r:?}", satin.workers());
        println!("time: {:.3} s", el.as_secs_f64());
        if cli.stats {
            print!("{}", satin.stats());
        }
        (r, 1, 0, 0, el)
    };
    let (r, processes, steals, given, elapsed) = r;
    let mut check = "skipped";
    let mut outcome = Ok(());
    if cli.check {
        let want = seq();
        if want == r {
            println!("check: OK (equals the sequential result)");
            check = "ok";
        } else {
            check = "failed";
            outcome = Err(format!("check: FAILED: sequential result = {want:?}"));
        }
    }
    if let Some(path) = &cli.report {
        let text = format!(
            "result = {r:?}\ncheck = {check}\nprocesses = {processes}\n\
             remote_steal_successes = {steals}\njobs_given = {given}\nseconds = {:.6}\n",
            elapsed.as_secs_f64()
        );
        std::fs::write(path, text).map_err(|e| format!("writing {path}: {e}"))?;
    }
    outcome
}

/// Runs application `app` with the command line `cli` (see [`APPS`]).
pub fn run(app: &str, cli: &Cli) -> Result<(), String> {
    match app {
        "fib" => {
            let n: u32 = cli.pos(0, 37)?;
            let threshold: u32 = cli.named("--threshold", 0);
            drive(
                cli,
                &format!("fib({n})"),
                || apps::fib::fib_seq(n),
                |s| s.run(apps::fib::Fib { n, threshold }),
            )
        }
        "nqueens" => {
            let n: usize = cli.pos(0, 15)?;
            drive(
                cli,
                &format!("nqueens({n})"),
                || apps::nqueens::nqueens_seq(n),
                |s| s.run(apps::nqueens::NQueens::new(n)),
            )
        }
        "integrate" => {
            let a: f64 = cli.pos(0, 0.0)?;
            let b: f64 = cli.pos(1, 100000.0)?;
            let eps: f64 = cli.pos(2, 1e-6)?;
            drive(
                cli,
                &format!("integrate({a}, {b}, {eps})"),
                || Bits(apps::integrate::integrate(a, b, eps)),
                |s| Bits(s.run(apps::integrate::Integrate::new(a, b, eps))),
            )
        }
        "knapsack" => {
            let n: usize = cli.pos(0, 32)?;
            let (items, cap) = apps::knapsack::instance(n);
            let shared = Arc::new(items.clone());
            drive(
                cli,
                &format!("knapsack({n} items, capacity {cap})"),
                || apps::knapsack::knapsack_seq(&items, cap),
                |s| {
                    s.run(apps::knapsack::Knapsack {
                        items: shared,
                        i: 0,
                        cap,
                    })
                },
            )
        }
        "noverk" => {
            let n: u32 = cli.pos(0, 33)?;
            let k: u32 = cli.pos(1, 16)?;
            drive(
                cli,
                &format!("noverk({n}, {k})"),
                || apps::noverk::noverk_seq(n, k),
                |s| s.run(apps::noverk::NOverK { n, k }),
            )
        }
        "primes" => {
            let n: u64 = cli.pos(0, 1_234_567_890)?;
            drive(
                cli,
                &format!("primes({n})"),
                || apps::primes::primes_seq(n),
                |s| s.run(apps::primes::Primes::new(n)),
            )
        }
        "matmul" => {
            let n: usize = cli.pos(0, 1024)?;
            let a = Arc::new(apps::matmul::Mat::random(n, 1));
            let b = Arc::new(apps::matmul::Mat::random(n, 2));
            let sum = |d: &[f64]| d.iter().sum::<f64>().to_bits();
            drive(
                cli,
                &format!("matmul({n}x{n}) checksum bits"),
                || sum(&apps::matmul::matmul_seq(&a, &b).d),
                |s| sum(&s.run(apps::matmul::MatMul::new(a.clone(), b.clone()))),
            )
        }
        other => Err(format!(
            "unknown application `{other}` (one of: {})",
            APPS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The `main` of application `app`: parses the process's arguments, runs it, and
/// returns the exit status (0, 1 for a failure or a failed check, 2 for bad usage).
pub fn main_for(app: &str) -> i32 {
    let cli = Cli::from_args(std::env::args().skip(1), &["--threshold"]);
    if cli.help {
        println!("{}", usage(app));
        return 0;
    }
    match run(app, &cli) {
        Ok(()) => 0,
        Err(e) if e.starts_with("bad argument") => {
            eprintln!("{e}\n{}", usage(app));
            2
        }
        Err(e) => {
            eprintln!("{app}: {e}");
            1
        }
    }
}
