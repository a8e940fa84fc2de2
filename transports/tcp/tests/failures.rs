//! What strangers, broken peers and bad arguments get: refusals, losses and typed errors,
//! never a hang or a crash.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{config, connect, endpoint, parse, plugin, raw_client, Log, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_abi::{ChannelClosed, TransportError};
use ipl_transport_tcp::wire::{self, KIND_DATA, KIND_OPEN, OPENED_BY_SENDER};
use ipl_transport_tcp::TcpTransport;

fn open_count(t: &ipl_transport_abi::TransportInstance) -> usize {
    TcpTransport::connection_stats(&t.local_address().unwrap())
        .unwrap()
        .open
}

/// Waits (bounded) until `t` has `n` open connections.
fn wait_open(t: &ipl_transport_abi::TransportInstance, n: usize) {
    let end = std::time::Instant::now() + PATIENCE;
    while open_count(t) != n {
        assert!(
            std::time::Instant::now() < end,
            "connection count never reached {n}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Expects the peer to close the stream (EOF or reset), within the patience bound.
fn expect_closed(s: &mut TcpStream) {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("expected the peer to close the connection, got {e}"),
        }
    }
}

#[test]
fn a_peer_killed_mid_message_is_lost() {
    let secret = PoolSecret::generate().unwrap();
    let (b, log_b) = endpoint(&config(&secret));
    let mut s = raw_client(&b, &secret, 0x1234);
    s.write_all(&wire::header(0, OPENED_BY_SENDER | 1, KIND_OPEN))
        .unwrap();
    s.write_all(&wire::header(3, OPENED_BY_SENDER | 1, KIND_DATA))
        .unwrap();
    s.write_all(b"hi!").unwrap();
    let ch = log_b
        .wait("open and message", |e| e.messages.len() == 1)
        .opened[0];
    // Announce 1 MiB, send 10 bytes, vanish.
    s.write_all(&wire::header(1 << 20, OPENED_BY_SENDER | 1, KIND_DATA))
        .unwrap();
    s.write_all(&[7u8; 10]).unwrap();
    drop(s);
    let ev = log_b.wait("loss", |e| !e.closed.is_empty());
    assert_eq!(ev.closed.len(), 1);
    assert_eq!(ev.closed[0].0, ch);
    assert!(matches!(ev.closed[0].1, ChannelClosed::Lost(_)));
    assert_eq!(ev.messages, vec![(ch, b"hi!".to_vec())]);
    drop(ev);
    wait_open(&b, 0);
}

#[test]
fn an_oversized_length_closes_the_connection() {
    let secret = PoolSecret::generate().unwrap();
    let (b, log_b) = endpoint(&format!("{}\nmax_message=4096", config(&secret)));
    let mut s = raw_client(&b, &secret, 0x5678);
    s.write_all(&wire::header(0, OPENED_BY_SENDER | 9, KIND_OPEN))
        .unwrap();
    s.write_all(&wire::header(4097, OPENED_BY_SENDER | 9, KIND_DATA))
        .unwrap();
    let ev = log_b.wait("loss", |e| !e.closed.is_empty());
    let (ch, why) = &ev.closed[0];
    assert_eq!(*ch, ev.opened[0]);
    match why {
        ChannelClosed::Lost(reason) => assert!(reason.contains("max_message"), "{reason}"),
        other => panic!("expected loss, got {other:?}"),
    }
    assert!(ev.messages.is_empty());
    drop(ev);
    expect_closed(&mut s);
    wait_open(&b, 0);
}

#[test]
fn malformed_frames_close_the_connection() {
    let secret = PoolSecret::generate().unwrap();
    let (b, log_b) = endpoint(&config(&secret));
    for bad in [
        wire::header(0, OPENED_BY_SENDER | 1, 99), // unknown kind
        wire::header(0, 1, KIND_OPEN),             // OPEN of a channel we never opened
        wire::header(5, OPENED_BY_SENDER | 2, KIND_OPEN), // OPEN with a payload
    ] {
        let mut s = raw_client(&b, &secret, 0x9abc);
        s.write_all(&bad).unwrap();
        expect_closed(&mut s);
    }
    wait_open(&b, 0);
    assert!(log_b.events().opened.is_empty());
}

#[test]
fn a_wrong_secret_is_refused_on_both_sides() {
    let (a, log_a) = endpoint(&config(&PoolSecret::generate().unwrap()));
    let (b, log_b) = endpoint(&config(&PoolSecret::generate().unwrap()));
    for (from, to) in [(&a, &b), (&b, &a)] {
        match from.connect(&to.local_address().unwrap(), PATIENCE) {
            Err(TransportError::Refused(msg)) => assert!(msg.contains("secret"), "{msg}"),
            other => panic!("expected Refused, got {other:?}"),
        }
    }
    wait_open(&a, 0);
    wait_open(&b, 0);
    for log in [&log_a, &log_b] {
        let ev = log.events();
        assert!(ev.opened.is_empty() && ev.messages.is_empty() && ev.closed.is_empty());
    }
}

#[test]
fn another_pool_with_the_same_secret_is_refused() {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&format!("secret={}\npool=one", secret.to_hex()));
    let (b, log_b) = endpoint(&format!("secret={}\npool=two", secret.to_hex()));
    assert!(matches!(
        a.connect(&b.local_address().unwrap(), PATIENCE),
        Err(TransportError::Refused(_))
    ));
    assert!(log_b.events().opened.is_empty());
}

#[test]
fn a_raw_client_sending_garbage_is_dropped() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    let (b, log_b) = endpoint(&cfg);
    let (sock, _) = parse(&b.local_address().unwrap());
    let mut s = TcpStream::connect(sock).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n\0\0\0\0\0\0")
        .unwrap();
    expect_closed(&mut s);
    // A client that only says hello correctly but answers the challenge with junk.
    let mut s = TcpStream::connect(sock).unwrap();
    s.write_all(&wire::MAGIC).unwrap();
    s.write_all(&[0u8; ipl_auth::HELLO_LEN]).unwrap();
    let mut challenge = [0u8; ipl_auth::CHALLENGE_LEN];
    s.read_exact(&mut challenge).unwrap();
    s.write_all(&[0u8; ipl_auth::FINISH_LEN + 16]).unwrap();
    expect_closed(&mut s);
    // The endpoint still serves real peers, and told its host nothing.
    let (a, _) = endpoint(&cfg);
    let ch = connect(&a, &b);
    a.send(ch, &[b"ok"]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
    assert_eq!(log_b.events().opened.len(), 1);
}

#[test]
fn malformed_addresses_are_invalid_arguments() {
    let secret = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&secret));
    for bad in [
        &b""[..],
        b"nonsense",
        b"127.0.0.1:1",
        b"127.0.0.1:1/xyz",
        b"127.0.0.1:1/00000000000000zz",
        b"localhost:1/0000000000000001",
        b"127.0.0.1:0/0000000000000001",
        &[0xff, 0x00, 0x80],
    ] {
        match a.connect(bad, PATIENCE) {
            Err(TransportError::InvalidArgument(_)) => {}
            other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn unreachable_and_stale_addresses_are_refused() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    let (a, _) = endpoint(&cfg);
    let (b, log_b) = endpoint(&cfg);
    // A port where nobody listens: bind one, learn its number, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody = format!("127.0.0.1:{port}/0000000000000001");
    assert!(matches!(
        a.connect(nobody.as_bytes(), PATIENCE),
        Err(TransportError::Refused(_) | TransportError::Timeout(_))
    ));
    // b's socket, but another endpoint id: a stale address.
    let (sock, id) = parse(&b.local_address().unwrap());
    let stale = format!("{sock}/{:016x}", id ^ 1);
    match a.connect(stale.as_bytes(), PATIENCE) {
        Err(TransportError::Refused(msg)) => assert!(msg.contains("any more"), "{msg}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    assert!(log_b.events().opened.is_empty());
}

#[test]
fn bad_configurations_are_typed_errors() {
    let p = plugin();
    let secret = PoolSecret::generate().unwrap();
    let create = |cfg: &str| p.create(cfg, Log::new()).map(|_| ());
    match create("pool=x") {
        Err(TransportError::InvalidArgument(msg)) => {
            assert!(msg.contains("IPL_POOL_SECRET"), "{msg}")
        }
        other => panic!("missing secret: {other:?}"),
    }
    for bad in [
        "secret=1234".to_string(),
        format!("{}\nbind=nonsense", config(&secret)),
        format!("{}\nbind=127.0.0.1", config(&secret)),
        format!("{}\nadvertise=somewhere", config(&secret)),
        format!("{}\nmax_message=-1", config(&secret)),
        format!("{}\njust words", config(&secret)),
        // TEST-NET-1: a well-formed address this host does not have.
        format!("{}\nbind=192.0.2.1:0", config(&secret)),
    ] {
        match create(&bad) {
            Err(TransportError::InvalidArgument(_)) => {}
            other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    // A port that is taken is a typed error too.
    let (a, _) = endpoint(&config(&secret));
    let (sock, _) = parse(&a.local_address().unwrap());
    assert!(create(&format!("{}\nbind={sock}", config(&secret))).is_err());
    // Unknown keys are ignored; bind and advertise shape the address.
    let t = p
        .create(
            &format!(
                "{}\ncolour=blue\nbind=0.0.0.0:0\nadvertise=127.0.0.1",
                config(&secret)
            ),
            Log::new(),
        )
        .unwrap();
    let (sock, _) = parse(&t.local_address().unwrap());
    assert_eq!(sock.ip().to_string(), "127.0.0.1");
    let (b, log_b) = endpoint(&config(&secret));
    let ch = b.connect(&t.local_address().unwrap(), PATIENCE).unwrap();
    b.send(ch, &[b"via 0.0.0.0"]).unwrap();
    drop(t);
    log_b.until("loss", |e| e.closed.len() == 1);
}

#[test]
fn sends_larger_than_max_message_are_refused_locally() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = format!("{}\nmax_message=100", config(&secret));
    let (a, _) = endpoint(&cfg);
    let (b, log_b) = endpoint(&cfg);
    let ch = connect(&a, &b);
    assert!(matches!(
        a.send(ch, &[&[0u8; 60], &[0u8; 41]]),
        Err(TransportError::InvalidArgument(_))
    ));
    a.send(ch, &[&[1u8; 100]]).unwrap();
    log_b.until("message", |e| e.messages.len() == 1);
    assert!(matches!(
        a.send(ch + 1000, &[b"x"]),
        Err(TransportError::Closed(_))
    ));
}
