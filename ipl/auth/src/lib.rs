//! Pool secrets, and the mutual challenge-response by which two parties prove that they
//! know the same secret without sending it.
//!
//! A pool is closed to strangers: the launcher creates a [`PoolSecret`] and hands it to
//! its processes (environment variable [`SECRET_ENV`], hex, or a file only its owner can
//! read, named by [`SECRET_FILE_ENV`]: see [`secret_file`]); the registry join and every
//! transport connection run this handshake first. It is a sans-IO state machine over
//! three fixed-size messages:
//!
//! 1. initiator → responder: `Hello` = nonce_i (32 bytes);
//! 2. responder → initiator: `Challenge` = nonce_r ‖ HMAC(secret, context ‖ "R" ‖ nonce_i ‖ nonce_r);
//! 3. initiator → responder: `Finish` = HMAC(secret, context ‖ "I" ‖ nonce_i ‖ nonce_r).
//!
//! Both sides check the other's MAC in constant time. The context binds the proof to
//! its purpose (e.g. `"ipl-registry"` or `"ipl-tcp"`) and pool, so a proof for one use
//! is worthless for another; fresh nonces make replays fail.
//!
//! ```
//! use ipl_auth::{Initiator, PoolSecret, Responder};
//!
//! let secret = PoolSecret::generate().unwrap();
//! let (initiator, hello) = Initiator::start(&secret, b"ipl-tcp/pool-a").unwrap();
//! let (responder, challenge) = Responder::on_hello(&secret, b"ipl-tcp/pool-a", &hello).unwrap();
//! let finish = initiator.on_challenge(&challenge).unwrap();
//! responder.on_finish(&finish).unwrap();
//!
//! // A stranger with another secret is refused on both sides.
//! let stranger = PoolSecret::generate().unwrap();
//! let (initiator, hello) = Initiator::start(&stranger, b"ipl-tcp/pool-a").unwrap();
//! let (_, challenge) = Responder::on_hello(&secret, b"ipl-tcp/pool-a", &hello).unwrap();
//! assert!(initiator.on_challenge(&challenge).is_err());
//! ```

#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub mod admission;
pub mod secret_file;

pub use secret_file::{SecretFileProblem, SECRET_FILE_ENV};

/// The environment variable that carries a pool's secret (64 hex digits).
pub const SECRET_ENV: &str = "IPL_POOL_SECRET";

/// Size of a nonce and of a MAC.
pub const LEN: usize = 32;
/// Size of the `Hello` message.
pub const HELLO_LEN: usize = LEN;
/// Size of the `Challenge` message.
pub const CHALLENGE_LEN: usize = 2 * LEN;
/// Size of the `Finish` message.
pub const FINISH_LEN: usize = LEN;

type HmacSha256 = Hmac<Sha256>;

/// What can go wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The peer does not know the pool's secret (or it is another pool).
    #[error("the peer does not know this pool's secret")]
    BadProof,
    /// A message has the wrong size.
    #[error("handshake message of {got} bytes, expected {expected}")]
    BadLength {
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// The secret's text form is malformed.
    #[error("malformed pool secret: {0}")]
    BadSecret(String),
    /// No secret is configured.
    #[error("no pool secret: set {SECRET_ENV}, or {SECRET_FILE_ENV} to a file only you can read (ipl-run does this for its processes)")]
    Missing,
    /// A secret file was refused (see [`secret_file`]).
    #[error("pool secret file {}: {problem}", path.display())]
    SecretFile {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        problem: SecretFileProblem,
    },
    /// The operating system's random source failed.
    #[error("random source failed: {0}")]
    Random(String),
}

/// A pool's shared secret: 32 random bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolSecret([u8; LEN]);

impl fmt::Debug for PoolSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PoolSecret(..)")
    }
}

impl PoolSecret {
    /// A new random secret.
    pub fn generate() -> Result<Self, AuthError> {
        Ok(PoolSecret(random()?))
    }

    /// Wraps raw bytes.
    pub fn from_bytes(b: [u8; LEN]) -> Self {
        PoolSecret(b)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Self, AuthError> {
        let s = s.trim();
        if s.len() != 2 * LEN {
            return Err(AuthError::BadSecret(format!(
                "{} characters, expected {}",
                s.len(),
                2 * LEN
            )));
        }
        let mut out = [0u8; LEN];
        for (i, o) in out.iter_mut().enumerate() {
            let pair = s
                .get(2 * i..2 * i + 2)
                .ok_or_else(|| AuthError::BadSecret("not ASCII".into()))?;
            *o = u8::from_str_radix(pair, 16)
                .map_err(|_| AuthError::BadSecret(format!("not hex: {pair:?}")))?;
        }
        Ok(PoolSecret(out))
    }

    /// The secret as 64 hex digits (to hand to child processes).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads the secret from [`SECRET_ENV`] if it is set (and not empty),
    /// otherwise from the file named by [`SECRET_FILE_ENV`] (see
    /// [`from_file`](Self::from_file)); [`AuthError::Missing`] if neither is set.
    pub fn from_env() -> Result<Self, AuthError> {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(s) = var(SECRET_ENV) {
            return Self::from_hex(
                s.to_str()
                    .ok_or_else(|| AuthError::BadSecret("not ASCII".into()))?,
            );
        }
        match var(SECRET_FILE_ENV) {
            Some(path) => Self::from_file(Path::new(&path)),
            None => Err(AuthError::Missing),
        }
    }

    /// Reads the secret from `path`: a regular file owned by the current user,
    /// with no permission for its group or others (e.g. mode `0600`), holding
    /// 64 hex digits and an optional newline. Anything else is refused with
    /// [`AuthError::SecretFile`], naming the file and the reason.
    pub fn from_file(path: &Path) -> Result<Self, AuthError> {
        secret_file::read(path)
    }

    fn mac(&self, context: &[u8], role: u8, ni: &[u8; LEN], nr: &[u8; LEN]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        m.update(&(context.len() as u64).to_le_bytes());
        m.update(context);
        m.update(&[role]);
        m.update(ni);
        m.update(nr);
        m
    }
}

fn random() -> Result<[u8; LEN], AuthError> {
    let mut b = [0u8; LEN];
    getrandom::getrandom(&mut b).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(b)
}

fn fixed<const N: usize>(msg: &[u8]) -> Result<[u8; N], AuthError> {
    msg.try_into().map_err(|_| AuthError::BadLength {
        got: msg.len(),
        expected: N,
    })
}

/// The side that opens the connection.
#[derive(Debug)]
pub struct Initiator {
    secret: PoolSecret,
    context: Vec<u8>,
    nonce: [u8; LEN],
}

impl Initiator {
    /// Starts a handshake; send the returned `Hello`.
    pub fn start(
        secret: &PoolSecret,
        context: &[u8],
    ) -> Result<(Self, [u8; HELLO_LEN]), AuthError> {
        let nonce = random()?;
        Ok((
            Initiator {
                secret: secret.clone(),
                context: context.to_vec(),
                nonce,
            },
            nonce,
        ))
    }

    /// Checks the responder's `Challenge`; on success send the returned `Finish`.
    pub fn on_challenge(self, challenge: &[u8]) -> Result<[u8; FINISH_LEN], AuthError> {
        let c: [u8; CHALLENGE_LEN] = fixed(challenge)?;
        let mut nr = [0u8; LEN];
        nr.copy_from_slice(&c[..LEN]);
        self.secret
            .mac(&self.context, b'R', &self.nonce, &nr)
            .verify_slice(&c[LEN..])
            .map_err(|_| AuthError::BadProof)?;
        let proof = self
            .secret
            .mac(&self.context, b'I', &self.nonce, &nr)
            .finalize();
        Ok(proof.into_bytes().into())
    }
}

/// The side that accepts the connection.
#[derive(Debug)]
pub struct Responder {
    secret: PoolSecret,
    context: Vec<u8>,
    ni: [u8; LEN],
    nr: [u8; LEN],
}

impl Responder {
    /// Answers a `Hello`; send the returned `Challenge`.
    pub fn on_hello(
        secret: &PoolSecret,
        context: &[u8],
        hello: &[u8],
    ) -> Result<(Self, [u8; CHALLENGE_LEN]), AuthError> {
        let ni: [u8; LEN] = fixed(hello)?;
        let nr = random()?;
        let proof = secret.mac(context, b'R', &ni, &nr).finalize().into_bytes();
        let mut out = [0u8; CHALLENGE_LEN];
        out[..LEN].copy_from_slice(&nr);
        out[LEN..].copy_from_slice(&proof);
        Ok((
            Responder {
                secret: secret.clone(),
                context: context.to_vec(),
                ni,
                nr,
            },
            out,
        ))
    }

    /// Checks the initiator's `Finish`.
    pub fn on_finish(self, finish: &[u8]) -> Result<(), AuthError> {
        let f: [u8; FINISH_LEN] = fixed(finish)?;
        self.secret
            .mac(&self.context, b'I', &self.ni, &self.nr)
            .verify_slice(&f)
            .map_err(|_| AuthError::BadProof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        a: &PoolSecret,
        b: &PoolSecret,
        ca: &[u8],
        cb: &[u8],
    ) -> (Result<(), AuthError>, Result<(), AuthError>) {
        let (i, hello) = Initiator::start(a, ca).unwrap();
        let (r, ch) = Responder::on_hello(b, cb, &hello).unwrap();
        match i.on_challenge(&ch) {
            Ok(fin) => (Ok(()), r.on_finish(&fin)),
            Err(e) => (Err(e), Err(AuthError::BadProof)),
        }
    }

    #[test]
    fn same_secret_and_context_succeeds() {
        let s = PoolSecret::generate().unwrap();
        assert_eq!(run(&s, &s, b"x", b"x"), (Ok(()), Ok(())));
    }

    #[test]
    fn wrong_secret_or_context_fails_on_both_sides() {
        let s = PoolSecret::generate().unwrap();
        let t = PoolSecret::generate().unwrap();
        assert_eq!(run(&s, &t, b"x", b"x").0, Err(AuthError::BadProof));
        assert_eq!(run(&s, &s, b"x", b"y").0, Err(AuthError::BadProof));
    }

    #[test]
    fn a_forged_finish_is_refused() {
        let s = PoolSecret::generate().unwrap();
        let (_i, hello) = Initiator::start(&s, b"c").unwrap();
        let (r, _) = Responder::on_hello(&s, b"c", &hello).unwrap();
        assert_eq!(r.on_finish(&[0u8; FINISH_LEN]), Err(AuthError::BadProof));
    }

    #[test]
    fn replayed_finish_fails_against_a_fresh_nonce() {
        let s = PoolSecret::generate().unwrap();
        let (i, hello) = Initiator::start(&s, b"c").unwrap();
        let (r1, ch) = Responder::on_hello(&s, b"c", &hello).unwrap();
        let fin = i.on_challenge(&ch).unwrap();
        r1.on_finish(&fin).unwrap();
        let (r2, _) = Responder::on_hello(&s, b"c", &hello).unwrap();
        assert_eq!(r2.on_finish(&fin), Err(AuthError::BadProof));
    }

    #[test]
    fn bad_lengths_and_hex_are_typed_errors() {
        let s = PoolSecret::generate().unwrap();
        assert!(matches!(
            Responder::on_hello(&s, b"c", &[1, 2, 3]),
            Err(AuthError::BadLength { got: 3, .. })
        ));
        let (i, _) = Initiator::start(&s, b"c").unwrap();
        assert!(matches!(
            i.on_challenge(&[0; 5]),
            Err(AuthError::BadLength { .. })
        ));
        assert_eq!(PoolSecret::from_hex(&s.to_hex()).unwrap(), s);
        assert!(PoolSecret::from_hex("zz").is_err());
        assert!(PoolSecret::from_hex(&"g".repeat(64)).is_err());
        assert!(PoolSecret::from_hex(&"é".repeat(32)).is_err());
    }
}

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
