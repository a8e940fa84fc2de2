//! The IPL registry: membership, elections, signals and termination of an
//! Ibis pool.
//!
//! Every Ibis instance is a *member* of a named *pool*. The registry tells each
//! member who joined, left or died, in one total order that all members share
//! ([`Event`]s with a per-pool [`Seq`]); runs *strict elections* (the first
//! candidate wins, everyone gets the same winner); delivers *signals*; closes a
//! *closed-world* pool once its configured number of members joined; lets any
//! member *terminate* the pool; and handles failure suspicion
//! (`maybe_dead` probes, `assume_dead` declares).
//!
//! # Core and drivers
//!
//! Like `quinn-proto` under `quinn`, the logic is a sans-IO core and the I/O
//! lives in drivers:
//!
//! * [`core`]: [`PoolState`] / [`RegistryCore`], a pure deterministic state
//!   machine (no threads, clocks or I/O). It queues events per member; a
//!   driver delivers them. It cannot probe liveness, so
//!   [`PoolState::maybe_dead`] returns a [`MaybeDead`] telling the driver what
//!   to do.
//! * [`RegistryBackend`]: what a member handle needs from a driver (operations
//!   that return promptly, plus a change counter to block or await on).
//! * [`EmbeddedRegistry`]: the in-process driver (core in a mutex + condvar +
//!   async wakers). A network client/server pair can implement the same
//!   backend around the same core.
//! * [`net`]: that network pair. [`RegistryServer`] serves a core over TCP
//!   (every connection authenticated with the pool secret, events pushed as
//!   they happen, dropped connections reported as `Died`), and
//!   [`NetRegistry`] is the client backend.
//! * [`Registry`]: the per-member handle, with blocking (bounded by timeouts)
//!   and async waits, and event delivery via [`Registry::next_event`] or a
//!   [`RegistryEventHandler`] upcall thread.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use ipl_registry::{EmbeddedRegistry, Event, JoinRequest, PoolConfig};
//!
//! # fn main() -> Result<(), ipl_registry::RegistryError> {
//! let registry = EmbeddedRegistry::new();
//! let config = PoolConfig::closed_world(2);
//! let a = registry.join("pool", config, JoinRequest::new("cluster-a").with_name("a"))?;
//! let b = registry.join("pool", config, JoinRequest::new("cluster-b"))?;
//! a.wait_until_pool_closed(Some(Duration::from_secs(5)))?;
//!
//! // Strict election: the first candidate wins, everybody agrees.
//! let master = b.elect("master")?;
//! assert_eq!(a.elect("master")?, master);
//!
//! // Everyone sees the same membership order.
//! let t = Some(Duration::from_secs(5));
//! assert_eq!(a.next_event(t)?, Some(Event::Joined(a.identifier().clone())));
//! assert_eq!(a.next_event(t)?, Some(Event::Joined(b.identifier().clone())));
//!
//! a.signal("hello", &[b.identifier().clone()])?;
//! b.leave()?;
//! a.leave()?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod backend;
pub mod core;
pub mod embedded;
pub mod error;
pub mod event;
pub mod handle;
pub mod identifier;
pub mod net;

pub use crate::backend::RegistryBackend;
pub use crate::core::{JoinRequest, MaybeDead, PoolConfig, PoolState, PoolStatus, RegistryCore};
pub use crate::embedded::EmbeddedRegistry;
pub use crate::error::{RegistryError, Result};
pub use crate::event::{Event, RegistryEventHandler, Seq};
pub use crate::handle::{Registry, EVENT_THREAD_NAME};
pub use crate::identifier::{IbisIdentifier, MemberId, TransportAddress};
pub use crate::net::{NetRegistry, RegistryServer, ServerHandle};

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
