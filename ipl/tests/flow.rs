//! Flow control: a receiver that does not keep up bounds what waits for it; the sender
//! blocks instead of growing the receiver's memory, and resumes as messages are finished.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ipl::{EmbeddedRegistry, PortCapabilities as P};

#[test]
fn a_slow_receiver_bounds_the_queue_and_the_sender_waits() {
    let t = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_BYTE);
    let (_a, _b, rp, mut sp) = connected_pair("flow", t);
    const MSG: usize = 1 << 20;
    const COUNT: usize = 200; // 200 MiB: three times the default 64 MiB window
    let sender = std::thread::spawn(move || {
        let data = vec![5u8; MSG];
        for _ in 0..COUNT {
            let mut m = sp.new_message().unwrap();
            m.write_bytes_borrowed(&data).unwrap();
            m.finish().unwrap();
        }
        sp
    });
    // Wait until the window is full (or a generous deadline passes).
    let window = (ipl::protocol::window() / (MSG as u64 + 16)) as usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    while rp.queued() < window && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    // Nothing was finished, so at most one window of messages can be here, and the
    // sender cannot be done.
    assert!(
        rp.queued() <= window + 1,
        "queued {} > window {window}",
        rp.queued()
    );
    assert!(!sender.is_finished());
    for _ in 0..COUNT {
        let mut m = rp.receive_timeout(LONG).unwrap();
        assert_eq!(m.read_bytes_ref(MSG).unwrap()[MSG - 1], 5);
    }
    let _sp = sender.join().unwrap();
}

#[test]
fn a_window_set_on_the_builder_bounds_the_queue() {
    let t = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_BYTE);
    const WINDOW: u64 = 64 << 10;
    const MSG: usize = 4 << 10;
    const COUNT: usize = 200; // 800 KiB: many windows' worth
    let reg = EmbeddedRegistry::new();
    let p = pool("flow-builder");
    let build = || {
        ipl::Ibis::builder()
            .pool(&p)
            .registry(&reg)
            .port_type(t)
            .window_bytes(WINDOW)
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    let rp = b.create_receive_port(&t, "in").unwrap();
    rp.enable_connections();
    let mut sp = a.create_send_port(&t, "out").unwrap();
    sp.connect(rp.identifier(), LONG).unwrap();
    let sender = std::thread::spawn(move || {
        let data = vec![7u8; MSG];
        for _ in 0..COUNT {
            let mut m = sp.new_message().unwrap();
            m.write_bytes_borrowed(&data).unwrap();
            m.finish().unwrap();
        }
        sp
    });
    // However the threads interleave, the queue never holds more than one window.
    let most = (WINDOW / (MSG as u64 + 16)) as usize + 1;
    for _ in 0..COUNT {
        assert!(rp.queued() <= most, "queued {} > {most}", rp.queued());
        let mut m = rp.receive_timeout(LONG).unwrap();
        assert_eq!(m.read_bytes_ref(MSG).unwrap()[MSG - 1], 7);
    }
    let _sp = sender.join().unwrap();
}

#[test]
fn a_window_below_the_least_is_a_configuration_error() {
    let reg = EmbeddedRegistry::new();
    let small = 2 * ipl::protocol::MIN_COST - 1;
    let r = ipl::Ibis::builder()
        .pool(pool("flow-small"))
        .registry(&reg)
        .window_bytes(small)
        .build();
    assert!(matches!(r, Err(ipl::IplError::InvalidConfig(_))), "{r:?}");
}
