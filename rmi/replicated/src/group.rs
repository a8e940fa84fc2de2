//! The group engine shared by [`Replica`](crate::Replica) and
//! [`SharedObject`](crate::SharedObject): sequencer election, the sequencer's side
//! (ordering, multicast, state transfer) and a replica's side (hold-back, apply, waits).
//!
//! Ports of an object named `N` (all on the two port types of [`crate::port_types`]):
//! - `repmi/N/seq`: the sequencer's request port (many-to-one, upcalls);
//! - `repmi/N/req`: each other member's send port to it;
//! - `repmi/N/mcast`: the sequencer's multicast send port, connected to every replica;
//! - `repmi/N/snap`: the sequencer's send port for snapshots (connected per transfer);
//! - `repmi/N/in`: each other member's receive port for the stream (upcalls).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ipl::{
    Disconnect, Ibis, IbisCapabilities, IbisIdentifier, IplError, ReadMessage, ReceivePort,
    ReceivePortConnectUpcall, ReceivePortIdentifier, SendPort, SendPortIdentifier,
};

use crate::error::{RepError, Result};
use crate::holdback::{HoldBack, Slot};
use crate::wire::{ToReplica, ToSequencer};
use crate::{port_types, replica_type, request_type, Options, Replicated};

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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn port_name(object: &str, role: &str) -> String {
    format!("repmi/{object}/{role}")
}

/// The tag that must match between the sequencer and a joiner.
fn type_tag<T>() -> &'static str {
    std::any::type_name::<T>()
}

/// An operation of the stream, held until its turn.
struct Entry {
    origin: u64,
    req: u64,
    op: Option<Vec<u8>>,
}

enum Outcome<O> {
    Waiting,
    Applied(O),
    Synced,
}

struct Meta<O> {
    order: HoldBack<Entry>,
    pending: HashMap<u64, Outcome<O>>,
    /// Why the sequencer's stream is over, once it is.
    lost: Option<String>,
    /// The stream was closed in an orderly way without an `End` frame (the
    /// sequencer's Ibis ended under it): messages may still wait in the port's queue, so
    /// it counts as lost only after [`CLOSE_GRACE`].
    closed_since: Option<Instant>,
    failed: Option<String>,
    refused: Option<String>,
    /// Operations applied to this copy (including the writer's own in best-effort mode).
    ops_applied: u64,
}

/// The sequencer's private state: the next number and its send ports.
struct SeqState {
    next: u64,
    mcast: SendPort,
    snap: SendPort,
}

pub(crate) struct Inner<T: Replicated> {
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

/// How long a stream closed without `End` may still deliver queued messages.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// How long a waiter sleeps at most while a close is in its grace period.
const GRACE_TICK: Duration = Duration::from_millis(25);

impl<O> Meta<O> {
    /// Why the stream is over, if it is.
    fn lost_reason(&self) -> Option<String> {
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
    fn nap(&self, left: Duration) -> Duration {
        if self.closed_since.is_some() && self.lost.is_none() {
            left.min(GRACE_TICK)
        } else {
            left
        }
    }
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

    /// Applies one decoded-or-encoded operation to the local copy, under the meta lock.
    /// Returns the output; a failure marks the copy as diverged.
    fn apply_locked(
        &self,
        meta: &mut Meta<T::Output>,
        state: &RwLock<T>,
        op: &T::Op,
    ) -> Option<T::Output> {
        let mut st = state.write().unwrap_or_else(PoisonError::into_inner);
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
    fn apply_entry(
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
            Some(bytes) => match postcard::from_bytes::<T::Op>(bytes) {
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
    fn drain(&self, meta: &mut Meta<T::Output>, state: &RwLock<T>) {
        while let Some((_, e)) = meta.order.pop_next() {
            self.apply_entry(meta, state, e.origin, e.req, e.op.as_deref());
        }
    }

    // ---- the replica side: the stream from the sequencer -------------------------

    fn on_stream(&self, mut m: ReadMessage) {
        let origin = m.origin().clone();
        if origin.ibis != self.sequencer {
            tracing::warn!(object = %self.name, from = %origin, "message from a member that is not the sequencer dropped");
            return;
        }
        let frame = match read_frame(&mut m) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(object = %self.name, error = %e, "unreadable stream message dropped");
                return;
            }
        };
        match ToReplica::decode(frame) {
            Err(e) => {
                tracing::warn!(object = %self.name, from = %origin, error = %e, "malformed stream message dropped")
            }
            Ok(ToReplica::Snapshot { seq, state }) => self.on_snapshot(seq, state),
            Ok(ToReplica::Ordered {
                seq,
                origin,
                req,
                op,
            }) => self.on_ordered(seq, origin, req, op),
            Ok(ToReplica::Refused { reason }) => {
                let mut meta = lock(&self.meta);
                meta.refused = Some(reason.to_string());
                self.cond.notify_all();
            }
            Ok(ToReplica::End) => {
                // Everything the sequencer sent before was delivered before this.
                let mut meta = lock(&self.meta);
                meta.lost
                    .get_or_insert_with(|| "the sequencer left the group".into());
                self.cond.notify_all();
            }
        }
    }

    fn on_snapshot(&self, seq: u64, bytes: &[u8]) {
        let mut meta = lock(&self.meta);
        if meta.order.is_ready() {
            tracing::debug!(object = %self.name, seq, "unrequested snapshot ignored");
            return;
        }
        if seq < meta.order.applied() {
            tracing::warn!(object = %self.name, seq, applied = meta.order.applied(), "stale snapshot ignored");
            return;
        }
        let value = match postcard::from_bytes::<T>(bytes) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(object = %self.name, error = %e, "snapshot undecodable");
                meta.failed = Some(format!("snapshot undecodable: {e}"));
                self.cond.notify_all();
                return;
            }
        };
        let state = match self.state.get() {
            Some(s) => {
                *s.write().unwrap_or_else(PoisonError::into_inner) = value;
                Arc::clone(s)
            }
            None => {
                let s = Arc::new(RwLock::new(value));
                // Only this upcall thread sets it, so it cannot be set already.
                let _ = self.state.set(Arc::clone(&s));
                s
            }
        };
        meta.order.install(seq);
        tracing::debug!(object = %self.name, seq, held = meta.order.held(), "snapshot installed");
        self.drain(&mut meta, &state);
        self.cond.notify_all();
    }

    fn on_ordered(&self, seq: u64, origin: u64, req: u64, op: Option<&[u8]>) {
        let mut meta = lock(&self.meta);
        match meta.order.classify(seq) {
            Slot::Stale => {}
            Slot::Next => {
                if let Some(state) = self.state.get() {
                    meta.order.advance();
                    self.apply_entry(&mut meta, state, origin, req, op);
                    self.drain(&mut meta, state);
                }
            }
            Slot::Later => {
                let e = Entry {
                    origin,
                    req,
                    op: op.map(<[u8]>::to_vec),
                };
                if let Err(e) = meta.order.hold(seq, e) {
                    tracing::error!(object = %self.name, error = %e, "replica stops applying");
                    meta.failed = Some(e.to_string());
                }
            }
        }
        self.cond.notify_all();
    }

    fn on_lost(&self, origin: &SendPortIdentifier, why: &Disconnect) {
        if origin.ibis == self.sequencer && origin.name == port_name(&self.name, "mcast") {
            let mut meta = lock(&self.meta);
            tracing::debug!(object = %self.name, ?why, "stream from the sequencer ended");
            match why {
                // Messages sent before the close may still be queued: the End frame
                // (or the grace period) ends the stream after them.
                Disconnect::Closed => {
                    meta.closed_since.get_or_insert_with(Instant::now);
                }
                Disconnect::Lost(s) => {
                    meta.lost.get_or_insert_with(|| format!("stream lost: {s}"));
                }
                Disconnect::Local => {
                    meta.lost
                        .get_or_insert_with(|| "this replica closed its stream port".into());
                }
            }
            self.cond.notify_all();
        }
    }

    // ---- the sequencer side ------------------------------------------------------

    fn on_request(&self, mut m: ReadMessage) {
        let origin = m.origin().clone();
        let frame = match read_frame(&mut m) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(object = %self.name, error = %e, "unreadable request dropped");
                return;
            }
        };
        let from = origin.ibis.id().get();
        let target = ReceivePortIdentifier {
            ibis: origin.ibis.clone(),
            name: self.in_port(),
        };
        match ToSequencer::decode(frame) {
            Err(e) => {
                tracing::warn!(object = %self.name, from = %origin, error = %e, "malformed request dropped")
            }
            Ok(ToSequencer::Join { type_tag: tag }) => self.admit(&target, tag),
            Ok(ToSequencer::Write { req, op }) => match postcard::from_bytes::<T::Op>(op) {
                Ok(v) => {
                    self.sequence(from, req, Some((&v, op)));
                }
                Err(e) => {
                    tracing::warn!(object = %self.name, from = %origin, error = %e, "undecodable operation refused")
                }
            },
            Ok(ToSequencer::Sync { req }) => {
                self.sequence(from, req, None);
            }
            Ok(ToSequencer::Refresh) => {
                if let Some(seqr) = &self.seqr {
                    let mut s = lock(seqr);
                    let seq = s.next - 1;
                    self.transfer(&mut s, &target, seq);
                }
            }
            Ok(ToSequencer::Leave) => {
                if let Some(seqr) = &self.seqr {
                    let _ = lock(seqr).mcast.disconnect(&target);
                }
            }
        }
    }

    /// Gives an operation (or a sync marker) the next number, applies it to the
    /// sequencer's copy and multicasts it. Returns the local output.
    fn sequence(&self, origin: u64, req: u64, op: Option<(&T::Op, &[u8])>) -> Option<T::Output> {
        let seqr = self.seqr.as_ref()?;
        let state = self.state.get()?;
        let mut s = lock(seqr);
        let seq = s.next;
        s.next += 1;
        let out = {
            let mut meta = lock(&self.meta);
            let out = match op {
                Some((v, _)) if meta.failed.is_none() => self.apply_locked(&mut meta, state, v),
                _ => None,
            };
            meta.order.install(seq);
            self.cond.notify_all();
            out
        };
        let (head, body) = ToReplica::Ordered {
            seq,
            origin,
            req,
            op: op.map(|(_, b)| b),
        }
        .encode();
        match send(&mut s.mcast, &head, body) {
            Ok(_) | Err(IplError::NotConnected) => {}
            Err(IplError::ConnectionsLost { lost }) => {
                tracing::debug!(object = %self.name, ?lost, "replicas gone")
            }
            Err(e) => tracing::warn!(object = %self.name, error = %e, "multicast failed"),
        }
        out
    }

    /// Admits a joiner: connects the stream to it, then sends the snapshot of the state
    /// after the last operation multicast before the connection.
    fn admit(&self, target: &ReceivePortIdentifier, tag: &str) {
        let Some(seqr) = &self.seqr else { return };
        let mut s = lock(seqr);
        if tag != type_tag::<T>() {
            let reason = format!(
                "the object replicates {}, this member asked for {tag}",
                type_tag::<T>()
            );
            tracing::warn!(object = %self.name, joiner = %target, %reason, "join refused");
            let (head, body) = ToReplica::Refused { reason: &reason }.encode();
            self.send_once(&mut s.snap, target, &head, body);
            return;
        }
        if let Err(e) = s.mcast.connect(target, self.opts.timeout) {
            tracing::warn!(object = %self.name, joiner = %target, error = %e, "cannot connect the stream to a joiner");
            return;
        }
        let seq = s.next - 1;
        self.transfer(&mut s, target, seq);
        tracing::debug!(object = %self.name, joiner = %target, seq, "replica admitted");
    }

    /// Sends a snapshot of the sequencer's copy, which covers `seq`.
    fn transfer(&self, s: &mut SeqState, target: &ReceivePortIdentifier, seq: u64) {
        let Some(state) = self.state.get() else {
            return;
        };
        let bytes = {
            let st = state.read().unwrap_or_else(PoisonError::into_inner);
            postcard::to_allocvec(&*st)
        };
        match bytes {
            Ok(b) => {
                let (head, body) = ToReplica::Snapshot { seq, state: &b }.encode();
                self.send_once(&mut s.snap, target, &head, body);
            }
            Err(e) => {
                let reason = format!("state cannot be encoded: {e}");
                let (head, body) = ToReplica::Refused { reason: &reason }.encode();
                self.send_once(&mut s.snap, target, &head, body);
            }
        }
    }

    fn send_once(&self, port: &mut SendPort, target: &ReceivePortIdentifier, h: &[u8], b: &[u8]) {
        let r = port
            .connect(target, self.opts.timeout)
            .and_then(|_| send(port, h, b).map(|_| ()));
        if let Err(e) = r {
            tracing::warn!(object = %self.name, to = %target, error = %e, "snapshot not sent");
        }
        let _ = port.disconnect(target);
    }

    // ---- waits -------------------------------------------------------------------

    fn wait_outcome(&self, req: u64, what: &'static str) -> Result<Option<T::Output>> {
        let deadline = Instant::now() + self.opts.timeout;
        let mut meta = lock(&self.meta);
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
            meta = self
                .cond
                .wait_timeout(meta, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Waits until a snapshot is installed (join, refresh).
    fn wait_snapshot(&self, deadline: Instant, what: &'static str) -> Result<()> {
        let mut meta = lock(&self.meta);
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
            meta = self
                .cond
                .wait_timeout(meta, nap)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

/// Reports the loss of the sequencer's stream to the replica.
struct LostWatch<T: Replicated>(Arc<Inner<T>>);

impl<T: Replicated> ReceivePortConnectUpcall for LostWatch<T> {
    fn lost_connection(
        &self,
        _port: &ReceivePortIdentifier,
        origin: &SendPortIdentifier,
        why: &Disconnect,
    ) {
        self.0.on_lost(origin, why);
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

    fn start_sequencer(
        ibis: &Ibis,
        name: &str,
        value: T,
        mode: Mode,
        opts: Options,
    ) -> Result<Self> {
        let err = |e| map_port_error(name, e);
        let mcast = ibis
            .create_send_port(&replica_type(), &port_name(name, "mcast"))
            .map_err(err)?;
        let snap = ibis
            .create_send_port(&replica_type(), &port_name(name, "snap"))
            .map_err(err)?;
        let inner = Arc::new(Inner::new(
            name,
            ibis.identifier().id().get(),
            ibis.identifier().clone(),
            mode,
            opts,
            HoldBack::started(0, opts.hold_limit),
            Some(SeqState {
                next: 1,
                mcast,
                snap,
            }),
        ));
        let state = Arc::new(RwLock::new(value));
        let _ = inner.state.set(Arc::clone(&state));
        let handler = Arc::clone(&inner);
        let requests = ibis
            .receive_port(&request_type(), &port_name(name, "seq"))
            .message_upcall(move |m: ReadMessage| handler.on_request(m))
            .create()
            .map_err(err)?;
        requests.enable_connections();
        requests.enable_message_upcalls()?;
        tracing::debug!(object = name, member = %ibis.identifier(), "sequencer started");
        Ok(Group {
            inner,
            state,
            req: None,
            stream: None,
            requests: Some(requests),
        })
    }

    fn start_replica(
        ibis: &Ibis,
        name: &str,
        sequencer: IbisIdentifier,
        mode: Mode,
        opts: Options,
    ) -> Result<Self> {
        let err = |e| map_port_error(name, e);
        let deadline = Instant::now() + opts.timeout;
        let inner = Arc::new(Inner::<T>::new(
            name,
            ibis.identifier().id().get(),
            sequencer.clone(),
            mode,
            opts,
            HoldBack::awaiting_snapshot(opts.hold_limit),
            None,
        ));
        let handler = Arc::clone(&inner);
        let stream = ibis
            .receive_port(&replica_type(), &port_name(name, "in"))
            .message_upcall(move |m: ReadMessage| handler.on_stream(m))
            .connection_upcall(LostWatch(Arc::clone(&inner)))
            .create()
            .map_err(err)?;
        stream.enable_connections();
        stream.enable_message_upcalls()?;
        let mut req = ibis
            .create_send_port(&request_type(), &port_name(name, "req"))
            .map_err(err)?;
        match req.connect_to(&sequencer, &port_name(name, "seq"), opts.timeout) {
            Ok(_) => {}
            Err(IplError::ConnectTimeout { .. }) => {
                return Err(RepError::Timeout {
                    what: "connecting to the sequencer",
                    after: opts.timeout,
                })
            }
            Err(e) => return Err(RepError::SequencerLost(e.to_string())),
        }
        let (head, body) = ToSequencer::Join {
            type_tag: type_tag::<T>(),
        }
        .encode();
        send(&mut req, &head, body).map_err(to_sequencer_error)?;
        inner.wait_snapshot(deadline, "joining (state transfer)")?;
        let state = match inner.state.get() {
            Some(s) => Arc::clone(s),
            None => {
                return Err(RepError::Timeout {
                    what: "joining (state transfer)",
                    after: opts.timeout,
                })
            }
        };
        tracing::debug!(object = name, member = %ibis.identifier(), seq = inner.applied(), "replica joined");
        Ok(Group {
            inner,
            state,
            req: Some(Mutex::new(req)),
            stream: Some(stream),
            requests: None,
        })
    }

    pub(crate) fn state(&self) -> &RwLock<T> {
        &self.state
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
        lock(&self.inner.meta).ops_applied
    }

    /// The current failure of the group, if any (for writes).
    fn health(&self) -> Result<()> {
        let meta = lock(&self.inner.meta);
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
            return self
                .inner
                .sequence(self.inner.me, 0, Some((op, &postcard::to_allocvec(op)?)))
                .ok_or_else(|| RepError::Diverged("the operation was not applied".into()));
        }
        let bytes = postcard::to_allocvec(op)?;
        let req = self.inner.next_req.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.meta).pending.insert(req, Outcome::Waiting);
        if let Err(e) = self.send_request(&ToSequencer::Write { req, op: &bytes }) {
            lock(&self.inner.meta).pending.remove(&req);
            return Err(e);
        }
        self.inner
            .wait_outcome(req, "write")?
            .ok_or_else(|| RepError::Diverged("the operation was not applied".into()))
    }

    /// A best-effort write: applied here at once, then sent on.
    pub(crate) fn write_best_effort(&self, op: &T::Op) -> Result<T::Output> {
        self.health()?;
        let bytes = postcard::to_allocvec(op)?;
        if self.is_sequencer() {
            return self
                .inner
                .sequence(self.inner.me, 0, Some((op, &bytes)))
                .ok_or_else(|| RepError::Diverged("the operation was not applied".into()));
        }
        let Some(req) = &self.req else {
            return Err(RepError::SequencerLost("no request port".into()));
        };
        // The request port's lock orders local applies with refreshes.
        let mut port = lock(req);
        let out = {
            let mut meta = lock(&self.inner.meta);
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
        send(&mut lock(req), &head, body).map_err(to_sequencer_error)?;
        Ok(())
    }

    /// Waits until this copy has applied every operation sequenced before now.
    pub(crate) fn sync(&self) -> Result<()> {
        if self.is_sequencer() {
            return self.health();
        }
        let req = self.inner.next_req.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.meta).pending.insert(req, Outcome::Waiting);
        if let Err(e) = self.send_request(&ToSequencer::Sync { req }) {
            lock(&self.inner.meta).pending.remove(&req);
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
        let mut port = lock(req);
        lock(&self.inner.meta).order.await_snapshot();
        let (head, body) = ToSequencer::Refresh.encode();
        if let Err(e) = send(&mut port, &head, body) {
            // Nothing will come: accept the stream again as it is.
            let mut meta = lock(&self.inner.meta);
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
        let mut meta = lock(&self.inner.meta);
        loop {
            {
                let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
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
            meta = self
                .inner
                .cond
                .wait_timeout(meta, nap)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Leaves the group: tells the sequencer, then closes the ports.
    pub(crate) fn leave(&mut self) {
        if let Some(req) = self.req.take() {
            let mut port = req.into_inner().unwrap_or_else(PoisonError::into_inner);
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
            let mut s = lock(seqr);
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

impl<T: Replicated> Inner<T> {
    fn applied(&self) -> u64 {
        lock(&self.meta).order.applied()
    }
}

impl<T: Replicated> Drop for Group<T> {
    fn drop(&mut self) {
        self.leave();
    }
}
