//! [`SharedObject`]: Satin-style shared objects with best-effort updates and guards.

use std::time::{Duration, Instant};

use ipl::Ibis;

use crate::error::{RepError, Result};
use crate::group::{Group, Mode};
use crate::{Options, Replicated};

/// This member's copy of a shared object with *guard consistency* (Satin, journal
/// paper section 3.2).
///
/// Consistency, as promised (weaker than what the implementation happens to give):
/// - a [`write`](Self::write) is applied to the local copy at once and returns without
///   waiting for anybody; it is then propagated to the other copies;
/// - other members apply it when it arrives; no common order of writes is promised,
///   so copies may differ for operations that do not commute, and a member may see its
///   own write before earlier writes of others;
/// - a [`guard`](Self::guard) waits until a predicate holds on the local copy; if it
///   does not hold within half the patience, the local copy is replaced by a fresh one
///   from the group's hub ("data shipping"), then the guard waits for the rest.
///
/// What the current implementation does: updates go through the hub (the member that
/// won the object's election), which applies and relays them over reliable FIFO
/// connections, so every update reaches every member that is in the group while the
/// hub lives, and remote updates arrive in the hub's order. A later version may
/// multicast directly or gossip; programs must rely on guards only.
pub struct SharedObject<T: Replicated> {
    group: Group<T>,
}

impl<T: Replicated> std::fmt::Debug for SharedObject<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedObject")
            .field("object", &self.group.name())
            .field("hub", &self.group.sequencer().to_string())
            .finish()
    }
}

impl<T: Replicated> SharedObject<T> {
    /// Joins the shared object `name` with default [`Options`]; `init` is called only
    /// if this member becomes the hub. Needs what [`Replica::join`](crate::Replica::join)
    /// needs.
    pub fn join(ibis: &Ibis, name: &str, init: impl FnOnce() -> T) -> Result<Self> {
        Self::join_with(ibis, name, init, Options::default())
    }

    /// Joins with explicit options.
    pub fn join_with(
        ibis: &Ibis,
        name: &str,
        init: impl FnOnce() -> T,
        opts: Options,
    ) -> Result<Self> {
        Ok(SharedObject {
            group: Group::join(ibis, name, init, Mode::BestEffort, opts)?,
        })
    }

    /// Runs `f` on the local copy (a local method).
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.group.read(f)
    }

    /// A global (write) method: applied here now, propagated to the others without
    /// waiting. Returns the output on this copy.
    pub fn write(&self, op: T::Op) -> Result<T::Output> {
        self.group.write_best_effort(&op)
    }

    /// Waits up to `patience` until `pred` holds on the local copy; fetches a fresh copy
    /// from the hub once, halfway, if it does not. `pred` runs under the object's locks
    /// and must not call into it.
    pub fn guard(&self, pred: impl Fn(&T) -> bool, patience: Duration) -> Result<()> {
        let start = Instant::now();
        match self.group.guard(&pred, patience / 2) {
            Err(RepError::GuardTimeout(_)) => {}
            other => return other,
        }
        tracing::debug!(
            object = self.group.name(),
            "guard failed; fetching a fresh copy"
        );
        self.group.refresh()?;
        let left = patience.saturating_sub(start.elapsed());
        self.group.guard(&pred, left).map_err(|e| match e {
            RepError::GuardTimeout(_) => RepError::GuardTimeout(patience),
            other => other,
        })
    }

    /// Replaces the local copy by the hub's current one.
    pub fn refresh(&self) -> Result<()> {
        self.group.refresh()
    }

    /// Whether this member is the hub.
    pub fn is_hub(&self) -> bool {
        self.group.is_sequencer()
    }

    /// Leaves the group (as dropping does).
    pub fn leave(self) {
        drop(self);
    }
}
