//! Strangers that never finish the handshake, on 127.0.0.1: the handshake has one
//! deadline however slowly its bytes trickle in, and beyond the bound on connections in
//! the handshake a new one is closed at once, while members still get in.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_registry::net::protocol::{self, Hello, PROTOCOL_VERSION};
use ipl_registry::{JoinRequest, NetRegistry, PoolConfig, RegistryError, RegistryServer};

/// Bound on every wait.
const T: Duration = Duration::from_secs(10);

/// Whether the server has closed `s` (EOF or reset); `Ok(false)` if nothing came within
/// the stream's read timeout. Data from the server is a failure of these tests: the
/// stranger never completed anything worth an answer.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(n) => panic!("the server answered a stranger ({n} bytes)"),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            false
        }
        Err(_) => true,
    }
}

#[test]
fn a_slow_loris_is_cut_off_at_the_handshake_deadline() {
    let secret = PoolSecret::generate().unwrap();
    let deadline = Duration::from_millis(300);
    let srv = RegistryServer::bind("127.0.0.1:0", secret)
        .unwrap()
        .with_handshake_timeout(deadline)
        .run_in_background()
        .unwrap();
    // A well-formed hello (so nothing about it is refused early), one byte per 100 ms:
    // each gap is shorter than the handshake timeout.
    let hello = protocol::encode(&Hello {
        version: PROTOCOL_VERSION,
        nonce: [7; ipl_auth::HELLO_LEN],
    })
    .unwrap();
    let mut s = TcpStream::connect(srv.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // Cut while the bytes still come: the whole trickle takes over ten times the
    // deadline (longer still on a loaded machine), each gap well within it.
    let start = Instant::now();
    let cut = hello[..hello.len() - 1]
        .iter()
        .any(|&byte| s.write_all(&[byte]).is_err() || closed(&mut s));
    assert!(
        cut,
        "a client trickling {} bytes for {:?} was never cut off (deadline {deadline:?})",
        hello.len() - 1,
        start.elapsed()
    );
    assert_eq!(srv.connections(), 0);
}

/// Strangers that hold every slot until `deadline`, on a server bounded at `n`
/// handshakes: the server, its address and the strangers' connections.
fn held_by_strangers(
    secret: &PoolSecret,
    deadline: Duration,
    n: usize,
) -> (ipl_registry::ServerHandle, SocketAddr, Vec<TcpStream>) {
    let srv = RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .with_handshake_timeout(deadline)
        .with_max_handshakes(n)
        .run_in_background()
        .unwrap();
    let addr: SocketAddr = srv.local_addr();
    let strangers: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let end = Instant::now() + T;
    while srv.handshakes() < n {
        assert!(Instant::now() < end, "the strangers were never accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    (srv, addr, strangers)
}

/// Joins a pool of one over `member` and leaves.
fn join_and_leave(member: NetRegistry) {
    let m = member
        .join("pool", PoolConfig::closed_world(1), JoinRequest::new("c"))
        .unwrap();
    m.wait_until_pool_closed(Some(T)).unwrap();
    m.leave().unwrap();
}

#[test]
fn beyond_the_handshake_bound_strangers_are_closed_at_once_and_members_still_join() {
    let secret = PoolSecret::generate().unwrap();
    // A deadline no loaded machine reaches: the four strangers hold their slots for
    // the whole test, so every count below is exact.
    let (srv, addr, strangers) = held_by_strangers(&secret, Duration::from_secs(600), 4);
    // A fifth is turned away at once: a short busy refusal, then the connection is
    // closed (the read timeout only bounds the test; the deadline is far away).
    let mut fifth = TcpStream::connect(addr).unwrap();
    fifth.set_read_timeout(Some(T)).unwrap();
    let refusal: protocol::Challenge = protocol::read_msg(&mut fifth, 64).unwrap();
    assert_eq!(
        refusal.challenge,
        Err(protocol::Refusal::Busy { in_progress: 4 })
    );
    assert!(
        closed(&mut fifth),
        "a connection beyond the bound was kept open"
    );
    // A member turned away while the strangers hold every slot gets a clear error
    // once its connect timeout has passed, not a generic one (also when its last
    // attempt, in the bound's last moments, got no answer in time: CI once saw
    // `Timeout` with a 200 ms bound on a loaded machine).
    match NetRegistry::connect(addr, &secret, Duration::from_secs(1)) {
        Err(e @ RegistryError::Busy { in_progress: 4, .. }) => {
            assert!(e.to_string().contains("busy"), "{e}");
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(srv.refused_connections() >= 2);
    // Once the strangers are gone, a member gets in.
    drop(strangers);
    join_and_leave(NetRegistry::connect(addr, &secret, T).expect("a member gets in"));
}

#[test]
fn strangers_hold_their_slots_only_until_the_handshake_deadline() {
    let secret = PoolSecret::generate().unwrap();
    // The strangers stay connected and silent; their handshakes end at the deadline,
    // and a member retrying a busy server (within T) then gets in.
    let (_srv, addr, strangers) = held_by_strangers(&secret, Duration::from_millis(300), 4);
    join_and_leave(NetRegistry::connect(addr, &secret, T).expect("a member gets in"));
    drop(strangers);
}

/// A member turned away because the server is at its handshake bound retries within
/// its connect timeout and gets in once a slot is free.
#[test]
fn a_member_turned_away_as_busy_retries_and_gets_in() {
    let secret = PoolSecret::generate().unwrap();
    let srv = RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .with_handshake_timeout(Duration::from_secs(600))
        .with_max_handshakes(1)
        .run_in_background()
        .unwrap();
    let addr = srv.local_addr();
    let holder = TcpStream::connect(addr).unwrap();
    let end = Instant::now() + T;
    while srv.handshakes() < 1 {
        assert!(Instant::now() < end, "the stranger was never accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    let refused = srv.refused_connections();
    let member = std::thread::spawn(move || NetRegistry::connect(addr, &secret, T));
    // Free the slot only once the member has been turned away at least once.
    while srv.refused_connections() == refused {
        assert!(Instant::now() < end, "the member was never turned away");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(holder);
    let client = member
        .join()
        .unwrap()
        .expect("the member gets in after retrying");
    let m = client
        .join("pool", PoolConfig::closed_world(1), JoinRequest::new("c"))
        .unwrap();
    m.leave().unwrap();
}
