//! Receive ports: explicit receive, poll, receive with timeout, async receive, and
//! message upcalls (at most one running per port), plus connection upcalls.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex};
use std::task::{Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipl_serialization::MessageReader;
use ipl_transport_abi::{ReceivedBuffer, TransportInstance};

use crate::capabilities::PortCapabilities;
use crate::error::{IplError, Result};
use crate::ibis::{ChannelKey, IbisShared};
use crate::identifiers::{ReceivePortIdentifier, SendPortIdentifier};
use crate::lane::{Finish, Lane};
use crate::message::ReadMessage;
use crate::port_protocol::{Admission, Admitted, Finished};
use crate::port_type::PortType;
use crate::protocol::{self, Control, RejectReason};
use crate::receive_wait::{self, waited, YIELD_EVERY};

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disconnect {
    /// The other side closed it in an orderly way (all its messages were delivered).
    Closed,
    /// It was lost: the peer vanished or the network failed.
    Lost(String),
    /// This side closed it (e.g. a forced close of the receive port).
    Local,
}

/// Connection upcalls of a receive port (needs `connection.upcalls`). Called from the
/// transport's threads; keep them short.
///
/// One exception: a connection whose sender the registry reports gone (left or declared
/// dead, found by the once-a-second check of a waiting port) is ended by the thread
/// that checked, and [`lost_connection`](Self::lost_connection) runs on it: the
/// application's own thread inside [`ReceivePort::receive`],
/// [`ReceivePort::receive_timeout`] or [`ReceivePort::close`], or the port's
/// message-upcall thread. An upcall must therefore not wait for a lock that the
/// receiving thread holds around its receive.
pub trait ReceivePortConnectUpcall: Send + Sync + 'static {
    /// A send port wants to connect; return false to refuse.
    fn got_connection(&self, port: &ReceivePortIdentifier, origin: &SendPortIdentifier) -> bool {
        let _ = (port, origin);
        true
    }
    /// A connection ended. Runs on a transport thread, or on a receiving thread of the
    /// port when the registry reported the sender gone (see the trait's docs).
    fn lost_connection(
        &self,
        port: &ReceivePortIdentifier,
        origin: &SendPortIdentifier,
        why: &Disconnect,
    );
}

/// A message upcall: called with each message, one at a time per port, in a thread of
/// the port. The next message is delivered only after this one is finished (explicitly
/// or when the upcall returns).
pub trait MessageUpcall: Send + 'static {
    /// Handles one message.
    fn upcall(&mut self, msg: ReadMessage);
}

impl<F: FnMut(ReadMessage) + Send + 'static> MessageUpcall for F {
    fn upcall(&mut self, msg: ReadMessage) {
        self(msg)
    }
}

/// Where a handed-out message came from: the queue (with its sender), or the lane of
/// the port's direct connection (whose finish returns its credits without the lock).
pub(crate) enum Source {
    Queued {
        port: Arc<PortShared>,
        origin: Arc<SendPortIdentifier>,
    },
    Lane(Arc<Direct>),
}

impl Source {
    /// The message's sender.
    pub(crate) fn origin(&self) -> &Arc<SendPortIdentifier> {
        match self {
            Source::Queued { origin, .. } => origin,
            Source::Lane(d) => &d.origin,
        }
    }

    /// The message from `key`, costing `cost` bytes of the window, was finished.
    pub(crate) fn finished(&self, key: ChannelKey, cost: u64) {
        match self {
            Source::Queued { port, .. } => port.message_finished(key, cost),
            Source::Lane(d) => match d.lane.finish(cost, d.half_window) {
                Finish::Done(None) => {}
                Finish::Done(Some(n)) => {
                    if let Some(port) = d.port.upgrade() {
                        port.send_credit(key, n);
                    }
                }
                Finish::Revoked => {
                    if let Some(port) = d.port.upgrade() {
                        port.message_finished(key, cost);
                    }
                }
            },
        }
    }
}

pub(crate) struct Incoming {
    key: ChannelKey,
    origin: Arc<SendPortIdentifier>,
    seq: u64,
    buf: ReceivedBuffer,
}

/// The polled transports a receiver drives, gathered without allocating: an instance
/// has one slot per transport, and the few that deliver through receiver-driven
/// progress fit inline. Each with its transport slot.
type PolledInstances = smallvec::SmallVec<[(usize, Arc<TransportInstance>); 4]>;

struct PortState {
    /// Threads waiting on the port's condition variable: a notify is a system call
    /// even when nobody waits, so it is made only when somebody does.
    sleepers: usize,
    /// Threads of this port parked in a transport (`TransportInstance::wait`): a
    /// notify interrupts them.
    parked: usize,
    /// The connections and the protocol state around them (enabled, closed, the
    /// outstanding message, deferred connects, credits owed).
    adm: Admission<ChannelKey, Arc<SendPortIdentifier>>,
    queue: VecDeque<Incoming>,
    lost: Vec<(SendPortIdentifier, Disconnect)>,
    /// Connections lost that no explicit receive has reported yet (see `take_locked`):
    /// kept only on a port without message upcalls, at most [`MAX_UNREPORTED`] (the
    /// newest), emptied when a new connection is accepted or `lost_connections` is
    /// called (the application has seen them, or has a sender to wait for again).
    unreported: VecDeque<(Arc<SendPortIdentifier>, String)>,
    /// Message upcalls are enabled: no explicit receive takes `unreported`.
    upcalls: bool,
    /// When a waiting thread of this port next asks the registry whether the senders
    /// are gone (shared by all receives and `close`, so that a loop of short receives
    /// checks too; see `until_liveness_check`).
    liveness_due: Option<Instant>,
    wakers: Vec<Waker>,
    /// The key of `PortShared::direct`, changed with it (under this lock): whether
    /// there is a lane to lend is known without the direct channel's lock.
    direct_key: Option<ChannelKey>,
}

impl PortState {
    fn new(adm: Admission<ChannelKey, Arc<SendPortIdentifier>>) -> Self {
        PortState {
            sleepers: 0,
            parked: 0,
            adm,
            queue: VecDeque::new(),
            lost: Vec::new(),
            unreported: VecDeque::new(),
            upcalls: false,
            liveness_due: None,
            wakers: Vec::new(),
            direct_key: None,
        }
    }
}

pub(crate) struct PortShared {
    pub(crate) ident: ReceivePortIdentifier,
    pub(crate) port_type: PortType,
    ibis: Weak<IbisShared>,
    state: Mutex<PortState>,
    cond: Condvar,
    /// Mirrors "a receive would return now" (a message is deliverable, or the port is
    /// closed), so that poll and the spin phase of receive need not take the lock.
    ready: AtomicBool,
    /// The longest poll budget of a blocking receive, unless learned from round trips
    /// (the instance's `spin` option; zero: never poll).
    spin: Duration,
    /// The current poll budget of a blocking receive, in ns (adaptive, see `next`).
    spin_ns: std::sync::atomic::AtomicU64,
    /// The transports with receiver-driven progress that this port's connections came
    /// over (bit i: transport slot i): a waiting receive polls those itself, and only
    /// those (a port whose connections are all on, say, TCP keeps yielding to the
    /// transport's threads, and a shared-memory port does not pay for QUIC's socket).
    polled: std::sync::atomic::AtomicU64,
    /// Per transport slot of the Ibis instance, the transport if it delivers through
    /// receiver-driven progress (fixed when the instance is built; an upgrade fails once
    /// the instance ended).
    transports: Vec<Option<Weak<TransportInstance>>>,
    /// The port's one connection, when it has exactly one and it came over a transport
    /// with receiver-driven progress: a waiting receive asks that transport for this
    /// channel's next message directly (through the channel's fast path when the
    /// transport has one, else `TransportInstance::take`) instead of having it
    /// delivered through the router and the queue. Written under the state lock.
    direct: parking_lot::RwLock<Option<Arc<Direct>>>,
    connect_upcall: Option<Box<dyn ReceivePortConnectUpcall>>,
    /// The flow-control window of each connection, in bytes.
    window: u64,
    /// This port, for the lanes of its direct connections.
    me: Weak<PortShared>,
    /// Receives of this port that wait without polling its transports (asleep on the
    /// port or in a transport, or an async receive that is pending): see `end_polling`.
    idle: AtomicUsize,
}

/// A receive counted in [`PortShared::idle`] while it lives.
struct Idle<'a>(&'a AtomicUsize);

impl<'a> Idle<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        // SeqCst: ordered against the polled-channel records a transport keeps (see
        // `PortShared::end_polling`).
        count.fetch_add(1, Ordering::SeqCst);
        Idle(count)
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A port's one connection on a transport with receiver-driven progress (see
/// `PortShared::direct`), with the channel's fast path if the transport has one, and
/// the port's common path when it is lent to this connection (see `crate::lane`).
pub(crate) struct Direct {
    key: ChannelKey,
    fast: Option<ipl_transport_abi::FastPath>,
    /// The connection's sender.
    pub(crate) origin: Arc<SendPortIdentifier>,
    lane: Lane,
    /// Half the flow-control window: the credits a lane returns in one batch.
    half_window: u64,
    /// The port (not kept alive by its messages' lanes).
    port: Weak<PortShared>,
}

impl Direct {
    /// Asks the channel's transport `t` for its next message (`accept`), delivering the
    /// others through the callbacks; the number delivered.
    fn take(
        &self,
        t: &TransportInstance,
        mut accept: impl FnMut(ChannelKey, ReceivedBuffer),
    ) -> usize {
        let key = self.key;
        match &self.fast {
            Some(f) => f.take(|buf| accept(key, buf)),
            None => t.take(key.1, |buf| accept(key, buf)),
        }
    }
}

/// How long a receive waits between two questions to the registry whether the senders
/// of its port's connections are still members (see `drop_dead_senders`).
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// The most lost connections a port keeps for explicit receives to report (the oldest
/// are dropped first; `lost_connections` still lists them all).
const MAX_UNREPORTED: usize = 64;

/// The receive modes that report a lost connection as [`IplError::ConnectionLost`].
const EXPLICIT_RECEIPT: PortCapabilities = PortCapabilities::RECEIVE_EXPLICIT
    .union(PortCapabilities::RECEIVE_TIMEOUT)
    .union(PortCapabilities::RECEIVE_POLL);

/// How long a waiting thread may sleep before it asks the registry about the port's
/// senders (see `drop_dead_senders`); None: ask now (the next question is then due a
/// [`LIVENESS_CHECK`] later, so one of several waiting threads asks).
fn until_liveness_check(st: &mut PortState) -> Option<Duration> {
    let now = Instant::now();
    let due = *st.liveness_due.get_or_insert(now + LIVENESS_CHECK);
    if now >= due {
        st.liveness_due = Some(now + LIVENESS_CHECK);
        None
    } else {
        Some(due - now)
    }
}

impl PortShared {
    pub(crate) fn new(
        ident: ReceivePortIdentifier,
        port_type: PortType,
        ibis: Weak<IbisShared>,
        transports: Vec<Option<Weak<TransportInstance>>>,
        spin: Duration,
        window: u64,
        connect_upcall: Option<Box<dyn ReceivePortConnectUpcall>>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| PortShared {
            ident,
            port_type,
            ibis,
            state: Mutex::new(PortState::new(Admission::new(
                window,
                port_type.capabilities().allows_many_senders(),
            ))),
            cond: Condvar::new(),
            ready: AtomicBool::new(false),
            spin,
            spin_ns: std::sync::atomic::AtomicU64::new(spin.as_nanos() as u64),
            polled: std::sync::atomic::AtomicU64::new(0),
            transports,
            direct: parking_lot::RwLock::new(None),
            connect_upcall,
            window,
            me: me.clone(),
            idle: AtomicUsize::new(0),
        })
    }

    /// The live transports with receiver-driven progress that this port's connections
    /// use (`polled`), for a receiver about to poll: on the stack, and only the set bits
    /// of the mask (usually one).
    fn polled_instances(&self) -> PolledInstances {
        let mut out = PolledInstances::new();
        let mut bits = self.polled.load(Ordering::Relaxed);
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(inst) = self.transports.get(i).and_then(|w| w.as_ref()?.upgrade()) {
                out.push((i, inst));
            }
        }
        out
    }

    /// Recomputes the direct channel (see `direct`) after the connections changed
    /// (kept while it is the same connection).
    fn sync_direct(&self, st: &mut PortState) {
        // Its callers took the lane back first: a replaced direct channel is not lent.
        debug_assert!(!st.adm.is_lent(), "the common path is lent");
        let mut only = st.adm.keys().copied();
        let key = match (only.next(), only.next()) {
            (Some(key), None)
                if key.0 < 64 && self.polled.load(Ordering::Relaxed) & (1 << key.0) != 0 =>
            {
                key
            }
            _ => {
                *self.direct.write() = None;
                st.direct_key = None;
                return;
            }
        };
        if st.direct_key == Some(key) {
            return;
        }
        let Some(origin) = st.adm.connection(&key).cloned() else {
            *self.direct.write() = None;
            st.direct_key = None;
            return;
        };
        let fast = self
            .transports
            .get(key.0)
            .and_then(|w| w.as_ref()?.upgrade())
            .and_then(|t| t.fast_path(key.1));
        *self.direct.write() = Some(Arc::new(Direct {
            key,
            fast,
            origin,
            lane: Lane::default(),
            half_window: self.window / 2,
            port: self.me.clone(),
        }));
        st.direct_key = Some(key);
    }

    /// Takes the common path back from the lane, if it is lent (see `crate::lane`):
    /// the first thing every locked operation that reads or changes the protocol
    /// state does, so that under the lock `st.adm` is the whole truth.
    fn lane_back(&self, st: &mut PortState) {
        if !st.adm.is_lent() {
            return;
        }
        let back = self.direct.read().as_ref().and_then(|d| d.lane.revoke());
        // Lent in the Admission means lent on the direct channel's lane (both change
        // under this lock).
        debug_assert!(back.is_some(), "the Admission and the lane disagree");
        let (outstanding, owed) = back.unwrap_or((false, 0));
        st.adm.restore(outstanding, owed);
    }

    /// Lends the common path to the direct connection if the port is in the state
    /// where only that connection's data can change it (see `Admission::lend`) and
    /// nothing is queued: the last thing of the locked operations after which it may be.
    fn lend_lane(&self, st: &mut PortState) {
        let Some(key) = st.direct_key else {
            return;
        };
        if !st.queue.is_empty() || st.adm.is_lent() || !Lane::fits(self.window) {
            return;
        }
        let Some(owed) = st.adm.lend(key) else {
            return;
        };
        let direct = self.direct.read();
        // The two change together, under the state lock.
        debug_assert!(direct.as_ref().is_some_and(|d| d.key == key));
        match direct.as_ref() {
            Some(d) if d.key == key => d.lane.lend(owed),
            _ => st.adm.restore(false, owed),
        }
    }

    /// Tells this port's polled transports that no thread polls them for it now
    /// (`TransportInstance::progress_end`). A transport may keep a channel's messages
    /// for the thread that polled it (shm records the channel, and its sender then
    /// sends no wake-up), also after that thread returned with a message; so a
    /// receive calls this before it waits without polling, and a receive that polled
    /// calls it on its way out while another receive of the port waits so (`idle`).
    /// What a transport kept arrives through the callbacks.
    fn end_polling(&self) {
        for (_, t) in self.polled_instances() {
            t.progress_end();
        }
    }

    /// The direct channel, if any (see `direct`).
    fn direct(&self) -> Option<Arc<Direct>> {
        self.direct.read().clone()
    }

    fn sync_ready(&self, st: &PortState) {
        let ready = st.adm.is_closed() || (!st.adm.outstanding() && !st.queue.is_empty());
        self.ready.store(ready, Ordering::Release);
    }

    fn notify(&self, st: &mut PortState) {
        self.sync_ready(st);
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
        if st.parked > 0 {
            for (_, t) in self.polled_instances() {
                t.interrupt();
            }
        }
        if !st.wakers.is_empty() {
            for w in st.wakers.drain(..) {
                w.wake();
            }
        }
    }

    /// A Connect arrived on `key` (called by the router). Returns the answer to send now,
    /// or None if the connect waits for the outstanding message to finish.
    pub(crate) fn connect_request(
        &self,
        key: ChannelKey,
        origin: &SendPortIdentifier,
        their_type: &PortType,
    ) -> Option<Control> {
        if *their_type != self.port_type {
            return Some(Control::Reject(RejectReason::TypeMismatch {
                receiver: self.port_type,
            }));
        }
        if let Some(why) = self.state.lock().adm.check() {
            return Some(Control::Reject(why));
        }
        if let Some(up) = &self.connect_upcall {
            if !up.got_connection(&self.ident, origin) {
                return Some(Control::Reject(RejectReason::Refused));
            }
        }
        let mut st = self.state.lock();
        self.lane_back(&mut st);
        if st.adm.is_closed() {
            // A closed port lends nothing again.
            return Some(Control::Reject(RejectReason::Closed));
        }
        let origin = Arc::new(origin.clone());
        if key.0 < 64
            && self.polled.load(Ordering::Relaxed) & (1 << key.0) == 0
            && self.transports.get(key.0).is_some_and(Option::is_some)
        {
            self.polled.fetch_or(1 << key.0, Ordering::Relaxed);
        }
        let answer = match st.adm.admit(key, origin) {
            Admitted::Deferred => None,
            Admitted::Accepted => {
                // A sender to wait for again: older losses are no longer news.
                st.unreported.clear();
                self.sync_direct(&mut st);
                Some(Control::Accept {
                    receiver: self.ident.clone(),
                })
            }
            Admitted::Rejected(why) => Some(Control::Reject(why)),
        };
        self.lend_lane(&mut st);
        answer
    }

    /// A data message arrived on a connection of this port.
    pub(crate) fn deliver(&self, key: ChannelKey, seq: u64, buf: ReceivedBuffer) {
        let mut st = self.state.lock();
        self.lane_back(&mut st);
        let Some(origin) = st.adm.connection(&key).cloned() else {
            tracing::warn!(port = %self.ident, "data on an unknown connection dropped");
            self.lend_lane(&mut st);
            return;
        };
        if st.adm.is_closed() {
            return;
        }
        st.queue.push_back(Incoming {
            key,
            origin,
            seq,
            buf,
        });
        self.notify(&mut st);
    }

    /// A connection ended (Disconnect, or the channel closed or was lost).
    pub(crate) fn connection_ended(&self, key: ChannelKey, why: Disconnect) {
        let origin = {
            let mut st = self.state.lock();
            self.lane_back(&mut st);
            let origin = st.adm.ended(key);
            if let Some(o) = &origin {
                if let Disconnect::Lost(reason) = &why {
                    st.lost.push(((**o).clone(), why.clone()));
                    if !st.upcalls && self.port_type.capabilities().intersects(EXPLICIT_RECEIPT) {
                        if st.unreported.len() >= MAX_UNREPORTED {
                            st.unreported.pop_front();
                        }
                        st.unreported.push_back((Arc::clone(o), reason.clone()));
                    }
                }
            }
            self.sync_direct(&mut st);
            self.notify(&mut st);
            self.lend_lane(&mut st);
            origin
        };
        if let (Some(origin), Some(up)) = (origin, &self.connect_upcall) {
            up.lost_connection(&self.ident, &origin, &why);
        }
    }

    /// Ends, as lost, the connections whose sending member the registry reports gone
    /// (it left, or was declared dead): a frozen process keeps its connections open, and
    /// only the registry's heartbeats tell that it is gone. A member the registry does
    /// not list yet (its `Joined` still on the way) is not gone. Called by a waiting
    /// receive or close every [`LIVENESS_CHECK`] of the port (`until_liveness_check`),
    /// on the thread that waits: the connection upcall then runs on it.
    fn drop_dead_senders(&self) {
        let Some(ibis) = self.ibis.upgrade() else {
            return;
        };
        let origins: Vec<(ChannelKey, Arc<SendPortIdentifier>)> = {
            let st = self.state.lock();
            st.adm
                .connections()
                .map(|(k, o)| (*k, Arc::clone(o)))
                .collect()
        };
        for (key, origin) in origins {
            if ibis.is_gone(&origin.ibis) == Some(true) {
                tracing::debug!(port = %self.ident, %origin, "sender's member gone: connection ended");
                ibis.close_channel(key);
                self.connection_ended(
                    key,
                    Disconnect::Lost(format!("the registry reports member {} gone", origin.ibis)),
                );
            }
        }
    }

    /// The outstanding message was finished: deliver the next, accept waiting connects.
    pub(crate) fn message_finished(&self, from: ChannelKey, cost: u64) {
        let (pending, credit) = {
            let mut st = self.state.lock();
            self.lane_back(&mut st);
            // Flow control and deferred connects (see `port_protocol`).
            let Finished {
                credit,
                accepted: pending,
            } = st.adm.finished(from, cost);
            if !pending.is_empty() {
                st.unreported.clear();
                self.sync_direct(&mut st);
            }
            self.notify(&mut st);
            self.lend_lane(&mut st);
            (pending, credit)
        };
        if let Some(n) = credit {
            self.send_credit(from, n);
        }
        if !pending.is_empty() {
            if let Some(ibis) = self.ibis.upgrade() {
                let accept = protocol::encode_control(&Control::Accept {
                    receiver: self.ident.clone(),
                });
                for (key, _) in pending {
                    ibis.send_raw(key, &[&accept]);
                }
            }
        }
    }

    /// Returns `n` bytes of credits to the sender on `key`.
    pub(crate) fn send_credit(&self, key: ChannelKey, n: u64) {
        if let Some(ibis) = self.ibis.upgrade() {
            let c = protocol::encode_control(&Control::Credit { bytes: n });
            ibis.send_raw(key, &[&c]);
        }
    }

    /// The next message, if one can be handed out now. `report`: an explicit receive,
    /// which also returns [`IplError::ConnectionLost`] for a lost connection when
    /// nothing is left to wait for: no message queued and no connection open (each loss
    /// once, after the messages that came before it). Message upcalls do not.
    fn take_locked(
        self: &Arc<Self>,
        st: &mut PortState,
        report: bool,
    ) -> Option<Result<ReadMessage>> {
        self.lane_back(st);
        if st.adm.is_closed() {
            return Some(Err(IplError::PortClosed));
        }
        if st.adm.outstanding() {
            return None;
        }
        match st.queue.pop_front() {
            Some(inc) => Some(Ok(self.hand_out(st, inc))),
            None if report && st.adm.is_empty() => {
                let Some((origin, reason)) = st.unreported.pop_front() else {
                    self.lend_lane(st);
                    return None;
                };
                Some(Err(IplError::ConnectionLost {
                    origin: Box::new((*origin).clone()),
                    reason,
                }))
            }
            None => {
                self.lend_lane(st);
                None
            }
        }
    }

    /// Makes `inc` the outstanding message.
    fn hand_out(self: &Arc<Self>, st: &mut PortState, inc: Incoming) -> ReadMessage {
        st.adm.hand_out();
        self.sync_ready(st);
        ReadMessage {
            key: inc.key,
            reader: MessageReader::with_offset(inc.buf, protocol::HEADER_LEN),
            source: Source::Queued {
                port: Arc::clone(self),
                origin: inc.origin,
            },
            seq: inc.seq,
            port_type: self.port_type,
            level: self.port_type.serialization(),
            finished: false,
        }
    }

    /// A message the transport handed straight to a waiting receive of this port
    /// (`TransportInstance::take`, which calls this while no later message of the
    /// channel can be delivered): it becomes the receive's message (`out`) if it is
    /// data of one of the port's connections and nothing waits before it (the
    /// transport delivered every earlier message of its channel into the queue before).
    /// Anything else goes the way of a delivered message, through the Ibis instance's
    /// routes.
    ///
    /// When the port's common path is lent to `direct` (see `crate::lane`), a data
    /// message of it is handed out without the lock.
    fn accept_taken(
        self: &Arc<Self>,
        direct: &Arc<Direct>,
        key: ChannelKey,
        buf: ReceivedBuffer,
        out: &mut Option<ReadMessage>,
    ) {
        if let (None, Some(seq)) = (&out, protocol::data_seq(&buf)) {
            if key == direct.key && direct.lane.try_hand_out() {
                *out = Some(ReadMessage {
                    key,
                    reader: MessageReader::with_offset(buf, protocol::HEADER_LEN),
                    source: Source::Lane(Arc::clone(direct)),
                    seq,
                    port_type: self.port_type,
                    level: self.port_type.serialization(),
                    finished: false,
                });
                return;
            }
            let mut st = self.state.lock();
            self.lane_back(&mut st);
            if !st.adm.is_closed() && !st.adm.outstanding() && st.queue.is_empty() {
                if let Some(origin) = st.adm.connection(&key).cloned() {
                    let inc = Incoming {
                        key,
                        origin,
                        seq,
                        buf,
                    };
                    *out = Some(self.hand_out(&mut st, inc));
                    return;
                }
            }
            self.lend_lane(&mut st);
        }
        if let Some(ibis) = self.ibis.upgrade() {
            ibis.on_message(key, buf);
        }
    }

    /// Waits for the next message, at most `timeout` (None: forever). The clock is read
    /// only once the message is not there at once (a reading costs about 30 ns on a
    /// virtual machine, a third of a raw shared-memory round trip): the wait counts from
    /// that first reading.
    fn next(
        self: &Arc<Self>,
        timeout: Option<Duration>,
        report: bool,
    ) -> Result<Option<ReadMessage>> {
        let r = self.next_inner(timeout, report);
        // Another receive of this port waits without polling: what this one's polls
        // left recorded in the transports must not wait for a poller (see
        // `end_polling`). One load when nobody waits so.
        if self.idle.load(Ordering::SeqCst) > 0 {
            self.end_polling();
        }
        r
    }

    fn next_inner(
        self: &Arc<Self>,
        timeout: Option<Duration>,
        report: bool,
    ) -> Result<Option<ReadMessage>> {
        // Poll (yielding the CPU between polls) for an adaptive budget before sleeping;
        // the policy (the budget, where to sleep) is `receive_wait`'s.
        let max = self.spin;
        // This thread sent something since its last receive: it probably waits for the
        // answer, whose delay (a round trip) is worth learning. A thread that only
        // receives (a stream) learns only while it polls its transports itself; where
        // their threads bring its data, it keeps the configured budget and sleeps
        // sooner, leaving them the CPU.
        let awaits_reply = crate::send_port::take_sent_since_receive();
        // The first and the last clock reading (None: not read yet). The poll loops read
        // the clock only every few rounds, and a message that is taken without sleeping
        // is timed with the last reading.
        let mut start: Option<Instant> = None;
        let mut now: Option<Instant> = None;
        // A message the transport handed to this thread directly.
        let mut taken: Option<ReadMessage> = None;
        // This receive polled its transports itself (receiver-driven progress).
        let mut drove_progress = false;
        let budget = Duration::from_nanos(self.spin_ns.load(Ordering::Relaxed));
        // A zero budget (`spin` zero, `IPL_SPIN_US=0`) does not poll at all: the receiver sleeps at once.
        if !budget.is_zero() && !self.ready.load(Ordering::Acquire) {
            // Reads the clock; the time read, or None once the poll budget (or the
            // timeout) is spent.
            let mut keep_polling = || {
                let t = Instant::now();
                let s = *start.get_or_insert(t);
                now = Some(t);
                let until = s + timeout.map_or(budget, |d| d.min(budget));
                (t < until).then_some(t)
            };
            // A first look through the direct channel's fast path, before the polled
            // transports are gathered: a message that is there already (a stream, a
            // busy server, a reply that came first) costs no more than that.
            let direct = self.direct();
            if let Some(d) = &direct {
                if let Some(f) = &d.fast {
                    f.take(|buf| self.accept_taken(d, d.key, buf, &mut taken));
                }
            }
            if taken.is_none() {
                // The direct channel's fast path when its transport is the only one
                // polled: the loop takes through it alone, and gathers the transports
                // only if it ends without a message.
                let alone = direct.as_ref().and_then(|d| {
                    let only = self.polled.load(Ordering::Relaxed) == 1u64 << d.key.0;
                    d.fast.as_ref().filter(|_| only).map(|f| (d, f))
                });
                let polled = match alone {
                    Some(_) => PolledInstances::new(),
                    None => self.polled_instances(),
                };
                if polled.is_empty() && alone.is_none() {
                    while !self.ready.load(Ordering::Acquire) && keep_polling().is_some() {
                        std::thread::yield_now();
                    }
                } else {
                    drove_progress = true;
                    // Receiver-driven progress: this thread moves messages out of the
                    // transports itself. It spins without a system call (a yield costs more
                    // than a shared-memory round trip), yielding every YIELD_EVERY so that
                    // other threads on a busy CPU still run.
                    //
                    // A port with one connection asks its transport for that channel's next
                    // message directly (see `direct`).
                    let mut rounds = 0u32;
                    let mut next_yield: Option<Instant> = None;
                    while !self.ready.load(Ordering::Acquire) {
                        let mut delivered = 0;
                        if let Some((d, f)) = alone {
                            delivered += f.take(|buf| self.accept_taken(d, d.key, buf, &mut taken));
                        }
                        for (slot, t) in &polled {
                            delivered += match &direct {
                                Some(d) if d.key.0 == *slot => {
                                    d.take(t, |key, buf| self.accept_taken(d, key, buf, &mut taken))
                                }
                                _ => t.progress(),
                            };
                        }
                        if taken.is_some() {
                            break;
                        }
                        rounds = rounds.wrapping_add(1);
                        if delivered == 0 {
                            std::hint::spin_loop();
                        }
                        if rounds.is_multiple_of(8) {
                            let Some(t) = keep_polling() else {
                                break;
                            };
                            let due = *next_yield.get_or_insert(t + YIELD_EVERY);
                            if t >= due {
                                std::thread::yield_now();
                                next_yield = Some(t + YIELD_EVERY);
                            }
                        }
                    }
                    if taken.is_none() && !self.ready.load(Ordering::Acquire) {
                        // This thread is about to sleep: the transports' own threads must
                        // deliver from now on.
                        let gathered;
                        let polled = match alone {
                            Some(_) => {
                                gathered = self.polled_instances();
                                &gathered
                            }
                            None => &polled,
                        };
                        for (_, t) in polled {
                            t.progress_end();
                        }
                    }
                }
            }
        }
        let mut slept = false;
        let adapt = |got: bool, waited: Duration| {
            let budget = Duration::from_nanos(self.spin_ns.load(Ordering::Relaxed));
            let seen = receive_wait::Seen {
                got,
                waited,
                awaited_reply: awaits_reply,
                drove_progress,
            };
            let next = receive_wait::next_budget(max, budget, seen);
            self.spin_ns
                .store(next.as_nanos() as u64, Ordering::Relaxed);
        };
        if let Some(m) = taken {
            if start.is_some() || receive_wait::first_look_changes_budget(max, budget) {
                adapt(true, waited(false, start, now));
            }
            return Ok(Some(m));
        }
        // Where this receive sleeps if nothing comes (see `receive_wait::sleep_in`): in
        // the transport, which `notify` interrupts for whatever arrives otherwise, or
        // on the port. One that awaits no reply sleeps on the port whatever its
        // transports, so a stream does not gather them to find that out.
        let mut park_on = if awaits_reply {
            let polled = self.polled_instances();
            match (
                receive_wait::sleep_in(awaits_reply, polled.len()),
                polled.as_slice(),
            ) {
                (receive_wait::SleepIn::Transport, [(slot, t)]) => Some((*slot, Arc::clone(t))),
                _ => None,
            }
        } else {
            None
        };
        // Counted as waiting without polling from here on (see `end_polling`), so that a
        // receive that polls meanwhile ends its polling on its way out.
        let _idle = Idle::new(&self.idle);
        // Whether this receive ended its transports' polling before sleeping on the port.
        let mut polling_ended = false;
        let mut st = self.state.lock();
        loop {
            if let Some(r) = self.take_locked(&mut st, report) {
                adapt(true, waited(slept, start, now));
                return r.map(Some);
            }
            slept = true;
            let start = *start.get_or_insert_with(Instant::now);
            // It sleeps at most until the port next asks the registry about its senders.
            let Some(until_check) = until_liveness_check(&mut st) else {
                parking_lot::MutexGuard::unlocked(&mut st, || self.drop_dead_senders());
                continue;
            };
            if let Some((slot, t)) = &park_on {
                // As long as the condition variable would wait: `notify` interrupts.
                let nap = match timeout {
                    None => until_check,
                    Some(limit) => {
                        let waited = start.elapsed();
                        if waited >= limit {
                            adapt(false, waited);
                            return Ok(None);
                        }
                        (limit - waited).min(until_check)
                    }
                };
                st.parked += 1;
                drop(st);
                if !t.wait(nap) {
                    // The transport cannot park threads: sleep on the port from now on.
                    park_on = None;
                    st = self.state.lock();
                    st.parked -= 1;
                    continue;
                }
                // Deliver what woke us: the direct channel's next message to this
                // thread, anything else through the callbacks.
                let mut taken = None;
                match self.direct() {
                    Some(d) if d.key.0 == *slot => {
                        d.take(t, |key, buf| self.accept_taken(&d, key, buf, &mut taken));
                    }
                    _ => {
                        t.progress();
                    }
                }
                st = self.state.lock();
                st.parked -= 1;
                if let Some(m) = taken {
                    drop(st);
                    adapt(true, waited(true, Some(start), None));
                    return Ok(Some(m));
                }
                continue;
            }
            if !polling_ended {
                // About to sleep on the port, where only the callbacks bring messages:
                // what the transports kept for a poller is delivered first, and the
                // queue looked at again. (A thread parked in a transport is woken by
                // it; its `wait` ends what polling needs ending there, and a tcp
                // receiver parked there keeps the reader threads standing back.)
                polling_ended = true;
                parking_lot::MutexGuard::unlocked(&mut st, || self.end_polling());
                continue;
            }
            match timeout {
                None => {
                    st.sleepers += 1;
                    self.cond.wait_for(&mut st, until_check);
                    st.sleepers -= 1;
                }
                Some(t) => {
                    let waited = start.elapsed();
                    if waited >= t {
                        adapt(false, waited);
                        return Ok(None);
                    }
                    st.sleepers += 1;
                    self.cond.wait_for(&mut st, (t - waited).min(until_check));
                    st.sleepers -= 1;
                }
            }
        }
    }
}

/// A receive port. Create it with [`Ibis::create_receive_port`](crate::Ibis::create_receive_port),
/// then [`enable_connections`](Self::enable_connections).
pub struct ReceivePort {
    pub(crate) shared: Arc<PortShared>,
    upcall: Mutex<Option<Box<dyn MessageUpcall>>>,
    upcall_thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for ReceivePort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceivePort")
            .field("id", &self.shared.ident)
            .finish()
    }
}

impl ReceivePort {
    pub(crate) fn new(shared: Arc<PortShared>, upcall: Option<Box<dyn MessageUpcall>>) -> Self {
        ReceivePort {
            shared,
            upcall: Mutex::new(upcall),
            upcall_thread: Mutex::new(None),
        }
    }

    /// This port's identifier, to hand to senders.
    pub fn identifier(&self) -> &ReceivePortIdentifier {
        &self.shared.ident
    }

    /// The port's type.
    pub fn port_type(&self) -> &PortType {
        &self.shared.port_type
    }

    /// Starts accepting connections.
    pub fn enable_connections(&self) {
        let mut st = self.shared.state.lock();
        st.adm.enable(true);
    }

    /// Stops accepting new connections (existing ones stay).
    pub fn disable_connections(&self) {
        self.shared.state.lock().adm.enable(false);
    }

    /// The send ports connected now.
    pub fn connected_to(&self) -> Vec<SendPortIdentifier> {
        self.shared
            .state
            .lock()
            .adm
            .connections()
            .map(|(_, o)| (**o).clone())
            .collect()
    }

    /// Messages that arrived and wait to be received (bounded per connection by the
    /// flow-control window). Messages a transport still holds for the port's next
    /// receive (shm keeps a channel's messages in its ring while a receive of it polls,
    /// and between two such receives) are not counted.
    pub fn queued(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// Connections lost (not closed in an orderly way) since the last call. The losses
    /// returned here are not reported again by [`receive`](Self::receive) as
    /// [`IplError::ConnectionLost`].
    pub fn lost_connections(&self) -> Vec<(SendPortIdentifier, Disconnect)> {
        let mut st = self.shared.state.lock();
        st.unreported.clear();
        std::mem::take(&mut st.lost)
    }

    fn need(&self, c: PortCapabilities, name: &'static str) -> Result<()> {
        if self.shared.port_type.has(c) {
            Ok(())
        } else {
            Err(IplError::CapabilityNotRequested(name))
        }
    }

    /// Blocks until a message arrives (needs `receive.explicit`). Ends with
    /// [`IplError::ConnectionLost`] when a connection was lost and the port has no
    /// message and no connection left (so a receiver whose only sender died is told, not
    /// left waiting); a later receive waits for new connections again. Losses are kept
    /// for this only on a port without message upcalls, at most 64, and not after
    /// [`lost_connections`](Self::lost_connections) returned them or a newer connection
    /// was accepted. While it waits it asks the registry once a second (per port)
    /// whether the senders are gone; the connection upcall of a loss found so runs on
    /// this thread (see [`ReceivePortConnectUpcall`]).
    pub fn receive(&self) -> Result<ReadMessage> {
        self.need(PortCapabilities::RECEIVE_EXPLICIT, "receive.explicit")?;
        self.shared.next(None, true)?.ok_or(IplError::PortClosed)
    }

    /// Waits at most `timeout` for a message (needs `receive.timeout`). A lost
    /// connection ends it as in [`receive`](Self::receive).
    pub fn receive_timeout(&self, timeout: Duration) -> Result<ReadMessage> {
        self.need(PortCapabilities::RECEIVE_TIMEOUT, "receive.timeout")?;
        // Not `ok_or`: the error would be built, and dropped, on every message.
        match self.shared.next(Some(timeout), true)? {
            Some(m) => Ok(m),
            None => Err(IplError::Timeout(timeout)),
        }
    }

    /// Returns a message if one is ready, without waiting (needs `receive.poll`). Like
    /// [`receive`](Self::receive), returns [`IplError::ConnectionLost`] for a lost
    /// connection once nothing is left to wait for; it does not ask the registry
    /// whether the senders are gone (a waiting receive or `close` does).
    pub fn poll(&self) -> Result<Option<ReadMessage>> {
        self.need(PortCapabilities::RECEIVE_POLL, "receive.poll")?;
        if !self.shared.ready.load(Ordering::Acquire) {
            // Give receiver-driven transports one chance to deliver.
            for (_, t) in self.shared.polled_instances() {
                t.progress();
            }
            if !self.shared.ready.load(Ordering::Acquire) {
                return Ok(None);
            }
        }
        let mut st = self.shared.state.lock();
        self.shared.take_locked(&mut st, true).transpose()
    }

    /// Waits for a message from async code (needs `receive.explicit`); a lost
    /// connection ends it as in [`receive`](Self::receive). Cancel-safe: a
    /// dropped future takes no message. It does not ask the registry whether the
    /// senders are gone: a frozen sender's connection stays open until the transport
    /// reports it lost, or a blocking receive, `receive_timeout` or `close` of the same
    /// port finds the sender gone in the registry (bound the wait with a timer of the
    /// async runtime where that matters).
    pub async fn receive_async(&self) -> Result<ReadMessage> {
        self.need(PortCapabilities::RECEIVE_EXPLICIT, "receive.explicit")?;
        // This receive does not poll its transports: those that keep a channel's
        // messages for a thread that polled it (a blocking receive of this port) must
        // deliver them again, now and whenever such a receive returns while this one
        // is pending (see `PortShared::end_polling`).
        let _idle = Idle::new(&self.shared.idle);
        self.shared.end_polling();
        poll_fn(|cx| {
            let mut st = self.shared.state.lock();
            match self.shared.take_locked(&mut st, true) {
                Some(r) => Poll::Ready(r),
                None => {
                    if !st.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                        st.wakers.push(cx.waker().clone());
                    }
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// Starts message upcalls (needs `receive.autoupcalls` and a port created with an
    /// upcall). Messages are handed to the upcall one at a time in a thread of the port.
    pub fn enable_message_upcalls(&self) -> Result<()> {
        self.need(
            PortCapabilities::RECEIVE_AUTO_UPCALLS,
            "receive.autoupcalls",
        )?;
        let mut th = self.upcall_thread.lock();
        if th.is_some() {
            return Ok(());
        }
        let Some(mut handler) = self.upcall.lock().take() else {
            return Err(IplError::InvalidPortType(
                "receive port was created without a message upcall".into(),
            ));
        };
        {
            // Nothing takes lost connections as errors from a port with message upcalls.
            let mut st = self.shared.state.lock();
            st.upcalls = true;
            st.unreported.clear();
        }
        let shared = Arc::clone(&self.shared);
        let name = format!("ipl-upcall-{}", shared.ident.name);
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                while let Ok(Some(m)) = shared.next(None, false) {
                    handler.upcall(m);
                }
            })
            .map_err(|e| IplError::Protocol(format!("cannot start upcall thread: {e}")))?;
        *th = Some(handle);
        Ok(())
    }

    /// Closes the port. New connections are refused at once; then it waits up to
    /// `timeout` (None: without bound, but a sender the registry declares dead counts
    /// as gone) for the connected senders to disconnect, and
    /// closes the remaining connections itself (those senders see them lost). Messages
    /// not yet received are discarded; their number is returned. Waiting receivers get
    /// [`IplError::PortClosed`].
    pub fn close(&self, timeout: Option<Duration>) -> usize {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.shared.state.lock();
        st.adm.enable(false);
        // A sender the registry declares dead never leaves: checked every
        // LIVENESS_CHECK of waiting (a frozen process keeps its connections open).
        while st.adm.keys().next().is_some() {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
            let Some(until_check) = until_liveness_check(&mut st) else {
                parking_lot::MutexGuard::unlocked(&mut st, || self.shared.drop_dead_senders());
                continue;
            };
            let nap = match deadline {
                Some(d) => d.saturating_duration_since(now).min(until_check),
                None => until_check,
            };
            st.sleepers += 1;
            self.shared.cond.wait_for(&mut st, nap);
            st.sleepers -= 1;
        }
        self.shared.lane_back(&mut st);
        st.adm.close();
        let (forced, waiting) = st.adm.drain();
        let waiting: Vec<ChannelKey> = waiting.into_iter().map(|(k, _)| k).collect();
        self.shared.sync_direct(&mut st);
        let discarded = st.queue.len();
        st.queue.clear();
        self.shared.notify(&mut st);
        drop(st);
        if let Some(ibis) = self.shared.ibis.upgrade() {
            for key in forced.iter().map(|(k, _)| *k).chain(waiting) {
                ibis.close_channel(key);
            }
            ibis.remove_receive_port(&self.shared.ident.name);
        }
        // The channels are gone from the routes, so no transport event reports these
        // connections: tell the connection upcall here.
        if let Some(up) = &self.shared.connect_upcall {
            for (_, origin) in &forced {
                up.lost_connection(&self.shared.ident, origin, &Disconnect::Local);
            }
        }
        if let Some(h) = self.upcall_thread.lock().take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        discarded
    }
}

impl Drop for ReceivePort {
    fn drop(&mut self) {
        if !self.shared.state.lock().adm.is_closed() {
            self.close(Some(Duration::ZERO));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipl_registry::{IbisIdentifier, MemberId};
    use PortCapabilities as P;

    fn member(id: u64) -> IbisIdentifier {
        IbisIdentifier::new(MemberId(id), "pool", "local", format!("m{id}"), Vec::new())
    }

    fn port(caps: P) -> Arc<PortShared> {
        port_over(caps, Vec::new())
    }

    /// A port of capabilities `caps` (and a many-to-one, reliable, fifo data type) on
    /// an instance with `transports`, accepting connections.
    fn port_over(caps: P, transports: Vec<Option<Weak<TransportInstance>>>) -> Arc<PortShared> {
        let t = PortType::new(
            caps | P::CONNECTION_MANY_TO_ONE
                | P::COMMUNICATION_RELIABLE
                | P::COMMUNICATION_FIFO
                | P::SERIALIZATION_DATA,
        )
        .expect("valid port type");
        let ident = ReceivePortIdentifier {
            ibis: member(0),
            name: "in".into(),
        };
        let p = PortShared::new(
            ident,
            t,
            Weak::new(),
            transports,
            Duration::ZERO,
            1000,
            None,
        );
        p.state.lock().adm.enable(true);
        p
    }

    /// Connection `n` from member `n` (accepted).
    fn connect(p: &PortShared, n: u64) -> ChannelKey {
        let origin = SendPortIdentifier {
            ibis: member(n),
            name: "out".into(),
        };
        let key = (0, n);
        let answer = p.connect_request(key, &origin, &p.port_type.clone());
        assert!(matches!(answer, Some(Control::Accept { .. })), "{answer:?}");
        key
    }

    fn lose(p: &PortShared, key: ChannelKey) {
        p.connection_ended(key, Disconnect::Lost("test".into()));
    }

    fn explicit_receive(p: &Arc<PortShared>) -> Option<Result<ReadMessage>> {
        let mut st = p.state.lock();
        p.take_locked(&mut st, true)
    }

    #[test]
    fn a_port_without_explicit_receipt_keeps_no_losses() {
        let p = port(P::RECEIVE_AUTO_UPCALLS);
        for n in 1..=500 {
            let k = connect(&p, n);
            lose(&p, k);
        }
        assert_eq!(p.state.lock().unreported.len(), 0);
    }

    #[test]
    fn a_port_with_message_upcalls_keeps_no_losses() {
        let p = port(P::RECEIVE_EXPLICIT | P::RECEIVE_AUTO_UPCALLS);
        let rp = ReceivePort::new(Arc::clone(&p), Some(Box::new(|_m: ReadMessage| {})));
        rp.enable_message_upcalls().expect("upcalls start");
        let k = connect(&p, 1);
        lose(&p, k);
        assert_eq!(p.state.lock().unreported.len(), 0);
        rp.close(Some(Duration::ZERO));
    }

    #[test]
    fn losses_kept_for_explicit_receives_are_bounded() {
        let p = port(P::RECEIVE_EXPLICIT);
        let keys: Vec<_> = (1..=500).map(|n| connect(&p, n)).collect();
        for k in keys {
            lose(&p, k);
        }
        assert_eq!(p.state.lock().unreported.len(), MAX_UNREPORTED);
        // The newest are kept.
        match explicit_receive(&p) {
            Some(Err(IplError::ConnectionLost { origin, .. })) => {
                assert_eq!(origin.ibis.id(), MemberId(500 - MAX_UNREPORTED as u64 + 1))
            }
            other => panic!("expected a lost connection: {:?}", other.map(|r| r.is_ok())),
        }
    }

    #[test]
    fn a_loss_is_reported_once_by_an_explicit_receive() {
        let p = port(P::RECEIVE_EXPLICIT);
        let k = connect(&p, 1);
        lose(&p, k);
        assert!(matches!(
            explicit_receive(&p),
            Some(Err(IplError::ConnectionLost { .. }))
        ));
        assert!(explicit_receive(&p).is_none());
    }

    #[test]
    fn a_loss_seen_through_lost_connections_is_not_reported_again() {
        let p = port(P::RECEIVE_EXPLICIT);
        let rp = ReceivePort::new(Arc::clone(&p), None);
        let k = connect(&p, 1);
        lose(&p, k);
        assert_eq!(rp.lost_connections().len(), 1);
        assert!(explicit_receive(&p).is_none());
    }

    #[test]
    fn a_new_connection_makes_older_losses_stale() {
        let p = port(P::RECEIVE_EXPLICIT);
        let a = connect(&p, 1);
        lose(&p, a);
        let b = connect(&p, 2);
        p.connection_ended(b, Disconnect::Closed);
        assert!(explicit_receive(&p).is_none());
    }

    /// A port whose connections come over a (gone) transport with receiver-driven
    /// progress in slot 0: its one connection is direct, and its common path is lent.
    fn polled_port() -> Arc<PortShared> {
        port_over(P::RECEIVE_EXPLICIT, vec![Some(Weak::new())])
    }

    fn data(seq: u64) -> ReceivedBuffer {
        let mut v = protocol::data_header(seq).to_vec();
        v.extend_from_slice(b"payload");
        ipl_transport_abi::PluginBuffer::owned(v).into()
    }

    /// What the waiting receive of the direct channel gets for `buf` (as from `take`).
    fn taken(p: &Arc<PortShared>, key: ChannelKey, buf: ReceivedBuffer) -> Option<ReadMessage> {
        let d = p.direct().expect("a direct connection");
        let mut out = None;
        p.accept_taken(&d, key, buf, &mut out);
        out
    }

    fn lent(p: &PortShared) -> bool {
        p.state.lock().adm.is_lent()
    }

    #[test]
    fn a_lone_connection_gets_the_lane_and_its_messages_go_without_the_lock() {
        let p = polled_port();
        let a = connect(&p, 1);
        assert!(lent(&p));
        let m = taken(&p, a, data(7)).expect("handed out");
        assert!(matches!(m.source, Source::Lane(_)));
        assert_eq!(m.origin().ibis.id(), MemberId(1));
        // A second message waits for the first: not handed out but routed through
        // the Ibis instance (this port has none, so it is dropped here).
        assert!(taken(&p, a, data(8)).is_none());
        assert_eq!(p.state.lock().queue.len(), 0);
        // Delivered into the queue instead, it waits there for the first's finish.
        p.deliver(a, 8, data(8));
        assert!(
            explicit_receive(&p).is_none(),
            "the lane's message is outstanding"
        );
        drop(m);
        assert!(!lent(&p), "not while a message is queued");
        let q = explicit_receive(&p).expect("queued").expect("a message");
        assert_eq!(q.seq, 8);
        drop(q);
        assert!(lent(&p), "lent again after the locked way");
        let m = taken(&p, a, data(9)).expect("handed out");
        assert!(matches!(m.source, Source::Lane(_)));
        drop(m);
        // Finished on the lane: still lent.
        assert!(lent(&p));
    }

    #[test]
    fn a_connect_during_a_lane_message_waits_for_its_finish_and_ends_the_lane() {
        let p = polled_port();
        let a = connect(&p, 1);
        let m = taken(&p, a, data(0)).expect("handed out");
        let origin = SendPortIdentifier {
            ibis: member(2),
            name: "out".into(),
        };
        assert_eq!(
            p.connect_request((0, 2), &origin, &p.port_type.clone()),
            None
        );
        assert!(!lent(&p));
        assert!(
            p.state.lock().adm.outstanding(),
            "the lane's message is outstanding"
        );
        drop(m);
        let st = p.state.lock();
        assert!(!st.adm.outstanding());
        assert_eq!(st.adm.keys().count(), 2, "the deferred connect is accepted");
        assert!(!st.adm.is_lent(), "two connections: no lane");
        drop(st);
        assert!(p.direct().is_none());
    }

    #[test]
    fn a_message_delivered_through_the_queue_takes_the_lane_back_until_it_is_finished() {
        let p = polled_port();
        let a = connect(&p, 1);
        p.deliver(a, 3, data(3));
        assert!(!lent(&p));
        let m = explicit_receive(&p).expect("queued").expect("a message");
        assert!(matches!(m.source, Source::Queued { .. }));
        assert_eq!(m.seq, 3);
        assert!(!lent(&p), "not while a message is outstanding");
        // While it is outstanding, the lane hands out nothing either.
        assert!(taken(&p, a, data(4)).is_none());
        drop(m);
        assert!(lent(&p));
    }

    #[test]
    fn a_lane_message_outlives_its_connection_and_the_port() {
        let p = polled_port();
        let a = connect(&p, 1);
        let m = taken(&p, a, data(0)).expect("handed out");
        lose(&p, a);
        assert!(!lent(&p));
        assert!(p.direct().is_none());
        assert!(taken_through_a_stale_direct(&p, a).is_none());
        drop(p);
        assert_eq!(m.origin().ibis.id(), MemberId(1));
        drop(m);
    }

    /// A message handed to a waiting receive through a direct channel that is no longer
    /// the port's (the receive took it before the connection ended): never lent.
    fn taken_through_a_stale_direct(p: &Arc<PortShared>, key: ChannelKey) -> Option<ReadMessage> {
        let d = Arc::new(Direct {
            key,
            fast: None,
            origin: Arc::new(SendPortIdentifier {
                ibis: member(9),
                name: "stale".into(),
            }),
            lane: Lane::default(),
            half_window: 500,
            port: Arc::downgrade(p),
        });
        let mut out = None;
        p.accept_taken(&d, key, data(1), &mut out);
        out
    }

    #[test]
    fn a_closed_port_lends_nothing_and_hands_out_nothing() {
        let p = polled_port();
        let a = connect(&p, 1);
        let rp = ReceivePort::new(Arc::clone(&p), None);
        let d = p.direct().expect("direct");
        rp.close(Some(Duration::ZERO));
        assert!(!lent(&p));
        let mut out = None;
        p.accept_taken(&d, a, data(0), &mut out);
        assert!(out.is_none());
    }
}
