//! `ipl-run --launcher 'srun -N 3 -n 6' -- PROGRAM ARGS`: a pool started by a
//! cluster's own launcher (Slurm `srun`, Open MPI `mpirun`, MPICH `mpiexec`).
//!
//! `ipl-run` starts the registry server in itself, bound to
//! [`ClusterLaunch::registry_bind`] (default: every interface, any port), makes a fresh
//! pool secret and pool name, and runs `LAUNCHER... PROGRAM ARGS...` with
//! `IPL_REGISTRY` (the [advertised address](advertised_address) and the server's
//! port), `IPL_POOL` and `IPL_POOL_SECRET` in its environment. Slurm and Hydra pass the
//! environment on to every task by default; Open MPI passes only what `-x VAR` names,
//! so for Open MPI's launcher ([`family`]) `ipl-run` inserts `-x` for each of them
//! (and for every `IPL_*`, `SATIN_*` and `RUST_LOG` variable of its own environment).
//! No shared file system and no manual step: the secret travels in the environment
//! (named, not valued, on `mpirun`'s command line).
//!
//! Each process then reads its rank and the pool size from its launcher's variables
//! (`ipl::launcher`: a closed world of the launcher's size) and its cluster from its
//! node. `ipl-run` forwards the launcher's output as it is (the launcher already
//! gathers its tasks' output), exits with the launcher's status, and on `--timeout`,
//! SIGTERM or SIGINT stops the launcher: SIGTERM first (`srun` and `mpirun` then stop
//! their tasks), SIGKILL after [`STOP_GRACE`].

use std::ffi::{OsStr, OsString};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_registry::RegistryServer;

use crate::launcher::{unique_pool_name, ENV_POOL, ENV_REGISTRY, ENV_SECRET, EXIT_TIMEOUT};

/// How long the launcher gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long `LAUNCHER --version` may take when `ipl-run` asks which MPI it is.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the launcher is polled.
const POLL: Duration = Duration::from_millis(20);

/// Variables of `ipl-run`'s own environment passed on to the tasks too (with `-x` for
/// Open MPI): these prefixes, and [`FORWARDED_NAMES`].
pub const FORWARDED_PREFIXES: &[&str] = &["IPL_", "SATIN_"];
/// Single variables passed on like [`FORWARDED_PREFIXES`].
pub const FORWARDED_NAMES: &[&str] = &["RUST_LOG"];

/// Variables of `ipl-run`'s environment that describe one process of another pool and
/// must not reach the tasks (each task's own launcher gives its rank, size and node).
pub const REMOVED: &[&str] = &[
    "IPL_POOL_SIZE",
    "IPL_RANK",
    "IPL_CLUSTER",
    "IPL_POOL_MALLEABLE",
    "IPL_POOL_INITIAL_SIZE",
    "IPL_RUN_CONTROL",
];

/// Which kind of launcher a command is, as far as passing the environment goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Open MPI's `mpirun`/`mpiexec`/`orterun`: passes only the variables `-x` names.
    OpenMpi,
    /// Slurm's `srun`, MPICH's Hydra and the rest: pass the whole environment.
    Other,
}

/// Which family a launcher program belongs to: a name ending in `.openmpi` is Open
/// MPI's; `mpirun`, `mpiexec`, `orterun` (Debian's alternatives links, which may point
/// at either MPI) are Open MPI's if `version_text` (their `--version` output, asked only
/// for those names) says "Open MPI" or "OpenRTE".
pub fn family(program: &OsStr, version_text: impl FnOnce() -> Option<String>) -> Family {
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.ends_with(".openmpi") || name == "orterun" {
        return Family::OpenMpi;
    }
    if matches!(name.as_str(), "mpirun" | "mpiexec") {
        if let Some(v) = version_text() {
            if v.contains("Open MPI") || v.contains("OpenRTE") {
                return Family::OpenMpi;
            }
        }
    }
    Family::Other
}

/// `program --version`'s output (stdout and stderr), within 5 s.
pub fn version_text(program: &OsStr) -> Option<String> {
    let mut child = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let until = Instant::now() + VERSION_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < until => thread::sleep(POLL),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Some(text)
}

/// The address the tasks reach the registry at: `explicit` if given; else the bound
/// address if it is a specific one; else the host's first non-loopback, non-link-local
/// interface address (IPv4 first) of `interfaces`; else 127.0.0.1.
pub fn advertised_address(
    explicit: Option<IpAddr>,
    bound: IpAddr,
    interfaces: &[IpAddr],
) -> IpAddr {
    if let Some(a) = explicit {
        return a;
    }
    if !bound.is_unspecified() {
        return bound;
    }
    let usable = |a: &&IpAddr| {
        !a.is_loopback()
            && !a.is_unspecified()
            && match a {
                IpAddr::V4(v4) => !v4.is_link_local(),
                // fe80::/10
                IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
            }
    };
    interfaces
        .iter()
        .filter(usable)
        .find(|a| a.is_ipv4())
        .or_else(|| interfaces.iter().find(|a| usable(a)))
        .copied()
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The host's interface addresses (empty if they cannot be listed).
pub fn interface_addresses() -> Vec<IpAddr> {
    match if_addrs::get_if_addrs() {
        Ok(list) => list
            .iter()
            .filter(|i| i.is_oper_up())
            .map(|i| i.ip())
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the network interfaces");
            Vec::new()
        }
    }
}

/// Splits `--launcher`'s text as a POSIX shell would (quotes, backslashes); an empty
/// command or unbalanced quotes are an error.
pub fn split_launcher(text: &str) -> Result<Vec<OsString>, String> {
    match shlex::split(text) {
        Some(words) if !words.is_empty() => Ok(words.into_iter().map(OsString::from).collect()),
        Some(_) => Err("--launcher: empty command".into()),
        None => Err(format!("--launcher {text:?}: unbalanced quotes")),
    }
}

/// The command line to run: the launcher, `-x NAME` for each of `exported` when it is
/// Open MPI's (right after the launcher's program name), then the program and its
/// arguments.
pub fn command_line(
    launcher: &[OsString],
    family: Family,
    exported: &[OsString],
    program: &OsStr,
    args: &[OsString],
) -> Vec<OsString> {
    let mut argv = Vec::with_capacity(launcher.len() + 2 * exported.len() + 1 + args.len());
    let mut words = launcher.iter();
    argv.extend(words.next().cloned());
    if family == Family::OpenMpi {
        for name in exported {
            argv.push("-x".into());
            argv.push(name.clone());
        }
    }
    argv.extend(words.cloned());
    argv.push(program.to_owned());
    argv.extend(args.iter().cloned());
    argv
}

/// The names of the variables passed on to the tasks: the three `ipl-run` sets, then
/// those of `environment` that [`FORWARDED_PREFIXES`] or [`FORWARDED_NAMES`] select
/// (without [`REMOVED`]), sorted.
pub fn exported_names(environment: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut names: Vec<OsString> = [ENV_REGISTRY, ENV_POOL, ENV_SECRET]
        .iter()
        .map(OsString::from)
        .collect();
    let mut more: Vec<OsString> = environment
        .into_iter()
        .filter(|k| {
            let k = k.to_string_lossy();
            (FORWARDED_PREFIXES.iter().any(|p| k.starts_with(p))
                || FORWARDED_NAMES.contains(&k.as_ref()))
                && !REMOVED.contains(&k.as_ref())
        })
        .filter(|k| !names.contains(k))
        .collect();
    more.sort();
    more.dedup();
    names.extend(more);
    names
}

/// What to run under a cluster's launcher.
#[derive(Debug, Clone)]
pub struct ClusterLaunch {
    /// The launcher's command, e.g. `["srun", "-N", "3", "-n", "6"]`.
    pub launcher: Vec<OsString>,
    /// The program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Pool name; `None`: [`unique_pool_name`].
    pub pool: Option<String>,
    /// Where the registry server listens (default `0.0.0.0:0`: every interface, any
    /// port).
    pub registry_bind: SocketAddr,
    /// The address the tasks reach it at ([`advertised_address`] when `None`).
    pub registry_address: Option<IpAddr>,
    /// Stop the launcher after this long.
    pub timeout: Option<Duration>,
    /// Extra variables for the launcher's environment (and, named with `-x` for Open
    /// MPI, the tasks').
    pub env: Vec<(OsString, OsString)>,
    /// Where the launcher's output (stdout and stderr) goes; `None`: `ipl-run`'s own.
    pub output: Option<std::path::PathBuf>,
}

impl ClusterLaunch {
    /// `launcher... program args...` with the defaults.
    pub fn new(launcher: Vec<OsString>, program: impl Into<OsString>, args: Vec<OsString>) -> Self {
        Self {
            launcher,
            program: program.into(),
            args,
            pool: None,
            registry_bind: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            registry_address: None,
            timeout: None,
            env: Vec::new(),
            output: None,
        }
    }
}

/// How a [`run`] ended.
#[derive(Debug, Clone)]
pub struct ClusterOutcome {
    /// The pool name used.
    pub pool: String,
    /// The registry address given to the tasks.
    pub registry: SocketAddr,
    /// The launcher's exit status (`None` if `ipl-run` had to kill it).
    pub status: Option<ExitStatus>,
    /// Whether the timeout expired.
    pub timed_out: bool,
    /// Whether a SIGTERM or SIGINT stopped the run.
    pub interrupted: bool,
}

impl ClusterOutcome {
    /// `ipl-run`'s exit code: the launcher's; [`EXIT_TIMEOUT`] on timeout; 128 +
    /// signal when the launcher died of a signal or `ipl-run` was interrupted.
    pub fn exit_code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        if self.timed_out {
            return EXIT_TIMEOUT;
        }
        if self.interrupted {
            return 128 + 15;
        }
        match self.status {
            Some(s) => s
                .code()
                .or_else(|| s.signal().map(|sig| 128 + sig))
                .unwrap_or(1),
            None => 1,
        }
    }
}

/// Runs `config`: the registry server, then the launcher, until the launcher exits,
/// the timeout expires or `ipl-run` gets SIGTERM/SIGINT (then the launcher is stopped).
/// An error only if the registry or the launcher could not be started.
pub fn run(config: &ClusterLaunch) -> io::Result<ClusterOutcome> {
    let Some(launcher_program) = config.launcher.first() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--launcher: empty command",
        ));
    };
    let secret = PoolSecret::generate().map_err(io::Error::other)?;
    let server = RegistryServer::bind(config.registry_bind, secret.clone())
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("registry server on {}: {e}", config.registry_bind),
            )
        })?
        .run_in_background()?;
    let bound = server.local_addr();
    let ip = advertised_address(
        config.registry_address,
        bound.ip(),
        &if config.registry_address.is_none() && bound.ip().is_unspecified() {
            interface_addresses()
        } else {
            Vec::new()
        },
    );
    let registry = SocketAddr::new(ip, bound.port());
    let pool = config.pool.clone().unwrap_or_else(unique_pool_name);
    let family = family(launcher_program, || version_text(launcher_program));
    let names = exported_names(
        std::env::vars_os()
            .map(|(k, _)| k)
            .chain(config.env.iter().map(|(k, _)| k.clone())),
    );
    let argv = command_line(
        &config.launcher,
        family,
        &names,
        &config.program,
        &config.args,
    );
    tracing::info!(%registry, bound = %bound, %pool, ?family, ?argv, "starting the launcher");

    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    for k in REMOVED {
        cmd.env_remove(k);
    }
    cmd.envs(config.env.iter().map(|(k, v)| (k, v)))
        .env(ENV_REGISTRY, registry.to_string())
        .env(ENV_POOL, &pool)
        .env(ENV_SECRET, secret.to_hex())
        .stdin(Stdio::null());
    if let Some(path) = &config.output {
        let file = std::fs::File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        cmd.stdout(file.try_clone()?).stderr(file);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut handlers = Vec::new();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        handlers.push(signal_hook::flag::register(sig, stop.clone())?);
    }
    let unregister = || {
        for h in &handlers {
            signal_hook::low_level::unregister(*h);
        }
    };

    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            unregister();
            return Err(io::Error::new(
                e.kind(),
                format!("could not start the launcher {launcher_program:?}: {e}"),
            ));
        }
    };
    let deadline = config.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut timed_out = false;
    let mut interrupted = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot wait for the launcher");
                break stop_launcher(&mut child);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            tracing::warn!("timeout expired: stopping the launcher");
            timed_out = true;
            break stop_launcher(&mut child);
        }
        if stop.load(Ordering::Relaxed) {
            tracing::warn!("interrupted: stopping the launcher");
            interrupted = true;
            break stop_launcher(&mut child);
        }
        thread::sleep(POLL);
    };
    unregister();
    server.shutdown();
    Ok(ClusterOutcome {
        pool,
        registry,
        status,
        timed_out,
        interrupted,
    })
}

/// SIGTERM, then SIGKILL after [`STOP_GRACE`]; the status if it ended by itself in
/// time, else `None`.
fn stop_launcher(child: &mut Child) -> Option<ExitStatus> {
    use rustix::process::{kill_process, Pid, Signal};
    let _ = kill_process(Pid::from_child(child), Signal::TERM);
    let until = Instant::now() + STOP_GRACE;
    while Instant::now() < until {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn open_mpi_is_recognised_by_name_or_version() {
        let never = || -> Option<String> { panic!("asked for the version") };
        let cases: &[(&str, Option<&str>, Family)] = &[
            ("mpirun.openmpi", None, Family::OpenMpi),
            ("/usr/bin/mpiexec.openmpi", None, Family::OpenMpi),
            ("orterun", None, Family::OpenMpi),
            (
                "mpirun",
                Some("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/"),
                Family::OpenMpi,
            ),
            (
                "mpirun",
                Some("mpirun.openmpi (OpenRTE) 4.1.4"),
                Family::OpenMpi,
            ),
            (
                "/usr/bin/mpiexec",
                Some("HYDRA build details:\n    Version: 4.0.2"),
                Family::Other,
            ),
            ("mpiexec", None, Family::Other),
        ];
        for (name, version, want) in cases {
            let got = family(OsStr::new(name), || version.map(str::to_owned));
            assert_eq!(got, *want, "{name} {version:?}");
        }
        for name in [
            "srun",
            "mpiexec.mpich",
            "mpiexec.hydra",
            "/opt/slurm/bin/srun",
        ] {
            assert_eq!(family(OsStr::new(name), never), Family::Other, "{name}");
        }
    }

    #[test]
    fn open_mpi_gets_minus_x_for_each_variable_others_nothing() {
        let names = exported_names(os(&[
            "HOME",
            "IPL_TRANSPORT",
            "IPL_RANK",
            "IPL_POOL_SIZE",
            "IPL_CLUSTER",
            "SATIN_POLICY",
            "RUST_LOG",
            "IPL_POOL",
        ]));
        assert_eq!(
            names,
            os(&[
                "IPL_REGISTRY",
                "IPL_POOL",
                "IPL_POOL_SECRET",
                "IPL_TRANSPORT",
                "RUST_LOG",
                "SATIN_POLICY"
            ])
        );
        let launcher = os(&["mpirun.openmpi", "-n", "4"]);
        let three = os(&["IPL_REGISTRY", "IPL_POOL", "IPL_POOL_SECRET"]);
        let args = os(&["25", "--check"]);
        assert_eq!(
            command_line(&launcher, Family::OpenMpi, &three, OsStr::new("fib"), &args),
            os(&[
                "mpirun.openmpi",
                "-x",
                "IPL_REGISTRY",
                "-x",
                "IPL_POOL",
                "-x",
                "IPL_POOL_SECRET",
                "-n",
                "4",
                "fib",
                "25",
                "--check"
            ])
        );
        let srun = os(&["srun", "-N", "3", "-n", "6"]);
        assert_eq!(
            command_line(&srun, Family::Other, &three, OsStr::new("fib"), &args),
            os(&["srun", "-N", "3", "-n", "6", "fib", "25", "--check"])
        );
    }

    #[test]
    fn the_advertised_address_is_explicit_bound_or_the_first_routable_one() {
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let ifs = [
            ip("127.0.0.1"),
            ip("::1"),
            ip("fe80::1"),
            ip("169.254.3.4"),
            ip("2001:db8::5"),
            ip("10.1.2.3"),
            ip("192.168.0.9"),
        ];
        assert_eq!(advertised_address(None, any, &ifs), ip("10.1.2.3"));
        assert_eq!(
            advertised_address(Some(ip("127.0.0.1")), any, &ifs),
            ip("127.0.0.1")
        );
        assert_eq!(
            advertised_address(None, ip("192.168.0.9"), &ifs),
            ip("192.168.0.9")
        );
        assert_eq!(
            advertised_address(None, any, &[ip("::1"), ip("2001:db8::5")]),
            ip("2001:db8::5")
        );
        assert_eq!(
            advertised_address(None, any, &[ip("127.0.0.1"), ip("fe80::2")]),
            ip("127.0.0.1")
        );
        assert_eq!(advertised_address(None, any, &[]), ip("127.0.0.1"));
    }

    #[test]
    fn the_launcher_text_is_split_as_a_shell_would() {
        assert_eq!(
            split_launcher("srun -N 3  -n 6").unwrap(),
            os(&["srun", "-N", "3", "-n", "6"])
        );
        assert_eq!(
            split_launcher("mpirun --host 'a b' -n 2").unwrap(),
            os(&["mpirun", "--host", "a b", "-n", "2"])
        );
        assert!(split_launcher("   ").is_err());
        assert!(split_launcher("srun 'oops").is_err());
    }
}
