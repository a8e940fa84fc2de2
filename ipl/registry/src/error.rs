//! The error type of the registry.

use serde::{Deserialize, Serialize};

use crate::identifier::MemberId;

/// Result alias of this crate.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// Everything that can go wrong in a registry operation.
///
/// Serializable so that a network registry can ship it to clients unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RegistryError {
    /// The member is not (or no longer) in the pool: it never joined, it left,
    /// or it was declared dead.
    #[error("member {member} is not a member of pool {pool:?} (it never joined, it left, or it was declared dead)")]
    UnknownMember {
        /// The pool that was asked.
        pool: String,
        /// The id that was not found.
        member: MemberId,
    },
    /// No pool of that name exists.
    #[error("pool {0:?} does not exist")]
    UnknownPool(String),
    /// The closed-world pool already has all its members.
    #[error("pool {0:?} is closed: its configured number of members has already joined")]
    PoolClosed(String),
    /// The pool was terminated; it accepts no new members.
    #[error("pool {0:?} has been terminated and accepts no new members")]
    PoolTerminated(String),
    /// `wait_until_pool_closed` was called on an open-world pool.
    #[error("pool {0:?} is an open-world pool (no size configured), so it never closes")]
    NotClosedWorld(String),
    /// A pool configuration is invalid.
    #[error("invalid pool configuration: {0}")]
    InvalidConfig(String),
    /// Joining a pool with a configuration that differs from the pool's.
    #[error(
        "pool {pool:?} exists with size {existing:?}, but a join asked for size {requested:?}"
    )]
    ConfigMismatch {
        /// The pool.
        pool: String,
        /// Its configured size.
        existing: Option<usize>,
        /// The size the joiner asked for.
        requested: Option<usize>,
    },
    /// A bounded wait expired.
    #[error("timed out waiting for the registry")]
    Timeout,
    /// The connection to the registry is gone (network drivers).
    #[error("disconnected from the registry: {0}")]
    Disconnected(String),
    /// The registry refused the connection: the pool secret did not match
    /// (mutual authentication failed), or the peer is not an IPL registry.
    #[error("the registry refused the connection: {0}")]
    Refused(String),
    /// The registry sent something that is not valid protocol (network drivers).
    #[error("registry protocol error: {0}")]
    Protocol(String),
    /// `next_event` was called while an event handler consumes the events.
    #[error("an event handler is installed; events are delivered to it, not to next_event")]
    EventHandlerInstalled,
    /// A second event handler was installed.
    #[error("an event handler is already installed for this member")]
    HandlerAlreadySet,
    /// The upcall thread could not be started.
    #[error("could not start the registry event thread: {0}")]
    Thread(String),
    /// The registry server sent nothing (not even a heartbeat) for longer than
    /// the heartbeat timeout: it is frozen, or the link to it is cut. The
    /// connection is closed; the server declares its members dead.
    #[error("the registry server did not answer for {silent_ms} ms (heartbeat timeout {timeout_ms} ms): it is frozen or unreachable")]
    HeartbeatTimeout {
        /// How long nothing arrived.
        silent_ms: u64,
        /// The heartbeat timeout in force.
        timeout_ms: u64,
    },
    /// The registry's address is not a usable `host:port` (a local configuration
    /// error: nothing was sent).
    #[error("the registry address cannot be used: {0}")]
    BadAddress(String),
    /// The registry server turned the connection away because it is at its bound of
    /// connections in the handshake (`ipl-server --max-handshakes`), for as long as
    /// the client retried (its connect timeout). Retry later, or raise the bound.
    #[error("the registry is busy: it turned the connection away with {in_progress} handshakes in progress, for the {waited_ms} ms this client retried; retry later (or raise ipl-server --max-handshakes)")]
    Busy {
        /// The connections in the handshake at the last refusal.
        in_progress: u32,
        /// How long the client retried.
        waited_ms: u64,
    },
}
