//! Lost connections seen from the send side: a receiver's Ibis aborts.

mod common;

use std::sync::{mpsc, Mutex};

use common::{connect, ibis, pool, ty, LONG};
use ipl::{
    Disconnect, EmbeddedRegistry, IplError, PortCapabilities as P, ReceivePortIdentifier,
    SendPortDisconnectUpcall, SendPortIdentifier,
};

struct Lost(Mutex<mpsc::Sender<(ReceivePortIdentifier, Disconnect)>>);

impl SendPortDisconnectUpcall for Lost {
    fn lost_connection(
        &self,
        _: &SendPortIdentifier,
        receiver: &ReceivePortIdentifier,
        why: &Disconnect,
    ) {
        let _ = self.0.lock().unwrap().send((receiver.clone(), why.clone()));
    }
}

#[test]
fn receiver_abort_is_reported_and_the_rest_still_get_the_message() {
    let t = ty(P::CONNECTION_ONE_TO_MANY
        | P::CONNECTION_UPCALLS
        | P::RECEIVE_TIMEOUT
        | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("sendlost");
    let a = ibis(&reg, &p, &[t]);
    let mut rs: Vec<_> = (0..3).map(|_| Some(ibis(&reg, &p, &[t]))).collect();
    let rps: Vec<_> = rs
        .iter()
        .map(|i| {
            let rp = i.as_ref().unwrap().create_receive_port(&t, "in").unwrap();
            rp.enable_connections();
            rp
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    let mut sp = a
        .create_send_port_with_upcall(&t, "out", Lost(Mutex::new(tx)))
        .unwrap();
    for rp in &rps {
        sp.connect(rp.identifier(), LONG).unwrap();
    }
    let victim = rps[1].identifier().clone();
    rs[1].take().unwrap().abort();

    // The upcall fires ...
    let (who, why) = rx.recv_timeout(LONG).unwrap();
    assert_eq!(who, victim);
    assert!(matches!(why, Disconnect::Lost(_)), "why: {why:?}");

    // ... the next finish names the lost receiver ...
    let mut m = sp.new_message().unwrap();
    m.write_i32(77).unwrap();
    match m.finish() {
        Err(IplError::ConnectionsLost { lost }) => assert_eq!(lost, vec![victim.clone()]),
        other => panic!("expected ConnectionsLost, got {other:?}"),
    }
    // ... and the remaining receivers still got the message.
    for k in [0, 2] {
        assert_eq!(
            rps[k].receive_timeout(LONG).unwrap().read_i32().unwrap(),
            77
        );
    }
    assert_eq!(sp.connected_to().len(), 2);
    let lost = sp.lost_connections();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].0, victim);
    assert!(sp.lost_connections().is_empty());

    // Reported once: the following message succeeds.
    let mut m = sp.new_message().unwrap();
    m.write_i32(78).unwrap();
    m.finish().unwrap();
    for k in [0, 2] {
        assert_eq!(
            rps[k].receive_timeout(LONG).unwrap().read_i32().unwrap(),
            78
        );
    }
}

#[test]
fn only_receiver_lost_then_finish_names_it() {
    let t = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("sendlost1");
    let a = ibis(&reg, &p, &[t]);
    let b = ibis(&reg, &p, &[t]);
    let (rp, mut sp) = connect(&a, &b, t, "in", "out");
    let victim = rp.identifier().clone();
    b.abort();
    let mut m = sp.new_message().unwrap();
    m.write_i32(1).unwrap();
    match m.finish() {
        Err(e @ IplError::ConnectionsLost { .. }) => {
            let IplError::ConnectionsLost { lost } = &e else {
                unreachable!()
            };
            assert_eq!(lost, &vec![victim.clone()]);
            // The message names the peer briefly: its member and port, not a debug
            // dump of its transport addresses.
            let text = e.to_string();
            assert!(text.contains(&victim.to_string()), "{text}");
            assert!(text.len() <= 120 + victim.to_string().len(), "{text}");
            assert!(!text.contains("addresses"), "{text}");
        }
        other => panic!("expected ConnectionsLost, got {other:?}"),
    }
    // Afterwards the port is simply not connected, and may connect anew.
    let m = sp.new_message().unwrap();
    assert!(matches!(m.finish(), Err(IplError::NotConnected)));
    let c = ibis(&reg, &p, &[t]);
    let rp2 = c.create_receive_port(&t, "in").unwrap();
    rp2.enable_connections();
    sp.connect(rp2.identifier(), LONG).unwrap();
}
