//! [`JobKey`]: the identity of a job that survives crashes and redos.
//!
//! Satin's fault tolerance finds the saved result of a job that is redone. The job
//! must therefore be named by something every process computes the same way for the
//! same job, in this run and in a later one that resumes from a checkpoint. Satin jobs
//! are referentially transparent (a result depends only on the job's parameters), so
//! the job's type and parameters are such a name: the fault-tolerance paper keys its
//! global result table the same way. A key is a SHA-256 digest of the registered
//! type name and the serialized parameters, cut to 128 bits: a result is never used
//! for another job unless SHA-256 is broken, and a key is small whatever the size of
//! the parameters (the journal's concern about keying by parameters).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The identity of a remote-capable job: a digest of its type name and parameters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobKey(pub [u8; 16]);

impl JobKey {
    /// The key of a job of the registered type `name` whose serialized parameters
    /// are `params`.
    pub fn of(name: &str, params: &[u8]) -> JobKey {
        let mut h = Sha256::new();
        // The length first: ("ab", "c") and ("a", "bc") are different jobs.
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(params);
        let d = h.finalize();
        let mut k = [0u8; 16];
        k.copy_from_slice(&d[..16]);
        JobKey(k)
    }
}

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobKey({self})")
    }
}

impl std::fmt::Display for JobKey {
    /// The first 8 bytes in hex: enough to tell keys apart in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_job_same_key_and_different_jobs_differ() {
        assert_eq!(JobKey::of("fib", &[1, 2]), JobKey::of("fib", &[1, 2]));
        assert_ne!(JobKey::of("fib", &[1, 2]), JobKey::of("fib", &[1, 3]));
        assert_ne!(JobKey::of("fib", &[1]), JobKey::of("fic", &[1]));
        // The name's length is part of the digest: no ambiguity at the boundary.
        assert_ne!(JobKey::of("ab", b"c"), JobKey::of("a", b"bc"));
    }

    #[test]
    fn display_is_the_first_eight_bytes_in_hex() {
        let k = JobKey([0xab; 16]);
        assert_eq!(k.to_string(), "abababababababab");
        assert_eq!(format!("{k:?}"), "JobKey(abababababababab)");
    }
}
