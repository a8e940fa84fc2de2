//! pool-bench: how long a pool of N processes takes to form on this machine.
//!
//! For each N of `--members`, the benchmark starts a registry server (in this process,
//! on 127.0.0.1) and N copies of itself as members, with the environment `ipl-run`
//! gives its children. Each member builds an [`Ibis`] from that environment (loading
//! the transport plugins, creating an endpoint for a one-to-one port type, joining the
//! pool), waits until the pool is closed, prints when it started joining and when it saw
//! the pool closed (wall clock, shared by the processes of one host), and leaves.
//!
//! Figures per N (medians of `--repeat` runs):
//! - `pool.startup.<N>.join_to_closed_ms`: from the first member starting to join to
//!   the last member seeing the closed world: what the registry and the members' set-up
//!   cost, without process creation;
//! - `pool.startup.<N>.spawn_to_closed_ms`: from starting the registry server and the
//!   first process to the last member seeing the closed world;
//! - `pool.startup.<N>.total_ms`: from starting the registry server and the first
//!   process to the last one's exit (after `leave`);
//! - `mpi.startup.<N>.total_ms`: the reference, Open MPI's `mpirun -n N` of a program
//!   that does `MPI_Init`, `MPI_Barrier` and `MPI_Finalize` (`startup.c` beside this
//!   benchmark, compiled with `mpicc.openmpi` at run time, `ibis_bench::mpi`); left out, with the reason,
//!   where Open MPI or its compiler is missing;
//! - `ratio.startup.<N>.total`: ours over Open MPI's.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use ibis_bench::{median, mpi, ping_pong_capabilities, report, Children, Figure};
use ipl::{Ibis, PortCapabilities, PortType};
use ipl_auth::PoolSecret;
use ipl_registry::RegistryServer;
use ipl_tools::launcher::PoolEnv;

/// The reference program: MPI_Init, a barrier, MPI_Finalize.
const MPI_STARTUP_C: &str = include_str!("../../mpi/startup.c");

/// How long a pool may take to form before the benchmark gives up on it.
const POOL_TIMEOUT: Duration = Duration::from_secs(300);

/// Pool start-up time: N processes joining a registry until the pool is closed.
#[derive(Parser, Debug)]
#[command(name = "pool-bench", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Pool sizes to measure.
    #[arg(long, value_delimiter = ',', default_value = "4,16,64", value_parser = clap::value_parser!(u32).range(1..=1024))]
    members: Vec<u32>,
    /// Runs per pool size (the figures are medians).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One member of a measured pool (started by the benchmark itself).
    #[command(name = "__member", hide = true)]
    Member,
}

fn main() {
    ipl_tools::init_tracing("warn");
    let cli = Cli::parse();
    let r = match cli.cmd {
        Some(Cmd::Member) => member(),
        None => measure(&cli),
    };
    ibis_bench::exit_on_error("pool-bench", r);
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Microseconds since the epoch.
fn epoch_us(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros())
}

/// A member: join from the environment, wait for the closed world, report, leave.
fn member() -> Res<()> {
    let started = SystemTime::now();
    let t = PortType::new(ping_pong_capabilities(PortCapabilities::SERIALIZATION_BYTE))?;
    let ibis = Ibis::builder().from_env()?.port_type(t).build()?;
    ibis.registry().wait_until_pool_closed(Some(POOL_TIMEOUT))?;
    let closed = SystemTime::now();
    println!("closed {} {}", epoch_us(started), epoch_us(closed));
    ibis.end()?;
    Ok(())
}

/// One pool's timings, in ms.
struct Run {
    join_to_closed: f64,
    spawn_to_closed: f64,
    total: f64,
}

/// Forms one pool of `n` members and times it.
fn run_pool(n: u32, pool: &str) -> Res<Run> {
    let exe = std::env::current_exe()?;
    // The registry's start counts too (mpirun's daemon start counts in the reference).
    let t0_wall = SystemTime::now();
    let t0 = Instant::now();
    let secret = PoolSecret::generate()?;
    let server = RegistryServer::bind("127.0.0.1:0", secret.clone())?.run_in_background()?;
    let mut children = Children(Vec::with_capacity(n as usize));
    for rank in 0..n {
        let child = Command::new(&exe)
            .arg("__member")
            .envs(
                PoolEnv::member(
                    server.local_addr(),
                    pool,
                    n as usize,
                    &secret,
                    "cluster-0",
                    rank as usize,
                )
                .vars(),
            )
            .stdout(Stdio::piped())
            .spawn()?;
        children.0.push(child);
    }
    let mut first_join = u128::MAX;
    let mut last_closed = 0u128;
    for c in &mut children.0 {
        let out = c.stdout.take().ok_or("a member has no standard output")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        let mut f = line.split_whitespace();
        let (Some("closed"), Some(a), Some(b)) = (f.next(), f.next(), f.next()) else {
            return Err(format!("a member reported {line:?}, not its timings").into());
        };
        first_join = first_join.min(a.parse()?);
        last_closed = last_closed.max(b.parse()?);
    }
    for c in &mut children.0 {
        let st = c.wait()?;
        if !st.success() {
            return Err(format!("a member failed: {st}").into());
        }
    }
    let total = t0.elapsed();
    let ms = |us: u128| us as f64 / 1e3;
    Ok(Run {
        join_to_closed: ms(last_closed.saturating_sub(first_join)),
        spawn_to_closed: ms(last_closed.saturating_sub(epoch_us(t0_wall))),
        total: total.as_secs_f64() * 1e3,
    })
}

/// One `mpirun -n n` of the reference program, in ms.
fn run_mpi(exe: &Path, n: u32) -> Result<f64, String> {
    let t0 = Instant::now();
    let out = mpi::mpirun(n, "self,vader,tcp")
        .arg(exe)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", mpi::MPIRUN))?;
    if !out.status.success() {
        return Err(format!(
            "{} -n {n} failed: {}",
            mpi::MPIRUN,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

fn measure(cli: &Cli) -> Res<()> {
    let tmp = std::env::temp_dir().join(format!("pool-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let mpi = mpi::compile(&tmp, "startup", MPI_STARTUP_C);
    if let Err(why) = &mpi {
        tracing::warn!("the Open MPI reference is left out: {why}");
    }
    let mut figs = Vec::new();
    for &n in &cli.members {
        let (mut j, mut s, mut t, mut m) = (vec![], vec![], vec![], vec![]);
        for r in 0..cli.repeat {
            eprintln!("pool-bench: {n} members, run {}/{}", r + 1, cli.repeat);
            // Ours and the reference alternate, so that a drift touches both.
            let run = run_pool(n, &format!("pool-bench-{}-{n}-{r}", std::process::id()))?;
            j.push(run.join_to_closed);
            s.push(run.spawn_to_closed);
            t.push(run.total);
            if let Ok(exe) = &mpi {
                match run_mpi(exe, n) {
                    Ok(ms) => m.push(ms),
                    Err(why) => tracing::warn!("the Open MPI reference failed: {why}"),
                }
            }
        }
        figs.push(Figure::new(
            format!("pool.startup.{n}.join_to_closed_ms"),
            median(&j),
            "ms",
            format!("{n} members: first join to the last seeing the closed world"),
        ));
        figs.push(Figure::new(
            format!("pool.startup.{n}.spawn_to_closed_ms"),
            median(&s),
            "ms",
            format!("{n} members: first process start to the last seeing the closed world"),
        ));
        figs.push(Figure::new(
            format!("pool.startup.{n}.total_ms"),
            median(&t),
            "ms",
            format!("{n} members: first process start to the last exit"),
        ));
        if !m.is_empty() {
            figs.push(Figure::new(
                format!("mpi.startup.{n}.total_ms"),
                median(&m),
                "ms",
                format!("Open MPI: mpirun -n {n} of MPI_Init + MPI_Barrier + MPI_Finalize"),
            ));
            figs.push(Figure::new(
                format!("ratio.startup.{n}.total"),
                median(&t) / median(&m),
                "x",
                format!("{n} members: ours / Open MPI's, total"),
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    report(
        "pool start-up on this machine (members on 127.0.0.1, registry in this process)",
        &figs,
    );
    Ok(())
}
