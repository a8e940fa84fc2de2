//! Speedup of a Satin application on a pool of processes, measured the way `ipl-bench`
//! measures transports: R repetitions that alternate a 1-process run (1 worker) and a
//! P-process run (`ipl-run`-style pool, 1 worker each) of the same application, so that
//! both see the same machine state. Prints a table and `name value unit` lines: the
//! median times and the median of the per-repetition speedups.
//!
//! Usage: `satin-speedup [--repeat R] [--processes P] [--clusters C] APP ARGS...`
//! (APP as for `satin-app`; e.g. `satin-speedup --repeat 5 nqueens 14`).

#![forbid(unsafe_code)]

use clap::Parser;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use ipl_tools::launcher::{launch, LaunchConfig};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Speedup of a Satin application: alternating 1-process and P-process runs.
#[derive(Parser, Debug)]
#[command(name = "satin-speedup")]
struct Cli {
    /// Repetitions (each a 1-process and a P-process run).
    #[arg(long, value_name = "R", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
    /// Processes of the pool run.
    #[arg(long, value_name = "P", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    processes: u64,
    /// Clusters of the pool run.
    #[arg(long, value_name = "C", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    clusters: u64,
    /// The application, as for `satin-app` (e.g. `nqueens`).
    app: String,
    /// The application's arguments, passed on as they are (e.g. `14`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

fn main() -> std::process::ExitCode {
    ipl_tools::init_tracing("warn");
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("satin-speedup: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn seconds(report: &PathBuf) -> Res<f64> {
    let text = std::fs::read_to_string(report)?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("seconds = "))
        .ok_or("no time in the report")?;
    if !text.contains("check = ok") {
        return Err(format!("the run's check did not pass: {text}").into());
    }
    Ok(line.trim().parse()?)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn run(cli: Cli) -> Res<()> {
    let args: Vec<String> = std::iter::once(cli.app).chain(cli.args).collect();
    // The transport between the processes: IPL_TRANSPORT, else TCP (as between hosts).
    let transport = std::env::var("IPL_TRANSPORT").unwrap_or_else(|_| "tcp".into());
    let repeat = usize::try_from(cli.repeat)?;
    let processes = usize::try_from(cli.processes)?;
    let clusters = usize::try_from(cli.clusters)?;
    let app = std::env::current_exe()?
        .parent()
        .ok_or("no directory")?
        .join("satin-app");
    let dir = std::env::temp_dir().join(format!("satin-speedup-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (one, many) = (dir.join("one"), dir.join("many"));
    let with = |report: &PathBuf| {
        let mut a = args.clone();
        a.extend([
            "--workers".into(),
            "1".into(),
            "--check".into(),
            "--report".into(),
        ]);
        a.push(report.display().to_string());
        a
    };
    let (a1, ap) = (with(&one), with(&many));
    let (mut t1, mut tp, mut sp) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..repeat {
        let out = Command::new(&app).args(&a1).output()?;
        if !out.status.success() {
            return Err(format!(
                "1-process run failed: {}",
                String::from_utf8_lossy(&out.stdout)
            )
            .into());
        }
        let s1 = seconds(&one)?;
        let mut cfg =
            LaunchConfig::new(processes, app.clone(), ap.iter().map(Into::into).collect());
        cfg.clusters = clusters;
        cfg.timeout = Some(Duration::from_secs(1800));
        cfg.env = vec![("IPL_TRANSPORT".into(), transport.clone().into())];
        let o = launch(&cfg)?;
        if o.exit_code() != 0 {
            return Err(format!("pool run failed: {o:?}").into());
        }
        let s2 = seconds(&many)?;
        eprintln!("repetition {rep}: 1 process {s1:.3} s, {processes} processes {s2:.3} s");
        t1.push(s1);
        tp.push(s2);
        sp.push(s1 / s2);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let name = args.join("_").replace(['.', ' '], "_");
    let what = args.join(" ");
    let p = processes;
    println!(
        "# satin-speedup {what}: 1 process x 1 worker against {p} processes x 1 worker \
         ({clusters} clusters, ipl-run pool over {transport} on this host, default policy), \
         median of {repeat} alternating repetitions"
    );
    println!("{:<44} {:>10}  unit", "measurement", "value");
    println!(
        "{:<44} {:>10.3}  s",
        format!("{what}, 1 process"),
        median(&t1)
    );
    println!(
        "{:<44} {:>10.3}  s",
        format!("{what}, {p} processes"),
        median(&tp)
    );
    println!(
        "{:<44} {:>10.3}  x",
        format!(
            "speedup (range {:.2}..{:.2})",
            sp.iter().cloned().fold(f64::INFINITY, f64::min),
            sp.iter().cloned().fold(0.0, f64::max)
        ),
        median(&sp)
    );
    println!();
    println!("satin.{name}.1proc_s {:.3} s", median(&t1));
    println!("satin.{name}.{p}proc_s {:.3} s", median(&tp));
    println!("satin.{name}.speedup_{p}proc {:.3} x", median(&sp));
    Ok(())
}
