//! soak-bench: a Satin pool kept busy for a set time, watched for growth.
//!
//! The benchmark starts a registry server (in this process, on 127.0.0.1) and `--members`
//! copies of itself as a Satin pool. The master runs fib jobs back to back (every call
//! spawning, so the others steal all the time: steal requests, jobs and results cross
//! the processes as messages) until `--seconds` are over, checking each result against
//! the sequential one. Every member samples its resident memory and thread count every
//! `--sample-secs` and reports them; at the end the master reports the jobs, the wrong
//! results, and the pool's messages.
//!
//! Figures: `soak.seconds`, `soak.jobs`, `soak.errors` (wrong results or failed jobs),
//! `soak.messages` (Satin messages between processes), and over the members the largest
//! `soak.rss_first_kb` / `soak.rss_last_kb` (the first sample and the last taken while
//! jobs run) and
//! `soak.threads_first` / `soak.threads_last`, with `soak.rss_growth_pct`. A long run by
//! hand (`--seconds 600`) shows whether memory or threads grow; CI runs it for seconds.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ibis_apps::fib::{fib_seq, Fib};
use ibis_bench::{report, Children, Figure};
use ipl_auth::PoolSecret;
use ipl_registry::RegistryServer;
use ipl_tools::launcher::PoolEnv;
use satin::Satin;

/// A Satin pool kept busy for a set time: memory, threads, jobs and errors over time.
#[derive(Parser, Debug)]
#[command(name = "soak-bench", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    opts: Opts,
}

#[derive(clap::Args, Debug, Clone)]
struct Opts {
    /// Processes in the pool.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=64))]
    members: u32,
    /// How long the pool runs jobs.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    seconds: u64,
    /// Seconds between two samples of memory and threads.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    sample_secs: u64,
    /// The fib argument of each job.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(2..=40))]
    fib: u32,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One member of the pool (started by the benchmark itself).
    #[command(name = "__member", hide = true)]
    Member,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    ipl_tools::init_tracing("warn");
    let cli = Cli::parse();
    let r = match cli.cmd {
        Some(Cmd::Member) => member(&cli.opts),
        None => measure(&cli.opts),
    };
    ibis_bench::exit_on_error("soak-bench", r);
}

/// This process's resident memory (kB) and thread count, from /proc/self/status.
fn usage() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:"))
}

/// Prints one line for the parent (stdout is its pipe).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A member: joins the pool, samples itself, and (on the master) runs jobs until the
/// time is over.
fn member(o: &Opts) -> Res<()> {
    let pool = Satin::builder().workers(1).build_distributed()?;
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let every = Duration::from_secs(o.sample_secs);
        std::thread::spawn(move || {
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    let (rss, threads) = usage();
                    say(&format!(
                        "sample {:.1} {rss} {threads}",
                        t0.elapsed().as_secs_f64()
                    ));
                    next += every;
                }
                // The sampler's own pace: a bounded nap, not a synchronisation.
                std::thread::park_timeout(Duration::from_millis(100));
            }
        })
    };
    let deadline = t0 + Duration::from_secs(o.seconds);
    let n = o.fib;
    let run = pool.run(|satin| {
        let (mut jobs, mut errors) = (0u64, 0u64);
        while Instant::now() < deadline {
            match satin.try_run(Fib { n, threshold: 0 }) {
                Ok(v) if v == fib_seq(n) => jobs += 1,
                Ok(_) | Err(_) => errors += 1,
            }
        }
        (jobs, errors)
    })?;
    stop.store(true, Ordering::Relaxed);
    sampler.thread().unpark();
    let _ = sampler.join();
    if let (Some((jobs, errors)), Some(stats)) = (run.result, run.stats) {
        let t = &stats.total;
        say(&format!(
            "result {jobs} {errors} {}",
            t.intra_messages + t.inter_messages
        ));
    }
    Ok(())
}

/// One member's samples: (seconds, rss kB, threads).
type Samples = Vec<(f64, u64, u64)>;

fn measure(o: &Opts) -> Res<()> {
    let secret = PoolSecret::generate()?;
    let server = RegistryServer::bind("127.0.0.1:0", secret.clone())?.run_in_background()?;
    let exe = std::env::current_exe()?;
    let pool = format!("soak-{}", std::process::id());
    let mut children = Children(Vec::new());
    let (tx, rx) = std::sync::mpsc::channel::<(usize, String)>();
    for rank in 0..o.members as usize {
        let mut child = Command::new(&exe)
            .args(["--members", &o.members.to_string()])
            .args(["--seconds", &o.seconds.to_string()])
            .args(["--sample-secs", &o.sample_secs.to_string()])
            .args(["--fib", &o.fib.to_string()])
            .arg("__member")
            .envs(
                PoolEnv::member(
                    server.local_addr(),
                    &pool,
                    o.members as usize,
                    &secret,
                    "cluster-0",
                    rank,
                )
                .vars(),
            )
            .stdout(Stdio::piped())
            .spawn()?;
        let out = child
            .stdout
            .take()
            .ok_or("a member has no standard output")?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((rank, line));
            }
        });
        children.0.push(child);
    }
    drop(tx);
    let mut samples: Vec<Samples> = vec![Vec::new(); o.members as usize];
    let mut result = None;
    // Every member's output ends when it exits; the bound covers joining and the end.
    let until = Instant::now() + Duration::from_secs(o.seconds + 120);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((rank, line)) => {
                let f: Vec<&str> = line.split_whitespace().collect();
                match f.as_slice() {
                    ["sample", t, rss, th] => {
                        let t: f64 = t.parse()?;
                        // Only while the pool runs jobs (not its start-up or its end).
                        if t < o.seconds as f64 {
                            samples[rank].push((t, rss.parse()?, th.parse()?));
                        }
                        if rank == 0 {
                            eprintln!("soak-bench: {t} s, member 0: {rss} kB, {th} threads");
                        }
                    }
                    ["result", jobs, errors, msgs] => {
                        result = Some((
                            jobs.parse::<u64>()?,
                            errors.parse::<u64>()?,
                            msgs.parse::<u64>()?,
                        ));
                    }
                    _ => eprintln!("[{rank}] {line}"),
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                return Err("the pool did not end in time".into())
            }
        }
    }
    for c in &mut children.0 {
        let st = c.wait()?;
        if !st.success() {
            return Err(format!("a member failed: {st}").into());
        }
    }
    let (jobs, errors, messages) = result.ok_or("the master reported no result")?;
    let max_of =
        |f: &dyn Fn(&Samples) -> Option<u64>| samples.iter().filter_map(f).max().unwrap_or(0);
    let rss_first = max_of(&|s| s.first().map(|x| x.1));
    let rss_last = max_of(&|s| s.last().map(|x| x.1));
    let threads_first = max_of(&|s| s.first().map(|x| x.2));
    let threads_last = max_of(&|s| s.last().map(|x| x.2));
    let growth = if rss_first == 0 {
        0.0
    } else {
        (rss_last as f64 / rss_first as f64 - 1.0) * 100.0
    };
    let n = o.members;
    report(
        &format!(
            "soak: a Satin pool of {n} processes on 127.0.0.1 running fib({}) jobs for {} s, \
             samples every {} s",
            o.fib, o.seconds, o.sample_secs
        ),
        &[
            Figure::new("soak.seconds", o.seconds as f64, "s", "run time"),
            Figure::new(
                "soak.jobs",
                jobs as f64,
                "jobs",
                "fib jobs with the right result",
            ),
            Figure::new(
                "soak.errors",
                errors as f64,
                "jobs",
                "wrong results or failed jobs",
            ),
            Figure::new(
                "soak.messages",
                messages as f64,
                "msgs",
                "Satin messages between the processes",
            ),
            Figure::new(
                "soak.rss_first_kb",
                rss_first as f64,
                "kB",
                "resident memory, first sample (largest member)",
            ),
            Figure::new(
                "soak.rss_last_kb",
                rss_last as f64,
                "kB",
                "resident memory, last sample (largest member)",
            ),
            Figure::new(
                "soak.rss_growth_pct",
                growth,
                "%",
                "growth of resident memory, first to last",
            ),
            Figure::new(
                "soak.threads_first",
                threads_first as f64,
                "threads",
                "threads, first sample (largest member)",
            ),
            Figure::new(
                "soak.threads_last",
                threads_last as f64,
                "threads",
                "threads, last sample (largest member)",
            ),
        ],
    );
    Ok(())
}
