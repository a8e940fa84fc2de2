//! Several hosts on one machine, for the multi-host tests: one network namespace per
//! host, each with one address (`10.77.0.<i + 1>/24` on its `eth0`) on a bridge that
//! lives in a namespace of its own, so that nothing touches the machine's own network.
//! The test makes them and removes them when it ends, on every path (`Drop`).
//!
//! Making namespaces needs root and `ip` (iproute2). Where either is missing,
//! [`Hosts::new`] says so and returns `None` (the test passes), unless
//! `IBIS_REQUIRE_LAUNCHERS=1` asks for every real component, as `.ci/run` does: then
//! the test fails.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable that turns a missing component into a failure.
pub const REQUIRE: &str = "IBIS_REQUIRE_LAUNCHERS";

/// Whether the environment asks for every real component.
pub fn required() -> bool {
    std::env::var(REQUIRE).is_ok_and(|v| v == "1")
}

/// `n` hosts, removed on drop.
pub struct Hosts {
    tag: String,
    n: usize,
}

/// Runs `ip ARGS`; the error holds its standard error.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why this machine cannot make hosts, if it cannot.
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root: network namespaces need it".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("`ip -V` failed: {}", o.status)),
        Err(e) => Some(format!("no `ip` (iproute2): {e}")),
    }
}

impl Hosts {
    /// Makes `n` hosts (at most 250); `None` where this machine cannot (see the module
    /// documentation). A failure half-way removes what was made and fails the test.
    pub fn new(n: usize) -> Option<Hosts> {
        assert!((1..=250).contains(&n), "1 to 250 hosts");
        if let Some(why) = unavailable() {
            assert!(!required(), "{REQUIRE}=1 but {why}");
            eprintln!("multi-host test skipped: {why}");
            return None;
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let hosts = Hosts {
            tag: format!(
                "ibis-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
            n: 0,
        };
        Some(
            hosts
                .make(n)
                .unwrap_or_else(|e| panic!("making {n} hosts: {e}")),
        )
    }

    fn make(mut self, n: usize) -> Result<Hosts, String> {
        let sw = self.switch();
        ip(&["netns", "add", &sw])?;
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let h = self.netns(i);
            ip(&["netns", "add", &h])?;
            self.n = i + 1;
            let port = format!("h{i}");
            ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &h,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &port, "up"])?;
            let addr = format!("{}/24", self.addr(i));
            ip(&["-n", &h, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &h, "link", "set", "eth0", "up"])?;
            ip(&["-n", &h, "link", "set", "lo", "up"])?;
        }
        Ok(self)
    }

    /// The namespace holding the bridge.
    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    /// The number of hosts.
    pub fn len(&self) -> usize {
        self.n
    }

    /// The network namespace of host `i`.
    pub fn netns(&self, i: usize) -> String {
        format!("{}-h{i}", self.tag)
    }

    /// The address of host `i`.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, 0, (i + 1) as u8)
    }

    /// The namespace file of host `i` (for `nsenter --net=`, which leaves `/sys` as it
    /// is, as slurmd needs).
    pub fn path(&self, i: usize) -> std::path::PathBuf {
        std::path::PathBuf::from(format!("/run/netns/{}", self.netns(i)))
    }

    /// A command that runs `program` on host `i` (`ip netns exec`).
    pub fn command(&self, i: usize, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns(i)]).arg(program);
        c
    }

    /// Moves the calling thread onto host `i`: sockets it makes from now on live in that
    /// host's network (and stay there when other threads use them).
    pub fn enter(&self, i: usize) -> std::io::Result<()> {
        let f = File::open(self.path(i))?;
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&f),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        Ok(())
    }

    /// Cuts host `i` off the network (its port on the bridge goes down); its processes
    /// keep running.
    pub fn cut(&self, i: usize) -> Result<(), String> {
        ip(&[
            "-n",
            &self.switch(),
            "link",
            "set",
            &format!("h{i}"),
            "down",
        ])
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Removing a namespace removes its end of each veth pair, and so the pair.
        for i in 0..self.n {
            if let Err(e) = ip(&["netns", "del", &self.netns(i)]) {
                eprintln!("removing a test host: {e}");
            }
        }
        if let Err(e) = ip(&["netns", "del", &self.switch()]) {
            eprintln!("removing a test switch: {e}");
        }
    }
}

/// How a process run by [`run_all`] ended: its exit status and output.
#[derive(Debug)]
pub struct Ended {
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its standard output and error, for messages.
    pub output: String,
}

/// Starts every command (with piped output) and waits for all of them, at most
/// `timeout` in all; those still running then are killed and the test fails.
pub fn run_all(commands: Vec<Command>, timeout: std::time::Duration) -> Vec<Ended> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut pids = Vec::new();
    for (i, mut c) in commands.into_iter().enumerate() {
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {c:?}: {e}"));
        pids.push(child.id());
        let tx = tx.clone();
        std::thread::spawn(move || {
            let ended = match child.wait_with_output() {
                Ok(o) => Ended {
                    success: o.status.success(),
                    output: format!(
                        "{}: {}{}",
                        o.status,
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    ),
                },
                Err(e) => Ended {
                    success: false,
                    output: format!("waiting for it: {e}"),
                },
            };
            let _ = tx.send((i, ended));
        });
    }
    drop(tx);
    let deadline = std::time::Instant::now() + timeout;
    let mut ended: Vec<Option<Ended>> = (0..pids.len()).map(|_| None).collect();
    for _ in 0..pids.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, e)) => ended[i] = Some(e),
            Err(_) => {
                for (i, pid) in pids.iter().enumerate() {
                    if ended[i].is_none() {
                        // `ip netns exec` execs the program: the pid is the program's.
                        if let Some(p) = rustix::process::Pid::from_raw(*pid as i32) {
                            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                        }
                    }
                }
                panic!("processes still running after {timeout:?}: {ended:?}");
            }
        }
    }
    ended
        .into_iter()
        .map(|e| e.expect("every process ended"))
        .collect()
}
