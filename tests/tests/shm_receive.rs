//! The ways a message over shm reaches a waiting receiver:
//! - a receive port takes its one connection's messages straight from the ring (`take`)
//!   while the endpoint's own thread may deliver others into the port's queue: whatever
//!   path each message takes, every sender's messages come out in order, once;
//! - with polling switched off (`IbisBuilder::spin` zero, what `IPL_SPIN_US=0` sets),
//!   a receiver sleeps in the transport (`wait`) and is woken by the sender's wake-up
//!   itself, racing the endpoint's thread for the message; every message still comes
//!   through, and closing the port releases a receiver that sleeps there.

use std::sync::Arc;
use std::time::Duration;

use ipl::{EmbeddedRegistry, Ibis, IbisBuilder, PortCapabilities as P, PortType};
use ipl_auth::PoolSecret;

const WAIT: Duration = Duration::from_secs(30);

fn port_type() -> PortType {
    PortType::new(
        P::CONNECTION_MANY_TO_ONE
            | P::RECEIVE_EXPLICIT
            | P::RECEIVE_TIMEOUT
            | P::SERIALIZATION_DATA
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
    .unwrap()
}

fn member(reg: &EmbeddedRegistry, secret: &PoolSecret, t: PortType) -> Ibis {
    member_with(reg, secret, t, |b| b)
}

/// A member over shm, its builder first passed through `more`.
fn member_with(
    reg: &EmbeddedRegistry,
    secret: &PoolSecret,
    t: PortType,
    more: impl FnOnce(IbisBuilder) -> IbisBuilder,
) -> Ibis {
    ipl::register_static_plugin(&ipl_transport_shm::PLUGIN);
    let b = Ibis::builder()
        .pool("shm-direct")
        .registry(reg)
        .secret(secret.clone())
        .prefer_transport("shm")
        // The endpoint thread is woken at once for every message a sleeping receiver
        // misses, so it competes with the receiver's own takes.
        .transport_config("shm.wait=block")
        .port_type(t);
    more(b).build().unwrap()
}

#[test]
fn one_connection_then_two_keep_each_senders_order_whichever_path_delivers() {
    let t = port_type();
    let secret = PoolSecret::generate().unwrap();
    let reg = EmbeddedRegistry::new();
    let rx = member(&reg, &secret, t);
    let tx = member(&reg, &secret, t);
    assert_eq!(rx.transport_for(&t).unwrap(), "shm");
    let rp = rx.create_receive_port(&t, "inbox").unwrap();
    rp.enable_connections();
    const N: u64 = 3000;
    std::thread::scope(|sc| {
        let send = |name: &'static str, tag: u64| {
            let tx = &tx;
            let rx_id = rx.identifier().clone();
            move || {
                let mut sp = tx.create_send_port(&t, name).unwrap();
                sp.connect_to(&rx_id, "inbox", WAIT).unwrap();
                for i in 0..N {
                    let mut w = sp.new_message().unwrap();
                    w.write_u64(tag).unwrap();
                    w.write_u64(i).unwrap();
                    w.finish().unwrap();
                    // Pauses let the receiver catch up and wait (and take).
                    if i % 4 == 0 {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
                sp.close();
            }
        };
        // First one sender (the direct path), a second one joins part way.
        let first = sc.spawn(send("first", 0));
        let mut next = [0u64; 2];
        let mut second = None;
        while next.iter().sum::<u64>() < 2 * N {
            if next[0] == N / 3 && second.is_none() {
                second = Some(sc.spawn(send("second", 1)));
            }
            let mut m = rp.receive_timeout(WAIT).unwrap();
            let (tag, i) = (m.read_u64().unwrap(), m.read_u64().unwrap());
            m.finish();
            let tag = usize::try_from(tag).unwrap();
            assert_eq!(i, next[tag], "sender {tag}: message {i} out of order");
            next[tag] += 1;
            // Now and then the receiver is slow: the sender's messages go to the
            // endpoint thread and the queue, and later ones to the take again.
            if i % 97 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        first.join().unwrap();
        second.unwrap().join().unwrap();
    });
    assert_eq!(rp.queued(), 0);
}

#[test]
fn without_polling_a_sleeping_receiver_gets_every_message_and_is_released_by_close() {
    let t = port_type();
    let secret = PoolSecret::generate().unwrap();
    let reg = EmbeddedRegistry::new();
    // Polling switched off, as `IPL_SPIN_US=0` does: a receiver sleeps at once.
    let no_poll = |b: IbisBuilder| b.spin(Duration::ZERO);
    let a = member_with(&reg, &secret, t, no_poll);
    let b = member_with(&reg, &secret, t, no_poll);
    let a_in = a.create_receive_port(&t, "a-in").unwrap();
    let b_in = Arc::new(b.create_receive_port(&t, "b-in").unwrap());
    a_in.enable_connections();
    b_in.enable_connections();
    const N: u64 = 200;
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut to_a = b.create_send_port(&t, "to-a").unwrap();
            to_a.connect_to(a.identifier(), "a-in", WAIT).unwrap();
            for _ in 0..N {
                let mut m = b_in.receive_timeout(WAIT).unwrap();
                let i = m.read_u64().unwrap();
                m.finish();
                let mut w = to_a.new_message().unwrap();
                w.write_u64(i + 1).unwrap();
                w.finish().unwrap();
            }
        });
        let mut to_b = a.create_send_port(&t, "to-b").unwrap();
        to_b.connect_to(b.identifier(), "b-in", WAIT).unwrap();
        for i in 0..N {
            let mut w = to_b.new_message().unwrap();
            w.write_u64(2 * i).unwrap();
            w.finish().unwrap();
            let mut m = a_in.receive_timeout(WAIT).unwrap();
            assert_eq!(m.read_u64().unwrap(), 2 * i + 1);
            m.finish();
        }
    });

    // A receiver that sleeps without a timeout is released by closing the port. It
    // runs in a thread of its own (not a scoped one), so that a receiver that hangs
    // fails the test below instead of blocking it.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let receiver = {
        let b_in = Arc::clone(&b_in);
        std::thread::spawn(move || {
            let _ = done_tx.send(b_in.receive().map(|_| ()));
        })
    };
    // Time to fall asleep; the close must release it whether it sleeps yet or not.
    std::thread::sleep(Duration::from_millis(200));
    b_in.close(Some(Duration::ZERO));
    match done_rx.recv_timeout(WAIT) {
        Ok(Err(ipl::IplError::PortClosed)) => {}
        Ok(other) => panic!("receive after close: {other:?}"),
        Err(_) => panic!("a receiver sleeping in the transport was not released by close"),
    }
    receiver.join().unwrap();
}

/// A member over shm whose endpoint thread looks at its rings on its own only once an
/// hour: a message left in a ring with nobody woken for it fails the test instead of
/// arriving a second late.
fn quiet_member(reg: &EmbeddedRegistry, secret: &PoolSecret, t: PortType, spin: Duration) -> Ibis {
    ipl::register_static_plugin(&ipl_transport_shm::PLUGIN);
    Ibis::builder()
        .pool("shm-polled")
        .registry(reg)
        .secret(secret.clone())
        .prefer_transport("shm")
        .transport_config("shm.idle_check_ms=3600000")
        .port_type(t)
        .spin(spin)
        .build()
        .unwrap()
}

fn send(sp: &mut ipl::SendPort, v: u64) {
    let mut w = sp.new_message().unwrap();
    w.write_u64(v).unwrap();
    w.finish().unwrap();
}

fn value(mut m: ipl::ReadMessage) -> u64 {
    let v = m.read_u64().unwrap();
    m.finish();
    v
}

/// Whether the thread (its `/proc/<pid>/task/<tid>` directory) sleeps: a receive that
/// polls runs or yields, one that waits on the port or in the transport sleeps.
fn asleep(thread: &std::path::Path) -> bool {
    std::fs::read_to_string(thread.join("stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('S'))
        })
        .unwrap_or(false)
}

fn thread_self() -> std::path::PathBuf {
    std::path::Path::new("/proc").join(std::fs::read_link("/proc/thread-self").unwrap())
}

/// shm leaves a channel's messages for the receive that polled it (no wake-up). With
/// polling switched off, a receive that awaits a reply takes it after parking in the
/// transport, which records the channel; the next receive, which awaits none, sleeps
/// on the port, and must still get the next message.
#[test]
fn without_polling_a_receive_after_a_reply_gets_the_next_message() {
    let t = port_type();
    let secret = PoolSecret::generate().unwrap();
    let reg = EmbeddedRegistry::new();
    let a = quiet_member(&reg, &secret, t, Duration::ZERO);
    let b = quiet_member(&reg, &secret, t, Duration::ZERO);
    let a_in = a.create_receive_port(&t, "a-in").unwrap();
    let b_in = b.create_receive_port(&t, "b-in").unwrap();
    a_in.enable_connections();
    b_in.enable_connections();
    const ROUNDS: u64 = 20;
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|sc| {
        let (a, b, b_in) = (&a, &b, &b_in);
        sc.spawn(move || {
            let mut to_a = b.create_send_port(&t, "to-a").unwrap();
            to_a.connect_to(a.identifier(), "a-in", WAIT).unwrap();
            for i in 0..ROUNDS {
                assert_eq!(value(b_in.receive_timeout(WAIT).unwrap()), 3 * i);
                send(&mut to_a, 3 * i + 1);
                // The follow-up once the reply was received.
                go_rx.recv_timeout(WAIT).unwrap();
                send(&mut to_a, 3 * i + 2);
            }
        });
        let mut to_b = a.create_send_port(&t, "to-b").unwrap();
        to_b.connect_to(b.identifier(), "b-in", WAIT).unwrap();
        for i in 0..ROUNDS {
            send(&mut to_b, 3 * i);
            assert_eq!(value(a_in.receive_timeout(WAIT).unwrap()), 3 * i + 1);
            go_tx.send(()).unwrap();
            let m = a_in
                .receive_timeout(WAIT)
                .unwrap_or_else(|e| panic!("round {i}: the follow-up did not come: {e}"));
            assert_eq!(value(m), 3 * i + 2);
        }
    });
}

/// Two receives of one port: one sleeps on the port while the other polls (recording
/// the channel in shm) and returns with the first message; the second message must
/// reach the sleeping one.
#[test]
fn a_receive_asleep_on_the_port_gets_what_comes_after_another_one_polled() {
    let t = port_type();
    let secret = PoolSecret::generate().unwrap();
    let reg = EmbeddedRegistry::new();
    // A long poll budget, so that the second receive is still polling when the first
    // message comes.
    let a = quiet_member(&reg, &secret, t, Duration::from_secs(1));
    let b = quiet_member(&reg, &secret, t, Duration::from_secs(1));
    let a_in = a.create_receive_port(&t, "a-in").unwrap();
    a_in.enable_connections();
    let mut to_a = b.create_send_port(&t, "to-a").unwrap();
    to_a.connect_to(a.identifier(), "a-in", WAIT).unwrap();
    const ROUNDS: u64 = 5;
    for i in 0..ROUNDS {
        std::thread::scope(|sc| {
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let a_in = &a_in;
            let sleeper = sc.spawn(move || {
                tid_tx.send(thread_self()).unwrap();
                a_in.receive_timeout(WAIT).map(value)
            });
            // It polls for its budget, then sleeps on the port.
            let tid = tid_rx.recv().unwrap();
            let end = std::time::Instant::now() + WAIT;
            while !asleep(&tid) {
                assert!(std::time::Instant::now() < end, "the receive never slept");
                std::thread::yield_now();
            }
            let poller = sc.spawn(|| a_in.receive_timeout(WAIT).map(value));
            send(&mut to_a, 2 * i);
            // Most often the polling receive takes it; the second message goes out
            // once either has one.
            let end = std::time::Instant::now() + WAIT;
            while !poller.is_finished() && !sleeper.is_finished() {
                assert!(
                    std::time::Instant::now() < end,
                    "round {i}: nobody got the first"
                );
                std::thread::yield_now();
            }
            send(&mut to_a, 2 * i + 1);
            let got = |h: std::thread::ScopedJoinHandle<'_, ipl::Result<u64>>| {
                h.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("round {i}: a message did not come: {e}"))
            };
            let mut got = [got(poller), got(sleeper)];
            got.sort_unstable();
            assert_eq!(got, [2 * i, 2 * i + 1]);
        });
    }
}
