//! The client's table of calls in flight and the reply demultiplexer.
//!
//! Every client runtime has one reply port (explicit receive). Replies carry the call id.
//! There is no reply thread: one waiting caller at a time holds the *receiver role* and
//! receives from the port itself, so a single caller gets its reply straight from the
//! port with no thread switch. A reply for another call is copied into that call's slot
//! and its owner woken (a blocked caller, or the waker of an async call). When only async
//! calls wait, a pump thread takes the role.
//!
//! Failures: a lost connection to a server (reported by the IPL on the stub's send port
//! or on the reply port) or a member reported gone marks the member (or stub) lost at a
//! new *epoch*. A call registered before that epoch fails with
//! [`RmiError::ConnectionLost`] once the reply port has been drained past the epoch (so
//! a reply that arrived before the loss is still delivered). Every call also has a
//! deadline ([`RmiError::Timeout`]). The role holder receives in slices of at most
//! [`SLICE`], so no failure waits longer than that to be noticed.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use ipl::{IbisIdentifier, IplError, ReadMessage, ReceivePort};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::RmiError;
use crate::wire::Status;

/// The longest a receiver blocks before it looks at losses, deadlines and async calls.
pub(crate) const SLICE: Duration = Duration::from_millis(10);

/// A reply, as its caller gets it.
#[derive(Debug)]
pub(crate) enum Reply {
    /// Received by the caller itself: the value is read in place (status not read yet).
    Message(ReadMessage),
    /// Received by another thread: the status and the encoded value.
    Bytes(Status, Vec<u8>),
}

/// Reads the rest of a reply (after its call id) received for another caller: the
/// status and the encoded value, which the caller decodes when it collects them.
pub(crate) fn reply_bytes(m: &mut ReadMessage) -> Result<Reply, RmiError> {
    let status = m
        .read_u8()
        .map_err(|e| RmiError::Malformed(format!("reply: {e}")))
        .and_then(Status::from_u8)?;
    let n = m.remaining();
    let b = m
        .read_bytes_ref(n)
        .map_err(|e| RmiError::Malformed(format!("reply: {e}")))?;
    Ok(Reply::Bytes(status, b.to_vec()))
}

/// Where a call's reply (or failure) lands.
struct Slot {
    target: Arc<IbisIdentifier>,
    stub: u64,
    registered: u64,
    deadline: Instant,
    timeout: Duration,
    reply: Option<Result<Reply, RmiError>>,
    waker: Option<Waker>,
    asynchronous: bool,
}

#[derive(Default)]
struct State {
    /// By call id. The ids are this process's own (a counter), never a peer's, so
    /// FxHash's speed costs no resistance to crafted keys (SipHash was three hashes of
    /// about a hundred instructions per call).
    slots: rustc_hash::FxHashMap<u64, Slot>,
    /// Somebody holds the receiver role.
    receiving: bool,
    /// Threads waiting on the condition variable (callers and the pump).
    sleepers: usize,
    /// Bumped at every loss.
    epoch: u64,
    /// The reply port was found empty after this epoch.
    drained: u64,
    lost_members: HashMap<IbisIdentifier, (u64, String)>,
    lost_stubs: HashMap<u64, (u64, String)>,
    /// Async calls in the table (they need someone to receive for them).
    asynchronous: usize,
    ended: bool,
}

impl State {
    fn failure(&self, s: &Slot) -> Option<RmiError> {
        if self.ended {
            return Some(RmiError::Ended);
        }
        let hit = |mark: Option<&(u64, String)>| {
            mark.filter(|(e, _)| *e > s.registered && self.drained >= *e)
                .map(|(_, why)| RmiError::ConnectionLost(why.clone()))
        };
        hit(self.lost_members.get(&*s.target)).or_else(|| hit(self.lost_stubs.get(&s.stub)))
    }

    fn remove(&mut self, id: u64) -> Option<Slot> {
        let s = self.slots.remove(&id)?;
        if s.asynchronous {
            self.asynchronous -= 1;
        }
        Some(s)
    }

    /// The call's outcome if it has one (the slot is then removed).
    fn settle(&mut self, id: u64) -> Option<Result<Reply, RmiError>> {
        let Some(slot) = self.slots.get_mut(&id) else {
            return Some(Err(RmiError::Ended));
        };
        if let Some(r) = slot.reply.take() {
            self.remove(id);
            return Some(r);
        }
        let slot = self.slots.get(&id)?;
        let out = match self.failure(slot) {
            Some(e) => Err(e),
            None if Instant::now() >= slot.deadline => Err(RmiError::Timeout(slot.timeout)),
            None => return None,
        };
        self.remove(id);
        Some(out)
    }
}

/// What one receive slice produced.
enum Got {
    Mine(ReadMessage),
    Other,
    Empty,
    Closed,
}

/// The calls in flight of one client runtime.
#[derive(Default)]
pub(crate) struct CallTable {
    state: Mutex<State>,
    cond: Condvar,
}

impl CallTable {
    /// Adds a call before its request is sent.
    pub(crate) fn register(
        &self,
        id: u64,
        target: &Arc<IbisIdentifier>,
        stub: u64,
        timeout: Duration,
        asynchronous: bool,
    ) -> Result<(), RmiError> {
        let mut st = self.state.lock();
        if st.ended {
            return Err(RmiError::Ended);
        }
        let now = Instant::now();
        let slot = Slot {
            target: Arc::clone(target),
            stub,
            registered: st.epoch,
            deadline: now
                .checked_add(timeout)
                .unwrap_or(now + Duration::from_secs(86_400 * 365)),
            timeout,
            reply: None,
            waker: None,
            asynchronous,
        };
        st.slots.insert(id, slot);
        if asynchronous {
            st.asynchronous += 1;
            if st.sleepers > 0 {
                self.cond.notify_all();
            }
        }
        Ok(())
    }

    /// Forgets a call (its request could not be sent, or its future was dropped).
    pub(crate) fn cancel(&self, id: u64) {
        self.state.lock().remove(id);
    }

    /// The connection to `member` was lost (or it died or left).
    pub(crate) fn member_lost(&self, member: &IbisIdentifier, why: String) {
        let mut st = self.state.lock();
        st.epoch += 1;
        let e = st.epoch;
        st.lost_members.insert(member.clone(), (e, why));
        self.cond.notify_all();
    }

    /// The send port of stub `stub` lost its connection.
    pub(crate) fn stub_lost(&self, stub: u64, why: String) {
        let mut st = self.state.lock();
        st.epoch += 1;
        let e = st.epoch;
        st.lost_stubs.insert(stub, (e, why));
        self.cond.notify_all();
    }

    /// Fails every call; later ones fail at once.
    pub(crate) fn end(&self) {
        let mut st = self.state.lock();
        st.ended = true;
        for s in st.slots.values_mut() {
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
        self.cond.notify_all();
    }

    /// Whether the table has ended.
    pub(crate) fn ended(&self) -> bool {
        self.state.lock().ended
    }

    /// Blocks until call `id` has a reply or fails.
    pub(crate) fn wait(&self, port: &ReceivePort, id: u64) -> Result<Reply, RmiError> {
        let mut st = self.state.lock();
        loop {
            if let Some(r) = st.settle(id) {
                return r;
            }
            let Some(deadline) = st.slots.get(&id).map(|s| s.deadline) else {
                return Err(RmiError::Ended);
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if !st.receiving {
                let (got, g) = self.receive_turn(st, port, Some(id), left.min(SLICE));
                st = g;
                if let Got::Mine(m) = got {
                    st.remove(id);
                    return Ok(Reply::Message(m));
                }
            } else {
                st.sleepers += 1;
                self.cond.wait_for(&mut st, left.min(SLICE));
                st.sleepers -= 1;
            }
        }
    }

    /// The async side: the outcome of call `id` if it has one, else registers `waker`.
    pub(crate) fn poll(&self, id: u64, waker: &Waker) -> Option<Result<Reply, RmiError>> {
        let mut st = self.state.lock();
        if let Some(r) = st.settle(id) {
            return Some(r);
        }
        if let Some(s) = st.slots.get_mut(&id) {
            match &s.waker {
                Some(w) if w.will_wake(waker) => {}
                _ => s.waker = Some(waker.clone()),
            }
        }
        if !st.receiving && st.sleepers > 0 {
            self.cond.notify_all();
        }
        None
    }

    /// The pump: receives for async calls while no caller does, until the table ends.
    pub(crate) fn pump(&self, port: &ReceivePort) {
        let mut st = self.state.lock();
        loop {
            if st.ended {
                return;
            }
            if st.asynchronous > 0 && !st.receiving {
                let (_, g) = self.receive_turn(st, port, None, SLICE);
                st = g;
            } else {
                st.sleepers += 1;
                self.cond.wait_for(&mut st, Duration::from_secs(1));
                st.sleepers -= 1;
            }
        }
    }

    /// Takes the receiver role for one slice (at most `slice`, zero while a loss waits
    /// to be drained), then gives it back and settles async calls.
    fn receive_turn<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        port: &ReceivePort,
        mine: Option<u64>,
        slice: Duration,
    ) -> (Got, MutexGuard<'a, State>) {
        st.receiving = true;
        let epoch = st.epoch;
        let slice = if st.epoch > st.drained {
            Duration::ZERO
        } else {
            slice
        };
        drop(st);
        let got = self.receive_one(port, mine, slice);
        let mut st = self.state.lock();
        st.receiving = false;
        match got {
            Got::Empty => st.drained = st.drained.max(epoch),
            Got::Closed => {
                st.ended = true;
                st.drained = st.drained.max(epoch);
            }
            Got::Mine(_) | Got::Other => {}
        }
        self.release(&mut st);
        (got, st)
    }

    /// After a receive turn: fail async calls that timed out or lost their server, and
    /// let a sleeper take the role.
    fn release(&self, st: &mut State) {
        if st.asynchronous > 0 {
            let now = Instant::now();
            let failed: Vec<(u64, RmiError)> = st
                .slots
                .iter()
                .filter(|(_, s)| s.asynchronous && s.reply.is_none())
                .filter_map(|(id, s)| {
                    st.failure(s)
                        .or_else(|| (now >= s.deadline).then_some(RmiError::Timeout(s.timeout)))
                        .map(|e| (*id, e))
                })
                .collect();
            for (id, e) in failed {
                if let Some(s) = st.slots.get_mut(&id) {
                    s.reply = Some(Err(e));
                    if let Some(w) = s.waker.take() {
                        w.wake();
                    }
                }
            }
        }
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
    }

    /// Receives one reply (no lock held). A reply for another call goes to its slot.
    fn receive_one(&self, port: &ReceivePort, mine: Option<u64>, slice: Duration) -> Got {
        let mut m = match port.receive_timeout(slice) {
            Ok(m) => m,
            Err(IplError::Timeout(_)) => return Got::Empty,
            // A server's connection was lost: the calls to it fail through the
            // registry's report of its death; the port itself goes on.
            Err(e @ IplError::ConnectionLost { .. }) => {
                tracing::debug!(error = %e, "reply connection lost");
                return Got::Empty;
            }
            Err(e) => {
                tracing::debug!(error = %e, "reply port closed");
                return Got::Closed;
            }
        };
        let call = match m.read_u64() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, origin = %m.origin(), "malformed reply dropped");
                return Got::Other;
            }
        };
        if Some(call) == mine {
            return Got::Mine(m);
        }
        let reply = reply_bytes(&mut m);
        m.finish();
        let mut st = self.state.lock();
        match st.slots.get_mut(&call) {
            Some(s) => {
                s.reply = Some(reply);
                if let Some(w) = s.waker.take() {
                    w.wake();
                }
                if st.sleepers > 0 {
                    self.cond.notify_all();
                }
            }
            None => tracing::debug!(call, "reply for a call nobody waits for dropped"),
        }
        Got::Other
    }
}
