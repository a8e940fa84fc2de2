//! Matrix multiplication by quadrant recursion: `C_ij = A_i0 B_0j + A_i1 B_1j`, the 8
//! half-size products spawned, leaves of [`LEAF`]×[`LEAF`] blocks multiplied
//! sequentially with a kernel that steps 2 rows and 2 columns at a time.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The leaf block size (the thesis used 48; a power of two here).
pub const LEAF: usize = 64;

/// The largest matrix size: three 4096 x 4096 matrices of `f64` take 384 MiB.
pub const MAX_N: usize = 4096;

/// A square row-major matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mat {
    /// Order.
    pub n: usize,
    /// `n * n` entries, row-major.
    pub d: Vec<f64>,
}

impl Mat {
    /// A deterministic pseudo-random matrix.
    pub fn random(n: usize, seed: u64) -> Mat {
        let mut x = seed | 1;
        let d = (0..n * n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 1000) as f64 / 500.0 - 1.0
            })
            .collect();
        Mat { n, d }
    }
}

/// One block product: `A[ar.., ac..] * B[br.., bc..]`, `size`×`size`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MatMul {
    /// Left operand.
    pub a: Arc<Mat>,
    /// Right operand.
    pub b: Arc<Mat>,
    /// Block origin in A (row, column) and B (row, column).
    pub at: [u32; 4],
    /// Block order.
    pub size: u32,
}

fn leaf(a: &Mat, b: &Mat, at: [usize; 4], s: usize) -> Vec<f64> {
    let (ar, ac, br, bc) = (at[0], at[1], at[2], at[3]);
    let (na, nb) = (a.n, b.n);
    let mut c = vec![0.0; s * s];
    let mut i = 0;
    while i < s {
        let mut j = 0;
        while j < s {
            let (mut c00, mut c01, mut c10, mut c11) = (0.0, 0.0, 0.0, 0.0);
            for k in 0..s {
                let a0 = a.d[(ar + i) * na + ac + k];
                let a1 = a.d[(ar + i + 1) * na + ac + k];
                let b0 = b.d[(br + k) * nb + bc + j];
                let b1 = b.d[(br + k) * nb + bc + j + 1];
                c00 += a0 * b0;
                c01 += a0 * b1;
                c10 += a1 * b0;
                c11 += a1 * b1;
            }
            c[i * s + j] = c00;
            c[i * s + j + 1] = c01;
            c[(i + 1) * s + j] = c10;
            c[(i + 1) * s + j + 1] = c11;
            j += 2;
        }
        i += 2;
    }
    c
}

/// `C = P0 + P1` for each quadrant, assembled into one `2h`×`2h` block.
fn assemble(p: [Vec<f64>; 8], h: usize) -> Vec<f64> {
    let s = 2 * h;
    let mut c = vec![0.0; s * s];
    for qi in 0..2 {
        for qj in 0..2 {
            let (x, y) = (&p[(qi * 2 + qj) * 2], &p[(qi * 2 + qj) * 2 + 1]);
            for i in 0..h {
                for j in 0..h {
                    c[(qi * h + i) * s + qj * h + j] = x[i * h + j] + y[i * h + j];
                }
            }
        }
    }
    c
}

/// The sub-block origins of the 8 products, in the order `assemble` expects.
fn parts(at: [usize; 4], h: usize) -> [[usize; 4]; 8] {
    let mut out = [[0; 4]; 8];
    let mut n = 0;
    for qi in 0..2 {
        for qj in 0..2 {
            for k in 0..2 {
                out[n] = [at[0] + qi * h, at[1] + k * h, at[2] + k * h, at[3] + qj * h];
                n += 1;
            }
        }
    }
    out
}

fn seq(a: &Mat, b: &Mat, at: [usize; 4], s: usize) -> Vec<f64> {
    if s <= LEAF {
        return leaf(a, b, at, s);
    }
    let h = s / 2;
    assemble(parts(at, h).map(|p| seq(a, b, p, h)), h)
}

/// `A * B` sequentially (the same recursion without spawns); `n` must be `LEAF * 2^k`.
pub fn matmul_seq(a: &Mat, b: &Mat) -> Mat {
    check(a, b);
    Mat {
        n: a.n,
        d: seq(a, b, [0; 4], a.n),
    }
}

fn check(a: &Mat, b: &Mat) {
    assert!(
        a.n == b.n && a.n >= LEAF && (a.n / LEAF).is_power_of_two() && a.n.is_multiple_of(LEAF)
    );
}

impl MatMul {
    /// The whole product `a * b`; `n` must be `LEAF * 2^k`.
    pub fn new(a: Arc<Mat>, b: Arc<Mat>) -> Self {
        check(&a, &b);
        let size = a.n as u32;
        MatMul {
            a,
            b,
            at: [0; 4],
            size,
        }
    }
}

#[satin::job(name = "ibis_apps::matmul::MatMul")]
impl Job for MatMul {
    type Output = Vec<f64>;
    fn run(self, ctx: &mut Ctx) -> Vec<f64> {
        let s = self.size as usize;
        let at = self.at.map(|x| x as usize);
        if s <= LEAF {
            return leaf(&self.a, &self.b, at, s);
        }
        let h = s / 2;
        let mut f = ctx.frame();
        let tickets = parts(at, h).map(|p| {
            f.spawn(MatMul {
                a: self.a.clone(),
                b: self.b.clone(),
                at: p.map(|x| x as u32),
                size: h as u32,
            })
        });
        let r = f.sync();
        assemble(tickets.map(|t| r.get(t)), h)
    }
}
