//! Two hosts on one machine for tests: two network namespaces joined by a veth pair,
//! with one address each, made by [`NetnsPair::create`] and removed (with the processes
//! started in them) when the pair is dropped, on every exit path of a test.
//!
//! Needs root and `ip` (iproute2): a test calls [`NetnsPair::create`] and, when it
//! fails, says why and passes, unless [`launchers_required`] (`IBIS_REQUIRE_LAUNCHERS=1`),
//! in which case it fails.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Whether tests must fail rather than pass when a real component is missing.
pub fn launchers_required() -> bool {
    std::env::var("IBIS_REQUIRE_LAUNCHERS").is_ok_and(|v| v == "1")
}

/// Runs `ip` with `args`; `Err` with its output when it fails.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
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

/// Two network namespaces joined by a veth pair, and the processes started in them.
pub struct NetnsPair {
    /// The namespaces' names.
    pub names: [String; 2],
    children: Vec<Option<Child>>,
}

impl NetnsPair {
    /// Namespaces `ibis-<tag>-<pid>-a` and `-b`, each with loopback up and one end of
    /// a veth pair carrying `addrs[i]` (CIDR form, e.g. `10.231.0.1/24`).
    pub fn create(tag: &str, addrs: [&str; 2]) -> Result<NetnsPair, String> {
        let pid = std::process::id();
        let pair = NetnsPair {
            names: [format!("ibis-{tag}-{pid}-a"), format!("ibis-{tag}-{pid}-b")],
            children: Vec::new(),
        };
        let [a, b] = pair.names.clone();
        ip(&["netns", "add", &a])?;
        ip(&["netns", "add", &b])?;
        // Interface names have at most 15 bytes; each lives in its own namespace.
        let (va, vb) = ("ibis-veth-a", "ibis-veth-b");
        ip(&[
            "link", "add", va, "netns", &a, "type", "veth", "peer", "name", vb, "netns", &b,
        ])?;
        for (ns, dev, addr) in [(&a, va, addrs[0]), (&b, vb, addrs[1])] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }

    /// Starts `program` with `args` and `env` in namespace `i` (stdout piped);
    /// returns its index for [`line`](Self::line) and [`exit`](Self::exit).
    pub fn spawn(
        &mut self,
        i: usize,
        program: &std::path::Path,
        args: &[&str],
        env: &[(&str, String)],
    ) -> std::io::Result<usize> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[i]])
            .arg(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.children.push(Some(cmd.spawn()?));
        Ok(self.children.len() - 1)
    }

    /// What follows `marker` in the first line process `child` prints with it, within
    /// `patience`. The rest of its output is read and dropped (a closed pipe would fail
    /// its later writes).
    ///
    /// # Panics
    /// If no such line comes (this is for tests).
    pub fn line(&mut self, child: usize, marker: &'static str, patience: Duration) -> String {
        let out = self.children[child]
            .as_mut()
            .and_then(|c| c.stdout.take())
            .expect("a running child with piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(at) = line.find(marker) {
                    let _ = tx.send(line[at + marker.len()..].to_string());
                }
            }
        });
        rx.recv_timeout(patience)
            .unwrap_or_else(|_| panic!("no {marker:?} line from process {child}"))
    }

    /// How process `child` ended, within `patience` (its exit is polled every 10 ms:
    /// the standard library has no wait with a timeout).
    ///
    /// # Panics
    /// If it does not end in time (it is killed first).
    pub fn exit(&mut self, child: usize, patience: Duration) -> ExitStatus {
        let mut c = self.children[child].take().expect("a running child");
        let end = std::time::Instant::now() + patience;
        loop {
            match c.try_wait() {
                Ok(Some(s)) => return s,
                Ok(None) if std::time::Instant::now() < end => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                r => {
                    let _ = c.kill();
                    let _ = c.wait();
                    panic!("process {child} did not end within {patience:?}: {r:?}");
                }
            }
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.names {
            // Deleting a namespace deletes the veth end in it, and so the pair.
            let _ = ip(&["netns", "del", n]);
        }
    }
}
