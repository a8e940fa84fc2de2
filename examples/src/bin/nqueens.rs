//! N-queens: count all solutions (rows below 4 spawn one child per valid column).
//!
//! `nqueens N [--workers N] [--seq] [--check] [--stats]` (default N = 15)

use satin::apps::nqueens::{nqueens_seq, NQueens};

use satin::Satin;
use std::time::Instant;

const USAGE: &str = "usage: nqueens N [--workers N] [--seq] [--check] [--stats]";

/// Command line: positional arguments, `--workers N`, `--seq`, `--check`, `--stats`,
/// and named options with a value.
struct Cli {
    pos: Vec<String>,
    workers: Option<usize>,
    seq: bool,
    check: bool,
    stats: bool,
    named: Vec<(String, String)>,
}

impl Cli {
    fn parse(valued: &[&str]) -> Cli {
        let mut c = Cli {
            pos: vec![],
            workers: None,
            seq: false,
            check: false,
            stats: false,
            named: vec![],
        };
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--workers" => c.workers = it.next().and_then(|v| v.parse().ok()),
                "--seq" => c.seq = true,
                "--check" => c.check = true,
                "--stats" => c.stats = true,
                s if valued.contains(&s) => {
                    c.named.push((s.to_string(), it.next().unwrap_or_default()))
                }
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                _ => c.pos.push(a),
            }
        }
        c
    }

    fn pos<T: std::str::FromStr>(&self, i: usize, default: T) -> T {
        match self.pos.get(i) {
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("bad argument `{v}`\n{USAGE}");
                std::process::exit(2)
            }),
            None => default,
        }
    }

    #[allow(dead_code)]
    fn named<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        self.named
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(default)
    }

    fn satin(&self) -> Satin {
        let mut b = Satin::builder();
        if let Some(w) = self.workers {
            b = b.workers(w);
        }
        b.build().expect("starting the Satin workers")
    }
}

/// Runs the sequential version (`--seq`) or the Satin version (checked against the
/// sequential one with `--check`) and prints the result and the time.
fn drive<T: PartialEq + std::fmt::Debug>(
    cli: &Cli,
    what: &str,
    seq: impl Fn() -> T,
    par: impl FnOnce(&Satin) -> T,
) {
    if cli.seq {
        let t = Instant::now();
        let r = seq();
        println!("{what} sequential: result = {r:?}");
        println!("time: {:.3} s", t.elapsed().as_secs_f64());
        return;
    }
    let satin = cli.satin();
    let t = Instant::now();
    let r = par(&satin);
    let el = t.elapsed();
    println!("{what} satin ({} workers): result = {r:?}", satin.workers());
    println!("time: {:.3} s", el.as_secs_f64());
    if cli.stats {
        print!("{}", satin.stats());
    }
    if cli.check {
        let want = seq();
        if want == r {
            println!("check: OK (equals the sequential result)");
        } else {
            eprintln!("check: FAILED: sequential result = {want:?}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let cli = Cli::parse(&[]);
    let n: usize = cli.pos(0, 15);
    drive(
        &cli,
        &format!("nqueens({n})"),
        || nqueens_seq(n),
        |s| s.run(NQueens::new(n)),
    );
}
