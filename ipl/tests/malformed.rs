//! Malformed frames from a raw transport endpoint neither crash an Ibis instance nor
//! disturb a working connection to the same port.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{connected_pair_named, ibis, pool, ty, wait_for, LONG};
use ipl::protocol::{self, Control, Frame, RejectReason};
use ipl::{EmbeddedRegistry, IplError, PortCapabilities as P, SendPortIdentifier};
use ipl_transport_abi::{ChannelClosed, ReceivedBuffer, TransportEvents};

#[derive(Default)]
struct Raw {
    frames: Mutex<Vec<Vec<u8>>>,
    closed: Mutex<Vec<(u64, ChannelClosed)>>,
}

impl TransportEvents for Raw {
    fn channel_opened(&self, _: u64) {}
    fn message(&self, _: u64, buf: ReceivedBuffer) {
        self.frames.lock().unwrap().push(buf.to_vec());
    }
    fn channel_closed(&self, channel: u64, why: ChannelClosed) {
        self.closed.lock().unwrap().push((channel, why));
    }
}

#[test]
fn garbage_does_not_disturb_a_working_connection() {
    let t = ty(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_DATA);
    let (_client, server, rp, mut sp) = connected_pair_named("garbage", t, "in", "good");

    let events = Arc::new(Raw::default());
    let plugin = ipl::static_plugins().into_iter().next().expect("inproc");
    let raw = plugin.create("", events.clone()).unwrap();
    let addr = server
        .identifier()
        .addresses()
        .iter()
        .find(|a| a.transport == "inproc")
        .expect("an inproc address")
        .address
        .clone();

    let send = |m: &mut ipl::SendPort, i: u32| {
        let mut w = m.new_message().unwrap();
        w.write_u32(i).unwrap();
        w.finish().unwrap();
    };
    let good = sp.identifier().clone();
    let expect = |i: u32| {
        let mut r = rp.receive_timeout(LONG).unwrap();
        assert_eq!(r.read_u32().unwrap(), i);
        assert_eq!(r.origin(), &good);
    };

    send(&mut sp, 0);
    let bad_frames: Vec<Vec<u8>> = vec![
        b"garbage, not a frame at all".to_vec(),
        vec![],
        vec![protocol::VERSION, 1, 0],  // truncated header
        vec![99; protocol::HEADER_LEN], // wrong version
        {
            let mut h = protocol::data_header(0);
            h[1] = 250; // unknown kind
            h.to_vec()
        },
        {
            // Control header claiming more payload than follows.
            let mut c = protocol::encode_control(&Control::Disconnect);
            c[8] = 100;
            c
        },
        {
            // A control frame with a body that is not a control message.
            let mut c = protocol::encode_control(&Control::Disconnect);
            c.truncate(protocol::HEADER_LEN);
            c.extend_from_slice(&[0xff; 5]);
            c[8..16].copy_from_slice(&5u64.to_le_bytes());
            c
        },
    ];
    for (i, f) in bad_frames.iter().enumerate() {
        // A fresh channel per frame: the receiver drops a channel that sent garbage.
        let ch = raw.connect(&addr, Duration::from_secs(1)).unwrap();
        let _ = raw.send(ch, &[f]);
        send(&mut sp, i as u32 + 1);
        expect(i as u32);
    }
    // A well-formed data frame on a channel that never connected is dropped.
    let ch = raw.connect(&addr, Duration::from_secs(1)).unwrap();
    let mut data = protocol::data_header(7).to_vec();
    data.extend_from_slice(&123u32.to_le_bytes());
    raw.send(ch, &[&data]).unwrap();
    // Replies to the sender are ignored on an incoming channel.
    raw.send(
        ch,
        &[&protocol::encode_control(&Control::Reject(
            RejectReason::Refused,
        ))],
    )
    .unwrap();
    let n = bad_frames.len() as u32;
    send(&mut sp, n + 1);
    expect(n);
    expect(n + 1);
    assert!(matches!(
        rp.receive_timeout(Duration::from_millis(10)),
        Err(IplError::Timeout(_))
    ));
    // The good connection is the only one.
    assert_eq!(rp.connected_to(), vec![sp.identifier().clone()]);
    // Every channel that sent a malformed frame was closed by the receiver.
    wait_for("garbage channels closed", || {
        events.closed.lock().unwrap().len() == bad_frames.len()
    });
}

#[test]
fn raw_handshake_then_truncated_payload_is_a_decode_error() {
    let t = ty(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("rawhs");
    let server = ibis(&reg, &p, &[t]);
    let rp = server.create_receive_port(&t, "in").unwrap();
    rp.enable_connections();

    let events = Arc::new(Raw::default());
    let raw = ipl::static_plugins()[0].create("", events.clone()).unwrap();
    let addr = server
        .identifier()
        .address_for("inproc")
        .unwrap()
        .address
        .clone();
    let ch = raw.connect(&addr, Duration::from_secs(1)).unwrap();

    // Asking for a port that does not exist: a Reject.
    let fake = SendPortIdentifier {
        ibis: server.identifier().clone(),
        name: "raw".into(),
    };
    let hello = |name: &str| {
        protocol::encode_control(&Control::Connect {
            sender: fake.clone(),
            receiver: name.into(),
            port_type: t,
        })
    };
    raw.send(ch, &[&hello("nope")]).unwrap();
    raw.send(ch, &[&hello("in")]).unwrap();
    wait_for("two replies", || events.frames.lock().unwrap().len() >= 2);
    {
        let frames = events.frames.lock().unwrap();
        assert_eq!(
            protocol::decode(&frames[0]).unwrap(),
            Frame::Control(Control::Reject(RejectReason::NoSuchPort))
        );
        assert!(matches!(
            protocol::decode(&frames[1]).unwrap(),
            Frame::Control(Control::Accept { .. })
        ));
    }
    // A data message whose payload is shorter than what the reader asks for.
    let mut data = protocol::data_header(0).to_vec();
    data.extend_from_slice(&[1, 2]);
    raw.send(ch, &[&data]).unwrap();
    // An array header claiming a huge length.
    let mut data = protocol::data_header(1).to_vec();
    data.extend_from_slice(&u64::MAX.to_le_bytes());
    raw.send(ch, &[&data]).unwrap();

    let mut m = rp.receive_timeout(LONG).unwrap();
    assert_eq!(m.origin(), &fake);
    assert!(matches!(m.read_u32(), Err(IplError::Decode(_))));
    assert_eq!(m.read_u16().unwrap(), 0x0201);
    m.finish();
    let mut m = rp.receive_timeout(LONG).unwrap();
    assert!(matches!(
        m.read_array_vec::<f64>(),
        Err(IplError::Decode(_))
    ));
    assert!(matches!(
        m.read_object::<u8>(),
        Err(IplError::LevelNotAllowed { .. })
    ));
    m.finish();
    // The raw endpoint vanishing is a lost connection.
    drop(raw);
    wait_for("lost connection", || rp.connected_to().is_empty());
    assert_eq!(rp.lost_connections().len(), 1);
}
