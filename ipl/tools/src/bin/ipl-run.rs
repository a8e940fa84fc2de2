//! `ipl-run`: launch a pool of N processes around an in-process registry.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::time::Duration;

use clap::Parser;
use ipl_tools::cluster_launcher::{self, ClusterLaunch};
use ipl_tools::launcher::{
    exec_guarded, launch, LaunchConfig, DEFAULT_GRACE, DEFAULT_MAX_PROCESSES, DEFAULT_REMOVE_GRACE,
    EXIT_FAILED, GUARD_ARG, MAX_MAX_PROCESSES,
};

/// Starts an IPL registry in this process and launches N copies of PROGRAM
/// as one closed-world pool. Each process gets IPL_REGISTRY, IPL_POOL,
/// IPL_POOL_SIZE, IPL_POOL_SECRET, IPL_CLUSTER and IPL_RANK; its output
/// lines are prefixed with `[i] `. Exits 0 only if every process exits 0; when one
/// fails (exits non-zero or is killed by a signal) the others get --grace seconds and
/// are then killed, unless --keep-going.
///
/// With --keep-going (for programs that survive crashes, such as Satin) a process
/// that fails is reported on stderr (`[ipl-run] process R failed (STATUS)`) and the
/// others keep running; ipl-run then exits 0 if no process exited with a non-zero
/// status (a process killed by a signal ipl-run did not send counts as a crash the
/// program survived) and at least one process exited 0, else 1.
///
/// With --launcher 'srun -n 8' (or 'mpirun -n 8', 'mpiexec -n 8') the cluster's
/// launcher starts the processes instead: ipl-run runs the registry on an address
/// the other hosts reach and passes IPL_REGISTRY, IPL_POOL and IPL_POOL_SECRET
/// down; each process takes its rank, the pool size and its cluster (its node)
/// from the launcher. ipl-run then exits with the launcher's status.
///
/// With --malleable the pool is an open world that grows and shrinks while it runs:
/// instead of IPL_POOL_SIZE each process gets IPL_POOL_MALLEABLE=1,
/// IPL_POOL_INITIAL_SIZE=N and IPL_RUN_CONTROL, the path of a Unix socket (in a
/// directory private to the user, removed when ipl-run ends) on which a process asks,
/// one line each: `add K [CLUSTER]` (start K more processes with the next ranks;
/// answer `ok RANK...`), `remove RANK` (SIGTERM to that process, which should leave
/// and exit 0; answer `ok`), `list` (answer `ok RANK:CLUSTER:PID:STATE...`); anything
/// else is answered `error REASON`. A process that exits 0 early has left; ipl-run
/// exits 0 when every process exited 0 or, removed on request, by that SIGTERM.
///
/// SIGTERM or SIGINT to ipl-run stops the processes (SIGTERM, SIGKILL 5 s later)
/// and ipl-run exits with status 143; if ipl-run is killed, its processes are killed
/// too (Linux).
#[derive(Parser, Debug)]
#[command(name = "ipl-run", version)]
struct Args {
    /// Number of processes (without --launcher).
    #[arg(short = 'n', long = "processes", value_parser = clap::value_parser!(u32).range(1..),
          required_unless_present = "launcher", conflicts_with = "launcher")]
    n: Option<u32>,
    /// Number of clusters to spread the processes over (process i gets
    /// cluster-(i*C/N)); under --launcher each process's cluster is its node.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..),
          conflicts_with = "launcher")]
    clusters: u32,
    /// A cluster's launcher command that starts the processes, split as a shell
    /// would: 'srun -N 3 -n 6', 'mpirun -n 4', 'mpiexec -n 4'.
    #[arg(long)]
    launcher: Option<String>,
    /// With --launcher: where the registry server listens [default: 0.0.0.0:0,
    /// every interface, any port].
    #[arg(long)]
    registry_bind: Option<std::net::SocketAddr>,
    /// With --launcher: the address the processes reach the registry at
    /// (default: the bound address, else this host's first non-loopback address).
    #[arg(long)]
    registry_address: Option<std::net::IpAddr>,
    /// Pool name (default: unique per run).
    #[arg(long)]
    pool: Option<String>,
    /// Kill all processes and fail after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// After a process failed, seconds the others get before being killed
    /// (without --launcher).
    #[arg(long, default_value_t = DEFAULT_GRACE.as_secs_f64())]
    grace: f64,
    /// When a process fails, report it and let the others run on (no --grace);
    /// exit 0 if none exited non-zero and one exited 0 (without --launcher).
    #[arg(long, conflicts_with = "launcher")]
    keep_going: bool,
    /// An open-world pool that grows and shrinks on the processes' requests through
    /// the control socket IPL_RUN_CONTROL (without --launcher).
    #[arg(long, conflicts_with = "launcher")]
    malleable: bool,
    /// With --malleable: the most processes running at once; an `add` beyond it is
    /// refused [default: 64].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_MAX_PROCESSES as i64))]
    max_processes: Option<u32>,
    /// With --malleable: seconds a process removed on request gets to leave after its
    /// SIGTERM before it is killed (and counted as failed) [default: 30].
    #[arg(long)]
    remove_grace: Option<f64>,
    /// The program and its arguments.
    #[arg(required = true, allow_hyphen_values = true, last = true)]
    command: Vec<OsString>,
}

impl Args {
    /// `--max-processes`, or its default.
    fn max_processes(&self) -> usize {
        self.max_processes
            .map_or(DEFAULT_MAX_PROCESSES, |m| m as usize)
    }

    /// What clap does not check: the registry options belong to --launcher, the
    /// malleable ones to --malleable.
    fn check(&self) -> Result<(), String> {
        if self.launcher.is_none()
            && (self.registry_bind.is_some() || self.registry_address.is_some())
        {
            return Err("--registry-bind and --registry-address need --launcher".into());
        }
        if !self.malleable && (self.max_processes.is_some() || self.remove_grace.is_some()) {
            return Err("--max-processes and --remove-grace need --malleable".into());
        }
        let max = self.max_processes();
        if let Some(n) = self.n.filter(|&n| self.malleable && n as usize > max) {
            return Err(format!("-n {n} is more than --max-processes {max}"));
        }
        Ok(())
    }
}

/// `eprintln!` that never panics: a closed stderr (`ipl-run ... 2>&1 | head`) loses
/// the message instead of ending `ipl-run` with a panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

fn seconds(what: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|e| format!("--{what} {s}: {e}"))
}

/// `ipl-run --ipl-run-guarded-exec PARENT -- PROGRAM ARGS...`: how `ipl-run` starts
/// each process of a local pool ([`exec_guarded`]); never returns if it works.
fn guarded_exec(args: &[OsString]) -> ! {
    let parent = args.first().and_then(|p| p.to_str()?.parse::<u32>().ok());
    match (parent, args.get(1).map(|s| s == "--"), args.get(2)) {
        (Some(parent), Some(true), Some(program)) => {
            let e = exec_guarded(parent, program, &args[3..]);
            say!("ipl-run: could not start {program:?}: {e}");
            // As a shell does for a program it cannot run.
            std::process::exit(127);
        }
        _ => {
            say!("ipl-run: {GUARD_ARG} PARENT-PID -- PROGRAM ARGS... (internal)");
            std::process::exit(2);
        }
    }
}

fn main() {
    let raw: Vec<OsString> = std::env::args_os().collect();
    if raw.get(1).is_some_and(|a| a == GUARD_ARG) {
        guarded_exec(&raw[2..]);
    }
    ipl_tools::init_tracing("warn");
    let args = Args::parse();
    if let Err(e) = args.check() {
        say!("ipl-run: {e}");
        std::process::exit(EXIT_FAILED);
    }
    let max_processes = args.max_processes();
    let mut command = args.command.into_iter();
    let Some(program) = command.next() else {
        say!("ipl-run: no program given");
        std::process::exit(EXIT_FAILED);
    };
    let timeout = match args.timeout.map(|t| seconds("timeout", t)).transpose() {
        Ok(t) => t,
        Err(e) => {
            say!("ipl-run: {e}");
            std::process::exit(EXIT_FAILED);
        }
    };
    let (grace, remove_grace) = match (
        seconds("grace", args.grace),
        args.remove_grace
            .map_or(Ok(DEFAULT_REMOVE_GRACE), |r| seconds("remove-grace", r)),
    ) {
        (Ok(g), Ok(r)) => (g, r),
        (Err(e), _) | (_, Err(e)) => {
            say!("ipl-run: {e}");
            std::process::exit(EXIT_FAILED);
        }
    };
    if let Some(text) = &args.launcher {
        let launcher = match cluster_launcher::split_launcher(text) {
            Ok(l) => l,
            Err(e) => {
                say!("ipl-run: {e}");
                std::process::exit(EXIT_FAILED);
            }
        };
        let mut config = ClusterLaunch::new(launcher, program, command.collect());
        config.pool = args.pool;
        config.timeout = timeout;
        if let Some(b) = args.registry_bind {
            config.registry_bind = b;
        }
        config.registry_address = args.registry_address;
        match cluster_launcher::run(&config) {
            Ok(outcome) => {
                let code = outcome.exit_code();
                if code != 0 {
                    say!(
                        "[ipl-run] the launcher ended with {}",
                        outcome
                            .status
                            .map_or_else(|| "no status (killed)".to_owned(), |s| s.to_string())
                    );
                }
                std::process::exit(code);
            }
            Err(e) => {
                say!("ipl-run: {e}");
                std::process::exit(EXIT_FAILED);
            }
        }
    }
    let n = args.n.unwrap_or(1);
    let mut config = LaunchConfig::new(n as usize, program, command.collect());
    config.clusters = args.clusters as usize;
    config.pool = args.pool;
    config.timeout = timeout;
    config.grace = grace;
    config.malleable = args.malleable;
    config.max_processes = max_processes;
    config.remove_grace = remove_grace;
    config.keep_going = args.keep_going;
    // Each process is started through this binary, which makes it die with ipl-run.
    match std::env::current_exe() {
        Ok(exe) => config.guard = Some(exe),
        Err(e) => say!("[ipl-run] the processes will outlive a kill of ipl-run: {e}"),
    }
    match launch(&config) {
        Ok(outcome) => {
            let code = outcome.exit_code();
            if code != 0 {
                for (i, end) in outcome.ends.iter().enumerate() {
                    if !end.success() {
                        say!("[ipl-run] process {i}: {end}");
                    }
                }
                if outcome.timed_out {
                    say!("[ipl-run] timed out");
                }
                if outcome.interrupted {
                    say!("[ipl-run] interrupted");
                }
            }
            std::process::exit(code);
        }
        Err(e) => {
            say!("ipl-run: {e}");
            std::process::exit(EXIT_FAILED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Args, DEFAULT_MAX_PROCESSES};
    use clap::{CommandFactory, Parser};

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
        let a = Args::try_parse_from(["ipl-run", "-n", "3", "--clusters", "2", "--", "prog", "-x"])
            .unwrap();
        assert_eq!((a.n, a.clusters), (Some(3), 2));
        assert_eq!(a.command, vec!["prog", "-x"]);
        assert!(Args::try_parse_from(["ipl-run", "-n", "0", "--", "p"]).is_err());
        assert!(
            Args::try_parse_from(["ipl-run", "--", "p"]).is_err(),
            "-n or --launcher"
        );
        let a = Args::try_parse_from([
            "ipl-run",
            "--launcher",
            "srun -N 3 -n 6",
            "--registry-address",
            "10.0.0.1",
            "--",
            "fib",
            "30",
        ])
        .unwrap();
        assert_eq!(a.launcher.as_deref(), Some("srun -N 3 -n 6"));
        assert_eq!(a.registry_address, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(a.registry_bind, None);
        assert!(
            Args::try_parse_from(["ipl-run", "-n", "2", "--launcher", "srun", "--", "p"]).is_err(),
            "-n and --launcher exclude each other"
        );
        assert!(
            Args::try_parse_from([
                "ipl-run",
                "-n",
                "2",
                "--registry-bind",
                "0.0.0.0:1",
                "--",
                "p"
            ])
            .unwrap()
            .check()
            .is_err(),
            "--registry-bind needs --launcher"
        );
        let a = Args::try_parse_from([
            "ipl-run",
            "--malleable",
            "-n",
            "2",
            "--max-processes",
            "8",
            "--remove-grace",
            "3",
            "--",
            "p",
        ])
        .unwrap();
        assert!(a.malleable && a.check().is_ok());
        assert_eq!((a.max_processes(), a.remove_grace), (8, Some(3.0)));
        let a = Args::try_parse_from(["ipl-run", "--malleable", "-n", "2", "--", "p"]).unwrap();
        assert_eq!(a.max_processes(), DEFAULT_MAX_PROCESSES);
        assert!(!a.keep_going, "explicit only");
        let a = Args::try_parse_from(["ipl-run", "--keep-going", "-n", "2", "--", "p"]).unwrap();
        assert!(a.keep_going && a.check().is_ok());
        let refused: &[&[&str]] = &[
            &["ipl-run", "--malleable", "--launcher", "srun", "--", "p"],
            &["ipl-run", "-n", "2", "--max-processes", "0", "--", "p"],
            &["ipl-run", "-n", "2", "--max-processes", "1025", "--", "p"],
            &["ipl-run", "--keep-going", "--launcher", "srun", "--", "p"],
        ];
        for argv in refused {
            assert!(Args::try_parse_from(*argv).is_err(), "{argv:?}");
        }
        let unchecked: &[&[&str]] = &[
            &["ipl-run", "-n", "2", "--max-processes", "8", "--", "p"],
            &["ipl-run", "-n", "2", "--remove-grace", "1", "--", "p"],
            &[
                "ipl-run",
                "--malleable",
                "-n",
                "9",
                "--max-processes",
                "8",
                "--",
                "p",
            ],
        ];
        for argv in unchecked {
            assert!(
                Args::try_parse_from(*argv).unwrap().check().is_err(),
                "{argv:?}"
            );
        }
    }
}
