//! Close semantics of send and receive ports.

mod common;

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ipl::{
    Disconnect, EmbeddedRegistry, IplError, PortCapabilities as P, ReceivePortConnectUpcall,
    ReceivePortIdentifier, SendPortIdentifier,
};

#[test]
fn send_port_close_delivers_earlier_messages_first() {
    let t = simple();
    let (a, _b, rp, mut sp) = connected_pair("sclose", t);
    let data: Vec<u64> = (0..10_000).collect();
    for i in 0..100u64 {
        let mut m = sp.new_message().unwrap();
        m.write_u64(i).unwrap();
        m.write_array(&data).unwrap();
        m.finish().unwrap();
    }
    sp.close();
    assert!(matches!(sp.new_message(), Err(IplError::PortClosed)));
    for i in 0..100u64 {
        let mut m = rp.receive_timeout(LONG).unwrap();
        assert_eq!(m.read_u64().unwrap(), i);
        assert_eq!(m.read_array_vec::<u64>().unwrap(), data);
    }
    assert!(rp.connected_to().is_empty());
    assert!(rp.lost_connections().is_empty());
    // The name is free again.
    drop(sp);
    let _again = a.create_send_port(&t, "out").unwrap();
}

struct LostLog(Mutex<mpsc::Sender<Disconnect>>);

impl ReceivePortConnectUpcall for LostLog {
    fn lost_connection(&self, _: &ReceivePortIdentifier, _: &SendPortIdentifier, why: &Disconnect) {
        let _ = self.0.lock().unwrap().send(why.clone());
    }
}

#[test]
fn receive_port_close_forces_after_timeout_and_counts_discarded() {
    let t = ty(P::CONNECTION_ONE_TO_ONE
        | P::CONNECTION_UPCALLS
        | P::RECEIVE_TIMEOUT
        | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("rclose");
    let a = ibis(&reg, &p, &[t]);
    let b = ibis(&reg, &p, &[t]);
    let (tx, rx) = mpsc::channel();
    let rp = b
        .receive_port(&t, "in")
        .connection_upcall(LostLog(Mutex::new(tx)))
        .create()
        .unwrap();
    rp.enable_connections();
    let mut sp = a.create_send_port(&t, "out").unwrap();
    sp.connect(rp.identifier(), LONG).unwrap();
    for i in 0..3 {
        let mut m = sp.new_message().unwrap();
        m.write_i32(i).unwrap();
        m.finish().unwrap();
    }
    let start = Instant::now();
    let discarded = rp.close(Some(Duration::from_millis(50)));
    let took = start.elapsed();
    assert_eq!(discarded, 3);
    assert!(took >= Duration::from_millis(50), "closed early: {took:?}");
    assert!(took < LONG);
    // The port's own side closed the connection.
    assert_eq!(rx.recv_timeout(LONG).unwrap(), Disconnect::Local);
    // The sender learns the connection ended.
    assert!(sp.connected_to().is_empty());
    let mut m = sp.new_message().unwrap();
    m.write_i32(9).unwrap();
    assert!(matches!(m.finish(), Err(IplError::ConnectionsLost { .. })));
    assert!(matches!(
        rp.receive_timeout(Duration::from_millis(1)),
        Err(IplError::PortClosed)
    ));
    // A closed port's name is free and connections to the old one fail.
    let rp2 = b.create_receive_port(&t, "in").unwrap();
    drop(rp2);
}

#[test]
fn receive_port_close_returns_early_when_senders_leave() {
    let t = simple();
    let (_a, _b, rp, mut sp) = connected_pair("rclose2", t);
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        sp.close();
    });
    let start = Instant::now();
    assert_eq!(rp.close(Some(LONG)), 0);
    assert!(start.elapsed() < LONG);
    closer.join().unwrap();
}

#[test]
fn blocked_receivers_get_port_closed() {
    let t = simple();
    let reg = EmbeddedRegistry::new();
    let p = pool("rclose3");
    let a = ibis(&reg, &p, &[t]);
    let rp = Arc::new(a.create_receive_port(&t, "in").unwrap());
    rp.enable_connections();
    let (started_tx, started) = mpsc::channel();
    let waiters: Vec<_> = (0..2)
        .map(|k| {
            let rp = Arc::clone(&rp);
            let started_tx = started_tx.clone();
            std::thread::spawn(move || {
                let _ = started_tx.send(());
                if k == 0 {
                    rp.receive().map(|_| ())
                } else {
                    rp.receive_timeout(LONG).map(|_| ())
                }
            })
        })
        .collect();
    for _ in 0..2 {
        started.recv_timeout(LONG).unwrap();
    }
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(rp.close(Some(Duration::ZERO)), 0);
    for w in waiters {
        assert!(matches!(w.join().unwrap(), Err(IplError::PortClosed)));
    }
    assert!(matches!(rp.poll(), Err(IplError::PortClosed)));
}
