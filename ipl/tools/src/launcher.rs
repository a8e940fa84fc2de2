//! `ipl-run`: launch a pool of processes around an in-process registry.
//!
//! # Environment contract
//!
//! Every launched process gets (besides the launcher's own environment):
//!
//! | Variable | Value |
//! |---|---|
//! | [`ENV_REGISTRY`] `IPL_REGISTRY` | `host:port` of the registry server |
//! | [`ENV_POOL`] `IPL_POOL` | the pool name (unique per run unless `--pool` is given) |
//! | [`ENV_POOL_SIZE`] `IPL_POOL_SIZE` | N: the pool is a closed world of N members |
//! | [`ENV_SECRET`] `IPL_POOL_SECRET` | the pool secret, 64 hex digits |
//! | [`ENV_CLUSTER`] `IPL_CLUSTER` | `cluster-<k>`, see [`cluster_of`] |
//! | [`ENV_RANK`] `IPL_RANK` | `i` in `0..N`: the member's name `member-i` and the `[i] ` prefix of its output lines |
//!
//! In a malleable pool ([`LaunchConfig::malleable`], `ipl-run --malleable`) a process
//! gets, instead of `IPL_POOL_SIZE` (which would ask for a closed world):
//!
//! | Variable | Value |
//! |---|---|
//! | [`ENV_POOL_MALLEABLE`] `IPL_POOL_MALLEABLE` | `1`: the pool is an open world that grows and shrinks |
//! | [`ENV_POOL_INITIAL_SIZE`] `IPL_POOL_INITIAL_SIZE` | N, the number of processes started at first |
//! | [`ENV_CONTROL`] `IPL_RUN_CONTROL` | the path of the control socket ([`crate::control`], [`ipl::launcher::control`]) |
//!
//! and `IPL_RANK` may be N or more: a process added on request gets the next rank. No
//! variable of [`CONTRACT`] that `ipl-run` does not set for a process reaches it from
//! `ipl-run`'s own environment.
//!
//! Under a cluster's launcher (`ipl-run --launcher`, [`crate::cluster_launcher`]) the
//! tasks get only `IPL_REGISTRY`, `IPL_POOL` and `IPL_POOL_SECRET`, and take rank, size
//! and cluster from the launcher's own variables (`ipl::launcher`).
//!
//! A process joins with [`PoolEnv::from_env`] and [`PoolEnv::join`]. Its
//! identity (member id, join order) comes from the registry, not from the
//! rank.
//!
//! # When a process fails
//!
//! By default one failed process (non-zero exit, or killed by a signal) fails the
//! pool: the others get [`LaunchConfig::grace`] to finish, then are killed, and
//! `ipl-run` exits 1. With [`LaunchConfig::keep_going`] (`ipl-run --keep-going`), for
//! programs that survive crashes (Satin), the failure is reported and the others go
//! on; the pool then succeeds if no process exited with a non-zero status and at
//! least one exited 0 ([`LaunchOutcome::exit_code`]).
//!
//! # The processes end with `ipl-run`
//!
//! SIGTERM or SIGINT to `ipl-run` is passed on to every process as SIGTERM; those
//! still running after [`STOP_GRACE`](crate::cluster_launcher::STOP_GRACE) get
//! SIGKILL, and `ipl-run` exits with status 143. If `ipl-run` itself is killed
//! (SIGKILL, a crash), the kernel kills the processes (Linux: each is started
//! through [`exec_guarded`], which asks for SIGKILL on its parent's death,
//! `PR_SET_PDEATHSIG`, before it becomes the program; see
//! [`LaunchConfig::guard`]).

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::sync::mpsc::{Receiver, RecvTimeoutError};

use ipl::launcher::control::{Process, Reply, Request};
use ipl_auth::PoolSecret;
use ipl_registry::{JoinRequest, NetRegistry, PoolConfig, Registry, RegistryError, RegistryServer};
use rustix::process::{kill_process, Pid, Signal};

use crate::control::{ControlServer, Pending};

/// Address of the registry server (`host:port`).
pub const ENV_REGISTRY: &str = "IPL_REGISTRY";
/// Name of the pool.
pub const ENV_POOL: &str = "IPL_POOL";
/// Number of processes in the (closed-world) pool.
pub const ENV_POOL_SIZE: &str = "IPL_POOL_SIZE";
/// The pool secret (64 hex digits); same as [`ipl_auth::SECRET_ENV`].
pub const ENV_SECRET: &str = ipl_auth::SECRET_ENV;
/// The process's cluster name.
pub const ENV_CLUSTER: &str = "IPL_CLUSTER";
/// The process's launch index, for log prefixes only.
pub const ENV_RANK: &str = "IPL_RANK";
/// `1` in a malleable pool (`--malleable`), which has no `IPL_POOL_SIZE`.
pub const ENV_POOL_MALLEABLE: &str = ipl::launcher::POOL_MALLEABLE;
/// The number of processes a malleable pool started with.
pub const ENV_POOL_INITIAL_SIZE: &str = ipl::launcher::POOL_INITIAL_SIZE;
/// The path of the control socket of a malleable pool ([`ipl::launcher::control`]).
pub const ENV_CONTROL: &str = ipl::launcher::control::ENV_CONTROL;

/// Every variable of the contract: removed from what a process inherits from
/// `ipl-run`'s own environment (e.g. when `ipl-run` runs inside another pool) before
/// its own are set, so that it never sees a variable of another pool.
pub const CONTRACT: &[&str] = &[
    ENV_REGISTRY,
    ENV_POOL,
    ENV_POOL_SIZE,
    ENV_SECRET,
    ENV_CLUSTER,
    ENV_RANK,
    ENV_POOL_MALLEABLE,
    ENV_POOL_INITIAL_SIZE,
    ENV_CONTROL,
];

/// Default bound on the processes of a malleable pool running at once.
pub const DEFAULT_MAX_PROCESSES: usize = 64;
/// The highest `--max-processes`.
pub const MAX_MAX_PROCESSES: usize = 1024;
/// Default time a process removed on request gets to leave before SIGKILL.
pub const DEFAULT_REMOVE_GRACE: Duration = Duration::from_secs(30);

/// Default time the other processes get to finish after one failed.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Exit code of `ipl-run` when a process failed.
pub const EXIT_FAILED: i32 = 1;
/// Exit code of `ipl-run` when `--timeout` expired (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;

/// How often children are polled.
const POLL: Duration = Duration::from_millis(20);

/// The longest output line of a process passed on whole. A longer one is passed on in
/// pieces of this many bytes, each a line of its own with the process's prefix, so a
/// process writing without newlines never makes `ipl-run` buffer without bound.
pub const MAX_LINE: usize = 64 * 1024;

/// Reads one line of at most `max` bytes into `line` (cleared first): up to and with the
/// next newline, or `max` bytes without one, or what is left before the end of the
/// input. Returns the number of bytes read, 0 at the end of the input.
pub fn read_line_capped(r: &mut impl BufRead, line: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    line.clear();
    while line.len() < max {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break;
        }
        let window = &buf[..buf.len().min(max - line.len())];
        match window.iter().position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&window[..=i]);
                r.consume(i + 1);
                break;
            }
            None => {
                let n = window.len();
                line.extend_from_slice(window);
                r.consume(n);
            }
        }
    }
    Ok(line.len())
}

/// The cluster index of process `i` of `n` spread over `clusters` clusters:
/// `i * clusters / n`, so the clusters get contiguous ranks and sizes that
/// differ by at most one (e.g. 3 processes over 2 clusters: 0, 0, 1).
/// `clusters` is clamped to `1..=n`.
pub fn cluster_of(i: usize, n: usize, clusters: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let c = clusters.clamp(1, n);
    // Widening to u128 rules out overflow.
    ((i as u128 * c as u128) / n as u128) as usize
}

/// The name of cluster `k`: `cluster-<k>`.
pub fn cluster_name(k: usize) -> String {
    format!("cluster-{k}")
}

/// A pool name unique to this run: `ipl-<pid>-<time>-<counter>`.
pub fn unique_pool_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let k = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("ipl-{}-{nanos:x}-{k}", std::process::id())
}

/// A missing or malformed variable of the environment contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError(pub String);

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (is this process started by ipl-run?)", self.0)
    }
}

impl std::error::Error for EnvError {}

/// What a launched process learns from its environment.
#[derive(Debug, Clone)]
pub struct PoolEnv {
    /// [`ENV_REGISTRY`].
    pub registry: String,
    /// [`ENV_POOL`].
    pub pool: String,
    /// [`ENV_POOL_SIZE`]; in a malleable pool [`ENV_POOL_INITIAL_SIZE`] (default 1).
    pub size: usize,
    /// [`ENV_SECRET`].
    pub secret: PoolSecret,
    /// [`ENV_CLUSTER`] (default `cluster-0`).
    pub cluster: String,
    /// [`ENV_RANK`], if set.
    pub rank: Option<usize>,
    /// [`ENV_POOL_MALLEABLE`]: the pool is an open world that grows and shrinks.
    pub malleable: bool,
}

impl PoolEnv {
    /// Reads the contract from the process environment.
    pub fn from_env() -> Result<Self, EnvError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the contract through `get` (for tests and embedding).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let need = |k: &str| get(k).ok_or_else(|| EnvError(format!("{k} is not set")));
        let registry = need(ENV_REGISTRY)?;
        let pool = need(ENV_POOL)?;
        let malleable = match get(ENV_POOL_MALLEABLE).filter(|v| !v.trim().is_empty()) {
            None => false,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" => true,
                "0" | "false" | "no" => false,
                _ => {
                    return Err(EnvError(format!(
                        "{ENV_POOL_MALLEABLE}={v:?} is not 1/true/yes or 0/false/no"
                    )))
                }
            },
        };
        let number = |k: &str, text: String| {
            text.trim()
                .parse()
                .map_err(|_| EnvError(format!("{k}={text:?} is not a number")))
        };
        let size = if malleable {
            if get(ENV_POOL_SIZE).is_some() {
                return Err(EnvError(format!(
                    "{ENV_POOL_MALLEABLE} and {ENV_POOL_SIZE} exclude each other"
                )));
            }
            match get(ENV_POOL_INITIAL_SIZE) {
                Some(t) => number(ENV_POOL_INITIAL_SIZE, t)?,
                None => 1,
            }
        } else {
            number(ENV_POOL_SIZE, need(ENV_POOL_SIZE)?)?
        };
        let secret = PoolSecret::from_hex(&need(ENV_SECRET)?)
            .map_err(|e| EnvError(format!("{ENV_SECRET}: {e}")))?;
        let cluster = get(ENV_CLUSTER).unwrap_or_else(|| cluster_name(0));
        let rank = match get(ENV_RANK) {
            None => None,
            Some(r) => Some(
                r.trim()
                    .parse()
                    .map_err(|_| EnvError(format!("{ENV_RANK}={r:?} is not a number")))?,
            ),
        };
        Ok(Self {
            registry,
            pool,
            size,
            secret,
            cluster,
            rank,
            malleable,
        })
    }

    /// Member `rank` of the closed-world pool `pool` of `size` members in `cluster`,
    /// whose registry is at `registry`: what a launcher hands each process it starts.
    pub fn member(
        registry: impl ToString,
        pool: &str,
        size: usize,
        secret: &PoolSecret,
        cluster: &str,
        rank: usize,
    ) -> Self {
        Self {
            registry: registry.to_string(),
            pool: pool.to_owned(),
            size,
            secret: secret.clone(),
            cluster: cluster.to_owned(),
            rank: Some(rank),
            malleable: false,
        }
    }

    /// The same member in a malleable pool (`on`), whose [`size`](Self::size) is the
    /// initial size, or in a closed world.
    pub fn with_malleable(mut self, on: bool) -> Self {
        self.malleable = on;
        self
    }

    /// The contract's variables that make a process this member: what
    /// [`from_lookup`](Self::from_lookup) reads back (the rank only if set). For
    /// [`Command::envs`], wherever a pool's processes are started.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (ENV_REGISTRY, self.registry.clone()),
            (ENV_POOL, self.pool.clone()),
        ];
        if self.malleable {
            v.push((ENV_POOL_MALLEABLE, "1".to_owned()));
            v.push((ENV_POOL_INITIAL_SIZE, self.size.to_string()));
        } else {
            v.push((ENV_POOL_SIZE, self.size.to_string()));
        }
        v.push((ENV_SECRET, self.secret.to_hex()));
        v.push((ENV_CLUSTER, self.cluster.clone()));
        if let Some(r) = self.rank {
            v.push((ENV_RANK, r.to_string()));
        }
        v
    }

    /// Connects to the registry (within `timeout`) and joins the
    /// closed-world pool of [`size`](Self::size) in [`cluster`](Self::cluster), or the
    /// open world of a [`malleable`](Self::malleable) pool.
    pub fn join(&self, timeout: Duration) -> Result<Registry, RegistryError> {
        let client = NetRegistry::connect(self.registry.as_str(), &self.secret, timeout)?;
        let mut request = JoinRequest::new(self.cluster.clone());
        if let Some(r) = self.rank {
            request = request.with_name(format!("member-{r}"));
        }
        let config = if self.malleable {
            PoolConfig::open_world()
        } else {
            PoolConfig::closed_world(self.size)
        };
        client.join(&self.pool, config, request)
    }
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchConfig {
    /// Number of processes (N).
    pub processes: usize,
    /// Number of clusters to spread them over.
    pub clusters: usize,
    /// Pool name; `None`: [`unique_pool_name`].
    pub pool: Option<String>,
    /// Kill everything after this long.
    pub timeout: Option<Duration>,
    /// After a process failed, how long the others may still run.
    pub grace: Duration,
    /// The program to start.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment variables for every process (e.g. `IPL_TRANSPORT`).
    pub env: Vec<(OsString, OsString)>,
    /// A program that runs [`exec_guarded`] when called as `GUARD`
    /// [`GUARD_ARG`]` PARENT-PID -- PROGRAM ARGS...` (the `ipl-run` binary itself):
    /// each process is started through it, so that it dies with this process even
    /// when this one is killed by SIGKILL. `None`: started directly (they outlive a
    /// SIGKILL of this process).
    pub guard: Option<PathBuf>,
    /// A malleable pool (`--malleable`): an open world, and a control socket through
    /// which the processes start more processes and stop some
    /// ([`ipl::launcher::control`]).
    pub malleable: bool,
    /// In a malleable pool, the most processes running at once (`--max-processes`).
    pub max_processes: usize,
    /// In a malleable pool, how long a process removed on request gets to leave after
    /// SIGTERM before it is killed (`--remove-grace`).
    pub remove_grace: Duration,
    /// Keep going when a process fails (`--keep-going`): it is reported, the others
    /// are not stopped ([`grace`](Self::grace) is not used), and the run's outcome
    /// follows [`LaunchOutcome::exit_code`]'s rule for fault-tolerant programs.
    pub keep_going: bool,
}

/// The first argument that makes the `ipl-run` binary [`exec_guarded`] instead of
/// launching a pool (internal, see [`LaunchConfig::guard`]).
pub const GUARD_ARG: &str = "--ipl-run-guarded-exec";

/// Becomes `program args` (exec, same process id) after asking the kernel to SIGKILL
/// this process when its parent, `ipl-run` with process id `parent`, dies
/// (`PR_SET_PDEATHSIG`, Linux; kept across the exec). If the parent already died
/// before the request took effect, this exits with status 1 instead. Returns only on
/// an error (the exec or the request failed).
///
/// This is how `ipl-run` ties its processes' lives to its own without `unsafe` (a
/// `Command::pre_exec` hook would need it): it starts each through its own binary,
/// which calls this.
pub fn exec_guarded(parent: u32, program: &OsString, args: &[OsString]) -> io::Error {
    use std::os::unix::process::CommandExt;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::process::{getppid, set_parent_process_death_signal, Pid, Signal};
        if let Err(e) = set_parent_process_death_signal(Some(Signal::KILL)) {
            return io::Error::other(format!("cannot ask to die with ipl-run: {e}"));
        }
        // Death before the request: the parent is already another process (init or
        // a subreaper).
        if getppid() != Pid::from_raw(parent as i32) {
            std::process::exit(EXIT_FAILED);
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = parent;
    Command::new(program).args(args).exec()
}

impl LaunchConfig {
    /// `processes` copies of `program args...`, one cluster, default grace,
    /// no timeout.
    pub fn new(processes: usize, program: impl Into<OsString>, args: Vec<OsString>) -> Self {
        Self {
            processes,
            clusters: 1,
            pool: None,
            timeout: None,
            grace: DEFAULT_GRACE,
            program: program.into(),
            args,
            env: Vec::new(),
            guard: None,
            malleable: false,
            max_processes: DEFAULT_MAX_PROCESSES,
            remove_grace: DEFAULT_REMOVE_GRACE,
            keep_going: false,
        }
    }
}

/// How one process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessEnd {
    /// It exited by itself (or was killed by somebody else).
    Exited(ExitStatus),
    /// `ipl-run` killed it (grace period or timeout over, or a removed process that
    /// did not leave in time).
    Killed,
    /// It was removed on request (SIGTERM from `ipl-run`, malleable pools) and then
    /// ended with this status.
    Removed(ExitStatus),
}

impl ProcessEnd {
    /// Whether it ended well: exited with status 0, or, removed on request, exited 0
    /// or by the SIGTERM `ipl-run` sent.
    pub fn success(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        match self {
            ProcessEnd::Exited(s) => s.success(),
            ProcessEnd::Removed(s) => s.success() || s.signal() == Some(SIGTERM),
            ProcessEnd::Killed => false,
        }
    }
}

/// The signal number of SIGTERM.
const SIGTERM: i32 = signal_hook::consts::SIGTERM;

impl std::fmt::Display for ProcessEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcessEnd::Exited(s) => write!(f, "{s}"),
            ProcessEnd::Killed => write!(f, "killed by ipl-run"),
            ProcessEnd::Removed(s) => write!(f, "{s} (removed on request)"),
        }
    }
}

/// The result of a [`launch`].
#[derive(Debug, Clone)]
pub struct LaunchOutcome {
    /// The pool name used.
    pub pool: String,
    /// The registry's address.
    pub registry: SocketAddr,
    /// How each process ended, by rank.
    pub ends: Vec<ProcessEnd>,
    /// Whether the timeout expired.
    pub timed_out: bool,
    /// Whether a SIGTERM or SIGINT stopped the run (the processes were stopped).
    pub interrupted: bool,
    /// Whether the run kept going after failures ([`LaunchConfig::keep_going`]).
    pub keep_going: bool,
}

impl LaunchOutcome {
    /// `ipl-run`'s exit code: [`EXIT_TIMEOUT`] on timeout, 143 (128 + SIGTERM) when
    /// interrupted, else 0 if the pool succeeded and [`EXIT_FAILED`] if not.
    ///
    /// The pool succeeded if every process ended well ([`ProcessEnd::success`]), or,
    /// with [`keep_going`](Self::keep_going), if every process ended well or was
    /// killed by a signal `ipl-run` did not send (a crash, or a kill from outside:
    /// what a fault-tolerant program survives), and at least one process exited 0 by
    /// itself (someone finished the run). A process that exits with a non-zero status
    /// reports an error of its own and fails the pool even then.
    pub fn exit_code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        if self.interrupted {
            return 128 + 15;
        }
        if self.timed_out {
            return EXIT_TIMEOUT;
        }
        let ok = if self.keep_going {
            let crashed =
                |e: &ProcessEnd| matches!(e, ProcessEnd::Exited(s) if s.signal().is_some());
            let finished = |e: &ProcessEnd| matches!(e, ProcessEnd::Exited(s) if s.success());
            self.ends.iter().all(|e| e.success() || crashed(e)) && self.ends.iter().any(finished)
        } else {
            self.ends.iter().all(ProcessEnd::success)
        };
        if ok {
            0
        } else {
            EXIT_FAILED
        }
    }
}

/// Copies `from` line by line to `to`, prefixing each line with `prefix`; lines longer
/// than [`MAX_LINE`] are passed on in pieces. When `to` cannot be written (e.g. a
/// closed pipe: `ipl-run ... | head -1`) it stops and closes `from`, so the process
/// writing gets a broken pipe too, as in a shell pipeline.
fn forward(
    from: impl Read + Send + 'static,
    prefix: String,
    to: fn() -> Box<dyn Write>,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("ipl-run-output{prefix}"))
        .spawn(move || {
            let mut r = BufReader::new(from);
            let mut line = Vec::with_capacity(MAX_LINE + 1);
            loop {
                match read_line_capped(&mut r, &mut line, MAX_LINE) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if line.last() != Some(&b'\n') {
                            line.push(b'\n');
                        }
                        let mut out = to();
                        let written = out
                            .write_all(prefix.as_bytes())
                            .and_then(|()| out.write_all(&line))
                            .and_then(|()| out.flush());
                        if written.is_err() {
                            return;
                        }
                    }
                }
            }
        })
}

fn stdout_box() -> Box<dyn Write> {
    Box::new(io::stdout().lock())
}

fn stderr_box() -> Box<dyn Write> {
    Box::new(io::stderr().lock())
}

fn note(msg: &str) {
    let mut e = io::stderr().lock();
    let _ = writeln!(e, "[ipl-run] {msg}");
}

/// Runs `ipl-run`: starts a registry server on 127.0.0.1 in this process,
/// launches `config.processes` copies of the program with the
/// [environment contract](self), prefixes their output lines with `[i] `,
/// and waits for all of them.
///
/// If one fails (exits non-zero or is killed by a signal) the others get
/// `config.grace` to finish, then are killed; with
/// [`config.keep_going`](LaunchConfig::keep_going) it is only reported and the others
/// go on. On `config.timeout` all are killed. Errors are only returned if nothing could be launched (the
/// processes already started are killed).
///
/// With [`config.malleable`](LaunchConfig::malleable) the pool is an open world and
/// `ipl-run` serves a control socket ([`crate::control`], path in `IPL_RUN_CONTROL`):
/// `add` starts more processes (next ranks, same command and environment), `remove`
/// sends one SIGTERM, `list` tells who runs. A process that exits 0 has left; one
/// removed on request that ends by the SIGTERM counts as a success too.
pub fn launch(config: &LaunchConfig) -> io::Result<LaunchOutcome> {
    let n = config.processes;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "need at least one process (-n)",
        ));
    }
    if config.malleable && n > config.max_processes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "-n {n} is more than --max-processes {}",
                config.max_processes
            ),
        ));
    }
    let secret = PoolSecret::generate().map_err(io::Error::other)?;
    let server = RegistryServer::bind("127.0.0.1:0", secret.clone())?.run_in_background()?;
    let registry = server.local_addr();
    let pool = config.pool.clone().unwrap_or_else(unique_pool_name);
    tracing::debug!(%registry, %pool, n, malleable = config.malleable, "launching");
    let (control, requests) = match config.malleable {
        true => {
            let (c, r) = ControlServer::start()?;
            (Some(c), Some(r))
        }
        false => (None, None),
    };

    // SIGTERM and SIGINT stop the processes (in `supervise`) instead of leaving them.
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

    let mut sup = Supervisor {
        config,
        template: PoolEnv::member(registry, &pool, n, &secret, &cluster_name(0), 0)
            .with_malleable(config.malleable),
        control: control.as_ref().map(|c| c.path().to_owned()),
        procs: Vec::with_capacity(n),
        forwarders: Vec::new(),
        grace_until: None,
    };
    for i in 0..n {
        if let Err(e) = sup.start(cluster_name(cluster_of(i, n, config.clusters))) {
            for p in &mut sup.procs {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
            unregister();
            return Err(e);
        }
    }

    let ends = sup.supervise(&stop, requests.as_ref());
    unregister();
    drop(requests);
    if let Some(c) = control {
        c.shutdown();
    }
    // Output of the children: let the forwarders drain (bounded, in case a
    // grandchild keeps a pipe open).
    let until = Instant::now() + Duration::from_secs(2);
    for f in sup.forwarders {
        while !f.is_finished() && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
        }
        if f.is_finished() {
            let _ = f.join();
        }
    }
    server.shutdown();
    Ok(LaunchOutcome {
        pool,
        registry,
        ends: ends.ends,
        timed_out: ends.timed_out,
        interrupted: ends.interrupted,
        keep_going: config.keep_going,
    })
}

struct Supervised {
    ends: Vec<ProcessEnd>,
    timed_out: bool,
    interrupted: bool,
}

/// One process `ipl-run` started; its rank is its index in [`Supervisor::procs`].
struct Proc {
    cluster: String,
    child: Child,
    end: Option<ProcessEnd>,
    /// When it was sent SIGTERM on request (`remove`).
    removing: Option<Instant>,
}

/// The processes of a launch and what happens to them.
struct Supervisor<'a> {
    config: &'a LaunchConfig,
    /// Every process's contract, but for its rank and cluster.
    template: PoolEnv,
    /// The control socket's path (malleable pools).
    control: Option<PathBuf>,
    /// By rank, ended ones included (ranks are never reused).
    procs: Vec<Proc>,
    forwarders: Vec<JoinHandle<()>>,
    /// Set when a process failed: the others are killed then.
    grace_until: Option<Instant>,
}

impl Supervisor<'_> {
    /// Starts the process of the next rank in `cluster`.
    fn start(&mut self, cluster: String) -> io::Result<usize> {
        let config = self.config;
        let rank = self.procs.len();
        let mut cmd = match &config.guard {
            Some(guard) => {
                let mut c = Command::new(guard);
                c.arg(GUARD_ARG)
                    .arg(std::process::id().to_string())
                    .arg("--")
                    .arg(&config.program);
                c
            }
            None => Command::new(&config.program),
        };
        for v in CONTRACT {
            cmd.env_remove(v);
        }
        cmd.envs(config.env.iter().map(|(k, v)| (k, v)));
        let env = PoolEnv {
            cluster: cluster.clone(),
            rank: Some(rank),
            ..self.template.clone()
        };
        cmd.args(&config.args).envs(env.vars());
        if let Some(path) = &self.control {
            cmd.env(ENV_CONTROL, path);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("could not start {:?}: {e}", config.program),
            )
        })?;
        let prefix = format!("[{rank}] ");
        if let Some(out) = child.stdout.take() {
            self.forwarders
                .push(forward(out, prefix.clone(), stdout_box)?);
        }
        if let Some(err) = child.stderr.take() {
            self.forwarders.push(forward(err, prefix, stderr_box)?);
        }
        self.procs.push(Proc {
            cluster,
            child,
            end: None,
            removing: None,
        });
        Ok(rank)
    }

    fn live(&self) -> usize {
        self.procs.iter().filter(|p| p.end.is_none()).count()
    }

    /// Reaps the processes that ended, starts the grace period at the first failure
    /// (unless [`LaunchConfig::keep_going`]),
    /// and kills removed processes that outstay their grace.
    fn poll(&mut self) {
        let config = self.config;
        for (i, p) in self.procs.iter_mut().enumerate() {
            if p.end.is_some() {
                continue;
            }
            match p.child.try_wait() {
                Ok(Some(status)) => {
                    let end = match p.removing {
                        Some(_) => ProcessEnd::Removed(status),
                        None => ProcessEnd::Exited(status),
                    };
                    if end.success() {
                        if config.malleable {
                            tracing::debug!(rank = i, %end, "process ended");
                        }
                    } else if p.removing.is_some() {
                        // Leaving anyway: no reason to stop the others.
                        note(&format!(
                            "process {i} ended with {status} after its removal"
                        ));
                    } else if config.keep_going {
                        note(&format!(
                            "process {i} failed ({status}); the others keep running (--keep-going)"
                        ));
                    } else if self.grace_until.is_none() {
                        note(&format!(
                            "process {i} failed ({status}); the others have {:?} to finish",
                            config.grace
                        ));
                        self.grace_until = Instant::now().checked_add(config.grace);
                    } else {
                        note(&format!("process {i} failed ({status})"));
                    }
                    p.end = Some(end);
                }
                Ok(None) => {
                    let overdue = p
                        .removing
                        .and_then(|t| t.checked_add(config.remove_grace))
                        .is_some_and(|t| Instant::now() >= t);
                    if overdue {
                        note(&format!(
                            "process {i} did not leave within {:?} of its removal: killing it",
                            config.remove_grace
                        ));
                        let _ = p.child.kill();
                        let _ = p.child.wait();
                        p.end = Some(ProcessEnd::Killed);
                    }
                }
                Err(e) => {
                    note(&format!("cannot wait for process {i}: {e}"));
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    p.end = Some(ProcessEnd::Killed);
                }
            }
        }
    }

    /// Kills every process still running.
    fn kill_all(&mut self, reason: &str) {
        for (i, p) in self.procs.iter_mut().enumerate() {
            if p.end.is_none() {
                note(&format!("{reason}: killing process {i}"));
                let _ = p.child.kill();
                let _ = p.child.wait();
                p.end = Some(ProcessEnd::Killed);
            }
        }
    }

    /// SIGTERM to every process still running, SIGKILL to those left after
    /// [`STOP_GRACE`](crate::cluster_launcher::STOP_GRACE).
    fn stop_all(&mut self) {
        for p in &self.procs {
            if p.end.is_none() {
                let _ = kill_process(Pid::from_child(&p.child), Signal::TERM);
            }
        }
        let until = Instant::now() + crate::cluster_launcher::STOP_GRACE;
        loop {
            for p in &mut self.procs {
                if p.end.is_none() {
                    if let Ok(Some(s)) = p.child.try_wait() {
                        p.end = Some(ProcessEnd::Exited(s));
                    }
                }
            }
            if self.live() == 0 || Instant::now() >= until {
                break;
            }
            thread::sleep(POLL);
        }
        self.kill_all("still running");
    }

    /// Answers a control request.
    fn handle(&mut self, pending: Pending) {
        let reply = match &pending.request {
            Request::Add { count, cluster } => self.add(*count as usize, cluster.as_deref()),
            Request::Remove { rank } => self.remove(*rank as usize),
            Request::List => Reply::Listed(
                self.procs
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.end.is_none())
                    .map(|(rank, p)| Process {
                        rank: rank as u32,
                        cluster: p.cluster.clone(),
                        pid: p.child.id(),
                        leaving: p.removing.is_some(),
                    })
                    .collect(),
            ),
        };
        pending.answer(reply);
    }

    fn add(&mut self, count: usize, cluster: Option<&str>) -> Reply {
        if self.grace_until.is_some() {
            return Reply::Refused("a process failed: the pool is being stopped".into());
        }
        let (live, max) = (self.live(), self.config.max_processes);
        if live + count > max {
            return Reply::Refused(format!(
                "{live} processes run and at most {max} may (--max-processes): \
                 {count} more are too many"
            ));
        }
        // Without a cluster: ipl-run's clusters in turn, by rank.
        let clusters = self.config.clusters.clamp(1, self.config.processes);
        let mut ranks = Vec::with_capacity(count);
        for _ in 0..count {
            let rank = self.procs.len();
            let c = cluster.map_or_else(|| cluster_name(rank % clusters), str::to_owned);
            match self.start(c.clone()) {
                Ok(r) => {
                    note(&format!("started process {r} in {c} on request"));
                    ranks.push(r as u32);
                }
                Err(e) if ranks.is_empty() => return Reply::Refused(e.to_string()),
                Err(e) => {
                    note(&format!("{e}: started only {} of {count}", ranks.len()));
                    break;
                }
            }
        }
        Reply::Added(ranks)
    }

    fn remove(&mut self, rank: usize) -> Reply {
        let Some(p) = self.procs.get_mut(rank) else {
            return Reply::Refused(format!("no process of rank {rank}"));
        };
        if p.end.is_some() {
            return Reply::Refused(format!("process {rank} has ended"));
        }
        if p.removing.is_some() {
            return Reply::Removed;
        }
        match kill_process(Pid::from_child(&p.child), Signal::TERM) {
            Ok(()) => {
                p.removing = Some(Instant::now());
                note(&format!("stopping process {rank} on request (SIGTERM)"));
                Reply::Removed
            }
            Err(e) => Reply::Refused(format!("cannot signal process {rank}: {e}")),
        }
    }

    /// Waits for every process, answering control requests meanwhile.
    fn supervise(&mut self, stop: &AtomicBool, requests: Option<&Receiver<Pending>>) -> Supervised {
        let deadline = self
            .config
            .timeout
            .and_then(|t| Instant::now().checked_add(t));
        let mut timed_out = false;
        let mut interrupted = false;
        loop {
            self.poll();
            if self.live() == 0 {
                break;
            }
            if stop.load(Ordering::Relaxed) {
                note("interrupted: stopping the processes (SIGTERM)");
                interrupted = true;
                self.stop_all();
                break;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                timed_out = true;
                self.kill_all("timeout expired");
                break;
            }
            if self.grace_until.is_some_and(|g| now >= g) {
                self.kill_all("grace period over");
                break;
            }
            // The poll interval, or at once for a control request.
            match requests.map(|r| r.recv_timeout(POLL)) {
                Some(Ok(pending)) => self.handle(pending),
                Some(Err(RecvTimeoutError::Timeout)) => {}
                Some(Err(RecvTimeoutError::Disconnected)) | None => thread::sleep(POLL),
            }
        }
        Supervised {
            ends: self
                .procs
                .iter()
                .map(|p| p.end.unwrap_or(ProcessEnd::Killed))
                .collect(),
            timed_out,
            interrupted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_are_spread_evenly_and_contiguously() {
        let of = |n: usize, c: usize| (0..n).map(|i| cluster_of(i, n, c)).collect::<Vec<_>>();
        assert_eq!(of(3, 2), vec![0, 0, 1]);
        assert_eq!(of(4, 2), vec![0, 0, 1, 1]);
        assert_eq!(of(5, 3), vec![0, 0, 1, 1, 2]);
        assert_eq!(of(3, 1), vec![0, 0, 0]);
        // More clusters than processes: one each.
        assert_eq!(of(2, 5), vec![0, 1]);
        assert_eq!(of(2, 0), vec![0, 0]);
        for n in 1..40 {
            for c in 1..=n {
                let v = of(n, c);
                assert!(v.windows(2).all(|w| w[0] <= w[1]), "contiguous");
                let sizes: Vec<usize> = (0..c)
                    .map(|k| v.iter().filter(|&&x| x == k).count())
                    .collect();
                let (min, max) = (
                    sizes.iter().min().copied().unwrap_or(0),
                    sizes.iter().max().copied().unwrap_or(0),
                );
                assert!(min >= 1 && max - min <= 1, "n={n} c={c} {sizes:?}");
            }
        }
        assert_eq!(cluster_name(1), "cluster-1");
    }

    #[test]
    fn env_contract_parses_and_reports_missing_variables() {
        let secret = PoolSecret::generate().unwrap();
        let hex = secret.to_hex();
        let vars = |k: &str| -> Option<String> {
            match k {
                ENV_REGISTRY => Some("127.0.0.1:1".into()),
                ENV_POOL => Some("p".into()),
                ENV_POOL_SIZE => Some("3".into()),
                ENV_SECRET => Some(hex.clone()),
                ENV_RANK => Some("2".into()),
                _ => None,
            }
        };
        let env = PoolEnv::from_lookup(vars).unwrap();
        assert_eq!(env.size, 3);
        assert_eq!(env.cluster, "cluster-0");
        assert_eq!(env.rank, Some(2));
        assert_eq!(env.secret, secret);
        // What vars() writes, from_lookup reads back.
        for rank in [Some(5), None] {
            let written = PoolEnv {
                cluster: "c1".into(),
                rank,
                ..env.clone()
            }
            .vars();
            let again = PoolEnv::from_lookup(|k| {
                written
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.clone())
            })
            .unwrap();
            assert_eq!(
                (again.registry, again.pool, again.size, again.secret),
                (env.registry.clone(), env.pool.clone(), 3, secret.clone())
            );
            assert_eq!((again.cluster.as_str(), again.rank), ("c1", rank));
        }
        let err = PoolEnv::from_lookup(|k| if k == ENV_POOL { None } else { vars(k) }).unwrap_err();
        assert!(err.to_string().contains(ENV_POOL));
        let err = PoolEnv::from_lookup(|k| {
            if k == ENV_POOL_SIZE {
                Some("x".into())
            } else {
                vars(k)
            }
        })
        .unwrap_err();
        assert!(err.to_string().contains(ENV_POOL_SIZE));
    }

    #[test]
    fn a_malleable_member_has_an_initial_size_and_no_pool_size() {
        let secret = PoolSecret::generate().unwrap();
        let env =
            PoolEnv::member("127.0.0.1:1", "p", 2, &secret, "cluster-1", 5).with_malleable(true);
        let vars = env.vars();
        let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get(ENV_POOL_SIZE), None, "no closed world");
        assert_eq!(get(ENV_POOL_MALLEABLE).as_deref(), Some("1"));
        assert_eq!(get(ENV_POOL_INITIAL_SIZE).as_deref(), Some("2"));
        let again = PoolEnv::from_lookup(get).unwrap();
        assert!(again.malleable);
        assert_eq!((again.size, again.rank), (2, Some(5)));
        // What ipl::launcher reads from the same variables.
        let launched = ipl::launcher::detect(&|k: &str| get(k)).unwrap().unwrap();
        assert!(launched.malleable);
        assert_eq!((launched.size, launched.rank), (2, Some(5)));
        // Both sizes: refused; without an initial size: 1.
        let both = |k: &str| {
            if k == ENV_POOL_SIZE {
                Some("2".into())
            } else {
                get(k)
            }
        };
        let e = PoolEnv::from_lookup(both).unwrap_err();
        assert!(e.to_string().contains(ENV_POOL_SIZE), "{e}");
        let no_initial = |k: &str| {
            if k == ENV_POOL_INITIAL_SIZE {
                None
            } else {
                get(k)
            }
        };
        assert_eq!(PoolEnv::from_lookup(no_initial).unwrap().size, 1);
        let bad = |k: &str| {
            if k == ENV_POOL_MALLEABLE {
                Some("often".into())
            } else {
                get(k)
            }
        };
        let e = PoolEnv::from_lookup(bad).unwrap_err();
        assert!(e.to_string().contains(ENV_POOL_MALLEABLE), "{e}");
    }

    #[test]
    fn long_lines_are_cut_into_pieces_of_at_most_max() {
        let mut input = vec![b'x'; 10];
        input.extend_from_slice(b"ab\ncd\n");
        input.extend_from_slice(&[b'y'; 7]);
        let mut r = io::BufReader::with_capacity(4, &input[..]);
        let mut line = Vec::new();
        let mut got = Vec::new();
        while read_line_capped(&mut r, &mut line, 5).unwrap() > 0 {
            assert!(line.len() <= 5);
            got.push(String::from_utf8(line.clone()).unwrap());
        }
        assert_eq!(
            got,
            ["xxxxx", "xxxxx", "ab\n", "cd\n", "yyyyy", "yy"],
            "pieces of at most 5 bytes, newlines kept, nothing lost"
        );
    }

    #[test]
    fn keep_going_tolerates_crashes_but_not_errors() {
        use std::os::unix::process::ExitStatusExt;
        let exited = |code: i32| ProcessEnd::Exited(ExitStatus::from_raw(code << 8));
        let signalled = |sig: i32| ProcessEnd::Exited(ExitStatus::from_raw(sig));
        let outcome = |ends: Vec<ProcessEnd>, keep_going: bool| LaunchOutcome {
            pool: "p".into(),
            registry: "127.0.0.1:1".parse().unwrap(),
            ends,
            timed_out: false,
            interrupted: false,
            keep_going,
        };
        let sigkill = signal_hook::consts::SIGKILL;
        let removed = ProcessEnd::Removed(ExitStatus::from_raw(SIGTERM));
        // (ends, exit code without --keep-going, with it)
        let cases = [
            (vec![exited(0), exited(0)], 0, 0),
            (vec![exited(0), signalled(sigkill)], 1, 0),
            (
                vec![signalled(sigkill), exited(0), signalled(SIGTERM)],
                1,
                0,
            ),
            (vec![exited(0), exited(3)], 1, 1),
            (vec![exited(0), signalled(sigkill), exited(1)], 1, 1),
            // Nobody finished.
            (vec![signalled(sigkill), signalled(sigkill)], 1, 1),
            (vec![removed, signalled(sigkill)], 1, 1),
            (vec![exited(0), removed, signalled(sigkill)], 1, 0),
            // ipl-run killed it (grace, timeout, a removal not obeyed): never tolerated.
            (vec![exited(0), ProcessEnd::Killed], 1, 1),
        ];
        for (ends, plain, tolerant) in cases {
            assert_eq!(outcome(ends.clone(), false).exit_code(), plain, "{ends:?}");
            assert_eq!(
                outcome(ends.clone(), true).exit_code(),
                tolerant,
                "{ends:?}"
            );
        }
        // Timeouts and interrupts win as before.
        let mut o = outcome(vec![exited(0)], true);
        o.timed_out = true;
        assert_eq!(o.exit_code(), EXIT_TIMEOUT);
        o.interrupted = true;
        assert_eq!(o.exit_code(), 143);
    }

    #[test]
    fn unique_pool_names_differ() {
        assert_ne!(unique_pool_name(), unique_pool_name());
    }
}
