//! The crate's error type.

use std::time::Duration;

/// Everything that can go wrong with a replicated object. Never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepError {
    /// The Ibis instance was built without a capability the group needs.
    #[error("the Ibis instance lacks capability {0} (add it to IbisBuilder::capabilities)")]
    MissingCapability(&'static str),
    /// The Ibis instance was built without the replication port types.
    #[error("the Ibis instance was built without the replication port types (use ibis_repmi::declare on the builder): {0}")]
    PortTypesNotDeclared(String),
    /// This Ibis instance is a member of the group already.
    #[error("this member has joined replicated object {0:?} already")]
    AlreadyJoined(String),
    /// The object name is empty or contains '/'.
    #[error("invalid object name {0:?}: it must be non-empty and without '/'")]
    InvalidName(String),
    /// Something did not happen in time. For a write this means its outcome is unknown:
    /// it may still be applied everywhere later.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        after: Duration,
    },
    /// A guard (predicate on the local copy) did not become true in time.
    #[error("guard did not hold within {0:?}")]
    GuardTimeout(Duration),
    /// The sequencer is gone (left, crashed, or unreachable): no write can be ordered.
    /// Reads keep working on the last state.
    #[error("the sequencer is gone: {0}")]
    SequencerLost(String),
    /// The sequencer refused this member (e.g. it replicates another type).
    #[error("the sequencer refused to admit this member: {0}")]
    Refused(String),
    /// The local copy stopped following the stream (an operation from the sequencer
    /// could not be decoded or applied); it keeps its last good state.
    #[error("the local replica stopped applying operations: {0}")]
    Diverged(String),
    /// An operation or state could not be encoded.
    #[error("cannot encode: {0}")]
    Encode(ipl::IplError),
    /// The IPL failed.
    #[error(transparent)]
    Ipl(#[from] ipl::IplError),
    /// The registry failed.
    #[error(transparent)]
    Registry(#[from] ipl::RegistryError),
}

/// The crate's result type.
pub type Result<T, E = RepError> = std::result::Result<T, E>;
