//! Adaptive integration of `f(x) = 0.1 * x * sin(x)` with trapezoids.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};

/// The largest bound magnitude: the integrand grows with `x`, and over wider intervals
/// the bisection needs more levels and intervals than a run can hold (over [0, 1e9]
/// to 1e-12 the memory grew by 45 MB/s; over [0, 1e6] it stays flat).
pub const MAX_BOUND: f64 = 1e6;
/// The smallest tolerance: below it the difference of the sums is under their rounding
/// error and the bisection would not end (with 0 or NaN it recurses until the stack
/// overflows).
pub const MIN_EPS: f64 = 1e-12;

/// The integrand (with [`sine::sin`](super::sine::sin), a libm-accurate sine without
/// the call).
#[inline]
pub fn f(x: f64) -> f64 {
    f_lanes([x])[0]
}

/// [`f`] of each lane, vectorized (the same operations, so the same bits).
#[inline(always)]
fn f_lanes<const N: usize>(x: [f64; N]) -> [f64; N] {
    let s = super::sine::sin_lanes(x);
    let mut out = [0.0; N];
    for i in 0..N {
        out[i] = 0.1 * x[i] * s[i];
    }
    out
}

// The vector kernels: processor-specific instructions, chosen at run time.
#[allow(unsafe_code)]
mod breadth;

use breadth::Block;
use std::cell::RefCell;

thread_local! {
    /// The scratch space of the breadth-first evaluation, kept between calls.
    static BLOCK: RefCell<Block> = RefCell::default();
}

/// The values of `nodes` (`[a, b, f(a), f(b)]`), each integrated to `eps`.
fn values<const N: usize>(nodes: [[f64; 4]; N], eps: f64) -> [f64; N] {
    BLOCK.with(|block| match block.try_borrow_mut() {
        Ok(mut block) => block.values(nodes, eps),
        Err(_) => Block::default().values(nodes, eps),
    })
}

/// The sequential adaptive integration; `fa`, `fb` are `f(a)`, `f(b)`.
pub fn integrate_seq(a: f64, b: f64, fa: f64, fb: f64, eps: f64) -> f64 {
    values([[a, b, fa, fb]], eps)[0]
}

/// `integrate_seq(mid, b) + integrate_seq(a, mid)` for `[a, b]`, a node that splits, with
/// `fm = f(mid)`.
fn split(a: f64, b: f64, fa: f64, fb: f64, fm: f64, eps: f64) -> f64 {
    let mid = a + (b - a) / 2.0;
    let [r, l] = values([[mid, b, fm, fb], [a, mid, fa, fm]], eps);
    r + l
}

/// The integral of `f` over `[a, b]` to tolerance `eps`: spawns both halves while the
/// difference exceeds 1000, recurses sequentially below.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Integrate {
    /// Left end.
    pub a: f64,
    /// Right end.
    pub b: f64,
    /// `f(a)`.
    pub fa: f64,
    /// `f(b)`.
    pub fb: f64,
    /// Tolerance.
    pub eps: f64,
}

impl Integrate {
    /// The job for `[a, b]`.
    pub fn new(a: f64, b: f64, eps: f64) -> Self {
        Integrate {
            a,
            b,
            fa: f(a),
            fb: f(b),
            eps,
        }
    }
}

/// The sequential integral over `[a, b]`.
pub fn integrate(a: f64, b: f64, eps: f64) -> f64 {
    integrate_seq(a, b, f(a), f(b), eps)
}

#[satin::job(name = "ibis_apps::integrate::Integrate")]
impl Job for Integrate {
    type Output = f64;
    fn run(self, ctx: &mut Ctx) -> f64 {
        let Integrate { a, b, fa, fb, eps } = self;
        let delta = (b - a) / 2.0;
        let mid = a + delta;
        let fm = f(mid);
        let total = delta * (fa + fb);
        let left = delta / 2.0 * (fa + fm);
        let right = delta / 2.0 * (fb + fm);
        let diff = (total - (left + right)).abs();
        if diff < eps {
            return total;
        }
        if diff > 1000.0 {
            let mut fr = ctx.frame();
            let r = fr.spawn(Integrate {
                a: mid,
                b,
                fa: fm,
                fb,
                eps,
            });
            let l = fr.spawn(Integrate {
                a,
                b: mid,
                fa,
                fb: fm,
                eps,
            });
            let s = fr.sync();
            s.get(r) + s.get(l)
        } else {
            split(a, b, fa, fb, fm, eps)
        }
    }
}
