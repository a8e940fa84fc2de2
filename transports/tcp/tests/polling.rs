//! Receiver-driven progress over tcp: a receiver that polls reads the socket itself
//! (`take`, `progress`), its channel's next message handed to it, everything else
//! delivered in order through the callbacks; once it stops polling (`progress_end`),
//! or just goes away, the connection's reader thread delivers again. A channel's fast
//! path does the same on its channel.

mod common;

use std::time::Instant;

use common::{config, connect, endpoint, plugin, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_abi::TransportCapabilities as C;

fn index(m: &[u8]) -> u64 {
    u64::from_le_bytes(m[..8].try_into().unwrap())
}

/// tcp's fast path: the shared scenario (sends and takes on its channel, in order with
/// the instance's, through another channel's close, failing after its own).
#[test]
fn a_fast_path_sends_and_takes_on_its_channel_until_it_closes() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    ipl_transport_kit::testing::fast_path::fast_path_on_its_channel(a, &b, &lb);
}

#[test]
fn tcp_says_it_is_polled() {
    assert!(plugin().capabilities().contains(C::POLLED));
}

#[test]
fn take_hands_back_the_channels_next_message_and_delivers_the_rest_in_order() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    // Some messages larger than the reader's buffer, read straight into their vector.
    let pad = |i: u64| {
        if i % 50 == 7 {
            300_000
        } else {
            (i % 9) as usize
        }
    };
    ipl_transport_kit::testing::take::take_order(&a, &b, &lb, 400, pad);
}

#[test]
fn the_reader_thread_delivers_once_the_poller_ends_or_leaves() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    let inb = lb.wait("open", |e| e.opened.len() == 1).opened[0];
    // A poller that ends its phase: the next message comes by the callback.
    assert_eq!(b.progress(), 0);
    b.progress_end();
    a.send(ch, &[&1u64.to_le_bytes()]).unwrap();
    lb.until("message 1", |e| e.on(inb).len() == 1);
    // A poller that polls once and goes away without ending its phase: the message
    // still comes by the callback (after the lease runs out).
    b.progress();
    a.send(ch, &[&2u64.to_le_bytes()]).unwrap();
    let ev = lb.wait("message 2", |e| e.on(inb).len() == 2);
    let got: Vec<u64> = ev.on(inb).into_iter().map(index).collect();
    assert_eq!(got, vec![1, 2]);
}

#[test]
fn a_peer_that_closes_under_a_poller_loses_its_channels() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    let inb = lb.wait("open", |e| e.opened.len() == 1).opened[0];
    a.send(ch, &[&7u64.to_le_bytes()]).unwrap();
    drop(a);
    // Poll until the loss is reported: the poller reads the message and the end of
    // the stream, the reader thread reports the channel lost.
    let end = Instant::now() + PATIENCE;
    loop {
        let lost = !lb.events().closed.is_empty();
        if lost {
            break;
        }
        b.progress();
        assert!(Instant::now() < end, "the loss was not reported");
    }
    let ev = lb.events();
    assert_eq!(ev.on(inb).len(), 1);
    assert_eq!(ev.closed.len(), 1);
}

#[test]
fn a_parked_receiver_is_woken_by_its_data_or_by_interrupt() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let ch = connect(&a, &b);
    let inb = lb.wait("open", |e| e.opened.len() == 1).opened[0];
    std::thread::scope(|sc| {
        // Woken by the data: the parked thread then takes the message itself (the
        // reader threads stand back while it is parked).
        let parker = sc.spawn(|| {
            let end = Instant::now() + PATIENCE;
            loop {
                assert!(b.wait(PATIENCE), "tcp parks threads");
                let mut got = None;
                b.take(inb, |buf| got = Some(buf.to_vec()));
                if got.is_some() || !lb.events().on(inb).is_empty() {
                    return got;
                }
                assert!(Instant::now() < end, "no message after {PATIENCE:?}");
            }
        });
        a.send(ch, &[&42u64.to_le_bytes()]).unwrap();
        let got = parker.join().unwrap();
        let all: Vec<u64> = got
            .iter()
            .map(|m| index(m))
            .chain(lb.events().on(inb).into_iter().map(index))
            .collect();
        assert_eq!(all, vec![42]);
        // Woken by interrupt, with nothing to read.
        let parker = sc.spawn(|| {
            let t0 = Instant::now();
            assert!(b.wait(PATIENCE));
            t0.elapsed()
        });
        let end = Instant::now() + PATIENCE;
        while !parker.is_finished() {
            b.interrupt();
            std::thread::yield_now();
            assert!(
                Instant::now() < end,
                "interrupt did not wake the parked thread"
            );
        }
        assert!(parker.join().unwrap() < PATIENCE);
    });
}

/// An interrupt reaches every thread parked in `wait` or about to park, whichever
/// thread wakes first: one thread's wake-up does not swallow another's. (With one
/// eventfd shared by all parked threads, the first to wake drained it, and a thread
/// that parked just after slept until its timeout: RMI's calls over tcp took 1 s
/// whenever a server thread and an upcall thread were parked together.)
#[test]
fn an_interrupt_is_not_swallowed_by_another_parked_thread() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    // Far longer than the bounds below: a wait that sleeps to its end fails the test.
    const LONG_NAP: std::time::Duration = std::time::Duration::from_secs(600);
    let (tx, rx) = std::sync::mpsc::channel::<&str>();
    std::thread::scope(|scope| {
        let (go_b, b_ready) = std::sync::mpsc::channel::<()>();
        let (b_may_wait, b_go) = std::sync::mpsc::channel::<()>();
        let (a_ref, tx_b) = (&a, tx.clone());
        // B has waited here before (a short wait), so nothing new is pending for it.
        scope.spawn(move || {
            assert!(a_ref.wait(std::time::Duration::from_millis(1)));
            assert!(a_ref.wait(std::time::Duration::from_millis(1)));
            go_b.send(()).unwrap();
            b_go.recv().unwrap();
            // The interrupt came while B was not parked, and A woke for it first.
            assert!(a_ref.wait(LONG_NAP));
            tx_b.send("b").unwrap();
        });
        b_ready.recv().unwrap();
        a.interrupt();
        let tx_a = tx.clone();
        let a_ref = &a;
        scope
            .spawn(move || {
                assert!(a_ref.wait(LONG_NAP));
                tx_a.send("a").unwrap();
            })
            .join()
            .unwrap();
        assert_eq!(rx.recv_timeout(PATIENCE), Ok("a"));
        b_may_wait.send(()).unwrap();
        let b = rx.recv_timeout(PATIENCE);
        if b.is_err() {
            // Let the scope end: wake B (with the bug it sleeps to LONG_NAP).
            a.interrupt();
        }
        assert_eq!(b, Ok("b"), "B slept through the interrupt");
    });
}
