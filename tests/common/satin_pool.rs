//! A pool of `satin-app` processes around a registry server in the test process, as
//! `ipl-run` would start it, for the tests that hurt pools on purpose (cut links, kill
//! members): its processes, their logs, the master's report, bounded waits. The
//! processes run on 127.0.0.1 ([`Place::Loopback`]) or one on each of a set of network
//! namespace hosts ([`Place::Hosts`], tests/common/hosts.rs).

// Each test file uses a part of it.
#![allow(dead_code)]
use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_registry::net::Heartbeat;
use ipl_registry::{RegistryServer, ServerHandle};
use ipl_tools::launcher::{unique_pool_name, PoolEnv};

#[path = "hosts.rs"]
pub mod hosts;

/// Where a pool's processes run.
#[derive(Debug, Clone, Copy)]
pub enum Place {
    /// All on 127.0.0.1, the registry server with its default heartbeats.
    Loopback,
    /// Member `i` on host `i` of its own set of `n + 1` namespace hosts (cluster
    /// `host-i`), the registry server on host `n` with these heartbeats (a cut host is
    /// noticed by them). Make sure first that hosts can be made
    /// ([`hosts::unavailable`]): starting fails the test where they cannot.
    Hosts(Heartbeat),
}

/// [`Place::Hosts`] with these heartbeats where this machine can make hosts; `None`
/// (the test says why and passes) where it cannot, unless [`hosts::REQUIRE`] asks for
/// them (then the test fails).
pub fn on_hosts(beat: Heartbeat) -> Option<Place> {
    if let Some(why) = hosts::unavailable() {
        assert!(!hosts::required(), "{}=1 but {why}", hosts::REQUIRE);
        eprintln!("multi-host test skipped: {why}");
        return None;
    }
    Some(Place::Hosts(beat))
}

/// A registry server for members `0..n` at `place`: on 127.0.0.1, or on host `n` of
/// `n + 1` new hosts, returned with it (members go on hosts `0..n`).
pub fn registry_at(
    place: Place,
    n: usize,
    secret: &PoolSecret,
) -> (ServerHandle, Option<hosts::Hosts>) {
    match place {
        Place::Loopback => {
            let server = RegistryServer::bind("127.0.0.1:0", secret.clone())
                .expect("bind the registry")
                .run_in_background()
                .expect("run the registry");
            (server, None)
        }
        Place::Hosts(beat) => {
            let h = hosts::Hosts::new(n + 1).expect("hosts (checked by the test)");
            // The listener is made on the registry's host (this thread only).
            let server = std::thread::scope(|s| {
                s.spawn(|| -> std::io::Result<ServerHandle> {
                    h.enter(n)?;
                    RegistryServer::bind((h.addr(n), 0), secret.clone())?
                        .with_heartbeat(beat)
                        .run_in_background()
                })
                .join()
                .expect("registry thread")
            })
            .expect("a registry server on its host");
            (server, Some(h))
        }
    }
}

/// A command that starts `program` as member `rank`, and that member's cluster: here
/// in cluster `c0` without hosts, else on host `rank` in cluster `host-RANK`.
/// `ip netns exec` execs the program: the child's pid is the member's (a signal sent
/// to it reaches the member).
pub fn member_command(
    hosts: Option<&hosts::Hosts>,
    rank: usize,
    program: &str,
) -> (Command, String) {
    match hosts {
        None => (Command::new(program), "c0".to_string()),
        Some(h) => (h.command(rank, program), format!("host-{rank}")),
    }
}

/// The launcher rank of the winner of `pool`'s master election, if there is one now
/// (members are named `member-R`).
pub fn winner_rank(server: &ServerHandle, pool: &str) -> Option<usize> {
    let name = server.with_core(|c| {
        c.election_result(pool, satin::dist::MASTER_ELECTION)
            .ok()
            .flatten()
            .map(|w| w.name().to_string())
    })?;
    name.strip_prefix("member-")?.parse().ok()
}

/// Every run ends within this (a hang fails the test).
pub const BOUND: Duration = Duration::from_secs(90);

pub fn scratch(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "satin-faults-{}-{}-{what}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A pool of `satin-app` processes with a registry server in this process.
pub struct Pool {
    pub server: Option<ServerHandle>,
    pub children: Vec<Child>,
    pub logs: Vec<PathBuf>,
    pub report: PathBuf,
    pub ends: Vec<Option<ExitStatus>>,
    pub pool: String,
    /// The hosts of a pool started on [`Place::Hosts`], removed after its processes.
    pub hosts: Option<hosts::Hosts>,
}

impl Pool {
    pub fn start(n: usize, args: &[&str], env: &[(&str, &str)]) -> Pool {
        Self::start_reporting_to(n, args, env, scratch("report"))
    }

    /// Like [`Pool::start`] with the report file given: a run started again with
    /// the same arguments (a checkpoint is reused only with the same arguments).
    #[allow(dead_code, reason = "not every test file restarts a run")]
    pub fn start_reporting_to(
        n: usize,
        args: &[&str],
        env: &[(&str, &str)],
        report: PathBuf,
    ) -> Pool {
        Self::start_at(Place::Loopback, n, args, env, report)
    }

    /// Like [`Pool::start_reporting_to`], the processes where `place` says.
    pub fn start_at(
        place: Place,
        n: usize,
        args: &[&str],
        env: &[(&str, &str)],
        report: PathBuf,
    ) -> Pool {
        let _ = std::fs::remove_file(&report);
        let secret = PoolSecret::generate().expect("a secret");
        let (server, hosts) = registry_at(place, n, &secret);
        let pool = unique_pool_name();
        let mut children = Vec::new();
        let mut logs = Vec::new();
        for i in 0..n {
            let log = scratch(&format!("log{i}"));
            let out = std::fs::File::create(&log).expect("a log file");
            let err = out.try_clone().expect("a log file");
            let mut argv: Vec<OsString> = args.iter().map(OsString::from).collect();
            argv.extend(["--workers".into(), "1".into(), "--report".into()]);
            argv.push(report.clone().into());
            let (mut command, cluster) =
                member_command(hosts.as_ref(), i, env!("CARGO_BIN_EXE_satin-app"));
            let child = command
                .args(argv)
                .env("IPL_TRANSPORT", "tcp")
                .env("RUST_LOG", "warn")
                .envs(env.iter().copied())
                .envs(PoolEnv::member(server.local_addr(), &pool, n, &secret, &cluster, i).vars())
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("start satin-app");
            children.push(child);
            logs.push(log);
        }
        Pool {
            server: Some(server),
            ends: vec![None; n],
            children,
            logs,
            report,
            pool,
            hosts,
        }
    }

    /// The launcher rank of the member that won the master election, once there is
    /// one (bounded by `within`): members are named `member-R`.
    pub fn master_rank(&self, within: Duration) -> Option<usize> {
        let server = self.server.as_ref()?;
        let until = Instant::now() + within;
        loop {
            if let Some(rank) = winner_rank(server, &self.pool) {
                return Some(rank);
            }
            if Instant::now() >= until || self.ends_any() {
                return None;
            }
            // Bounded poll of the registry's state; nothing to be notified by.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether a process has already ended (looked at without waiting).
    pub fn ends_any(&self) -> bool {
        self.ends.iter().any(Option::is_some)
    }

    /// Whether process `rank` has ended (looked at now, without waiting).
    pub fn ended(&mut self, rank: usize) -> bool {
        if self.ends[rank].is_none() {
            self.ends[rank] = self.children[rank].try_wait().ok().flatten();
        }
        self.ends[rank].is_some()
    }

    /// Number of members the registry counts in the pool now.
    pub fn members(&self) -> usize {
        self.server
            .as_ref()
            .and_then(|s| s.with_core(|c| c.pool(&self.pool).ok().map(|p| p.members().len())))
            .unwrap_or(0)
    }

    /// Kills process `rank` with SIGKILL (as a crashing machine); whether it was
    /// still running.
    pub fn kill(&mut self, rank: usize) -> bool {
        if let Ok(Some(status)) = self.children[rank].try_wait() {
            self.ends[rank] = Some(status);
            return false;
        }
        let killed = self.children[rank].kill().is_ok();
        if let Ok(status) = self.children[rank].wait() {
            self.ends[rank] = Some(status);
        }
        killed
    }

    /// Cuts the network of process `rank`'s host (a pool on [`Place::Hosts`]): its
    /// process keeps running. Whether it was still running.
    pub fn cut(&mut self, rank: usize) -> bool {
        if self.ended(rank) {
            return false;
        }
        self.hosts
            .as_ref()
            .expect("a pool on hosts")
            .cut(rank)
            .unwrap_or_else(|e| panic!("cutting host {rank}: {e}"));
        true
    }

    pub fn registry(&self) -> SocketAddr {
        self.server.as_ref().expect("the server runs").local_addr()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Waits for every process, at most until `BOUND` after `start`; kills the rest.
    /// Returns whether all ended by themselves.
    pub fn wait(&mut self, start: Instant) -> bool {
        loop {
            for (i, c) in self.children.iter_mut().enumerate() {
                if self.ends[i].is_none() {
                    self.ends[i] = c.try_wait().expect("wait for a child");
                }
            }
            if self.ends.iter().all(Option::is_some) {
                return true;
            }
            if start.elapsed() > BOUND {
                for c in &mut self.children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn logs(&self) -> String {
        let mut s = String::new();
        for (i, l) in self.logs.iter().enumerate() {
            let text = std::fs::read_to_string(l).unwrap_or_default();
            s.push_str(&format!(
                "--- process {i} ({:?}):\n{text}",
                self.ends.get(i).copied().flatten()
            ));
        }
        s
    }

    /// The master's report (`key = value` lines), if it wrote one.
    pub fn report(&self) -> Option<HashMap<String, String>> {
        let text = std::fs::read_to_string(&self.report).ok()?;
        Some(
            text.lines()
                .filter_map(|l| l.split_once(" = "))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// A number of the master's report (0 when it is missing or not a number).
    pub fn report_number(&self, key: &str) -> f64 {
        self.report()
            .and_then(|kv| kv.get(key).and_then(|v| v.parse().ok()))
            .unwrap_or(0.0)
    }

    /// Asserts that every process ended within the bound and the master reported
    /// `result`.
    pub fn assert_result(&mut self, start: Instant, result: &str) {
        let ended = self.wait(start);
        let logs = self.logs();
        assert!(ended, "the pool did not end within {BOUND:?}:\n{logs}");
        let kv = self
            .report()
            .unwrap_or_else(|| panic!("the master wrote no report:\n{logs}"));
        assert_eq!(
            kv.get("result").map(String::as_str),
            Some(result),
            "{kv:?}\n{logs}"
        );
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.report);
        for l in &self.logs {
            let _ = std::fs::remove_file(l);
        }
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}
