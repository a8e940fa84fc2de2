//! The local copy's bookkeeping: operations held until their turn, the outcomes
//! writers wait for, applying operations, and the bounded waits on all of it.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::{Inner, Mode};
use crate::codec;
use crate::error::{RepError, Result};
use crate::holdback::HoldBack;
use crate::Replicated;

/// An operation of the stream, held until its turn.
pub(super) struct Entry {
    pub(super) origin: u64,
    pub(super) req: u64,
    pub(super) op: Option<Vec<u8>>,
}

pub(super) enum Outcome<O> {
    Waiting,
    Applied(O),
    Synced,
}

pub(super) struct Meta<O> {
    pub(super) order: HoldBack<Entry>,
    pub(super) pending: HashMap<u64, Outcome<O>>,
    /// Why the sequencer's stream is over, once it is.
    pub(super) lost: Option<String>,
    /// The stream was closed in an orderly way without an `End` frame (the
    /// sequencer's Ibis ended under it): messages may still wait in the port's queue, so
    /// it counts as lost only after [`CLOSE_GRACE`].
    pub(super) closed_since: Option<Instant>,
    pub(super) failed: Option<String>,
    pub(super) refused: Option<String>,
    /// Operations applied to this copy (including the writer's own in best-effort mode).
    pub(super) ops_applied: u64,
}

/// How long a stream closed without `End` may still deliver queued messages.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// How long a waiter sleeps at most while a close is in its grace period.
const GRACE_TICK: Duration = Duration::from_millis(25);

impl<O> Meta<O> {
    /// Why the stream is over, if it is.
    pub(super) fn lost_reason(&self) -> Option<String> {
        if let Some(l) = &self.lost {
            return Some(l.clone());
        }
        match self.closed_since {
            Some(t) if t.elapsed() >= CLOSE_GRACE => {
                Some("the sequencer's stream was closed".into())
            }
            _ => None,
        }
    }

    /// How long a waiter may sleep before it must look again.
    pub(super) fn nap(&self, left: Duration) -> Duration {
        if self.closed_since.is_some() && self.lost.is_none() {
            left.min(GRACE_TICK)
        } else {
            left
        }
    }
}

impl<T: Replicated> Inner<T> {
    /// Applies one decoded-or-encoded operation to the local copy, under the meta lock.
    /// Returns the output; a failure marks the copy as diverged.
    pub(super) fn apply_locked(
        &self,
        meta: &mut Meta<T::Output>,
        state: &RwLock<T>,
        op: &T::Op,
    ) -> Option<T::Output> {
        let mut st = state.write();
        match catch_unwind(AssertUnwindSafe(|| st.apply(op))) {
            Ok(out) => {
                meta.ops_applied += 1;
                Some(out)
            }
            Err(_) => {
                tracing::error!(object = %self.name, "apply panicked; replica stops applying");
                meta.failed = Some("apply panicked".into());
                None
            }
        }
    }

    /// Applies a sequenced entry that is next in order.
    pub(super) fn apply_entry(
        &self,
        meta: &mut Meta<T::Output>,
        state: &RwLock<T>,
        origin: u64,
        req: u64,
        op: Option<&[u8]>,
    ) {
        if meta.failed.is_some() {
            return;
        }
        let mine = origin == self.me;
        match op {
            None => {
                if mine {
                    if let Some(p) = meta.pending.get_mut(&req) {
                        *p = Outcome::Synced;
                    }
                }
            }
            Some(_) if mine && self.mode == Mode::BestEffort => {
                // Applied to this copy when it was written.
            }
            Some(bytes) => match codec::decode::<T::Op>(bytes) {
                Ok(v) => {
                    if let Some(out) = self.apply_locked(meta, state, &v) {
                        if mine {
                            if let Some(p) = meta.pending.get_mut(&req) {
                                *p = Outcome::Applied(out);
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(object = %self.name, error = %e, "sequenced operation undecodable; replica stops applying");
                    meta.failed = Some(format!("operation undecodable: {e}"));
                }
            },
        }
    }

    /// Applies held entries that became applicable.
    pub(super) fn drain(&self, meta: &mut Meta<T::Output>, state: &RwLock<T>) {
        while let Some((_, e)) = meta.order.pop_next() {
            self.apply_entry(meta, state, e.origin, e.req, e.op.as_deref());
        }
    }

    pub(super) fn wait_outcome(&self, req: u64, what: &'static str) -> Result<Option<T::Output>> {
        let deadline = Instant::now() + self.opts.timeout;
        let mut meta = self.meta.lock();
        loop {
            match meta.pending.remove(&req) {
                Some(Outcome::Applied(o)) => return Ok(Some(o)),
                Some(Outcome::Synced) => return Ok(None),
                Some(Outcome::Waiting) => {
                    meta.pending.insert(req, Outcome::Waiting);
                }
                None => {}
            }
            let err = if let Some(f) = &meta.failed {
                Some(RepError::Diverged(f.clone()))
            } else if let Some(l) = meta.lost_reason() {
                Some(RepError::SequencerLost(l))
            } else if Instant::now() >= deadline {
                Some(RepError::Timeout {
                    what,
                    after: self.opts.timeout,
                })
            } else {
                None
            };
            if let Some(e) = err {
                meta.pending.remove(&req);
                return Err(e);
            }
            let left = meta.nap(deadline.saturating_duration_since(Instant::now()));
            self.cond.wait_for(&mut meta, left);
        }
    }

    /// Waits until a snapshot is installed (join, refresh).
    pub(super) fn wait_snapshot(&self, deadline: Instant, what: &'static str) -> Result<()> {
        let mut meta = self.meta.lock();
        loop {
            if let Some(r) = &meta.refused {
                return Err(RepError::Refused(r.clone()));
            }
            if let Some(f) = &meta.failed {
                return Err(RepError::Diverged(f.clone()));
            }
            if meta.order.is_ready() && self.state.get().is_some() {
                return Ok(());
            }
            if let Some(l) = meta.lost_reason() {
                return Err(RepError::SequencerLost(l));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RepError::Timeout {
                    what,
                    after: self.opts.timeout,
                });
            }
            let nap = meta.nap(deadline - now);
            self.cond.wait_for(&mut meta, nap);
        }
    }
}
