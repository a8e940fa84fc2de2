//! [`Replica`]: a RepMI replicated object with totally ordered writes.

use std::time::Duration;

use ipl::{Ibis, IbisIdentifier};

use crate::error::Result;
use crate::group::{Group, Mode};
use crate::{Options, Replicated};

/// This member's copy of a replicated object (RepMI, thesis 5.2.5).
///
/// - [`read`](Self::read) runs a closure on the local copy: no communication.
/// - [`write`](Self::write) sends an operation to the group's sequencer, which numbers
///   it and multicasts it; every copy applies all operations in the same order. The
///   write returns the output of applying it to *this* copy, so a member always reads
///   its own writes.
/// - A member that joins late receives a snapshot of the state and the operations that
///   follow it.
///
/// The group lives as long as its sequencer (the member that won the object's
/// election, normally the first to join): when it leaves or crashes, writes fail with
/// [`RepError::SequencerLost`](crate::RepError::SequencerLost) and reads keep the last
/// state. Dropping a replica leaves the group.
///
/// `Replica<T>` is `Sync`: share it between threads with an `Arc`.
pub struct Replica<T: Replicated> {
    group: Group<T>,
}

impl<T: Replicated> std::fmt::Debug for Replica<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("object", &self.group.name())
            .field("sequencer", &self.group.sequencer().to_string())
            .field("applied", &self.group.applied())
            .finish()
    }
}

impl<T: Replicated> Replica<T> {
    /// Joins the replicated object `name` with default [`Options`].
    ///
    /// `init` makes the initial state; it is called only if this member becomes the
    /// sequencer (wins the election `repmi:<name>`). Every other member waits for the
    /// state transfer. The Ibis instance needs the `elections` capability and the port
    /// types of [`port_types`](crate::port_types) (see [`declare`](crate::declare)).
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
        Ok(Replica {
            group: Group::join(ibis, name, init, Mode::Ordered, opts)?,
        })
    }

    /// Runs `f` on the local copy (a read method). It holds a read lock: `f` must not
    /// call back into this replica's writes.
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.group.read(f)
    }

    /// Applies `op` everywhere, in the group's total order, and returns its output on
    /// this copy. On [`Timeout`](crate::RepError::Timeout) the outcome is unknown.
    pub fn write(&self, op: T::Op) -> Result<T::Output> {
        self.group.write_ordered(&op)
    }

    /// Waits until this copy has applied every write ordered before the call (of any
    /// member). After a barrier, `sync` makes everybody's earlier writes visible here.
    pub fn sync(&self) -> Result<()> {
        self.group.sync()
    }

    /// Waits up to `timeout` until `pred` holds on the local copy (a guard). `pred` runs
    /// under the replica's locks and must not call into it.
    pub fn wait_for(&self, pred: impl Fn(&T) -> bool, timeout: Duration) -> Result<()> {
        self.group.guard(&pred, timeout)
    }

    /// Whether this member is the group's sequencer.
    pub fn is_sequencer(&self) -> bool {
        self.group.is_sequencer()
    }

    /// The group's sequencer.
    pub fn sequencer(&self) -> &IbisIdentifier {
        self.group.sequencer()
    }

    /// The sequence number of the last operation applied here (0: none yet).
    pub fn applied_seq(&self) -> u64 {
        self.group.applied()
    }

    /// Operations this copy applied itself (not counting those in its snapshot).
    pub fn ops_applied(&self) -> u64 {
        self.group.ops_applied()
    }

    /// Leaves the group (as dropping does).
    pub fn leave(self) {
        drop(self);
    }
}
