//! Host threads parked in a transport (`TransportPlugin::wait`), as the shm and tcp
//! transports park them.
//!
//! A parked thread sleeps in `poll` on the transport's sockets, so that the peer's data
//! (or wake-up byte) wakes it directly, and on an eventfd of its own, which
//! [`Parking::interrupt`] signals. One eventfd per parked thread: an interrupt reaches
//! every parked thread, and no thread's drain can swallow another's (one eventfd shared
//! by all parked threads lost interrupts: the first thread to wake drained it, and a
//! thread that parked just after slept until its timeout).
//!
//! **No lost interrupt.** The host decides to park under its own lock and calls `wait`
//! after releasing it, so an interrupt may come before the thread has registered its
//! eventfd. Interrupts are therefore also counted: a thread that parks remembers the
//! count it last saw (per thread and endpoint), and returns at once when the count has
//! moved since. The eventfd is registered before the count is read, and `interrupt`
//! counts before it signals the registered ones, so either the parking thread sees the
//! new count or `interrupt` sees its eventfd.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

thread_local! {
    /// The endpoint (its `Parking`'s id) and the interrupt count this thread saw when
    /// it last stopped being parked there.
    static SEEN: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Ids of `Parking`s: unique in the process (an address could be reused by a later
/// endpoint, whose count a thread would then take as seen). 0 is never given out.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A new non-blocking eventfd.
fn eventfd() -> io::Result<OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(rustix::event::eventfd(
        0,
        EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
    )?)
}

/// Signals an eventfd.
fn eventfd_signal(fd: &OwnedFd) {
    // A full counter (EAGAIN) means it is signalled already.
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Resets an eventfd.
fn eventfd_drain(fd: &OwnedFd) {
    let mut v = [0u8; 8];
    // Non-blocking: EAGAIN means it was not signalled.
    let _ = rustix::io::read(fd, &mut v);
}

/// The parked threads of one endpoint.
#[derive(Debug)]
pub struct Parking {
    id: u64,
    /// Interrupts so far.
    interrupts: AtomicU64,
    fds: Mutex<Fds>,
}

#[derive(Debug, Default)]
struct Fds {
    /// The eventfds of the threads parked now.
    waiting: Vec<Arc<OwnedFd>>,
    /// Eventfds of earlier waits, kept for the next (a new one is a system call).
    spare: Vec<Arc<OwnedFd>>,
}

/// A thread registered as parked; deregistered (and its eventfd reset) on drop.
pub struct Parked<'a> {
    parking: &'a Parking,
    fd: Arc<OwnedFd>,
}

impl Default for Parking {
    fn default() -> Self {
        Parking {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            interrupts: AtomicU64::new(0),
            fds: Mutex::default(),
        }
    }
}

impl Parking {
    /// Registers the calling thread as parked. `None` when an interrupt came since the
    /// thread was last parked here: the caller returns at once instead of sleeping.
    pub fn park(&self) -> io::Result<Option<Parked<'_>>> {
        let spare = self.fds.lock().spare.pop();
        let fd = match spare {
            Some(fd) => fd,
            None => Arc::new(eventfd()?),
        };
        self.fds.lock().waiting.push(Arc::clone(&fd));
        let parked = Parked { parking: self, fd };
        // SeqCst: pairs with the count in `interrupt` (see the module documentation).
        let now = self.interrupts.load(Ordering::SeqCst);
        if SEEN.get() != (self.id, now) {
            // Dropping `parked` records the count as seen.
            return Ok(None);
        }
        Ok(Some(parked))
    }

    /// Wakes every parked thread, and makes the next `park` of every other thread that
    /// uses this endpoint return at once.
    pub fn interrupt(&self) {
        self.interrupts.fetch_add(1, Ordering::SeqCst);
        for fd in &self.fds.lock().waiting {
            eventfd_signal(fd);
        }
    }

    /// Threads parked now.
    pub fn parked(&self) -> usize {
        self.fds.lock().waiting.len()
    }
}

impl Parked<'_> {
    /// The eventfd to poll with the sockets.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        let p = self.parking;
        eventfd_drain(&self.fd);
        let mut fds = p.fds.lock();
        fds.waiting.retain(|f| !Arc::ptr_eq(f, &self.fd));
        fds.spare.push(Arc::clone(&self.fd));
        drop(fds);
        SEEN.set((p.id, p.interrupts.load(Ordering::SeqCst)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_before_parking_is_not_lost() {
        let p = Parking::default();
        // The first park of a thread returns at once (it has seen no count yet).
        assert!(p.park().unwrap().is_none());
        let parked = p.park().unwrap().expect("nothing new: parks");
        assert_eq!(p.parked(), 1);
        drop(parked);
        assert_eq!(p.parked(), 0);
        // An interrupt while nobody is parked makes the next park return at once.
        p.interrupt();
        assert!(p.park().unwrap().is_none());
        assert!(p.park().unwrap().is_some());
    }

    #[test]
    fn an_interrupt_signals_every_parked_thread() {
        let p = Arc::new(Parking::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (p, tx) = (Arc::clone(&p), tx.clone());
                std::thread::spawn(move || {
                    let _ = p.park().unwrap(); // the first returns at once
                    let parked = p.park().unwrap().expect("parks");
                    tx.send(()).unwrap();
                    let mut fds = [rustix::event::PollFd::from_borrowed_fd(
                        parked.fd(),
                        rustix::event::PollFlags::IN,
                    )];
                    // Bounded: an interrupt that never comes fails the assertion below.
                    let timeout = rustix::event::Timespec {
                        tv_sec: 60,
                        tv_nsec: 0,
                    };
                    rustix::event::poll(&mut fds, Some(&timeout)).unwrap()
                })
            })
            .collect();
        rx.recv().unwrap();
        rx.recv().unwrap();
        p.interrupt();
        for t in threads {
            assert_eq!(
                t.join().unwrap(),
                1,
                "woken by the interrupt, not the timeout"
            );
        }
        assert_eq!(p.parked(), 0);
        // The eventfds are kept for reuse, reset.
        assert_eq!(p.fds.lock().spare.len(), 2);
    }
}
