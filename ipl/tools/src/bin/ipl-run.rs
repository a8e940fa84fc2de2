//! `ipl-run`: launch a pool of N processes around an in-process registry.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::time::Duration;

use clap::Parser;
use ipl_tools::launcher::{launch, LaunchConfig, DEFAULT_GRACE, EXIT_FAILED};

/// Starts an IPL registry in this process and launches N copies of PROGRAM
/// as one closed-world pool. Each process gets IPL_REGISTRY, IPL_POOL,
/// IPL_POOL_SIZE, IPL_POOL_SECRET, IPL_CLUSTER and IPL_RANK; its output
/// lines are prefixed with `[i] `. Exits 0 only if every process exits 0.
#[derive(Parser, Debug)]
#[command(name = "ipl-run", version)]
struct Args {
    /// Number of processes.
    #[arg(short = 'n', long = "processes", value_parser = clap::value_parser!(u32).range(1..))]
    n: u32,
    /// Number of clusters to spread the processes over (process i gets
    /// cluster-(i*C/N)).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    clusters: u32,
    /// Pool name (default: unique per run).
    #[arg(long)]
    pool: Option<String>,
    /// Kill all processes and fail after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// After a process failed, seconds the others get before being killed.
    #[arg(long, default_value_t = DEFAULT_GRACE.as_secs_f64())]
    grace: f64,
    /// The program and its arguments.
    #[arg(required = true, allow_hyphen_values = true, last = true)]
    command: Vec<OsString>,
}

fn seconds(what: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|e| format!("--{what} {s}: {e}"))
}

fn main() {
    ipl_tools::init_tracing("warn");
    let args = Args::parse();
    let mut command = args.command.into_iter();
    let Some(program) = command.next() else {
        eprintln!("ipl-run: no program given");
        std::process::exit(EXIT_FAILED);
    };
    let timeout = match args.timeout.map(|t| seconds("timeout", t)).transpose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("ipl-run: {e}");
            std::process::exit(EXIT_FAILED);
        }
    };
    let grace = match seconds("grace", args.grace) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("ipl-run: {e}");
            std::process::exit(EXIT_FAILED);
        }
    };
    let mut config = LaunchConfig::new(args.n as usize, program, command.collect());
    config.clusters = args.clusters as usize;
    config.pool = args.pool;
    config.timeout = timeout;
    config.grace = grace;
    match launch(&config) {
        Ok(outcome) => {
            let code = outcome.exit_code();
            if code != 0 {
                for (i, end) in outcome.ends.iter().enumerate() {
                    if !end.success() {
                        eprintln!("[ipl-run] process {i}: {end}");
                    }
                }
                if outcome.timed_out {
                    eprintln!("[ipl-run] timed out");
                }
            }
            std::process::exit(code);
        }
        Err(e) => {
            eprintln!("ipl-run: {e}");
            std::process::exit(EXIT_FAILED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::{CommandFactory, Parser};

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
        let a = Args::try_parse_from(["ipl-run", "-n", "3", "--clusters", "2", "--", "prog", "-x"])
            .unwrap();
        assert_eq!((a.n, a.clusters), (3, 2));
        assert_eq!(a.command, vec!["prog", "-x"]);
        assert!(Args::try_parse_from(["ipl-run", "-n", "0", "--", "p"]).is_err());
    }
}
