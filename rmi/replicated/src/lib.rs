//! Replicated objects over the IPL: RepMI (thesis 5.2.5) and Satin-style shared objects.
//!
//! A replicated object is a value of a type implementing [`Replicated`], with a copy on
//! every member of a *group* (the members that joined the object's name). Reads run on
//! the local copy without communication. Writes are *operations*: serde values applied
//! by the deterministic [`Replicated::apply`] ("function shipping").
//!
//! - [`Replica`] (RepMI): writes are totally ordered. The member that wins the registry
//!   election `repmi:<name>` is the *sequencer*: writers send their operation to it, it
//!   gives each a sequence number, applies it to its own copy and multicasts it (one
//!   one-to-many send port) to every other copy. Copies apply operations in
//!   sequence-number order, holding back any that arrive early. A write returns after
//!   the writer's own copy applied it, with the output of that application, so a member
//!   reads its own writes; [`Replica::sync`] makes all earlier writes of others visible.
//! - [`SharedObject`] (Satin): writes are applied locally at once and propagated
//!   without waiting; [`SharedObject::guard`] waits for a predicate on the local copy
//!   and falls back on fetching the hub's copy (guard consistency).
//! - A member that joins later gets a *state transfer*: the sequencer connects its
//!   multicast to the newcomer, then sends a snapshot tagged with the last sequence
//!   number it covers; the newcomer drops held operations the snapshot covers and
//!   applies the rest in order.
//!
//! Every failure is a typed [`RepError`]: a lost sequencer, a timeout, a refused join
//! (another type), a missing capability or port type. Malformed messages are logged and
//! dropped; a copy that cannot apply the sequencer's stream stops and says so
//! ([`RepError::Diverged`]).
//!
//! Not provided: sequencer fail-over (the group lives as long as its sequencer), and
//! cluster-aware broadcast trees.
//!
//! ```
//! use ibis_repmi::{declare, Replica, Replicated};
//! use ipl::{EmbeddedRegistry, Ibis, IbisCapabilities as C};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Minimum(u32);
//! impl Replicated for Minimum {
//!     type Op = u32;
//!     type Output = bool;
//!     fn apply(&mut self, new: &u32) -> bool {
//!         let better = *new < self.0;
//!         if better { self.0 = *new }
//!         better
//!     }
//! }
//!
//! let reg = EmbeddedRegistry::new();
//! let member = || declare(Ibis::builder().pool("doc").registry(&reg)
//!     .capabilities(C::MEMBERSHIP | C::ELECTIONS)).build();
//! let (a, b) = (member()?, member()?);
//! let ra = Replica::join(&a, "min", || Minimum(u32::MAX))?;
//! let rb = Replica::join(&b, "min", || Minimum(u32::MAX))?;
//! assert!(rb.write(17)?);                // ordered; applied here before it returns
//! assert_eq!(rb.read(|m| m.0), 17);      // a local read
//! ra.sync()?;
//! assert_eq!(ra.read(|m| m.0), 17);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod codec;
mod error;
mod group;
pub mod holdback;
mod replica;
mod shared;
pub mod wire;

use std::time::Duration;

use ipl::{IbisBuilder, PortCapabilities as P, PortType};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use error::{RepError, Result};
pub use replica::Replica;
pub use shared::SharedObject;

/// A type whose values can be replicated: its state and its write operations are
/// serializable, and [`apply`](Self::apply) is deterministic (the same operations in the
/// same order give the same state on every member).
pub trait Replicated: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// A write operation (a "write method" call with its arguments, by value).
    type Op: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What applying an operation returns to the writer.
    type Output: Send + 'static;
    /// Applies one operation. Must be deterministic and must not call into the
    /// replica it belongs to.
    fn apply(&mut self, op: &Self::Op) -> Self::Output;
}

/// Options of a group member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Bound for joining (connect and state transfer), for a write or sync to come
    /// back, and for connections the sequencer makes. Default 30 s.
    pub timeout: Duration,
    /// Most operations a copy holds back waiting for an earlier one (or for its
    /// snapshot) before it gives up. Default 1,000,000.
    pub hold_limit: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(30),
            hold_limit: 1_000_000,
        }
    }
}

impl Options {
    /// Sets [`timeout`](Self::timeout).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
}

/// Builds a port type from a capability set that is valid by construction: each set
/// used here has a connection pattern, a receive mode, a serialization and one
/// reliability, which is all [`PortType::new`] checks (see the test below).
fn valid(caps: P) -> PortType {
    PortType::new(caps).expect("the replication port types are valid by construction")
}

/// The port type of requests to the sequencer (many-to-one, upcalls, bytes).
pub fn request_type() -> PortType {
    valid(
        P::CONNECTION_MANY_TO_ONE
            | P::RECEIVE_AUTO_UPCALLS
            | P::SERIALIZATION_BYTE
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
}

/// The port type of the sequencer's stream to the copies (one-to-many multicast, and
/// many-to-one so a snapshot port may connect too; upcalls; connection upcalls).
pub fn replica_type() -> PortType {
    valid(
        P::CONNECTION_ONE_TO_MANY
            | P::CONNECTION_MANY_TO_ONE
            | P::CONNECTION_UPCALLS
            | P::RECEIVE_AUTO_UPCALLS
            | P::SERIALIZATION_BYTE
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
}

/// The port types an Ibis instance must declare to join replicated objects.
pub fn port_types() -> [PortType; 2] {
    [request_type(), replica_type()]
}

/// Declares [`port_types`] on a builder.
pub fn declare(b: IbisBuilder) -> IbisBuilder {
    port_types().into_iter().fold(b, |b, t| b.port_type(t))
}

#[cfg(test)]
mod tests {
    #[test]
    fn port_types_are_valid_and_distinct() {
        let [a, b] = super::port_types();
        assert_ne!(a, b);
        assert!(b.capabilities().allows_many_receivers());
        assert!(b.capabilities().allows_many_senders());
    }
}

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
