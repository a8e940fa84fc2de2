//! Helpers: members of one in-process pool, and a replicated log that records the order
//! in which operations were applied.
#![allow(dead_code)]

use ibis_repmi::{declare, Replicated};
use ipl::{EmbeddedRegistry, Ibis, IbisCapabilities as C};
use serde::{Deserialize, Serialize};

#[path = "../../../../tests/common/pool.rs"]
mod unique;
pub use unique::pool;

/// A generous bound for anything that should happen "soon" on a loaded machine.
pub const LONG: std::time::Duration = std::time::Duration::from_secs(20);

/// A member with elections and the replication port types.
pub fn member(reg: &EmbeddedRegistry, pool: &str) -> Ibis {
    declare(
        Ibis::builder()
            .pool(pool)
            .registry(reg)
            .capabilities(C::MEMBERSHIP | C::ELECTIONS),
    )
    .build()
    .expect("member builds")
}

/// An operation of the log: who wrote it and its number at the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub writer: u32,
    pub n: u32,
}

/// The order in which a copy applied operations.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Log {
    pub entries: Vec<Entry>,
}

impl Replicated for Log {
    type Op = Entry;
    /// The position at which the entry landed.
    type Output = usize;
    fn apply(&mut self, op: &Entry) -> usize {
        self.entries.push(*op);
        self.entries.len() - 1
    }
}

/// A counter, for best-effort (commutative) updates.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    pub total: u64,
    pub updates: u64,
}

impl Replicated for Counter {
    type Op = u64;
    type Output = u64;
    fn apply(&mut self, add: &u64) -> u64 {
        self.total += add;
        self.updates += 1;
        self.total
    }
}
