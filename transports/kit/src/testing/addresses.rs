//! Address scenarios shared by the IP transports (tcp, quic): the default interface
//! selection advertises every address of the host with the host's id, a peer on the
//! same host is dialed over loopback, a selection of one loopback address advertises it
//! alone, an interface that does not exist is an error naming it, dead addresses are
//! skipped within the connect timeout, another host's loopback is never dialed, and the
//! single address form of earlier versions still connects. Network traffic stays on
//! 127.0.0.0/8.
//!
//! A transport's test calls each scenario with its [`IpTransport`] and adds what is
//! its own (e.g. quic's unreliable channels). A scenario panics when the transport does
//! not behave (they are for tests).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_transport_abi::{Plugin, TransportError, TransportInstance};

use super::{config, EventLog, PATIENCE};
use crate::host::{host_id, HostId};
use crate::interfaces::{local_addresses, InterfaceSpec};
use crate::IpEndpoint;

/// An IP transport under test: what the scenarios need to know of it.
#[derive(Clone, Copy)]
pub struct IpTransport {
    /// Its name, as in its addresses' errors (`"tcp"`, `"quic"`).
    pub name: &'static str,
    /// The plugin to make endpoints with.
    pub plugin: fn() -> Plugin,
    /// The remote addresses of the connections of the live endpoint at an address, in
    /// this process (the transport's `peer_addresses`): which path a connection took.
    pub peer_addresses: fn(&[u8]) -> Option<Vec<SocketAddr>>,
}

/// Two endpoints of one pool, `a` and `b`, with their logs.
pub struct Pair {
    /// The endpoint that connects.
    pub a: TransportInstance,
    /// `a`'s log.
    pub log_a: Arc<EventLog>,
    /// The endpoint connected to.
    pub b: TransportInstance,
    /// `b`'s log.
    pub log_b: Arc<EventLog>,
}

impl IpTransport {
    /// A fresh endpoint with its own log, of pool `test` with `secret`, with
    /// `interfaces=<spec>` when `interfaces` is given.
    ///
    /// # Panics
    /// If the plugin refuses the configuration.
    pub fn endpoint(
        &self,
        secret: &PoolSecret,
        interfaces: Option<&str>,
    ) -> (TransportInstance, Arc<EventLog>) {
        super::endpoint(&(self.plugin)(), &self.config(secret, interfaces))
    }

    /// The configuration [`endpoint`](Self::endpoint) passes.
    pub fn config(&self, secret: &PoolSecret, interfaces: Option<&str>) -> String {
        let cfg = config(secret, "test");
        match interfaces {
            Some(spec) => format!("{cfg}\ninterfaces={spec}"),
            None => cfg,
        }
    }

    /// Endpoint `t`'s address, parsed.
    ///
    /// # Panics
    /// If it has none or it does not parse.
    pub fn address(&self, t: &TransportInstance) -> IpEndpoint {
        IpEndpoint::parse(self.name, &t.local_address().expect("local address"))
            .unwrap_or_else(|e| panic!("{} address: {e}", self.name))
    }

    /// The remote addresses of endpoint `t`'s connections.
    ///
    /// # Panics
    /// If `t` is not a live endpoint of this transport in this process.
    pub fn used(&self, t: &TransportInstance) -> Vec<SocketAddr> {
        (self.peer_addresses)(&t.local_address().expect("local address")).expect("a live endpoint")
    }
}

/// Two endpoints with the default selection: `b` advertises every non-loopback address
/// of the host, loopback too, non-loopback first, and the host's id; `a` reaches it over
/// loopback (the same host) and `b` gets `a`'s message on the channel returned.
pub fn default_selection_advertises_the_host_and_connects(t: &IpTransport) -> (Pair, u64) {
    let secret = PoolSecret::generate().unwrap();
    let (a, log_a) = t.endpoint(&secret, None);
    let (b, log_b) = t.endpoint(&secret, None);
    let addr = t.address(&b);
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
    let used = t.used(&a);
    assert_eq!(used.len(), 1, "{used:?}");
    assert!(used[0].ip().is_loopback(), "{used:?}");
    let ev = log_b.wait("message", |e| e.messages.len() == 1);
    assert_eq!(ev.messages[0].1, b"over the default selection");
    let at_b = ev.messages[0].0;
    drop(ev);
    let pair = Pair { a, log_a, b, log_b };
    (pair, at_b)
}

/// Endpoint `b` with `interfaces=<to>` advertises 127.0.0.1 alone, and `a` (with
/// `interfaces=<from>`, or the default selection) reaches it. The selections of
/// 127.0.0.1 by address and by network advertise it first too.
pub fn one_loopback_address_is_advertised_and_reached(
    t: &IpTransport,
    from: Option<&str>,
    to: &str,
) {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = t.endpoint(&secret, from);
    let (b, log_b) = t.endpoint(&secret, Some(to));
    let addr = t.address(&b);
    assert_eq!(addr.sockets.len(), 1, "{addr:?}");
    assert_eq!(addr.sockets[0].ip().to_string(), "127.0.0.1");
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    a.send(ch, &[b"to 127.0.0.1"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
    // The selection by address and by network work the same.
    for spec in ["127.0.0.1", "127.0.0.0/8"] {
        let (c, _) = t.endpoint(&secret, Some(spec));
        assert_eq!(t.address(&c).sockets[0].ip().to_string(), "127.0.0.1");
    }
}

/// Selections naming an interface, an address or a network the host does not have are
/// refused with an error naming it; an empty item too.
pub fn an_interface_that_does_not_exist_is_an_error_naming_it(t: &IpTransport) {
    let secret = PoolSecret::generate().unwrap();
    for (spec, named) in [
        ("nosuch0", "nosuch0"),
        ("lo,nosuch1", "nosuch1"),
        ("10.253.254.0/24", "10.253.254.0/24"),
        ("lo,10.253.254.0/24", "10.253.254.0/24"),
        ("127.0.0.1,203.0.113.77", "203.0.113.77"),
        ("eth0,,lo", "empty item"),
    ] {
        match (t.plugin)().create(&t.config(&secret, Some(spec)), EventLog::new()) {
            Err(TransportError::InvalidArgument(m)) => assert!(m.contains(named), "{m}"),
            Err(e) => panic!("{spec}: {e:?}"),
            Ok(_) => panic!("{spec}: created"),
        }
    }
}

/// `b`'s address with the `dead` sockets listed before its live one: the connect skips
/// them and succeeds within a 4 s timeout. With the `dead` ones alone, the connect fails
/// within `all_dead_within`, refused or timed out, with an error naming each of them;
/// that error is returned for the transport's own checks.
pub fn dead_addresses_are_skipped_within_the_timeout(
    t: &IpTransport,
    dead: &[SocketAddr],
    all_dead_within: Duration,
) -> TransportError {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = t.endpoint(&secret, None);
    let (b, log_b) = t.endpoint(&secret, None);
    let to = t.address(&b);
    let rewritten = |sockets: Vec<SocketAddr>| {
        IpEndpoint {
            sockets,
            ..to.clone()
        }
        .to_bytes()
    };
    let timeout = Duration::from_secs(4);
    let start = Instant::now();
    let mut first_dead = dead.to_vec();
    first_dead.push(to.primary());
    let ch = a.connect(&rewritten(first_dead), timeout).unwrap();
    // Generous slack: the bound is the timeout, not a speed.
    assert!(
        start.elapsed() < timeout + Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    a.send(ch, &[b"past the dead ones"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
    // All dead: one error listing every address, within the timeout.
    let (c, _) = t.endpoint(&secret, None);
    match c.connect(&rewritten(dead.to_vec()), all_dead_within) {
        Err(e @ (TransportError::Refused(_) | TransportError::Timeout(_))) => {
            let m = e.to_string();
            for d in dead {
                assert!(m.contains(&d.to_string()), "{d} in {m}");
            }
            e
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// An address naming another host (the same machine, another network namespace) and
/// listing only loopback is unavailable: another host's loopback is never dialed.
pub fn loopback_of_another_host_is_never_dialed(t: &IpTransport) {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = t.endpoint(&secret, None);
    let (b, _) = t.endpoint(&secret, None);
    let mut to = t.address(&b);
    let here = host_id().unwrap();
    // The same machine, another network namespace: another host.
    to.host = Some(HostId {
        netns: here.netns ^ 1,
        ..here
    });
    to.sockets.retain(|s| s.ip().is_loopback());
    match a.connect(&to.to_bytes(), PATIENCE) {
        Err(TransportError::Unavailable(m)) => assert!(m.contains("another host"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// The single address form of earlier versions, `ip:port/id`, still connects.
pub fn the_single_address_form_still_connects(t: &IpTransport) {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = t.endpoint(&secret, None);
    let (b, log_b) = t.endpoint(&secret, None);
    let to = t.address(&b);
    let old = format!("{}/{:016x}", to.primary(), to.id);
    let ch = a.connect(old.as_bytes(), PATIENCE).unwrap();
    a.send(ch, &[b"old"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
}
