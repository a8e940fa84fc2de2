//! The receiver-driven take scenario, shared by the transports that deliver through
//! `take` (shm, tcp): a sender writes on two channels, a receiver takes channel 1's
//! messages itself, and every message of either channel comes out once, whole and in
//! order, whether taken or delivered through the callbacks.
//!
//! Whether a given message is taken or delivered by the transport's own thread is a
//! race the scenario does not decide: a thread of the transport that happens to be
//! awake when a burst arrives may deliver all of it. So the sender writes in bursts
//! (two messages a channel, the other channel's first, so that a take finds messages
//! of both), each once the previous one is out, which leaves the transport's thread
//! time to go back to sleep between bursts; and it goes on past the `n` messages asked
//! for, in bursts, until the receiver took at least one (bounded by [`PATIENCE`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use ipl_transport_abi::TransportInstance;

use super::{connect, EventLog, PATIENCE};

fn index(m: &[u8]) -> u64 {
    u64::from_le_bytes(m[..8].try_into().expect("8-byte index"))
}

/// Messages a burst: two a channel.
const BURST: u64 = 4;

/// Runs the scenario from `a` to `b` (whose log is `lb`) with at least `n` messages,
/// message `i` padded to `pad(i)` bytes of `i as u8`; even ones on channel 2, odd ones
/// on channel 1, which the receiver takes. Panics on any breach, and when the receiver
/// took none of channel 1's messages; returns how many it took.
pub fn take_order(
    a: &TransportInstance,
    b: &TransportInstance,
    lb: &EventLog,
    n: u64,
    pad: impl Fn(u64) -> usize + Sync,
) -> usize {
    let ch1 = connect(a, b);
    let ch2 = connect(a, b);
    let opened = lb
        .wait("both channels", |e| e.opened.len() == 2)
        .opened
        .clone();
    let (in1, in2) = (opened[0], opened[1]);
    // Polling before the first message, as a waiting receiver does.
    assert_eq!(b.take(in1, |_| panic!("nothing was sent yet")), 0);
    let end = Instant::now() + PATIENCE;
    // Messages out at the receiver (taken, or delivered on either channel), whether
    // any was taken, and how many the sender wrote once it is done (0 before).
    let out = AtomicU64::new(0);
    let took_one = AtomicBool::new(false);
    let sent = AtomicU64::new(0);
    let taken = std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut i = 0;
            while i < n.max(BURST) || !took_one.load(Ordering::SeqCst) {
                if Instant::now() >= end {
                    break;
                }
                for k in i..i + BURST {
                    let ch = if k % 2 == 0 { ch2 } else { ch1 };
                    a.send(ch, &[&k.to_le_bytes(), &vec![k as u8; pad(k)]])
                        .expect("send");
                }
                i += BURST;
                while out.load(Ordering::SeqCst) < i && Instant::now() < end {
                    std::thread::yield_now();
                }
            }
            sent.store(i, Ordering::SeqCst);
        });
        let mut taken = Vec::new();
        loop {
            let (mut m, mut given) = (None, 0);
            b.take(in1, |buf| {
                given += 1;
                m = Some(buf.to_vec());
            });
            assert!(given <= 1, "{given} messages given in one call");
            let ev = lb.events();
            let delivered: Vec<u64> = ev.on(in1).into_iter().map(index).collect();
            if let Some(m) = m {
                let i = index(&m);
                assert_eq!(i % 2, 1, "a message of the other channel was taken");
                assert!(m[8..].iter().all(|&x| x == i as u8), "message {i} damaged");
                assert_eq!(m.len() - 8, pad(i), "message {i} cut");
                // Everything of channel 1 before it is out already, taken or delivered.
                for j in (1..i).step_by(2) {
                    assert!(
                        taken.contains(&j) || delivered.contains(&j),
                        "message {i} taken before {j}"
                    );
                }
                taken.push(i);
                took_one.store(true, Ordering::SeqCst);
            }
            let on2 = ev.on(in2).len();
            out.store(
                (taken.len() + delivered.len() + on2) as u64,
                Ordering::SeqCst,
            );
            let total = sent.load(Ordering::SeqCst);
            if total > 0 && (taken.len() + delivered.len()) as u64 == total / 2 {
                assert!(taken.windows(2).all(|w| w[0] < w[1]), "{taken:?}");
                assert!(delivered.windows(2).all(|w| w[0] < w[1]), "{delivered:?}");
                let mut all: Vec<u64> = taken.iter().chain(&delivered).copied().collect();
                all.sort_unstable();
                assert_eq!(all, (1..total).step_by(2).collect::<Vec<_>>());
                break;
            }
            drop(ev);
            assert!(
                Instant::now() < end,
                "channel 1 incomplete: {taken:?} {delivered:?}"
            );
        }
        taken
    });
    assert!(!taken.is_empty(), "take handed nothing back");
    b.progress_end();
    let total = sent.load(Ordering::SeqCst);
    let ev = lb.wait("channel 2", |e| e.on(in2).len() as u64 == total / 2);
    let on2: Vec<u64> = ev.on(in2).into_iter().map(index).collect();
    assert_eq!(on2, (0..total).step_by(2).collect::<Vec<_>>());
    taken.len()
}
