//! The checkpoint byte format: round trips, and hostile input never panics and
//! always gives a typed error when it is not a valid file.

use proptest::prelude::*;
use satin_core::checkpoint::{decode, encode, CheckpointError, Fingerprint, VERSION};
use satin_core::JobKey;

const FP: Fingerprint = Fingerprint([5; 32]);

fn entries() -> impl Strategy<Value = Vec<(JobKey, Vec<u8>)>> {
    proptest::collection::vec(
        (
            any::<[u8; 16]>().prop_map(JobKey),
            proptest::collection::vec(any::<u8>(), 0..64),
        ),
        0..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn encoded_entries_decode_to_the_same_entries(e in entries()) {
        let file = encode(&FP, e.iter().map(|(k, b)| (*k, b.as_slice())));
        let read = decode(&file).unwrap();
        prop_assert_eq!(read.fingerprint, FP);
        prop_assert_eq!(read.entries, e);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(
        count in any::<u64>(),
        rest in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = b"SATINCKP".to_vec();
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&FP.0);
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&rest);
        prop_assert!(decode(&bytes).is_err());
    }

    #[test]
    fn a_truncated_file_is_an_error(e in entries(), cut in any::<prop::sample::Index>()) {
        let file = encode(&FP, e.iter().map(|(k, b)| (*k, b.as_slice())));
        let len = cut.index(file.len());
        prop_assert!(decode(&file[..len]).is_err());
    }

    #[test]
    fn a_flipped_bit_is_an_error(e in entries(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut file = encode(&FP, e.iter().map(|(k, b)| (*k, b.as_slice())));
        let i = at.index(file.len());
        file[i] ^= 1 << bit;
        let err = decode(&file);
        prop_assert!(err.is_err());
        // Outside the magic and version fields, only the digest can notice.
        if i >= 12 {
            prop_assert_eq!(err, Err(CheckpointError::Corrupt));
        }
    }
}
