//! The Ibis instance: one member of a pool, its transports, its ports, and the router
//! that turns transport events into port events.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Condvar, Mutex};
use std::time::Duration;

use ipl_auth::PoolSecret;
use ipl_registry::net::NetRegistry;
use ipl_registry::{
    EmbeddedRegistry, IbisIdentifier, JoinRequest, PoolConfig, Registry, RegistryBackend,
};
use ipl_transport_abi::{
    ChannelClosed, Plugin, ReceivedBuffer, TransportCapabilities, TransportError, TransportEvents,
    TransportInstance,
};

use crate::capabilities::{IbisCapabilities, PortCapabilities};
use crate::error::{IplError, Result};
use crate::identifiers::{ReceivePortIdentifier, SendPortIdentifier};
use crate::negotiate;
use crate::port_type::PortType;
use crate::protocol::{self, Control, Frame, RejectReason};
use crate::receive_port::{
    Disconnect, MessageUpcall, PortShared, ReceivePort, ReceivePortConnectUpcall,
};
use crate::send_port::{OutLink, SendPort, SendPortDisconnectUpcall};

/// A channel of one of the instance's transports: (transport slot, channel id).
pub(crate) type ChannelKey = (usize, u64);

enum Role {
    /// A channel a peer opened to us; bound to a receive port once connected.
    Incoming(Option<Arc<PortShared>>),
    /// A channel a send port of ours opened.
    Outgoing(Arc<OutLink>),
}

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

    /// Sends one message on a channel.
    pub(crate) fn send_on(
        &self,
        key: ChannelKey,
        slices: &[&[u8]],
    ) -> std::result::Result<(), TransportError> {
        self.instance(key.0)?.send(key.1, slices)
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

    // ---- transport events -------------------------------------------------------

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

/// The router a transport instance reports to. It knows the Ibis instance only weakly,
/// and only once the instance is built.
struct Router {
    slot: usize,
    state: Mutex<RouterState>,
    ready: Condvar,
    /// The instance once built (set with `state` becoming `Ready`): every event after
    /// that finds it without taking the lock.
    built: OnceLock<Weak<IbisShared>>,
}

enum RouterState {
    /// The endpoint exists (and its address may be published) but the instance is not
    /// built yet: events wait, so that a peer that connects at once is not lost.
    Pending,
    Ready(Weak<IbisShared>),
    /// Building failed: events are dropped.
    Failed,
}

impl Router {
    fn new(slot: usize) -> Arc<Self> {
        Arc::new(Router {
            slot,
            state: Mutex::new(RouterState::Pending),
            ready: Condvar::new(),
            built: OnceLock::new(),
        })
    }

    fn settle(&self, to: RouterState) {
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
struct PendingRouters(Vec<Arc<Router>>);

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

/// Builds an [`Ibis`] instance: the pool to join, the capabilities it needs, the port
/// types it will use (each negotiated to a transport), and the transports to choose from.
#[must_use]
pub struct IbisBuilder {
    pool: String,
    cluster: String,
    name: Option<String>,
    capabilities: IbisCapabilities,
    port_types: Vec<PortType>,
    plugins: Vec<Plugin>,
    prefer: Option<String>,
    registry: Option<Arc<dyn RegistryBackend>>,
    pool_size: Option<usize>,
    transport_config: String,
    secret: Option<PoolSecret>,
}

impl Default for IbisBuilder {
    fn default() -> Self {
        IbisBuilder {
            pool: "default".into(),
            cluster: "cluster-0".into(),
            name: None,
            capabilities: IbisCapabilities::MEMBERSHIP,
            port_types: Vec::new(),
            plugins: Vec::new(),
            prefer: None,
            registry: None,
            pool_size: None,
            transport_config: String::new(),
            secret: None,
        }
    }
}

/// The process-wide embedded registry used when the builder is given none.
pub fn default_registry() -> EmbeddedRegistry {
    static REG: OnceLock<EmbeddedRegistry> = OnceLock::new();
    REG.get_or_init(EmbeddedRegistry::new).clone()
}

/// Descriptors registered with [`register_static_plugin`].
static REGISTERED: Mutex<Vec<&'static ipl_transport_abi::ffi::PluginDescriptor>> =
    Mutex::new(Vec::new());

/// Adds a transport linked into the program (its crate's `PLUGIN` descriptor) to
/// [`static_plugins`], so that every Ibis built afterwards in this process can use it
/// without finding its plugin library on the search path. Registering the same
/// descriptor twice has no effect.
///
/// ```
/// // A program that links the transport crate registers it once, at start:
/// // ipl::register_static_plugin(&ipl_transport_shm::PLUGIN);
/// ipl::register_static_plugin(&ipl_transport_inproc::PLUGIN); // already built in: no-op
/// assert_eq!(ipl::static_plugins().iter().filter(|p| p.name() == "inproc").count(), 1);
/// ```
pub fn register_static_plugin(desc: &'static ipl_transport_abi::ffi::PluginDescriptor) {
    let mut r = REGISTERED.lock();
    if !r.iter().any(|d| std::ptr::eq(*d, desc)) {
        r.push(desc);
    }
}

/// The transports linked into this build: in-process and TCP, then those registered
/// with [`register_static_plugin`] (a name already present is skipped).
pub fn static_plugins() -> Vec<Plugin> {
    let mut descs: Vec<&'static ipl_transport_abi::ffi::PluginDescriptor> =
        vec![&ipl_transport_inproc::PLUGIN, &ipl_transport_tcp::PLUGIN];
    descs.extend(REGISTERED.lock().iter().copied());
    let mut plugins: Vec<Plugin> = Vec::new();
    for p in descs
        .into_iter()
        .filter_map(|d| match Plugin::from_static(d) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::error!(error = %e, "static plugin refused");
                None
            }
        })
    {
        if !plugins.iter().any(|q| q.name() == p.name()) {
            plugins.push(p);
        }
    }
    plugins
}

/// The statically linked transports, then every plugin found on the search path
/// (`IPL_PLUGIN_PATH`, the executable's directory and its parent) whose name is not
/// linked in already. Refused plugins are logged with their reason.
pub fn default_plugins() -> Vec<Plugin> {
    let mut plugins = static_plugins();
    let found = ipl_transport_abi::loader::discover_default();
    for (path, e) in &found.refused {
        tracing::warn!(file = %path.display(), error = %e, "transport plugin refused");
    }
    for p in found.loaded {
        if !plugins.iter().any(|q| q.name() == p.name()) {
            plugins.push(p);
        }
    }
    plugins
}

impl IbisBuilder {
    /// The pool (run) to join.
    pub fn pool(mut self, pool: impl Into<String>) -> Self {
        self.pool = pool.into();
        self
    }

    /// This member's cluster (location) name.
    pub fn cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = cluster.into();
        self
    }

    /// A human-readable name for this member.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The Ibis capabilities needed (registry features).
    pub fn capabilities(mut self, c: IbisCapabilities) -> Self {
        self.capabilities = c;
        self
    }

    /// Declares a port type this instance will create ports of. Its transport is
    /// negotiated when the instance is built.
    pub fn port_type(mut self, t: PortType) -> Self {
        if !self.port_types.contains(&t) {
            self.port_types.push(t);
        }
        self
    }

    /// Adds a transport plugin to choose from (default: the statically linked ones).
    pub fn plugin(mut self, p: Plugin) -> Self {
        self.plugins.push(p);
        self
    }

    /// Prefers the transport with this name (also settable with `IPL_TRANSPORT`); it is
    /// an error if it lacks a requested capability.
    pub fn prefer_transport(mut self, name: impl Into<String>) -> Self {
        self.prefer = Some(name.into());
        self
    }

    /// The embedded registry to join (default: one per process).
    pub fn registry(mut self, r: &EmbeddedRegistry) -> Self {
        self.registry = Some(Arc::new(r.clone()));
        self
    }

    /// Joins through any registry backend (e.g. a network registry client).
    pub fn registry_backend(mut self, b: Arc<dyn RegistryBackend>) -> Self {
        self.registry = Some(b);
        self
    }

    /// The pool's secret, proven (never sent) by every network transport handshake.
    pub fn secret(mut self, s: PoolSecret) -> Self {
        self.secret = Some(s);
        self
    }

    /// Configures the builder from the environment a launcher (`ipl-run`) sets:
    /// `IPL_POOL`, `IPL_POOL_SIZE` (closed world when set), `IPL_CLUSTER`,
    /// `IPL_POOL_SECRET`, `IPL_REGISTRY` (the registry server's address: joins over the
    /// network) and `IPL_RANK` (the member's name). Variables that are not set leave the
    /// builder as it is.
    pub fn from_env(mut self) -> Result<Self> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(p) = var("IPL_POOL") {
            self.pool = p;
        }
        if let Some(n) = var("IPL_POOL_SIZE") {
            let n: usize = n.parse().map_err(|_| {
                IplError::InvalidPortType(format!("IPL_POOL_SIZE={n:?} is not a number"))
            })?;
            self.pool_size = Some(n);
            self.capabilities |= IbisCapabilities::CLOSED_WORLD;
        }
        if let Some(c) = var("IPL_CLUSTER") {
            self.cluster = c;
        }
        if let Some(r) = var("IPL_RANK") {
            self.name = Some(format!("member-{r}"));
        }
        if var(ipl_auth::SECRET_ENV).is_some() {
            self.secret = Some(PoolSecret::from_env().map_err(|e| {
                IplError::Registry(ipl_registry::RegistryError::Refused(e.to_string()))
            })?);
        }
        if let Some(addr) = var("IPL_REGISTRY") {
            let secret = self.secret.clone().ok_or_else(|| {
                IplError::Registry(ipl_registry::RegistryError::Refused(format!(
                    "IPL_REGISTRY is set but {} is not",
                    ipl_auth::SECRET_ENV
                )))
            })?;
            let net = NetRegistry::connect(addr.as_str(), &secret, Duration::from_secs(30))?;
            self.registry = Some(Arc::new(net));
        }
        Ok(self)
    }

    /// The pool's size, for `closedworld`.
    pub fn pool_size(mut self, n: usize) -> Self {
        self.pool_size = Some(n);
        self
    }

    /// `key=value` lines passed to every transport's `create`.
    pub fn transport_config(mut self, cfg: impl Into<String>) -> Self {
        self.transport_config = cfg.into();
        self
    }

    /// Negotiates transports, creates their endpoints and joins the pool.
    pub fn build(self) -> Result<Ibis> {
        let caps = self.capabilities;
        if caps.contains(IbisCapabilities::CLOSED_WORLD) && self.pool_size.is_none() {
            return Err(IplError::InvalidPortType(
                "closedworld needs a pool size (IbisBuilder::pool_size)".into(),
            ));
        }
        if caps.contains(IbisCapabilities::CLOSED_WORLD | IbisCapabilities::MALLEABLE) {
            return Err(IplError::InvalidPortType(
                "closedworld and malleable exclude each other".into(),
            ));
        }
        let plugins = if self.plugins.is_empty() {
            default_plugins()
        } else {
            self.plugins
        };
        let prefer = self.prefer.or_else(|| std::env::var("IPL_TRANSPORT").ok());
        let chosen = negotiate::choose_all(&plugins, &self.port_types, prefer.as_deref())?;
        let mut wanted: Vec<usize> = chosen.iter().flat_map(|(_, i)| i.iter().copied()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.is_empty() {
            wanted.push(negotiate::preferred_or_best(&plugins, prefer.as_deref())?);
        }
        // The configuration every transport gets: the user's lines, then pool, cluster and
        // secret.
        let mut config_text = self.transport_config.clone();
        config_text.push_str(&format!("\npool={}\ncluster={}\n", self.pool, self.cluster));
        if let Some(s) = &self.secret {
            config_text.push_str(&format!("secret={}\n", s.to_hex()));
        }
        // Create one endpoint per transport wanted. One that cannot be created (no
        // secret for a network transport, no device) is left out, as long as every port
        // type keeps a transport.
        let mut slots = Vec::new();
        // Declared after `slots`, so dropped before it on an early return: the routers
        // are settled (failed) before the endpoints are destroyed, which waits for any
        // callback blocked on them.
        let mut routers = PendingRouters(Vec::new());
        let mut used = Vec::new();
        let mut failures = Vec::new();
        let mut request = JoinRequest::new(self.cluster.clone());
        if let Some(n) = &self.name {
            request = request.with_name(n.clone());
        }
        for &pi in &wanted {
            let p = &plugins[pi];
            let router = Router::new(slots.len());
            let created = p
                .create(&config_text, router.clone())
                .and_then(|inst| Ok((inst.local_address()?, inst)));
            match created {
                Ok((address, inst)) => {
                    request = request.with_address(p.name(), address);
                    routers.0.push(router);
                    let inst = Arc::new(inst);
                    slots.push(Slot {
                        name: p.name(),
                        polled: p.capabilities().contains(TransportCapabilities::POLLED),
                        unreliable: p.capabilities().contains(TransportCapabilities::UNRELIABLE),
                        live: Arc::downgrade(&inst),
                        instance: Mutex::new(Some(inst)),
                    });
                    used.push(pi);
                }
                Err(e) => {
                    tracing::debug!(transport = p.name(), error = %e, "transport left out");
                    failures.push((p.name(), e));
                }
            }
        }
        let mut port_slots = Vec::new();
        for (t, pis) in &chosen {
            let slots: Vec<usize> = pis
                .iter()
                .filter_map(|pi| used.iter().position(|u| u == pi))
                .collect();
            if slots.is_empty() {
                let why = failures
                    .iter()
                    .map(|(n, e)| format!("{n}: {e}"))
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(IplError::TransportUnavailable {
                    name: pis
                        .iter()
                        .map(|pi| plugins[*pi].name())
                        .collect::<Vec<_>>()
                        .join(","),
                    reason: format!("no endpoint could be created for port type {t}: {why}"),
                });
            }
            port_slots.push((*t, slots));
        }
        if slots.is_empty() {
            let (name, e) = failures.into_iter().next().ok_or(IplError::Ended)?;
            return Err(IplError::TransportUnavailable {
                name: name.to_string(),
                reason: e.to_string(),
            });
        }
        let config = match (
            caps.contains(IbisCapabilities::CLOSED_WORLD),
            self.pool_size,
        ) {
            (true, Some(n)) => PoolConfig::closed_world(n),
            _ => PoolConfig::open_world(),
        };
        let backend = self
            .registry
            .unwrap_or_else(|| Arc::new(default_registry()));
        let registry = Registry::join(backend, &self.pool, config, request)?;
        let shared = Arc::new(IbisShared {
            ident: registry.identifier().clone(),
            slots,
            port_slots,
            routes: Mutex::new(Default::default()),
            receive_ports: Mutex::new(HashMap::new()),
            send_ports: Mutex::new(HashSet::new()),
            ended: AtomicBool::new(false),
        });
        for r in &routers.0 {
            r.settle(RouterState::Ready(Arc::downgrade(&shared)));
        }
        tracing::debug!(member = %shared.ident, "ibis instance started");
        Ok(Ibis {
            shared,
            registry: Some(registry),
            capabilities: caps,
        })
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
        let shared = Arc::new(PortShared::new(
            ident,
            t,
            Arc::downgrade(sh),
            sh.polled_transports(),
            self.connect_upcall,
        ));
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
