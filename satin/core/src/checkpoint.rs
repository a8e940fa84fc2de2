//! The byte format of a checkpoint file: saved results as `(key, bytes)`.
//!
//! The journal version of Satin checkpoints the orphan-result structures so a
//! run survives the loss of every member and can resume elsewhere. A checkpoint
//! holds a member's stored results ([`Recovery::checkpoint_entries`]); after a
//! restart they go back with [`Recovery::restore`], and a job whose key is found
//! is not recomputed. The driver writes and reads the files; this module only
//! turns entries into bytes and back.
//!
//! A result is only valid for the program that computed it: a job's key covers
//! its type name and parameters, not the code of its `run` nor the program's
//! input. So every file carries a [`Fingerprint`] of what wrote it (the driver
//! hashes the executable, its arguments and an optional tag, see
//! [`FingerprintHasher`]), and a reader uses only files with its own.
//!
//! # Format (version 2)
//!
//! All integers little-endian.
//!
//! | field | size | content |
//! |---|---|---|
//! | magic | 8 | `SATINCKP` |
//! | version | 4 | `2` |
//! | fingerprint | 32 | what wrote the file ([`Fingerprint`]) |
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
//! use satin_core::checkpoint::{decode, encode, fingerprint_of, CheckpointError, FingerprintHasher};
//! use satin_core::JobKey;
//!
//! let mut h = FingerprintHasher::new();
//! h.part(b"the program's arguments");
//! let fp = h.finish();
//! let key = JobKey::of("fib", &[30]);
//! let file = encode(&fp, [(key, b"832040".as_slice())]);
//! let read = decode(&file).unwrap();
//! assert_eq!((read.fingerprint, read.entries), (fp, vec![(key, b"832040".to_vec())]));
//! assert_eq!(fingerprint_of(&file[..60]), Ok(fp));
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
pub const VERSION: u32 = 2;

/// The length of the header: magic, version, fingerprint and count (the
/// bytes [`fingerprint_of`] needs).
pub const HEADER_LEN: usize = HEADER;

const HEADER: usize = 8 + 4 + 32 + 8;
const COUNT_AT: usize = 8 + 4 + 32;
const DIGEST: usize = 32;
const ENTRY_HEADER: usize = 16 + 8;

/// What wrote a checkpoint: a SHA-256 digest of the program (its executable),
/// its input (arguments) and an optional user tag, made by [`FingerprintHasher`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The first 4 bytes in hex (8 characters), for file names.
    pub fn short(&self) -> String {
        hex(&self.0[..4])
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fingerprint({})", self.short())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Computes a [`Fingerprint`] from parts (each length-prefixed, so parts never
/// run into each other) and streamed bytes.
#[derive(Clone, Default)]
pub struct FingerprintHasher(Sha256);

impl FingerprintHasher {
    /// A hasher with nothing hashed yet (but the format's domain).
    pub fn new() -> Self {
        let mut h = Sha256::new();
        h.update(b"satin checkpoint fingerprint v1\0");
        FingerprintHasher(h)
    }

    /// Hashes one part: its length, then its bytes.
    pub fn part(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    /// Hashes bytes as they come (a large part streamed in pieces); end the part
    /// with a [`FingerprintHasher::part`] of its length or any separator.
    pub fn stream(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The fingerprint of everything hashed.
    pub fn finish(self) -> Fingerprint {
        Fingerprint(self.0.finalize().into())
    }
}

/// A decoded checkpoint file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// What wrote it.
    pub fingerprint: Fingerprint,
    /// The saved results, in file order.
    pub entries: Vec<(JobKey, Vec<u8>)>,
}

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

/// Encodes `entries` as the bytes of a checkpoint file written by `fingerprint`.
pub fn encode<B: AsRef<[u8]>>(
    fingerprint: &Fingerprint,
    entries: impl IntoIterator<Item = (JobKey, B)>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + DIGEST);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&fingerprint.0);
    out.extend_from_slice(&0u64.to_le_bytes());
    let mut count = 0u64;
    for (key, bytes) in entries {
        let bytes = bytes.as_ref();
        out.extend_from_slice(&key.0);
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
        count += 1;
    }
    out[COUNT_AT..HEADER].copy_from_slice(&count.to_le_bytes());
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    out
}

/// The fingerprint of the file that starts with `head` (at least
/// [`HEADER_LEN`] bytes of it), without reading the rest: to skip another
/// program's files unread. Not checked against the digest ([`decode`] does).
pub fn fingerprint_of(head: &[u8]) -> Result<Fingerprint, CheckpointError> {
    if head.len() < HEADER {
        return Err(CheckpointError::TooShort(head.len()));
    }
    if head[..8] != MAGIC {
        return Err(CheckpointError::BadMagic);
    }
    let version = u32::from_le_bytes(array(&head[8..12]));
    if version != VERSION {
        return Err(CheckpointError::UnsupportedVersion(version));
    }
    Ok(Fingerprint(array(&head[12..COUNT_AT])))
}

/// Decodes a checkpoint file's bytes: what wrote it and its entries.
pub fn decode(file: &[u8]) -> Result<Checkpoint, CheckpointError> {
    if file.len() < HEADER + DIGEST {
        return Err(CheckpointError::TooShort(file.len()));
    }
    let fingerprint = fingerprint_of(file)?;
    let (body, digest) = file.split_at(file.len() - DIGEST);
    if Sha256::digest(body).as_slice() != digest {
        return Err(CheckpointError::Corrupt);
    }
    let count = u64::from_le_bytes(array(&body[COUNT_AT..HEADER]));
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
    Ok(Checkpoint {
        fingerprint,
        entries,
    })
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

    const FP: Fingerprint = Fingerprint([3; 32]);

    fn header(count: u64) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&FP.0);
        b.extend_from_slice(&count.to_le_bytes());
        b
    }

    #[test]
    fn empty_checkpoint_round_trips() {
        let file = encode(&FP, std::iter::empty::<(JobKey, Vec<u8>)>());
        assert_eq!(file.len(), HEADER + DIGEST);
        assert_eq!(
            decode(&file),
            Ok(Checkpoint {
                fingerprint: FP,
                entries: vec![]
            })
        );
    }

    #[test]
    fn header_errors_are_typed() {
        let file = encode(&FP, [(JobKey([1; 16]), vec![1, 2, 3])]);
        assert_eq!(decode(&file[..10]), Err(CheckpointError::TooShort(10)));
        assert_eq!(
            fingerprint_of(&file[..10]),
            Err(CheckpointError::TooShort(10))
        );
        assert_eq!(fingerprint_of(&file[..HEADER_LEN]), Ok(FP));
        let mut bad = file.clone();
        bad[0] ^= 1;
        assert_eq!(decode(&bad), Err(CheckpointError::BadMagic));
        let mut bad = file.clone();
        bad[8] = 1;
        assert_eq!(decode(&bad), Err(CheckpointError::UnsupportedVersion(1)));
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

    #[test]
    fn the_fingerprint_is_read_back_and_covered_by_the_digest() {
        let other = Fingerprint([4; 32]);
        let file = encode(&other, [(JobKey([1; 16]), b"x".as_slice())]);
        assert_eq!(decode(&file).unwrap().fingerprint, other);
        assert_ne!(decode(&file).unwrap().fingerprint, FP);
        // Rewriting the fingerprint of a file breaks its digest.
        let mut forged = file.clone();
        forged[12..COUNT_AT].copy_from_slice(&FP.0);
        assert_eq!(decode(&forged), Err(CheckpointError::Corrupt));
    }

    #[test]
    fn fingerprints_differ_by_every_part_and_by_how_parts_are_cut() {
        let fp = |parts: &[&[u8]]| {
            let mut h = FingerprintHasher::new();
            for p in parts {
                h.part(p);
            }
            h.finish()
        };
        assert_eq!(fp(&[b"prog", b"25"]), fp(&[b"prog", b"25"]));
        assert_ne!(fp(&[b"prog", b"25"]), fp(&[b"prog", b"26"]));
        assert_ne!(fp(&[b"prog", b"25"]), fp(&[b"prog2", b"5"]));
        assert_ne!(fp(&[b"prog", b"25"]), fp(&[b"prog", b"25", b""]));
        assert_eq!(fp(&[b"prog"]).short().len(), 8);
    }
}
