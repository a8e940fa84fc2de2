//! The in-flight gate: host callbacks enter it, `shutdown` closes it and waits until the
//! last one has left, so that no callback runs after `destroy` returns.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::lock;

pub(crate) struct Gate {
    open: AtomicBool,
    in_flight: AtomicU64,
    drained: (Mutex<()>, Condvar),
}

/// Proof that a host callback may run now; `close` waits for it to be dropped.
pub(crate) struct Entered<'a>(&'a Gate);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _g = lock(&self.0.drained.0);
            self.0.drained.1.notify_all();
        }
    }
}

impl Gate {
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
        let mut g = lock(&self.drained.0);
        while self.in_flight.load(Ordering::SeqCst) != 0 {
            g = self
                .drained
                .1
                .wait_timeout(g, Duration::from_millis(10))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}
