//! The Ibis instance: one member of a pool, its transports and its ports.
//!
//! `builder` negotiates the transports and joins the pool; `router` turns the
//! transports' events into port events; `plugins` holds the statically linked
//! transports.

mod builder;
mod plugins;
mod router;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ipl_registry::{IbisIdentifier, Registry};
use ipl_transport_abi::{TransportError, TransportInstance};
use parking_lot::Mutex;

use crate::capabilities::{IbisCapabilities, PortCapabilities};
use crate::error::{IplError, Result};
use crate::identifiers::{ReceivePortIdentifier, SendPortIdentifier};
use crate::port_type::PortType;
use crate::receive_port::{MessageUpcall, PortShared, ReceivePort, ReceivePortConnectUpcall};
use crate::send_port::{OutLink, SendPort, SendPortDisconnectUpcall};

pub use builder::{default_registry, IbisBuilder};
pub use plugins::{default_plugins, register_static_plugin, static_plugins};
use router::Role;

/// A channel of one of the instance's transports: (transport slot, channel id).
pub(crate) type ChannelKey = (usize, u64);

struct Slot {
    name: &'static str,
    /// The transport delivers through receiver-driven progress (capability `polled`).
    polled: bool,
    /// The transport offers unreliable channels (capability `unreliable`).
    unreliable: bool,
    /// The instance's owner: taken (and the endpoint destroyed once nobody uses it)
    /// when the Ibis instance ends.
    instance: Mutex<Option<Arc<TransportInstance>>>,
    /// The same instance for the per-message paths (send, a receiver's poll): an
    /// upgrade is one atomic update, where the owner's lock and clone cost three, and
    /// it fails once the instance ended.
    live: Weak<TransportInstance>,
}

pub(crate) struct IbisShared {
    ident: IbisIdentifier,
    slots: Vec<Slot>,
    port_slots: Vec<(PortType, Vec<usize>)>,
    routes: Mutex<crate::channel_map::ChannelMap<Role>>,
    receive_ports: Mutex<HashMap<String, Arc<PortShared>>>,
    send_ports: Mutex<HashSet<String>>,
    ended: AtomicBool,
    /// The poll budget of a blocking receive on this instance's ports.
    pub(crate) spin: Duration,
    /// The flow-control window of this instance's connections, in bytes.
    pub(crate) window: u64,
    /// The registry this member joined through (to ask whether a peer is still a
    /// member).
    registry: Arc<dyn ipl_registry::RegistryBackend>,
}

impl IbisShared {
    pub(crate) fn transport_name(&self, slot: usize) -> &'static str {
        self.slots.get(slot).map(|s| s.name).unwrap_or("?")
    }

    /// Per transport slot, the instance if it delivers through receiver-driven
    /// progress: what a receive port keeps to poll its connections' transports without
    /// going through the Ibis instance (see `PortShared::polled_instances`).
    pub(crate) fn polled_transports(&self) -> Vec<Option<Weak<TransportInstance>>> {
        self.slots
            .iter()
            .map(|s| s.polled.then(|| s.live.clone()))
            .collect()
    }

    fn instance(&self, slot: usize) -> std::result::Result<Arc<TransportInstance>, TransportError> {
        self.slots
            .get(slot)
            .and_then(|s| s.live.upgrade())
            .ok_or_else(|| TransportError::Closed("the Ibis instance has ended".into()))
    }

    /// Whether the registry reported `who` gone (it left, or was declared dead): Some(false)
    /// for a live member and for one this member has not heard of yet (its `Joined`
    /// may still be on the way); None: the registry cannot tell now (lost, silent).
    pub(crate) fn is_gone(&self, who: &IbisIdentifier) -> Option<bool> {
        self.registry
            .is_gone(&self.ident, who)
            .inspect_err(|e| tracing::debug!(error = %e, "registry: cannot tell who is gone"))
            .ok()
    }

    /// Sends one message on a channel.
    pub(crate) fn send_on(
        &self,
        key: ChannelKey,
        slices: &[&[u8]],
    ) -> std::result::Result<(), TransportError> {
        self.instance(key.0)?.send(key.1, slices)
    }

    /// The fast path of channel `key`, if its transport has one.
    pub(crate) fn fast_path(&self, key: ChannelKey) -> Option<ipl_transport_abi::FastPath> {
        self.instance(key.0).ok()?.fast_path(key.1)
    }

    /// Sends and logs a failure (for control replies).
    pub(crate) fn send_raw(&self, key: ChannelKey, slices: &[&[u8]]) {
        if let Err(e) = self.send_on(key, slices) {
            tracing::debug!(error = %e, "control message not sent");
        }
    }

    /// Opens a channel on transport `slot` to `address`; `unreliable`: the port type
    /// asks for unreliable communication, which a transport that offers it is told with
    /// [`UNRELIABLE_SUFFIX`](ipl_transport_abi::UNRELIABLE_SUFFIX).
    pub(crate) fn open_channel(
        &self,
        slot: usize,
        address: &[u8],
        unreliable: bool,
        timeout: Duration,
        link: Arc<OutLink>,
    ) -> Result<ChannelKey> {
        let inst = self.instance(slot)?;
        let ch = if unreliable && self.slots.get(slot).is_some_and(|s| s.unreliable) {
            let mut a = address.to_vec();
            a.extend_from_slice(ipl_transport_abi::UNRELIABLE_SUFFIX);
            inst.connect(&a, timeout)?
        } else {
            inst.connect(address, timeout)?
        };
        let key = (slot, ch);
        self.routes.lock().insert(key, Role::Outgoing(link));
        Ok(key)
    }

    pub(crate) fn close_channel(&self, key: ChannelKey) {
        self.routes.lock().remove(&key);
        if let Ok(inst) = self.instance(key.0) {
            inst.close_channel(key.1);
        }
    }

    pub(crate) fn remove_receive_port(&self, name: &str) {
        self.receive_ports.lock().remove(name);
    }

    pub(crate) fn remove_send_port(&self, name: &str) {
        self.send_ports.lock().remove(name);
    }

    /// The slots of the transports eligible for a port type, best first.
    fn slots_for(&self, t: &PortType) -> Result<Vec<usize>> {
        self.port_slots
            .iter()
            .find(|(pt, _)| pt == t)
            .map(|(_, s)| s.clone())
            .ok_or_else(|| IplError::UndeclaredPortType(t.to_string()))
    }

    /// Ends the instance: closes every channel (orderly if `graceful`) and destroys the
    /// transport endpoints.
    fn shutdown(&self, graceful: bool) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        if graceful {
            let keys: Vec<ChannelKey> = self.routes.lock().keys().copied().collect();
            for k in keys {
                if let Ok(inst) = self.instance(k.0) {
                    inst.close_channel(k.1);
                }
            }
        }
        for s in &self.slots {
            let inst = s.instance.lock().take();
            drop(inst);
        }
    }
}

/// One member of a pool: creates ports, owns the transport endpoints, and holds the
/// member's registry handle. Dropping it (or [`end`](Self::end)) leaves the pool in an
/// orderly way; [`abort`](Self::abort) models a crash.
pub struct Ibis {
    shared: Arc<IbisShared>,
    registry: Option<Registry>,
    capabilities: IbisCapabilities,
}

impl std::fmt::Debug for Ibis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ibis")
            .field("id", &self.shared.ident)
            .finish()
    }
}

/// Options for a new receive port: upcalls for messages and connections.
#[must_use]
pub struct ReceivePortBuilder<'i> {
    ibis: &'i Ibis,
    port_type: PortType,
    name: String,
    upcall: Option<Box<dyn MessageUpcall>>,
    connect_upcall: Option<Box<dyn ReceivePortConnectUpcall>>,
}

impl ReceivePortBuilder<'_> {
    /// Delivers messages to `u` (needs `receive.autoupcalls`); start with
    /// [`ReceivePort::enable_message_upcalls`].
    pub fn message_upcall(mut self, u: impl MessageUpcall) -> Self {
        self.upcall = Some(Box::new(u));
        self
    }

    /// Reports new and lost connections to `u` (needs `connection.upcalls`).
    pub fn connection_upcall(mut self, u: impl ReceivePortConnectUpcall) -> Self {
        self.connect_upcall = Some(Box::new(u));
        self
    }

    /// Creates the port.
    pub fn create(self) -> Result<ReceivePort> {
        let t = self.port_type;
        if self.upcall.is_some() && !t.has(PortCapabilities::RECEIVE_AUTO_UPCALLS) {
            return Err(IplError::CapabilityNotRequested("receive.autoupcalls"));
        }
        if self.connect_upcall.is_some() && !t.has(PortCapabilities::CONNECTION_UPCALLS) {
            return Err(IplError::CapabilityNotRequested("connection.upcalls"));
        }
        let sh = &self.ibis.shared;
        if sh.ended.load(Ordering::SeqCst) {
            return Err(IplError::Ended);
        }
        sh.slots_for(&t)?;
        let ident = ReceivePortIdentifier {
            ibis: sh.ident.clone(),
            name: self.name.clone(),
        };
        let shared = PortShared::new(
            ident,
            t,
            Arc::downgrade(sh),
            sh.polled_transports(),
            sh.spin,
            sh.window,
            self.connect_upcall,
        );
        {
            let mut ports = sh.receive_ports.lock();
            if ports.contains_key(&self.name) {
                return Err(IplError::DuplicatePortName(self.name));
            }
            ports.insert(self.name.clone(), Arc::clone(&shared));
        }
        Ok(ReceivePort::new(shared, self.upcall))
    }
}

impl Ibis {
    /// Starts building an instance.
    pub fn builder() -> IbisBuilder {
        IbisBuilder::default()
    }

    /// This member's identifier.
    pub fn identifier(&self) -> &IbisIdentifier {
        &self.shared.ident
    }

    /// The capabilities this instance was built with.
    pub fn capabilities(&self) -> IbisCapabilities {
        self.capabilities
    }

    /// The member's registry handle: membership, elections, signals, termination.
    pub fn registry(&self) -> &Registry {
        // The registry is only taken out by `end`/`abort`, which consume self.
        self.registry
            .as_ref()
            .expect("registry is present until the instance ends")
    }

    /// The best transport eligible for a declared port type (connections use the first
    /// eligible one that reaches their target).
    pub fn transport_for(&self, t: &PortType) -> Result<&'static str> {
        let slots = self.shared.slots_for(t)?;
        Ok(self
            .shared
            .transport_name(slots.first().copied().unwrap_or(usize::MAX)))
    }

    /// Every transport eligible for a declared port type, best first; a connection
    /// uses the first one that reaches its target.
    pub fn transports_for(&self, t: &PortType) -> Result<Vec<&'static str>> {
        Ok(self
            .shared
            .slots_for(t)?
            .into_iter()
            .map(|s| self.shared.transport_name(s))
            .collect())
    }

    /// Creates a send port of a declared type; `name` must be unique in this instance.
    pub fn create_send_port(&self, t: &PortType, name: &str) -> Result<SendPort> {
        self.make_send_port(t, name, None)
    }

    /// Creates a send port whose lost connections are reported to `upcall` (needs
    /// `connection.upcalls`).
    pub fn create_send_port_with_upcall(
        &self,
        t: &PortType,
        name: &str,
        upcall: impl SendPortDisconnectUpcall,
    ) -> Result<SendPort> {
        if !t.has(PortCapabilities::CONNECTION_UPCALLS) {
            return Err(IplError::CapabilityNotRequested("connection.upcalls"));
        }
        self.make_send_port(t, name, Some(Box::new(upcall)))
    }

    fn make_send_port(
        &self,
        t: &PortType,
        name: &str,
        upcall: Option<Box<dyn SendPortDisconnectUpcall>>,
    ) -> Result<SendPort> {
        let sh = &self.shared;
        if sh.ended.load(Ordering::SeqCst) {
            return Err(IplError::Ended);
        }
        let slots = sh.slots_for(t)?;
        if !sh.send_ports.lock().insert(name.to_string()) {
            return Err(IplError::DuplicatePortName(name.to_string()));
        }
        let ident = SendPortIdentifier {
            ibis: sh.ident.clone(),
            name: name.to_string(),
        };
        Ok(SendPort::new(ident, *t, slots, Arc::clone(sh), upcall))
    }

    /// Creates a receive port of a declared type, for explicit receipt.
    pub fn create_receive_port(&self, t: &PortType, name: &str) -> Result<ReceivePort> {
        self.receive_port(t, name).create()
    }

    /// Starts building a receive port with upcalls.
    pub fn receive_port(&self, t: &PortType, name: &str) -> ReceivePortBuilder<'_> {
        ReceivePortBuilder {
            ibis: self,
            port_type: *t,
            name: name.to_string(),
            upcall: None,
            connect_upcall: None,
        }
    }

    /// Leaves the pool in an orderly way: open connections are closed (peers see them
    /// closed, not lost), the endpoints are destroyed, and the registry says `Left`.
    pub fn end(mut self) -> Result<()> {
        self.shared.shutdown(true);
        match self.registry.take() {
            Some(r) => Ok(r.leave()?),
            None => Ok(()),
        }
    }

    /// Ends abruptly, as if the process had been killed: the endpoints vanish (peers see
    /// their connections lost) and the registry is not told (others learn it through
    /// `maybe_dead`). For fault-tolerance tests.
    pub fn abort(mut self) {
        self.shared.shutdown(false);
        if let Some(r) = self.registry.take() {
            r.crash();
        }
    }
}

impl Drop for Ibis {
    fn drop(&mut self) {
        if let Some(r) = self.registry.take() {
            self.shared.shutdown(true);
            if let Err(e) = r.leave() {
                tracing::debug!(error = %e, "leaving the pool on drop failed");
            }
        }
    }
}
