//! Connection setup: waiting for a receive port to appear, timeouts, type mismatch, and
//! connections that wait for an outstanding message (thesis 7.1.3.2).

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ibis, pool, simple, ty, LONG};
use ipl::{
    Disconnect, EmbeddedRegistry, IplError, PortCapabilities as P, ReceivePortConnectUpcall,
    ReceivePortIdentifier, SendPortIdentifier,
};

#[test]
fn connect_waits_for_a_receive_port_created_later() {
    let t = simple();
    let reg = EmbeddedRegistry::new();
    let p = pool("late");
    let a = ibis(&reg, &p, &[t]);
    let b = Arc::new(ibis(&reg, &p, &[t]));
    let b2 = Arc::clone(&b);
    let creator = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let rp = b2.create_receive_port(&t, "later").unwrap();
        // Created but not yet enabled: the sender keeps trying.
        std::thread::sleep(Duration::from_millis(50));
        rp.enable_connections();
        rp
    });
    let mut sp = a.create_send_port(&t, "out").unwrap();
    let target = sp.connect_to(b.identifier(), "later", LONG).unwrap();
    let rp = creator.join().unwrap();
    assert_eq!(&target, rp.identifier());
    let mut m = sp.new_message().unwrap();
    m.write_u16(4242).unwrap();
    m.finish().unwrap();
    assert_eq!(rp.receive_timeout(LONG).unwrap().read_u16().unwrap(), 4242);
}

#[test]
fn connect_to_a_port_that_never_appears_times_out() {
    let t = simple();
    let reg = EmbeddedRegistry::new();
    let p = pool("never");
    let a = ibis(&reg, &p, &[t]);
    let b = ibis(&reg, &p, &[t]);
    let mut sp = a.create_send_port(&t, "out").unwrap();
    let timeout = Duration::from_millis(200);
    let start = Instant::now();
    match sp.connect_to(b.identifier(), "nobody", timeout) {
        Err(IplError::ConnectTimeout {
            timeout: tt, last, ..
        }) => {
            assert_eq!(tt, timeout);
            assert!(last.contains("no such receive port"), "last: {last}");
        }
        other => panic!("expected ConnectTimeout, got {other:?}"),
    }
    assert!(start.elapsed() < LONG);
    assert!(sp.connected_to().is_empty());
}

#[test]
fn port_type_mismatch_is_rejected() {
    let t1 = simple();
    let t2 = ty(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_EXPLICIT | P::SERIALIZATION_OBJECT);
    let reg = EmbeddedRegistry::new();
    let p = pool("mismatch");
    let a = ibis(&reg, &p, &[t1]);
    let b = ibis(&reg, &p, &[t2]);
    let rp = b.create_receive_port(&t2, "in").unwrap();
    rp.enable_connections();
    let mut sp = a.create_send_port(&t1, "out").unwrap();
    match sp.connect(rp.identifier(), LONG) {
        Err(IplError::ConnectFailed { reason, .. }) => {
            assert!(reason.contains("mismatch"), "reason: {reason}")
        }
        other => panic!("expected ConnectFailed, got {other:?}"),
    }
    assert!(rp.connected_to().is_empty());
}

struct Arrived(mpsc::Sender<SendPortIdentifier>);

impl ReceivePortConnectUpcall for Arrived {
    fn got_connection(&self, _: &ReceivePortIdentifier, origin: &SendPortIdentifier) -> bool {
        let _ = self.0.send(origin.clone());
        true
    }
    fn lost_connection(&self, _: &ReceivePortIdentifier, _: &SendPortIdentifier, _: &Disconnect) {}
}

#[test]
fn new_connection_waits_for_the_outstanding_message() {
    let t = ty(P::CONNECTION_MANY_TO_ONE
        | P::CONNECTION_UPCALLS
        | P::RECEIVE_TIMEOUT
        | P::RECEIVE_POLL
        | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("outstanding");
    let server = ibis(&reg, &p, &[t]);
    let c1 = ibis(&reg, &p, &[t]);
    let c2 = Arc::new(ibis(&reg, &p, &[t]));
    let (tx, arrived) = mpsc::channel();
    let rp = server
        .receive_port(&t, "in")
        .connection_upcall(Arrived(tx))
        .create()
        .unwrap();
    rp.enable_connections();
    let mut s1 = c1.create_send_port(&t, "s1").unwrap();
    s1.connect(rp.identifier(), LONG).unwrap();
    arrived.recv_timeout(LONG).unwrap();
    let mut m = s1.new_message().unwrap();
    m.write_i32(1).unwrap();
    m.finish().unwrap();

    // Hold the message.
    let mut held = rp.receive_timeout(LONG).unwrap();
    assert_eq!(held.read_i32().unwrap(), 1);

    let target = rp.identifier().clone();
    let c2b = Arc::clone(&c2);
    let (done_tx, done) = mpsc::channel();
    let connector = std::thread::spawn(move || {
        let mut s2 = c2b.create_send_port(&t, "s2").unwrap();
        let r = s2.connect(&target, LONG);
        let _ = done_tx.send(());
        r.map(|_| s2)
    });
    // The connect request reached the port ...
    let origin = arrived.recv_timeout(LONG).unwrap();
    assert_eq!(origin.name, "s2");
    // ... but is not accepted while the message is held.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        done.try_recv().is_err(),
        "connect returned while a message was held"
    );
    assert_eq!(rp.connected_to(), vec![s1.identifier().clone()]);

    held.finish();
    done.recv_timeout(LONG)
        .expect("connect completes after finish");
    let mut s2 = connector.join().unwrap().expect("connected after finish");
    let mut now: Vec<String> = rp.connected_to().into_iter().map(|s| s.name).collect();
    now.sort();
    assert_eq!(now, vec!["s1", "s2"]);
    let mut m = s2.new_message().unwrap();
    m.write_i32(2).unwrap();
    m.finish().unwrap();
    let mut got = rp.receive_timeout(LONG).unwrap();
    assert_eq!(got.read_i32().unwrap(), 2);
    assert_eq!(got.origin(), s2.identifier());
}

#[test]
fn disabled_port_refuses_until_enabled_and_disconnect_works() {
    let t = ty(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("enable");
    let a = ibis(&reg, &p, &[t]);
    let rp = a.create_receive_port(&t, "in").unwrap();
    let mut sp = a.create_send_port(&t, "out").unwrap();
    match sp.connect(rp.identifier(), Duration::from_millis(50)) {
        Err(IplError::ConnectTimeout { last, .. }) => {
            assert!(last.contains("does not accept"), "last: {last}")
        }
        other => panic!("expected ConnectTimeout, got {other:?}"),
    }
    rp.enable_connections();
    sp.connect(rp.identifier(), LONG).unwrap();
    let mut m = sp.new_message().unwrap();
    m.write_u8(1).unwrap();
    m.finish().unwrap();
    sp.disconnect(rp.identifier()).unwrap();
    assert!(matches!(
        sp.disconnect(rp.identifier()),
        Err(IplError::NotConnected)
    ));
    // The message sent before the disconnect is still delivered.
    assert_eq!(rp.receive_timeout(LONG).unwrap().read_u8().unwrap(), 1);
    common::wait_for("receiver sees the disconnect", || {
        rp.connected_to().is_empty()
    });
    // Disconnected in an orderly way: not a lost connection.
    assert!(rp.lost_connections().is_empty());
}

#[test]
fn each_connection_names_its_transport() {
    let t = simple();
    let (a, _b, rp, mut sp) = common::connected_pair("transports", t);
    let chosen = a.transport_for(&t).unwrap();
    assert_eq!(
        sp.connection_transports(),
        vec![(rp.identifier().clone(), chosen)]
    );
    sp.disconnect(rp.identifier()).unwrap();
    assert!(sp.connection_transports().is_empty());
}
