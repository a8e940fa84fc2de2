//! Two hosts on one machine: two network namespaces joined by a veth pair (addresses
//! 10.231.0.1/24 and 10.231.0.2/24 inside them only), made and removed by the test,
//! with one process each running a TCP endpoint with the default interface selection.
//! The client, on another host by the namespaces' identity, skips the server's loopback
//! address and reaches it over the veth link.
//!
//! Needs root and `ip` (iproute2); without them the test says so and passes, unless
//! `IBIS_REQUIRE_LAUNCHERS=1` is set. The two processes are this test binary again,
//! running the ignored `netns_member` with its role in the environment.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{endpoint, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_tcp::{Address, TcpTransport};

const ROLE: &str = "IBIS_NETNS_ROLE";
const PEER: &str = "IBIS_NETNS_PEER";
const SECRET: &str = "IBIS_NETNS_SECRET";
const SERVER_IP: &str = "10.231.0.1";
const CLIENT_IP: &str = "10.231.0.2";

/// Runs `ip` with `args`; `Err` with its output when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
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

/// Two namespaces joined by a veth pair; removed (with the link) on drop, and the
/// processes started in them killed.
struct Hosts {
    names: [String; 2],
    children: Vec<Child>,
}

impl Hosts {
    fn create() -> Result<Hosts, String> {
        let tag = std::process::id();
        let hosts = Hosts {
            names: [format!("ibis-addr-{tag}-a"), format!("ibis-addr-{tag}-b")],
            children: Vec::new(),
        };
        let [a, b] = hosts.names.clone();
        ip(&["netns", "add", &a])?;
        ip(&["netns", "add", &b])?;
        // Interface names have at most 15 bytes.
        let (va, vb) = (
            format!("ia{}", tag % 1_000_000),
            format!("ib{}", tag % 1_000_000),
        );
        ip(&[
            "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b,
        ])?;
        for (ns, dev, addr) in [(&a, &va, SERVER_IP), (&b, &vb, CLIENT_IP)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    /// This test binary, running `netns_member` as `role` in namespace `i`.
    fn spawn(&mut self, i: usize, role: &str, env: &[(&str, String)]) -> std::io::Result<()> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[i]])
            .arg(exe)
            .args([
                "--exact",
                "netns_member",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.children.push(cmd.spawn()?);
        Ok(())
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.names {
            // Deleting a namespace deletes the veth end in it, and so the pair.
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// What follows `prefix` in the first line a child prints with it, within `PATIENCE`.
fn line_from(child: &mut Child, prefix: &'static str) -> String {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end: a closed pipe would fail the child's later writes.
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            // The test harness may print "test netns_member ... " before it.
            if let Some(at) = line.find(prefix) {
                let _ = tx.send(line[at + prefix.len()..].to_string());
            }
        }
    });
    rx.recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("no {prefix:?} line from the child"))
}

/// The exit status of `child`, within `PATIENCE`.
fn exit_of(child: Child) -> std::process::ExitStatus {
    let (tx, rx) = mpsc::channel();
    let pid = child.id();
    let mut child = child;
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    rx.recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("process {pid} did not end"))
        .expect("wait")
}

#[test]
fn two_namespace_hosts_connect_over_their_veth_link() {
    let required = std::env::var("IBIS_REQUIRE_LAUNCHERS").is_ok_and(|v| v == "1");
    let mut hosts = match Hosts::create() {
        Ok(h) => h,
        Err(why) if !required => {
            eprintln!("skipped: network namespaces unavailable (needs root and iproute2): {why}");
            return;
        }
        Err(why) => panic!("network namespaces unavailable and IBIS_REQUIRE_LAUNCHERS=1: {why}"),
    };
    let secret = PoolSecret::generate().unwrap().to_hex();
    hosts
        .spawn(0, "server", &[(SECRET, secret.clone())])
        .expect("start the server");
    let server_addr = line_from(&mut hosts.children[0], "address=");
    let parsed = Address::parse("tcp", server_addr.as_bytes()).unwrap();
    // The server advertises its veth address and its own loopback.
    assert!(
        parsed
            .sockets
            .iter()
            .any(|s| s.ip().to_string() == SERVER_IP),
        "{server_addr}"
    );
    assert!(
        parsed.sockets.iter().any(|s| s.ip().is_loopback()),
        "{server_addr}"
    );
    hosts
        .spawn(1, "client", &[(SECRET, secret), (PEER, server_addr)])
        .expect("start the client");
    let used = line_from(&mut hosts.children[1], "used=");
    assert!(used.starts_with(&format!("{SERVER_IP}:")), "{used}");
    let client = hosts.children.remove(1);
    assert!(exit_of(client).success(), "client failed");
    let server = hosts.children.remove(0);
    assert!(exit_of(server).success(), "server failed");
}

/// One side of the test above, in its namespace (does nothing when run on its own).
#[test]
#[ignore = "run by two_namespace_hosts_connect_over_their_veth_link inside a namespace"]
fn netns_member() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let secret = std::env::var(SECRET).expect("secret");
    let cfg = format!("secret={secret}\npool=netns");
    let (t, log) = endpoint(&cfg);
    match role.as_str() {
        "server" => {
            println!(
                "address={}",
                String::from_utf8(t.local_address().unwrap()).unwrap()
            );
            // Echo the client's message, then wait for it to go.
            let e = log.wait("the client's message", |e| e.messages.len() == 1);
            let (ch, msg) = e.messages[0].clone();
            drop(e);
            t.send(ch, &[&msg]).unwrap();
            log.until("the client to leave", |e| !e.closed.is_empty());
        }
        "client" => {
            let peer = std::env::var(PEER).expect("peer address");
            let ch = t
                .connect(peer.as_bytes(), Duration::from_secs(10))
                .expect("connect across namespaces");
            t.send(ch, &[b"across hosts"]).unwrap();
            let e = log.wait("the echo", |e| e.messages.len() == 1);
            assert_eq!(e.messages[0].1, b"across hosts");
            drop(e);
            let used = TcpTransport::peer_addresses(&t.local_address().unwrap()).unwrap();
            assert_eq!(used.len(), 1, "{used:?}");
            println!("used={}", used[0]);
            t.close_channel(ch);
        }
        other => panic!("unknown role {other}"),
    }
}
