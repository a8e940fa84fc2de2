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
//! | `IPL_POOL_SIZE` | [`pool_size`](crate::IbisBuilder::pool_size) | the pool's size; also asks for a closed world (wins over a launcher's size) |
//! | `IPL_POOL_MALLEABLE` | [`capabilities`](crate::IbisBuilder::capabilities) | `1`: the pool is malleable, an open world members join and leave while it runs (`MALLEABLE`, not `CLOSED_WORLD`; an error with `IPL_POOL_SIZE`) |
//! | `IPL_POOL_INITIAL_SIZE` | (none) | a malleable pool's first size, for the program ([`launcher()`]'s `size`) |
//! | `IPL_CLUSTER` | [`cluster`](crate::IbisBuilder::cluster) | this member's cluster |
//! | `IPL_CLUSTER_MAP` | [`cluster`](crate::IbisBuilder::cluster) | `node=cluster,...`: this member's cluster is its node's entry (a node not listed is an error) |
//! | `IPL_RANK` | [`name`](crate::IbisBuilder::name) | this member's name is `member-<rank>` (wins over a launcher's rank) |
//! | `IPL_POOL_SECRET` | [`secret`](crate::IbisBuilder::secret) | the pool's secret, in hex (see `ipl_auth`) |
//! | `IPL_POOL_SECRET_FILE` | [`secret`](crate::IbisBuilder::secret) | a file holding the pool's secret (64 hex digits), owned by the user and private to them (`chmod 600`), else refused; read when `IPL_POOL_SECRET` is not set. Unlike the environment, other processes of the user cannot read it in `/proc/<pid>/environ` |
//! | `IPL_REGISTRY` | [`registry_backend`](crate::IbisBuilder::registry_backend) | the registry server's address: joins over the network (needs the secret) |
//!
//! and the variables of a cluster's launcher ([`launcher`](crate::launcher) has the
//! rules), read by `from_env` too, first match wins:
//!
//! | Launcher | Rank | Size | Node (the default cluster) |
//! |---|---|---|---|
//! | Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK` (else `PMIX_RANK`) | `OMPI_COMM_WORLD_SIZE` | the host name |
//! | MPICH/Hydra `mpiexec` | `PMI_RANK` | `PMI_SIZE` | the host name |
//! | Slurm `srun` (a job step: `SLURM_STEP_ID` set) | `SLURM_PROCID` | `SLURM_STEP_NUM_TASKS`, else `SLURM_NTASKS` | `SLURMD_NODENAME` |
//!
//! Under such a launcher the pool is a closed world of the launcher's size and each
//! member's cluster is its node (unless `IPL_CLUSTER` or `IPL_CLUSTER_MAP` say
//! otherwise). The launcher does not say where the registry is: `ipl-run --launcher
//! 'srun -n 8' -- PROGRAM` starts one and passes `IPL_REGISTRY`, `IPL_POOL` and
//! `IPL_POOL_SECRET` down. Without `IPL_REGISTRY` each process runs as a pool of one,
//! with a warning. A launcher value that is not a number, a size of 0 or a rank not
//! below the size is an error naming the variable.
//!
//! A variable that is unset or empty leaves the option as it is. A value of `IPL_SPIN_US`
//! or `IPL_WINDOW_BYTES` that is not a number (or a window below
//! [`2 * MIN_COST`](crate::protocol::MIN_COST)) is ignored with a warning. The transport
//! plugin search path, `IPL_PLUGIN_PATH`, is read by the plugin loader of
//! `ipl_transport_abi`.

use std::time::Duration;

use crate::launcher::{self, Launched, LauncherError};
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    /// `IPL_POOL`.
    pub(crate) pool: Option<String>,
    /// The launcher, rank and size ([`launcher::detect`]; `IPL_POOL_SIZE` and
    /// `IPL_RANK` included).
    pub(crate) launched: Result<Option<Launched>, LauncherError>,
    /// This member's cluster ([`launcher::cluster`]: `IPL_CLUSTER`, `IPL_CLUSTER_MAP`,
    /// the node).
    pub(crate) cluster: Result<Option<String>, LauncherError>,
    /// `IPL_RANK`, as given (the member's name when no pool size is known).
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
        Self::read_with_host(src, &launcher::hostname)
    }

    fn read_with_host(src: &impl Source, hostname: &dyn Fn() -> Option<String>) -> Self {
        let get = |k: &str| src.var(k);
        let launched = launcher::detect(&get);
        let cluster = match &launched {
            Ok(l) => launcher::cluster(&get, l.as_ref(), hostname),
            Err(e) => Err(e.clone()),
        };
        Launch {
            pool: src.var(POOL),
            launched,
            cluster,
            rank: src.var(RANK),
            secret: src.var(ipl_auth::SECRET_ENV).is_some()
                || src.var(ipl_auth::SECRET_FILE_ENV).is_some(),
            registry: src.var(REGISTRY),
        }
    }
}

/// A fixed set of variables (tests of the layers that use [`Launch`]).
#[cfg(test)]
pub(crate) struct Vars<'a>(pub(crate) &'a [(&'a str, &'a str)]);

#[cfg(test)]
impl Source for Vars<'_> {
    fn var(&self, name: &str) -> Option<String> {
        let v = self.0.iter().find(|(k, _)| *k == name)?.1;
        (!v.is_empty()).then(|| v.to_owned())
    }
}

#[cfg(test)]
impl Launch {
    /// The variables of `vars`, on a host without a name.
    pub(crate) fn from_vars(vars: &[(&str, &str)]) -> Self {
        Self::read_with_host(&Vars(vars), &|| None)
    }
}

/// The launcher that started this process, from the process environment (see
/// [`launcher::detect`]); `Ok(None)` when none did.
pub fn launcher() -> Result<Option<Launched>, LauncherError> {
    launcher::detect(&|k| Environment.var(k))
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
        assert_eq!(
            l.launched,
            Ok(Some(Launched {
                kind: launcher::LauncherKind::IplRun,
                rank: Some(2),
                size: 4,
                node: None,
                malleable: false,
            }))
        );
        assert_eq!(l.cluster, Ok(Some("c".into())));
        assert_eq!(l.rank.as_deref(), Some("2"));
        assert!(l.secret);
        assert_eq!(l.registry.as_deref(), Some("127.0.0.1:1"));
        let l = Launch::read(&Table(&[("IPL_POOL_SECRET_FILE", "/run/user/1/s")]));
        assert!(l.secret);
        assert!(!Launch::read(&Table(&[])).secret);
    }

    #[test]
    fn under_srun_the_cluster_is_the_node() {
        let host = || Some("thishost".to_owned());
        let l = Launch::read_with_host(
            &Table(&[
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_ID", "0"),
                ("SLURMD_NODENAME", "n1"),
            ]),
            &host,
        );
        assert_eq!(l.launched.unwrap().unwrap().size, 2);
        assert_eq!(l.cluster, Ok(Some("n1".into())));
        let l = Launch::read_with_host(&Table(&[("PMI_RANK", "5"), ("PMI_SIZE", "2")]), &host);
        assert!(l.launched.unwrap_err().to_string().contains("PMI_RANK"));
    }
}
