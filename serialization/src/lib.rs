//! The three serialization levels of the Ibis Portability Layer (IPL).
//!
//! A port type allows one [`Level`]; the IPL checks it (with
//! [`Level::allows`] / [`Level::require`]) before calling a write or read:
//!
//! * **byte** — raw bytes only ([`MessageWriter::write_bytes`]);
//! * **data** — primitives (`u8`…`i64`, `f32`, `f64`, `bool`, `char`) and
//!   arrays of the numeric [`Primitive`]s;
//! * **object** — any `serde` value, encoded with postcard.
//!
//! # Wire format
//!
//! Everything is little endian, with no type tags (reads must mirror writes):
//!
//! * scalar: its LE bytes; `bool` is one byte 0 or 1; `char` is its `u32` code;
//! * bytes: the raw bytes, no length;
//! * array of `T`: `u64` element count, zero padding so the elements start at
//!   a multiple of `align_of::<T>()`, then the elements;
//! * object: `u64` byte length, then that many postcard bytes.
//!
//! Alignment is relative to the **payload start**. The IPL puts a header whose
//! size is a multiple of 8 in front of the payload, so a receiver holding the
//! message in an 8-aligned buffer can read arrays in place
//! ([`MessageReader::read_array_ref`] returns `Cow::Borrowed`).
//!
//! # Zero copy
//!
//! [`MessageWriter`] produces a scatter/gather list
//! ([`MessageWriter::segments`]): arrays of at least [`ZERO_COPY_THRESHOLD`]
//! bytes are borrowed as their own segment (on little-endian hosts); all
//! other items are copied into one owned, reusable buffer.
//!
//! # Bounded decode
//!
//! [`MessageReader`] checks every length prefix (with overflow-checked
//! multiplication by the element size) against the remaining bytes before
//! allocating anything. Corrupt input yields a [`DecodeError`], never a panic
//! or a huge allocation, and a failed read leaves the position unchanged.
//! The crate contains no `unsafe` code (casts go through `bytemuck`).
//!
//! # Example
//!
//! ```
//! use std::borrow::Cow;
//! use ipl_serialization::{Level, MessageReader, MessageWriter};
//!
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct Job { id: u32, name: String }
//!
//! let big: Vec<f64> = (0..1000).map(f64::from).collect();
//!
//! let mut w = MessageWriter::new();
//! w.write_i32(-7);
//! w.write_array(&big);                 // >= 512 bytes: borrowed, not copied
//! w.write_object(&Job { id: 1, name: "fib".into() }).unwrap();
//! assert!(Level::Object.allows(Level::Data));
//!
//! // Gather the segments as a transport would (here into an 8-aligned buffer).
//! let bytes = w.to_vec();
//! let mut words = vec![0u64; bytes.len().div_ceil(8)];
//! bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
//! let buf = &bytemuck::cast_slice::<u64, u8>(&words)[..bytes.len()];
//!
//! let mut r = MessageReader::new(buf);
//! assert_eq!(r.read_i32().unwrap(), -7);
//! let arr = r.read_array_ref::<f64>().unwrap();
//! assert!(matches!(arr, Cow::Borrowed(_)));   // read in place
//! assert_eq!(&arr[..], &big[..]);
//! let job: Job = r.read_object().unwrap();
//! assert_eq!(job, Job { id: 1, name: "fib".into() });
//! assert_eq!(r.remaining(), 0);
//! ```
#![forbid(unsafe_code)]

mod error;
mod level;
mod primitive;
mod reader;
mod writer;

pub use error::{DecodeError, LevelError, SerError};
pub use level::Level;
pub use primitive::Primitive;
pub use reader::{ArraySpan, MessageReader};
pub use writer::{MessageWriter, ZERO_COPY_THRESHOLD};

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
