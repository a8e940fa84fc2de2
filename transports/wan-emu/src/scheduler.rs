//! The thread that hands held messages to the inner transport at their time.
//!
//! Items wait in a heap ordered by release time (then by arrival, so items of equal time
//! keep their order). The thread sleeps on a condition variable until shortly
//! ([`SPIN`]) before the earliest item is due, then spins to the exact time, since a
//! sleeping thread wakes tens of microseconds late. The bytes held are bounded: a sender
//! waits while the bound is reached (unless nothing is held), like a full socket buffer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipl_transport_abi::TransportError;

use parking_lot::{Condvar, Mutex};

/// How long before an item is due the thread stops sleeping and spins.
pub const SPIN: Duration = Duration::from_micros(200);

/// What to do when an item is due.
#[derive(Debug)]
pub enum Action {
    /// Send this message.
    Send(Vec<u8>),
    /// Close the channel (after everything before it).
    Close,
}

/// Receives the due items, on the scheduler's thread.
pub trait Release: Send + Sync + 'static {
    /// Carries out `action` on `channel` now.
    fn release(&self, channel: u64, action: Action);
}

#[derive(Debug)]
struct Item {
    at: Instant,
    seq: u64,
    channel: u64,
    action: Action,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

#[derive(Debug, Default)]
struct Queue {
    heap: BinaryHeap<Reverse<Item>>,
    seq: u64,
    bytes: usize,
    stop: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the scheduler thread (new earliest item, stop).
    due: Condvar,
    /// Wakes senders waiting for room.
    room: Condvar,
}

/// The scheduler of one endpoint.
#[derive(Debug)]
pub struct Scheduler {
    shared: Arc<Shared>,
    max_bytes: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Scheduler {
    /// Starts the thread; due items go to `target` while it lives.
    pub fn start(
        name: &str,
        max_bytes: usize,
        target: Weak<dyn Release>,
    ) -> Result<Self, TransportError> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("wan-emu {name}"))
            .spawn(move || run(&s, &target))
            .map_err(|e| TransportError::Other(format!("cannot start wan-emu thread: {e}")))?;
        Ok(Scheduler {
            shared,
            max_bytes,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Holds `action` for `channel` until `at`. Waits while the held bytes are at the
    /// bound; fails once the scheduler is stopped.
    pub fn push(&self, at: Instant, channel: u64, action: Action) -> Result<(), TransportError> {
        let size = match &action {
            Action::Send(d) => d.len(),
            Action::Close => 0,
        };
        let mut q = self.shared.queue.lock();
        while !q.stop && q.bytes > 0 && q.bytes.saturating_add(size) > self.max_bytes {
            self.shared.room.wait(&mut q);
        }
        if q.stop {
            return Err(TransportError::Closed(
                "wan-emu endpoint is shutting down".into(),
            ));
        }
        let earliest = q.heap.peek().is_none_or(|Reverse(i)| at < i.at);
        let seq = q.seq;
        q.seq += 1;
        q.bytes += size;
        q.heap.push(Reverse(Item {
            at,
            seq,
            channel,
            action,
        }));
        drop(q);
        if earliest {
            self.shared.due.notify_one();
        }
        Ok(())
    }

    /// How many items are held.
    pub fn len(&self) -> usize {
        self.shared.queue.lock().heap.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the thread (held items are dropped) and waits for it, unless called on it.
    pub fn stop(&self) {
        self.shared.queue.lock().stop = true;
        self.shared.due.notify_all();
        self.shared.room.notify_all();
        if let Some(t) = self.thread.lock().take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(shared: &Shared, target: &Weak<dyn Release>) {
    let mut q = shared.queue.lock();
    loop {
        if q.stop {
            q.heap.clear();
            return;
        }
        let now = Instant::now();
        let Some(Reverse(next)) = q.heap.peek() else {
            shared.due.wait(&mut q);
            continue;
        };
        let at = next.at;
        if at > now + SPIN {
            let nap = at - now - SPIN;
            shared.due.wait_for(&mut q, nap);
            continue;
        }
        if at > now {
            // Close enough: spin to the exact time without the lock, then look again
            // (an earlier item may have come in meanwhile).
            drop(q);
            while Instant::now() < at {
                std::hint::spin_loop();
            }
            q = shared.queue.lock();
            continue;
        }
        let Some(Reverse(item)) = q.heap.pop() else {
            continue;
        };
        if let Action::Send(d) = &item.action {
            q.bytes -= d.len();
        }
        drop(q);
        shared.room.notify_all();
        match target.upgrade() {
            Some(t) => t.release(item.channel, item.action),
            None => return,
        }
        q = shared.queue.lock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Record(Mutex<Vec<(u64, Option<Vec<u8>>)>>, Condvar);

    impl Release for Record {
        fn release(&self, channel: u64, action: Action) {
            let d = match action {
                Action::Send(d) => Some(d),
                Action::Close => None,
            };
            self.0.lock().push((channel, d));
            self.1.notify_all();
        }
    }

    #[test]
    fn releases_in_time_order_then_arrival_order() {
        let rec = Arc::new(Record::default());
        let weak: Weak<dyn Release> = Arc::downgrade(&rec) as Weak<dyn Release>;
        let s = Scheduler::start("test", 1 << 20, weak).unwrap();
        let t = Instant::now() + Duration::from_millis(20);
        s.push(
            t + Duration::from_millis(2),
            1,
            Action::Send(b"late".to_vec()),
        )
        .unwrap();
        s.push(t, 1, Action::Send(b"first".to_vec())).unwrap();
        s.push(t, 2, Action::Send(b"second".to_vec())).unwrap();
        s.push(t + Duration::from_millis(2), 1, Action::Close)
            .unwrap();
        let mut g = rec.0.lock();
        let end = Instant::now() + Duration::from_secs(20);
        while g.len() < 4 && Instant::now() < end {
            rec.1.wait_for(&mut g, Duration::from_millis(50));
        }
        let got: Vec<_> = g.iter().map(|(c, d)| (*c, d.clone())).collect();
        assert_eq!(
            got,
            vec![
                (1, Some(b"first".to_vec())),
                (2, Some(b"second".to_vec())),
                (1, Some(b"late".to_vec())),
                (1, None)
            ]
        );
        drop(g);
        s.stop();
        assert!(matches!(
            s.push(t, 1, Action::Close),
            Err(TransportError::Closed(_))
        ));
    }

    #[test]
    fn a_full_queue_makes_senders_wait_and_stop_frees_them() {
        let rec = Arc::new(Record::default());
        let weak: Weak<dyn Release> = Arc::downgrade(&rec) as Weak<dyn Release>;
        let s = Arc::new(Scheduler::start("test", 10, weak).unwrap());
        let far = Instant::now() + Duration::from_secs(3600);
        // The first item is admitted even above the bound (nothing held yet).
        s.push(far, 1, Action::Send(vec![0; 64])).unwrap();
        let s2 = s.clone();
        let blocked = std::thread::spawn(move || s2.push(far, 1, Action::Send(vec![0; 1])));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(s.len(), 1, "second push must wait for room");
        s.stop();
        assert!(matches!(
            blocked.join().unwrap(),
            Err(TransportError::Closed(_))
        ));
        assert!(rec.0.lock().is_empty());
    }
}
