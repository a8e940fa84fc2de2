//! What goes wrong: strangers, vanished peers, malformed and oversized input.

mod common;

use common::*;
use ipl_auth::PoolSecret;
use ipl_transport_abi::{ChannelClosed, TransportError};
use ipl_transport_quic::tls::PoolTls;
use ipl_transport_quic::{wire, QuicTransport};

#[test]
fn create_without_a_secret_fails_clearly() {
    let Err(e) = plugin().create("pool=x\n", Log::new()) else {
        panic!("created without a secret");
    };
    assert!(matches!(e, TransportError::InvalidArgument(_)), "{e:?}");
    assert!(e.detail().contains("secret"), "{e}");
}

#[test]
fn an_endpoint_of_another_pool_is_refused() {
    let s = PoolSecret::generate().unwrap();
    let (b, lb) = endpoint(&config(&s));
    let (stranger, _) = endpoint(&config(&PoolSecret::generate().unwrap()));
    let e = stranger
        .connect(&b.local_address().unwrap(), PATIENCE)
        .unwrap_err();
    assert!(matches!(e, TransportError::Refused(_)), "{e:?}");
    assert!(e.detail().contains("secret"), "{e}");
    // The same secret but another pool name is another CA too.
    let (other_pool, _) = endpoint(&format!("secret={}\npool=elsewhere", s.to_hex()));
    let e = other_pool
        .connect(&b.local_address().unwrap(), PATIENCE)
        .unwrap_err();
    assert!(matches!(e, TransportError::Refused(_)), "{e:?}");
    // b saw nothing and still serves members.
    let (friend, _) = endpoint(&config(&s));
    connect(&friend, &b);
    let ev = lb.wait("the friend's channel", |e| e.opened.len() == 1);
    assert_eq!(ev.opened.len(), 1);
    drop(ev);
    let st = QuicTransport::connection_stats(&b.local_address().unwrap()).unwrap();
    assert_eq!(st.established, 1, "{st:?}");
}

#[test]
fn a_client_with_a_foreign_certificate_is_refused_by_the_server() {
    // The intruder trusts the pool's CA (its certificate is public) but cannot present a
    // certificate issued by it.
    let s = PoolSecret::generate().unwrap();
    let (b, lb) = endpoint(&config(&s));
    let pool = PoolTls::new(&s, POOL).unwrap();
    let foreign = PoolTls::new(&PoolSecret::generate().unwrap(), POOL).unwrap();
    let me = foreign.identity(RAW_ID).unwrap();
    let Err(e) = RawPeer::connect_with(&b.local_address().unwrap(), &pool, &me) else {
        panic!("the server let a foreign certificate in");
    };
    assert!(!e.is_empty());
    let st = QuicTransport::connection_stats(&b.local_address().unwrap()).unwrap();
    assert_eq!(st.established, 0, "{st:?}");
    assert!(lb.events().opened.is_empty());
    // The same peer with a pool certificate gets in.
    let ok = RawPeer::connect_with(
        &b.local_address().unwrap(),
        &pool,
        &pool.identity(RAW_ID).unwrap(),
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
}

#[test]
fn a_stale_address_is_refused() {
    let s = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&s));
    let (b, _) = endpoint(&config(&s));
    let real = ipl_transport_quic::Address::parse(&b.local_address().unwrap()).unwrap();
    let stale = ipl_transport_quic::Address {
        id: real.id ^ 1,
        ..real
    };
    let e = a.connect(&stale.to_bytes(), PATIENCE).unwrap_err();
    assert!(matches!(e, TransportError::Refused(_)), "{e:?}");
    for bad in [&b"nonsense"[..], b"127.0.0.1:1/xyz"] {
        let e = a.connect(bad, PATIENCE).unwrap_err();
        assert!(matches!(e, TransportError::InvalidArgument(_)), "{e:?}");
    }
}

#[test]
fn peer_shutdown_is_reported_as_lost_on_every_channel() {
    let s = PoolSecret::generate().unwrap();
    let (a, la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let c1 = connect(&a, &b);
    let c2 = connect(&a, &b);
    a.send(c1, &[b"x"]).unwrap();
    lb.until("b has the channels", |e| {
        e.opened.len() == 2 && e.messages.len() == 1
    });
    drop(b);
    let ev = la.wait("both channels lost", |e| e.closed.len() == 2);
    let mut chans: Vec<u64> = ev.closed.iter().map(|(c, _)| *c).collect();
    chans.sort_unstable();
    assert_eq!(chans, vec![c1.min(c2), c1.max(c2)]);
    for (_, why) in &ev.closed {
        match why {
            ChannelClosed::Lost(d) => assert!(d.contains("shut down"), "{d}"),
            other => panic!("expected lost, got {other:?}"),
        }
    }
    drop(ev);
    assert!(a.send(c1, &[b"x"]).is_err());
}

#[test]
fn messages_sent_before_shutdown_arrive_before_the_loss() {
    let s = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    let closed = connect(&a, &b);
    const N: usize = 40;
    let payload = pattern(5, 200_000);
    for i in 0..N {
        a.send(ch, &[&[i as u8], &payload]).unwrap();
    }
    a.send(closed, &[b"before close"]).unwrap();
    a.close_channel(closed);
    // Shut down at once: the queued data must still get out first.
    drop(a);
    let ev = lb.wait("everything, then the ends", |e| e.closed.len() == 2);
    assert_eq!(ev.opened.len(), 2);
    // b numbers the channels in the order it accepts them, which may be either.
    let (at_b, other) = if ev.on(ev.opened[0]).len() == N {
        (ev.opened[0], ev.opened[1])
    } else {
        (ev.opened[1], ev.opened[0])
    };
    let msgs = ev.on(at_b);
    assert_eq!(msgs.len(), N);
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(m[0], i as u8);
        assert!(m[1..] == payload[..]);
    }
    assert_eq!(ev.on(other), vec![&b"before close"[..]]);
    for (c, why) in &ev.closed {
        if *c == at_b {
            assert!(
                matches!(why, ChannelClosed::Lost(d) if d.contains("shut down")),
                "{why:?}"
            );
        } else {
            assert_eq!(*why, ChannelClosed::ByPeer);
        }
    }
}

#[test]
fn an_oversized_length_loses_the_channel_not_the_endpoint() {
    let s = PoolSecret::generate().unwrap();
    let (b, lb) = endpoint(&format!("{}\nmax_message=1024", config(&s)));
    let raw = RawPeer::connect(&b.local_address().unwrap(), &s).unwrap();
    let mut ok = RawPeer::header(false).to_vec();
    ok.extend_from_slice(&wire::len_prefix(3));
    ok.extend_from_slice(b"abc");
    let (_s1, r1) = raw.open(&ok);
    let mut bad = RawPeer::header(false).to_vec();
    bad.extend_from_slice(&wire::len_prefix(1025));
    bad.extend_from_slice(&[0; 100]);
    let (_s2, _r2) = raw.open(&bad);
    let mut huge = RawPeer::header(false).to_vec();
    huge.extend_from_slice(&(wire::GOODBYE - 1).to_le_bytes());
    let (_s3, _r3) = raw.open(&huge);
    let ev = lb.wait("two channels lost", |e| {
        e.closed.len() == 2 && e.messages.len() == 1
    });
    assert_eq!(ev.opened.len(), 3);
    for (_, why) in &ev.closed {
        match why {
            ChannelClosed::Lost(d) => assert!(d.contains("exceeds max_message"), "{d}"),
            other => panic!("expected lost, got {other:?}"),
        }
    }
    assert_eq!(ev.messages[0].1, b"abc");
    let good = ev.messages[0].0;
    drop(ev);
    // The good channel still works both ways.
    b.send(good, &[b"pong"]).unwrap();
    assert_eq!(
        raw.read(&r1, 8),
        [&wire::len_prefix(4)[..], b"pong"].concat()
    );
    // And b refuses to send more than max_message itself.
    let e = b.send(good, &[&[0u8; 1025]]).unwrap_err();
    assert!(matches!(e, TransportError::InvalidArgument(_)), "{e:?}");
}

#[test]
fn a_stream_ending_inside_a_message_is_lost() {
    let s = PoolSecret::generate().unwrap();
    let (b, lb) = endpoint(&config(&s));
    let raw = RawPeer::connect(&b.local_address().unwrap(), &s).unwrap();
    let mut bytes = RawPeer::header(false).to_vec();
    bytes.extend_from_slice(&wire::len_prefix(10));
    bytes.extend_from_slice(b"abc");
    let (send, _recv) = raw.open(&bytes);
    raw.finish(&send).unwrap();
    let ev = lb.wait("lost", |e| e.closed.len() == 1);
    match &ev.closed[0].1 {
        ChannelClosed::Lost(d) => assert!(d.contains("middle of a message"), "{d}"),
        other => panic!("expected lost, got {other:?}"),
    }
    assert!(ev.messages.is_empty());
}

#[test]
fn a_malformed_stream_header_opens_no_channel() {
    let s = PoolSecret::generate().unwrap();
    let (b, lb) = endpoint(&config(&s));
    let raw = RawPeer::connect(&b.local_address().unwrap(), &s).unwrap();
    let mut h = RawPeer::header(false);
    h[0] = b'X';
    let (_s1, _r1) = raw.open(&h);
    let mut h = RawPeer::header(false);
    h[6] ^= 1; // claims to be another endpoint
    let (_s2, _r2) = raw.open(&h);
    let (_s3, _r3) = raw.open(&RawPeer::header(false));
    // The endpoint stops the malformed streams (code 1, protocol error).
    for s in [&_s1, &_s2] {
        let code = raw.stopped(s).expect("the stream was never stopped");
        assert_eq!(code, quinn_proto::VarInt::from_u32(1));
    }
    let ev = lb.wait("the good channel", |e| e.opened.len() == 1);
    assert_eq!(ev.opened.len(), 1);
    assert!(ev.closed.is_empty());
}

#[test]
fn sending_on_an_unknown_channel_is_an_error() {
    let s = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&s));
    let e = a.send(12345, &[b"x"]).unwrap_err();
    assert!(matches!(e, TransportError::Closed(_)), "{e:?}");
    a.close_channel(12345);
}
