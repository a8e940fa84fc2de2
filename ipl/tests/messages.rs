//! Message delivery on one connection: FIFO order, sequence numbers, explicit receive,
//! poll, receive with timeout, and receive modes the port type did not ask for.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ipl::{EmbeddedRegistry, IplError, PortCapabilities as P};

#[test]
fn thousand_messages_arrive_in_order_with_sequence_numbers() {
    let t = ty(P::CONNECTION_ONE_TO_ONE
        | P::RECEIVE_TIMEOUT
        | P::SERIALIZATION_DATA
        | P::COMMUNICATION_NUMBERED);
    let (_a, _b, rp, mut sp) = connected_pair("fifo", t);

    let sender = std::thread::spawn(move || {
        for i in 0..1000u32 {
            let mut m = sp.new_message().unwrap();
            m.write_u32(i).unwrap();
            m.finish().unwrap();
        }
        sp
    });
    for i in 0..1000u32 {
        let mut m = rp.receive_timeout(LONG).unwrap();
        assert_eq!(m.read_u32().unwrap(), i, "message {i} out of order");
        assert_eq!(m.sequence_number().unwrap(), u64::from(i));
        assert_eq!(m.origin().name, "out");
        m.finish();
    }
    drop(sender.join().unwrap());
}

#[test]
fn sequence_number_needs_communication_numbered() {
    let t = simple();
    let (_a, rp, mut sp) = connected_loop("unnumbered", t);
    sp.new_message().unwrap().finish().unwrap();
    let m = rp.receive_timeout(LONG).unwrap();
    match m.sequence_number() {
        Err(IplError::CapabilityNotRequested(c)) => assert_eq!(c, "communication.numbered"),
        other => panic!("expected CapabilityNotRequested, got {other:?}"),
    }
}

#[test]
fn explicit_receive_poll_and_timeout() {
    let t = simple();
    let (_a, _b, rp, mut sp) = connected_pair("modes", t);

    // Poll: nothing yet.
    assert!(rp.poll().unwrap().is_none());

    // Timeout fires, and not early.
    let start = Instant::now();
    match rp.receive_timeout(Duration::from_millis(50)) {
        Err(IplError::Timeout(d)) => assert_eq!(d, Duration::from_millis(50)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(50),
        "timed out early: {took:?}"
    );
    assert!(took < LONG, "timeout took far too long: {took:?}");

    // A waiting message is returned by poll.
    let mut m = sp.new_message().unwrap();
    m.write_i64(-7).unwrap();
    m.finish().unwrap();
    let mut got = rp.poll().unwrap().expect("a message waits");
    assert_eq!(got.read_i64().unwrap(), -7);
    got.finish();
    assert!(rp.poll().unwrap().is_none());

    // Explicit receive of a waiting message.
    let mut m = sp.new_message().unwrap();
    m.write_f32(1.5).unwrap();
    m.finish().unwrap();
    let mut got = rp.receive().unwrap();
    assert_eq!(got.read_f32().unwrap(), 1.5);
    assert_eq!(got.remaining(), 0);
    assert_eq!(got.origin(), sp.identifier());
}

#[test]
fn next_message_only_after_finish() {
    let t = simple();
    let (_a, rp, mut sp) = connected_loop("finish", t);
    for i in 0..2 {
        let mut m = sp.new_message().unwrap();
        m.write_i32(i).unwrap();
        m.finish().unwrap();
    }
    let mut first = rp.receive_timeout(LONG).unwrap();
    assert_eq!(first.read_i32().unwrap(), 0);
    // The second message is there, but not delivered while the first is outstanding.
    assert!(rp.poll().unwrap().is_none());
    assert!(matches!(
        rp.receive_timeout(Duration::from_millis(20)),
        Err(IplError::Timeout(_))
    ));
    first.finish();
    let mut second = rp.poll().unwrap().expect("delivered after finish");
    assert_eq!(second.read_i32().unwrap(), 1);
    // Dropping a message finishes it too.
    drop(second);
    assert!(rp.poll().unwrap().is_none());
}

#[test]
fn receive_modes_not_in_the_type_are_refused_by_name() {
    let explicit_only = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_EXPLICIT | P::SERIALIZATION_DATA);
    let poll_only = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_POLL | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("notrequested");
    let a = ibis(&reg, &p, &[explicit_only, poll_only]);

    let rp = a.create_receive_port(&explicit_only, "e").unwrap();
    let name = |r: Result<(), IplError>| match r {
        Err(IplError::CapabilityNotRequested(c)) => c,
        other => panic!("expected CapabilityNotRequested, got {other:?}"),
    };
    assert_eq!(name(rp.poll().map(|_| ())), "receive.poll");
    assert_eq!(
        name(rp.receive_timeout(Duration::from_millis(1)).map(|_| ())),
        "receive.timeout"
    );
    assert_eq!(name(rp.enable_message_upcalls()), "receive.autoupcalls");

    let rp = a.create_receive_port(&poll_only, "p").unwrap();
    assert_eq!(name(rp.receive().map(|_| ())), "receive.explicit");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(
        name(rt.block_on(rp.receive_async()).map(|_| ())),
        "receive.explicit"
    );

    // Upcalls the type lacks are refused when the port is created.
    let r = a
        .receive_port(&explicit_only, "u")
        .message_upcall(|_m: ipl::ReadMessage| {})
        .create();
    assert_eq!(name(r.map(|_| ())), "receive.autoupcalls");
    struct Nop;
    impl ipl::ReceivePortConnectUpcall for Nop {
        fn lost_connection(
            &self,
            _: &ipl::ReceivePortIdentifier,
            _: &ipl::SendPortIdentifier,
            _: &ipl::Disconnect,
        ) {
        }
    }
    let r = a
        .receive_port(&explicit_only, "c")
        .connection_upcall(Nop)
        .create();
    assert_eq!(name(r.map(|_| ())), "connection.upcalls");
}

#[test]
fn sending_without_connection_is_not_connected() {
    let t = simple();
    let reg = EmbeddedRegistry::new();
    let a = ibis(&reg, &pool("noconn"), &[t]);
    let mut sp = a.create_send_port(&t, "out").unwrap();
    let mut m = sp.new_message().unwrap();
    m.write_i32(1).unwrap();
    assert!(matches!(m.finish(), Err(IplError::NotConnected)));
    // Undeclared port types and duplicate names are refused.
    let other = ty(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_EXPLICIT | P::SERIALIZATION_DATA);
    assert!(matches!(
        a.create_send_port(&other, "x"),
        Err(IplError::UndeclaredPortType(_))
    ));
    assert!(matches!(
        a.create_send_port(&t, "out"),
        Err(IplError::DuplicatePortName(_))
    ));
}
