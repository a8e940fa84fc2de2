//! Two endpoints in one process, driven through the plugin ABI as the IPL drives them.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use ipl_auth::PoolSecret;
use ipl_transport_abi::{TransportCapabilities as C, TransportError, TransportInstance};

#[test]
fn descriptor_declares_a_polled_zero_copy_same_host_transport() {
    let p = plugin();
    assert_eq!(p.name(), "shm");
    assert_eq!(p.priority(), 80);
    assert_eq!(
        p.capabilities(),
        C::RELIABLE | C::FIFO | C::ZERO_COPY | C::SAME_HOST | C::POLLED
    );
    assert!(p.availability().is_ok());
}

#[test]
fn channels_keep_their_order_in_both_directions() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let chans: Vec<u64> = (0..3).map(|_| connect(&a, &b)).collect();
    lb.until("three channels opened", |e| e.opened.len() == 3);
    for i in 0..300u64 {
        let ch = chans[(i % 3) as usize];
        let body = pattern(i, (i as usize * 131) % 5000);
        a.send(
            ch,
            &[
                &i.to_le_bytes(),
                &body[..body.len() / 2],
                &body[body.len() / 2..],
            ],
        )
        .unwrap();
    }
    let ev = lb.wait("300 messages", |e| e.messages.len() == 300);
    let opened = ev.opened.clone();
    // Per channel, the messages come in the order sent, intact.
    for (k, remote) in opened.iter().enumerate() {
        let got: Vec<&Vec<u8>> = ev
            .messages
            .iter()
            .filter(|(c, _)| c == remote)
            .map(|(_, m)| m)
            .collect();
        assert_eq!(got.len(), 100);
        for (j, m) in got.iter().enumerate() {
            let i = (j * 3 + k) as u64;
            assert_eq!(&m[..8], &i.to_le_bytes());
            assert_eq!(&m[8..], &pattern(i, (i as usize * 131) % 5000)[..]);
        }
    }
    drop(ev);
    // The other direction, on a channel the peer opened.
    b.send(opened[1], &[b"back"]).unwrap();
    _la.until("reply", |e| {
        e.messages == vec![(chans[1], b"back".to_vec())]
    });
    // An orderly close reaches the peer as such.
    a.close_channel(chans[0]);
    let ev = lb.wait("close", |e| !e.closed.is_empty());
    assert_eq!(ev.closed[0].0, opened[0]);
    assert_eq!(ev.closed[0].1, ipl_transport_abi::ChannelClosed::ByPeer);
}

#[test]
fn large_messages_are_fragmented_and_reassembled() {
    let s = PoolSecret::generate().unwrap();
    let cfg = format!("{}\nshm.ring_size=65536", config(&s));
    let (a, _la) = endpoint(&cfg);
    let (b, lb) = endpoint(&cfg);
    let ch = connect(&a, &b);
    let big = pattern(7, 1_000_003);
    a.send(ch, &[&big[..10], &big[10..500_000], &big[500_000..]])
        .unwrap();
    a.send(ch, &[b"after"]).unwrap();
    let ev = lb.wait("two messages", |e| e.messages.len() == 2);
    assert!(ev.messages[0].1 == big, "the large message arrived intact");
    assert_eq!(ev.messages[1].1, b"after");
    drop(ev);
    // Above max_message: refused before anything is sent.
    let (c, _) = endpoint(&format!("{}\nmax_message=1000", config(&s)));
    let ch = connect(&c, &b);
    assert!(matches!(
        c.send(ch, &[&[0u8; 1001]]),
        Err(TransportError::InvalidArgument(_))
    ));
}

#[test]
fn received_buffers_point_into_the_shared_mapping_and_outlive_the_endpoints() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    lb.keep.store(true, Ordering::SeqCst);
    let ch = connect(&a, &b);
    for i in 0..10u64 {
        a.send(ch, &[&pattern(i, 100)]).unwrap();
    }
    let kept = {
        let mut ev = lb.wait("ten messages", |e| e.kept.len() == 10);
        std::mem::take(&mut ev.kept)
    };
    for (i, (_, buf)) in kept.iter().enumerate() {
        let name = mapping_of(buf.as_slice().as_ptr()).expect("pointer in a mapping");
        assert!(
            name.contains("memfd:ipl-shm"),
            "buffer in {name:?}, not the ring"
        );
        assert_eq!(buf.as_slice(), &pattern(i as u64, 100)[..]);
    }
    // Both endpoints go away; the buffers stay readable and release safely.
    drop(a);
    drop(b);
    for (i, (_, buf)) in kept.iter().enumerate().rev() {
        assert_eq!(buf.as_slice(), &pattern(i as u64, 100)[..]);
    }
    drop(kept);
}

#[test]
fn progress_delivers_on_the_calling_thread() {
    let s = PoolSecret::generate().unwrap();
    // The endpoint thread only blocks, so whatever `progress` returns was delivered by
    // this thread (the endpoint thread may also win some).
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&format!("{}\nshm.wait=block", config(&s)));
    let ch = connect(&a, &b);
    let mut by_progress = 0;
    for i in 0..200u64 {
        a.send(ch, &[&i.to_le_bytes()]).unwrap();
        by_progress += b.progress();
    }
    let ev = lb.wait("200 messages", |e| e.messages.len() == 200);
    for (i, (_, m)) in ev.messages.iter().enumerate() {
        assert_eq!(m, &(i as u64).to_le_bytes());
    }
    assert!(by_progress <= 200);
    assert_eq!(b.progress(), 0, "nothing left");
}

#[test]
fn take_hands_back_the_channels_next_message_and_delivers_the_rest_in_order() {
    let s = PoolSecret::generate().unwrap();
    // A sender gives a polling receiver up to a second to take each slot before it
    // wakes the peer's endpoint thread: nearly every message is this thread's.
    let cfg = format!("{}\nshm.spin_us=1000000", config(&s));
    let (a, _la) = endpoint(&cfg);
    let (b, lb) = endpoint(&cfg);
    ipl_transport_kit::testing::take::take_order(&a, &b, &lb, 200, |_| 0);
}

#[test]
fn a_receiver_holding_its_oldest_buffer_stalls_the_sender_until_it_releases() {
    let s = PoolSecret::generate().unwrap();
    let cfg = format!(
        "{}\nshm.ring_size=65536\nshm.send_timeout_ms=300",
        config(&s)
    );
    let (a, _la) = endpoint(&cfg);
    let (b, lb) = endpoint(&cfg);
    lb.keep.store(true, Ordering::SeqCst);
    let ch = connect(&a, &b);
    a.send(ch, &[b"pinned"]).unwrap();
    lb.until("first", |e| e.kept.len() == 1);
    lb.keep.store(false, Ordering::SeqCst);
    // Everything after the pinned slot is copied out and released, but the ring
    // reclaims in order: the space fills up behind the pinned slot.
    let chunk = vec![1u8; 8000];
    let mut sent = 0;
    let err = loop {
        match a.send(ch, &[&chunk]) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 1000, "the ring never filled");
    };
    assert!(matches!(err, TransportError::Timeout(_)), "{err:?}");
    assert!(sent >= 4, "{sent} messages fit in a 64 KiB ring");
    // Releasing the pinned buffer grants the credits back.
    lb.events().kept.clear();
    a.send(ch, &[b"flows again"]).unwrap();
    lb.until("last", |e| {
        e.messages.last().is_some_and(|m| m.1 == b"flows again")
    });
}

#[test]
fn many_threads_send_and_poll_at_once() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&format!("{}\nshm.ring_size=65536", config(&s)));
    let (b, lb) = endpoint(&config(&s));
    let chans: Vec<u64> = (0..4).map(|_| connect(&a, &b)).collect();
    lb.until("opened", |e| e.opened.len() == 4);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    b.progress();
                }
            });
        }
        let senders: Vec<_> = chans
            .iter()
            .map(|&ch| {
                let a = &a;
                sc.spawn(move || {
                    for i in 0..200u64 {
                        a.send(ch, &[&i.to_le_bytes(), &pattern(i, 700)]).unwrap();
                    }
                })
            })
            .collect();
        for t in senders {
            t.join().unwrap();
        }
        lb.until("all", |e| e.messages.len() == 800);
        stop.store(true, Ordering::Relaxed);
    });
    let ev = lb.events();
    for remote in &ev.opened {
        let seq: Vec<u64> = ev
            .messages
            .iter()
            .filter(|(c, _)| c == remote)
            .map(|(_, m)| u64::from_le_bytes(m[..8].try_into().unwrap()))
            .collect();
        assert_eq!(seq, (0..200).collect::<Vec<_>>());
    }
}

#[test]
fn shutdown_reports_channels_lost_to_the_peer() {
    let s = PoolSecret::generate().unwrap();
    let (a, la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    lb.until("opened", |e| e.opened.len() == 1);
    drop(b);
    let ev = la.wait("lost", |e| !e.closed.is_empty());
    assert_eq!(ev.closed[0].0, ch);
    assert!(matches!(
        ev.closed[0].1,
        ipl_transport_abi::ChannelClosed::Lost(_)
    ));
    drop(ev);
    let t0 = Instant::now();
    assert!(a.send(ch, &[b"x"]).is_err());
    assert!(t0.elapsed() < Duration::from_secs(30));
}

/// One thread parks in `b.wait` while `a` sends `msg` on `ch`, and takes it when woken;
/// if the endpoint's thread delivers it first, the calling thread interrupts the parked
/// one, as a receive port does. Returns the message if the parked thread took it.
/// Each wait is bounded by PATIENCE, so a failure ends the test.
fn park_for(
    a: &TransportInstance,
    ch: u64,
    b: &TransportInstance,
    lb: &Log,
    inb: u64,
    msg: &[u8],
) -> Option<Vec<u8>> {
    let before = lb.events().on(inb).len();
    std::thread::scope(|sc| {
        let parker = sc.spawn(|| {
            let end = Instant::now() + PATIENCE;
            loop {
                assert!(b.wait(PATIENCE), "shm parks threads");
                let mut got = None;
                b.take(inb, |buf| got = Some(buf.to_vec()));
                if got.is_some() || lb.events().on(inb).len() > before {
                    return got;
                }
                assert!(Instant::now() < end, "no message after {PATIENCE:?}");
            }
        });
        // Most likely parked by now; if not, it finds the message when it parks.
        std::thread::sleep(Duration::from_millis(1));
        a.send(ch, &[msg]).unwrap();
        let end = Instant::now() + PATIENCE;
        let mut interrupted = false;
        while !parker.is_finished() && Instant::now() < end {
            if !interrupted && lb.events().on(inb).len() > before {
                b.interrupt();
                interrupted = true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        parker.join().unwrap()
    })
}

#[test]
fn a_thread_parked_in_wait_comes_back_for_a_message_and_for_an_interrupt() {
    let s = PoolSecret::generate().unwrap();
    // The sender wakes a sleeping receiver at once (no spin for a poller first).
    let (a, _la) = endpoint(&format!("{}\nshm.wait=block", config(&s)));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    let inb = lb.wait("the channel", |e| e.opened.len() == 1).opened[0];
    // The parked thread and the endpoint's thread both sleep on the wake-up byte:
    // whichever drains it first, the parked thread must come back, with the message or
    // after the endpoint's thread delivered it.
    let taken = park_for(&a, ch, &b, &lb, inb, b"wake up");
    let ev = lb.events();
    let delivered = ev.on(inb).into_iter().map(<[u8]>::to_vec);
    let all: Vec<Vec<u8>> = taken.into_iter().chain(delivered).collect();
    drop(ev);
    assert_eq!(all, vec![b"wake up".to_vec()], "once, by one of the two");
    // Nothing to deliver: only an interrupt ends the wait before PATIENCE.
    std::thread::scope(|sc| {
        let t0 = Instant::now();
        let parker = sc.spawn(|| b.wait(PATIENCE));
        while !parker.is_finished() && t0.elapsed() < PATIENCE {
            b.interrupt();
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(parker.join().unwrap());
        assert!(
            t0.elapsed() < PATIENCE,
            "the interrupt did not reach the thread"
        );
    });
}

#[test]
fn a_parked_thread_that_drains_a_wake_up_leaves_the_endpoint_thread_able_to_deliver() {
    // A sender wakes once per announcement. When a parked thread drains the byte, the
    // endpoint's thread may sleep on with its announcement used up; it must still be
    // woken for the next message, which only it can deliver once nobody is parked.
    // Its periodic look at the rings would hide a lost wake-up as a delay: here it is
    // set far beyond PATIENCE, so a lost one fails the test.
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&format!("{}\nshm.wait=block", config(&s)));
    let (b, lb) = endpoint(&format!("{}\nshm.idle_check_ms=3600000", config(&s)));
    let ch = connect(&a, &b);
    let inb = lb.wait("the channel", |e| e.opened.len() == 1).opened[0];
    let mut taken = Vec::new();
    const ROUNDS: u32 = 100;
    for i in 0..ROUNDS {
        taken.extend(park_for(&a, ch, &b, &lb, inb, &(2 * i).to_le_bytes()));
        let next = (2 * i + 1).to_le_bytes();
        a.send(ch, &[&next]).unwrap();
        drop(
            lb.wait("the endpoint thread to deliver with nobody parked", |e| {
                e.on(inb).contains(&&next[..])
            }),
        );
    }
    // Every message once, by one path or the other.
    let ev = lb.events();
    let mut all: Vec<u32> = taken
        .iter()
        .map(Vec::as_slice)
        .chain(ev.on(inb))
        .map(|m| u32::from_le_bytes(m.try_into().unwrap()))
        .collect();
    drop(ev);
    all.sort_unstable();
    assert_eq!(all, (0..2 * ROUNDS).collect::<Vec<_>>());
}
