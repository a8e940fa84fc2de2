//! Pools across hosts: network namespaces on this machine (tests/common/hosts.rs), each
//! a host with its own address; the test harness itself first (hosts reach each other,
//! a cut host does not).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_registry::net::Heartbeat;
use ipl_registry::{RegistryServer, ServerHandle};
use ipl_tools::launcher::PoolEnv;

#[path = "../common/hosts.rs"]
mod hosts;

#[test]
fn hosts_reach_each_other_until_one_is_cut() {
    let Some(h) = hosts::Hosts::new(2) else {
        return;
    };
    let listener = std::thread::scope(|s| {
        s.spawn(|| {
            h.enter(0).expect("enter host 0");
            TcpListener::bind((h.addr(0), 0)).expect("bind on host 0")
        })
        .join()
        .expect("host 0 thread")
    });
    let to: SocketAddr = listener.local_addr().unwrap();
    assert_eq!(to.ip(), h.addr(0));
    let connect = || {
        std::thread::scope(|s| {
            s.spawn(|| {
                h.enter(1).expect("enter host 1");
                TcpStream::connect_timeout(&to, Duration::from_secs(2))
            })
            .join()
            .expect("host 1 thread")
        })
    };
    let mut c = connect().expect("host 1 reaches host 0");
    let (mut a, from) = listener.accept().unwrap();
    assert_eq!(from.ip(), h.addr(1));
    c.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    a.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");

    h.cut(1).expect("cut host 1");
    assert!(connect().is_err(), "a cut host must not reach the others");
}

/// The pool variables of member `rank` of a pool of `size` on `h`, registry `registry`.
fn member_env(
    c: &mut Command,
    registry: SocketAddr,
    pool: &str,
    size: usize,
    secret: &PoolSecret,
    rank: usize,
    host: usize,
) {
    let cluster = format!("host-{host}");
    c.envs(PoolEnv::member(registry, pool, size, secret, &cluster, rank).vars());
}

/// A registry server on host `i` (its listener lives in that host's network).
fn registry_on(h: &hosts::Hosts, i: usize, secret: &PoolSecret) -> ServerHandle {
    std::thread::scope(|s| {
        s.spawn(|| -> std::io::Result<ServerHandle> {
            h.enter(i)?;
            RegistryServer::bind((h.addr(i), 0), secret.clone())?.run_in_background()
        })
        .join()
        .expect("registry thread")
    })
    .expect("a registry server on a host")
}

/// fib on a pool of one process on each of three hosts over `transport`: the right
/// answer, every member on its own host.
fn fib_on_three_hosts(transport: &str) {
    let Some(h) = hosts::Hosts::new(3) else {
        return;
    };
    let secret = PoolSecret::generate().unwrap();
    let server = registry_on(&h, 0, &secret);
    let report =
        std::env::temp_dir().join(format!("hosts-fib-{transport}-{}.txt", std::process::id()));
    let commands = (0..3)
        .map(|i| {
            let mut c = h.command(i, env!("CARGO_BIN_EXE_satin-app"));
            c.args(["fib", "22", "--check", "--report"]).arg(&report);
            member_env(&mut c, server.local_addr(), "fib", 3, &secret, i, i);
            c.env("IPL_TRANSPORT", transport);
            c
        })
        .collect();
    let ended = hosts::run_all(commands, Duration::from_secs(120));
    assert!(
        ended.iter().all(|e| e.success),
        "a member failed: {:#?}",
        ended
    );
    let text = std::fs::read_to_string(&report).expect("the master's report");
    let _ = std::fs::remove_file(&report);
    assert!(text.contains("check = ok"), "{text}");
    assert!(text.contains("processes = 3"), "{text}");
}

#[test]
fn fib_on_three_hosts_over_tcp() {
    fib_on_three_hosts("tcp");
}

#[test]
fn fib_on_three_hosts_over_quic() {
    fib_on_three_hosts("quic");
}

/// Two processes on each of three hosts, no transport preferred: shm between the two
/// of a host, tcp between hosts (the members check it themselves).
#[test]
fn shm_inside_a_host_and_tcp_across() {
    let Some(h) = hosts::Hosts::new(3) else {
        return;
    };
    let secret = PoolSecret::generate().unwrap();
    let server = registry_on(&h, 0, &secret);
    let commands = (0..6)
        .map(|rank| {
            let host = rank / 2;
            let mut c = h.command(host, env!("CARGO_BIN_EXE_ipl-pool-check"));
            c.arg("transports");
            member_env(&mut c, server.local_addr(), "mesh", 6, &secret, rank, host);
            c
        })
        .collect();
    let ended = hosts::run_all(commands, Duration::from_secs(120));
    assert!(
        ended.iter().all(|e| e.success),
        "a member failed: {:#?}",
        ended
    );
    for e in &ended {
        // Each member names 5 connections: 1 inside its host, 4 across.
        let lines: Vec<&str> = e
            .output
            .lines()
            .filter(|l| l.starts_with("transport "))
            .collect();
        assert_eq!(
            lines.iter().filter(|l| l.ends_with(" shm")).count(),
            1,
            "{}",
            e.output
        );
        assert_eq!(
            lines.iter().filter(|l| l.ends_with(" tcp")).count(),
            4,
            "{}",
            e.output
        );
    }
}

/// A host whose link is cut: the registry reports its member Died within the heartbeat
/// bound, the others go on without it, and the cut-off member notices too.
#[test]
fn a_cut_host_is_reported_dead_and_the_pool_goes_on() {
    let Some(h) = hosts::Hosts::new(3) else {
        return;
    };
    let secret = PoolSecret::generate().unwrap();
    let beat = Heartbeat::new(Duration::from_millis(200), Duration::from_secs(2)).unwrap();
    let server = std::thread::scope(|s| {
        s.spawn(|| -> std::io::Result<ServerHandle> {
            h.enter(0)?;
            RegistryServer::bind((h.addr(0), 0), secret.clone())?
                .with_heartbeat(beat)
                .run_in_background()
        })
        .join()
        .expect("registry thread")
    })
    .expect("a registry server on host 0");
    let (tx, rx) = std::sync::mpsc::channel();
    let mut children = Vec::new();
    for i in 0..3 {
        let mut c = h.command(i, env!("CARGO_BIN_EXE_ipl-pool-check"));
        c.arg("cut")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        member_env(&mut c, server.local_addr(), "cut", 3, &secret, i, i);
        let mut child = c.spawn().expect("start a member");
        let out = child.stdout.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((i, line));
            }
        });
        children.push(child);
    }
    drop(tx);
    let kill_all = |children: &mut Vec<std::process::Child>| {
        for c in children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines: Vec<Vec<String>> = vec![Vec::new(); 3];
    let mut ready = 0;
    while ready < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, l)) => {
                ready += usize::from(l == "ready");
                lines[i].push(l);
            }
            Err(_) => {
                kill_all(&mut children);
                panic!("the pool did not form: {lines:?}");
            }
        }
    }
    h.cut(2).expect("cut host 2");
    // Every member ends by itself: the survivors once they saw the death and went on,
    // the victim once its registry failed.
    let until = Instant::now() + Duration::from_secs(60);
    for (i, c) in children.iter_mut().enumerate() {
        let status = loop {
            match c.try_wait().expect("wait for a member") {
                Some(st) => break st,
                None if Instant::now() >= until => {
                    kill_all(&mut children);
                    panic!("member {i} did not end after the cut");
                }
                None => {
                    while let Ok((j, l)) = rx.recv_timeout(Duration::from_millis(50)) {
                        lines[j].push(l);
                    }
                }
            }
        };
        assert!(status.success(), "member {i}: {status}: {:?}", lines[i]);
    }
    while let Ok((j, l)) = rx.recv_timeout(Duration::from_millis(200)) {
        lines[j].push(l);
    }
    for (i, out) in lines.iter().enumerate().take(2) {
        assert!(
            out.iter()
                .any(|l| l.starts_with("saw ") && l.ends_with(" die")),
            "member {i} did not see the cut one die: {out:?}"
        );
        assert!(
            out.iter().any(|l| l.starts_with("the pool goes on")),
            "{out:?}"
        );
    }
    assert!(
        lines[2].iter().any(|l| l.starts_with("lost the registry")),
        "{:?}",
        lines[2]
    );
}
