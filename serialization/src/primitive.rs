//! The [`Primitive`] trait: numeric types that can be sent as arrays at the
//! data level.

use std::fmt::Debug;

mod sealed {
    pub trait Sealed {}
}

/// A numeric primitive that can be written as an array at the data level.
///
/// Sealed; implemented for `u8, i8, u16, i16, u32, i32, u64, i64, f32, f64`.
/// All of them are [`bytemuck::Pod`], so slices of them can be viewed as bytes
/// (and aligned bytes as slices of them) without `unsafe`.
pub trait Primitive: bytemuck::Pod + Debug + Send + Sync + sealed::Sealed + 'static {
    /// Converts a native-endian value to its little-endian representation
    /// (identity on little-endian hosts).
    fn to_le_repr(self) -> Self;
    /// Converts a little-endian representation to a native value (identity on
    /// little-endian hosts).
    fn from_le_repr(le: Self) -> Self;
}

macro_rules! int_primitive {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Primitive for $t {
            #[inline]
            fn to_le_repr(self) -> Self { <$t>::to_le(self) }
            #[inline]
            fn from_le_repr(le: Self) -> Self { <$t>::from_le(le) }
        }
    )*};
}
int_primitive!(u8, i8, u16, i16, u32, i32, u64, i64);

macro_rules! float_primitive {
    ($($t:ty => $bits:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Primitive for $t {
            #[inline]
            fn to_le_repr(self) -> Self { <$t>::from_bits(<$bits>::to_le(self.to_bits())) }
            #[inline]
            fn from_le_repr(le: Self) -> Self { <$t>::from_bits(<$bits>::from_le(le.to_bits())) }
        }
    )*};
}
float_primitive!(f32 => u32, f64 => u64);
