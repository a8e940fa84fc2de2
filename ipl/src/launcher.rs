//! Which launcher started this process, and where it runs: the rank, the pool size and
//! the node, read from the variables a cluster's launcher sets for each process, and
//! the member's cluster.
//!
//! Sans-IO: [`detect`] and [`cluster`] take the variables as a lookup function (the
//! environment layer, [`config`](crate::config), passes the process environment), so
//! every launcher's table is tested directly.
//!
//! The launchers, in the order they are looked for (the first one whose variables are
//! set wins: `mpirun` inside a Slurm allocation inherits the allocation's `SLURM_*`
//! values, which describe the batch step, not the MPI job, and MPICH's Hydra started
//! by `srun` sees the `SLURM_*` values of its proxy):
//!
//! | Launcher | Rank | Size | Node |
//! |---|---|---|---|
//! | Open MPI `mpirun` (PMIx) | `OMPI_COMM_WORLD_RANK` (else `PMIX_RANK`) | `OMPI_COMM_WORLD_SIZE` | host name |
//! | MPICH / Hydra `mpiexec` (PMI) | `PMI_RANK` | `PMI_SIZE` | host name |
//! | Slurm `srun` | `SLURM_PROCID` | `SLURM_STEP_NUM_TASKS`, else `SLURM_NTASKS` | `SLURMD_NODENAME` |
//! | `ipl-run` (or by hand) | `IPL_RANK` | `IPL_POOL_SIZE` | host name |
//!
//! Slurm counts only inside a job step (`SLURM_STEP_ID` set, as `srun` does): a batch
//! script's own shell has `SLURM_PROCID=0` and the allocation's `SLURM_NTASKS`, and a
//! program started there directly is one process, not a pool.
//!
//! Explicit `IPL_RANK` and `IPL_POOL_SIZE` win over the launcher's values. A value that
//! is not a number, a size of 0 or a rank outside the size is a [`LauncherError`]
//! naming the variable.
//!
//! # Malleable pools
//!
//! `ipl-run --malleable -n N` starts an open-world pool that grows and shrinks while it
//! runs ([`control`]: a member asks `ipl-run` to start or stop processes). Its members
//! get, instead of `IPL_POOL_SIZE` (which would make them join a closed world):
//!
//! | Variable | Value |
//! |---|---|
//! | `IPL_POOL_MALLEABLE` | `1` (also `true`, `yes`; `0`, `false`, `no` switch it off): the pool is an open world, [`Launched::malleable`] |
//! | `IPL_POOL_INITIAL_SIZE` | N, the number of processes started at first ([`Launched::size`]; default 1): how many members to wait for before starting, not a bound |
//! | `IPL_RANK` | the process's rank, any number: the first N get `0..N`, added ones the next ranks (never reused) |
//! | `IPL_RUN_CONTROL` ([`control::ENV_CONTROL`]) | the path of `ipl-run`'s control socket ([`control::Control::from_env`]) |
//!
//! `IPL_POOL_MALLEABLE` with `IPL_POOL_SIZE` is an error
//! ([`LauncherError::ClosedAndMalleable`]): a pool is either closed or malleable. A
//! member that leaves a malleable pool (exits 0) before the others is normal.
//!
//! The cluster of a member ([`cluster`]): `IPL_CLUSTER` if set; else, if
//! `IPL_CLUSTER_MAP` is set (`node1=c0,node2=c0,node3=c1`), the entry of this member's
//! node (a node it does not list is an error); else, under a cluster launcher, the
//! node's name, so that cluster-aware stealing sees one cluster per machine.

use std::fmt;

pub mod control;

/// `IPL_CLUSTER_MAP`: `node=cluster` pairs, comma-separated.
pub const CLUSTER_MAP: &str = "IPL_CLUSTER_MAP";
/// `IPL_POOL_MALLEABLE`: the pool is an open world that grows and shrinks.
pub const POOL_MALLEABLE: &str = "IPL_POOL_MALLEABLE";
/// `IPL_POOL_INITIAL_SIZE`: the number of processes a malleable pool starts with.
pub const POOL_INITIAL_SIZE: &str = "IPL_POOL_INITIAL_SIZE";

/// The launcher that started this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LauncherKind {
    /// Open MPI's `mpirun`/`mpiexec` (ORTE or PRRTE, PMIx).
    OpenMpi,
    /// A PMI launcher: MPICH's Hydra `mpiexec`.
    Hydra,
    /// Slurm's `srun`.
    Slurm,
    /// `ipl-run`, or `IPL_POOL_SIZE` set by hand.
    IplRun,
}

impl LauncherKind {
    /// A short name: `openmpi`, `hydra`, `slurm`, `ipl-run`.
    pub fn name(self) -> &'static str {
        match self {
            LauncherKind::OpenMpi => "openmpi",
            LauncherKind::Hydra => "hydra",
            LauncherKind::Slurm => "slurm",
            LauncherKind::IplRun => "ipl-run",
        }
    }

    /// Whether this is a cluster's launcher (not `ipl-run`'s own variables): it tells
    /// rank and size but not where the registry is.
    pub fn is_external(self) -> bool {
        self != LauncherKind::IplRun
    }
}

impl fmt::Display for LauncherKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the launcher's variables say about this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launched {
    /// Which launcher.
    pub kind: LauncherKind,
    /// This process's rank: in `0..size` in a closed world, any number in a
    /// malleable pool (added processes get the next ranks). `None` only when
    /// `IPL_POOL_SIZE` (or `IPL_POOL_MALLEABLE`) is set without `IPL_RANK` and no
    /// launcher is detected.
    pub rank: Option<usize>,
    /// The number of processes the launcher started: the pool's size in a closed world;
    /// in a malleable pool its initial size (`IPL_POOL_INITIAL_SIZE`, else the
    /// launcher's count, else 1), which the pool may grow beyond and shrink below.
    pub size: usize,
    /// The node's name as the launcher knows it (`SLURMD_NODENAME`), if it says.
    pub node: Option<String>,
    /// Whether the pool is malleable (`IPL_POOL_MALLEABLE`): an open world that members
    /// join and leave while it runs, not a closed world of `size`.
    pub malleable: bool,
}

/// A launcher variable with a value that cannot be right.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LauncherError {
    /// A rank or size that is not a number.
    #[error("{variable}={value:?} is not a number")]
    NotANumber {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// A pool size of zero.
    #[error("{variable}=0: a pool has at least one member")]
    ZeroSize {
        /// The variable.
        variable: &'static str,
    },
    /// A rank that is not below the size.
    #[error("{rank_variable}={rank} is not below {size_variable}={size}")]
    RankOutOfRange {
        /// The variable giving the rank.
        rank_variable: &'static str,
        /// The rank.
        rank: usize,
        /// The variable giving the size.
        size_variable: &'static str,
        /// The size.
        size: usize,
    },
    /// A rank without any variable giving the size.
    #[error("{variable} is set but no variable gives the pool size (set IPL_POOL_SIZE)")]
    NoSize {
        /// The variable giving the rank.
        variable: &'static str,
    },
    /// `IPL_CLUSTER_MAP` is not a list of `node=cluster`.
    #[error("IPL_CLUSTER_MAP: {entry:?} is not node=cluster")]
    BadClusterMap {
        /// The malformed entry.
        entry: String,
    },
    /// `IPL_CLUSTER_MAP` does not list this node.
    #[error("IPL_CLUSTER_MAP has no entry for node {node:?}")]
    NodeNotMapped {
        /// This process's node.
        node: String,
    },
    /// A yes/no variable with another value.
    #[error("{variable}={value:?} is not 1/true/yes or 0/false/no")]
    NotAFlag {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// `IPL_POOL_MALLEABLE` together with `IPL_POOL_SIZE`.
    #[error(
        "IPL_POOL_MALLEABLE asks for an open world, IPL_POOL_SIZE for a closed one: \
         set only one (IPL_POOL_INITIAL_SIZE gives a malleable pool's first size)"
    )]
    ClosedAndMalleable,
}

/// A number variable, if set.
fn number(
    get: &dyn Fn(&str) -> Option<String>,
    variable: &'static str,
) -> Result<Option<(usize, &'static str)>, LauncherError> {
    match get(variable) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(|n| Some((n, variable)))
            .map_err(|_| LauncherError::NotANumber { variable, value: v }),
    }
}

/// The first of `variables` that is set.
fn first(
    get: &dyn Fn(&str) -> Option<String>,
    variables: &[&'static str],
) -> Result<Option<(usize, &'static str)>, LauncherError> {
    for v in variables {
        if let Some(n) = number(get, v)? {
            return Ok(Some(n));
        }
    }
    Ok(None)
}

/// A yes/no variable: `Ok(false)` when unset.
fn flag(
    get: &dyn Fn(&str) -> Option<String>,
    variable: &'static str,
) -> Result<bool, LauncherError> {
    match get(variable) {
        None => Ok(false),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" => Ok(true),
            "0" | "false" | "no" => Ok(false),
            _ => Err(LauncherError::NotAFlag { variable, value: v }),
        },
    }
}

/// Reads the launcher variables through `get` (a variable's value if set and not
/// empty). `Ok(None)`: no launcher, no `IPL_POOL_SIZE` and no `IPL_POOL_MALLEABLE`.
pub fn detect(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Launched>, LauncherError> {
    let (kind, rank, size, node) =
        if get("OMPI_COMM_WORLD_SIZE").is_some() || get("OMPI_COMM_WORLD_RANK").is_some() {
            (
                Some(LauncherKind::OpenMpi),
                first(get, &["OMPI_COMM_WORLD_RANK", "PMIX_RANK"])?,
                first(get, &["OMPI_COMM_WORLD_SIZE"])?,
                None,
            )
        } else if get("PMI_RANK").is_some() || get("PMI_SIZE").is_some() {
            (
                Some(LauncherKind::Hydra),
                first(get, &["PMI_RANK"])?,
                first(get, &["PMI_SIZE"])?,
                None,
            )
        } else if get("SLURM_PROCID").is_some() && get("SLURM_STEP_ID").is_some() {
            (
                Some(LauncherKind::Slurm),
                first(get, &["SLURM_PROCID"])?,
                first(get, &["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"])?,
                get("SLURMD_NODENAME"),
            )
        } else if get("PMIX_RANK").is_some() {
            // PMIx without Open MPI's variables (e.g. another PMIx launcher): a rank, but
            // nothing tells the size unless IPL_POOL_SIZE does.
            (
                Some(LauncherKind::OpenMpi),
                first(get, &["PMIX_RANK"])?,
                None,
                None,
            )
        } else {
            (None, None, None, None)
        };
    // Explicit IPL_* values win.
    let rank = number(get, "IPL_RANK")?.or(rank);
    let malleable = flag(get, POOL_MALLEABLE)?;
    let size = if malleable {
        if get("IPL_POOL_SIZE").is_some() {
            return Err(LauncherError::ClosedAndMalleable);
        }
        // Without any count: an open world that starts with whoever comes.
        Some(
            number(get, POOL_INITIAL_SIZE)?
                .or(size)
                .unwrap_or((1, POOL_INITIAL_SIZE)),
        )
    } else {
        number(get, "IPL_POOL_SIZE")?.or(size)
    };
    let kind = match (kind, size) {
        (Some(k), _) => k,
        (None, Some(_)) => LauncherKind::IplRun,
        (None, None) => return Ok(None),
    };
    let Some((size, size_variable)) = size else {
        let variable = rank.map_or("PMIX_RANK", |(_, v)| v);
        return Err(LauncherError::NoSize { variable });
    };
    if size == 0 {
        return Err(LauncherError::ZeroSize {
            variable: size_variable,
        });
    }
    // A malleable pool's added processes have ranks beyond its initial size.
    if let Some((r, rank_variable)) = rank.filter(|_| !malleable) {
        if r >= size {
            return Err(LauncherError::RankOutOfRange {
                rank_variable,
                rank: r,
                size_variable,
                size,
            });
        }
    }
    Ok(Some(Launched {
        kind,
        rank: rank.map(|(r, _)| r),
        size,
        node,
        malleable,
    }))
}

/// This member's cluster, or `None` to leave it as it is: `IPL_CLUSTER`; else the
/// entry of `IPL_CLUSTER_MAP` for the node; else, under a cluster launcher, the node's
/// name. The node is the launcher's ([`Launched::node`]), else `hostname()`.
pub fn cluster(
    get: &dyn Fn(&str) -> Option<String>,
    launched: Option<&Launched>,
    hostname: &dyn Fn() -> Option<String>,
) -> Result<Option<String>, LauncherError> {
    if let Some(c) = get("IPL_CLUSTER") {
        return Ok(Some(c));
    }
    let node = || launched.and_then(|l| l.node.clone()).or_else(hostname);
    if let Some(map) = get(CLUSTER_MAP) {
        let mut entries = Vec::new();
        for entry in map.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match entry.split_once('=') {
                Some((n, c)) if !n.trim().is_empty() && !c.trim().is_empty() => {
                    entries.push((n.trim(), c.trim()))
                }
                _ => {
                    return Err(LauncherError::BadClusterMap {
                        entry: entry.to_owned(),
                    })
                }
            }
        }
        let node = node().unwrap_or_default();
        return match entries.iter().find(|(n, _)| *n == node) {
            Some((_, c)) => Ok(Some((*c).to_owned())),
            None => Err(LauncherError::NodeNotMapped { node }),
        };
    }
    match launched {
        Some(l) if l.kind.is_external() => Ok(node()),
        _ => Ok(None),
    }
}

/// This machine's host name (`uname -n`), if it has one.
pub fn hostname() -> Option<String> {
    let uts = rustix::system::uname();
    let name = uts.nodename().to_string_lossy().into_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use LauncherKind::*;

    fn table<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
                .filter(|v| !v.is_empty())
        }
    }

    fn launched(kind: LauncherKind, rank: usize, size: usize, node: Option<&str>) -> Launched {
        Launched {
            kind,
            rank: Some(rank),
            size,
            node: node.map(str::to_owned),
            malleable: false,
        }
    }

    /// What each launcher sets (from `env` under each one on this machine: Open MPI
    /// 4.1, MPICH 4.0 Hydra, Slurm 22.05), and what is read from it.
    #[test]
    fn each_launcher_is_detected_from_its_own_variables() {
        /// What, the variables, what is detected.
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<Launched>);
        let cases: &[Case] = &[
            ("nothing", &[("HOME", "/root")], None),
            (
                "open mpi",
                &[
                    ("OMPI_COMM_WORLD_RANK", "1"),
                    ("OMPI_COMM_WORLD_SIZE", "4"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                    ("PMIX_RANK", "1"),
                ],
                Some(launched(OpenMpi, 1, 4, None)),
            ),
            (
                "hydra",
                &[("PMI_RANK", "3"), ("PMI_SIZE", "4"), ("PMI_FD", "6")],
                Some(launched(Hydra, 3, 4, None)),
            ),
            (
                "srun",
                &[
                    ("SLURM_PROCID", "2"),
                    ("SLURM_NTASKS", "6"),
                    ("SLURM_STEP_NUM_TASKS", "6"),
                    ("SLURM_STEP_ID", "0"),
                    ("SLURMD_NODENAME", "node7"),
                    ("SLURM_JOB_ID", "42"),
                ],
                Some(launched(Slurm, 2, 6, Some("node7"))),
            ),
            (
                "srun in an allocation of more tasks: the step's count",
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "8"),
                    ("SLURM_STEP_NUM_TASKS", "2"),
                    ("SLURM_STEP_ID", "1"),
                ],
                Some(launched(Slurm, 0, 2, None)),
            ),
            (
                "a batch script's shell is not a job step",
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "8"),
                    ("SLURM_JOB_ID", "42"),
                ],
                None,
            ),
            (
                "mpirun inside an allocation: Open MPI wins over SLURM_*",
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "1"),
                    ("SLURM_STEP_ID", "0"),
                    ("SLURMD_NODENAME", "node1"),
                    ("OMPI_COMM_WORLD_RANK", "5"),
                    ("OMPI_COMM_WORLD_SIZE", "8"),
                ],
                Some(launched(OpenMpi, 5, 8, None)),
            ),
            (
                "hydra bootstrapped by srun: PMI wins over the proxy's SLURM_*",
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_STEP_ID", "0"),
                    ("PMI_RANK", "3"),
                    ("PMI_SIZE", "4"),
                ],
                Some(launched(Hydra, 3, 4, None)),
            ),
            (
                "ipl-run",
                &[("IPL_RANK", "1"), ("IPL_POOL_SIZE", "3")],
                Some(launched(IplRun, 1, 3, None)),
            ),
            (
                "IPL_POOL_SIZE by hand, no rank",
                &[("IPL_POOL_SIZE", "3")],
                Some(Launched {
                    kind: IplRun,
                    rank: None,
                    size: 3,
                    node: None,
                    malleable: false,
                }),
            ),
            ("IPL_RANK alone is no pool", &[("IPL_RANK", "1")], None),
            (
                "explicit IPL_* win over the launcher's",
                &[
                    ("OMPI_COMM_WORLD_RANK", "1"),
                    ("OMPI_COMM_WORLD_SIZE", "4"),
                    ("IPL_RANK", "0"),
                    ("IPL_POOL_SIZE", "2"),
                ],
                Some(launched(OpenMpi, 0, 2, None)),
            ),
            (
                "PMIx alone with IPL_POOL_SIZE",
                &[("PMIX_RANK", "2"), ("IPL_POOL_SIZE", "3")],
                Some(launched(OpenMpi, 2, 3, None)),
            ),
            (
                "empty values are unset",
                &[("PMI_RANK", ""), ("PMI_SIZE", "")],
                None,
            ),
        ];
        for (what, vars, want) in cases {
            assert_eq!(detect(&table(vars)).as_ref(), Ok(want), "{what}");
        }
    }

    #[test]
    fn absurd_values_are_errors_naming_the_variable() {
        let cases: &[(&[(&str, &str)], LauncherError)] = &[
            (
                &[("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "4")],
                LauncherError::RankOutOfRange {
                    rank_variable: "OMPI_COMM_WORLD_RANK",
                    rank: 4,
                    size_variable: "OMPI_COMM_WORLD_SIZE",
                    size: 4,
                },
            ),
            (
                &[("PMI_RANK", "0"), ("PMI_SIZE", "0")],
                LauncherError::ZeroSize {
                    variable: "PMI_SIZE",
                },
            ),
            (
                &[
                    ("SLURM_PROCID", "x"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_STEP_ID", "0"),
                ],
                LauncherError::NotANumber {
                    variable: "SLURM_PROCID",
                    value: "x".into(),
                },
            ),
            (
                &[("PMI_RANK", "0"), ("PMI_SIZE", "-3")],
                LauncherError::NotANumber {
                    variable: "PMI_SIZE",
                    value: "-3".into(),
                },
            ),
            (
                &[("PMI_RANK", "0")],
                LauncherError::NoSize {
                    variable: "PMI_RANK",
                },
            ),
            (
                &[("PMIX_RANK", "0")],
                LauncherError::NoSize {
                    variable: "PMIX_RANK",
                },
            ),
            (
                &[("IPL_POOL_SIZE", "many")],
                LauncherError::NotANumber {
                    variable: "IPL_POOL_SIZE",
                    value: "many".into(),
                },
            ),
            (
                &[("IPL_RANK", "7"), ("IPL_POOL_SIZE", "3")],
                LauncherError::RankOutOfRange {
                    rank_variable: "IPL_RANK",
                    rank: 7,
                    size_variable: "IPL_POOL_SIZE",
                    size: 3,
                },
            ),
            (
                &[("IPL_POOL_SIZE", "99999999999999999999999999")],
                LauncherError::NotANumber {
                    variable: "IPL_POOL_SIZE",
                    value: "99999999999999999999999999".into(),
                },
            ),
        ];
        for (vars, want) in cases {
            let got = detect(&table(vars));
            assert_eq!(got.as_ref(), Err(want), "{vars:?}");
            let text = want.to_string();
            let named = match want {
                LauncherError::RankOutOfRange { rank_variable, .. } => rank_variable,
                LauncherError::ZeroSize { variable }
                | LauncherError::NotANumber { variable, .. }
                | LauncherError::NoSize { variable } => variable,
                _ => unreachable!(),
            };
            assert!(text.contains(named), "{text}");
        }
    }

    #[test]
    fn a_malleable_pool_is_an_open_world_with_an_initial_size() {
        let m = |rank: Option<usize>, size: usize| Launched {
            kind: IplRun,
            rank,
            size,
            node: None,
            malleable: true,
        };
        let ok: &[(&[(&str, &str)], Launched)] = &[
            (
                &[
                    ("IPL_POOL_MALLEABLE", "1"),
                    ("IPL_POOL_INITIAL_SIZE", "2"),
                    ("IPL_RANK", "0"),
                ],
                m(Some(0), 2),
            ),
            // An added process: its rank is beyond the initial size.
            (
                &[
                    ("IPL_POOL_MALLEABLE", "true"),
                    ("IPL_POOL_INITIAL_SIZE", "2"),
                    ("IPL_RANK", "7"),
                ],
                m(Some(7), 2),
            ),
            // Without a count: starts with whoever comes.
            (&[("IPL_POOL_MALLEABLE", "YES")], m(None, 1)),
            (
                &[
                    ("IPL_POOL_MALLEABLE", "1"),
                    ("PMI_RANK", "5"),
                    ("PMI_SIZE", "4"),
                ],
                Launched {
                    kind: Hydra,
                    ..m(Some(5), 4)
                },
            ),
        ];
        for (vars, want) in ok {
            assert_eq!(
                detect(&table(vars)).as_ref(),
                Ok(&Some(want.clone())),
                "{vars:?}"
            );
        }
        // Switched off: a closed world as before.
        let off = detect(&table(&[
            ("IPL_POOL_MALLEABLE", "0"),
            ("IPL_POOL_SIZE", "3"),
            ("IPL_RANK", "1"),
        ]));
        assert_eq!(off, Ok(Some(launched(IplRun, 1, 3, None))));
        let bad: &[(&[(&str, &str)], LauncherError)] = &[
            (
                &[("IPL_POOL_MALLEABLE", "1"), ("IPL_POOL_SIZE", "3")],
                LauncherError::ClosedAndMalleable,
            ),
            (
                &[("IPL_POOL_MALLEABLE", "maybe")],
                LauncherError::NotAFlag {
                    variable: "IPL_POOL_MALLEABLE",
                    value: "maybe".into(),
                },
            ),
            (
                &[("IPL_POOL_MALLEABLE", "1"), ("IPL_POOL_INITIAL_SIZE", "0")],
                LauncherError::ZeroSize {
                    variable: "IPL_POOL_INITIAL_SIZE",
                },
            ),
            (
                &[
                    ("IPL_POOL_MALLEABLE", "1"),
                    ("IPL_POOL_INITIAL_SIZE", "two"),
                ],
                LauncherError::NotANumber {
                    variable: "IPL_POOL_INITIAL_SIZE",
                    value: "two".into(),
                },
            ),
        ];
        for (vars, want) in bad {
            assert_eq!(detect(&table(vars)).as_ref(), Err(want), "{vars:?}");
        }
        // The flag alone is read only with it set: IPL_POOL_INITIAL_SIZE alone is no pool.
        assert_eq!(detect(&table(&[("IPL_POOL_INITIAL_SIZE", "2")])), Ok(None));
    }

    #[test]
    fn the_cluster_comes_from_the_variable_the_map_or_the_node() {
        let host = || Some("thishost".to_owned());
        let none = || None;
        let slurm = launched(Slurm, 0, 2, Some("node3"));
        let mpi = launched(OpenMpi, 0, 2, None);
        let iplrun = launched(IplRun, 0, 2, None);
        let c = |vars: &[(&str, &str)], l: Option<&Launched>, h: &dyn Fn() -> Option<String>| {
            cluster(&table(vars), l, h)
        };
        assert_eq!(c(&[], Some(&slurm), &host), Ok(Some("node3".into())));
        assert_eq!(c(&[], Some(&mpi), &host), Ok(Some("thishost".into())));
        assert_eq!(c(&[], Some(&mpi), &none), Ok(None));
        assert_eq!(c(&[], Some(&iplrun), &host), Ok(None));
        assert_eq!(c(&[], None, &host), Ok(None));
        assert_eq!(
            c(&[("IPL_CLUSTER", "c9")], Some(&slurm), &host),
            Ok(Some("c9".into()))
        );
        let map = [("IPL_CLUSTER_MAP", "node1=c0, node3=c1,thishost=c2")];
        assert_eq!(c(&map, Some(&slurm), &host), Ok(Some("c1".into())));
        assert_eq!(c(&map, Some(&mpi), &host), Ok(Some("c2".into())));
        assert_eq!(c(&map, None, &host), Ok(Some("c2".into())));
        assert_eq!(
            c(&[("IPL_CLUSTER_MAP", "node1=c0")], Some(&slurm), &host),
            Err(LauncherError::NodeNotMapped {
                node: "node3".into()
            })
        );
        for bad in ["node1", "node1=", "=c0", "a=b,c"] {
            let got = c(&[("IPL_CLUSTER_MAP", bad)], Some(&slurm), &host);
            assert!(
                matches!(got, Err(LauncherError::BadClusterMap { .. })),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn this_machine_has_a_host_name() {
        assert!(hostname().is_some_and(|h| !h.is_empty()));
    }
}
