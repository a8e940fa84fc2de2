//! Addresses of the TCP transport: the default interface selection advertises every
//! address of the host with the host's id, a peer on the same host is dialed over
//! loopback, dead addresses are skipped within the connect timeout, and an interface
//! that does not exist is an error naming it. Network traffic stays on 127.0.0.0/8.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use common::{config, endpoint, plugin, Log, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_abi::TransportError;
use ipl_transport_kit::host::{host_id, HostId};
use ipl_transport_kit::interfaces::{local_addresses, InterfaceSpec};
use ipl_transport_tcp::Address;

fn address(t: &ipl_transport_abi::TransportInstance) -> Address {
    Address::parse("tcp", &t.local_address().unwrap()).unwrap()
}

/// Endpoint `to`'s address with `sockets` instead of its own (same id and host).
fn rewritten(to: &Address, sockets: Vec<SocketAddr>) -> Vec<u8> {
    Address {
        sockets,
        ..to.clone()
    }
    .to_bytes()
}

#[test]
fn the_default_selection_advertises_the_host_and_connects() {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&secret));
    let (b, log_b) = endpoint(&config(&secret));
    let addr = address(&b);
    assert_eq!(addr.host, Some(host_id().unwrap()));
    // Every non-loopback address of the host is advertised, and loopback.
    let host = local_addresses(&InterfaceSpec::all()).unwrap();
    for h in host.iter().filter(|h| !h.ip.is_loopback()) {
        assert!(
            addr.sockets.iter().any(|s| s.ip() == h.ip),
            "{h:?} in {addr:?}"
        );
    }
    assert!(
        addr.sockets.iter().any(|s| s.ip().is_loopback()),
        "{addr:?}"
    );
    // Non-loopback first: the address is for peers on other hosts too.
    if host.iter().any(|h| !h.ip.is_loopback()) {
        assert!(!addr.sockets[0].ip().is_loopback(), "{addr:?}");
    }
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    a.send(ch, &[b"over the default selection"]).unwrap();
    // The same host: the connection took loopback.
    let used =
        ipl_transport_tcp::TcpTransport::peer_addresses(&a.local_address().unwrap()).unwrap();
    assert_eq!(used.len(), 1, "{used:?}");
    assert!(used[0].ip().is_loopback(), "{used:?}");
    let ev = log_b.wait("message", |e| e.messages.len() == 1);
    assert_eq!(ev.messages[0].1, b"over the default selection");
}

#[test]
fn a_loopback_only_selection_advertises_one_loopback_address() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = format!("{}\ninterfaces=lo", config(&secret));
    let (a, _) = endpoint(&cfg);
    let (b, log_b) = endpoint(&cfg);
    let addr = address(&b);
    assert_eq!(addr.sockets.len(), 1, "{addr:?}");
    assert_eq!(addr.sockets[0].ip().to_string(), "127.0.0.1");
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    a.send(ch, &[b"lo"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
    // The selection by address and by network work the same.
    for spec in ["127.0.0.1", "127.0.0.0/8"] {
        let (c, _) = endpoint(&format!("{}\ninterfaces={spec}", config(&secret)));
        assert_eq!(address(&c).sockets[0].ip().to_string(), "127.0.0.1");
    }
}

#[test]
fn an_interface_that_does_not_exist_is_an_error_naming_it() {
    let secret = PoolSecret::generate().unwrap();
    for (spec, named) in [
        ("nosuch0", "nosuch0"),
        ("lo,nosuch1", "nosuch1"),
        ("10.253.254.0/24", "10.253.254.0/24"),
        ("127.0.0.1,203.0.113.77", "203.0.113.77"),
    ] {
        let cfg = format!("{}\ninterfaces={spec}", config(&secret));
        match plugin().create(&cfg, Log::new()) {
            Err(TransportError::InvalidArgument(m)) => assert!(m.contains(named), "{m}"),
            Err(e) => panic!("{spec}: {e:?}"),
            Ok(_) => panic!("{spec}: created"),
        }
    }
    match plugin().create(
        &format!("{}\ninterfaces=eth0,,lo", config(&secret)),
        Log::new(),
    ) {
        Err(TransportError::InvalidArgument(m)) => assert!(m.contains("empty item"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn dead_addresses_are_skipped_within_the_timeout() {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&secret));
    let (b, log_b) = endpoint(&config(&secret));
    let to = address(&b);
    let live = to.primary();
    // A closed port: refused at once.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // A listener nobody accepts on: the connection is queued, the handshake is never
    // answered, the attempt ends when its share of the timeout is over.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let timeout = Duration::from_secs(4);
    let start = Instant::now();
    let ch = a
        .connect(
            &rewritten(&to, vec![closed, silent.local_addr().unwrap(), live]),
            timeout,
        )
        .unwrap();
    // Generous slack: the bound is the timeout, not a speed.
    assert!(
        start.elapsed() < timeout + Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    a.send(ch, &[b"via the third"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
    // All dead: one error listing every address, within the timeout.
    let (c, _) = endpoint(&config(&secret));
    match c.connect(
        &rewritten(&to, vec![closed, silent.local_addr().unwrap()]),
        timeout,
    ) {
        Err(TransportError::Refused(m) | TransportError::Timeout(m)) => {
            assert!(m.contains(&closed.to_string()), "{m}");
            assert!(m.contains(&silent.local_addr().unwrap().to_string()), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn loopback_of_another_host_is_never_dialed() {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&secret));
    let (b, _) = endpoint(&config(&secret));
    let mut to = address(&b);
    let here = host_id().unwrap();
    // The same machine, another network namespace: another host.
    to.host = Some(HostId {
        netns: here.netns ^ 1,
        ..here
    });
    to.sockets.retain(|s| s.ip().is_loopback());
    match a.connect(&to.to_bytes(), PATIENCE) {
        Err(TransportError::Unavailable(m)) => assert!(m.contains("another host"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_single_address_form_still_connects() {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&secret));
    let (b, log_b) = endpoint(&config(&secret));
    let to = address(&b);
    let old = format!("{}/{:016x}", to.primary(), to.id);
    let ch = a.connect(old.as_bytes(), PATIENCE).unwrap();
    a.send(ch, &[b"old"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
}
