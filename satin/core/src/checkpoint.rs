//! The byte format of a checkpoint file: saved results as `(key, bytes)`.
//!
//! The journal version of Satin checkpoints the orphan-result structures so a
//! run survives the loss of every member and can resume elsewhere. A checkpoint
//! holds a member's stored results ([`Recovery::checkpoint_entries`]); after a
//! restart they go back with [`Recovery::restore`], and a job whose key is found
//! is not recomputed. The driver writes and reads the files; this module only
//! turns entries into bytes and back.
//!
//! # Format (version 1)
//!
//! All integers little-endian.
//!
//! | field | size | content |
//! |---|---|---|
//! | magic | 8 | `SATINCKP` |
//! | version | 4 | `1` |
//! | count | 8 | number of entries |
//! | entries | | `count` times: key (16 bytes), length (8), result (length bytes) |
//! | digest | 32 | SHA-256 of everything before it |
//!
//! [`decode`] never panics, and allocates no more than the input's length
//! whatever the input says: every length is checked against the bytes that are
//! left before anything is reserved. The digest catches truncation and
//! corruption (a typed [`CheckpointError`]).
//!
//! ```
//! use satin_core::checkpoint::{decode, encode, CheckpointError};
//! use satin_core::JobKey;
//!
//! let key = JobKey::of("fib", &[30]);
//! let file = encode([(key, b"832040".as_slice())]);
//! assert_eq!(decode(&file).unwrap(), vec![(key, b"832040".to_vec())]);
//! assert!(matches!(decode(&file[..file.len() - 1]), Err(CheckpointError::Corrupt)));
//! ```
//!
//! [`Recovery::checkpoint_entries`]: crate::recovery::Recovery::checkpoint_entries
//! [`Recovery::restore`]: crate::recovery::Recovery::restore

use sha2::{Digest, Sha256};

use crate::key::JobKey;

/// The first bytes of every checkpoint file.
pub const MAGIC: [u8; 8] = *b"SATINCKP";
/// The format version [`encode`] writes and [`decode`] reads.
pub const VERSION: u32 = 1;

const HEADER: usize = 8 + 4 + 8;
const DIGEST: usize = 32;
const ENTRY_HEADER: usize = 16 + 8;

/// Why bytes are not a checkpoint [`decode`] can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// Shorter than an empty checkpoint.
    #[error("not a Satin checkpoint: {0} bytes is too short")]
    TooShort(usize),
    /// The file does not start with [`MAGIC`].
    #[error("not a Satin checkpoint (wrong magic bytes)")]
    BadMagic,
    /// A format version this build does not read.
    #[error("Satin checkpoint version {0} is not supported (this build reads version {VERSION})")]
    UnsupportedVersion(u32),
    /// The digest does not match: the file is truncated or corrupted.
    #[error("Satin checkpoint is truncated or corrupted (digest mismatch)")]
    Corrupt,
    /// The digest matches but the entries do not fit the stated lengths (the
    /// writer was broken).
    #[error("Satin checkpoint is malformed: {0}")]
    Malformed(&'static str),
}

/// Encodes `entries` as a checkpoint file's bytes.
pub fn encode<B: AsRef<[u8]>>(entries: impl IntoIterator<Item = (JobKey, B)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + DIGEST);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    let mut count = 0u64;
    for (key, bytes) in entries {
        let bytes = bytes.as_ref();
        out.extend_from_slice(&key.0);
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
        count += 1;
    }
    out[12..20].copy_from_slice(&count.to_le_bytes());
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    out
}

/// Decodes a checkpoint file's bytes into its entries, in file order.
pub fn decode(file: &[u8]) -> Result<Vec<(JobKey, Vec<u8>)>, CheckpointError> {
    if file.len() < HEADER + DIGEST {
        return Err(CheckpointError::TooShort(file.len()));
    }
    if file[..8] != MAGIC {
        return Err(CheckpointError::BadMagic);
    }
    let version = u32::from_le_bytes(array(&file[8..12]));
    if version != VERSION {
        return Err(CheckpointError::UnsupportedVersion(version));
    }
    let (body, digest) = file.split_at(file.len() - DIGEST);
    if Sha256::digest(body).as_slice() != digest {
        return Err(CheckpointError::Corrupt);
    }
    let count = u64::from_le_bytes(array(&body[12..20]));
    let mut rest = &body[HEADER..];
    // Each entry takes at least ENTRY_HEADER bytes: never reserve more than fit.
    let fit = (rest.len() / ENTRY_HEADER) as u64;
    let mut entries = Vec::with_capacity(count.min(fit) as usize);
    for _ in 0..count {
        if rest.len() < ENTRY_HEADER {
            return Err(CheckpointError::Malformed("an entry is cut short"));
        }
        let key = JobKey(array(&rest[..16]));
        let len = u64::from_le_bytes(array(&rest[16..24]));
        rest = &rest[ENTRY_HEADER..];
        let len = match usize::try_from(len) {
            Ok(len) if len <= rest.len() => len,
            _ => {
                return Err(CheckpointError::Malformed(
                    "a result is longer than the file",
                ))
            }
        };
        let (bytes, tail) = rest.split_at(len);
        entries.push((key, bytes.to_vec()));
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(CheckpointError::Malformed("bytes after the last entry"));
    }
    Ok(entries)
}

/// The first `N` bytes of `s`, which the caller has checked are there.
fn array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body with a correct digest, as a broken writer would produce.
    fn sealed(mut body: Vec<u8>) -> Vec<u8> {
        let d = Sha256::digest(&body);
        body.extend_from_slice(&d);
        body
    }

    fn header(count: u64) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b
    }

    #[test]
    fn empty_checkpoint_round_trips() {
        let file = encode(std::iter::empty::<(JobKey, Vec<u8>)>());
        assert_eq!(file.len(), HEADER + DIGEST);
        assert_eq!(decode(&file), Ok(vec![]));
    }

    #[test]
    fn header_errors_are_typed() {
        let file = encode([(JobKey([1; 16]), vec![1, 2, 3])]);
        assert_eq!(decode(&file[..10]), Err(CheckpointError::TooShort(10)));
        let mut bad = file.clone();
        bad[0] ^= 1;
        assert_eq!(decode(&bad), Err(CheckpointError::BadMagic));
        let mut bad = file.clone();
        bad[8] = 2;
        assert_eq!(decode(&bad), Err(CheckpointError::UnsupportedVersion(2)));
    }

    #[test]
    fn a_huge_count_or_length_with_a_valid_digest_is_malformed_not_an_allocation() {
        // count = u64::MAX but no entries: must not reserve u64::MAX entries.
        assert_eq!(
            decode(&sealed(header(u64::MAX))),
            Err(CheckpointError::Malformed("an entry is cut short"))
        );
        let mut body = header(1);
        body.extend_from_slice(&[7; 16]);
        body.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            decode(&sealed(body)),
            Err(CheckpointError::Malformed(
                "a result is longer than the file"
            ))
        );
        let mut body = header(0);
        body.push(0);
        assert_eq!(
            decode(&sealed(body)),
            Err(CheckpointError::Malformed("bytes after the last entry"))
        );
    }
}
