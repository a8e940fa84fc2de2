//! The environment layer of an instance's configuration: every environment variable the
//! IPL reads is read here, and only here.
//!
//! The options of [`IbisBuilder`](crate::IbisBuilder) come in three layers: an explicit
//! builder call wins over the environment, which wins over the built-in default.
//!
//! Read by [`IbisBuilder::build`](crate::IbisBuilder::build), always:
//!
//! | Variable | Builder option | Meaning | Default |
//! |---|---|---|---|
//! | `IPL_TRANSPORT` | [`prefer_transport`](crate::IbisBuilder::prefer_transport) | the transport to prefer (an error if it lacks a requested capability) | the best one |
//! | `IPL_SPIN_US` | [`spin`](crate::IbisBuilder::spin) | microseconds a blocking receive polls before it sleeps; `0` switches polling off (the receiver sleeps at once) | 50 |
//! | `IPL_WINDOW_BYTES` | [`window_bytes`](crate::IbisBuilder::window_bytes) | the flow-control window per connection, in bytes; a pool must agree on it | 64 MiB |
//! | `IPL_INTERFACES` | [`interfaces`](crate::IbisBuilder::interfaces) | the network interfaces the network transports (tcp, quic) listen on and advertise: a comma list of addresses, interface names and CIDR networks (`eth0,10.1.0.0/16`), as Open MPI's `btl_tcp_if_include`; one this host lacks fails `build` naming it | all |
//!
//! Read by [`IbisBuilder::from_env`](crate::IbisBuilder::from_env), the variables the
//! launcher (`ipl-run`) sets for each process:
//!
//! | Variable | Builder option | Meaning |
//! |---|---|---|
//! | `IPL_POOL` | [`pool`](crate::IbisBuilder::pool) | the pool to join |
//! | `IPL_POOL_SIZE` | [`pool_size`](crate::IbisBuilder::pool_size) | the pool's size; also asks for a closed world |
//! | `IPL_CLUSTER` | [`cluster`](crate::IbisBuilder::cluster) | this member's cluster |
//! | `IPL_RANK` | [`name`](crate::IbisBuilder::name) | this member's name is `member-<rank>` |
//! | `IPL_POOL_SECRET` | [`secret`](crate::IbisBuilder::secret) | the pool's secret, in hex (see `ipl_auth`) |
//! | `IPL_POOL_SECRET_FILE` | [`secret`](crate::IbisBuilder::secret) | a file holding the pool's secret (64 hex digits), owned by the user and private to them (`chmod 600`), else refused; read when `IPL_POOL_SECRET` is not set. Unlike the environment, other processes of the user cannot read it in `/proc/<pid>/environ` |
//! | `IPL_REGISTRY` | [`registry_backend`](crate::IbisBuilder::registry_backend) | the registry server's address: joins over the network (needs the secret) |
//!
//! A variable that is unset or empty leaves the option as it is. A value of `IPL_SPIN_US`
//! or `IPL_WINDOW_BYTES` that is not a number (or a window below
//! [`2 * MIN_COST`](crate::protocol::MIN_COST)) is ignored with a warning. The transport
//! plugin search path, `IPL_PLUGIN_PATH`, is read by the plugin loader of
//! `ipl_transport_abi`.

use std::time::Duration;

use crate::protocol::MIN_COST;

/// The poll budget of a blocking receive when neither the builder nor `IPL_SPIN_US` sets
/// one (the thesis's "poll for about two latencies, then yield": waking a sleeping thread
/// costs more than a whole in-process round trip).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// The variable naming the preferred transport.
pub const TRANSPORT: &str = "IPL_TRANSPORT";
/// The variable setting the poll budget of a blocking receive, in microseconds.
pub const SPIN_US: &str = "IPL_SPIN_US";
/// The variable setting the flow-control window, in bytes.
pub const WINDOW_BYTES: &str = "IPL_WINDOW_BYTES";
/// The variable selecting the network interfaces.
pub const INTERFACES: &str = "IPL_INTERFACES";
/// The variable naming the pool.
pub const POOL: &str = "IPL_POOL";
/// The variable giving the pool's size (closed world).
pub const POOL_SIZE: &str = "IPL_POOL_SIZE";
/// The variable naming this member's cluster.
pub const CLUSTER: &str = "IPL_CLUSTER";
/// The variable giving this member's rank.
pub const RANK: &str = "IPL_RANK";
/// The variable giving the registry server's address.
pub const REGISTRY: &str = "IPL_REGISTRY";

/// Where the variables are read from: the process environment, or a table in tests.
trait Source {
    /// A variable's value, if it is set and not empty.
    fn var(&self, name: &str) -> Option<String>;

    /// A numeric variable's value; a value that is not a number is ignored with a
    /// warning.
    fn number(&self, name: &str) -> Option<u64> {
        number(name, self.var(name)?)
    }
}

/// The process environment.
struct Environment;

impl Source for Environment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

fn number(name: &str, v: String) -> Option<u64> {
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => {
            tracing::warn!(variable = name, value = %v, "not a number; ignored");
            None
        }
    }
}

/// The options every build reads from the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tuning {
    /// `IPL_TRANSPORT`.
    pub(crate) transport: Option<String>,
    /// `IPL_SPIN_US`.
    pub(crate) spin: Option<Duration>,
    /// `IPL_WINDOW_BYTES`, if at least `2 * MIN_COST`.
    pub(crate) window_bytes: Option<u64>,
    /// `IPL_INTERFACES`, as given (checked by the builder, which reports a bad value).
    pub(crate) interfaces: Option<String>,
}

impl Tuning {
    /// Reads `IPL_TRANSPORT`, `IPL_SPIN_US`, `IPL_WINDOW_BYTES` and `IPL_INTERFACES`.
    pub(crate) fn from_env() -> Self {
        Self::read(&Environment)
    }

    fn read(src: &impl Source) -> Self {
        Tuning {
            transport: src.var(TRANSPORT),
            spin: src.number(SPIN_US).map(Duration::from_micros),
            window_bytes: window(src),
            interfaces: src.var(INTERFACES),
        }
    }
}

/// `IPL_WINDOW_BYTES`, if set to a usable window.
pub(crate) fn window_from_env() -> Option<u64> {
    window(&Environment)
}

fn window(src: &impl Source) -> Option<u64> {
    let w = src.number(WINDOW_BYTES)?;
    if w >= 2 * MIN_COST {
        Some(w)
    } else {
        tracing::warn!(
            variable = WINDOW_BYTES,
            value = w,
            least = 2 * MIN_COST,
            "window too small; ignored"
        );
        None
    }
}

/// The variables a launcher sets for each process (see [`IbisBuilder::from_env`]
/// (crate::IbisBuilder::from_env)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Launch {
    /// `IPL_POOL`.
    pub(crate) pool: Option<String>,
    /// `IPL_POOL_SIZE`, as given (parsed by the builder, which reports a bad value).
    pub(crate) pool_size: Option<String>,
    /// `IPL_CLUSTER`.
    pub(crate) cluster: Option<String>,
    /// `IPL_RANK`.
    pub(crate) rank: Option<String>,
    /// Whether `IPL_POOL_SECRET` or `IPL_POOL_SECRET_FILE` is set
    /// (`ipl_auth::PoolSecret::from_env` reads them).
    pub(crate) secret: bool,
    /// `IPL_REGISTRY`.
    pub(crate) registry: Option<String>,
}

impl Launch {
    /// Reads the launcher's variables.
    pub(crate) fn from_env() -> Self {
        Self::read(&Environment)
    }

    fn read(src: &impl Source) -> Self {
        Launch {
            pool: src.var(POOL),
            pool_size: src.var(POOL_SIZE),
            cluster: src.var(CLUSTER),
            rank: src.var(RANK),
            secret: src.var(ipl_auth::SECRET_ENV).is_some()
                || src.var(ipl_auth::SECRET_FILE_ENV).is_some(),
            registry: src.var(REGISTRY),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed set of variables.
    struct Table(&'static [(&'static str, &'static str)]);

    impl Source for Table {
        fn var(&self, name: &str) -> Option<String> {
            let v = self.0.iter().find(|(k, _)| *k == name)?.1;
            (!v.is_empty()).then(|| v.to_owned())
        }
    }

    #[test]
    fn spin_zero_switches_polling_off_and_values_parse() {
        let t = Tuning::read(&Table(&[
            ("IPL_SPIN_US", "0"),
            ("IPL_WINDOW_BYTES", "1048576"),
            ("IPL_TRANSPORT", "shm"),
            ("IPL_INTERFACES", "eth0,10.0.0.0/8"),
        ]));
        assert_eq!(t.spin, Some(Duration::ZERO));
        assert_eq!(t.interfaces.as_deref(), Some("eth0,10.0.0.0/8"));
        assert_eq!(t.window_bytes, Some(1 << 20));
        assert_eq!(t.transport.as_deref(), Some("shm"));
        let t = Tuning::read(&Table(&[("IPL_SPIN_US", "120")]));
        assert_eq!(t.spin, Some(Duration::from_micros(120)));
    }

    #[test]
    fn unset_empty_and_unusable_values_leave_the_option_alone() {
        assert_eq!(Tuning::read(&Table(&[])), Tuning::default());
        let t = Tuning::read(&Table(&[
            ("IPL_SPIN_US", "fast"),
            ("IPL_WINDOW_BYTES", "100"),
            ("IPL_TRANSPORT", ""),
            ("IPL_INTERFACES", ""),
        ]));
        assert_eq!(t, Tuning::default());
    }

    #[test]
    fn the_launcher_variables_are_read() {
        let l = Launch::read(&Table(&[
            ("IPL_POOL", "p"),
            ("IPL_POOL_SIZE", "4"),
            ("IPL_CLUSTER", "c"),
            ("IPL_RANK", "2"),
            ("IPL_POOL_SECRET", "00"),
            ("IPL_REGISTRY", "127.0.0.1:1"),
        ]));
        assert_eq!(l.pool.as_deref(), Some("p"));
        assert_eq!(l.pool_size.as_deref(), Some("4"));
        assert_eq!(l.cluster.as_deref(), Some("c"));
        assert_eq!(l.rank.as_deref(), Some("2"));
        assert!(l.secret);
        assert_eq!(l.registry.as_deref(), Some("127.0.0.1:1"));
        let l = Launch::read(&Table(&[("IPL_POOL_SECRET_FILE", "/run/user/1/s")]));
        assert!(l.secret);
        assert!(!Launch::read(&Table(&[])).secret);
    }
}
