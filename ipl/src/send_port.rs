//! Send ports: connect to one or many receive ports, write messages, multicast.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

use ipl_registry::IbisIdentifier;
use ipl_serialization::MessageWriter;

use crate::capabilities::PortCapabilities;
use crate::error::{IplError, Result};
use crate::ibis::{ChannelKey, IbisShared};
use crate::identifiers::{ReceivePortIdentifier, SendPortIdentifier};
use crate::message::WriteMessage;
use crate::port_protocol::{self, ConnectStep};
use crate::port_type::PortType;
use crate::protocol::{self, Control};
use crate::receive_port::Disconnect;

/// Disconnect upcall of a send port (needs `connection.upcalls`): a connection to a
/// receive port was lost. Called from the transport's threads.
pub trait SendPortDisconnectUpcall: Send + Sync + 'static {
    /// The connection to `receiver` ended.
    fn lost_connection(
        &self,
        port: &SendPortIdentifier,
        receiver: &ReceivePortIdentifier,
        why: &Disconnect,
    );
}

/// The sender's view of one outgoing channel: the handshake reply and whether the
/// channel was lost. Shared with the router, which fills it in from transport events.
pub(crate) struct OutLink {
    state: Mutex<LinkState>,
    cond: Condvar,
    port: Mutex<Option<std::sync::Weak<SendShared>>>,
    /// Bytes the receiver still accepts (flow control). Taken by the sending thread
    /// without the lock; granted by the router, which then notifies under the lock.
    credits: AtomicU64,
    /// Mirrors `state.lost.is_some()`, for the lock-free check of every send.
    is_lost: AtomicBool,
    /// The flow-control window: the credits a sender starts with.
    window: u64,
    /// The member the channel goes to (asked about in the registry by a sender that
    /// waits long for credits).
    peer: IbisIdentifier,
}

/// How long a sender waits for credits between two questions to the registry whether
/// the receiver is still a member (a frozen process keeps its connections open, and
/// only the registry's heartbeats tell that it is gone).
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// How long a sender waits for credits while the registry cannot tell whether the
/// receiver is alive (the registry is lost or silent) and no credit arrives: then the
/// message fails for that receiver. The default send timeout of the tcp and shm
/// transports (`send_timeout_ms`); credits that keep coming reset it, so members finish
/// their run after the registry server is gone.
pub(crate) const UNCHECKED_CREDIT_WAIT: Duration = Duration::from_secs(60);

/// The waits of a sender without credits (see `OutLink::take_credit`).
#[derive(Clone, Copy)]
struct CreditWait {
    /// Between two questions to the registry.
    check: Duration,
    /// The longest wait while the registry cannot tell.
    unchecked: Duration,
}

const CREDIT_WAIT: CreditWait = CreditWait {
    check: LIVENESS_CHECK,
    unchecked: UNCHECKED_CREDIT_WAIT,
};

#[derive(Default)]
struct LinkState {
    reply: Option<Control>,
    lost: Option<String>,
}

impl OutLink {
    pub(crate) fn new(window: u64, peer: IbisIdentifier) -> Arc<Self> {
        Arc::new(OutLink {
            peer,
            state: Mutex::new(LinkState::default()),
            cond: Condvar::new(),
            port: Mutex::new(None),
            credits: AtomicU64::new(0),
            is_lost: AtomicBool::new(false),
            window,
        })
    }

    /// The receiver answered the handshake.
    pub(crate) fn reply(&self, c: Control) {
        let mut st = self.state.lock();
        if matches!(c, Control::Accept { .. }) {
            self.credits.store(self.window, Ordering::Release);
        }
        st.reply = Some(c);
        drop(st);
        self.cond.notify_all();
    }

    /// The receiver finished messages costing `n` more bytes.
    pub(crate) fn credit(&self, n: u64) {
        let _ = self
            .credits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_add(n))
            });
        // A sender that found too few credits checks again under the lock before it
        // waits: taking the lock here means it either sees these credits or waits
        // already and gets the notification.
        drop(self.state.lock());
        self.cond.notify_all();
    }

    /// Takes the credit for a message of `cost` if the window allows it now (a message
    /// larger than the window goes when nothing is in flight).
    fn try_take_credit(&self, cost: u64) -> bool {
        self.credits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                crate::port_protocol::take_credit(c, self.window, cost)
            })
            .is_ok()
    }

    /// Takes the credit for a message of this cost, waiting while the receiver's window
    /// is full. Fails with why if the connection was lost (before or meanwhile), if the
    /// registry reports the receiver gone (asked every [`LIVENESS_CHECK`] of waiting: a
    /// frozen receiver keeps its connection open and would never grant credits), or if
    /// no credit came for [`UNCHECKED_CREDIT_WAIT`] while the registry could not tell.
    fn take_credit(&self, cost: u64, ibis: &IbisShared) -> std::result::Result<(), String> {
        self.take_credit_with(cost, CREDIT_WAIT, || ibis.is_gone(&self.peer))
    }

    /// [`take_credit`](Self::take_credit) with the waits given and `is_gone` asked
    /// whether the receiver is gone (None: nobody can tell now).
    fn take_credit_with(
        &self,
        cost: u64,
        wait: CreditWait,
        is_gone: impl Fn() -> Option<bool>,
    ) -> std::result::Result<(), String> {
        if !self.is_lost.load(Ordering::Acquire) && self.try_take_credit(cost) {
            return Ok(());
        }
        let mut check = Instant::now() + wait.check;
        // Since when the registry could not tell, with no credit coming meanwhile.
        let mut unanswered: Option<Instant> = None;
        let mut seen = self.credits.load(Ordering::Acquire);
        let mut st = self.state.lock();
        loop {
            if let Some(why) = &st.lost {
                return Err(why.clone());
            }
            if self.try_take_credit(cost) {
                return Ok(());
            }
            let credits = self.credits.load(Ordering::Acquire);
            if credits != seen {
                // Credits flow (just not enough yet): the receiver is alive.
                seen = credits;
                unanswered = None;
            }
            let now = Instant::now();
            if let Some(since) = unanswered {
                if now.duration_since(since) >= wait.unchecked {
                    return Err(format!(
                        "no credits from member {} for {} ms while the registry cannot \
                         tell whether it is alive",
                        self.peer,
                        now.duration_since(since).as_millis()
                    ));
                }
            }
            if now >= check {
                // Not under the lock: the router takes it to grant credits.
                match parking_lot::MutexGuard::unlocked(&mut st, &is_gone) {
                    Some(true) => {
                        return Err(format!(
                            "the registry reports member {} gone while this sender \
                             waited for credits",
                            self.peer
                        ));
                    }
                    Some(false) => unanswered = None,
                    None => {
                        unanswered.get_or_insert(now);
                    }
                }
                check = Instant::now() + wait.check;
                continue;
            }
            let nap = (check - now).min(Duration::from_millis(100));
            self.cond.wait_for(&mut st, nap);
        }
    }

    /// The channel closed or was lost.
    pub(crate) fn lost(&self, key: ChannelKey, why: Disconnect) {
        {
            let mut st = self.state.lock();
            st.lost = Some(match &why {
                Disconnect::Lost(s) => s.clone(),
                Disconnect::Closed => "closed by the receiver".into(),
                Disconnect::Local => "closed locally".into(),
            });
            self.is_lost.store(true, Ordering::Release);
        }
        self.cond.notify_all();
        let port = self.port.lock().as_ref().and_then(|w| w.upgrade());
        if let Some(port) = port {
            port.connection_lost(key, why);
        }
    }

    fn wait_reply(&self, deadline: Instant) -> std::result::Result<Control, Option<String>> {
        let mut st = self.state.lock();
        loop {
            if let Some(r) = st.reply.take() {
                return Ok(r);
            }
            if let Some(l) = &st.lost {
                return Err(Some(l.clone()));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(None);
            }
            self.cond.wait_for(&mut st, deadline - now);
        }
    }
}

struct Connection {
    key: ChannelKey,
    receiver: ReceivePortIdentifier,
    link: Arc<OutLink>,
    /// The channel's fast path, if its transport has one: every message goes there
    /// directly instead of through the instance's transport slot.
    fast: Option<Arc<ipl_transport_abi::FastPath>>,
}

pub(crate) struct SendShared {
    ident: SendPortIdentifier,
    connections: Mutex<Vec<Connection>>,
    lost: Mutex<Vec<(ReceivePortIdentifier, Disconnect)>>,
    /// Connections lost since the last message was sent: the next `finish` reports them.
    unreported: Mutex<Vec<(ChannelKey, ReceivePortIdentifier)>>,
    /// Counts losses (bumped under the `connections` lock): a send whose port saw the
    /// same count at its last snapshot sends on that snapshot without taking a lock.
    losses: AtomicU64,
    upcall: Option<Box<dyn SendPortDisconnectUpcall>>,
}

impl SendShared {
    fn connection_lost(&self, key: ChannelKey, why: Disconnect) {
        let receiver = {
            // Removal and the note for the next `finish` happen under the same lock as a
            // sender's snapshot, so every loss is reported by exactly one finish: the
            // first one whose snapshot no longer contains the connection.
            let mut c = self.connections.lock();
            let i = c.iter().position(|c| c.key == key);
            let r = i.map(|i| c.remove(i).receiver);
            if let Some(r) = &r {
                self.unreported.lock().push((key, r.clone()));
                self.losses.fetch_add(1, Ordering::Release);
            }
            r
        };
        if let Some(r) = receiver {
            self.lost.lock().push((r.clone(), why.clone()));
            if let Some(up) = &self.upcall {
                up.lost_connection(&self.ident, &r, &why);
            }
        }
    }
}

/// A send port. Create it with [`Ibis::create_send_port`](crate::Ibis::create_send_port),
/// connect it, then write messages with [`new_message`](Self::new_message).
pub struct SendPort {
    shared: Arc<SendShared>,
    ibis: Arc<IbisShared>,
    port_type: PortType,
    slots: Vec<usize>,
    seq: u64,
    spare: Vec<u8>,
    /// The channels of the last snapshot of the connections (with their fast paths),
    /// and the loss count it was taken at (None: take a new one at the next send).
    keys: Vec<(
        ChannelKey,
        Arc<OutLink>,
        Option<Arc<ipl_transport_abi::FastPath>>,
    )>,
    keys_at: Option<u64>,
    /// The allocation of the slice list of a message, kept between sends (empty).
    slice_buf: Vec<&'static [u8]>,
    closed: bool,
}

impl std::fmt::Debug for SendPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendPort")
            .field("id", &self.shared.ident)
            .finish()
    }
}

impl SendPort {
    pub(crate) fn new(
        ident: SendPortIdentifier,
        port_type: PortType,
        slots: Vec<usize>,
        ibis: Arc<IbisShared>,
        upcall: Option<Box<dyn SendPortDisconnectUpcall>>,
    ) -> Self {
        SendPort {
            shared: Arc::new(SendShared {
                ident,
                connections: Mutex::new(Vec::new()),
                lost: Mutex::new(Vec::new()),
                unreported: Mutex::new(Vec::new()),
                losses: AtomicU64::new(0),
                upcall,
            }),
            ibis,
            port_type,
            slots,
            seq: 0,
            spare: Vec::new(),
            keys: Vec::new(),
            keys_at: None,
            slice_buf: Vec::new(),
            closed: false,
        }
    }

    /// This port's identifier.
    pub fn identifier(&self) -> &SendPortIdentifier {
        &self.shared.ident
    }

    /// The port's type.
    pub fn port_type(&self) -> &PortType {
        &self.port_type
    }

    /// The receive ports this port is connected to.
    pub fn connected_to(&self) -> Vec<ReceivePortIdentifier> {
        self.shared
            .connections
            .lock()
            .iter()
            .map(|c| c.receiver.clone())
            .collect()
    }

    /// The transport each connection of this port runs over, by receive port (for
    /// instance `shm` to a member on the same host and `tcp` to one on another).
    pub fn connection_transports(&self) -> Vec<(ReceivePortIdentifier, &'static str)> {
        self.shared
            .connections
            .lock()
            .iter()
            .map(|c| (c.receiver.clone(), self.ibis.transport_name(c.key.0)))
            .collect()
    }

    /// Connections lost since the last call.
    pub fn lost_connections(&self) -> Vec<(ReceivePortIdentifier, Disconnect)> {
        std::mem::take(&mut self.shared.lost.lock())
    }

    /// Connects to the receive port named `name` on member `ibis`, waiting up to
    /// `timeout` for it to exist and accept.
    pub fn connect_to(
        &mut self,
        ibis: &IbisIdentifier,
        name: &str,
        timeout: Duration,
    ) -> Result<ReceivePortIdentifier> {
        let target = ReceivePortIdentifier {
            ibis: ibis.clone(),
            name: name.to_string(),
        };
        self.connect(&target, timeout)?;
        Ok(target)
    }

    /// Connects to a receive port, waiting up to `timeout` for it to exist and accept.
    /// Only messages sent after this returns reach the new receiver.
    pub fn connect(&mut self, target: &ReceivePortIdentifier, timeout: Duration) -> Result<()> {
        if self.closed {
            return Err(IplError::PortClosed);
        }
        let n = self.shared.connections.lock().len();
        if n > 0 && !self.port_type.capabilities().allows_many_receivers() {
            return Err(IplError::AlreadyConnected);
        }
        let deadline = Instant::now() + timeout;
        // The first eligible transport that reaches the target carries the connection.
        let mut reasons = Vec::new();
        let mut opened = None;
        for &slot in &self.slots {
            let tname = self.ibis.transport_name(slot);
            let Some(address) = target.ibis.address_for(tname) else {
                reasons.push(format!("{tname}: the member has no address"));
                continue;
            };
            let link = OutLink::new(self.ibis.window, target.ibis.clone());
            *link.port.lock() = Some(Arc::downgrade(&self.shared));
            let left = deadline.saturating_duration_since(Instant::now());
            match self.ibis.open_channel(
                slot,
                &address.address,
                self.port_type
                    .has(crate::capabilities::PortCapabilities::COMMUNICATION_UNRELIABLE),
                left,
                Arc::clone(&link),
            ) {
                Ok(key) => {
                    opened = Some((key, link));
                    break;
                }
                Err(e) => reasons.push(format!("{tname}: {e}")),
            }
        }
        let Some((key, link)) = opened else {
            return Err(IplError::ConnectFailed {
                target: target.to_string(),
                reason: reasons.join("; "),
            });
        };
        let hello = protocol::encode_control(&Control::Connect {
            sender: self.shared.ident.clone(),
            receiver: target.name.clone(),
            port_type: self.port_type,
        });
        let mut backoff = port_protocol::FIRST_BACKOFF;
        let mut last = String::from("no answer");
        loop {
            if let Err(e) = self.ibis.send_on(key, &[&hello]) {
                self.ibis.close_channel(key);
                return Err(IplError::ConnectFailed {
                    target: target.to_string(),
                    reason: e.to_string(),
                });
            }
            let reply = link.wait_reply(deadline);
            let step = port_protocol::after_reply(
                reply.as_ref().map_err(|lost| lost.as_deref()),
                Instant::now(),
                deadline,
                backoff,
            );
            match step {
                ConnectStep::Connected => {
                    self.keys_at = None;
                    let fast = self.ibis.fast_path(key).map(Arc::new);
                    self.shared.connections.lock().push(Connection {
                        key,
                        receiver: target.clone(),
                        link: Arc::clone(&link),
                        fast,
                    });
                    tracing::debug!(port = %self.shared.ident, to = %target, "connected");
                    return Ok(());
                }
                ConnectStep::Retry { after, next } => {
                    if let Ok(Control::Reject(r)) = &reply {
                        last = r.to_string();
                    }
                    std::thread::sleep(after);
                    backoff = next;
                }
                ConnectStep::Failed(reason) => {
                    self.ibis.close_channel(key);
                    return Err(IplError::ConnectFailed {
                        target: target.to_string(),
                        reason,
                    });
                }
                ConnectStep::Unexpected(what) => {
                    self.ibis.close_channel(key);
                    return Err(IplError::Protocol(what));
                }
                ConnectStep::TimedOut => {
                    if let Ok(Control::Reject(r)) = &reply {
                        last = r.to_string();
                    }
                    break;
                }
            }
        }
        self.ibis.close_channel(key);
        Err(IplError::ConnectTimeout {
            target: target.to_string(),
            timeout,
            last,
        })
    }

    /// Disconnects from one receive port; messages already sent are still delivered.
    pub fn disconnect(&mut self, target: &ReceivePortIdentifier) -> Result<()> {
        self.keys_at = None;
        let conn = {
            let mut c = self.shared.connections.lock();
            let i = c
                .iter()
                .position(|c| &c.receiver == target)
                .ok_or(IplError::NotConnected)?;
            c.remove(i)
        };
        self.goodbye(conn.key);
        Ok(())
    }

    fn goodbye(&self, key: ChannelKey) {
        let bye = protocol::encode_control(&Control::Disconnect);
        let _ = self.ibis.send_on(key, &[&bye]);
        self.ibis.close_channel(key);
    }

    /// Starts a new message. The port stays borrowed until the message is finished, so
    /// connections cannot change while a message is built.
    pub fn new_message<'a>(&mut self) -> Result<WriteMessage<'_, 'a>> {
        if self.closed {
            return Err(IplError::PortClosed);
        }
        let level = self.port_type.serialization();
        let writer = MessageWriter::with_buffer(std::mem::take(&mut self.spare));
        Ok(WriteMessage {
            port: self,
            writer,
            level,
            done: false,
        })
    }

    pub(crate) fn send_message(&mut self, writer: MessageWriter<'_>) -> Result<usize> {
        SENT_SINCE_RECEIVE.with(|s| s.set(true));
        let len = writer.len();
        let header = protocol::data_header(self.seq);
        self.seq = self.seq.wrapping_add(1);
        // The slice list reuses the allocation of the previous message's (given back
        // below: collecting an emptied vector into one of another lifetime keeps its
        // allocation).
        let mut slices: Vec<&[u8]> = std::mem::take(&mut self.slice_buf);
        slices.push(&header);
        writer.segments_into(&mut slices);
        // Snapshot the channels, then send without holding the lock: a transport may
        // report a lost channel (which takes the lock) from inside a send. Connections
        // lost before the snapshot did not get this message: report them now. While no
        // connection was lost since the last snapshot (the common case), it still holds
        // and the send takes no lock.
        let mut lost: Vec<ReceivePortIdentifier> = Vec::new();
        let losses = self.shared.losses.load(Ordering::Acquire);
        if self.keys_at != Some(losses) {
            let conns = self.shared.connections.lock();
            self.keys.clear();
            self.keys.extend(
                conns
                    .iter()
                    .map(|c| (c.key, Arc::clone(&c.link), c.fast.clone())),
            );
            // Bumped under this lock only: the snapshot matches this count.
            self.keys_at = Some(self.shared.losses.load(Ordering::Acquire));
            lost = std::mem::take(&mut *self.shared.unreported.lock())
                .into_iter()
                .map(|(_, r)| r)
                .collect();
        }
        let any = !self.keys.is_empty() || !lost.is_empty();
        let mut failed = Vec::new();
        for (key, link, fast) in &self.keys {
            let key = *key;
            // Flow control: wait while this receiver's window is full. A connection lost
            // meanwhile did not get this message: reported now, like a failed send.
            if let Err(why) =
                link.take_credit(protocol::cost(len + protocol::HEADER_LEN), &self.ibis)
            {
                failed.push((key, why));
                continue;
            }
            let sent = match fast {
                Some(f) => f.send(&slices),
                None => self.ibis.send_on(key, &slices),
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, "send failed");
                failed.push((key, e.to_string()));
            }
        }
        slices.clear();
        self.slice_buf = slices.into_iter().map(|_| &[][..]).collect();
        self.spare = writer.into_buffer();
        if !failed.is_empty() {
            for (key, why) in &failed {
                self.shared
                    .connection_lost(*key, Disconnect::Lost(why.clone()));
                self.ibis.close_channel(*key);
            }
            // These failed now: report them with this message, not the next one.
            let mut un = self.shared.unreported.lock();
            un.retain(|(k, r)| {
                let now = failed.iter().any(|(f, _)| f == k);
                if now {
                    lost.push(r.clone());
                }
                !now
            });
        }
        if !lost.is_empty() {
            return Err(IplError::ConnectionsLost { lost });
        }
        if !any {
            return Err(IplError::NotConnected);
        }
        Ok(len)
    }

    /// Closes the port: every receiver gets all messages sent before, then the
    /// connection ends in an orderly way.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.keys_at = None;
        self.keys.clear();
        let conns: Vec<Connection> = std::mem::take(&mut *self.shared.connections.lock());
        for c in conns {
            self.goodbye(c.key);
        }
        self.ibis.remove_send_port(&self.shared.ident.name);
    }

    /// Whether the port type has `c`.
    pub fn has(&self, c: PortCapabilities) -> bool {
        self.port_type.has(c)
    }
}

impl Drop for SendPort {
    fn drop(&mut self) {
        self.close();
    }
}

thread_local! {
    /// This thread sent a message since its last receive (see the receive port's poll
    /// budget).
    static SENT_SINCE_RECEIVE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread sent a message since it last asked; clears the mark.
pub(crate) fn take_sent_since_receive() -> bool {
    SENT_SINCE_RECEIVE.with(|s| s.replace(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipl_registry::MemberId;
    use std::sync::mpsc;

    /// A bound for what should end soon (a loaded machine).
    const BOUND: Duration = Duration::from_secs(30);

    fn link() -> Arc<OutLink> {
        let peer = IbisIdentifier::new(MemberId(7), "pool", "local", "receiver", Vec::new());
        // No Accept yet: no credits.
        OutLink::new(1000, peer)
    }

    /// Runs `f` on a thread and returns its result, failing if it does not end in BOUND.
    fn bounded<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(BOUND)
            .expect("take_credit did not end within its bound")
    }

    #[test]
    fn waiting_for_credits_while_the_registry_cannot_tell_is_bounded() {
        let link = link();
        let wait = CreditWait {
            check: Duration::from_millis(5),
            unchecked: Duration::from_millis(20),
        };
        let r = bounded(move || link.take_credit_with(100, wait, || None));
        let why = r.expect_err("no credit and no registry: the message fails");
        assert!(why.contains("cannot tell"), "why: {why}");
    }

    #[test]
    fn credits_that_come_keep_sends_going_without_a_registry() {
        let link = link();
        let wait = CreditWait {
            check: Duration::from_millis(1),
            unchecked: Duration::ZERO,
        };
        // Every question to the (unanswering) registry is followed by a credit.
        let l = Arc::clone(&link);
        let r = bounded(move || {
            (0..10).try_for_each(|_| {
                l.take_credit_with(100, wait, || {
                    l.credit(100);
                    None
                })
            })
        });
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn a_receiver_reported_gone_fails_the_wait_and_an_unknown_one_does_not() {
        let link = link();
        let wait = CreditWait {
            check: Duration::from_millis(1),
            unchecked: BOUND,
        };
        let asked = Arc::new(AtomicU64::new(0));
        let (l, a) = (Arc::clone(&link), Arc::clone(&asked));
        let r = bounded(move || {
            l.take_credit_with(100, wait, || {
                // Not gone (e.g. not heard of yet) twice, then reported gone.
                Some(a.fetch_add(1, Ordering::Relaxed) >= 2)
            })
        });
        let why = r.expect_err("a receiver reported gone fails the message");
        assert!(why.contains("gone"), "why: {why}");
        assert_eq!(asked.load(Ordering::Relaxed), 3);
    }
}
