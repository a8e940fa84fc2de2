//! [`MessageWriter`]: builds a message payload as a scatter/gather list.

use std::io::{self, IoSlice};
use std::ops::Range;

use serde::Serialize;

use crate::error::SerError;
use crate::primitive::Primitive;

/// Arrays of at least this many bytes are not copied by
/// [`MessageWriter::write_array`] (on little-endian hosts): they become their
/// own borrowed segment of the scatter/gather list.
pub const ZERO_COPY_THRESHOLD: usize = 512;

/// Zero bytes used for alignment padding (the largest primitive alignment is 8).
const ZEROS: [u8; 8] = [0; 8];

/// One finished segment of the scatter/gather list.
#[derive(Debug, Clone)]
enum Segment<'a> {
    /// A range of the writer's owned buffer.
    Owned(Range<usize>),
    /// Caller memory borrowed for `'a` (a large array).
    Borrowed(&'a [u8]),
}

/// Builds one message payload.
///
/// Small items are copied into an owned buffer; large arrays written with
/// [`write_array`](Self::write_array) are kept as borrowed segments, so the
/// payload is a scatter/gather list ([`segments`](Self::segments)) that a
/// transport can hand to `writev`.
///
/// **Alignment** of arrays is computed relative to the start of the payload
/// (offset 0 = first byte written to this writer). The IPL puts a header whose
/// size is a multiple of 8 in front of the payload, so payload-relative
/// alignment is also message-relative alignment, and a receiver holding the
/// message in an 8-aligned buffer can read arrays in place.
///
/// The writer does not check serialization levels; the IPL does that (see
/// [`Level`](crate::Level)).
#[derive(Debug, Clone, Default)]
pub struct MessageWriter<'a> {
    /// Owned bytes of all owned segments, in order.
    buf: Vec<u8>,
    /// Segments completed before the current (open) owned run.
    closed: Vec<Segment<'a>>,
    /// Start in `buf` of the open owned run (`buf[open_start..]`).
    open_start: usize,
    /// Total bytes in borrowed segments.
    borrowed_len: usize,
}

macro_rules! write_scalar {
    ($($(#[$doc:meta])* $name:ident: $t:ty;)*) => {$(
        $(#[$doc])*
        #[inline]
        pub fn $name(&mut self, v: $t) {
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    )*};
}

impl<'a> MessageWriter<'a> {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty writer reusing `buf`'s allocation (its contents are cleared).
    pub fn with_buffer(mut buf: Vec<u8>) -> Self {
        buf.clear();
        MessageWriter {
            buf,
            ..Self::default()
        }
    }

    /// Removes everything written so far, keeping the owned allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.closed.clear();
        self.open_start = 0;
        self.borrowed_len = 0;
    }

    /// Total payload bytes written so far (owned and borrowed segments).
    pub fn len(&self) -> usize {
        self.buf.len() + self.borrowed_len
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    // ----- byte level -----

    /// Byte level: appends raw bytes (copied).
    pub fn write_bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Byte level: appends raw bytes, borrowing them as their own segment
    /// when they are at least [`ZERO_COPY_THRESHOLD`] long (copied otherwise).
    pub fn write_bytes_borrowed(&mut self, b: &'a [u8]) {
        if b.len() >= ZERO_COPY_THRESHOLD {
            self.push_borrowed(b);
        } else {
            self.buf.extend_from_slice(b);
        }
    }

    // ----- data level -----

    write_scalar! {
        /// Data level: writes a `u8`.
        write_u8: u8;
        /// Data level: writes an `i8`.
        write_i8: i8;
        /// Data level: writes a `u16` (little endian).
        write_u16: u16;
        /// Data level: writes an `i16` (little endian).
        write_i16: i16;
        /// Data level: writes a `u32` (little endian).
        write_u32: u32;
        /// Data level: writes an `i32` (little endian).
        write_i32: i32;
        /// Data level: writes a `u64` (little endian).
        write_u64: u64;
        /// Data level: writes an `i64` (little endian).
        write_i64: i64;
        /// Data level: writes an `f32` (IEEE 754 bits, little endian).
        write_f32: f32;
        /// Data level: writes an `f64` (IEEE 754 bits, little endian).
        write_f64: f64;
    }

    /// Data level: writes a `bool` as one byte, 0 or 1.
    #[inline]
    pub fn write_bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }

    /// Data level: writes a `char` as its `u32` code, little endian.
    #[inline]
    pub fn write_char(&mut self, v: char) {
        self.write_u32(u32::from(v));
    }

    /// Data level: writes an array: `u64` LE element count, zero padding up
    /// to `align_of::<T>()` (relative to the payload start), then the
    /// elements in little endian.
    ///
    /// On little-endian hosts, arrays of at least [`ZERO_COPY_THRESHOLD`]
    /// bytes are not copied: `a` becomes a borrowed segment. Smaller arrays
    /// (and every array on big-endian hosts) are copied.
    pub fn write_array<T: Primitive>(&mut self, a: &'a [T]) {
        self.write_array_header::<T>(a.len());
        if cfg!(target_endian = "little") && std::mem::size_of_val(a) >= ZERO_COPY_THRESHOLD {
            self.push_borrowed(bytemuck::cast_slice(a));
        } else {
            self.copy_elements(a);
        }
    }

    /// Data level: same wire format as [`write_array`](Self::write_array) but
    /// always copies, so `a` need not outlive the writer.
    pub fn write_array_copied<T: Primitive>(&mut self, a: &[T]) {
        self.write_array_header::<T>(a.len());
        self.copy_elements(a);
    }

    // ----- object level -----

    /// Object level: writes `u64` LE byte length, then the postcard encoding
    /// of `v`. On error nothing is written.
    pub fn write_object<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), SerError> {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0; 8]);
        match postcard::to_io(v, &mut self.buf) {
            Ok(_) => {
                let n = (self.buf.len() - start - 8) as u64;
                self.buf[start..start + 8].copy_from_slice(&n.to_le_bytes());
                Ok(())
            }
            Err(e) => {
                self.buf.truncate(start);
                Err(SerError::Object(e))
            }
        }
    }

    // ----- output -----

    /// The scatter/gather list, in order, ready for `writev`. Adjacent owned
    /// bytes form a single segment; empty segments are omitted.
    pub fn segments(&self) -> Vec<&[u8]> {
        let mut out = Vec::with_capacity(self.closed.len() + 1);
        self.segments_into(&mut out);
        out
    }

    /// Appends the scatter/gather list to `out` (to reuse a `Vec`).
    pub fn segments_into<'s>(&'s self, out: &mut Vec<&'s [u8]>) {
        for seg in &self.closed {
            out.push(match seg {
                Segment::Owned(r) => &self.buf[r.clone()],
                Segment::Borrowed(b) => b,
            });
        }
        if self.buf.len() > self.open_start {
            out.push(&self.buf[self.open_start..]);
        }
    }

    /// The scatter/gather list as [`IoSlice`]s, for `Write::write_vectored`.
    pub fn io_slices(&self) -> Vec<IoSlice<'_>> {
        self.segments().into_iter().map(IoSlice::new).collect()
    }

    /// Writes all segments, in order, to `w`.
    pub fn write_to<W: io::Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        for s in self.segments() {
            w.write_all(s)?;
        }
        Ok(())
    }

    /// The whole payload as one contiguous `Vec` (copies borrowed segments).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for s in self.segments() {
            v.extend_from_slice(s);
        }
        v
    }

    /// Recovers the owned allocation for reuse. It holds the owned bytes only
    /// (not the borrowed segments); [`with_buffer`](Self::with_buffer) clears it.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    // ----- internals -----

    fn write_array_header<T: Primitive>(&mut self, count: usize) {
        self.write_u64(count as u64);
        let align = std::mem::align_of::<T>();
        let pad = (align - self.len() % align) % align;
        self.buf.extend_from_slice(&ZEROS[..pad]);
    }

    fn copy_elements<T: Primitive>(&mut self, a: &[T]) {
        if cfg!(target_endian = "little") {
            self.buf.extend_from_slice(bytemuck::cast_slice(a));
        } else {
            self.buf.reserve(std::mem::size_of_val(a));
            for x in a {
                self.buf
                    .extend_from_slice(bytemuck::bytes_of(&x.to_le_repr()));
            }
        }
    }

    fn push_borrowed(&mut self, b: &'a [u8]) {
        if self.buf.len() > self.open_start {
            self.closed
                .push(Segment::Owned(self.open_start..self.buf.len()));
        }
        self.open_start = self.buf.len();
        self.borrowed_len += b.len();
        self.closed.push(Segment::Borrowed(b));
    }
}
