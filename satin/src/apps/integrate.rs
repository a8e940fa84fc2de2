//! Adaptive integration of `f(x) = 0.1 * x * sin(x)` with trapezoids.

use crate::{Ctx, Job};
use serde::{Deserialize, Serialize};

/// The integrand (with [`sine::sin`](super::sine::sin), a libm-accurate sine without
/// the call).
#[inline]
pub fn f(x: f64) -> f64 {
    0.1 * x * super::sine::sin(x)
}

/// The sequential adaptive integration; `fa`, `fb` are `f(a)`, `f(b)`.
pub fn integrate_seq(a: f64, b: f64, fa: f64, fb: f64, eps: f64) -> f64 {
    let mid = a + (b - a) / 2.0;
    integrate_seq_mid(a, b, fa, fb, f(mid), eps)
}

/// [`integrate_seq`] with `f` at the midpoint already known. A node that does not stop
/// evaluates `f` at both children's midpoints together, before descending: both children
/// are visited anyway, and the two independent evaluations overlap in the CPU. The
/// intervals, values and order of the sums are those of the plain recursion.
fn integrate_seq_mid(a: f64, b: f64, fa: f64, fb: f64, fm: f64, eps: f64) -> f64 {
    let delta = (b - a) / 2.0;
    let mid = a + delta;
    let total = delta * (fa + fb);
    let left = delta / 2.0 * (fa + fm);
    let right = delta / 2.0 * (fb + fm);
    let diff = (total - (left + right)).abs();
    if diff < eps {
        return total;
    }
    let (fr, fl) = (f(mid + (b - mid) / 2.0), f(a + (mid - a) / 2.0));
    integrate_seq_mid(mid, b, fm, fb, fr, eps) + integrate_seq_mid(a, mid, fa, fm, fl, eps)
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

#[crate::job(name = "satin::apps::integrate::Integrate")]
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
            integrate_seq(mid, b, fm, fb, eps) + integrate_seq(a, mid, fa, fm, eps)
        }
    }
}
