//! Strangers that never finish the handshake, on 127.0.0.1: one deadline for the whole
//! handshake however slowly the bytes come, and beyond `tcp.max_handshakes` a new
//! connection is closed at once while pool members still connect.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{config, endpoint, parse, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_kit::testing::strangers::{peer_closed, trickle};
use ipl_transport_tcp::wire::MAGIC;
use ipl_transport_tcp::TcpTransport;

fn stats(t: &ipl_transport_abi::TransportInstance) -> ipl_transport_tcp::ConnectionStats {
    TcpTransport::connection_stats(&t.local_address().unwrap()).unwrap()
}

#[test]
fn a_slow_loris_is_cut_off_at_the_handshake_deadline() {
    let secret = PoolSecret::generate().unwrap();
    let deadline = Duration::from_millis(300);
    let (b, _log) = endpoint(&format!(
        "{}\ntcp.handshake_timeout_ms={}",
        config(&secret),
        deadline.as_millis()
    ));
    let (addr, _) = parse(&b.local_address().unwrap());
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // The right preamble, then a hello: 40 bytes at 100 ms each, each gap shorter than
    // the handshake timeout.
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&[7u8; ipl_auth::HELLO_LEN]);
    let cut = trickle(&mut s, &bytes).unwrap_or_else(|| {
        panic!(
            "a client trickling {} bytes was never cut off (deadline {deadline:?})",
            bytes.len()
        )
    });
    assert!(
        cut < deadline + Duration::from_secs(2),
        "cut off after {cut:?}"
    );
}

#[test]
fn beyond_the_handshake_bound_strangers_are_closed_at_once_and_peers_still_connect() {
    let secret = PoolSecret::generate().unwrap();
    let deadline = Duration::from_secs(2);
    let (b, _log_b) = endpoint(&format!(
        "{}\ntcp.handshake_timeout_ms={}\ntcp.max_handshakes=4",
        config(&secret),
        deadline.as_millis()
    ));
    let (a, _log_a) = endpoint(&config(&secret));
    let (addr, _) = parse(&b.local_address().unwrap());
    let strangers: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let end = Instant::now() + PATIENCE;
    while stats(&b).handshakes < 4 {
        assert!(Instant::now() < end, "the strangers were never accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut fifth = TcpStream::connect(addr).unwrap();
    fifth.set_read_timeout(Some(deadline / 2)).unwrap();
    assert!(
        peer_closed(&mut fifth),
        "a connection beyond the bound was kept open"
    );
    assert!(stats(&b).refused >= 1);
    // A member's connect is turned away while the strangers hold every slot, and gets
    // in once their handshakes reach the deadline.
    let start = Instant::now();
    loop {
        match a.connect(&b.local_address().unwrap(), PATIENCE) {
            Ok(_) => break,
            Err(e) => {
                assert!(start.elapsed() < PATIENCE, "a member never got in: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    assert_eq!(stats(&b).established, 1);
    drop(strangers);
}
