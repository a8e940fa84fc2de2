//! The port type's serialization level is enforced on both sides; arrays travel
//! without copies and can be read in place or into a caller's buffer.

mod common;

use std::borrow::Cow;

use common::*;
use ipl::{IplError, Level, PortCapabilities as P, PortType};

fn level_type(level: P) -> PortType {
    ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_TIMEOUT | level)
}

fn assert_level(r: Result<(), IplError>, allowed: Level, needed: Level) {
    match r {
        Err(IplError::LevelNotAllowed {
            allowed: a,
            needed: n,
        }) => {
            assert_eq!((a, n), (allowed, needed));
        }
        other => panic!("expected LevelNotAllowed, got {other:?}"),
    }
}

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Clone)]
struct Body {
    name: String,
    pos: (f64, f64, f64),
    tags: Vec<u16>,
    parent: Option<Box<Body>>,
}

#[test]
fn data_level_refuses_objects() {
    let (_a, _b, rp, mut sp) = connected_pair("lvl-data", level_type(P::SERIALIZATION_DATA));
    let mut m = sp.new_message().unwrap();
    assert_level(m.write_object(&5u32), Level::Data, Level::Object);
    m.write_i32(3).unwrap();
    m.write_bytes(b"raw").unwrap();
    m.finish().unwrap();
    let mut r = rp.receive_timeout(LONG).unwrap();
    assert_level(
        r.read_object::<u32>().map(|_| ()),
        Level::Data,
        Level::Object,
    );
    assert_eq!(r.read_i32().unwrap(), 3);
    assert_eq!(r.read_bytes_ref(3).unwrap(), b"raw");
}

#[test]
fn byte_level_refuses_primitives() {
    let (_a, _b, rp, mut sp) = connected_pair("lvl-byte", level_type(P::SERIALIZATION_BYTE));
    let mut m = sp.new_message().unwrap();
    assert_level(m.write_i32(1), Level::Byte, Level::Data);
    assert_level(m.write_array(&[1u8, 2][..]), Level::Byte, Level::Data);
    assert_level(m.write_object("x"), Level::Byte, Level::Object);
    m.write_bytes(&[1, 2, 3, 4]).unwrap();
    m.finish().unwrap();
    let mut r = rp.receive_timeout(LONG).unwrap();
    assert_level(r.read_i32().map(|_| ()), Level::Byte, Level::Data);
    assert_level(
        r.read_array_vec::<u8>().map(|_| ()),
        Level::Byte,
        Level::Data,
    );
    let mut out = [0u8; 4];
    r.read_bytes(&mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 4]);
    assert_eq!(r.remaining(), 0);
}

#[test]
fn object_level_round_trips_structs_and_primitives() {
    let (_a, _b, rp, mut sp) = connected_pair("lvl-obj", level_type(P::SERIALIZATION_OBJECT));
    let child = Body {
        name: "moon".into(),
        pos: (1.0, 2.0, -3.5),
        tags: vec![1, 2, 3],
        parent: None,
    };
    let body = Body {
        name: "earth".into(),
        pos: (0.0, f64::MAX, f64::MIN_POSITIVE),
        tags: vec![],
        parent: Some(Box::new(child)),
    };
    let mut m = sp.new_message().unwrap();
    m.write_object(&body).unwrap();
    m.write_u64(u64::MAX).unwrap();
    m.write_object(&vec!["a".to_string(), "b".to_string()])
        .unwrap();
    m.write_char('λ').unwrap();
    m.finish().unwrap();
    let mut r = rp.receive_timeout(LONG).unwrap();
    assert_eq!(r.read_object::<Body>().unwrap(), body);
    assert_eq!(r.read_u64().unwrap(), u64::MAX);
    assert_eq!(r.read_object::<Vec<String>>().unwrap(), vec!["a", "b"]);
    assert_eq!(r.read_char().unwrap(), 'λ');
    // Reading past the end is an error, not a panic.
    assert!(matches!(r.read_i32(), Err(IplError::Decode(_))));
}

#[test]
fn large_arrays_arrive_intact() {
    let (_a, _b, rp, mut sp) = connected_pair("lvl-array", level_type(P::SERIALIZATION_DATA));
    let big: Vec<f64> = (0..1_000_000).map(|i| f64::from(i) * 0.5 - 7.25).collect();
    let small: Vec<i16> = vec![-1, 2, -3];
    let ints: Vec<u32> = (0..10_000).collect();
    let mut m = sp.new_message().unwrap();
    m.write_u8(1).unwrap(); // misalign the payload on purpose
    m.write_array(&big).unwrap();
    m.write_array(&small).unwrap();
    m.write_array_copied(&ints).unwrap();
    m.write_array(&ints).unwrap();
    let n = m.finish().unwrap();
    assert!(n >= big.len() * 8);

    let mut r = rp.receive_timeout(LONG).unwrap();
    assert_eq!(r.read_u8().unwrap(), 1);
    {
        let got: Cow<'_, [f64]> = r.read_array_ref().unwrap();
        assert_eq!(got.len(), big.len());
        assert!(got
            .iter()
            .zip(&big)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
    assert_eq!(r.read_array_vec::<i16>().unwrap(), small);
    let mut into = vec![0u32; ints.len()];
    r.read_array_into(&mut into).unwrap();
    assert_eq!(into, ints);
    // A wrong length is refused and leaves the array readable.
    let mut wrong = vec![0u32; 3];
    assert!(matches!(
        r.read_array_into(&mut wrong),
        Err(IplError::Decode(_))
    ));
    assert_eq!(wrong, vec![0, 0, 0]);
    assert_eq!(r.read_array_ref::<u32>().unwrap().as_ref(), &ints[..]);
    assert_eq!(r.remaining(), 0);
}
