//! Fibonacci, the worst case for spawn overhead: `fib(n-1)` and `fib(n-2)` spawned.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};

/// The largest argument: fib(93) is the largest Fibonacci number a `u64` holds
/// (fib(94) overflows).
pub const MAX_N: u32 = 93;

/// The sequential doubly recursive Fibonacci.
pub fn fib_seq(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

/// `fib(n)`; calls with `n < threshold` run sequentially (threshold 0: all spawn).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Fib {
    /// The argument.
    pub n: u32,
    /// Below this `n`, recursion is sequential.
    pub threshold: u32,
}

#[satin::job(name = "ibis_apps::fib::Fib")]
impl Job for Fib {
    type Output = u64;
    // The base case is tested here, in a function small enough to inline where the
    // job is spawned, and the recursive case lives in `split`: otherwise the compiler
    // saves six registers in every call, leaves included (half the calls).
    #[inline]
    fn run(self, ctx: &mut Ctx) -> u64 {
        if self.n < 2 {
            return self.n as u64;
        }
        self.split(ctx)
    }
}

impl Fib {
    /// `fib(n)` for `n >= 2`: two spawns and a sync.
    #[inline(never)]
    fn split(self, ctx: &mut Ctx) -> u64 {
        let n = self.n;
        if n < self.threshold {
            return fib_seq(n);
        }
        let mut f = ctx.frame();
        let a = f.spawn(Fib { n: n - 1, ..self });
        let b = f.spawn(Fib { n: n - 2, ..self });
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}
