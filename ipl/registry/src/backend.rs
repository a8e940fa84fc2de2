//! [`RegistryBackend`]: what a member handle needs from a registry driver.

use std::task::{Poll, Waker};
use std::time::Instant;

use crate::core::{JoinRequest, PoolConfig, PoolStatus};
use crate::error::Result;
use crate::event::{Event, Seq};
use crate::identifier::IbisIdentifier;

/// The operations a member's [`Registry`](crate::Registry) handle needs,
/// implemented by a registry driver.
///
/// The in-process driver is [`EmbeddedRegistry`](crate::EmbeddedRegistry); a
/// network client is meant to implement the same trait (see the crate docs).
///
/// # Contract
///
/// * Operations return promptly (a network client may block for one
///   round-trip bounded by its own I/O timeout, reporting
///   [`RegistryError::Timeout`](crate::RegistryError::Timeout) or
///   [`RegistryError::Disconnected`](crate::RegistryError::Disconnected)).
///   They never wait for *other* members.
/// * Waiting is done by the handle with a change counter: [`version`](Self::version)
///   increases whenever anything a member could observe may have changed
///   (events queued, pool closed, election decided, ...). The handle reads the
///   version, checks its condition, and if unsatisfied calls
///   [`wait_for_change`](Self::wait_for_change) (blocking) or
///   [`poll_change`](Self::poll_change) (async) with the version it read, so no
///   change can be missed. Spurious wake-ups are allowed.
/// * Operations taking `me` act on behalf of that member and fail with
///   [`RegistryError::UnknownMember`](crate::RegistryError::UnknownMember) once
///   it left or was declared dead.
///
/// # Implementing it over a network
///
/// A client connects to a server that owns a [`RegistryCore`](crate::RegistryCore).
/// Requests (`join`, `elect`, `signal`, ...) are request/response round-trips
/// whose replies carry `Result<_, RegistryError>` (the error is serializable).
/// The server pushes each member's events (found via
/// [`PoolState::drain_touched`](crate::PoolState::drain_touched) and
/// [`PoolState::take_events`](crate::PoolState::take_events)) plus status
/// updates; a client-side receiver thread/task stores them in a local queue
/// and cache, bumps a local version, `notify_all`s a condvar and wakes the
/// registered wakers — exactly what the embedded driver does. `take_events`,
/// `members`, `pool_status` and `election_result` can then answer from the
/// cache. `abandon` closes the connection (the server declares the member
/// dead), `crash` stops answering the server's liveness probes, and the
/// server answers [`MaybeDead::ProbeNeeded`](crate::MaybeDead) by probing the
/// suspect's connection.
pub trait RegistryBackend: Send + Sync {
    /// Joins `pool` (created with `config` if new) and returns the new identity.
    fn join(&self, pool: &str, config: PoolConfig, request: JoinRequest) -> Result<IbisIdentifier>;

    /// `me` leaves gracefully (others get `Left`).
    fn leave(&self, me: &IbisIdentifier) -> Result<()>;

    /// `me`'s handle went away without leaving (dropped): the registry should
    /// declare it dead (others get `Died`). Best effort, cannot fail.
    fn abandon(&self, me: &IbisIdentifier);

    /// Fault injection: `me` stops responding without telling the registry, as
    /// a killed process would. Others learn it only through
    /// [`maybe_dead`](Self::maybe_dead). A network client would close its
    /// connection abruptly / stop answering probes.
    fn crash(&self, me: &IbisIdentifier);

    /// Strict election on behalf of `me`; returns the (first) winner.
    fn elect(&self, me: &IbisIdentifier, election: &str) -> Result<IbisIdentifier>;

    /// The current winner of `election`, without waiting.
    fn election_result(
        &self,
        me: &IbisIdentifier,
        election: &str,
    ) -> Result<Option<IbisIdentifier>>;

    /// Sends `signal` from `me` to `targets`.
    fn signal(&self, me: &IbisIdentifier, signal: &str, targets: &[IbisIdentifier]) -> Result<()>;

    /// `me` terminates the pool.
    fn terminate(&self, me: &IbisIdentifier) -> Result<()>;

    /// `me` suspects `suspect` is dead: the driver probes it and declares it
    /// dead if the probe fails. Non-members are ignored.
    fn maybe_dead(&self, me: &IbisIdentifier, suspect: &IbisIdentifier) -> Result<()>;

    /// `me` declares `suspect` dead. Non-members are ignored.
    fn assume_dead(&self, me: &IbisIdentifier, suspect: &IbisIdentifier) -> Result<()>;

    /// Removes and returns `me`'s queued events in sequence order.
    fn take_events(&self, me: &IbisIdentifier) -> Result<Vec<(Seq, Event)>>;

    /// The current members of `me`'s pool, in join order.
    fn members(&self, me: &IbisIdentifier) -> Result<Vec<IbisIdentifier>>;

    /// Whether `who` has departed from `me`'s pool: it left, or was declared dead, as
    /// far as `me` has been told. A member `me` has not heard of yet (it joined a moment
    /// ago and its `Joined` is still on the way, or it is of another pool) has *not*
    /// departed: only a reported departure counts. Cheap (no copy of the member
    /// list): asked about each peer of a waiting port once a second.
    fn is_gone(&self, me: &IbisIdentifier, who: &IbisIdentifier) -> Result<bool>;

    /// The status of `me`'s pool.
    fn pool_status(&self, me: &IbisIdentifier) -> Result<PoolStatus>;

    /// The current change counter.
    fn version(&self) -> u64;

    /// Blocks until the version differs from `seen` or `deadline` passes
    /// (`None`: no deadline). Returns the version then current (equal to
    /// `seen` on timeout).
    fn wait_for_change(&self, seen: u64, deadline: Option<Instant>) -> Result<u64>;

    /// Async counterpart of [`wait_for_change`](Self::wait_for_change):
    /// `Ready` with the new version if it differs from `seen`; otherwise
    /// registers `waker` to be woken on the next change and returns `Pending`.
    fn poll_change(&self, seen: u64, waker: &Waker) -> Poll<Result<u64>>;
}
