//! Addresses of the QUIC transport: the default interface selection advertises every
//! address of the host with the host's id and two endpoints of one host meet over
//! loopback, dead addresses are skipped within the connect timeout, and an interface
//! that does not exist is an error naming it. Network traffic stays on 127.0.0.0/8.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{config, endpoint, plugin, Log, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_abi::TransportError;
use ipl_transport_kit::host::{host_id, HostId};
use ipl_transport_kit::interfaces::{local_addresses, InterfaceSpec};
use ipl_transport_quic::{Address, UNRELIABLE_SUFFIX};

fn address(t: &ipl_transport_abi::TransportInstance) -> Address {
    Address::parse(&t.local_address().unwrap()).unwrap()
}

#[test]
fn the_default_selection_advertises_the_host_and_connects() {
    let secret = PoolSecret::generate().unwrap();
    let (a, log_a) = endpoint(&config(&secret));
    let (b, log_b) = endpoint(&config(&secret));
    let addr = address(&b);
    assert_eq!(addr.host, Some(host_id().unwrap()));
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
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    a.send(ch, &[b"over the default selection"]).unwrap();
    // The same host: the connection took loopback.
    let used =
        ipl_transport_quic::QuicTransport::peer_addresses(&a.local_address().unwrap()).unwrap();
    assert_eq!(used.len(), 1, "{used:?}");
    assert!(used[0].ip().is_loopback(), "{used:?}");
    let ev = log_b.wait("message", |e| e.messages.len() == 1);
    assert_eq!(ev.messages[0].1, b"over the default selection");
    let back = ev.messages[0].0;
    drop(ev);
    b.send(back, &[b"and back"]).unwrap();
    log_a.until("reply", |e| e.messages.len() == 1);
    // An unreliable channel to the same list rides the same connection.
    let mut unrel = b.local_address().unwrap();
    unrel.extend_from_slice(UNRELIABLE_SUFFIX.as_bytes());
    a.connect(&unrel, PATIENCE).unwrap();
}

#[test]
fn an_ipv4_peer_is_reached_from_a_dual_stack_socket() {
    // b listens on IPv4 loopback only; a (default selection: both families when the
    // host has IPv6) dials it as an IPv4-mapped address.
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&secret));
    let (b, log_b) = endpoint(&format!("{}\ninterfaces=127.0.0.1", config(&secret)));
    let to = address(&b);
    assert_eq!(to.sockets.len(), 1, "{to:?}");
    assert_eq!(to.sockets[0].ip().to_string(), "127.0.0.1");
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    a.send(ch, &[b"v4"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
}

#[test]
fn an_interface_that_does_not_exist_is_an_error_naming_it() {
    let secret = PoolSecret::generate().unwrap();
    for (spec, named) in [
        ("nosuch0", "nosuch0"),
        ("lo,10.253.254.0/24", "10.253.254.0/24"),
    ] {
        let cfg = format!("{}\ninterfaces={spec}", config(&secret));
        match plugin().create(&cfg, Log::new()) {
            Err(TransportError::InvalidArgument(m)) => assert!(m.contains(named), "{m}"),
            Err(e) => panic!("{spec}: {e:?}"),
            Ok(_) => panic!("{spec}: created"),
        }
    }
}

#[test]
fn dead_addresses_are_skipped_within_the_timeout() {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&secret));
    let (b, log_b) = endpoint(&config(&secret));
    let to = address(&b);
    // A UDP socket that never reads: QUIC's first packets vanish, as in a black hole.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead = Address {
        sockets: vec![silent.local_addr().unwrap(), to.primary()],
        ..to.clone()
    };
    let timeout = Duration::from_secs(4);
    let start = Instant::now();
    let ch = a.connect(&dead.to_bytes(), timeout).unwrap();
    // Generous slack: the bound is the timeout, not a speed.
    assert!(
        start.elapsed() < timeout + Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    a.send(ch, &[b"via the second"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
    let (c, _) = endpoint(&config(&secret));
    let all_dead = Address {
        sockets: vec![silent.local_addr().unwrap()],
        ..to.clone()
    };
    match c.connect(&all_dead.to_bytes(), Duration::from_millis(500)) {
        Err(TransportError::Timeout(_)) => {}
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
    let ch = a
        .connect(&Address::single(to.primary(), to.id).to_bytes(), PATIENCE)
        .unwrap();
    a.send(ch, &[b"old"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
}
