//! The sequential adaptive integration, breadth first: the recursion tree is evaluated
//! one level at a time, `f` at all the midpoints of a level in vector instructions and
//! without a branch on the data, and the sums are then formed bottom up.
//!
//! The nodes, their values and every sum are those of the plain recursion
//! (`integrate(mid, b) + integrate(a, mid)` at every node that splits): a node's value is
//! its right child's value plus its left child's, whichever order the nodes are visited
//! in, so the result is bit for bit the same. Only the order of the work changes: in the
//! recursion each decision waits for the sine it depends on and a mispredicted decision
//! throws the work after it away; here the sines of a level are independent of each other
//! and fill vectors as wide as the processor has.
//!
//! A level holds at most [`WIDTH`] nodes (the levels of a block stay in the second-level
//! cache); when the next level would be wider, the children of the nodes that split are
//! evaluated [`BATCH`] at a time by a deeper block.

use super::f_lanes;

/// The widest level of a block.
const WIDTH: usize = 4096;
/// Nodes in the first level of a deeper block.
const BATCH: usize = 32;
/// The lane count that array lengths are a multiple of (the widest [`Kernel`]).
const PAD: usize = 8;

/// One level of a block, one array per quantity (the lanes past `n` up to a multiple of
/// [`PAD`] hold stale values that nothing reads).
#[derive(Default)]
struct Level {
    /// Slots in the level: the right children of the previous level's nodes that split,
    /// from 0 up to `right`, and their left children, from `left` up to `n`, in the same
    /// order; the slots between are unused (they keep the vector stores of [`compact`]
    /// apart). A block's first level has its nodes from 0 and `right == left == n`.
    n: usize,
    /// Where the unused slots start.
    right: usize,
    /// Where the left children start.
    left: usize,
    a: Vec<f64>,
    b: Vec<f64>,
    fa: Vec<f64>,
    fb: Vec<f64>,
    mid: Vec<f64>,
    fm: Vec<f64>,
    total: Vec<f64>,
    /// The node's value, once known.
    value: Vec<f64>,
    /// 1 if the node splits (its difference is not below epsilon), else 0.
    split: Vec<u64>,
}

impl Level {
    /// Room for `n` nodes plus the two slots that [`compact`] writes past the last child.
    fn reserve(&mut self, n: usize) {
        let len = (n + 2).div_ceil(PAD) * PAD;
        if self.a.len() < len {
            for v in [
                &mut self.a,
                &mut self.b,
                &mut self.fa,
                &mut self.fb,
                &mut self.mid,
                &mut self.fm,
                &mut self.total,
                &mut self.value,
            ] {
                v.resize(len, 0.0);
            }
            self.split.resize(len, 0);
        }
    }

    fn push(&mut self, [a, b, fa, fb]: [f64; 4]) {
        let i = self.n;
        self.reserve(i + 1);
        self.a[i] = a;
        self.b[i] = b;
        self.fa[i] = fa;
        self.fb[i] = fb;
        self.n = i + 1;
        self.right = self.n;
        self.left = self.n;
    }
}

/// The scratch space of a block, and of the deeper blocks that it starts.
pub(super) struct Block {
    kernel: Kernel,
    levels: Vec<Level>,
    deeper: Option<Box<Block>>,
}

impl Default for Block {
    fn default() -> Self {
        Block {
            kernel: Kernel::detect(),
            levels: Vec::new(),
            deeper: None,
        }
    }
}

impl Block {
    /// The values of `nodes` (`[a, b, f(a), f(b)]`), each integrated to `eps`, in order.
    pub(super) fn values<const N: usize>(&mut self, nodes: [[f64; 4]; N], eps: f64) -> [f64; N] {
        let first = self.first();
        for node in nodes {
            first.push(node);
        }
        self.run(eps);
        let first = &self.levels[0];
        core::array::from_fn(|i| first.value[i])
    }

    /// The first level, emptied.
    fn first(&mut self) -> &mut Level {
        if self.levels.is_empty() {
            self.levels.push(Level::default());
        }
        let first = &mut self.levels[0];
        first.n = 0;
        first.right = 0;
        first.left = 0;
        first
    }

    /// Evaluates the nodes of the first level: their values are then in its `value`.
    fn run(&mut self, eps: f64) {
        let mut last = 0;
        let frontier = loop {
            let splits = self.kernel.evaluate(&mut self.levels[last], eps);
            if splits == 0 {
                break false;
            }
            if 2 * splits > WIDTH {
                break true;
            }
            if self.levels.len() == last + 1 {
                self.levels.push(Level::default());
            }
            let (upper, lower) = self.levels.split_at_mut(last + 1);
            self.kernel.compact(&upper[last], &mut lower[0], splits);
            last += 1;
        };
        let deepest = &mut self.levels[last];
        let n = deepest.n;
        deepest.value[..n].copy_from_slice(&deepest.total[..n]);
        if frontier {
            let deeper = self.deeper.get_or_insert_with(Box::default);
            deeper_values(deepest, deeper, eps);
        }
        // Bottom up: a node that splits is its right child plus its left child.
        for k in (0..last).rev() {
            let (upper, lower) = self.levels.split_at_mut(k + 1);
            self.kernel.sum_up(&mut upper[k], &lower[0]);
        }
    }
}

/// The values of the nodes of `level` that split, by `deeper` blocks of [`BATCH`] children.
fn deeper_values(level: &mut Level, deeper: &mut Block, eps: f64) {
    let n = level.n;
    let mut i = 0;
    while i < n {
        // The next batch: the children of the nodes from i up to `end`.
        let first = deeper.first();
        let start = i;
        while i < n && first.n + 2 <= BATCH {
            if level.split[i] != 0 {
                let (a, b, fa, fb) = (level.a[i], level.b[i], level.fa[i], level.fb[i]);
                let (mid, fm) = (level.mid[i], level.fm[i]);
                first.push([mid, b, fm, fb]);
                first.push([a, mid, fa, fm]);
            }
            i += 1;
        }
        if first.n == 0 {
            break;
        }
        deeper.run(eps);
        let values = &deeper.levels[0].value;
        let mut c = 0;
        for j in start..i {
            if level.split[j] != 0 {
                level.value[j] = values[c] + values[c + 1];
                c += 2;
            }
        }
    }
}

/// The vector width used for [`evaluate`], chosen once from the processor's features.
#[derive(Clone, Copy)]
enum Kernel {
    /// Whatever the compilation target has (SSE2 on x86_64).
    Portable,
    /// 8 lanes in AVX-512 registers.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// 4 lanes in AVX2 registers.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return Kernel::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }

    /// [`evaluate`] with this kernel's lanes; returns how many nodes split.
    fn evaluate(self, level: &mut Level, eps: f64) -> usize {
        match self {
            Kernel::Portable => evaluate::<4>(level, eps),
            // SAFETY: `detect` chose this kernel only on a processor with AVX-512F.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { evaluate_avx512(level, eps) },
            // SAFETY: `detect` chose this kernel only on a processor with AVX2.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { evaluate_avx2(level, eps) },
        }
    }
}

impl Kernel {
    /// [`compact`], in vector instructions where the processor has them.
    fn compact(self, cur: &Level, next: &mut Level, splits: usize) {
        next.right = splits;
        next.left = splits.div_ceil(PAD) * PAD + PAD;
        next.reserve(next.left + splits + PAD);
        match self {
            // SAFETY: `detect` chose this kernel only on a processor with AVX-512F.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { avx512::compact(cur, next) },
            _ => compact(cur, next),
        }
        next.n = next.left + splits;
    }

    /// [`sum_up`], in vector instructions where the processor has them.
    fn sum_up(self, cur: &mut Level, next: &Level) {
        match self {
            // SAFETY: `detect` chose this kernel only on a processor with AVX-512F.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { avx512::sum_up(cur, next) },
            _ => sum_up(cur, next),
        }
    }
}

/// [`evaluate`] 8 lanes at a time in AVX-512 registers.
///
/// # Safety
///
/// The processor must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn evaluate_avx512(level: &mut Level, eps: f64) -> usize {
    evaluate::<8>(level, eps)
}

/// [`evaluate`] 4 lanes at a time in AVX2 registers.
///
/// # Safety
///
/// The processor must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn evaluate_avx2(level: &mut Level, eps: f64) -> usize {
    evaluate::<4>(level, eps)
}

/// `f` at the midpoints of a level, the totals and whether each node splits, `W` nodes at
/// a time; returns how many nodes split.
#[inline(always)]
fn evaluate<const W: usize>(level: &mut Level, eps: f64) -> usize {
    let len = level.n.div_ceil(W) * W;
    let a = level.a[..len].chunks_exact(W);
    let b = level.b[..len].chunks_exact(W);
    let fa = level.fa[..len].chunks_exact(W);
    let fb = level.fb[..len].chunks_exact(W);
    let mid = level.mid[..len].chunks_exact_mut(W);
    let fm = level.fm[..len].chunks_exact_mut(W);
    let total = level.total[..len].chunks_exact_mut(W);
    let split = level.split[..len].chunks_exact_mut(W);
    for (((((((a, b), fa), fb), mid), fm), total), split) in a
        .zip(b)
        .zip(fa)
        .zip(fb)
        .zip(mid)
        .zip(fm)
        .zip(total)
        .zip(split)
    {
        let mut delta = [0.0; W];
        let mut m = [0.0; W];
        for i in 0..W {
            delta[i] = (b[i] - a[i]) / 2.0;
            m[i] = a[i] + delta[i];
        }
        let f = f_lanes(m);
        let mut t = [0.0; W];
        let mut sp = [0; W];
        for i in 0..W {
            t[i] = delta[i] * (fa[i] + fb[i]);
            let left = delta[i] / 2.0 * (fa[i] + f[i]);
            let right = delta[i] / 2.0 * (fb[i] + f[i]);
            let diff = (t[i] - (left + right)).abs();
            // 1 unless the difference is below epsilon (also when it is NaN).
            sp[i] = u64::from(diff < eps) ^ 1;
        }
        mid.copy_from_slice(&m);
        fm.copy_from_slice(&f);
        total.copy_from_slice(&t);
        split.copy_from_slice(&sp);
    }
    // The unused slots and the lanes past `n` hold stale values: they do not split.
    level.split[level.right..level.left].fill(0);
    level.split[level.n..len].fill(0);
    level.split[..len].iter().sum::<u64>() as usize
}

/// Writes the children of the nodes of `cur` that split into `next`: the right children
/// from 0 and the left children from `next.left`, in the order of their parents (`next` has
/// room for both and for [`PAD`] slots more).
fn compact(cur: &Level, next: &mut Level) {
    let n = cur.n;
    let (a, b, fa, fb) = (&cur.a[..n], &cur.b[..n], &cur.fa[..n], &cur.fb[..n]);
    let (mid, fm, split) = (&cur.mid[..n], &cur.fm[..n], &cur.split[..n]);
    let (right, left) = next.a.split_at_mut(next.left);
    let (ra, la) = (right, left);
    let (rb, lb) = next.b.split_at_mut(next.left);
    let (rfa, lfa) = next.fa.split_at_mut(next.left);
    let (rfb, lfb) = next.fb.split_at_mut(next.left);
    let mut c = 0;
    for i in 0..n {
        // Written whether or not the node splits, and kept only if it does.
        ra[c] = mid[i];
        rb[c] = b[i];
        rfa[c] = fm[i];
        rfb[c] = fb[i];
        la[c] = a[i];
        lb[c] = mid[i];
        lfa[c] = fa[i];
        lfb[c] = fm[i];
        c += split[i] as usize;
    }
}

/// The values of the nodes of `cur` from those of their children in `next`.
fn sum_up(cur: &mut Level, next: &Level) {
    let n = cur.n;
    let (right, left) = next.value.split_at(next.left);
    let mut c = 0;
    for ((value, &total), &split) in cur.value[..n]
        .iter_mut()
        .zip(&cur.total[..n])
        .zip(&cur.split[..n])
    {
        let sum = right[c] + left[c];
        // Chosen by a mask, not a branch (the choice is not predictable).
        let keep = split.wrapping_neg();
        *value = f64::from_bits((sum.to_bits() & keep) | (total.to_bits() & !keep));
        c += split as usize;
    }
}

/// [`compact`] and [`sum_up`] with the AVX-512 instructions that move the lanes selected
/// by a mask together (compress) and apart again (expand).
///
/// The AVX-512 intrinsics are stable since Rust 1.89 (and `#[target_feature]` on safe
/// functions since 1.86): this module is why the workspace's `rust-version` is 1.89.
/// Without it (the portable [`compact`] and [`sum_up`]) the benchmark takes about 40 %
/// longer.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Level, PAD};
    use core::arch::x86_64::{
        __m512d, __mmask8, _mm512_add_pd, _mm512_loadu_epi64, _mm512_loadu_pd,
        _mm512_mask_blend_pd, _mm512_maskz_compress_pd, _mm512_maskz_expand_pd, _mm512_storeu_pd,
        _mm512_test_epi64_mask,
    };

    /// The 8 lanes from `x[i..]`.
    #[target_feature(enable = "avx512f")]
    fn load(x: &[f64], i: usize) -> __m512d {
        let x = &x[i..i + PAD];
        // SAFETY: `x` has 8 elements (the slicing checked it).
        unsafe { _mm512_loadu_pd(x.as_ptr()) }
    }

    /// Stores 8 lanes to `x[i..]`.
    #[target_feature(enable = "avx512f")]
    fn store(x: &mut [f64], i: usize, v: __m512d) {
        let x = &mut x[i..i + PAD];
        // SAFETY: `x` has 8 elements (the slicing checked it), borrowed mutably.
        unsafe { _mm512_storeu_pd(x.as_mut_ptr(), v) }
    }

    /// The mask of the nodes that split among `split[i..i + 8]`.
    #[target_feature(enable = "avx512f")]
    fn splits(split: &[u64], i: usize) -> __mmask8 {
        let x = &split[i..i + PAD];
        // SAFETY: `x` has 8 elements (the slicing checked it); u64 and i64 have the same
        // size and alignment.
        let v = unsafe { _mm512_loadu_epi64(x.as_ptr().cast::<i64>()) };
        _mm512_test_epi64_mask(v, v)
    }

    /// [`super::compact`], 8 nodes at a time: the lanes of the nodes that split are
    /// compressed together and stored whole (the lanes past them are overwritten by the
    /// next group, or unused).
    #[target_feature(enable = "avx512f")]
    pub(super) fn compact(cur: &Level, next: &mut Level) {
        let len = cur.n.div_ceil(PAD) * PAD;
        let l = next.left;
        let mut c = 0;
        for i in (0..len).step_by(PAD) {
            let k = splits(&cur.split, i);
            let mid = _mm512_maskz_compress_pd(k, load(&cur.mid, i));
            let fm = _mm512_maskz_compress_pd(k, load(&cur.fm, i));
            store(&mut next.a, c, mid);
            store(&mut next.b, c, _mm512_maskz_compress_pd(k, load(&cur.b, i)));
            store(&mut next.fa, c, fm);
            store(
                &mut next.fb,
                c,
                _mm512_maskz_compress_pd(k, load(&cur.fb, i)),
            );
            store(
                &mut next.a,
                l + c,
                _mm512_maskz_compress_pd(k, load(&cur.a, i)),
            );
            store(&mut next.b, l + c, mid);
            store(
                &mut next.fa,
                l + c,
                _mm512_maskz_compress_pd(k, load(&cur.fa, i)),
            );
            store(&mut next.fb, l + c, fm);
            c += k.count_ones() as usize;
        }
    }

    /// [`super::sum_up`], 8 nodes at a time: the children's values are expanded to the
    /// lanes of the nodes that split.
    #[target_feature(enable = "avx512f")]
    pub(super) fn sum_up(cur: &mut Level, next: &Level) {
        let len = cur.n.div_ceil(PAD) * PAD;
        let l = next.left;
        let mut c = 0;
        for i in (0..len).step_by(PAD) {
            let k = splits(&cur.split, i);
            let right = _mm512_maskz_expand_pd(k, load(&next.value, c));
            let left = _mm512_maskz_expand_pd(k, load(&next.value, l + c));
            let sum = _mm512_add_pd(right, left);
            store(
                &mut cur.value,
                i,
                _mm512_mask_blend_pd(k, load(&cur.total, i), sum),
            );
            c += k.count_ones() as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::f;
    use super::*;

    /// The plain recursion of the specification.
    fn recursion(a: f64, b: f64, fa: f64, fb: f64, eps: f64) -> f64 {
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
        recursion(mid, b, fm, fb, eps) + recursion(a, mid, fa, fm, eps)
    }

    /// The kernels this processor can run.
    fn kernels() -> Vec<Kernel> {
        let mut kernels = vec![Kernel::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                kernels.push(Kernel::Avx512);
            }
            if std::is_x86_feature_detected!("avx2") {
                kernels.push(Kernel::Avx2);
            }
        }
        kernels
    }

    #[test]
    fn every_kernel_gives_the_bits_of_the_recursion() {
        // The last case is wide enough for levels past WIDTH (deeper blocks).
        for (a, b, eps) in [
            (0.0, 100.0, 1e-3),
            (-7.5, 333.25, 1e-4),
            (5.0, 5.0, 1e-6),
            (0.0, 2000.0, 1e-4),
        ] {
            let want = recursion(a, b, f(a), f(b), eps);
            let wide = b == 2000.0;
            for kernel in kernels() {
                let mut block = Block {
                    kernel,
                    levels: Vec::new(),
                    deeper: None,
                };
                // Twice: the second run reuses the scratch space of the first.
                for _ in 0..2 {
                    let [got] = block.values([[a, b, f(a), f(b)]], eps);
                    assert_eq!(got.to_bits(), want.to_bits(), "[{a}, {b}] {eps}");
                }
                if wide {
                    assert!(block.deeper.is_some(), "no level wider than {WIDTH}");
                }
                let [r, l] =
                    block.values([[a, b, f(a), f(b)], [b, b + 1.0, f(b), f(b + 1.0)]], eps);
                assert_eq!(r.to_bits(), want.to_bits());
                let want_l = recursion(b, b + 1.0, f(b), f(b + 1.0), eps);
                assert_eq!(l.to_bits(), want_l.to_bits());
            }
        }
    }
}
