//! The TCP transport between two endpoints of one process: channel pairing, order,
//! integrity of large and concurrent messages, orderly close and loss.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{config, connect, endpoint, pattern, plugin, Log, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_abi::{ChannelClosed, TransportCapabilities as C, TransportError};
use ipl_transport_tcp::TcpTransport;

fn stats(t: &ipl_transport_abi::TransportInstance) -> ipl_transport_tcp::ConnectionStats {
    TcpTransport::connection_stats(&t.local_address().unwrap()).unwrap()
}

#[test]
fn descriptor_says_tcp() {
    let p = plugin();
    assert_eq!(p.name(), "tcp");
    assert!(p
        .capabilities()
        .contains(C::RELIABLE | C::FIFO | C::NETWORK | C::SAME_HOST));
    assert!(p.availability().is_ok());
}

/// Sends `n` numbered messages on each channel; every message names its channel index.
fn send_numbered(t: &ipl_transport_abi::TransportInstance, chans: &[u64], n: u32) {
    for i in 0..n {
        for (k, &ch) in chans.iter().enumerate() {
            let body = pattern(u64::from(i) << 8 | k as u64, (i as usize * 7) % 300);
            t.send(ch, &[&(k as u32).to_le_bytes(), &i.to_le_bytes(), &body])
                .unwrap();
        }
    }
}

/// Checks that the log holds `n` whole messages per channel index, in order, each index
/// on its own local channel.
fn check_numbered(log: &Log, chans: usize, n: u32) {
    let ev = log.wait("all messages", |e| e.messages.len() == chans * n as usize);
    let mut next: HashMap<u32, u32> = HashMap::new();
    let mut local_of: HashMap<u32, u64> = HashMap::new();
    for (ch, m) in &ev.messages {
        let k = u32::from_le_bytes(m[..4].try_into().unwrap());
        let i = u32::from_le_bytes(m[4..8].try_into().unwrap());
        assert_eq!(
            *local_of.entry(k).or_insert(*ch),
            *ch,
            "index {k} on two channels"
        );
        let expected = next.entry(k).or_insert(0);
        assert_eq!(i, *expected, "channel index {k} out of order");
        *expected += 1;
        assert_eq!(
            &m[8..],
            &pattern(u64::from(i) << 8 | u64::from(k), (i as usize * 7) % 300)[..]
        );
    }
    assert_eq!(local_of.len(), chans);
    let mut locals: Vec<u64> = local_of.values().copied().collect();
    locals.sort_unstable();
    locals.dedup();
    assert_eq!(locals.len(), chans);
}

#[test]
fn many_channels_both_directions_share_one_connection() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    let (a, log_a) = endpoint(&cfg);
    let (b, log_b) = endpoint(&cfg);
    let a_to_b: Vec<u64> = (0..8).map(|_| connect(&a, &b)).collect();
    let b_to_a: Vec<u64> = (0..8).map(|_| connect(&b, &a)).collect();
    log_b.until("8 opens at b", |e| e.opened.len() == 8);
    log_a.until("8 opens at a", |e| e.opened.len() == 8);
    std::thread::scope(|s| {
        s.spawn(|| send_numbered(&a, &a_to_b, 200));
        s.spawn(|| send_numbered(&b, &b_to_a, 200));
    });
    check_numbered(&log_b, 8, 200);
    check_numbered(&log_a, 8, 200);
    // The peers may also answer on the channels the other side opened.
    let their = log_b.events().opened.clone();
    for &ch in &their {
        b.send(ch, &[b"reply"]).unwrap();
    }
    log_a.until("replies", |e| e.messages.len() == 8 * 200 + 8);
    // Channel pairing: one TCP connection carries all 16 channels both ways.
    assert_eq!(stats(&a).open, 1);
    assert_eq!(stats(&a).established, 1);
    assert_eq!(stats(&b).open, 1);
    assert_eq!(stats(&b).established, 1);
}

#[test]
fn large_messages_arrive_intact() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    let (a, _) = endpoint(&cfg);
    let (b, log_b) = endpoint(&cfg);
    let ch = connect(&a, &b);
    let big = pattern(42, 8 << 20);
    let tail = pattern(43, 12_345);
    a.send(ch, &[b"x", &big[..3 << 20], &[], &big[3 << 20..], &tail])
        .unwrap();
    a.send(ch, &[&big]).unwrap();
    a.send(ch, &[]).unwrap();
    let ev = log_b.wait("3 messages", |e| e.messages.len() == 3);
    let m = &ev.messages[0].1;
    assert_eq!(m.len(), 1 + big.len() + tail.len());
    assert_eq!(m[0], b'x');
    assert!(m[1..1 + big.len()] == big[..]);
    assert!(m[1 + big.len()..] == tail[..]);
    assert!(ev.messages[1].1 == big);
    assert!(ev.messages[2].1.is_empty());
}

#[test]
fn concurrent_senders_on_one_connection_do_not_interleave() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    let (a, _) = endpoint(&cfg);
    let (b, log_b) = endpoint(&cfg);
    const THREADS: u64 = 4;
    const N: u64 = 40;
    let chans: Vec<u64> = (0..THREADS).map(|_| connect(&a, &b)).collect();
    std::thread::scope(|s| {
        for (t, &ch) in chans.iter().enumerate() {
            let a = &a;
            s.spawn(move || {
                for i in 0..N {
                    let seed = (t as u64) << 32 | i;
                    // Sizes from a few bytes to ~600 KiB, so writes are partial.
                    let body = pattern(seed, ((seed * 7919) % 600_000) as usize);
                    a.send(
                        ch,
                        &[
                            &seed.to_le_bytes(),
                            &body[..body.len() / 2],
                            &body[body.len() / 2..],
                        ],
                    )
                    .unwrap();
                }
            });
        }
    });
    let ev = log_b.wait("all messages", |e| {
        e.messages.len() == (THREADS * N) as usize
    });
    let mut next: HashMap<u64, (u64, u64)> = HashMap::new();
    for (ch, m) in &ev.messages {
        let seed = u64::from_le_bytes(m[..8].try_into().unwrap());
        let (t, i) = (seed >> 32, seed & 0xffff_ffff);
        assert!(
            m[8..] == pattern(seed, ((seed * 7919) % 600_000) as usize)[..],
            "message {t}/{i} corrupted"
        );
        let e = next.entry(t).or_insert((*ch, 0));
        assert_eq!(
            (e.0, e.1),
            (*ch, i),
            "thread {t} out of order or on two channels"
        );
        e.1 += 1;
    }
    assert_eq!(stats(&a).open, 1);
}

#[test]
fn orderly_close_reaches_the_peer() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    let (a, log_a) = endpoint(&cfg);
    let (b, log_b) = endpoint(&cfg);
    let c1 = connect(&a, &b);
    let c2 = connect(&a, &b);
    assert_ne!(c1, c2);
    a.send(c1, &[b"last words"]).unwrap();
    a.close_channel(c1);
    let ev = log_b.wait("close at b", |e| e.closed.len() == 1);
    let b1 = ev.opened[0];
    assert_eq!(ev.closed[0], (b1, ChannelClosed::ByPeer));
    // Messages sent before the close are delivered before it.
    assert_eq!(ev.messages, vec![(b1, b"last words".to_vec())]);
    drop(ev);
    assert!(matches!(
        a.send(c1, &[b"x"]),
        Err(TransportError::Closed(_))
    ));
    assert!(matches!(
        b.send(b1, &[b"x"]),
        Err(TransportError::Closed(_))
    ));
    // The other side closes c2.
    let b2 = log_b.events().opened[1];
    b.close_channel(b2);
    let ev = log_a.wait("close at a", |e| e.closed.len() == 1);
    assert_eq!(ev.closed[0], (c2, ChannelClosed::ByPeer));
    drop(ev);
    // Closing is not reported locally, and a second close is harmless.
    a.close_channel(c1);
    assert_eq!(log_b.events().closed.len(), 1);
    // The connection stays for later channels.
    let c3 = connect(&a, &b);
    a.send(c3, &[b"again"]).unwrap();
    log_b.until("message on c3", |e| e.messages.len() == 2);
    assert_eq!(stats(&a).established, 1);
}

#[test]
fn destroying_an_endpoint_loses_all_its_channels() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    let (a, log_a) = endpoint(&cfg);
    let (b, log_b) = endpoint(&cfg);
    let (c, log_c) = endpoint(&cfg);
    let ab: Vec<u64> = (0..3).map(|_| connect(&a, &b)).collect();
    let ba = connect(&b, &a);
    let ac = connect(&a, &c);
    log_a.until("open from b", |e| e.opened.len() == 1);
    log_c.until("open from a", |e| e.opened.len() == 1);
    let addr_b = b.local_address().unwrap();
    drop(b);
    let ev = log_a.wait("4 losses", |e| e.closed.len() == 4);
    let mut lost: Vec<u64> = ev
        .closed
        .iter()
        .map(|(ch, why)| {
            assert!(matches!(why, ChannelClosed::Lost(_)), "{why:?}");
            *ch
        })
        .collect();
    lost.sort_unstable();
    let mut expected = ab.clone();
    expected.push(ev.opened[0]);
    expected.sort_unstable();
    assert_eq!(lost, expected);
    drop(ev);
    let _ = ba;
    // b made no callback after its destruction, and c is unaffected.
    assert!(log_b.events().closed.is_empty());
    a.send(ac, &[b"still here"]).unwrap();
    log_c.until("message at c", |e| e.messages.len() == 1);
    assert!(matches!(
        a.send(ab[0], &[b"x"]),
        Err(TransportError::Closed(_))
    ));
    // Nobody listens at b's address any more.
    assert!(matches!(
        a.connect(&addr_b, PATIENCE),
        Err(TransportError::Refused(_))
    ));
    drop(a);
    let ev = log_c.wait("loss at c", |e| e.closed.len() == 1);
    assert!(matches!(ev.closed[0].1, ChannelClosed::Lost(_)));
}

#[test]
fn dialing_each_other_at_once_works() {
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    for _ in 0..5 {
        let (a, log_a) = endpoint(&cfg);
        let (b, log_b) = endpoint(&cfg);
        let (ca, cb) = std::thread::scope(|s| {
            let ha = s.spawn(|| connect(&a, &b));
            let hb = s.spawn(|| connect(&b, &a));
            (ha.join().unwrap(), hb.join().unwrap())
        });
        a.send(ca, &[b"from a"]).unwrap();
        b.send(cb, &[b"from b"]).unwrap();
        log_b.until("a's message", |e| e.messages.len() == 1);
        log_a.until("b's message", |e| e.messages.len() == 1);
        assert!(stats(&a).open <= 2);
    }
}

#[test]
fn an_endpoint_can_connect_to_itself() {
    let secret = PoolSecret::generate().unwrap();
    let (a, log) = endpoint(&config(&secret));
    let ch = connect(&a, &a);
    a.send(ch, &[b"echo"]).unwrap();
    let ev = log.wait("message", |e| e.messages.len() == 1);
    assert_eq!(ev.messages[0].1, b"echo");
    assert_ne!(ev.messages[0].0, ch);
}

#[test]
fn callbacks_may_send() {
    // The receiver answers from inside its message callback: no lock is held there.
    use ipl_transport_abi::{ReceivedBuffer, TransportEvents, TransportInstance};
    use std::sync::Mutex;
    // The echo holds its endpoint under a lock while it sends, so the test can take it
    // back before destroying it (destroying from inside a callback would be a host bug).
    struct Echo(Mutex<Option<Arc<TransportInstance>>>);
    impl TransportEvents for Echo {
        fn channel_opened(&self, _: u64) {}
        fn message(&self, ch: u64, buf: ReceivedBuffer) {
            if let Some(t) = self.0.lock().unwrap().as_ref() {
                let _ = t.send(ch, &[&buf]);
            }
        }
        fn channel_closed(&self, _: u64, _: ChannelClosed) {}
    }
    let secret = PoolSecret::generate().unwrap();
    let cfg = config(&secret);
    let echo = Arc::new(Echo(Mutex::new(None)));
    let b = Arc::new(plugin().create(&cfg, echo.clone()).unwrap());
    *echo.0.lock().unwrap() = Some(b.clone());
    let (a, log_a) = endpoint(&cfg);
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    for i in 0u32..100 {
        a.send(ch, &[&i.to_le_bytes()]).unwrap();
    }
    let ev = log_a.wait("echoes", |e| e.messages.len() == 100);
    for (i, (c, m)) in ev.messages.iter().enumerate() {
        assert_eq!((*c, &m[..]), (ch, &(i as u32).to_le_bytes()[..]));
    }
    drop(ev);
    // Break the cycle b -> echo -> b, then destroy both endpoints.
    echo.0.lock().unwrap().take();
    drop(a);
    drop(Arc::try_unwrap(b).expect("the test holds the last reference"));
}
