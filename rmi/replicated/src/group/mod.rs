//! The group engine shared by [`Replica`](crate::Replica) and
//! [`SharedObject`](crate::SharedObject): a member's handle ([`Group`]: election, writes,
//! sync, guards, leaving) here; the sequencer's side (ordering, multicast, state
//! transfer) in `sequencer`; the other members' side (state transfer, following the
//! stream) in `member`; the local copy's bookkeeping (hold-back, apply, waits) in `copy`.
//!
//! Ports of an object named `N` (all on the two port types of [`crate::port_types`]):
//! - `repmi/N/seq`: the sequencer's request port (many-to-one, upcalls);
//! - `repmi/N/req`: each other member's send port to it;
//! - `repmi/N/mcast`: the sequencer's multicast send port, connected to every replica;
//! - `repmi/N/snap`: the sequencer's send port for snapshots (connected per transfer);
//! - `repmi/N/in`: each other member's receive port for the stream (upcalls).

mod copy;
mod member;
mod sequencer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ipl::{Ibis, IbisCapabilities, IbisIdentifier, IplError, ReadMessage, ReceivePort, SendPort};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::codec;
use crate::error::{RepError, Result};
use crate::holdback::HoldBack;
use crate::wire::{ToReplica, ToSequencer};
use crate::{port_types, Options, Replicated};

use copy::{Entry, Meta, Outcome};
use sequencer::SeqState;

/// How writes behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// RepMI: a write is applied everywhere in the sequencer's order; it returns once
    /// the writer's copy applied it.
    Ordered,
    /// Shared objects: a write is applied to the writer's copy at once and sent on; the
    /// others apply it when it arrives.
    BestEffort,
}

fn port_name(object: &str, role: &str) -> String {
    format!("repmi/{object}/{role}")
}

/// The tag that must match between the sequencer and a joiner.
fn type_tag<T>() -> &'static str {
    std::any::type_name::<T>()
}

/// The engine one member's handle shares with its port upcalls: the local copy, its
/// bookkeeping and, on the sequencer, the ordering state.
struct Inner<T: Replicated> {
    name: String,
    me: u64,
    sequencer: IbisIdentifier,
    mode: Mode,
    opts: Options,
    state: OnceLock<Arc<RwLock<T>>>,
    meta: Mutex<Meta<T::Output>>,
    cond: Condvar,
    seqr: Option<Mutex<SeqState>>,
    next_req: AtomicU64,
}

fn read_frame(m: &mut ReadMessage) -> std::result::Result<&[u8], IplError> {
    let n = m.remaining();
    m.read_bytes_ref(n)
}

fn send(port: &mut SendPort, head: &[u8], body: &[u8]) -> ipl::Result<usize> {
    let mut m = port.new_message()?;
    m.write_bytes(head)?;
    if !body.is_empty() {
        m.write_bytes_borrowed(body)?;
    }
    m.finish()
}

/// Maps a failed send to the sequencer.
fn to_sequencer_error(e: IplError) -> RepError {
    match e {
        IplError::ConnectionsLost { .. } | IplError::NotConnected | IplError::PortClosed => {
            RepError::SequencerLost(e.to_string())
        }
        other => RepError::Ipl(other),
    }
}

impl<T: Replicated> Inner<T> {
    fn new(
        name: &str,
        me: u64,
        sequencer: IbisIdentifier,
        mode: Mode,
        opts: Options,
        order: HoldBack<Entry>,
        seqr: Option<SeqState>,
    ) -> Self {
        Inner {
            name: name.to_string(),
            me,
            sequencer,
            mode,
            opts,
            state: OnceLock::new(),
            meta: Mutex::new(Meta {
                order,
                pending: HashMap::new(),
                lost: None,
                closed_since: None,
                failed: None,
                refused: None,
                ops_applied: 0,
            }),
            cond: Condvar::new(),
            seqr: seqr.map(Mutex::new),
            next_req: AtomicU64::new(1),
        }
    }

    fn in_port(&self) -> String {
        port_name(&self.name, "in")
    }

    fn applied(&self) -> u64 {
        self.meta.lock().order.applied()
    }
}

/// One member's handle on a group: its role's ports and the shared engine.
pub(crate) struct Group<T: Replicated> {
    inner: Arc<Inner<T>>,
    state: Arc<RwLock<T>>,
    /// The request port to the sequencer (members other than the sequencer).
    req: Option<Mutex<SendPort>>,
    /// The stream port (members other than the sequencer).
    stream: Option<ReceivePort>,
    /// The request port (the sequencer).
    requests: Option<ReceivePort>,
}

fn not_applied() -> RepError {
    RepError::Diverged("the operation was not applied".into())
}

fn map_port_error(name: &str, e: IplError) -> RepError {
    match e {
        IplError::DuplicatePortName(_) => RepError::AlreadyJoined(name.to_string()),
        IplError::UndeclaredPortType(t) => RepError::PortTypesNotDeclared(t),
        other => RepError::Ipl(other),
    }
}

impl<T: Replicated> Group<T> {
    pub(crate) fn join(
        ibis: &Ibis,
        name: &str,
        init: impl FnOnce() -> T,
        mode: Mode,
        opts: Options,
    ) -> Result<Self> {
        if name.is_empty() || name.contains('/') {
            return Err(RepError::InvalidName(name.to_string()));
        }
        if !ibis.capabilities().contains(IbisCapabilities::ELECTIONS) {
            return Err(RepError::MissingCapability("elections"));
        }
        for t in port_types() {
            ibis.transport_for(&t)
                .map_err(|e| map_port_error(name, e))?;
        }
        let me = ibis.identifier().clone();
        let winner = ibis.registry().elect(&format!("repmi:{name}"))?;
        if winner == me {
            Self::start_sequencer(ibis, name, init(), mode, opts)
        } else {
            Self::start_replica(ibis, name, winner, mode, opts)
        }
    }

    /// Runs `f` on the local copy under its read lock.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.state.read())
    }

    pub(crate) fn is_sequencer(&self) -> bool {
        self.inner.seqr.is_some()
    }

    pub(crate) fn sequencer(&self) -> &IbisIdentifier {
        &self.inner.sequencer
    }

    pub(crate) fn name(&self) -> &str {
        &self.inner.name
    }

    pub(crate) fn applied(&self) -> u64 {
        self.inner.applied()
    }

    pub(crate) fn ops_applied(&self) -> u64 {
        self.inner.meta.lock().ops_applied
    }

    /// The current failure of the group, if any (for writes).
    fn health(&self) -> Result<()> {
        let meta = self.inner.meta.lock();
        if let Some(f) = &meta.failed {
            return Err(RepError::Diverged(f.clone()));
        }
        if let Some(l) = meta.lost_reason() {
            return Err(RepError::SequencerLost(l));
        }
        Ok(())
    }

    /// An ordered write: returns the output of applying it to this copy, in order.
    pub(crate) fn write_ordered(&self, op: &T::Op) -> Result<T::Output> {
        if self.is_sequencer() {
            self.health()?;
            return self.sequence_own(op);
        }
        let bytes = codec::encode(op).map_err(RepError::Encode)?;
        let req = self.inner.next_req.fetch_add(1, Ordering::Relaxed);
        self.inner.meta.lock().pending.insert(req, Outcome::Waiting);
        if let Err(e) = self.send_request(&ToSequencer::Write { req, op: &bytes }) {
            self.inner.meta.lock().pending.remove(&req);
            return Err(e);
        }
        self.inner
            .wait_outcome(req, "write")?
            .ok_or_else(not_applied)
    }

    /// The sequencer's own write: sequenced (and applied here) at once.
    fn sequence_own(&self, op: &T::Op) -> Result<T::Output> {
        let bytes = codec::encode(op).map_err(RepError::Encode)?;
        self.inner
            .sequence(self.inner.me, 0, Some((op, &bytes)))
            .ok_or_else(not_applied)
    }

    /// A best-effort write: applied here at once, then sent on.
    pub(crate) fn write_best_effort(&self, op: &T::Op) -> Result<T::Output> {
        self.health()?;
        if self.is_sequencer() {
            return self.sequence_own(op);
        }
        let bytes = codec::encode(op).map_err(RepError::Encode)?;
        let Some(req) = &self.req else {
            return Err(RepError::SequencerLost("no request port".into()));
        };
        // The request port's lock orders local applies with refreshes.
        let mut port = req.lock();
        let out = {
            let mut meta = self.inner.meta.lock();
            let out = self.inner.apply_locked(&mut meta, &self.state, op);
            self.inner.cond.notify_all();
            out
        };
        let (head, body) = ToSequencer::Write { req: 0, op: &bytes }.encode();
        send(&mut port, &head, body).map_err(to_sequencer_error)?;
        out.ok_or_else(|| RepError::Diverged("apply panicked".into()))
    }

    fn send_request(&self, f: &ToSequencer<'_>) -> Result<()> {
        let Some(req) = &self.req else {
            return Err(RepError::SequencerLost("no request port".into()));
        };
        let (head, body) = f.encode();
        send(&mut req.lock(), &head, body).map_err(to_sequencer_error)?;
        Ok(())
    }

    /// Waits until this copy has applied every operation sequenced before now.
    pub(crate) fn sync(&self) -> Result<()> {
        if self.is_sequencer() {
            return self.health();
        }
        let req = self.inner.next_req.fetch_add(1, Ordering::Relaxed);
        self.inner.meta.lock().pending.insert(req, Outcome::Waiting);
        if let Err(e) = self.send_request(&ToSequencer::Sync { req }) {
            self.inner.meta.lock().pending.remove(&req);
            return Err(e);
        }
        self.inner.wait_outcome(req, "sync").map(|_| ())
    }

    /// Replaces this copy by the sequencer's (best-effort mode's data shipping).
    pub(crate) fn refresh(&self) -> Result<()> {
        let Some(req) = &self.req else {
            return self.health();
        };
        let deadline = Instant::now() + self.inner.opts.timeout;
        let mut port = req.lock();
        self.inner.meta.lock().order.await_snapshot();
        let (head, body) = ToSequencer::Refresh.encode();
        if let Err(e) = send(&mut port, &head, body) {
            // Nothing will come: accept the stream again as it is.
            let mut meta = self.inner.meta.lock();
            let applied = meta.order.applied();
            meta.order.install(applied);
            self.inner.drain(&mut meta, &self.state);
            return Err(to_sequencer_error(e));
        }
        self.inner.wait_snapshot(deadline, "refresh")
    }

    /// Waits until `pred` holds on this copy.
    pub(crate) fn guard(&self, pred: &dyn Fn(&T) -> bool, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut meta = self.inner.meta.lock();
        loop {
            {
                let st = self.state.read();
                if pred(&st) {
                    return Ok(());
                }
            }
            if let Some(f) = &meta.failed {
                return Err(RepError::Diverged(f.clone()));
            }
            if let Some(l) = meta.lost_reason() {
                return Err(RepError::SequencerLost(l));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RepError::GuardTimeout(timeout));
            }
            let nap = meta.nap(deadline - now);
            self.inner.cond.wait_for(&mut meta, nap);
        }
    }

    /// Leaves the group: tells the sequencer, then closes the ports.
    pub(crate) fn leave(&mut self) {
        if let Some(req) = self.req.take() {
            let mut port = req.into_inner();
            let (head, body) = ToSequencer::Leave.encode();
            let _ = send(&mut port, &head, body);
            port.close();
        }
        if let Some(stream) = self.stream.take() {
            // The sequencer disconnects on Leave; do not wait long for it.
            stream.close(Some(self.inner.opts.timeout.min(Duration::from_secs(1))));
        }
        if let Some(requests) = self.requests.take() {
            requests.close(Some(Duration::ZERO));
        }
        if let Some(seqr) = &self.inner.seqr {
            let mut s = seqr.lock();
            let (head, body) = ToReplica::End.encode();
            match send(&mut s.mcast, &head, body) {
                Ok(_) | Err(IplError::NotConnected) | Err(IplError::ConnectionsLost { .. }) => {}
                Err(e) => {
                    tracing::debug!(object = %self.inner.name, error = %e, "end of stream not sent")
                }
            }
            s.mcast.close();
            s.snap.close();
        }
    }
}

impl<T: Replicated> Drop for Group<T> {
    fn drop(&mut self) {
        self.leave();
    }
}
