//! Channels between two endpoints: delivery, order, pairing, large messages, datagrams.

mod common;

use common::*;
use ipl_auth::PoolSecret;
use ipl_transport_abi::ChannelClosed;
use ipl_transport_quic::{wire, QuicTransport, UNRELIABLE_SUFFIX};

#[test]
fn several_channels_deliver_in_order_both_ways() {
    let s = PoolSecret::generate().unwrap();
    let (a, la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let chans: Vec<u64> = (0..3).map(|_| connect(&a, &b)).collect();
    const N: u32 = 300;
    for i in 0..N {
        for (k, ch) in chans.iter().enumerate() {
            let head = (k as u32).to_le_bytes();
            a.send(*ch, &[&head, &i.to_le_bytes()]).unwrap();
        }
    }
    let ev = lb.wait("all messages at b", |e| {
        e.opened.len() == 3 && e.messages.len() == 3 * N as usize
    });
    // Each of b's channels carries one sender channel's messages, in order.
    let mut seen_k = Vec::new();
    for ch in &ev.opened {
        let msgs = ev.on(*ch);
        assert_eq!(msgs.len(), N as usize);
        let k = u32::from_le_bytes(msgs[0][..4].try_into().unwrap());
        seen_k.push(k);
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(m.len(), 8);
            assert_eq!(u32::from_le_bytes(m[..4].try_into().unwrap()), k);
            assert_eq!(u32::from_le_bytes(m[4..].try_into().unwrap()), i as u32);
        }
    }
    seen_k.sort_unstable();
    assert_eq!(seen_k, vec![0, 1, 2]);
    // Replies on the accepted channels come back on the right channels.
    let opened = ev.opened.clone();
    drop(ev);
    for (i, ch) in opened.iter().enumerate() {
        b.send(*ch, &[b"reply", &[i as u8]]).unwrap();
    }
    let ev = la.wait("replies at a", |e| e.messages.len() == 3);
    for (i, ch) in opened.iter().enumerate() {
        let k = {
            let lb = lb.events();
            u32::from_le_bytes(lb.on(*ch)[0][..4].try_into().unwrap()) as usize
        };
        let got = ev.on(chans[k]);
        assert_eq!(got, vec![&[b'r', b'e', b'p', b'l', b'y', i as u8][..]]);
    }
    assert!(ev.opened.is_empty(), "a opened nothing: {ev:?}");
}

#[test]
fn channels_both_ways_share_one_connection() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ab1 = connect(&a, &b);
    let ab2 = connect(&a, &b);
    lb.until("b sees two channels", |e| e.opened.len() == 2);
    let ba = connect(&b, &a);
    a.send(ab1, &[b"1"]).unwrap();
    a.send(ab2, &[b"2"]).unwrap();
    b.send(ba, &[b"3"]).unwrap();
    lb.until("two messages", |e| e.messages.len() == 2);
    for t in [&a, &b] {
        let st = QuicTransport::connection_stats(&t.local_address().unwrap()).unwrap();
        assert_eq!(st.open, 1, "{st:?}");
        assert_eq!(st.established, 1, "{st:?}");
    }
}

#[test]
fn a_4_mib_message_from_many_slices_arrives_intact() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    let big = pattern(1, 4 << 20);
    let parts: Vec<&[u8]> = big.chunks(100_000).collect();
    a.send(ch, &parts).unwrap();
    a.send(ch, &[b"after"]).unwrap();
    let ev = lb.wait("the big message", |e| e.messages.len() == 2);
    assert_eq!(ev.messages[0].1.len(), big.len());
    assert!(ev.messages[0].1 == big, "contents differ");
    assert_eq!(ev.messages[1].1, b"after");
}

#[test]
fn empty_messages_are_messages() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    a.send(ch, &[]).unwrap();
    a.send(ch, &[b"", b"x", b""]).unwrap();
    a.send(ch, &[b""]).unwrap();
    let ev = lb.wait("three messages", |e| e.messages.len() == 3);
    let got: Vec<&[u8]> = ev.messages.iter().map(|(_, m)| m.as_slice()).collect();
    assert_eq!(got, vec![&b""[..], b"x", b""]);
}

#[test]
fn a_burst_of_small_messages_arrives_whole_and_in_order() {
    // Back-to-back sends with nothing coming back are batched (the later ones wait for
    // the endpoint's thread to transmit them): none may be stranded, the last one
    // included, and the order holds.
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    const N: u32 = 3000;
    for i in 0..N {
        a.send(ch, &[&i.to_le_bytes(), &[7u8; 100]]).unwrap();
    }
    let ev = lb.wait("the whole burst", |e| e.messages.len() == N as usize);
    for (i, (_, m)) in ev.messages.iter().enumerate() {
        assert_eq!(m[..4], (i as u32).to_le_bytes());
        assert_eq!(m.len(), 104);
    }
    drop(ev);
    // After a quiet spell a single message goes at once, and still arrives.
    std::thread::sleep(std::time::Duration::from_millis(5));
    a.send(ch, &[b"last"]).unwrap();
    let ev = lb.wait("the last one", |e| e.messages.len() == N as usize + 1);
    assert_eq!(ev.messages[N as usize].1, b"last");
}

#[test]
fn closing_a_channel_is_reported_to_the_peer_only() {
    let s = PoolSecret::generate().unwrap();
    let (a, la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let keep = connect(&a, &b);
    let gone = connect(&a, &b);
    a.send(gone, &[b"last words"]).unwrap();
    a.close_channel(gone);
    assert!(a.send(gone, &[b"x"]).is_err());
    let ev = lb.wait("closed at b", |e| {
        !e.closed.is_empty() && e.messages.len() == 1
    });
    assert_eq!(ev.closed.len(), 1);
    assert_eq!(ev.closed[0].1, ChannelClosed::ByPeer);
    assert_eq!(ev.messages[0].1, b"last words");
    let closed_at_b = ev.closed[0].0;
    drop(ev);
    // The other channel still works both ways; b cannot send on the closed one.
    a.send(keep, &[b"still here"]).unwrap();
    lb.until("message on the kept channel", |e| e.messages.len() == 2);
    assert!(b.send(closed_at_b, &[b"x"]).is_err());
    assert!(la.events().closed.is_empty());
}

#[test]
fn datagrams_carry_an_unreliable_channel_in_both_directions() {
    let s = PoolSecret::generate().unwrap();
    let (a, la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let mut addr = b.local_address().unwrap();
    addr.extend_from_slice(UNRELIABLE_SUFFIX.as_bytes());
    let ch = a.connect(&addr, PATIENCE).unwrap();
    let at_b = lb.wait("opened", |e| e.opened.len() == 1).opened[0];
    // Datagrams may be lost: send until some arrive (on loopback, all do), bounded.
    for round in 0..100u32 {
        a.send(ch, &[b"dgram", &round.to_le_bytes()]).unwrap();
        b.send(at_b, &[b"back", &round.to_le_bytes()]).unwrap();
        if !lb.events().messages.is_empty() && !la.events().messages.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let ev = lb.wait("a datagram at b", |e| !e.messages.is_empty());
    assert!(ev
        .messages
        .iter()
        .all(|(c, m)| *c == at_b && m.starts_with(b"dgram") && m.len() == 9));
    drop(ev);
    let ev = la.wait("a datagram at a", |e| !e.messages.is_empty());
    assert!(ev
        .messages
        .iter()
        .all(|(c, m)| *c == ch && m.starts_with(b"back")));
    drop(ev);
    // A message too large for a datagram goes on the stream and is not lost.
    let big = pattern(3, 100_000);
    a.send(ch, &[&big]).unwrap();
    lb.until("the large message", |e| {
        e.messages.iter().any(|(_, m)| *m == big)
    });
}

#[test]
fn unreliable_messages_travel_as_datagrams_on_the_wire() {
    let s = PoolSecret::generate().unwrap();
    let (b, lb) = endpoint(&config(&s));
    let raw = RawPeer::connect(&b.local_address().unwrap(), &s).unwrap();
    let (_send, recv) = raw.open(&RawPeer::header(true));
    let at_b = lb.wait("opened", |e| e.opened.len() == 1).opened[0];
    let stream = u64::from(recv.id());
    // b answers on the channel: a datagram tagged with the stream id.
    b.send(at_b, &[b"hi", b" there"]).unwrap();
    let d = raw.read_datagram();
    assert_eq!(
        wire::parse_datagram(&d).unwrap(),
        (stream, &b"hi there"[..])
    );
    // And a datagram we send is delivered on the channel.
    raw.send_datagram(wire::encode_datagram(stream, &[b"from raw"]).into())
        .unwrap();
    let ev = lb.wait("the datagram", |e| !e.messages.is_empty());
    assert_eq!(ev.messages[0], (at_b, b"from raw".to_vec()));
    drop(ev);
    // Datagrams for unknown channels or without a header are dropped, harmlessly.
    raw.send_datagram(wire::encode_datagram(stream + 4000, &[b"nobody"]).into())
        .unwrap();
    raw.send_datagram(bytes::Bytes::from_static(b"abc"))
        .unwrap();
    raw.send_datagram(wire::encode_datagram(stream, &[b"again"]).into())
        .unwrap();
    let ev = lb.wait("the second datagram", |e| e.messages.len() >= 2);
    assert_eq!(ev.messages[1], (at_b, b"again".to_vec()));
}

#[test]
fn sends_from_inside_a_callback_work() {
    // The echo pattern of the benchmark: the receiving side answers from its callback,
    // which runs on the transport's runtime thread.
    use ipl_transport_abi::{ReceivedBuffer, TransportEvents, TransportInstance};
    use std::sync::{Arc, OnceLock, Weak};
    struct Echo(OnceLock<Weak<TransportInstance>>);
    impl TransportEvents for Echo {
        fn channel_opened(&self, _: u64) {}
        fn message(&self, ch: u64, buf: ReceivedBuffer) {
            if let Some(t) = self.0.get().and_then(Weak::upgrade) {
                t.send(ch, &[&buf]).unwrap();
            }
        }
        fn channel_closed(&self, _: u64, _: ChannelClosed) {}
    }
    let s = PoolSecret::generate().unwrap();
    let (a, la) = endpoint(&config(&s));
    let echo = Arc::new(Echo(OnceLock::new()));
    let b = Arc::new(plugin().create(&config(&s), echo.clone()).unwrap());
    let _ = echo.0.set(Arc::downgrade(&b));
    let ch = connect(&a, &b);
    let big = pattern(9, 1 << 20);
    for i in 0..50u8 {
        a.send(ch, &[&[i]]).unwrap();
    }
    a.send(ch, &[&big]).unwrap();
    let ev = la.wait("echoes", |e| e.messages.len() == 51);
    for i in 0..50u8 {
        assert_eq!(ev.messages[i as usize].1, vec![i]);
    }
    assert!(ev.messages[50].1 == big);
}
