//! Property: any sequence of typed writes through real ports reads back equal
//! (data level and object level).

mod common;

use common::*;
use ipl::{PortCapabilities as P, PortType, ReadMessage, WriteMessage};
use proptest::prelude::*;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Obj {
    id: u32,
    name: String,
    values: Vec<i64>,
    flag: Option<bool>,
}

#[derive(Debug, Clone)]
enum Op {
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
    Bytes(Vec<u8>),
    ArrI32(Vec<i32>),
    ArrF64(Vec<f64>),
    ArrU16Copied(Vec<u16>),
    Obj(Obj),
    Str(String),
}

fn data_op() -> impl Strategy<Value = Op> {
    prop_oneof![
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
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Op::Bytes),
        proptest::collection::vec(any::<i32>(), 0..300).prop_map(Op::ArrI32),
        proptest::collection::vec(any::<f64>(), 0..300).prop_map(Op::ArrF64),
        proptest::collection::vec(any::<u16>(), 0..50).prop_map(Op::ArrU16Copied),
    ]
}

fn object_op() -> impl Strategy<Value = Op> {
    let obj = (
        any::<u32>(),
        ".{0,12}",
        proptest::collection::vec(any::<i64>(), 0..8),
        any::<Option<bool>>(),
    )
        .prop_map(|(id, name, values, flag)| {
            Op::Obj(Obj {
                id,
                name,
                values,
                flag,
            })
        });
    prop_oneof![3 => data_op(), 1 => obj, 1 => ".{0,20}".prop_map(Op::Str)]
}

fn write(m: &mut WriteMessage<'_, '_>, op: &Op) {
    match op {
        Op::U8(v) => m.write_u8(*v),
        Op::I8(v) => m.write_i8(*v),
        Op::U16(v) => m.write_u16(*v),
        Op::I16(v) => m.write_i16(*v),
        Op::U32(v) => m.write_u32(*v),
        Op::I32(v) => m.write_i32(*v),
        Op::U64(v) => m.write_u64(*v),
        Op::I64(v) => m.write_i64(*v),
        Op::F32(v) => m.write_f32(*v),
        Op::F64(v) => m.write_f64(*v),
        Op::Bool(v) => m.write_bool(*v),
        Op::Char(v) => m.write_char(*v),
        Op::Bytes(v) => m.write_u32(v.len() as u32).and_then(|()| m.write_bytes(v)),
        Op::ArrI32(v) => m.write_array_copied(v),
        Op::ArrF64(v) => m.write_array_copied(v),
        Op::ArrU16Copied(v) => m.write_array_copied(v),
        Op::Obj(o) => m.write_object(o),
        Op::Str(s) => m.write_object(s),
    }
    .expect("write allowed at this level");
}

fn check(r: &mut ReadMessage, op: &Op) -> Result<(), TestCaseError> {
    match op {
        Op::U8(v) => prop_assert_eq!(r.read_u8().unwrap(), *v),
        Op::I8(v) => prop_assert_eq!(r.read_i8().unwrap(), *v),
        Op::U16(v) => prop_assert_eq!(r.read_u16().unwrap(), *v),
        Op::I16(v) => prop_assert_eq!(r.read_i16().unwrap(), *v),
        Op::U32(v) => prop_assert_eq!(r.read_u32().unwrap(), *v),
        Op::I32(v) => prop_assert_eq!(r.read_i32().unwrap(), *v),
        Op::U64(v) => prop_assert_eq!(r.read_u64().unwrap(), *v),
        Op::I64(v) => prop_assert_eq!(r.read_i64().unwrap(), *v),
        Op::F32(v) => prop_assert_eq!(r.read_f32().unwrap().to_bits(), v.to_bits()),
        Op::F64(v) => prop_assert_eq!(r.read_f64().unwrap().to_bits(), v.to_bits()),
        Op::Bool(v) => prop_assert_eq!(r.read_bool().unwrap(), *v),
        Op::Char(v) => prop_assert_eq!(r.read_char().unwrap(), *v),
        Op::Bytes(v) => {
            let n = r.read_u32().unwrap() as usize;
            prop_assert_eq!(r.read_bytes_ref(n).unwrap(), &v[..]);
        }
        Op::ArrI32(v) => prop_assert_eq!(r.read_array_vec::<i32>().unwrap(), v.clone()),
        Op::ArrF64(v) => {
            let mut out = vec![0f64; v.len()];
            r.read_array_into(&mut out).unwrap();
            let a: Vec<u64> = out.iter().map(|x| x.to_bits()).collect();
            let b: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
            prop_assert_eq!(a, b);
        }
        Op::ArrU16Copied(v) => {
            let got = r.read_array_ref::<u16>().unwrap();
            prop_assert_eq!(got.as_ref(), &v[..]);
        }
        Op::Obj(o) => prop_assert_eq!(&r.read_object::<Obj>().unwrap(), o),
        Op::Str(s) => prop_assert_eq!(&r.read_object::<String>().unwrap(), s),
    }
    Ok(())
}

/// Sends each op list as one message through a fresh pair of ports of type `t` and
/// checks every value reads back equal.
fn round_trip(t: PortType, msgs: &[Vec<Op>]) -> Result<(), TestCaseError> {
    let (_a, _b, rp, mut sp) = connected_pair("prop", t);
    for ops in msgs {
        let mut m = sp.new_message().unwrap();
        for op in ops {
            write(&mut m, op);
        }
        m.finish().unwrap();
    }
    for ops in msgs {
        let mut r = rp.receive_timeout(LONG).unwrap();
        for op in ops {
            check(&mut r, op)?;
        }
        prop_assert_eq!(r.remaining(), 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn data_level_round_trips(
        msgs in proptest::collection::vec(proptest::collection::vec(data_op(), 0..24), 1..4)
    ) {
        let t = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_DATA);
        round_trip(t, &msgs)?;
    }

    #[test]
    fn object_level_round_trips(
        msgs in proptest::collection::vec(proptest::collection::vec(object_op(), 0..24), 1..4)
    ) {
        let t = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_OBJECT);
        round_trip(t, &msgs)?;
    }
}

#[test]
fn borrowed_arrays_round_trip() {
    // write_array borrows: exercise the zero-copy path with arrays of every size class.
    let t = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_DATA);
    let (_a, rp, mut sp) = connected_loop("borrowed", t);
    let arrays: Vec<Vec<i64>> = [0usize, 1, 7, 64, 1000, 100_000]
        .iter()
        .map(|&n| (0..n as i64).map(|i| i * 31 - 5).collect())
        .collect();
    let mut m = sp.new_message().unwrap();
    for (k, arr) in arrays.iter().enumerate() {
        m.write_u8(k as u8).unwrap();
        m.write_array(arr).unwrap();
    }
    m.finish().unwrap();
    let mut r = rp.receive_timeout(LONG).unwrap();
    for (k, arr) in arrays.iter().enumerate() {
        assert_eq!(r.read_u8().unwrap(), k as u8);
        assert_eq!(r.read_array_ref::<i64>().unwrap().as_ref(), &arr[..]);
    }
}
