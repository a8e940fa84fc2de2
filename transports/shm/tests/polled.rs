//! Channels a receiver polls: after a take through a channel's fast path, data sent through the channel's
//! fast path gets no wake-up (the receiver's side takes it itself), and nothing is
//! lost when the receiver stops polling (`progress_end`, or parking in `wait`) or when
//! the sender fills the ring while nobody polls.
//!
//! The receiving endpoint's periodic look at its rings would hide a lost message as a
//! delay: it is set far beyond PATIENCE here, so a lost one fails the test.

mod common;

use common::*;
use ipl_auth::PoolSecret;
use ipl_transport_abi::{FastPath, TransportInstance};
use std::time::Duration;

fn quiet(s: &PoolSecret) -> String {
    format!("{}\nshm.idle_check_ms=3600000", config(s))
}

/// The calling thread's `/proc` directory (`/proc/<pid>/task/<tid>`).
fn thread_self() -> std::path::PathBuf {
    std::path::Path::new("/proc").join(std::fs::read_link("/proc/thread-self").unwrap())
}

/// Whether the thread sleeps (its state in `/proc/<pid>/task/<tid>/stat`): a parking
/// thread sleeps only in `poll`, after its last look at the rings.
fn in_poll(thread: &std::path::Path) -> bool {
    std::fs::read_to_string(thread.join("stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('S'))
        })
        .unwrap_or(false)
}

/// A sender endpoint (configured by `sender`) and a quiet receiver with one channel
/// between them: the receiver's log and channel id, the sender's fast path of the
/// channel and the receiver's, through which it takes as the IPL's receive ports do.
fn polled_pair(
    sender: impl Fn(&PoolSecret) -> String,
) -> (
    TransportInstance,
    TransportInstance,
    std::sync::Arc<Log>,
    u64,
    FastPath,
    FastPath,
) {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&sender(&s));
    let (b, lb) = endpoint(&quiet(&s));
    let ch = connect(&a, &b);
    let inb = lb.wait("the channel", |e| e.opened.len() == 1).opened[0];
    let fast = a.fast_path(ch).expect("shm has a fast path");
    let rx = b.fast_path(inb).expect("shm has a fast path");
    (a, b, lb, inb, fast, rx)
}

fn index(m: &[u8]) -> u32 {
    u32::from_le_bytes(m[..4].try_into().unwrap())
}

#[test]
fn data_sent_while_the_receiver_polls_is_delivered_once_it_stops() {
    let (_a, b, lb, inb, fast, rx) = polled_pair(config);
    let mut taken = Vec::new();
    const ROUNDS: u32 = 50;
    for i in 0..ROUNDS {
        // The receiver polls the channel (and finds its message, or nothing yet).
        rx.take(|m| taken.push(m.to_vec()));
        fast.send(&[&(2 * i).to_le_bytes()]).unwrap();
        // It takes that one itself (unless the endpoint thread was awake).
        let deadline = std::time::Instant::now() + PATIENCE;
        while taken.len() + lb.events().on(inb).len() < (2 * i + 1) as usize {
            assert!(
                std::time::Instant::now() < deadline,
                "a polling receiver did not get its message"
            );
            rx.take(|m| taken.push(m.to_vec()));
        }
        // ...then one more comes before it stops polling: only the stop can find it.
        fast.send(&[&(2 * i + 1).to_le_bytes()]).unwrap();
        b.progress_end();
        let want = (2 * i + 2) as usize;
        lb.until("everything once the receiver stopped polling", |e| {
            taken.len() + e.on(inb).len() >= want
        });
    }
    let ev = lb.events();
    let mut all: Vec<u32> = taken
        .iter()
        .map(|m| index(m))
        .chain(ev.on(inb).into_iter().map(index))
        .collect();
    drop(ev);
    all.sort_unstable();
    assert_eq!(
        all,
        (0..2 * ROUNDS).collect::<Vec<_>>(),
        "each message once"
    );
}

#[test]
fn a_receiver_that_parks_is_woken_for_what_is_sent_to_the_channel_it_polled() {
    let (_a, b, lb, inb, fast, rx) = polled_pair(config);
    let mut got = 0usize;
    const ROUNDS: u32 = 50;
    for i in 0..ROUNDS {
        // The receiver polls, then parks; the message comes before or after it
        // sleeps: either its look before sleeping finds it, or the sender wakes it.
        std::thread::scope(|sc| {
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let (b, rx) = (&b, &rx);
            let parked = sc.spawn(move || {
                // A thread's first park returns at once (interrupts it has not seen).
                assert!(b.wait(Duration::ZERO));
                let mut early = 0;
                rx.take(|_| early += 1);
                tid_tx.send(thread_self()).unwrap();
                if early > 0 {
                    // The message came before the thread parked, and it has it.
                    return (Duration::ZERO, early);
                }
                let t0 = std::time::Instant::now();
                assert!(b.wait(PATIENCE), "shm parks threads");
                (t0.elapsed(), early)
            });
            // The message comes once the thread polled the channel, and every other
            // round once it sleeps in `poll` (seen in /proc), so that only a wake-up
            // can bring it.
            let tid = tid_rx.recv().unwrap();
            if i % 2 == 1 {
                let deadline = std::time::Instant::now() + PATIENCE;
                while !in_poll(&tid) && !parked.is_finished() {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the thread never slept"
                    );
                    std::thread::yield_now();
                }
            }
            let before = lb.events().on(inb).len();
            fast.send(&[&i.to_le_bytes()]).unwrap();
            // The sender's wake-up reaches the parked thread, or the endpoint thread
            // first, which delivers the message through the callback; the IPL then
            // interrupts its parked threads, as here.
            let deadline = std::time::Instant::now() + PATIENCE;
            while !parked.is_finished() {
                if lb.events().on(inb).len() > before {
                    b.interrupt();
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "round {i}: nobody was woken for the message"
                );
                std::thread::yield_now();
            }
            let (slept, early) = parked.join().unwrap();
            got += early;
            assert!(
                slept < PATIENCE,
                "round {i}: the parked thread was not woken"
            );
        });
        let deadline = std::time::Instant::now() + PATIENCE;
        while got + lb.events().on(inb).len() < (i + 1) as usize {
            assert!(
                std::time::Instant::now() < deadline,
                "round {i}: message lost"
            );
            rx.take(|_| got += 1);
        }
    }
    assert_eq!(
        got + lb.events().on(inb).len(),
        ROUNDS as usize,
        "each once"
    );
}

#[test]
fn a_sender_that_fills_the_ring_of_a_polled_channel_gets_it_drained() {
    // A 64 KiB ring and 128 messages of 2 KiB: the sender runs out of ring space while
    // the receiver, which polled the channel once, does not poll. The endpoint thread
    // must be woken to take the slots, and the sends complete.
    let (_a, b, lb, inb, fast, rx) = polled_pair(|s| format!("{}\nshm.ring_size=65536", config(s)));
    assert_eq!(rx.take(|_| panic!("nothing was sent yet")), 0);
    const N: u32 = 128;
    for i in 0..N {
        let body = pattern(u64::from(i), 2048);
        fast.send(&[&i.to_le_bytes(), &body])
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    // The last messages may still be in the ring, left for the receiver, which now
    // stops polling.
    b.progress_end();
    let ev = lb.wait("every message", |e| e.on(inb).len() == N as usize);
    let got: Vec<u32> = ev.on(inb).into_iter().map(index).collect();
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "in order, each once");
}
