//! wan-emu over TCP on 127.0.0.1, directly and through the IPL: messages cross between
//! clusters in order and complete (no timing assertions).

mod common;

use common::{clusters, Log, PATIENCE};
use ipl::{EmbeddedRegistry, Ibis, PortCapabilities as P, PortType};
use ipl_auth::PoolSecret;
use ipl_transport_abi::{ChannelClosed, Plugin};

fn plugin() -> Plugin {
    Plugin::from_static(&ipl_transport_wan_emu::PLUGIN).unwrap()
}

#[test]
fn tcp_messages_arrive_in_order_and_complete_both_ways() {
    let (ca, cb) = clusters("tcp");
    let secret = PoolSecret::generate().unwrap();
    let cfg = |me: &str| {
        format!(
            "secret={}\npool=wan\nwan.link={ca}>{cb} latency_ms=2 bandwidth_mbit=400\n\
             wan.link={cb}>{ca} latency_ms=1\ncluster={me}\n",
            secret.to_hex()
        )
    };
    let (log_a, log_b) = (Log::new(), Log::new());
    let a = plugin().create(&cfg(&ca), log_a.clone()).unwrap();
    let b = plugin().create(&cfg(&cb), log_b.clone()).unwrap();
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    let n = 200usize;
    let body = |i: usize| -> Vec<u8> { (0..(i * 811) % 70_000).map(|j| (i + j) as u8).collect() };
    for i in 0..n {
        let data = body(i);
        let (x, y) = data.split_at(data.len() / 2);
        a.send(ch, &[&(i as u32).to_le_bytes(), x, y]).unwrap();
    }
    let e = log_b.wait("all messages", |e| e.messages.len() == n);
    let their = e.opened[0];
    for (i, (c, m)) in e.messages.iter().enumerate() {
        assert_eq!(*c, their);
        assert_eq!(
            &m[..4],
            &(i as u32).to_le_bytes(),
            "message {i} out of order"
        );
        assert_eq!(m[4..], body(i)[..], "message {i} damaged");
    }
    drop(e);
    for i in 0..n {
        b.send(their, &[&(i as u32).to_le_bytes()]).unwrap();
    }
    b.close_channel(their);
    let e = log_a.wait("answers and close", |e| {
        e.messages.len() == n && !e.closed.is_empty()
    });
    for (i, (c, m)) in e.messages.iter().enumerate() {
        assert_eq!(*c, ch);
        assert_eq!(m.as_slice(), &(i as u32).to_le_bytes());
    }
    assert_eq!(e.closed, vec![(ch, ChannelClosed::ByPeer)]);
}

#[test]
fn ipl_ports_over_wan_emu() {
    let (ca, cb) = clusters("ipl");
    let secret = PoolSecret::generate().unwrap();
    let reg = EmbeddedRegistry::new();
    let t = PortType::new(
        P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO
            | P::CONNECTION_ONE_TO_ONE
            | P::RECEIVE_EXPLICIT
            | P::RECEIVE_TIMEOUT
            | P::SERIALIZATION_DATA,
    )
    .unwrap();
    let member = |cluster: &str| {
        Ibis::builder()
            .pool(format!("wan-ipl-{}", std::process::id()))
            .cluster(cluster)
            .registry(&reg)
            .secret(secret.clone())
            .port_type(t)
            .plugin(plugin())
            .prefer_transport("wan-emu")
            .transport_config("wan.default=latency_ms=1 bandwidth_mbit=1000")
            .build()
            .unwrap()
    };
    let a = member(&ca);
    let b = member(&cb);
    assert_eq!(a.transport_for(&t).unwrap(), "wan-emu");
    let rp = b.create_receive_port(&t, "in").unwrap();
    rp.enable_connections();
    let mut sp = a.create_send_port(&t, "out").unwrap();
    sp.connect(rp.identifier(), PATIENCE).unwrap();
    let sender = std::thread::spawn(move || {
        for i in 0..100u32 {
            let mut m = sp.new_message().unwrap();
            m.write_u32(i).unwrap();
            m.write_bytes(&vec![i as u8; i as usize * 100]).unwrap();
            m.finish().unwrap();
        }
        sp
    });
    for i in 0..100u32 {
        let mut m = rp.receive_timeout(PATIENCE).unwrap();
        assert_eq!(m.read_u32().unwrap(), i, "message {i} out of order");
        let mut buf = vec![0u8; i as usize * 100];
        m.read_bytes(&mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == i as u8));
        m.finish();
    }
    let sp = sender.join().unwrap();
    drop(sp);
    a.end().unwrap();
    b.end().unwrap();
}
