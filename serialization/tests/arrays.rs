//! Array-specific tests: zero-copy segments, alignment, in-place reads.

mod common;

use std::borrow::Cow;

use ipl_serialization::{DecodeError, MessageReader, MessageWriter, ZERO_COPY_THRESHOLD};

fn aligned(bytes: &[u8]) -> Vec<u64> {
    common::aligned_copy(bytes, 0)
}

#[test]
fn large_array_is_a_borrowed_segment() {
    let big: Vec<u32> = (0..1000).collect();
    let mut w = MessageWriter::new();
    w.write_u8(1);
    w.write_array(&big);
    w.write_u8(2);
    let segs = w.segments();
    assert_eq!(segs.len(), 3, "owned, borrowed, owned");
    let ptr = big.as_ptr() as *const u8;
    assert!(segs
        .iter()
        .any(|s| std::ptr::eq(s.as_ptr(), ptr) && s.len() == 4000));
    // header: 1 + 8 (count) + 3 padding to align 4
    assert_eq!(segs[0].len(), 12);
    assert_eq!(&segs[0][1..9], &1000u64.to_le_bytes());
    assert_eq!(w.len(), 12 + 4000 + 1);
    assert_eq!(w.io_slices().len(), 3);
}

#[test]
fn threshold_boundary() {
    let below = vec![7u8; ZERO_COPY_THRESHOLD - 1];
    let at = vec![9u16; ZERO_COPY_THRESHOLD / 2];
    let mut w = MessageWriter::new();
    w.write_array(&below);
    assert_eq!(w.segments().len(), 1);
    w.write_array(&at);
    let segs = w.segments();
    assert_eq!(segs.len(), 2);
    assert!(std::ptr::eq(segs[1].as_ptr(), at.as_ptr() as *const u8));
}

#[test]
fn copied_arrays_are_merged_into_one_owned_segment() {
    let big: Vec<f64> = vec![1.5; 1000];
    let mut w = MessageWriter::new();
    w.write_array_copied(&big);
    w.write_array(&big[..10]);
    w.write_i16(3);
    assert_eq!(w.segments().len(), 1);
    let buf = w.into_buffer();
    assert_eq!(buf.len(), 8 + 8000 + 8 + 80 + 2);
}

#[test]
fn back_to_back_borrowed_arrays() {
    let a: Vec<i64> = (0..100).collect();
    let b: Vec<f32> = vec![2.0; 300];
    let mut w = MessageWriter::new();
    w.write_array(&a);
    w.write_array(&b);
    let segs = w.segments();
    // count, a, count, b
    assert_eq!(segs.len(), 4);
    assert_eq!(segs.iter().map(|s| s.len()).sum::<usize>(), w.len());
    let words = aligned(&w.to_vec());
    let mut r = MessageReader::new(common::view(&words, w.len()));
    assert!(matches!(r.read_array_ref::<i64>().unwrap(), Cow::Borrowed(x) if x == &a[..]));
    assert!(matches!(r.read_array_ref::<f32>().unwrap(), Cow::Borrowed(x) if x == &b[..]));
    assert!(r.is_empty());
}

#[test]
fn padding_is_relative_to_payload_start() {
    let mut w = MessageWriter::new();
    w.write_u8(0xAA);
    w.write_array_copied(&[1u64, 2]);
    let bytes = w.to_vec();
    // 1 + 8 count + 7 pad, elements at 16
    assert_eq!(bytes.len(), 16 + 16);
    assert!(bytes[9..16].iter().all(|&b| b == 0));
    assert_eq!(&bytes[16..24], &1u64.to_le_bytes());
}

#[test]
fn in_place_read_when_aligned_copy_when_not() {
    let data: Vec<u64> = (0..50).map(|i| i * 0x0101_0101).collect();
    let mut w = MessageWriter::new();
    w.write_u32(5);
    w.write_array(&data);
    let bytes = w.to_vec();

    let words = aligned(&bytes);
    let buf = common::view(&words, bytes.len());
    let mut r = MessageReader::new(buf);
    assert_eq!(r.read_u32().unwrap(), 5);
    match r.read_array_ref::<u64>().unwrap() {
        Cow::Borrowed(s) => {
            assert_eq!(s, &data[..]);
            // Points into the received buffer.
            let range = buf.as_ptr_range();
            assert!(range.contains(&(s.as_ptr() as *const u8)));
        }
        Cow::Owned(_) => panic!("expected in-place read"),
    }

    // Same payload placed at an odd memory address: still correct, copied.
    let words = common::aligned_copy(&bytes, 1);
    let buf = common::view(&words, 1 + bytes.len());
    let mut r = MessageReader::with_offset(buf, 1);
    assert_eq!(r.position(), 1);
    assert_eq!(r.read_u32().unwrap(), 5);
    let got = r.read_array_ref::<u64>().unwrap();
    assert!(matches!(got, Cow::Owned(_)));
    assert_eq!(&got[..], &data[..]);
}

#[test]
fn read_array_into_exact_and_mismatch() {
    let data: Vec<i32> = (-100..100).collect();
    let mut w = MessageWriter::new();
    w.write_array(&data);
    w.write_array(&data);
    let bytes = w.to_vec();
    let mut r = MessageReader::new(&bytes[..]);

    let mut short = vec![0i32; 10];
    assert_eq!(
        r.read_array_into(&mut short),
        Err(DecodeError::LengthMismatch {
            expected: 10,
            found: 200
        })
    );
    assert_eq!(r.position(), 0, "failed read does not move");
    assert!(short.iter().all(|&x| x == 0));

    let mut out = vec![0i32; 200];
    r.read_array_into(&mut out).unwrap();
    assert_eq!(out, data);
    assert_eq!(r.read_array_vec::<i32>().unwrap(), data);
    assert_eq!(r.remaining(), 0);
}

#[test]
fn empty_arrays() {
    let mut w = MessageWriter::new();
    w.write_array::<f64>(&[]);
    w.write_array_copied::<u16>(&[]);
    let mut r = MessageReader::new(w.to_vec());
    assert!(r.read_array_ref::<f64>().unwrap().is_empty());
    let mut out: [u16; 0] = [];
    r.read_array_into(&mut out).unwrap();
    assert_eq!(r.remaining(), 0);
}

#[test]
fn all_primitive_types() {
    let u8s = [1u8, 2, 3];
    let i8s = [-1i8, 2];
    let u16s = [u16::MAX, 0];
    let i16s = [i16::MIN];
    let u32s = [u32::MAX];
    let i32s = [i32::MIN];
    let u64s = [u64::MAX];
    let i64s = [i64::MIN, 0];
    let f32s = [f32::NAN, -0.0, f32::INFINITY];
    let f64s = [f64::MIN_POSITIVE, -1.0];
    let mut w = MessageWriter::new();
    w.write_array(&u8s);
    w.write_array(&i8s);
    w.write_array(&u16s);
    w.write_array(&i16s);
    w.write_array(&u32s);
    w.write_array(&i32s);
    w.write_array(&u64s);
    w.write_array(&i64s);
    w.write_array(&f32s);
    w.write_array(&f64s);
    let mut r = MessageReader::new(w.to_vec());
    assert_eq!(r.read_array_vec::<u8>().unwrap(), u8s);
    assert_eq!(r.read_array_vec::<i8>().unwrap(), i8s);
    assert_eq!(r.read_array_vec::<u16>().unwrap(), u16s);
    assert_eq!(r.read_array_vec::<i16>().unwrap(), i16s);
    assert_eq!(r.read_array_vec::<u32>().unwrap(), u32s);
    assert_eq!(r.read_array_vec::<i32>().unwrap(), i32s);
    assert_eq!(r.read_array_vec::<u64>().unwrap(), u64s);
    assert_eq!(r.read_array_vec::<i64>().unwrap(), i64s);
    let f = r.read_array_vec::<f32>().unwrap();
    assert_eq!(
        f.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        f32s.map(f32::to_bits)
    );
    assert_eq!(r.read_array_vec::<f64>().unwrap(), f64s);
    assert!(r.is_empty());
}

#[test]
fn several_arrays_are_borrowed_at_once_through_their_spans() {
    let a: Vec<u64> = (0..300).collect();
    let b: Vec<f64> = (0..200).map(|x| x as f64 / 2.0).collect();
    let mut w = MessageWriter::new();
    w.write_u8(3); // puts b's elements off 8-byte alignment unless padded
    w.write_array(&a);
    w.write_u8(4);
    w.write_array(&b);
    w.write_u32(9);
    let bytes = aligned(&w.to_vec());
    let buf: &[u8] = bytemuck::cast_slice(&bytes);
    let buf = &buf[..w.len()];
    let mut r = MessageReader::new(buf);
    assert_eq!(r.read_u8().unwrap(), 3);
    let sa = r.read_array_span::<u64>().unwrap();
    assert_eq!(r.read_u8().unwrap(), 4);
    let sb = r.read_array_span::<f64>().unwrap();
    assert_eq!(r.read_u32().unwrap(), 9);
    assert_eq!((sa.len(), sb.len()), (300, 200));
    // Both held together, in place in an aligned buffer.
    let (ga, gb) = (r.array_at(&sa).unwrap(), r.array_at(&sb).unwrap());
    assert!(matches!(ga, Cow::Borrowed(_)) && matches!(gb, Cow::Borrowed(_)));
    assert_eq!((&*ga, &*gb), (&a[..], &b[..]));
    // A span of a longer message is refused, not read out of bounds.
    let short = MessageReader::new(&buf[..100]);
    assert!(matches!(
        short.array_at(&sb),
        Err(DecodeError::Truncated { .. })
    ));
    // A missing array is an error and consumes nothing.
    assert!(r.read_array_span::<u8>().is_err());
    assert_eq!(r.remaining(), 0);
}
