//! Property tests: random sequences of mixed writes read back equal.

mod common;

use std::borrow::Cow;

use ipl_serialization::{MessageReader, MessageWriter};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Shape {
    Unit,
    Circle(u32),
    Rect { w: i64, h: i64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Obj {
    name: String,
    tags: Vec<String>,
    maybe: Option<u16>,
    shape: Shape,
    data: Vec<i32>,
}

fn obj() -> impl Strategy<Value = Obj> {
    (
        ".{0,16}",
        prop::collection::vec(".{0,6}", 0..4),
        any::<Option<u16>>(),
        prop_oneof![
            Just(Shape::Unit),
            any::<u32>().prop_map(Shape::Circle),
            (any::<i64>(), any::<i64>()).prop_map(|(w, h)| Shape::Rect { w, h }),
        ],
        prop::collection::vec(any::<i32>(), 0..20),
    )
        .prop_map(|(name, tags, maybe, shape, data)| Obj {
            name,
            tags,
            maybe,
            shape,
            data,
        })
}

#[derive(Debug, Clone)]
enum Op {
    Bytes(Vec<u8>),
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Char(char),
    ArrU8(Vec<u8>),
    ArrI16(Vec<i16>),
    ArrU32(Vec<u32>),
    ArrF32(Vec<f32>),
    ArrI64(Vec<i64>),
    ArrF64(Vec<f64>),
    /// Same as ArrU64 but written with `write_array_copied`.
    ArrU64Copied(Vec<u64>),
    Obj(Obj),
    Str(String),
}

fn op() -> impl Strategy<Value = Op> {
    // Array sizes straddle ZERO_COPY_THRESHOLD (512 bytes).
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Op::Bytes),
        any::<u8>().prop_map(Op::U8),
        any::<i8>().prop_map(Op::I8),
        any::<u16>().prop_map(Op::U16),
        any::<i16>().prop_map(Op::I16),
        any::<u32>().prop_map(Op::U32),
        any::<i32>().prop_map(Op::I32),
        any::<u64>().prop_map(Op::U64),
        any::<i64>().prop_map(Op::I64),
        any::<f32>().prop_map(Op::F32),
        any::<f64>().prop_map(Op::F64),
        any::<bool>().prop_map(Op::Bool),
        any::<char>().prop_map(Op::Char),
        prop::collection::vec(any::<u8>(), 0..1100).prop_map(Op::ArrU8),
        prop::collection::vec(any::<i16>(), 0..600).prop_map(Op::ArrI16),
        prop::collection::vec(any::<u32>(), 0..300).prop_map(Op::ArrU32),
        prop::collection::vec(any::<f32>(), 0..300).prop_map(Op::ArrF32),
        prop::collection::vec(any::<i64>(), 0..150).prop_map(Op::ArrI64),
        prop::collection::vec(any::<f64>(), 0..150).prop_map(Op::ArrF64),
        prop::collection::vec(any::<u64>(), 0..150).prop_map(Op::ArrU64Copied),
        obj().prop_map(Op::Obj),
        ".{0,20}".prop_map(Op::Str),
    ]
}

fn write_all<'a>(w: &mut MessageWriter<'a>, ops: &'a [Op]) {
    for op in ops {
        match op {
            Op::Bytes(b) => w.write_bytes(b),
            Op::U8(v) => w.write_u8(*v),
            Op::I8(v) => w.write_i8(*v),
            Op::U16(v) => w.write_u16(*v),
            Op::I16(v) => w.write_i16(*v),
            Op::U32(v) => w.write_u32(*v),
            Op::I32(v) => w.write_i32(*v),
            Op::U64(v) => w.write_u64(*v),
            Op::I64(v) => w.write_i64(*v),
            Op::F32(v) => w.write_f32(*v),
            Op::F64(v) => w.write_f64(*v),
            Op::Bool(v) => w.write_bool(*v),
            Op::Char(v) => w.write_char(*v),
            Op::ArrU8(a) => w.write_array(a),
            Op::ArrI16(a) => w.write_array(a),
            Op::ArrU32(a) => w.write_array(a),
            Op::ArrF32(a) => w.write_array(a),
            Op::ArrI64(a) => w.write_array(a),
            Op::ArrF64(a) => w.write_array(a),
            Op::ArrU64Copied(a) => w.write_array_copied(a),
            Op::Obj(o) => w.write_object(o).unwrap(),
            Op::Str(s) => w.write_object(s.as_str()).unwrap(),
        }
    }
}

fn f32_bits(a: &[f32]) -> Vec<u32> {
    a.iter().map(|x| x.to_bits()).collect()
}
fn f64_bits(a: &[f64]) -> Vec<u64> {
    a.iter().map(|x| x.to_bits()).collect()
}

/// Reads every op back, alternating between the three array read methods.
/// Returns how many array reads were borrowed in place.
fn read_all<B: AsRef<[u8]>>(r: &mut MessageReader<B>, ops: &[Op]) -> usize {
    let mut borrowed = 0;
    for (i, op) in ops.iter().enumerate() {
        macro_rules! arr {
            ($a:expr, $t:ty, $cmp:expr) => {{
                let got: Vec<$t> = match i % 3 {
                    0 => {
                        let c = r.read_array_ref::<$t>().unwrap();
                        if matches!(c, Cow::Borrowed(_)) && !$a.is_empty() {
                            borrowed += 1;
                        }
                        c.into_owned()
                    }
                    1 => {
                        let mut out = vec![<$t>::default(); $a.len()];
                        r.read_array_into(&mut out).unwrap();
                        out
                    }
                    _ => r.read_array_vec::<$t>().unwrap(),
                };
                assert_eq!($cmp(&got[..]), $cmp(&$a[..]));
            }};
        }
        match op {
            Op::Bytes(b) => {
                if i % 2 == 0 {
                    let mut out = vec![0; b.len()];
                    r.read_bytes(&mut out).unwrap();
                    assert_eq!(&out, b);
                } else {
                    assert_eq!(r.read_bytes_ref(b.len()).unwrap(), &b[..]);
                }
            }
            Op::U8(v) => assert_eq!(r.read_u8().unwrap(), *v),
            Op::I8(v) => assert_eq!(r.read_i8().unwrap(), *v),
            Op::U16(v) => assert_eq!(r.read_u16().unwrap(), *v),
            Op::I16(v) => assert_eq!(r.read_i16().unwrap(), *v),
            Op::U32(v) => assert_eq!(r.read_u32().unwrap(), *v),
            Op::I32(v) => assert_eq!(r.read_i32().unwrap(), *v),
            Op::U64(v) => assert_eq!(r.read_u64().unwrap(), *v),
            Op::I64(v) => assert_eq!(r.read_i64().unwrap(), *v),
            Op::F32(v) => assert_eq!(r.read_f32().unwrap().to_bits(), v.to_bits()),
            Op::F64(v) => assert_eq!(r.read_f64().unwrap().to_bits(), v.to_bits()),
            Op::Bool(v) => assert_eq!(r.read_bool().unwrap(), *v),
            Op::Char(v) => assert_eq!(r.read_char().unwrap(), *v),
            Op::ArrU8(a) => arr!(a, u8, |x: &[u8]| x.to_vec()),
            Op::ArrI16(a) => arr!(a, i16, |x: &[i16]| x.to_vec()),
            Op::ArrU32(a) => arr!(a, u32, |x: &[u32]| x.to_vec()),
            Op::ArrF32(a) => arr!(a, f32, f32_bits),
            Op::ArrI64(a) => arr!(a, i64, |x: &[i64]| x.to_vec()),
            Op::ArrF64(a) => arr!(a, f64, f64_bits),
            Op::ArrU64Copied(a) => arr!(a, u64, |x: &[u64]| x.to_vec()),
            Op::Obj(o) => assert_eq!(&r.read_object::<Obj>().unwrap(), o),
            Op::Str(s) => assert_eq!(&r.read_object::<String>().unwrap(), s),
        }
    }
    assert_eq!(r.remaining(), 0);
    borrowed
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn mixed_sequences_round_trip(ops in prop::collection::vec(op(), 0..24)) {
        let mut w = MessageWriter::new();
        write_all(&mut w, &ops);
        let bytes = w.to_vec();
        prop_assert_eq!(bytes.len(), w.len());
        prop_assert_eq!(w.is_empty(), bytes.is_empty());
        let segs = w.segments();
        prop_assert_eq!(segs.iter().map(|s| s.len()).sum::<usize>(), bytes.len());
        prop_assert!(segs.iter().all(|s| !s.is_empty()));

        // Contiguous Vec (whatever its alignment).
        read_all(&mut MessageReader::new(&bytes[..]), &ops);
        // Owned Vec<u8> as the buffer type.
        read_all(&mut MessageReader::new(bytes.clone()), &ops);

        // 8-aligned buffer behind an 8-byte header: every non-empty array of
        // an `i % 3 == 0` op is read in place.
        let words = common::aligned_copy(&bytes, 8);
        let buf = common::view(&words, 8 + bytes.len());
        let mut r = MessageReader::with_offset(buf, 8);
        let borrowed = read_all(&mut r, &ops);
        let expect = ops.iter().enumerate().filter(|(i, op)| i % 3 == 0 && match op {
            Op::ArrU8(a) => !a.is_empty(),
            Op::ArrI16(a) => !a.is_empty(),
            Op::ArrU32(a) => !a.is_empty(),
            Op::ArrF32(a) => !a.is_empty(),
            Op::ArrI64(a) => !a.is_empty(),
            Op::ArrF64(a) => !a.is_empty(),
            Op::ArrU64Copied(a) => !a.is_empty(),
            _ => false,
        }).count();
        prop_assert_eq!(borrowed, expect);

        // Misaligned in memory (payload at odd offset): still correct (copies).
        let words = common::aligned_copy(&bytes, 3);
        let buf = common::view(&words, 3 + bytes.len());
        read_all(&mut MessageReader::with_offset(buf, 3), &ops);

        // Writer reuse: into_buffer / with_buffer gives the same bytes.
        let mut w2 = MessageWriter::with_buffer(w.into_buffer());
        write_all(&mut w2, &ops);
        prop_assert_eq!(w2.to_vec(), bytes);
    }

    #[test]
    fn byte_level_round_trip(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..2000), 0..8)) {
        let mut w = MessageWriter::new();
        for (i, c) in chunks.iter().enumerate() {
            if i % 2 == 0 { w.write_bytes(c) } else { w.write_bytes_borrowed(c) }
        }
        let mut sink = Vec::new();
        w.write_to(&mut sink).unwrap();
        prop_assert_eq!(&sink, &chunks.concat());
        let mut r = MessageReader::new(sink);
        for c in &chunks {
            prop_assert_eq!(r.read_bytes_ref(c.len()).unwrap(), &c[..]);
        }
        prop_assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn object_level_round_trip(objs in prop::collection::vec(obj(), 0..6), opt in any::<Option<Vec<String>>>(), t in any::<(u8, i64, bool, char)>()) {
        let mut w = MessageWriter::new();
        for o in &objs { w.write_object(o).unwrap(); }
        w.write_object(&opt).unwrap();
        w.write_object(&t).unwrap();
        let mut r = MessageReader::new(w.to_vec());
        for o in &objs { prop_assert_eq!(&r.read_object::<Obj>().unwrap(), o); }
        prop_assert_eq!(r.read_object::<Option<Vec<String>>>().unwrap(), opt);
        prop_assert_eq!(r.read_object::<(u8, i64, bool, char)>().unwrap(), t);
        prop_assert_eq!(r.remaining(), 0);
    }
}
