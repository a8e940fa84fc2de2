//! [`MessageReader`]: bounded decoding of a received contiguous payload.

use std::borrow::Cow;
use std::mem::{align_of, size_of};

use serde::de::DeserializeOwned;

use crate::error::DecodeError;
use crate::primitive::Primitive;

/// Where the elements of an array are in a message's buffer (see
/// [`MessageReader::read_array_span`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpan<T> {
    range: std::ops::Range<usize>,
    _elements: std::marker::PhantomData<fn() -> T>,
}

impl<T> ArraySpan<T> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.range.len() / size_of::<T>().max(1)
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// An array's elements in place when the bytes are aligned for `T` (and the host is
/// little endian), else decoded with one copy.
fn in_place<T: Primitive>(bytes: &[u8]) -> Cow<'_, [T]> {
    if cfg!(target_endian = "little") {
        if let Ok(s) = bytemuck::try_cast_slice::<u8, T>(bytes) {
            return Cow::Borrowed(s);
        }
    }
    Cow::Owned(
        bytes
            .chunks_exact(size_of::<T>())
            .map(|c| T::from_le_repr(bytemuck::pod_read_unaligned::<T>(c)))
            .collect(),
    )
}

/// Reads a payload written by [`MessageWriter`](crate::MessageWriter) from a
/// contiguous buffer, in the order it was written.
///
/// Every read is bounded by the bytes present: length prefixes are checked
/// against [`remaining`](Self::remaining) before anything is allocated, and
/// malformed input yields a [`DecodeError`], never a panic. A failed read
/// leaves the position unchanged.
///
/// Array alignment padding is computed relative to the payload start, i.e.
/// the position given to [`with_offset`](Self::with_offset) (0 for
/// [`new`](Self::new)). Arrays are read in place when their elements are
/// aligned in memory and the host is little endian.
#[derive(Debug, Clone)]
pub struct MessageReader<B: AsRef<[u8]>> {
    buf: B,
    pos: usize,
    /// Position of the payload start (alignment origin).
    base: usize,
}

macro_rules! read_scalar {
    ($($(#[$doc:meta])* $name:ident: $t:ty;)*) => {$(
        $(#[$doc])*
        #[inline]
        pub fn $name(&mut self) -> Result<$t, DecodeError> {
            Ok(<$t>::from_le_bytes(self.take_array()?))
        }
    )*};
}

impl<B: AsRef<[u8]>> MessageReader<B> {
    /// A reader whose payload starts at the beginning of `buf`.
    pub fn new(buf: B) -> Self {
        Self::with_offset(buf, 0)
    }

    /// A reader whose payload starts at byte `pos` of `buf` (e.g. after a
    /// transport header). Array alignment is relative to `pos`. A `pos`
    /// beyond the end of `buf` is clamped to the end (nothing remains).
    pub fn with_offset(buf: B, pos: usize) -> Self {
        let pos = pos.min(buf.as_ref().len());
        MessageReader {
            buf,
            pos,
            base: pos,
        }
    }

    /// Current position in the buffer (absolute, not relative to the payload start).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left to read.
    pub fn remaining(&self) -> usize {
        self.buf.as_ref().len().saturating_sub(self.pos)
    }

    /// Whether all bytes have been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The underlying buffer.
    pub fn get_ref(&self) -> &B {
        &self.buf
    }

    /// Gives back the underlying buffer.
    pub fn into_inner(self) -> B {
        self.buf
    }

    // ----- byte level -----

    /// Byte level: fills `out` with the next `out.len()` bytes.
    pub fn read_bytes(&mut self, out: &mut [u8]) -> Result<(), DecodeError> {
        out.copy_from_slice(self.take(out.len())?);
        Ok(())
    }

    /// Byte level: borrows the next `n` bytes from the buffer.
    pub fn read_bytes_ref(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        self.take(n)
    }

    /// Byte level: skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(|_| ())
    }

    // ----- data level -----

    read_scalar! {
        /// Data level: reads a `u8`.
        read_u8: u8;
        /// Data level: reads an `i8`.
        read_i8: i8;
        /// Data level: reads a little-endian `u16`.
        read_u16: u16;
        /// Data level: reads a little-endian `i16`.
        read_i16: i16;
        /// Data level: reads a little-endian `u32`.
        read_u32: u32;
        /// Data level: reads a little-endian `i32`.
        read_i32: i32;
        /// Data level: reads a little-endian `u64`.
        read_u64: u64;
        /// Data level: reads a little-endian `i64`.
        read_i64: i64;
        /// Data level: reads a little-endian `f32`.
        read_f32: f32;
        /// Data level: reads a little-endian `f64`.
        read_f64: f64;
    }

    /// Data level: reads a `bool`; bytes other than 0 and 1 are
    /// [`DecodeError::InvalidBool`].
    pub fn read_bool(&mut self) -> Result<bool, DecodeError> {
        let [b] = self.peek_array::<1>()?;
        let v = match b {
            0 => false,
            1 => true,
            _ => return Err(DecodeError::InvalidBool(b)),
        };
        self.pos += 1;
        Ok(v)
    }

    /// Data level: reads a `char` (u32 code); invalid codes are
    /// [`DecodeError::InvalidChar`].
    pub fn read_char(&mut self) -> Result<char, DecodeError> {
        let code = u32::from_le_bytes(self.peek_array()?);
        let c = char::from_u32(code).ok_or(DecodeError::InvalidChar(code))?;
        self.pos += 4;
        Ok(c)
    }

    /// Data level: reads an array, in place when possible.
    ///
    /// Returns [`Cow::Borrowed`] (no copy) when the host is little endian and
    /// the elements are aligned in memory for `T` (e.g. the buffer is
    /// 8-aligned and the payload offset is a multiple of 8); otherwise one
    /// copy ([`Cow::Owned`]).
    pub fn read_array_ref<T: Primitive>(&mut self) -> Result<Cow<'_, [T]>, DecodeError> {
        let range = self.array_span::<T>(None)?;
        Ok(in_place(&self.buf.as_ref()[range]))
    }

    /// Data level: consumes an array and returns where its elements are, to be read
    /// with [`array_at`](Self::array_at) once the message has been read further: so
    /// that several arrays can be borrowed from the buffer at once.
    pub fn read_array_span<T: Primitive>(&mut self) -> Result<ArraySpan<T>, DecodeError> {
        Ok(ArraySpan {
            range: self.array_span::<T>(None)?,
            _elements: std::marker::PhantomData,
        })
    }

    /// The elements of an array this reader consumed ([`read_array_span`](Self::read_array_span)),
    /// as [`read_array_ref`](Self::read_array_ref) gives them. A span of another, shorter
    /// message is [`DecodeError::Truncated`].
    pub fn array_at<T: Primitive>(&self, span: &ArraySpan<T>) -> Result<Cow<'_, [T]>, DecodeError> {
        let buf = self.buf.as_ref();
        buf.get(span.range.clone())
            .map(in_place)
            .ok_or(DecodeError::Truncated {
                needed: span.range.end,
                remaining: buf.len(),
            })
    }

    /// Data level: reads an array into `out` with exactly one copy. The
    /// element count on the wire must equal `out.len()`, else
    /// [`DecodeError::LengthMismatch`] (and `out` is untouched).
    pub fn read_array_into<T: Primitive>(&mut self, out: &mut [T]) -> Result<(), DecodeError> {
        let range = self.array_span::<T>(Some(out.len()))?;
        let bytes = &self.buf.as_ref()[range];
        bytemuck::cast_slice_mut::<T, u8>(out).copy_from_slice(bytes);
        if cfg!(target_endian = "big") {
            for x in out.iter_mut() {
                *x = T::from_le_repr(*x);
            }
        }
        Ok(())
    }

    /// Data level: reads an array into a new `Vec` (one copy).
    pub fn read_array_vec<T: Primitive>(&mut self) -> Result<Vec<T>, DecodeError> {
        Ok(self.read_array_ref::<T>()?.into_owned())
    }

    // ----- object level -----

    /// Object level: reads a `u64` LE byte length and decodes that many
    /// bytes with postcard. The length is checked against the remaining
    /// bytes; bytes left unused inside the length are
    /// [`DecodeError::TrailingBytes`].
    pub fn read_object<T: DeserializeOwned>(&mut self) -> Result<T, DecodeError> {
        let start = self.pos;
        let len = self.read_u64()?;
        let result = self.check_len(len).and_then(|n| {
            let bytes = &self.buf.as_ref()[self.pos..self.pos + n];
            let (v, rest) = postcard::take_from_bytes::<T>(bytes).map_err(DecodeError::Object)?;
            if rest.is_empty() {
                Ok((v, n))
            } else {
                Err(DecodeError::TrailingBytes { unused: rest.len() })
            }
        });
        match result {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(e) => {
                self.pos = start;
                Err(e)
            }
        }
    }

    // ----- internals -----

    /// Consumes the next `n` bytes.
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(DecodeError::Truncated {
                needed: n,
                remaining,
            });
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf.as_ref()[start..start + n])
    }

    /// Returns the next `N` bytes without consuming them.
    fn peek_array<const N: usize>(&self) -> Result<[u8; N], DecodeError> {
        let remaining = self.remaining();
        if N > remaining {
            return Err(DecodeError::Truncated {
                needed: N,
                remaining,
            });
        }
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf.as_ref()[self.pos..self.pos + N]);
        Ok(a)
    }

    /// Consumes the next `N` bytes as an array.
    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let a = self.peek_array::<N>()?;
        self.pos += N;
        Ok(a)
    }

    /// Checks that `len` bytes remain; returns it as `usize`.
    fn check_len(&self, len: u64) -> Result<usize, DecodeError> {
        let remaining = self.remaining();
        match usize::try_from(len) {
            Ok(n) if n <= remaining => Ok(n),
            _ => Err(DecodeError::LengthTooLarge {
                needed: len,
                remaining,
            }),
        }
    }

    /// Reads an array header (count + padding), checks the element bytes are
    /// present (and, if `expected` is given, the count), consumes the array
    /// and returns the byte range of its elements. Restores the position on
    /// error.
    fn array_span<T: Primitive>(
        &mut self,
        expected: Option<usize>,
    ) -> Result<std::ops::Range<usize>, DecodeError> {
        let start = self.pos;
        let r = self.array_span_inner::<T>(expected);
        if r.is_err() {
            self.pos = start;
        }
        r
    }

    fn array_span_inner<T: Primitive>(
        &mut self,
        expected: Option<usize>,
    ) -> Result<std::ops::Range<usize>, DecodeError> {
        let count = self.read_u64()?;
        if let Some(expected) = expected {
            if u64::try_from(expected).ok() != Some(count) {
                return Err(DecodeError::LengthMismatch {
                    expected,
                    found: count,
                });
            }
        }
        let align = align_of::<T>();
        let rel = self.pos - self.base;
        self.skip((align - rel % align) % align)?;
        let needed = count.saturating_mul(size_of::<T>() as u64);
        let n = self.check_len(needed)?;
        let data = self.pos..self.pos + n;
        self.pos += n;
        Ok(data)
    }
}
