//! Three-dimensional vectors of `f64` for the raytracer: points, directions and
//! colours. Every operation is plain IEEE arithmetic in a fixed order, so a pixel's
//! value is the same bits on every worker and every process.

use std::ops::{Add, Mul, Neg, Sub};

/// A vector (or a point, or an RGB colour).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct V3 {
    /// The first coordinate (red).
    pub x: f64,
    /// The second coordinate (green).
    pub y: f64,
    /// The third coordinate (blue).
    pub z: f64,
}

impl V3 {
    /// The zero vector.
    pub const ZERO: V3 = V3::new(0.0, 0.0, 0.0);

    /// The vector `(x, y, z)`.
    pub const fn new(x: f64, y: f64, z: f64) -> V3 {
        V3 { x, y, z }
    }

    /// The dot product.
    pub fn dot(self, o: V3) -> f64 {
        self.x * o.x + self.y * o.y + self.z * o.z
    }

    /// The cross product.
    pub fn cross(self, o: V3) -> V3 {
        V3::new(
            self.y * o.z - self.z * o.y,
            self.z * o.x - self.x * o.z,
            self.x * o.y - self.y * o.x,
        )
    }

    /// The length.
    pub fn length(self) -> f64 {
        self.dot(self).sqrt()
    }

    /// The vector scaled to length 1 (the zero vector stays zero).
    pub fn normalized(self) -> V3 {
        let l = self.length();
        if l > 0.0 {
            self * (1.0 / l)
        } else {
            self
        }
    }

    /// The product by components (colour times colour).
    pub fn times(self, o: V3) -> V3 {
        V3::new(self.x * o.x, self.y * o.y, self.z * o.z)
    }

    /// The direction `self` mirrored about the unit normal `n`.
    pub fn reflect(self, n: V3) -> V3 {
        self - n * (2.0 * self.dot(n))
    }
}

impl Add for V3 {
    type Output = V3;
    fn add(self, o: V3) -> V3 {
        V3::new(self.x + o.x, self.y + o.y, self.z + o.z)
    }
}

impl Sub for V3 {
    type Output = V3;
    fn sub(self, o: V3) -> V3 {
        V3::new(self.x - o.x, self.y - o.y, self.z - o.z)
    }
}

impl Mul<f64> for V3 {
    type Output = V3;
    fn mul(self, k: f64) -> V3 {
        V3::new(self.x * k, self.y * k, self.z * k)
    }
}

impl Neg for V3 {
    type Output = V3;
    fn neg(self) -> V3 {
        V3::new(-self.x, -self.y, -self.z)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_and_lengths() {
        let (a, b) = (V3::new(1.0, 2.0, 3.0), V3::new(-2.0, 0.5, 4.0));
        assert_eq!(a.dot(b), -2.0 + 1.0 + 12.0);
        let c = a.cross(b);
        assert_eq!(c.dot(a), 0.0);
        assert_eq!(c.dot(b), 0.0);
        assert_eq!(V3::new(3.0, 4.0, 0.0).length(), 5.0);
        assert!((a.normalized().length() - 1.0).abs() < 1e-15);
        assert_eq!(V3::ZERO.normalized(), V3::ZERO);
        let n = V3::new(0.0, 0.0, 1.0);
        assert_eq!(V3::new(1.0, 2.0, -3.0).reflect(n), V3::new(1.0, 2.0, 3.0));
    }
}
