//! One-to-many (multicast) and many-to-one connection patterns.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::{ibis, pool, simple, ty, LONG};
use ipl::{EmbeddedRegistry, IplError, PortCapabilities as P};

#[test]
fn one_send_port_to_three_receivers_delivers_every_message_to_all() {
    let t = ty(P::CONNECTION_ONE_TO_MANY | P::RECEIVE_TIMEOUT | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("mcast");
    let a = ibis(&reg, &p, &[t]);
    let rs: Vec<_> = (0..3).map(|_| ibis(&reg, &p, &[t])).collect();
    let rps: Vec<_> = rs
        .iter()
        .map(|i| {
            let rp = i.create_receive_port(&t, "in").unwrap();
            rp.enable_connections();
            rp
        })
        .collect();
    let mut sp = a.create_send_port(&t, "out").unwrap();
    for rp in &rps {
        sp.connect(rp.identifier(), LONG).unwrap();
    }
    assert_eq!(sp.connected_to().len(), 3);
    for i in 0..50i32 {
        let mut m = sp.new_message().unwrap();
        m.write_i32(i).unwrap();
        m.finish().unwrap();
    }
    for rp in &rps {
        for i in 0..50i32 {
            let mut m = rp.receive_timeout(LONG).unwrap();
            assert_eq!(m.read_i32().unwrap(), i);
        }
        assert!(matches!(
            rp.receive_timeout(Duration::from_millis(1)),
            Err(IplError::Timeout(_))
        ));
    }
}

#[test]
fn one_to_one_send_port_cannot_connect_twice() {
    let t = simple();
    let reg = EmbeddedRegistry::new();
    let p = pool("one2one");
    let a = ibis(&reg, &p, &[t]);
    let b = ibis(&reg, &p, &[t]);
    let r1 = b.create_receive_port(&t, "r1").unwrap();
    let r2 = b.create_receive_port(&t, "r2").unwrap();
    r1.enable_connections();
    r2.enable_connections();
    let mut sp = a.create_send_port(&t, "out").unwrap();
    sp.connect(r1.identifier(), LONG).unwrap();
    assert!(matches!(
        sp.connect(r2.identifier(), LONG),
        Err(IplError::AlreadyConnected)
    ));
    assert_eq!(sp.connected_to(), vec![r1.identifier().clone()]);
}

#[test]
fn four_senders_into_one_receive_port() {
    const N: u32 = 200;
    let t = ty(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("many2one");
    let server = ibis(&reg, &p, &[t]);
    let rp = server.create_receive_port(&t, "in").unwrap();
    rp.enable_connections();
    let target = rp.identifier().clone();
    let clients: Vec<_> = (0..4).map(|_| Arc::new(ibis(&reg, &p, &[t]))).collect();

    let threads: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let c = Arc::clone(c);
            let target = target.clone();
            std::thread::spawn(move || {
                let mut sp = c.create_send_port(&t, &format!("s{k}")).unwrap();
                sp.connect(&target, LONG).unwrap();
                for i in 0..N {
                    let mut m = sp.new_message().unwrap();
                    m.write_u32(k as u32).unwrap();
                    m.write_u32(i).unwrap();
                    m.finish().unwrap();
                }
                sp
            })
        })
        .collect();

    let mut next: HashMap<u32, u32> = HashMap::new();
    for _ in 0..4 * N {
        let mut m = rp.receive_timeout(LONG).unwrap();
        let k = m.read_u32().unwrap();
        let i = m.read_u32().unwrap();
        // origin() names the sender that wrote the message.
        assert_eq!(m.origin().name, format!("s{k}"));
        assert_eq!(m.origin().ibis, *clients[k as usize].identifier());
        let e = next.entry(k).or_insert(0);
        assert_eq!(i, *e, "sender {k}: FIFO violated");
        *e += 1;
    }
    assert_eq!(next.len(), 4);
    assert!(next.values().all(|&n| n == N));
    let ports: Vec<_> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(rp.connected_to().len(), 4);
    drop(ports);
}

#[test]
fn second_sender_on_one_to_one_receive_port_is_rejected() {
    let t = simple();
    let reg = EmbeddedRegistry::new();
    let p = pool("onesender");
    let server = ibis(&reg, &p, &[t]);
    let c1 = ibis(&reg, &p, &[t]);
    let c2 = ibis(&reg, &p, &[t]);
    let rp = server.create_receive_port(&t, "in").unwrap();
    rp.enable_connections();
    let mut s1 = c1.create_send_port(&t, "s").unwrap();
    s1.connect(rp.identifier(), LONG).unwrap();
    let mut s2 = c2.create_send_port(&t, "s").unwrap();
    match s2.connect(rp.identifier(), LONG) {
        Err(IplError::ConnectFailed { reason, .. }) => {
            assert!(reason.contains("manytoone"), "reason: {reason}")
        }
        other => panic!("expected ConnectFailed, got {other:?}"),
    }
    assert_eq!(rp.connected_to(), vec![s1.identifier().clone()]);
    // The first connection is unaffected.
    let mut m = s1.new_message().unwrap();
    m.write_u8(9).unwrap();
    m.finish().unwrap();
    assert_eq!(rp.receive_timeout(LONG).unwrap().read_u8().unwrap(), 9);
}
