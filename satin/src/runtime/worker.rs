//! A worker thread's loop: steal and run work, spin, yield, park, and sleep while no
//! root job is active.

use crate::kernel::Ctx;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The body of a worker thread, until the instance shuts down.
pub(super) fn worker_main(mut ctx: Ctx) {
    let shared = ctx.shared.clone();
    let mut idle = 0u32;
    loop {
        if ctx.steal_and_run() {
            idle = 0;
            continue;
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        idle += 1;
        if shared.active.load(Ordering::SeqCst) == 0 {
            ctx.flush_stats();
            ctx.forget_lookup();
            let mut g = shared.sleep.lock();
            while shared.active.load(Ordering::SeqCst) == 0
                && !shared.shutdown.load(Ordering::SeqCst)
            {
                shared.wake.wait(&mut g);
            }
            idle = 0;
        } else if idle < 32 {
            std::hint::spin_loop();
        } else if idle < 64 {
            std::thread::yield_now();
        } else {
            ctx.flush_stats();
            std::thread::park_timeout(Duration::from_micros(100));
        }
    }
    ctx.flush_stats();
}
