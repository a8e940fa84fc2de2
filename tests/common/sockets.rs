//! The TCP connections of processes on this machine as `ss` shows them, and resetting
//! one with `ss -K` (root), for the tests that cut links between pool members
//! (`#[path]`-included).

use std::process::Command;

/// One established TCP connection of `ss -tnpi`: local and peer address, the pid
/// owning the local end, and the bytes it received.
#[derive(Debug, Clone)]
pub struct Conn {
    pub local: String,
    pub peer: String,
    pub pid: u32,
    pub received: u64,
}

/// The established TCP connections owned by `pids` (empty without `ss`).
pub fn connections(pids: &[u32]) -> Vec<Conn> {
    let Ok(out) = Command::new("ss").args(["-Htnpi"]).output() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut conns: Vec<Conn> = Vec::new();
    let mut last_mine = false;
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if !line.starts_with(char::is_whitespace) {
            last_mine = false;
        }
        if line.starts_with(char::is_whitespace) {
            // The details of the socket line before it.
            if let (true, Some(c)) = (last_mine, conns.last_mut()) {
                c.received = cols
                    .iter()
                    .find_map(|w| w.strip_prefix("bytes_received:"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
            }
            continue;
        }
        if cols.len() < 6 || cols[0] != "ESTAB" {
            continue;
        }
        let Some(pid) = cols[5..]
            .iter()
            .find_map(|c| c.split("pid=").nth(1))
            .and_then(|p| p.split([',', ')']).next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pids.contains(&pid) {
            conns.push(Conn {
                local: cols[3].to_string(),
                peer: cols[4].to_string(),
                pid,
                received: 0,
            });
            last_mine = true;
        }
    }
    conns
}

/// The port of `address:port`.
pub fn port(a: &str) -> &str {
    a.rsplit(':').next().unwrap_or_default()
}

/// Resets one TCP connection: the socket with this local and peer address.
pub fn reset(c: &Conn) -> bool {
    Command::new("ss")
        .args([
            "-K",
            "src",
            "127.0.0.1",
            "sport",
            "=",
            port(&c.local),
            "dst",
            "127.0.0.1",
            "dport",
            "=",
            port(&c.peer),
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this process may reset sockets (`ss -K` needs root and `ss`).
pub fn can_reset() -> bool {
    rustix::process::geteuid().is_root()
        && Command::new("ss")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
}
