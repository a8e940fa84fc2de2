//! mpi-bench: the IPL against Open MPI on the same transport, sizes and machine, in
//! one run.
//!
//! ```text
//! mpi-bench latency    --transport shm --sizes 8,1024        [--iters N] [--repeat R]
//! mpi-bench throughput --transport tcp --sizes 65536,1048576 [--mbytes M] [--repeat R]
//! mpi-bench latency    --transport tcp --spin-us 1000000     (polling IPL receivers)
//! ```
//!
//! Each repetition runs `ipl-bench` once (both processes, every size, one repetition:
//! the IPL and its raw baseline) and the project's own MPI program once
//! (`examples/bench/mpi/pingpong.c`, compiled with Open MPI's `mpicc` into a scratch
//! directory, run with `mpirun -n 2`), alternating which goes first. Open MPI uses its
//! shared-memory transport (`vader`) against the IPL's `shm`, and its TCP transport on
//! the loopback interface against `tcp`; both sides are placed by the OS, with the same
//! message sizes, counts and timing (the median of batches of round trips; bytes over
//! the time to the receiver's acknowledgement). MPI receivers always poll; the IPL's
//! poll for `--spin-us` (`IPL_SPIN_US`, default the IPL's own) and then sleep.
//!
//! Figures per size: `ipl.<kind>.<t>.<size>B.<unit>`, `mpi.<kind>.<t>.<size>B.<unit>`,
//! `raw.<kind>.<t>.<size>B.<unit>` (ipl-bench's baseline), each the median of the
//! repetitions, and `ratio.mpi.<kind>.<t>.<size>B`, the median of the per-repetition
//! ratios IPL / Open MPI (round trips: below 1 is faster than Open MPI; streams: above 1
//! is faster).
//!
//! Without Open MPI's compiler it stops and says how to install it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Parser, ValueEnum};
use ibis_bench::{at_least_one, median, mpi, report, Figure};

const PINGPONG_C: &str = include_str!("../../mpi/pingpong.c");

/// Round trips of ipl-bench's, timed in batches of this many (its `BATCH`).
const BATCH: usize = 50;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The IPL against Open MPI on the same transport and sizes, alternating in one run.
#[derive(Parser, Debug)]
#[command(name = "mpi-bench", version)]
struct Cli {
    /// What to measure.
    #[arg(value_enum)]
    kind: Kind,
    /// The transport: shm (against Open MPI's shared memory) or tcp (against its TCP).
    #[arg(long, value_enum, default_value_t = Transport::Shm)]
    transport: Transport,
    /// Message sizes in bytes [default: latency 8,1024; throughput 65536,1048576].
    #[arg(long, value_name = "N,N", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(0..=1 << 30))]
    sizes: Vec<u32>,
    /// Round trips per size and repetition (a quarter, at least 100, from 64 KiB up).
    #[arg(long, value_name = "N", default_value_t = 5_000, value_parser = at_least_one)]
    iters: usize,
    /// MiB streamed per size and repetition.
    #[arg(long, value_name = "M", default_value_t = 256, value_parser = at_least_one)]
    mbytes: usize,
    /// Repetitions, alternating the IPL and Open MPI; each figure is the median.
    #[arg(long, value_name = "R", default_value_t = 5, value_parser = at_least_one)]
    repeat: usize,
    /// Microseconds an IPL receiver polls before it sleeps (`IPL_SPIN_US`); large
    /// values make polling receivers, as MPI's.
    #[arg(long, value_name = "US")]
    spin_us: Option<u64>,
    /// The ipl-bench binary [default: the one beside this program].
    #[arg(long, value_name = "PATH")]
    ipl_bench: Option<PathBuf>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    Latency,
    Throughput,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Transport {
    Shm,
    Tcp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Latency => "latency",
            Kind::Throughput => "throughput",
        }
    }
    fn suffix(self) -> &'static str {
        match self {
            Kind::Latency => "rtt_us",
            Kind::Throughput => "MBps",
        }
    }
    fn unit(self) -> &'static str {
        match self {
            Kind::Latency => "us",
            Kind::Throughput => "MB/s",
        }
    }
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
        }
    }
    /// Open MPI's byte transfer layers for the same medium.
    fn btl(self) -> &'static str {
        match self {
            Transport::Shm => "self,vader",
            Transport::Tcp => "self,tcp",
        }
    }
    fn mpi_name(self) -> &'static str {
        match self {
            Transport::Shm => "shared memory (vader)",
            Transport::Tcp => "TCP over lo",
        }
    }
}

fn main() {
    ipl_tools::init_tracing("warn");
    let mut cli = Cli::parse();
    if cli.sizes.is_empty() {
        cli.sizes = match cli.kind {
            Kind::Latency => vec![8, 1024],
            Kind::Throughput => vec![65536, 1 << 20],
        };
    }
    ibis_bench::exit_on_error("mpi-bench", run(&cli));
}

/// The ipl-bench binary to run.
fn ipl_bench(cli: &Cli) -> Res<PathBuf> {
    let p = match &cli.ipl_bench {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("ipl-bench"),
    };
    if !p.is_file() {
        return Err(format!(
            "no ipl-bench at {} (build it: cargo build --release -p ibis-bench, or give --ipl-bench)",
            p.display()
        )
        .into());
    }
    Ok(p)
}

/// One figure per size from `name value unit` lines: those named `prefix.<size>B.suffix`.
fn parse_figures(out: &str, prefix: &str, suffix: &str, sizes: &[u32]) -> Res<Vec<f64>> {
    let found: HashMap<&str, f64> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (n, v) = (f.next()?, f.next()?.parse().ok()?);
            Some((n, v))
        })
        .collect();
    sizes
        .iter()
        .map(|s| {
            let name = format!("{prefix}.{s}B.{suffix}");
            found
                .get(name.as_str())
                .copied()
                .ok_or_else(|| format!("no figure {name} in:\n{out}").into())
        })
        .collect()
}

/// One ipl-bench run: the IPL's and the raw baseline's figure per size.
fn run_ipl(cli: &Cli, exe: &Path) -> Res<(Vec<f64>, Vec<f64>)> {
    let sizes: Vec<String> = cli.sizes.iter().map(u32::to_string).collect();
    let mut c = Command::new(exe);
    c.arg(cli.kind.name())
        .args(["--transport", cli.transport.name()])
        .args(["--sizes", &sizes.join(",")])
        .args(["--iters", &cli.iters.to_string()])
        .args(["--mbytes", &cli.mbytes.to_string()])
        .args(["--repeat", "1"]);
    if let Some(us) = cli.spin_us {
        c.env("IPL_SPIN_US", us.to_string());
    }
    let out = c.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "ipl-bench failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let (k, t, s) = (cli.kind.name(), cli.transport.name(), cli.kind.suffix());
    let ipl = parse_figures(&stdout, &format!("ipl.{k}.{t}"), s, &cli.sizes)?;
    let raw = parse_figures(&stdout, &format!("raw.{k}.{t}"), s, &cli.sizes)?;
    Ok((ipl, raw))
}

/// One `mpirun -n 2` of the reference program: its figure per size.
fn run_mpi(cli: &Cli, exe: &Path) -> Res<Vec<f64>> {
    let mut c = mpi::mpirun(2, cli.transport.btl());
    c.arg(exe).arg(cli.kind.name());
    match cli.kind {
        Kind::Latency => c.arg(cli.iters.to_string()).arg(BATCH.to_string()),
        Kind::Throughput => c.arg(cli.mbytes.to_string()),
    };
    c.args(cli.sizes.iter().map(u32::to_string));
    let out = c.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            mpi::MPIRUN,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    // Lines "<kind> SIZE VALUE".
    let found: HashMap<u32, f64> = stdout
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            if f.next()? != cli.kind.name() {
                return None;
            }
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    cli.sizes
        .iter()
        .map(|s| {
            found.get(s).copied().ok_or_else(|| {
                format!("the MPI program printed no figure for {s} B:\n{stdout}").into()
            })
        })
        .collect()
}

fn run(cli: &Cli) -> Res<()> {
    let bench = ipl_bench(cli)?;
    let dir = std::env::temp_dir().join(format!("mpi-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let built = mpi::compile(&dir, "pingpong", PINGPONG_C);
    let exe = match built {
        Ok(exe) => exe,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("the Open MPI reference cannot be built: {e}").into());
        }
    };
    let n = cli.sizes.len();
    let (mut ipl_v, mut raw_v, mut mpi_v, mut ratio_v) = (
        vec![vec![]; n],
        vec![vec![]; n],
        vec![vec![]; n],
        vec![vec![]; n],
    );
    let result = (|| -> Res<()> {
        for r in 0..cli.repeat {
            eprintln!("mpi-bench: repetition {}/{}", r + 1, cli.repeat);
            // Alternate which goes first, so that a drift of the machine touches both.
            let (ipl, raw, m) = if r % 2 == 0 {
                let (i, w) = run_ipl(cli, &bench)?;
                (i, w, run_mpi(cli, &exe)?)
            } else {
                let m = run_mpi(cli, &exe)?;
                let (i, w) = run_ipl(cli, &bench)?;
                (i, w, m)
            };
            for i in 0..n {
                ipl_v[i].push(ipl[i]);
                raw_v[i].push(raw[i]);
                mpi_v[i].push(m[i]);
                ratio_v[i].push(ipl[i] / m[i].max(1e-9));
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    let (k, t, s, u) = (
        cli.kind.name(),
        cli.transport.name(),
        cli.kind.suffix(),
        cli.kind.unit(),
    );
    let what = match cli.kind {
        Kind::Latency => "round trip",
        Kind::Throughput => "stream",
    };
    let better = match cli.kind {
        Kind::Latency => "below 1: faster",
        Kind::Throughput => "above 1: faster",
    };
    let mut figs = Vec::new();
    for (i, size) in cli.sizes.iter().enumerate() {
        figs.push(Figure::new(
            format!("ipl.{k}.{t}.{size}B.{s}"),
            median(&ipl_v[i]),
            u,
            format!("IPL {t} {size} B {what}"),
        ));
        figs.push(Figure::new(
            format!("mpi.{k}.{t}.{size}B.{s}"),
            median(&mpi_v[i]),
            u,
            format!("Open MPI {} {size} B {what}", cli.transport.mpi_name()),
        ));
        figs.push(Figure::new(
            format!("raw.{k}.{t}.{size}B.{s}"),
            median(&raw_v[i]),
            u,
            format!("raw baseline {size} B {what} (ipl-bench's)"),
        ));
        figs.push(Figure::new(
            format!("ratio.mpi.{k}.{t}.{size}B"),
            median(&ratio_v[i]),
            "x",
            format!("IPL / Open MPI, {size} B ({better})"),
        ));
    }
    report(
        &format!(
            "mpi-bench {k}: IPL {t} against Open MPI {}, two processes placed by the OS; \
             IPL receivers poll {} us then sleep, MPI's poll; median of {} alternating \
             repetitions",
            cli.transport.mpi_name(),
            cli.spin_us
                .map(|u| u.to_string())
                .or_else(|| std::env::var("IPL_SPIN_US").ok())
                .unwrap_or_else(|| "50".into()),
            cli.repeat
        ),
        &figs,
    );
    Ok(())
}
