//! Prime factorization by divide and conquer: every number in `[lo, hi]` is tested
//! (not a heuristic), the interval is halved recursively down to [`LEAF`] numbers.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};

/// Intervals of at most this many numbers are searched sequentially.
pub const LEAF: u64 = 1 << 16;

fn is_prime(d: u64) -> bool {
    if d < 2 {
        return false;
    }
    let mut i = 2;
    while i * i <= d {
        if d.is_multiple_of(i) {
            return false;
        }
        i += 1;
    }
    true
}

fn leaf(n: u64, lo: u64, hi: u64, out: &mut Vec<u64>) {
    for d in lo..=hi {
        if n.is_multiple_of(d) && is_prime(d) {
            let mut m = n;
            while m.is_multiple_of(d) {
                out.push(d);
                m /= d;
            }
        }
    }
}

fn seq(n: u64, lo: u64, hi: u64, out: &mut Vec<u64>) {
    if hi - lo < LEAF {
        leaf(n, lo, hi, out);
    } else {
        let mid = lo + (hi - lo) / 2;
        seq(n, lo, mid, out);
        seq(n, mid + 1, hi, out);
    }
}

/// The prime factors of `n` with multiplicity, ascending, testing all of `[2, n]`.
pub fn primes_seq(n: u64) -> Vec<u64> {
    let mut v = Vec::new();
    if n >= 2 {
        seq(n, 2, n, &mut v);
    }
    v
}

/// The prime factors of `n` in `[lo, hi]`, with multiplicity, ascending.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Primes {
    /// The number to factor.
    pub n: u64,
    /// Interval start.
    pub lo: u64,
    /// Interval end (inclusive).
    pub hi: u64,
}

impl Primes {
    /// The whole search for `n`.
    pub fn new(n: u64) -> Self {
        Primes {
            n,
            lo: 2,
            hi: n.max(2),
        }
    }
}

#[satin::job(name = "ibis_apps::primes::Primes")]
impl Job for Primes {
    type Output = Vec<u64>;
    fn run(self, ctx: &mut Ctx) -> Vec<u64> {
        let Primes { n, lo, hi } = self;
        if n < 2 {
            return Vec::new();
        }
        if hi - lo < LEAF {
            let mut v = Vec::new();
            leaf(n, lo, hi, &mut v);
            return v;
        }
        let mid = lo + (hi - lo) / 2;
        let mut f = ctx.frame();
        let a = f.spawn(Primes { n, lo, hi: mid });
        let b = f.spawn(Primes { n, lo: mid + 1, hi });
        let r = f.sync();
        let mut v = r.get(a);
        v.extend(r.get(b));
        v
    }
}
