//! The poll lease: while a receiver polls the transport itself (receiver-driven
//! progress, `progress`/`take`), the connections' reader threads stand back, so that
//! a message is read by the thread that waits for it and no reader thread is woken for
//! it (on this VM a wake-up costs 11-12 us, as much as the whole TCP round trip).
//!
//! Every poll renews the lease for [`LEASE`]; `progress_end` (the poller is about to
//! sleep) ends it at once and wakes the reader threads. A poller that goes away without
//! ending it (it got its message and went on computing) costs the other channels at
//! most one lease of delay: then the reader threads deliver again. A reader thread that
//! must stop (its connection ended under a poller, or the endpoint shuts down) is woken
//! by [`PollLease::wake`] and asked its `quit` condition.
//!
//! A receiver parked in the transport's `wait` (it sleeps in `poll` on the sockets
//! themselves, so that the peer's data wakes it and nobody else) counts as a poller for
//! as long as it is parked ([`PollLease::park`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How long one poll keeps the reader threads standing back.
pub(crate) const LEASE: Duration = Duration::from_millis(2);

/// The lease shared by an endpoint's pollers and reader threads.
pub(crate) struct PollLease {
    /// How long one poll holds the lease ([`LEASE`] in an endpoint).
    length: Duration,
    epoch: Instant,
    /// End of the lease in ns since `epoch` (0: none).
    until: AtomicU64,
    /// Receivers parked in `wait` now.
    parked: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

/// A receiver parked in `wait`: the reader threads stand back until it is dropped.
pub(crate) struct Parked<'a>(&'a PollLease);

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        if self.0.parked.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.wake();
        }
    }
}

impl PollLease {
    pub(crate) fn new(length: Duration) -> PollLease {
        PollLease {
            length,
            epoch: Instant::now(),
            until: AtomicU64::new(0),
            parked: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Nanoseconds since the epoch, at least 1 (0 means no lease).
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// A poller polls: the lease runs for its length from now.
    pub(crate) fn touch(&self) {
        let len = u64::try_from(self.length.as_nanos()).unwrap_or(u64::MAX);
        let until = self.now().saturating_add(len);
        self.until.store(until, Ordering::Release);
    }

    /// Whether a lease runs now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> bool {
        self.until.load(Ordering::Acquire) > self.now()
    }

    /// A poller stops polling: the lease ends now and the reader threads go on. With no
    /// lease since the last end (nobody polled: the IPL also ends polling before every
    /// sleep of a receive that did not poll), no reader thread stands back for one, and
    /// none is woken.
    pub(crate) fn end(&self) {
        if self.until.swap(0, Ordering::AcqRel) != 0 {
            self.wake();
        }
    }

    /// A receiver parks in `wait`: a poller until the guard is dropped.
    pub(crate) fn park(&self) -> Parked<'_> {
        self.parked.fetch_add(1, Ordering::AcqRel);
        Parked(self)
    }

    /// Wakes every reader thread standing back, to look at its `quit` condition.
    pub(crate) fn wake(&self) {
        let _g = self.lock.lock();
        self.cv.notify_all();
    }

    /// Waits while a lease runs or a receiver is parked, unless `quit` holds (checked
    /// at every wake-up). Returns at the latest when the lease in force expires without
    /// renewal and nobody is parked.
    pub(crate) fn stand_back(&self, quit: impl Fn() -> bool) {
        let mut g = self.lock.lock();
        loop {
            if quit() {
                return;
            }
            let until = self.until.load(Ordering::Acquire);
            let now = self.now();
            let parked = self.parked.load(Ordering::Acquire) > 0;
            if until <= now && !parked {
                return;
            }
            // `end`, `wake` and the last parked receiver notify under the lock, so a
            // wake-up between the checks above and this wait is not lost.
            let nap = if until > now {
                Duration::from_nanos(until - now)
            } else {
                PARKED_CHECK
            };
            self.cv.wait_for(&mut g, nap);
        }
    }
}

/// How often a reader thread standing back for a parked receiver looks again anyway.
const PARKED_CHECK: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn no_lease_no_wait() {
        let l = PollLease::new(LEASE);
        assert!(!l.held());
        l.stand_back(|| false);
        l.touch();
        assert!(l.held());
        l.end();
        assert!(!l.held());
        l.stand_back(|| false);
    }

    #[test]
    fn a_reader_stands_back_until_the_poller_ends_the_lease_or_it_must_quit() {
        for by_quit in [false, true] {
            // A lease far longer than the test: only `end` or `quit` ends the wait.
            let l = Arc::new(PollLease::new(Duration::from_secs(3600)));
            let quit = Arc::new(AtomicBool::new(false));
            l.touch();
            let (tx, rx) = std::sync::mpsc::channel();
            let (l2, q2) = (l.clone(), quit.clone());
            let reader = std::thread::spawn(move || {
                l2.stand_back(|| q2.load(Ordering::SeqCst));
                tx.send(()).unwrap();
            });
            assert!(
                rx.recv_timeout(Duration::from_millis(50)).is_err(),
                "the reader went on while the lease held"
            );
            if by_quit {
                quit.store(true, Ordering::SeqCst);
                l.wake();
            } else {
                l.end();
            }
            rx.recv_timeout(Duration::from_secs(30))
                .expect("the reader was not woken");
            reader.join().unwrap();
            assert_eq!(l.held(), by_quit);
        }
    }

    #[test]
    fn a_parked_receiver_keeps_the_readers_back_until_it_leaves() {
        let l = Arc::new(PollLease::new(LEASE));
        let parked = l.park();
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = l.clone();
        let reader = std::thread::spawn(move || {
            l2.stand_back(|| false);
            tx.send(()).unwrap();
        });
        // Well past the lease: still standing back, for the parked receiver.
        assert!(
            rx.recv_timeout(LEASE * 25).is_err(),
            "the reader went on while a receiver was parked"
        );
        drop(parked);
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the reader was not woken");
        reader.join().unwrap();
    }

    #[test]
    fn an_unrenewed_lease_expires_and_quit_ends_the_wait() {
        let l = PollLease::new(LEASE);
        let t0 = Instant::now();
        l.touch();
        l.stand_back(|| false);
        // It returned because the lease ran out, not before.
        assert!(t0.elapsed() >= LEASE);
        assert!(!l.held());
        // A quit condition ends it at once, lease or not.
        l.touch();
        l.stand_back(|| true);
        assert!(l.held());
    }
}
