//! Strangers that never finish the handshake, on 127.0.0.1: one deadline for the TLS
//! handshake and the hello together (`quic.handshake_timeout_ms`), and beyond
//! `quic.max_handshakes` a new connection is refused at once while pool members still
//! connect.

mod common;

use std::time::{Duration, Instant};

use common::{config, endpoint, Handshake, RawPeer, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_abi::{TransportError, TransportInstance};
use ipl_transport_quic::{ConnectionStats, QuicTransport};

/// How long after its deadline a stranger must have been cut: generous for a loaded
/// machine, and shorter than the fixed 10 s the endpoint gave every handshake before.
const MARGIN: Duration = Duration::from_secs(5);

fn stats(t: &TransportInstance) -> ConnectionStats {
    QuicTransport::connection_stats(&t.local_address().unwrap()).unwrap()
}

/// Waits (bounded by [`PATIENCE`]) until `done` holds for the endpoint's counters.
fn wait_stats(t: &TransportInstance, what: &str, done: impl Fn(&ConnectionStats) -> bool) {
    let end = Instant::now() + PATIENCE;
    loop {
        let s = stats(t);
        if done(&s) {
            return;
        }
        assert!(Instant::now() < end, "{what}: {s:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn with_bounds(secret: &PoolSecret, timeout_ms: u64, max: usize) -> String {
    format!(
        "{}\nquic.handshake_timeout_ms={timeout_ms}\nquic.max_handshakes={max}",
        config(secret)
    )
}

#[test]
fn a_stranger_that_completes_tls_but_sends_no_hello_is_cut_at_the_deadline() {
    let secret = PoolSecret::generate().unwrap();
    let deadline = Duration::from_secs(1);
    let (b, log) = endpoint(&with_bounds(&secret, 1000, 64));
    let start = Instant::now();
    let s = RawPeer::stranger(&b.local_address().unwrap(), &secret, Handshake::Tls);
    s.tls_done()
        .expect("the stranger's TLS handshake (it has the pool's certificates)");
    let why = s.lost_by(start + deadline + MARGIN).unwrap_or_else(|| {
        panic!("a stranger that sent no hello was not cut within {deadline:?} + {MARGIN:?}")
    });
    assert!(why.contains("handshake timeout"), "closed with: {why}");
    // Its slot is free again; it never counted as a connection.
    wait_stats(&b, "the stranger's slot was not freed", |s| {
        s.handshakes == 0
    });
    assert_eq!(stats(&b).established, 0);
    assert!(log.events().opened.is_empty());
}

#[test]
fn a_stranger_that_goes_silent_after_its_initial_packet_is_cut_at_the_deadline() {
    let secret = PoolSecret::generate().unwrap();
    let deadline = Duration::from_secs(1);
    let (b, _log) = endpoint(&with_bounds(&secret, 1000, 64));
    let start = Instant::now();
    // It reads what the endpoint sends (so it sees the close) but sends nothing after
    // its first Initial packet: the TLS handshake never completes.
    let s = RawPeer::stranger(&b.local_address().unwrap(), &secret, Handshake::InitialOnly);
    let why = s.lost_by(start + deadline + MARGIN).unwrap_or_else(|| {
        panic!("a silent stranger was not cut within {deadline:?} + {MARGIN:?}")
    });
    assert!(
        why.contains("closed during the handshake"),
        "closed with: {why}"
    );
    wait_stats(&b, "the stranger's slot was not freed", |s| {
        s.handshakes == 0
    });
    assert_eq!(stats(&b).established, 0);
}

#[test]
fn beyond_the_handshake_bound_strangers_are_refused_at_once_and_peers_still_connect() {
    let secret = PoolSecret::generate().unwrap();
    // A deadline no loaded machine reaches: the strangers hold their slots until they
    // leave, however long their (debug-build) TLS handshakes take.
    let (b, _log_b) = endpoint(&with_bounds(&secret, 600_000, 3));
    let (a, _log_a) = endpoint(&config(&secret));
    let target = b.local_address().unwrap();
    let strangers: Vec<RawPeer> = (0..3)
        .map(|_| RawPeer::stranger(&target, &secret, Handshake::Tls))
        .collect();
    for s in &strangers {
        s.tls_done()
            .expect("a stranger within the bound was turned away");
    }
    // The fourth is refused (CONNECTION_REFUSED), not left to the deadline.
    let fourth = RawPeer::stranger(&target, &secret, Handshake::Tls);
    let why = fourth
        .lost_by(Instant::now() + PATIENCE)
        .expect("a connection beyond the bound was kept");
    assert!(why.contains("refused"), "closed with: {why}");
    // So is a member, told why.
    let e = a.connect(&target, PATIENCE).unwrap_err();
    assert!(
        matches!(&e, TransportError::Refused(d) if d.contains("busy")),
        "{e:?}"
    );
    let s = stats(&b);
    assert!(s.refused >= 2, "{s:?}");
    assert_eq!((s.handshakes, s.established), (3, 0), "{s:?}");
    // Once the strangers leave, the member gets in.
    drop(strangers);
    wait_stats(&b, "the strangers' slots were not freed", |s| {
        s.handshakes == 0
    });
    a.connect(&target, PATIENCE)
        .expect("a member after the strangers left");
    assert_eq!(stats(&b).established, 1);
}

#[test]
fn strangers_at_the_bound_hold_their_slots_only_until_the_deadline() {
    let secret = PoolSecret::generate().unwrap();
    let (b, _log_b) = endpoint(&with_bounds(&secret, 1000, 3));
    let (a, _log_a) = endpoint(&config(&secret));
    let target = b.local_address().unwrap();
    // They stay connected and silent (whether their TLS handshake finished before the
    // deadline depends on the machine's load; either way the deadline ends it).
    let strangers: Vec<RawPeer> = (0..3)
        .map(|_| RawPeer::stranger(&target, &secret, Handshake::Tls))
        .collect();
    for s in &strangers {
        s.lost_by(Instant::now() + PATIENCE)
            .expect("a stranger was kept past its deadline");
    }
    wait_stats(&b, "the strangers' slots were not freed", |s| {
        s.handshakes == 0
    });
    a.connect(&target, PATIENCE)
        .expect("a member once the strangers' deadline passed");
    assert_eq!(stats(&b).established, 1);
    drop(strangers);
}

#[test]
fn a_member_turned_away_while_strangers_hold_every_slot_is_told_the_endpoint_is_busy() {
    let secret = PoolSecret::generate().unwrap();
    // The stranger's deadline is far away: only its leaving frees the slot.
    let (b, _log_b) = endpoint(&with_bounds(&secret, 600_000, 1));
    let (a, _log_a) = endpoint(&config(&secret));
    let target = b.local_address().unwrap();
    let stranger = RawPeer::stranger(&target, &secret, Handshake::Tls);
    stranger.tls_done().expect("the stranger's TLS handshake");
    let e = a.connect(&target, PATIENCE).unwrap_err();
    assert!(
        matches!(&e, TransportError::Refused(d) if d.contains("busy") && d.contains("quic.max_handshakes")),
        "{e:?}"
    );
    assert!(stats(&b).refused >= 1);
    assert_eq!(stats(&b).handshakes, 1);
    // The stranger closes its connection: its slot is free, the member gets in.
    drop(stranger);
    wait_stats(&b, "the stranger's slot was not freed", |s| {
        s.handshakes == 0
    });
    a.connect(&target, PATIENCE)
        .expect("a member after the stranger left");
    assert_eq!(stats(&b).established, 1);
}

#[test]
fn from_half_the_bound_on_a_stranger_that_never_proves_its_address_holds_no_slot() {
    let secret = PoolSecret::generate().unwrap();
    let (b, _log_b) = endpoint(&with_bounds(&secret, 600_000, 2));
    let (a, _log_a) = endpoint(&config(&secret));
    let target = b.local_address().unwrap();
    // The first takes a slot: half the bound.
    let first = RawPeer::stranger(&target, &secret, Handshake::InitialOnly);
    wait_stats(&b, "the first stranger was not accepted", |s| {
        s.handshakes == 1
    });
    // The second never answers the Retry (as a spoofed source address could not).
    let second = RawPeer::stranger(&target, &secret, Handshake::InitialOnly);
    assert!(second.sent_first(), "the second stranger sent nothing");
    // Its Initial came before the member's: had it taken the last slot, the member
    // would be turned away as busy.
    a.connect(&target, PATIENCE)
        .expect("a member while a stranger holds half the slots");
    let s = stats(&b);
    assert_eq!((s.handshakes, s.refused, s.established), (1, 0, 1), "{s:?}");
    drop((first, second));
}
