//! [`Rmi`]: the RMI runtime of one Ibis instance (client and server halves, exported
//! objects, the naming registry client), and its [`RmiBuilder`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ipl::{
    Ibis, IbisBuilder, IbisCapabilities, IbisIdentifier, PortCapabilities as P, PortType,
    ReceivePort, RegistryEventHandler,
};
use parking_lot::Mutex;

use crate::calls::CallTable;
use crate::client::Client;
use crate::error::RmiError;
use crate::naming::NamingState;
use crate::reference::{RawRef, RemoteInterface, RemoteRef, Stub};
use crate::server::{Mode, ServerCore};
use crate::skeleton::Skeleton;
use crate::stub::StubCore;

/// The Ibis capabilities RMI uses: membership, and elections (for the naming registry).
pub const CAPABILITIES: IbisCapabilities =
    IbisCapabilities::MEMBERSHIP.union(IbisCapabilities::ELECTIONS);

/// The one port type of RMI (requests and replies): many-to-one, explicit receive with
/// timeout and upcalls, connection upcalls, objects, reliable and FIFO. Declare it to the
/// Ibis builder (or start from [`ibis_builder`]).
pub fn port_type() -> Result<PortType, RmiError> {
    Ok(PortType::new(
        P::CONNECTION_MANY_TO_ONE
            | P::CONNECTION_UPCALLS
            | P::RECEIVE_EXPLICIT
            | P::RECEIVE_TIMEOUT
            | P::RECEIVE_AUTO_UPCALLS
            | P::SERIALIZATION_OBJECT
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )?)
}

/// An Ibis builder with RMI's [`CAPABILITIES`] and [`port_type`] declared; add the pool,
/// registry and the rest, then `build()`.
pub fn ibis_builder() -> Result<IbisBuilder, RmiError> {
    Ok(Ibis::builder()
        .capabilities(CAPABILITIES)
        .port_type(port_type()?))
}

/// Options of a runtime.
#[derive(Clone, Debug)]
#[must_use]
pub struct RmiBuilder {
    timeout: Duration,
    connect_timeout: Duration,
    threads: usize,
    watch_registry: bool,
}

impl Default for RmiBuilder {
    fn default() -> Self {
        RmiBuilder {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            threads: 16,
            watch_registry: false,
        }
    }
}

impl RmiBuilder {
    /// The default timeout of every call (30 s); per stub with
    /// [`Stub::with_timeout`].
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// How long connecting a stub (or a reply port) may take (10 s).
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// The most worker threads serving calls concurrently (16, started on demand).
    /// Calls beyond that wait for a free worker.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Installs a registry event handler on the Ibis instance so that a member that dies
    /// or leaves fails the calls waiting for it at once (default off: lost connections
    /// already do this, and the IPL allows one event handler, which the application may
    /// want). Without it, an application with its own handler can forward such events
    /// with [`Rmi::member_gone`].
    pub fn watch_registry(mut self, on: bool) -> Self {
        self.watch_registry = on;
        self
    }

    /// Starts the runtime on `ibis` (built with [`port_type`] declared; [`CAPABILITIES`]
    /// for naming). It creates the client's reply port.
    pub fn start(self, ibis: Ibis) -> Result<Rmi, RmiError> {
        let t = port_type()?;
        let ibis = Arc::new(ibis);
        let client = Arc::new(Client::new(
            Arc::clone(&ibis),
            t,
            self.timeout,
            self.connect_timeout,
        )?);
        if self.watch_registry {
            ibis.registry()
                .set_event_handler(Watch(Arc::clone(&client.table)))?;
        }
        let server = Arc::new(ServerCore::new(
            Arc::clone(&ibis),
            t,
            self.connect_timeout,
            self.threads,
        ));
        Ok(Rmi {
            shared: Arc::new(Shared {
                ibis,
                client,
                server,
                exports: Mutex::new(HashMap::new()),
                next_object: AtomicU64::new(1),
                naming: NamingState::default(),
                ended: AtomicBool::new(false),
            }),
        })
    }
}

struct Watch(Arc<CallTable>);

impl RegistryEventHandler for Watch {
    fn died(&mut self, m: &IbisIdentifier) {
        self.0.member_lost(m, format!("{m} died"));
    }
    fn left(&mut self, m: &IbisIdentifier) {
        self.0.member_lost(m, format!("{m} left the pool"));
    }
}

struct Shared {
    ibis: Arc<Ibis>,
    client: Arc<Client>,
    server: Arc<ServerCore>,
    exports: Mutex<HashMap<String, ReceivePort>>,
    next_object: AtomicU64,
    naming: NamingState,
    ended: AtomicBool,
}

impl Shared {
    fn end(&self) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        let ports: Vec<ReceivePort> = self.exports.lock().drain().map(|(_, p)| p).collect();
        for p in ports {
            p.close(Some(Duration::ZERO));
        }
        self.server.end();
        self.client.end();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.end();
    }
}

/// The RMI runtime of one Ibis instance: exports objects, connects stubs, and talks to
/// the naming registry. Cheap to clone (clones share the runtime); it ends with
/// [`end`](Self::end), or when the last clone is dropped.
#[derive(Clone)]
pub struct Rmi {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Rmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rmi")
            .field("member", self.shared.ibis.identifier())
            .finish()
    }
}

impl Rmi {
    /// Options for a runtime.
    pub fn builder() -> RmiBuilder {
        RmiBuilder::default()
    }

    /// Starts a runtime with the default options.
    pub fn start(ibis: Ibis) -> Result<Rmi, RmiError> {
        RmiBuilder::default().start(ibis)
    }

    /// The Ibis instance under the runtime.
    pub fn ibis(&self) -> &Ibis {
        &self.shared.ibis
    }

    /// This member's identifier.
    pub fn identifier(&self) -> &IbisIdentifier {
        self.shared.ibis.identifier()
    }

    fn check(&self) -> Result<(), RmiError> {
        if self.shared.ended.load(Ordering::SeqCst) {
            Err(RmiError::Ended)
        } else {
            Ok(())
        }
    }

    fn reference<S: Skeleton>(&self, port: String) -> RemoteRef<S::Interface> {
        RemoteRef::from_raw(RawRef {
            member: self.identifier().clone(),
            port,
            interface: <S::Interface as RemoteInterface>::NAME.to_string(),
        })
    }

    /// Exports an object (wrapped in its generated skeleton, `FooSkeleton::new(obj)`):
    /// creates its receive port and returns a reference others can call. Calls run
    /// concurrently on the worker pool, except methods marked `#[nonblocking]`, which
    /// run in the port's receiving thread.
    pub fn export<S: Skeleton + Sync>(&self, skel: S) -> Result<RemoteRef<S::Interface>, RmiError> {
        self.export_as(skel, Mode::Pool)
    }

    /// Exports an object whose calls must not overlap (or that is not `Sync`): every
    /// call runs in the port's receiving thread, one at a time, in arrival order.
    pub fn export_serial<S: Skeleton>(&self, skel: S) -> Result<RemoteRef<S::Interface>, RmiError> {
        self.check()?;
        let name = self.object_port_name();
        let port = self.shared.server.export_serial(skel, &name)?;
        self.shared.exports.lock().insert(name.clone(), port);
        Ok(self.reference::<S>(name))
    }

    fn object_port_name(&self) -> String {
        let n = self.shared.next_object.fetch_add(1, Ordering::Relaxed);
        format!("ibis-rmi/object/{n}")
    }

    fn export_as<S: Skeleton + Sync>(
        &self,
        skel: S,
        mode: Mode,
    ) -> Result<RemoteRef<S::Interface>, RmiError> {
        self.check()?;
        let name = self.object_port_name();
        self.export_named(skel, &name, mode)?;
        Ok(self.reference::<S>(name))
    }

    /// Exports at a fixed port name (the naming service).
    pub(crate) fn export_named<S: Skeleton + Sync>(
        &self,
        skel: S,
        name: &str,
        mode: Mode,
    ) -> Result<(), RmiError> {
        let port = self.shared.server.export(skel, name, mode)?;
        self.shared.exports.lock().insert(name.to_string(), port);
        Ok(())
    }

    /// Withdraws an exported object: its port closes, connected stubs see their calls
    /// fail with [`RmiError::ConnectionLost`].
    pub fn unexport<I: ?Sized>(&self, r: &RemoteRef<I>) -> Result<(), RmiError> {
        if r.member() != self.identifier() {
            return Err(RmiError::NotBound(r.raw().port.clone()));
        }
        let port = self.shared.exports.lock().remove(&r.raw().port);
        match port {
            Some(p) => {
                p.close(Some(Duration::ZERO));
                Ok(())
            }
            None => Err(RmiError::NotBound(r.raw().port.clone())),
        }
    }

    /// A stub for a remote reference: connects a new send port to the object.
    pub fn stub<I: RemoteInterface + ?Sized>(&self, r: &RemoteRef<I>) -> Result<I::Stub, RmiError> {
        self.check()?;
        let raw = r.raw().clone();
        let port = self.shared.client.connect(&raw)?;
        Ok(I::Stub::from_core(StubCore::new(
            Arc::clone(&self.shared.client),
            port,
            raw,
        )))
    }

    /// Fails the calls waiting for `member` (for applications that watch registry
    /// events themselves; see [`RmiBuilder::watch_registry`]).
    pub fn member_gone(&self, member: &IbisIdentifier) {
        self.shared
            .client
            .table
            .member_lost(member, format!("{member} is gone"));
    }

    /// Ends the runtime: exported objects are withdrawn, calls in flight fail with
    /// [`RmiError::Ended`], the worker pool stops. The Ibis instance ends when the last
    /// clone of the runtime (and every stub) is gone.
    pub fn end(&self) {
        self.shared.end();
    }

    pub(crate) fn naming_state(&self) -> &NamingState {
        &self.shared.naming
    }
}
