//! Matrix multiplication by quadrant recursion (N = 64 * 2^k).
//!
//! `matmul N [--workers N] [--seq] [--check] [--stats]` (default 1024); prints a
//! checksum of C.

use satin::apps::matmul::{matmul_seq, Mat, MatMul};
use std::sync::Arc;

use satin::Satin;
use std::time::Instant;

const USAGE: &str = "usage: matmul N [--workers N] [--seq] [--check] [--stats]";

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
    let n: usize = cli.pos(0, 1024);
    let a = Arc::new(Mat::random(n, 1));
    let b = Arc::new(Mat::random(n, 2));
    let sum = |d: &[f64]| d.iter().sum::<f64>().to_bits();
    drive(
        &cli,
        &format!("matmul({n}x{n}) checksum bits"),
        || sum(&matmul_seq(&a, &b).d),
        |s| sum(&s.run(MatMul::new(a.clone(), b.clone()))),
    );
}
