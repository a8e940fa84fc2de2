//! The builder of an Ibis instance: the pool to join, the capabilities, the port types
//! (each negotiated to a transport), the transports to choose from.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ipl_auth::PoolSecret;
use ipl_registry::net::NetRegistry;
use ipl_registry::{EmbeddedRegistry, JoinRequest, PoolConfig, Registry, RegistryBackend};
use ipl_transport_abi::{Plugin, TransportCapabilities};
use parking_lot::Mutex;

use super::plugins::default_plugins;
use super::router::{PendingRouters, Router, RouterState};
use super::{Ibis, IbisShared, Slot};
use crate::capabilities::IbisCapabilities;
use crate::config;
use crate::error::{IplError, Result};
use crate::negotiate;
use crate::port_type::PortType;
use crate::protocol;

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
    spin: Option<Duration>,
    window_bytes: Option<u64>,
    registry: Option<Arc<dyn RegistryBackend>>,
    pool_size: Option<usize>,
    transport_config: String,
    secret: Option<PoolSecret>,
    interfaces: Option<String>,
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
            spin: None,
            window_bytes: None,
            registry: None,
            pool_size: None,
            transport_config: String::new(),
            secret: None,
            interfaces: None,
        }
    }
}

/// An interface selection that this host can serve, in its canonical form; otherwise an
/// [`InvalidConfig`](IplError::InvalidConfig) error naming what is wrong or missing.
fn checked_interfaces(spec: &str) -> Result<String> {
    use ipl_transport_kit::interfaces::{local_addresses, InterfaceSpec};
    let bad =
        |e: &dyn std::fmt::Display| IplError::InvalidConfig(format!("interfaces {spec:?}: {e}"));
    let parsed = InterfaceSpec::parse(spec).map_err(|e| bad(&e))?;
    local_addresses(&parsed).map_err(|e| bad(&e))?;
    Ok(parsed.to_string())
}

/// The process-wide embedded registry used when the builder is given none.
pub fn default_registry() -> EmbeddedRegistry {
    static REG: OnceLock<EmbeddedRegistry> = OnceLock::new();
    REG.get_or_init(EmbeddedRegistry::new).clone()
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

    /// Prefers the transport with this name (default: `IPL_TRANSPORT`, else the best
    /// one); it is an error if it lacks a requested capability.
    pub fn prefer_transport(mut self, name: impl Into<String>) -> Self {
        self.prefer = Some(name.into());
        self
    }

    /// How long a blocking receive on this instance's ports polls for a message before
    /// it sleeps (default: `IPL_SPIN_US`, else [`DEFAULT_SPIN`](crate::config::DEFAULT_SPIN)).
    /// The budget adapts to the waits a port sees, up to this much (more, up to 200 µs,
    /// for a round trip that takes longer, or for a stream whose receiver takes its
    /// messages out of a shared-memory or TCP transport itself and finds them a little
    /// further apart). Zero switches polling off: a receiver sleeps at once,
    /// which suits a machine with more busy threads than CPUs.
    pub fn spin(mut self, budget: Duration) -> Self {
        self.spin = Some(budget);
        self
    }

    /// The flow-control window of this instance's connections: the bytes of messages a
    /// sender may have on one connection that the receiver has not finished yet (default:
    /// `IPL_WINDOW_BYTES`, else [`WINDOW`](crate::protocol::WINDOW)). At least
    /// `2 * `[`MIN_COST`](crate::protocol::MIN_COST), or `build` fails. Every member of
    /// a pool must use the same window.
    pub fn window_bytes(mut self, bytes: u64) -> Self {
        self.window_bytes = Some(bytes);
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
    /// `IPL_POOL`, `IPL_POOL_SIZE` (closed world when set), `IPL_POOL_MALLEABLE` (an
    /// open world with the `MALLEABLE` capability instead), `IPL_CLUSTER`,
    /// `IPL_POOL_SECRET`, `IPL_REGISTRY` (the registry server's address: joins over the
    /// network) and `IPL_RANK` (the member's name), and the rank, size and node of a
    /// cluster's launcher (`srun`, `mpirun`, `mpiexec`: [`launcher`](crate::launcher)).
    /// Variables that are not set leave the builder as it is; [`config`](crate::config)
    /// lists every variable the IPL reads.
    ///
    /// Local configuration errors are reported as such, before the registry is
    /// contacted: a bad launcher variable is [`InvalidConfig`](IplError::InvalidConfig),
    /// a pool secret that cannot be read (or `IPL_REGISTRY` without one) is
    /// [`Secret`](IplError::Secret), an `IPL_REGISTRY` that is no address is
    /// [`RegistryAddress`](IplError::RegistryAddress).
    pub fn from_env(self) -> Result<Self> {
        self.with_launch(config::Launch::from_env(), PoolSecret::from_env)
    }

    /// [`from_env`](Self::from_env) with the variables read and the secret reader
    /// given.
    fn with_launch(
        mut self,
        env: config::Launch,
        secret: impl FnOnce() -> std::result::Result<PoolSecret, ipl_auth::AuthError>,
    ) -> Result<Self> {
        if let Some(p) = env.pool {
            self.pool = p;
        }
        let bad = |e: crate::launcher::LauncherError| IplError::InvalidConfig(e.to_string());
        let launched = match env.launched.map_err(bad)? {
            // A cluster's launcher without a registry to meet at: every process is a
            // pool of its own rather than waiting for a pool that cannot form.
            Some(l) if l.kind.is_external() && env.registry.is_none() => {
                tracing::warn!(
                    launcher = %l.kind,
                    rank = ?l.rank,
                    size = l.size,
                    "started by a launcher but IPL_REGISTRY is not set: this process runs \
                     as a pool of one (start the program with `ipl-run --launcher '...' --` \
                     to form one pool)"
                );
                None
            }
            l => l,
        };
        match &launched {
            // An open world that grows and shrinks: no size to wait for.
            Some(l) if l.malleable => self.capabilities |= IbisCapabilities::MALLEABLE,
            Some(l) => {
                self.pool_size = Some(l.size);
                self.capabilities |= IbisCapabilities::CLOSED_WORLD;
            }
            None => {}
        }
        if let Some(c) = env.cluster.map_err(bad)? {
            self.cluster = c;
        }
        if let Some(r) = launched.as_ref().and_then(|l| l.rank) {
            self.name = Some(format!("member-{r}"));
        } else if let Some(r) = env.rank {
            self.name = Some(format!("member-{r}"));
        }
        if env.secret {
            self.secret = Some(secret().map_err(IplError::Secret)?);
        }
        if let Some(addr) = env.registry {
            let secret = self
                .secret
                .clone()
                .ok_or(IplError::Secret(ipl_auth::AuthError::Missing))?;
            let bad = |reason: String| IplError::RegistryAddress {
                address: addr.clone(),
                reason,
            };
            let resolved: Vec<std::net::SocketAddr> =
                std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())
                    .map_err(|e| bad(e.to_string()))?
                    .collect();
            if resolved.is_empty() {
                return Err(bad("it resolves to no address".into()));
            }
            let net = NetRegistry::connect(&resolved[..], &secret, Duration::from_secs(30))?;
            self.registry = Some(Arc::new(net));
        }
        Ok(self)
    }

    /// The pool's size, for `closedworld`.
    pub fn pool_size(mut self, n: usize) -> Self {
        self.pool_size = Some(n);
        self
    }

    /// The network interfaces the network transports (tcp, quic) listen on and advertise
    /// to peers (default: `IPL_INTERFACES`, else all): a comma list of IP addresses,
    /// interface names and networks in CIDR form, as Open MPI's `btl_tcp_if_include`
    /// (`"eth0"`, `"10.1.0.0/16,ib0"`); `""` or `"all"` for every interface. `build`
    /// fails with [`InvalidConfig`](IplError::InvalidConfig) naming an interface,
    /// address or network this host does not have. Passed to every transport as the
    /// configuration line `interfaces=<spec>`; an `interfaces=` line of
    /// [`transport_config`](Self::transport_config) takes precedence.
    pub fn interfaces(mut self, spec: impl Into<String>) -> Self {
        self.interfaces = Some(spec.into());
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
        // The environment layer: what the builder was not told.
        let env = config::Tuning::from_env();
        let spin = self.spin.or(env.spin).unwrap_or(config::DEFAULT_SPIN);
        let window = match self.window_bytes {
            Some(w) if w < 2 * protocol::MIN_COST => {
                return Err(IplError::InvalidConfig(format!(
                    "window_bytes({w}) is below the least window, {} bytes",
                    2 * protocol::MIN_COST
                )))
            }
            Some(w) => w,
            None => env.window_bytes.unwrap_or(protocol::WINDOW),
        };
        let prefer = self.prefer.or(env.transport);
        let chosen = negotiate::choose_all(&plugins, &self.port_types, prefer.as_deref())?;
        let mut wanted: Vec<usize> = chosen.iter().flat_map(|(_, i)| i.iter().copied()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.is_empty() {
            wanted.push(negotiate::preferred_or_best(&plugins, prefer.as_deref())?);
        }
        // The configuration every transport gets: the interfaces, the user's lines, then
        // pool, cluster and secret. A transport ignores the keys it does not know.
        let mut config_text = String::new();
        if let Some(spec) = self.interfaces.or(env.interfaces) {
            config_text.push_str(&format!("interfaces={}\n", checked_interfaces(&spec)?));
        }
        config_text.push_str(&self.transport_config);
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
        let registry = Registry::join(Arc::clone(&backend), &self.pool, config, request)?;
        let shared = Arc::new(IbisShared {
            ident: registry.identifier().clone(),
            slots,
            port_slots,
            routes: Mutex::new(Default::default()),
            receive_ports: Mutex::new(HashMap::new()),
            send_ports: Mutex::new(HashSet::new()),
            ended: AtomicBool::new(false),
            spin,
            window,
            registry: backend,
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

#[cfg(test)]
mod tests {
    //! Local configuration errors of `from_env` are named as such, not as the registry
    //! refusing a connection (it is never contacted).

    use super::*;
    use ipl_auth::AuthError;

    fn from_vars(
        vars: &[(&str, &str)],
        secret: impl FnOnce() -> std::result::Result<PoolSecret, AuthError>,
    ) -> IplError {
        match IbisBuilder::default().with_launch(config::Launch::from_vars(vars), secret) {
            Ok(_) => panic!("{vars:?} was accepted"),
            Err(e) => e,
        }
    }

    fn never() -> std::result::Result<PoolSecret, AuthError> {
        panic!("the secret is not read when no secret variable is set")
    }

    fn assert_local(e: &IplError, names: &str) {
        let text = e.to_string();
        assert!(!text.contains("refused"), "{text}");
        assert!(!matches!(e, IplError::Registry(_)), "{e:?}");
        assert!(text.contains(names), "{text} does not name {names}");
    }

    #[test]
    fn an_unreadable_secret_file_is_a_secret_error() {
        let e = from_vars(
            &[
                ("IPL_POOL_SECRET_FILE", "/nonexistent/ipl-secret"),
                ("IPL_REGISTRY", "127.0.0.1:1"),
            ],
            || PoolSecret::from_file(std::path::Path::new("/nonexistent/ipl-secret")),
        );
        assert!(
            matches!(e, IplError::Secret(AuthError::SecretFile { .. })),
            "{e:?}"
        );
        assert_local(&e, "/nonexistent/ipl-secret");
    }

    #[test]
    fn a_malformed_secret_is_a_secret_error() {
        let e = from_vars(
            &[("IPL_POOL_SECRET", "zz"), ("IPL_REGISTRY", "127.0.0.1:1")],
            || PoolSecret::from_hex("zz"),
        );
        assert!(
            matches!(e, IplError::Secret(AuthError::BadSecret(_))),
            "{e:?}"
        );
        assert_local(&e, "pool secret");
    }

    #[test]
    fn a_registry_without_a_secret_is_a_secret_error() {
        let e = from_vars(&[("IPL_REGISTRY", "127.0.0.1:1")], never);
        assert!(matches!(e, IplError::Secret(AuthError::Missing)), "{e:?}");
        assert_local(&e, ipl_auth::SECRET_ENV);
    }

    #[test]
    fn a_registry_that_is_no_address_is_an_address_error() {
        let secret = PoolSecret::generate().expect("random source");
        for bad in ["no-port-here", "127.0.0.1:notaport", "127.0.0.1:99999"] {
            let s = secret.clone();
            let e = from_vars(
                &[("IPL_REGISTRY", bad), ("IPL_POOL_SECRET", "set")],
                move || Ok(s),
            );
            assert!(
                matches!(&e, IplError::RegistryAddress { address, .. } if address == bad),
                "{bad}: {e:?}"
            );
            assert_local(&e, "IPL_REGISTRY");
        }
    }

    #[test]
    fn a_bad_launcher_variable_is_invalid_config() {
        let e = from_vars(&[("IPL_POOL_SIZE", "abc")], never);
        assert!(matches!(e, IplError::InvalidConfig(_)), "{e:?}");
        assert_local(&e, "IPL_POOL_SIZE");
    }

    #[test]
    fn a_malleable_pool_is_joined_as_an_open_world() {
        let vars = [
            ("IPL_POOL_MALLEABLE", "1"),
            ("IPL_POOL_INITIAL_SIZE", "2"),
            ("IPL_RANK", "5"),
        ];
        let b = match IbisBuilder::default().with_launch(config::Launch::from_vars(&vars), never) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        assert!(b.capabilities.contains(IbisCapabilities::MALLEABLE));
        assert!(!b.capabilities.contains(IbisCapabilities::CLOSED_WORLD));
        assert_eq!(b.pool_size, None, "no size to wait for");
        assert_eq!(b.name.as_deref(), Some("member-5"));
        let e = from_vars(
            &[("IPL_POOL_MALLEABLE", "1"), ("IPL_POOL_SIZE", "2")],
            never,
        );
        assert!(matches!(e, IplError::InvalidConfig(_)), "{e:?}");
        assert_local(&e, "IPL_POOL_SIZE");
    }

    #[test]
    fn an_unknown_transport_is_named() {
        let e = match IbisBuilder::default()
            .prefer_transport("no-such-transport")
            .build()
        {
            Ok(_) => panic!("an unknown transport was accepted"),
            Err(e) => e,
        };
        assert!(
            matches!(&e, IplError::TransportUnavailable { name, .. } if name == "no-such-transport"),
            "{e:?}"
        );
        assert_local(&e, "no-such-transport");
    }
}
