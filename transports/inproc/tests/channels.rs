//! The in-process transport: ordering, orderly close, loss on destroy, bad addresses.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipl_transport_abi::{ChannelClosed, Plugin, ReceivedBuffer, TransportError, TransportEvents};

#[derive(Default)]
struct Log {
    opened: Mutex<Vec<u64>>,
    messages: Mutex<Vec<(u64, Vec<u8>)>>,
    closed: Mutex<Vec<(u64, ChannelClosed)>>,
}

impl TransportEvents for Log {
    fn channel_opened(&self, ch: u64) {
        self.opened.lock().unwrap().push(ch);
    }
    fn message(&self, ch: u64, buf: ReceivedBuffer) {
        self.messages.lock().unwrap().push((ch, buf.to_vec()));
    }
    fn channel_closed(&self, ch: u64, why: ChannelClosed) {
        self.closed.lock().unwrap().push((ch, why));
    }
}

fn plugin() -> Plugin {
    Plugin::from_static(&ipl_transport_inproc::PLUGIN).unwrap()
}

#[test]
fn messages_arrive_in_order_and_whole() {
    let p = plugin();
    let log = Arc::new(Log::default());
    let a = p.create("", Arc::new(Log::default())).unwrap();
    let b = p.create("", log.clone()).unwrap();
    let ch = a
        .connect(&b.local_address().unwrap(), Duration::from_secs(1))
        .unwrap();
    for i in 0u32..500 {
        a.send(ch, &[&i.to_le_bytes(), b"-", &[i as u8; 3]])
            .unwrap();
    }
    let msgs = log.messages.lock().unwrap();
    assert_eq!(msgs.len(), 500);
    let their_ch = log.opened.lock().unwrap()[0];
    for (i, (ch, m)) in msgs.iter().enumerate() {
        assert_eq!(*ch, their_ch);
        assert_eq!(&m[..4], &(i as u32).to_le_bytes());
        assert_eq!(m.len(), 8);
    }
}

#[test]
fn close_is_orderly_and_destroy_is_loss() {
    let p = plugin();
    let log_a = Arc::new(Log::default());
    let log_b = Arc::new(Log::default());
    let a = p.create("", log_a.clone()).unwrap();
    let b = p.create("", log_b.clone()).unwrap();
    let addr_b = b.local_address().unwrap();
    let c1 = a.connect(&addr_b, Duration::from_secs(1)).unwrap();
    let c2 = a.connect(&addr_b, Duration::from_secs(1)).unwrap();
    assert_ne!(c1, c2);
    a.close_channel(c1);
    {
        let closed = log_b.closed.lock().unwrap();
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].1, ChannelClosed::ByPeer);
    }
    assert!(matches!(
        a.send(c1, &[b"x"]),
        Err(TransportError::Closed(_))
    ));
    drop(b); // b vanishes: a's remaining channel is lost
    let closed = log_a.closed.lock().unwrap();
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].0, c2);
    assert!(matches!(closed[0].1, ChannelClosed::Lost(_)));
    drop(closed);
    assert!(a.send(c2, &[b"x"]).is_err());
    assert!(matches!(
        a.connect(&addr_b, Duration::from_millis(10)),
        Err(TransportError::Refused(_))
    ));
}

#[test]
fn malformed_addresses_are_typed_errors() {
    let p = plugin();
    let a = p.create("", Arc::new(Log::default())).unwrap();
    assert!(matches!(
        a.connect(b"short", Duration::from_millis(10)),
        Err(TransportError::InvalidArgument(_))
    ));
    let mut nobody = std::process::id().to_le_bytes().to_vec();
    nobody.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        a.connect(&nobody, Duration::from_millis(10)),
        Err(TransportError::Refused(_))
    ));
    // An endpoint of another process is refused at once, naming the process.
    let mut foreign = a.local_address().unwrap();
    foreign[..4].copy_from_slice(&(std::process::id() ^ 1).to_le_bytes());
    match a.connect(&foreign, Duration::from_millis(10)) {
        Err(TransportError::Refused(m)) => assert!(m.contains("process"), "{m}"),
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[test]
fn concurrent_senders_and_destroy_do_not_crash() {
    let p = plugin();
    let log = Arc::new(Log::default());
    let a = Arc::new(p.create("", Arc::new(Log::default())).unwrap());
    let b = p.create("", log.clone()).unwrap();
    let addr = b.local_address().unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let a = a.clone();
            let ch = a.connect(&addr, Duration::from_secs(1)).unwrap();
            std::thread::spawn(move || {
                let mut sent = 0;
                for _ in 0..2000 {
                    if a.send(ch, &[b"payload"]).is_err() {
                        break;
                    }
                    sent += 1;
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2));
    drop(b); // destroyed while senders run: they see errors, nobody crashes
    let sent: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(log.messages.lock().unwrap().len(), sent);
}

/// inproc's fast path: the shared scenario (its messages come through the callback,
/// which the scenario counts; its sends fail once the channel closed, and after the
/// endpoint is gone).
#[test]
fn a_fast_path_sends_on_its_channel_until_it_closes() {
    let p = plugin();
    let (a, _la) = ipl_transport_kit::testing::endpoint(&p, "");
    let (b, lb) = ipl_transport_kit::testing::endpoint(&p, "");
    ipl_transport_kit::testing::fast_path::fast_path_on_its_channel(a, &b, &lb);
}

/// A fast path of the accepting side fails too once the connecting side closed the
/// channel (the close reaches the far end's table).
#[test]
fn a_fast_path_fails_once_the_peer_closed_its_channel() {
    let p = plugin();
    let (a, _la) = ipl_transport_kit::testing::endpoint(&p, "");
    let (b, lb) = ipl_transport_kit::testing::endpoint(&p, "");
    let ch = ipl_transport_kit::testing::connect(&a, &b);
    let theirs = lb.wait("the channel", |e| e.opened.len() == 1).opened[0];
    let back = b.fast_path(theirs).expect("inproc has fast paths");
    back.send(&[b"hello"]).unwrap();
    a.close_channel(ch);
    lb.until("the close", |e| e.closed.len() == 1);
    assert!(matches!(
        back.send(&[b"late"]),
        Err(TransportError::Closed(_))
    ));
}
