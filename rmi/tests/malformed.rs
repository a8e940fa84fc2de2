//! Malformed requests and replies from a peer that speaks raw IPL: each gets an error
//! reply or is dropped, and neither side panics or stops serving.

mod common;

use std::time::Duration;

use common::*;
use ibis_rmi::wire::{interface_hash, RequestHeader, Status, FLAG_ONEWAY, REPLY_PORT};
use ibis_rmi::{RemoteInterface, RmiError, Stub};
use ipl::{Ibis, ReceivePort, SendPort};

/// A raw member of the pool: a send port to `target` and a reply port of its own.
fn raw_peer(rmi: &ibis_rmi::Rmi, target: &ibis_rmi::RawRef) -> (Ibis, SendPort, ReceivePort) {
    let t = ibis_rmi::port_type().unwrap();
    // Join the same pool through the same registry backend.
    let ibis = Ibis::builder()
        .capabilities(ibis_rmi::CAPABILITIES)
        .pool(rmi.identifier().pool())
        .registry_backend(std::sync::Arc::clone(rmi.ibis().registry().backend()))
        .prefer_transport("inproc")
        .port_type(t)
        .build()
        .unwrap();
    let replies = ibis.create_receive_port(&t, REPLY_PORT).unwrap();
    replies.enable_connections();
    let mut sp = ibis.create_send_port(&t, "raw").unwrap();
    sp.connect_to(&target.member, &target.port, LONG).unwrap();
    (ibis, sp, replies)
}

fn send(sp: &mut SendPort, f: impl FnOnce(&mut ipl::WriteMessage<'_, '_>)) {
    let mut m = sp.new_message().unwrap();
    f(&mut m);
    m.finish().unwrap();
}

fn error_reply(replies: &ReceivePort, call: u64) -> RmiError {
    let mut m = replies.receive_timeout(LONG).expect("an error reply");
    assert_eq!(m.read_u64().unwrap(), call);
    assert_eq!(
        Status::from_u8(m.read_u8().unwrap()).unwrap(),
        Status::RmiError
    );
    m.read_object::<RmiError>().unwrap()
}

#[test]
fn malformed_requests_get_error_replies_or_are_dropped() {
    let (s, c) = pair("inproc");
    let r = s.export(ServiceSkeleton::new(ServiceImpl::new())).unwrap();
    let (_raw, mut sp, replies) = raw_peer(&c, r.raw());
    let hash = interface_hash(<dyn Service as RemoteInterface>::NAME);

    // Too short for a header: dropped, no reply.
    send(&mut sp, |m| m.write_bytes(&[1, 2, 3]).unwrap());
    assert!(replies.receive_timeout(Duration::from_millis(200)).is_err());

    // An unknown method.
    send(&mut sp, |m| {
        RequestHeader {
            call: 7,
            interface: hash,
            method: 999,
            flags: 0,
        }
        .write(m)
        .unwrap()
    });
    assert_eq!(error_reply(&replies, 7), RmiError::NoSuchMethod(999));

    // Arguments that do not decode (`add` wants two i32).
    send(&mut sp, |m| {
        RequestHeader {
            call: 8,
            interface: hash,
            method: 0,
            flags: 0,
        }
        .write(m)
        .unwrap();
        m.write_u64(u64::MAX).unwrap(); // an absurd object length
    });
    assert!(matches!(error_reply(&replies, 8), RmiError::Malformed(_)));

    // The wrong interface.
    send(&mut sp, |m| {
        RequestHeader {
            call: 9,
            interface: hash ^ 1,
            method: 0,
            flags: 0,
        }
        .write(m)
        .unwrap();
        m.write_object(&(1i32, 2i32)).unwrap();
    });
    assert!(matches!(
        error_reply(&replies, 9),
        RmiError::WrongInterface { .. }
    ));

    // A two-way call without a call id.
    send(&mut sp, |m| {
        RequestHeader {
            call: 0,
            interface: hash,
            method: 0,
            flags: 0,
        }
        .write(m)
        .unwrap();
        m.write_object(&(1i32, 2i32)).unwrap();
    });
    assert!(matches!(error_reply(&replies, 0), RmiError::Malformed(_)));

    // A broken one-way call: nothing comes back.
    send(&mut sp, |m| {
        RequestHeader {
            call: 0,
            interface: hash,
            method: 6,
            flags: FLAG_ONEWAY,
        }
        .write(m)
        .unwrap();
        m.write_bytes(&[0xff]).unwrap();
    });
    assert!(replies.receive_timeout(Duration::from_millis(200)).is_err());

    // A call that reads its arrays in place when it runs (`weigh`, nonblocking) with
    // an array missing: answered as malformed when it runs, not a panic.
    send(&mut sp, |m| {
        RequestHeader {
            call: 11,
            interface: hash,
            method: 11,
            flags: 0,
        }
        .write(m)
        .unwrap();
        m.write_object(&()).unwrap();
        m.write_array(&[1u8, 2, 3][..]).unwrap();
    });
    assert!(matches!(error_reply(&replies, 11), RmiError::Malformed(_)));

    // A well-formed raw request is answered.
    send(&mut sp, |m| {
        RequestHeader {
            call: 10,
            interface: hash,
            method: 0,
            flags: 0,
        }
        .write(m)
        .unwrap();
        m.write_object(&(40i32, 2i32)).unwrap();
    });
    let mut m = replies.receive_timeout(LONG).unwrap();
    assert_eq!(m.read_u64().unwrap(), 10);
    assert_eq!(m.read_u8().unwrap(), Status::Ok as u8);
    assert_eq!(m.read_object::<i32>().unwrap(), 42);
    m.finish();

    // The object still serves real stubs.
    assert_eq!(c.stub(&r).unwrap().add(1, 2).unwrap(), 3);
    c.end();
    s.end();
}

#[test]
fn malformed_and_stray_replies_are_dropped_by_the_client() {
    let (s, c) = pair("inproc");
    let r = s.export(ServiceSkeleton::new(ServiceImpl::new())).unwrap();
    let stub = c.stub(&r).unwrap();
    assert_eq!(stub.add(1, 1).unwrap(), 2);
    // A raw peer writes junk into the client's reply port.
    let client_replies = ibis_rmi::RawRef {
        member: c.identifier().clone(),
        port: REPLY_PORT.into(),
        interface: String::new(),
    };
    let (_raw, mut sp, _unused) = raw_peer(&s, &client_replies);
    send(&mut sp, |m| m.write_bytes(&[9]).unwrap()); // no call id
    send(&mut sp, |m| {
        m.write_u64(123_456).unwrap(); // nobody's call
        m.write_u8(0).unwrap();
    });
    send(&mut sp, |m| {
        m.write_u64(1).unwrap(); // an old call id, with a bad status
        m.write_u8(77).unwrap();
    });
    // Calls go on working, concurrently with more junk.
    for i in 0..50 {
        if i % 10 == 0 {
            send(&mut sp, |m| m.write_bytes(&[1, 2]).unwrap());
        }
        assert_eq!(stub.add(i, 1).unwrap(), i + 1);
    }
    assert_eq!(stub.remote_ref(), r);
    c.end();
    s.end();
}
