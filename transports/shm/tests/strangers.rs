//! Strangers that never finish the handshake on an endpoint's Unix socket: one deadline
//! for the whole handshake however slowly the bytes come, and beyond
//! `shm.max_handshakes` a new connection is closed at once while pool members still
//! connect.

mod common;

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::{Duration, Instant};

use common::{config, endpoint, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_abi::TransportInstance;
use ipl_transport_kit::testing::strangers::{peer_closed, trickle};

/// The preamble of the shm handshake (protocol name and version).
const MAGIC: [u8; 8] = *b"IPLSHM\x00\x01";

/// Dials `t`'s socket as a stranger.
fn dial(t: &TransportInstance) -> UnixStream {
    let addr = String::from_utf8(t.local_address().unwrap()).unwrap();
    let id = addr.split(';').nth(3).unwrap().to_owned();
    let sa = SocketAddr::from_abstract_name(format!("ipl-shm/{id}")).unwrap();
    UnixStream::connect_addr(&sa).unwrap()
}

#[test]
fn a_slow_loris_is_cut_off_at_the_handshake_deadline() {
    let secret = PoolSecret::generate().unwrap();
    let deadline = Duration::from_millis(300);
    let (b, _log) = endpoint(&format!(
        "{}\nshm.handshake_timeout_ms={}",
        config(&secret),
        deadline.as_millis()
    ));
    let mut s = dial(&b);
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
    let (b, log_b) = endpoint(&format!(
        "{}\nshm.handshake_timeout_ms={}\nshm.max_handshakes=4",
        config(&secret),
        deadline.as_millis()
    ));
    let (a, _log_a) = endpoint(&config(&secret));
    // Four silent strangers take every slot (accepted in order, before the fifth).
    let strangers: Vec<UnixStream> = (0..4).map(|_| dial(&b)).collect();
    let mut fifth = dial(&b);
    fifth.set_read_timeout(Some(deadline / 2)).unwrap();
    assert!(
        peer_closed(&mut fifth),
        "a connection beyond the bound was kept open"
    );
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
    log_b.until("opened", |e| e.opened.len() == 1);
    drop(strangers);
}
