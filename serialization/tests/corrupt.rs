//! Corrupt input: random bytes, truncation and oversized length prefixes
//! always give an error, never a panic or a huge allocation.

use std::collections::BTreeMap;

use ipl_serialization::{DecodeError, MessageReader, MessageWriter};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Rec {
    a: String,
    b: Vec<u64>,
    c: Option<Box<Rec>>,
    d: BTreeMap<u8, Vec<u8>>,
}

/// Applies read method `which` once; returns whether it succeeded. The
/// position must be unchanged on failure.
fn apply<B: AsRef<[u8]>>(r: &mut MessageReader<B>, which: u8, n: usize) -> bool {
    let before = r.position();
    let ok = match which % 22 {
        0 => r.read_u8().is_ok(),
        1 => r.read_i8().is_ok(),
        2 => r.read_u16().is_ok(),
        3 => r.read_i16().is_ok(),
        4 => r.read_u32().is_ok(),
        5 => r.read_i32().is_ok(),
        6 => r.read_u64().is_ok(),
        7 => r.read_i64().is_ok(),
        8 => r.read_f32().is_ok(),
        9 => r.read_f64().is_ok(),
        10 => r.read_bool().is_ok(),
        11 => r.read_char().is_ok(),
        12 => r.read_bytes(&mut vec![0; n]).is_ok(),
        13 => r.read_bytes_ref(n).is_ok(),
        14 => r.read_array_ref::<u8>().is_ok(),
        15 => r.read_array_ref::<u64>().is_ok(),
        16 => r.read_array_vec::<f32>().is_ok(),
        17 => r.read_array_vec::<i16>().is_ok(),
        18 => r.read_array_into::<f64>(&mut vec![0.0; n]).is_ok(),
        19 => r.read_object::<Rec>().is_ok(),
        20 => r.read_object::<String>().is_ok(),
        _ => r.read_object::<Vec<Option<(u32, char)>>>().is_ok(),
    };
    if !ok {
        assert_eq!(
            r.position(),
            before,
            "failed read {which} moved the position"
        );
    }
    assert!(r.position() <= r.get_ref().as_ref().len());
    ok
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every read method on arbitrary bytes: no panic, position consistent.
    #[test]
    fn arbitrary_bytes_each_method(bytes in prop::collection::vec(any::<u8>(), 0..128), which in 0u8..22, n in 0usize..64, off in 0usize..140) {
        apply(&mut MessageReader::new(&bytes[..]), which, n);
        apply(&mut MessageReader::with_offset(&bytes[..], off), which, n);
    }

    /// Random sequences of reads over random bytes never panic.
    #[test]
    fn arbitrary_bytes_sequences(bytes in prop::collection::vec(any::<u8>(), 0..256), seq in prop::collection::vec((any::<u8>(), 0usize..32), 0..16)) {
        let mut r = MessageReader::new(bytes);
        for (which, n) in seq {
            apply(&mut r, which, n);
        }
    }

    /// Arbitrary bytes behind a valid-looking small length prefix, decoded as objects.
    #[test]
    fn arbitrary_object_bodies(body in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut msg = (body.len() as u64).to_le_bytes().to_vec();
        msg.extend_from_slice(&body);
        for which in 19..22u8 {
            apply(&mut MessageReader::new(&msg[..]), which, 0);
        }
    }

    /// Length prefixes patched to huge values: always `LengthTooLarge`.
    #[test]
    fn huge_length_prefixes(len in prop_oneof![Just(u64::MAX), Just(u64::MAX / 2), Just(1u64 << 61), 64u64..u64::MAX], tail in prop::collection::vec(any::<u8>(), 0..40)) {
        let mut msg = len.to_le_bytes().to_vec();
        msg.extend_from_slice(&tail);
        let mut r = MessageReader::new(&msg[..]);
        let too_large = |e: DecodeError| matches!(e, DecodeError::LengthTooLarge { .. });
        prop_assert!(too_large(r.read_array_vec::<u8>().unwrap_err()));
        prop_assert!(too_large(r.read_array_ref::<u64>().unwrap_err()));
        prop_assert!(too_large(r.read_array_vec::<f64>().unwrap_err()));
        prop_assert!(too_large(r.read_object::<Rec>().unwrap_err()));
        prop_assert!(too_large(r.read_object::<Vec<u8>>().unwrap_err()));
        prop_assert_eq!(r.position(), 0);
    }

    /// Every strict prefix of a valid message fails somewhere when read back.
    #[test]
    fn truncated_messages_fail(s in ".{0,10}", a in prop::collection::vec(any::<u32>(), 0..200), cut_frac in 0.0f64..1.0) {
        let rec = Rec { a: s, b: vec![1, 2, 3], c: None, d: BTreeMap::new() };
        let mut w = MessageWriter::new();
        w.write_u16(7);
        w.write_array(&a);
        w.write_object(&rec).unwrap();
        w.write_bool(true);
        let full = w.to_vec();
        let cut = ((full.len() as f64) * cut_frac) as usize; // < full.len()
        let mut r = MessageReader::new(&full[..cut]);
        let res = (|| -> Result<(), DecodeError> {
            r.read_u16()?;
            r.read_array_vec::<u32>()?;
            r.read_object::<Rec>()?;
            r.read_bool()?;
            Ok(())
        })();
        prop_assert!(res.is_err());
    }
}

#[test]
fn overflowing_element_count() {
    // count * 8 overflows u64: reported as saturated, no panic.
    let mut msg = (u64::MAX / 4).to_le_bytes().to_vec();
    msg.extend_from_slice(&[0; 16]);
    let err = MessageReader::new(&msg[..])
        .read_array_vec::<u64>()
        .unwrap_err();
    assert_eq!(
        err,
        DecodeError::LengthTooLarge {
            needed: u64::MAX,
            remaining: 16
        }
    );
}

#[test]
fn bad_bool_and_char() {
    let mut r = MessageReader::new(vec![2u8]);
    assert_eq!(r.read_bool(), Err(DecodeError::InvalidBool(2)));
    assert_eq!(r.position(), 0);
    assert_eq!(r.read_u8(), Ok(2));

    let mut r = MessageReader::new(0xD800u32.to_le_bytes());
    assert_eq!(r.read_char(), Err(DecodeError::InvalidChar(0xD800)));
    let mut r = MessageReader::new(0x11_0000u32.to_le_bytes());
    assert_eq!(r.read_char(), Err(DecodeError::InvalidChar(0x11_0000)));
}

#[test]
fn truncated_scalars_and_padding() {
    let mut r = MessageReader::new([1u8, 2, 3]);
    assert_eq!(
        r.read_u32(),
        Err(DecodeError::Truncated {
            needed: 4,
            remaining: 3
        })
    );
    let mut out = [0u8; 4];
    assert!(matches!(
        r.read_bytes(&mut out),
        Err(DecodeError::Truncated { .. })
    ));
    assert!(r.read_bytes_ref(4).is_err());
    assert_eq!(r.read_bytes_ref(3).unwrap(), &[1, 2, 3]);
    assert!(r.read_u8().is_err());

    // Array header whose alignment padding is missing.
    let mut msg = vec![0xFFu8];
    msg.extend_from_slice(&1u64.to_le_bytes()); // count at offset 1..9, pad needed to 16
    msg.extend_from_slice(&[0; 3]);
    let mut r = MessageReader::new(&msg[..]);
    r.read_u8().unwrap();
    assert!(matches!(
        r.read_array_vec::<u64>(),
        Err(DecodeError::Truncated { .. })
    ));
    assert_eq!(r.position(), 1);
}

#[test]
fn object_trailing_bytes_and_bad_postcard() {
    let mut w = MessageWriter::new();
    w.write_object(&(1u8, 2u8)).unwrap();
    let msg = w.to_vec();
    // Reading a single u8 leaves one byte unused inside the length.
    let err = MessageReader::new(&msg[..])
        .read_object::<u8>()
        .unwrap_err();
    assert_eq!(err, DecodeError::TrailingBytes { unused: 1 });

    // Object shorter than the type needs.
    let err = MessageReader::new(&msg[..])
        .read_object::<(u8, u8, u8)>()
        .unwrap_err();
    assert!(matches!(err, DecodeError::Object(_)), "{err:?}");

    // A string announcing a huge length inside a small object.
    let mut msg = 3u64.to_le_bytes().to_vec();
    msg.extend_from_slice(&[0xFF, 0xFF, 0x7F]);
    let err = MessageReader::new(&msg[..])
        .read_object::<String>()
        .unwrap_err();
    assert!(matches!(err, DecodeError::Object(_)));

    // Invalid UTF-8.
    let mut msg = 3u64.to_le_bytes().to_vec();
    msg.extend_from_slice(&[2, 0xC3, 0x28]);
    assert!(MessageReader::new(&msg[..])
        .read_object::<String>()
        .is_err());

    // A Vec<u64> announcing 2^40 elements inside a 10-byte object.
    let mut msg = 10u64.to_le_bytes().to_vec();
    msg.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0, 0, 0, 0]);
    assert!(MessageReader::new(&msg[..])
        .read_object::<Vec<u64>>()
        .is_err());
}

#[test]
fn offset_beyond_end_is_clamped() {
    let mut r = MessageReader::with_offset([1u8, 2], 10);
    assert_eq!(r.remaining(), 0);
    assert_eq!(r.read_bytes_ref(0).unwrap(), &[] as &[u8]);
    assert!(r.read_u8().is_err());
}
