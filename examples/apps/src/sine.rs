//! A sine for the integrand of [`integrate`](super::integrate): argument reduction by
//! `pi/2` in three parts (Cody and Waite) and the classic minimax polynomials of the sine
//! and cosine on `[-pi/4, pi/4]`, without a call into libm and without a branch on the
//! quadrant.
//!
//! Accurate to about one unit in the last place for `|x| < 2^19 * pi/2` (about 8e5), which
//! covers the integration benchmark's `[0, 100000]`; outside that range it falls back to
//! the standard library. The tests compare it with libm.

// The constants are written with all the digits of their published decimal forms.
#![allow(clippy::excessive_precision)]

// pi/2 = P1 + P2 + P3. P1 and P2 carry 33 significant bits each, so that k*P1 and k*P2
// are exact for |k| < 2^20.
const P1: f64 = 1.570_796_326_734_125_614_17e0;
const P2: f64 = 6.077_100_506_303_965_976_60e-11;
const P3: f64 = 2.022_266_248_795_950_631_54e-21;

/// Polynomial coefficients of sin(r) = r + r^3 * (S1 + r^2 S2 + ...), |r| <= pi/4.
const S: [f64; 6] = [
    -1.666_666_666_666_663_243_48e-1,
    8.333_333_333_322_489_461_24e-3,
    -1.984_126_982_985_794_931_34e-4,
    2.755_731_370_707_006_767_89e-6,
    -2.505_076_025_340_686_341_95e-8,
    1.589_690_995_211_550_102_21e-10,
];
/// Polynomial coefficients of cos(r) = 1 - r^2/2 + r^4 * (C1 + r^2 C2 + ...).
const C: [f64; 6] = [
    4.166_666_666_666_660_190_37e-2,
    -1.388_888_888_887_410_957_49e-3,
    2.480_158_728_947_672_941_78e-5,
    -2.755_731_435_139_066_330_35e-7,
    2.087_572_321_298_174_827_90e-9,
    -1.135_964_755_778_819_482_65e-11,
];

/// Largest |x| for which the three-part reduction is exact enough.
const LIMIT: f64 = 524_288.0 * core::f64::consts::FRAC_PI_2;

/// `sin(x)`, to about one ulp for `|x| < 8e5` (libm's beyond).
#[inline]
pub fn sin(x: f64) -> f64 {
    sin_lanes([x])[0]
}

/// [`sin`] of each lane, with the same operations in the same order (so bit for bit the
/// same values), written lane by lane so that the compiler turns it into vector
/// instructions: the two polynomials are both evaluated and the quadrant selects between
/// them with bit masks, without a branch.
#[inline(always)]
pub fn sin_lanes<const N: usize>(x: [f64; N]) -> [f64; N] {
    if !x.iter().all(|x| x.abs() < LIMIT) {
        // Rare: beyond the reduction's range (or NaN); lane by lane.
        return x.map(|x| {
            if x.abs() < LIMIT {
                in_range([x])[0]
            } else {
                x.sin()
            }
        });
    }
    in_range(x)
}

/// [`sin_lanes`] for lanes known to be below [`LIMIT`].
#[inline(always)]
fn in_range<const N: usize>(x: [f64; N]) -> [f64; N] {
    // 1.5 * 2^52: adding it rounds to the nearest integer, which then sits in the low
    // bits of the sum (no call to `round`, which is not an instruction before SSE4.1).
    const MAGIC: f64 = 6_755_399_441_055_744.0;
    let mut out = [0.0; N];
    for i in 0..N {
        let x = x[i];
        let kb = x * core::f64::consts::FRAC_2_PI + MAGIC;
        let k = kb - MAGIC;
        let r = ((x - k * P1) - k * P2) - k * P3;
        let z = r * r;
        let s = r + r * z * (S[0] + z * (S[1] + z * (S[2] + z * (S[3] + z * (S[4] + z * S[5])))));
        let c = 1.0 - 0.5 * z
            + z * z * (C[0] + z * (C[1] + z * (C[2] + z * (C[3] + z * (C[4] + z * C[5])))));
        // The quadrant q: sin, cos, -sin, -cos. Bit 0 of q selects the polynomial, bit 1
        // the sign.
        let q = kb.to_bits();
        let odd = (q & 1).wrapping_neg();
        let v = (s.to_bits() & !odd) | (c.to_bits() & odd);
        out[i] = f64::from_bits(v ^ ((q & 2) << 62));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units of the last place of the larger magnitude, floored at the ulp
    /// of 2^-30 so that values near a zero of the sine compare by absolute error.
    fn ulps(a: f64, b: f64) -> f64 {
        let scale = b.abs().max(a.abs()).max(2f64.powi(-30));
        (a - b).abs() / (scale * f64::EPSILON)
    }

    #[test]
    fn agrees_with_libm_over_the_benchmark_range() {
        let n = 200_000;
        let mut worst = 0f64;
        for i in 0..n {
            let x = i as f64 * (100_000.0 / n as f64) + 0.000_123_4;
            worst = worst.max(ulps(sin(x), x.sin()));
            worst = worst.max(ulps(sin(-x), (-x).sin()));
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        // Absolute error near zeros of the sine stays at the ulp of 1.
        for k in 1..2000 {
            let x = k as f64 * core::f64::consts::PI;
            assert!((sin(x) - x.sin()).abs() <= 2.0 * f64::EPSILON, "x = {x}");
        }
    }

    #[test]
    fn lanes_agree_with_the_scalar_sine_also_beyond_the_limit() {
        let x = [1.0, 1e10, -2.5, f64::NAN, 123_456.75, -LIMIT, 0.0, 7.0];
        let got = sin_lanes(x);
        for (x, got) in x.into_iter().zip(got) {
            if x.is_nan() {
                assert!(got.is_nan());
            } else if x.abs() >= LIMIT {
                assert_eq!(got.to_bits(), x.sin().to_bits(), "x = {x}");
            } else {
                assert_eq!(got.to_bits(), sin(x).to_bits(), "x = {x}");
                assert!(ulps(got, x.sin()) <= 2.0, "x = {x}");
            }
        }
    }

    #[test]
    fn small_and_special_arguments() {
        for x in [0.0, -0.0, 1e-300, 1e-8, 0.5, 1.0, 3.0] {
            assert!(ulps(sin(x), x.sin()) <= 1.0, "x = {x}");
        }
        assert!(sin(f64::NAN).is_nan());
        assert!(sin(f64::INFINITY).is_nan());
        assert_eq!(sin(1e10), 1e10f64.sin(), "beyond the limit: libm");
    }
}
