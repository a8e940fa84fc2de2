//! Several hosts on one machine for one test: a network namespace per host, each with
//! one veth into a bridge that lives in a namespace of its own (the hub), one address
//! each in `10.99.0.0/24` (`10.99.0.1` for host 0, ...). Nothing is added to the
//! machine's own namespace (the veth pairs are made there and moved at once), so the
//! test's traffic stays on links it made. Needs root and `ip` (iproute2); dropping the
//! value deletes the namespaces, which removes their links.
//!
//! A daemon runs on a host under `nsenter --net=`[`NetHosts::path`] (unlike `ip netns
//! exec` it leaves `/sys` as it is, which slurmd needs); a thread of the test moves
//! itself there with [`NetHosts::move_thread_into`].

use std::path::PathBuf;
use std::process::Command;

/// The test's hosts.
pub struct NetHosts {
    prefix: String,
    /// The hosts' addresses, by index.
    pub addresses: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
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

/// Why namespace hosts cannot be made here, if they cannot.
pub fn unavailable() -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        return Some("network namespaces need root".into());
    }
    for p in ["ip", "nsenter"] {
        if Command::new(p).arg("-V").output().is_err() {
            return Some(format!("{p} is not installed"));
        }
    }
    None
}

impl NetHosts {
    /// Makes `n` hosts (at most 200).
    pub fn new(n: usize) -> Result<NetHosts, String> {
        if n > 200 {
            return Err(format!("{n} hosts: at most 200"));
        }
        // Short: interface names have at most 15 bytes.
        let prefix = format!("il{}", std::process::id());
        let mut hosts = NetHosts {
            prefix,
            addresses: Vec::new(),
        };
        let hub = hosts.ns_name("hub");
        ip(&["netns", "add", &hub])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = hosts.ns_name(&format!("h{i}"));
            let (inner, outer) = (
                format!("{}h{i}e", hosts.prefix),
                format!("{}h{i}p", hosts.prefix),
            );
            let address = format!("10.99.0.{}", i + 1);
            ip(&["netns", "add", &ns])?;
            hosts.addresses.push(address.clone());
            ip(&[
                "link", "add", &inner, "type", "veth", "peer", "name", &outer,
            ])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "netns", &hub])?;
            ip(&["-n", &hub, "link", "set", &outer, "master", "br0"])?;
            ip(&["-n", &hub, "link", "set", &outer, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{address}/24"),
                "dev",
                &inner,
            ])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    fn ns_name(&self, what: &str) -> String {
        format!("{}-{what}", self.prefix)
    }

    /// The namespace file of host `i`.
    pub fn path(&self, i: usize) -> PathBuf {
        PathBuf::from("/run/netns").join(self.ns_name(&format!("h{i}")))
    }

    /// Moves the calling thread onto host `i` (its sockets and children live there).
    pub fn move_thread_into(&self, i: usize) -> Result<(), String> {
        use std::os::fd::AsFd;
        let f = std::fs::File::open(self.path(i)).map_err(|e| e.to_string())?;
        rustix::thread::move_into_link_name_space(
            f.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| format!("setns: {e}"))
    }
}

impl Drop for NetHosts {
    fn drop(&mut self) {
        for i in 0..self.addresses.len() {
            let _ = ip(&["netns", "del", &self.ns_name(&format!("h{i}"))]);
        }
        let _ = ip(&["netns", "del", &self.ns_name("hub")]);
    }
}
