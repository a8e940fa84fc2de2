//! The router: what a transport reports (channels opened and closed, messages) turned
//! into port events. Data goes to the receive port its channel is bound to; control
//! frames drive the connection protocol.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ipl_transport_abi::{ChannelClosed, ReceivedBuffer, TransportEvents};
use parking_lot::{Condvar, Mutex};

use super::{ChannelKey, IbisShared};
use crate::protocol::{self, Control, Frame, RejectReason};
use crate::receive_port::{Disconnect, PortShared};
use crate::send_port::OutLink;

/// What a channel of the instance is for.
pub(super) enum Role {
    /// A channel a peer opened to us; bound to a receive port once connected.
    Incoming(Option<Arc<PortShared>>),
    /// A channel a send port of ours opened.
    Outgoing(Arc<OutLink>),
}

impl IbisShared {
    fn on_opened(&self, key: ChannelKey) {
        self.routes.lock().insert(key, Role::Incoming(None));
    }

    /// A data message: to the receive port its channel is connected to.
    fn on_data(&self, key: ChannelKey, seq: u64, buf: ReceivedBuffer) {
        let port = match self.routes.lock().get(&key) {
            Some(Role::Incoming(Some(p))) => Some(Arc::clone(p)),
            _ => None,
        };
        match port {
            Some(p) => p.deliver(key, seq, buf),
            None => tracing::warn!("data on an unconnected channel dropped"),
        }
    }

    /// A message from a transport: data to its receive port, control frames handled.
    pub(crate) fn on_message(&self, key: ChannelKey, buf: ReceivedBuffer) {
        if let Some(seq) = protocol::data_seq(&buf) {
            self.on_data(key, seq, buf);
            return;
        }
        let frame = match protocol::decode(&buf) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "malformed frame; closing channel");
                self.close_channel(key);
                return;
            }
        };
        match frame {
            Frame::Data { seq } => self.on_data(key, seq, buf),
            Frame::Control(Control::Connect {
                sender,
                receiver,
                port_type,
            }) => {
                let port = self.receive_ports.lock().get(&receiver).cloned();
                let answer = match port {
                    None => Some(Control::Reject(RejectReason::NoSuchPort)),
                    Some(p) => {
                        let answer = p.connect_request(key, &sender, &port_type);
                        if !matches!(answer, Some(Control::Reject(_))) {
                            if let Some(Role::Incoming(slot)) = self.routes.lock().get_mut(&key) {
                                *slot = Some(p);
                            }
                        }
                        answer
                    }
                };
                if let Some(a) = answer {
                    self.send_raw(key, &[&protocol::encode_control(&a)]);
                }
            }
            Frame::Control(c @ (Control::Accept { .. } | Control::Reject(_))) => {
                let link = match self.routes.lock().get(&key) {
                    Some(Role::Outgoing(l)) => Some(Arc::clone(l)),
                    _ => None,
                };
                if let Some(l) = link {
                    l.reply(c);
                }
            }
            Frame::Control(Control::Credit { bytes }) => {
                let link = match self.routes.lock().get(&key) {
                    Some(Role::Outgoing(l)) => Some(Arc::clone(l)),
                    _ => None,
                };
                if let Some(l) = link {
                    l.credit(bytes);
                }
            }
            Frame::Control(Control::Disconnect) => {
                let port = match self.routes.lock().get_mut(&key) {
                    Some(Role::Incoming(p)) => p.take(),
                    _ => None,
                };
                if let Some(p) = port {
                    p.connection_ended(key, Disconnect::Closed);
                }
            }
        }
    }

    fn on_closed(&self, key: ChannelKey, why: ChannelClosed) {
        let why = match why {
            ChannelClosed::ByPeer => Disconnect::Closed,
            ChannelClosed::Lost(s) => Disconnect::Lost(s),
            ChannelClosed::Locally => Disconnect::Local,
        };
        let role = self.routes.lock().remove(&key);
        tracing::debug!(
            ?key,
            ?why,
            role = match &role {
                Some(Role::Incoming(Some(_))) => "incoming",
                Some(Role::Incoming(None)) => "incoming-unbound",
                Some(Role::Outgoing(_)) => "outgoing",
                None => "unknown",
            },
            "channel closed"
        );
        match role {
            Some(Role::Incoming(Some(p))) => p.connection_ended(key, why),
            Some(Role::Outgoing(l)) => l.lost(key, why),
            _ => {}
        }
    }
}

/// The router a transport instance reports to. It knows the Ibis instance only weakly,
/// and only once the instance is built.
pub(super) struct Router {
    slot: usize,
    state: Mutex<RouterState>,
    ready: Condvar,
    /// The instance once built (set with `state` becoming `Ready`): every event after
    /// that finds it without taking the lock.
    built: OnceLock<Weak<IbisShared>>,
}

pub(super) enum RouterState {
    /// The endpoint exists (and its address may be published) but the instance is not
    /// built yet: events wait, so that a peer that connects at once is not lost.
    Pending,
    Ready(Weak<IbisShared>),
    /// Building failed: events are dropped.
    Failed,
}

impl Router {
    pub(super) fn new(slot: usize) -> Arc<Self> {
        Arc::new(Router {
            slot,
            state: Mutex::new(RouterState::Pending),
            ready: Condvar::new(),
            built: OnceLock::new(),
        })
    }

    pub(super) fn settle(&self, to: RouterState) {
        let mut st = self.state.lock();
        if matches!(*st, RouterState::Pending) {
            if let RouterState::Ready(w) = &to {
                let _ = self.built.set(w.clone());
            }
            *st = to;
        }
        self.ready.notify_all();
    }

    fn ibis(&self) -> Option<Arc<IbisShared>> {
        if let Some(w) = self.built.get() {
            return w.upgrade();
        }
        let mut st = self.state.lock();
        loop {
            match &*st {
                RouterState::Ready(w) => return w.upgrade(),
                RouterState::Failed => return None,
                RouterState::Pending => {
                    // Bounded: the builder settles every router before it returns.
                    let timeout = self.ready.wait_for(&mut st, Duration::from_secs(30));
                    if timeout.timed_out() {
                        return None;
                    }
                }
            }
        }
    }
}

/// Settles the routers of a build that did not complete as failed.
pub(super) struct PendingRouters(pub(super) Vec<Arc<Router>>);

impl Drop for PendingRouters {
    fn drop(&mut self) {
        for r in &self.0 {
            r.settle(RouterState::Failed);
        }
    }
}

impl TransportEvents for Router {
    fn channel_opened(&self, channel: u64) {
        if let Some(i) = self.ibis() {
            i.on_opened((self.slot, channel));
        }
    }

    fn message(&self, channel: u64, buf: ReceivedBuffer) {
        if let Some(i) = self.ibis() {
            i.on_message((self.slot, channel), buf);
        }
    }

    fn channel_closed(&self, channel: u64, why: ChannelClosed) {
        if let Some(i) = self.ibis() {
            i.on_closed((self.slot, channel), why);
        }
    }
}
