//! The in-flight gate: host callbacks enter it, `shutdown` closes it and waits until the
//! last one has left, so that no callback runs after `destroy` returns.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use std::time::Duration;

/// Guards host callbacks of one transport instance. Every callback runs inside
/// [`enter`](Gate::enter); [`close`](Gate::close) (called from `shutdown`) refuses new
/// entries and waits for the running ones, which is what the ABI's "no callback after
/// `destroy` returns" needs.
#[derive(Debug)]
pub struct Gate {
    open: AtomicBool,
    in_flight: AtomicU64,
    drained: (Mutex<()>, Condvar),
}

/// Proof that a host callback may run now; `close` waits for it to be dropped.
#[derive(Debug)]
pub struct Entered<'a>(&'a Gate);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        // Only `close` waits, and only after it shut the gate: an open gate needs no
        // notification (a condition variable's notify is a system call even with no
        // waiter, once per message otherwise). If `close` shuts the gate after the load
        // below saw it open, its own load of `in_flight` (later in the SeqCst order)
        // sees this exit.
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1
            && !self.0.open.load(Ordering::SeqCst)
        {
            let _g = self.0.drained.0.lock();
            self.0.drained.1.notify_all();
        }
    }
}

impl Gate {
    /// An open gate.
    pub fn new() -> Self {
        Gate {
            open: AtomicBool::new(true),
            in_flight: AtomicU64::new(0),
            drained: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Enters for one host callback, unless the gate is closed.
    pub fn enter(&self) -> Option<Entered<'_>> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let e = Entered(self);
        self.open.load(Ordering::SeqCst).then_some(e)
    }

    /// Closes the gate and waits until no callback is running.
    pub fn close(&self) {
        self.open.store(false, Ordering::SeqCst);
        let mut g = self.drained.0.lock();
        while self.in_flight.load(Ordering::SeqCst) != 0 {
            self.drained.1.wait_for(&mut g, Duration::from_millis(10));
        }
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}
