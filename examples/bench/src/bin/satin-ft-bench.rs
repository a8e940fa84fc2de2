//! satin-ft-bench: what Satin's fault tolerance costs and saves on this machine.
//!
//! The benchmark starts a registry server in this process and `--members` copies of
//! itself as members of a pool (the environment `ipl-run` gives), each running one of
//! the Satin applications (`--app`, `--args`) with `--workers` threads. Four kinds of
//! run, alternated in every round (the order changes from round to round), with
//! result saving on (the default) and off (`SATIN_SAVE_RESULTS=0`: jobs lost with a
//! member are simply redone, orphans recomputed):
//!
//! - crash-free, saving on and off: the overhead of the bookkeeping when nothing fails
//!   (the seeds' goal: below 1 %);
//! - one member (never the master) killed with SIGKILL at half the crash-free run
//!   time, saving on and off: what orphan saving saves (the fault-tolerance paper
//!   reports 27-39 % with its result table).
//!
//! A run's time is from the pool having formed (every member joined, the master
//! elected) to the end of the last process. Figures are medians over `--repeat`
//! rounds. Also reported, from the runs with a crash: how long the registry took to
//! notice the kill (kill to the member's removal from the pool, polled every
//! millisecond), the master's report of the recovery (jobs redone, results reused,
//! recovery time) and the work redone as a share of the run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ibis_apps::driver::App;
use ibis_bench::{median, report, Children, Figure};
use ipl_auth::PoolSecret;
use ipl_registry::{RegistryServer, ServerHandle};
use ipl_tools::launcher::{unique_pool_name, PoolEnv};

/// The bound on one run (a hang is an error, not a figure).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// The bound on a pool forming.
const FORM_TIMEOUT: Duration = Duration::from_secs(60);

/// The cost and the savings of Satin's fault tolerance: crash-free and one-crash runs
/// of an application on a local pool, with result saving on and off.
#[derive(Parser, Debug)]
#[command(name = "satin-ft-bench", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// The application (fib, nqueens, knapsack, ...).
    #[arg(long, default_value = "nqueens")]
    app: String,
    /// Its arguments, split at spaces.
    #[arg(long, default_value = "15", allow_hyphen_values = true)]
    args: String,
    /// Members of the pool (at least 2: one is killed).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=64))]
    members: u32,
    /// Worker threads per member.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Rounds of the four kinds of run (the figures are medians).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// The transport of the pool.
    #[arg(long, default_value = "tcp")]
    transport: String,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One member of a measured pool (started by the benchmark itself).
    #[command(name = "__member", hide = true)]
    Member {
        /// The application and its arguments.
        #[command(subcommand)]
        app: App,
    },
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    ipl_tools::init_tracing("warn");
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Some(Cmd::Member { app }) => app.run().map_err(Into::into),
        None => measure(&cli),
    };
    ibis_bench::exit_on_error("satin-ft-bench", r);
}

/// One kind of run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Kind {
    crash: bool,
    save: bool,
}

impl Kind {
    fn label(self) -> &'static str {
        match (self.crash, self.save) {
            (false, true) => "crash-free, saving on",
            (false, false) => "crash-free, saving off",
            (true, true) => "one crash, saving on",
            (true, false) => "one crash, saving off",
        }
    }
}

/// What one run measured.
#[derive(Debug, Default, Clone)]
struct Run {
    seconds: f64,
    /// Kill to the registry removing the member (crash runs only).
    detection_ms: Option<f64>,
    /// The master's report (`key = value`).
    report: HashMap<String, String>,
}

impl Run {
    fn key(&self, k: &str) -> Option<f64> {
        self.report.get(k)?.parse().ok()
    }
}

fn scratch(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!("satin-ft-bench-{}-{what}", std::process::id()))
}

/// The winner of the master election, as a launcher rank (members are `member-R`).
fn master_rank(server: &ServerHandle, pool: &str) -> Option<usize> {
    let name = server.with_core(|c| {
        c.election_result(pool, satin::dist::MASTER_ELECTION)
            .ok()
            .flatten()
            .map(|w| w.name().to_string())
    })?;
    name.strip_prefix("member-")?.parse().ok()
}

fn members_now(server: &ServerHandle, pool: &str) -> usize {
    server
        .with_core(|c| c.pool(pool).ok().map(|p| p.members().len()))
        .unwrap_or(0)
}

/// One run of `kind`; a crash comes `crash_at` after the pool formed.
fn run_once(cli: &Cli, kind: Kind, crash_at: Duration) -> Res<Run> {
    let exe = std::env::current_exe()?;
    let secret = PoolSecret::generate()?;
    let server = RegistryServer::bind("127.0.0.1:0", secret.clone())?.run_in_background()?;
    let pool = unique_pool_name();
    let report_file = scratch("report");
    let _ = std::fs::remove_file(&report_file);
    let n = cli.members as usize;
    let mut children = Children(Vec::with_capacity(n));
    for rank in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.arg("__member")
            .arg(&cli.app)
            .args(cli.args.split_whitespace())
            .args(["--workers", &cli.workers.to_string(), "--report"])
            .arg(&report_file)
            .envs(PoolEnv::member(server.local_addr(), &pool, n, &secret, "cluster-0", rank).vars())
            .env("IPL_TRANSPORT", &cli.transport)
            .env("SATIN_SAVE_RESULTS", if kind.save { "1" } else { "0" })
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        children.0.push(cmd.spawn()?);
    }
    let until = Instant::now() + FORM_TIMEOUT;
    let master = loop {
        if members_now(&server, &pool) == n {
            if let Some(m) = master_rank(&server, &pool) {
                break m;
            }
        }
        if Instant::now() > until {
            return Err("the pool did not form".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let formed = Instant::now();
    let mut detection_ms = None;
    if kind.crash {
        let victim = (master + 1) % n;
        while formed.elapsed() < crash_at {
            std::thread::sleep(Duration::from_millis(1));
        }
        if children.0[victim].try_wait()?.is_none() {
            let killed = Instant::now();
            children.0[victim].kill()?;
            children.0[victim].wait()?;
            let until = killed + FORM_TIMEOUT;
            while members_now(&server, &pool) == n && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            detection_ms = Some(killed.elapsed().as_secs_f64() * 1e3);
        }
    }
    let deadline = formed + RUN_TIMEOUT;
    for (rank, c) in children.0.iter_mut().enumerate() {
        loop {
            if let Some(st) = c.try_wait()? {
                let victim = kind.crash && rank == (master + 1) % n;
                if !st.success() && !victim {
                    return Err(format!("member {rank} failed: {st}").into());
                }
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("the run did not end in {RUN_TIMEOUT:?}").into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let seconds = formed.elapsed().as_secs_f64();
    server.shutdown();
    let report = read_report(&report_file)?;
    let _ = std::fs::remove_file(&report_file);
    Ok(Run {
        seconds,
        detection_ms,
        report,
    })
}

fn read_report(path: &Path) -> Res<HashMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("the master wrote no report ({}: {e})", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

fn measure(cli: &Cli) -> Res<()> {
    let what = format!("{} {}", cli.app, cli.args);
    eprintln!(
        "satin-ft-bench: {what} on {} members x {} workers over {}, {} rounds",
        cli.members, cli.workers, cli.transport, cli.repeat
    );
    // A first crash-free run sets the crash moment (half of it) and the expected
    // answer.
    let first = run_once(
        cli,
        Kind {
            crash: false,
            save: true,
        },
        Duration::ZERO,
    )?;
    let crash_at = Duration::from_secs_f64(first.seconds / 2.0);
    let answer = first.report.get("result").cloned().unwrap_or_default();
    let kinds = [
        Kind {
            crash: false,
            save: true,
        },
        Kind {
            crash: false,
            save: false,
        },
        Kind {
            crash: true,
            save: true,
        },
        Kind {
            crash: true,
            save: false,
        },
    ];
    let mut runs: HashMap<Kind, Vec<Run>> = HashMap::new();
    for round in 0..cli.repeat as usize {
        for i in 0..kinds.len() {
            // Alternate: each round starts one kind later, and every other round
            // reverses the order.
            let j = (i + round) % kinds.len();
            let kind = kinds[if round % 2 == 0 {
                j
            } else {
                kinds.len() - 1 - j
            }];
            let run = run_once(cli, kind, crash_at)?;
            let got = run.report.get("result").cloned().unwrap_or_default();
            if got != answer {
                return Err(format!(
                    "{}: the answer {got:?} differs from the crash-free {answer:?}",
                    kind.label()
                )
                .into());
            }
            eprintln!(
                "round {}/{}: {}: {:.3} s",
                round + 1,
                cli.repeat,
                kind.label(),
                run.seconds
            );
            runs.entry(kind).or_default().push(run);
        }
    }
    let med = |kind: Kind, f: &dyn Fn(&Run) -> Option<f64>| -> f64 {
        let v: Vec<f64> = runs
            .get(&kind)
            .map(|rs| rs.iter().filter_map(f).collect())
            .unwrap_or_default();
        if v.is_empty() {
            f64::NAN
        } else {
            median(&v)
        }
    };
    let secs = |r: &Run| Some(r.seconds);
    let [free_on, free_off, crash_on, crash_off] = kinds;
    let t_free_on = med(free_on, &secs);
    let t_free_off = med(free_off, &secs);
    let t_crash_on = med(crash_on, &secs);
    let t_crash_off = med(crash_off, &secs);
    let name = format!(
        "satin.ft.{}.{}.{}p",
        cli.app,
        cli.args.replace(' ', "_"),
        cli.members
    );
    let mut figures = vec![
        Figure::new(
            format!("{name}.crash_free_s"),
            t_free_on,
            "s",
            format!("{what}: crash-free run, saving on"),
        ),
        Figure::new(
            format!("{name}.crash_free_nosave_s"),
            t_free_off,
            "s",
            format!("{what}: crash-free run, saving off"),
        ),
        Figure::new(
            format!("{name}.overhead_pct"),
            (t_free_on / t_free_off - 1.0) * 100.0,
            "%",
            "fault-tolerance overhead without crashes (on / off - 1)",
        ),
        Figure::new(
            format!("{name}.one_crash_s"),
            t_crash_on,
            "s",
            format!("{what}: one member killed at half time, saving on"),
        ),
        Figure::new(
            format!("{name}.one_crash_nosave_s"),
            t_crash_off,
            "s",
            format!("{what}: one member killed at half time, saving off"),
        ),
        Figure::new(
            format!("{name}.saved_pct"),
            (1.0 - t_crash_on / t_crash_off) * 100.0,
            "%",
            "run time saved by orphan saving after the crash (1 - on / off)",
        ),
        Figure::new(
            format!("{name}.detection_ms"),
            med(crash_on, &|r| r.detection_ms),
            "ms",
            "kill to the registry removing the member",
        ),
    ];
    for (key, unit, what) in [
        ("jobs_redone", "jobs", "jobs redone after the crash"),
        ("results_reused", "jobs", "saved results reused"),
        ("orphans_kept", "jobs", "orphan results kept"),
        (
            "recovery_ms",
            "ms",
            "death noticed to the redone jobs queued",
        ),
    ] {
        figures.push(Figure::new(
            format!("{name}.{key}"),
            med(crash_on, &|r| r.key(key)),
            unit,
            format!("{what} (saving on, master's report)"),
        ));
    }
    let lost = med(crash_on, &|r| {
        Some(r.key("work_lost_ms")? / 1e3 / (r.seconds * f64::from(cli.members)) * 100.0)
    });
    figures.push(Figure::new(
        format!("{name}.redone_share_pct"),
        lost,
        "%",
        "work redone as a share of the run (work lost / members x run time)",
    ));
    report(
        &format!(
            "Satin fault tolerance: {what}, {} members x {} workers, {} ({} rounds, medians)",
            cli.members, cli.workers, cli.transport, cli.repeat
        ),
        &figures,
    );
    Ok(())
}
