//! Helpers shared by the Satin integration tests.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `f` on a thread and fails the test if it takes longer than a minute.
pub fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("test timed out (hang?)")
}

/// How long a test waits for another thread before it gives up (and fails).
#[allow(dead_code)] // not every test binary waits for another thread
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits until `cond` holds or [`PATIENCE`] ran out; returns whether it holds.
#[allow(dead_code)] // not every test binary waits for another thread
pub fn wait_until(cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Fibonacci with every call spawning; remote-capable.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fib(pub u32);

#[satin::job]
impl Job for Fib {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        if self.0 < 2 {
            return self.0 as u64;
        }
        let mut f = ctx.frame();
        let a = f.spawn(Fib(self.0 - 1));
        let b = f.spawn(Fib(self.0 - 2));
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}
