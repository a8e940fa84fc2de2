//! Running a Satin program on a pool of processes (the distributed layer).
//!
//! Under a launcher (`ipl-run`, or any environment with `IPL_REGISTRY` set, see
//! [`launched`]), every process of the program builds its instance with
//! [`SatinBuilder::build_distributed`] instead of `build`. That joins the pool with the
//! IPL (closed world: it waits for all members; a malleable pool: see
//! [Malleability](#malleability)), elects the master (`"satin-master"`)
//! and starts a driver thread per process that balances load between processes with
//! the inter-node scheduler of [`satin_core`] (RS or CRS: [`SatinBuilder::policy`]). Then
//! [`Pool::run`] runs the root job on the master; every other member only steals
//! until the master says the run is over. Only jobs of `#[satin::job]` types leave a
//! process.
//!
//! ```no_run
//! use satin::{Ctx, Job, Satin};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Fib(u32);
//!
//! #[satin::job]
//! impl Job for Fib {
//!     type Output = u64;
//!     fn run(self, ctx: &mut Ctx) -> u64 {
//!         if self.0 < 2 {
//!             return self.0 as u64;
//!         }
//!         let mut f = ctx.frame();
//!         let a = f.spawn(Fib(self.0 - 1));
//!         let b = f.spawn(Fib(self.0 - 2));
//!         let r = f.sync();
//!         r.get(a) + r.get(b)
//!     }
//! }
//!
//! let pool = Satin::builder().build_distributed()?;
//! let run = pool.run(|satin| satin.run(Fib(30)))?;
//! if let Some(result) = run.result {
//!     println!("fib(30) = {result}"); // only on the master
//!     print!("{}", run.stats.unwrap_or_default());
//! }
//! # Ok::<(), satin::SatinError>(())
//! ```
//!
//! # Protocol
//!
//! Each member has one receive port `satin` (many-to-one, message upcalls, object
//! serialization, reliable and FIFO) and a send port connected to every other
//! member. A message is a header (sender, `protocol` message) followed by raw bytes
//! for a job or result:
//!
//! - `StealRequest { id, synchronous }` and `StealReply { id, job }`: the victim's
//!   driver takes the oldest job of its workers' deques without stopping them
//!   ([`crate::ExternalStealer`]); a job whose type is not remote-capable is given back
//!   and the reply is empty. A job sent away stays registered by its owner until its
//!   `Result { job, outcome }` comes back ([`crate::StolenJob::complete_from_wire`]).
//! - `Done` (master to all, when the root job returned), answered by `Stats` (member
//!   to master), then `Exit` (master to all): members stop stealing at `Done` and
//!   leave at `Exit`. Every wait of this end-of-run handshake is bounded
//!   ([`DistConfig::end_timeout`]).
//! - `Have { entries, death }`, `Fetch { id, key }`, `Fetched { id, len }` (crash
//!   recovery, below): announcements of saved results, and fetching one (its bytes
//!   follow `Fetched` as payload). A `WireJob` carries `redone`: the thief runs it in
//!   redo mode.
//! - `SharedWrite { object, len }` (a write to a [shared object](crate::shared), from
//!   the member that made it to every other live member; the operation follows as
//!   payload), `SharedFetch` (a thief whose job's guard does not hold, to the member
//!   it stole the job from), answered by one `SharedState { object, len }` per shared
//!   object (its copy follows as payload and replaces the thief's).
//! - `Sample` (member to master, once per monitoring period, only with
//!   [Adaptivity](#adaptivity) on): the member's measurements.
//! - `Leave(Leaving)` (a member that leaves gracefully, to all), answered by
//!   `Leave(Ack)`, and `Leave(Done)` (its last message): see
//!   [Malleability](#malleability).
//!
//! # Malleability
//!
//! Under `ipl-run --malleable -n N` (`IPL_POOL_MALLEABLE=1`) the pool is an open world
//! that members join and leave while the program runs.
//!
//! - **Node numbers** are IPL member ids: the registry numbers the members of a pool in
//!   join order from 0 and never reuses a number, so every member gives a newcomer the
//!   same number without asking anybody, and a departure changes no other number.
//!   (In a closed world these are the indices 0..n of the members in join order.)
//! - **The first members**, those with a member id below the initial size N
//!   (`IPL_POOL_INITIAL_SIZE`), wait (bounded by [`DistConfig::join_timeout`]) until N
//!   members joined, take the member list, elect the master and start, as in a closed
//!   world.
//! - **A member that joins later** waits only for the election's winner (it never runs
//!   the root job), takes the current member list from the registry, connects to
//!   every member and starts stealing at once. Every member gets the registry's
//!   `Joined` event, connects a send port to it (on a short-lived thread), and adds it
//!   to its tables and to the load balancer (`satin_core::Event::NodeJoined`); messages
//!   the newcomer sends before that are held (a bounded number) and handled once the
//!   port is there. A member that joins after the root job returned is told `Done` at
//!   once and ends with the others.
//! - **A graceful leave**: SIGTERM (handled in a malleable pool with the `signal-hook`
//!   crate) or [`LeaveHandle::request`] ([`Pool::leave_handle`], in any pool) makes a
//!   member that is not the master stop stealing and answer steal requests with "no
//!   job", and send `Leaving` to all. The others stop stealing from it and answer
//!   `Ack`. The leaver finishes the jobs it runs for others (their results go home),
//!   gets back the results of the jobs stolen from it, waits for every `Ack` (steal
//!   replies sent to it before are ahead of it on the FIFO link), sends its statistics
//!   to the master and `Done` to all, and leaves the registry (`Left`). The others
//!   forget it at `Done` (if the registry's `Left` or the orderly close of its link
//!   comes first, they wait for `Done`, at most [`DistConfig::end_timeout`]; a lost
//!   link is a crash); it owes nothing, so nothing is
//!   redone. [`Pool::run`] returns on it without a result. Its waits are bounded by
//!   [`DistConfig::end_timeout`]: past it, it leaves anyway with a warning and the
//!   others redo what it had not finished (a right result, some work lost). A member
//!   that crashes while leaving is a crash ([Faults](#faults)).
//! - **The master cannot leave gracefully** (it runs the root job): asked to, it warns
//!   and goes on. A second SIGTERM ends any member of a malleable pool at once (status
//!   143), in case a leave hangs.
//! - **Migration** is a join followed by a graceful leave.
//!
//! # Adaptivity
//!
//! With [`SatinBuilder::adaptive`] (`SATIN_ADAPT=1`; off by default, and then nothing
//! below happens) the pool sizes itself as in the journal version of Satin:
//!
//! - **Measuring.** Every member ends a monitoring period every
//!   [`AdaptConfig::period`] ([`SatinBuilder::adapt_period`], `SATIN_ADAPT_PERIOD_MS`,
//!   default 2 s) and sends the master a `Sample` message: over `W × period` worker
//!   time (W workers), the time it starved (a worker out of work and none visible in
//!   the process; with W > 1 counted for every worker, an upper bound, as the kernel
//!   keeps no per-worker idle time), of that the time spent waiting for steal
//!   replies (communication; its wide-area part is the asynchronous, cross-cluster
//!   steals), the rest busy; and its speed from a short fixed benchmark run every
//!   period (a hash loop, a few milliseconds at most) times the share of the CPU the
//!   process got while busy (its CPU time over its busy time, at most 1: a member
//!   under a CPU quota or on a loaded machine shows it, which a few milliseconds of
//!   benchmark alone do not), which the master makes relative to the fastest member.
//! - **Deciding.** The master runs [`satin_core::adapt::Coordinator`] (made when the
//!   run starts, or on a member that becomes the master), feeds it the samples, the
//!   joins and the departures, and ends a period every period (its first one runs
//!   on into the second, so that the members' first samples, sent at the same
//!   moment, are in it; a member without a sample counts as silent): weighted average
//!   efficiency above 50 % asks for more members, below 30 % removes the worst ones
//!   (never the master): members slower than 30 % of the fastest first, then the
//!   least efficient, a cluster spending more than 25 % of its time
//!   on wide-area communication goes whole; a change is given a period to show before
//!   the next ([`AdaptConfig::min_size`], [`AdaptConfig::max_size`]:
//!   `SATIN_ADAPT_MIN_SIZE`, `SATIN_ADAPT_MAX_SIZE`, bound what it asks for). Each
//!   decision is logged at info level with its efficiency.
//! - **Acting.** Under `ipl-run --malleable` the master asks `ipl-run`'s control socket
//!   ([`ipl::launcher::control::Control`], on a short-lived thread): `add COUNT`
//!   starts processes that join as in [Malleability](#malleability); `remove RANK`
//!   (the rank of `member-RANK`) sends SIGTERM, and the member leaves gracefully.
//!   A request that fails is a warning and the coordinator is told (it stops waiting
//!   for it). Without `ipl-run --malleable` it warns once and only measures and logs.
//! - **Statistics**: [`MemberStats::adapt_added`] and [`MemberStats::adapt_removed`]
//!   (members started and removed on the master's request), printed (`ADAPT`) only when
//!   non-zero.
//!
//! # Faults
//!
//! Every fault ends the run with the right result or a clear error within a bound.
//! Crash recovery follows the journal version of Satin (orphan saving): results stay
//! where they were computed, only `(key, holder)` pairs travel, and a job's identity
//! is a digest of its type and parameters ([`satin_core::JobKey`]), so a result found
//! after a crash equals the one a crash-free run computes. The bookkeeping is
//! [`satin_core::recovery::Recovery`]; this layer feeds it and moves the bytes.
//!
//! - **Saved results.** Every member keeps the serialized result of every job it
//!   computed for another member (a bounded store, 256 MiB by default, oldest evicted
//!   first). Nothing is announced while nothing fails.
//! - **A member dies** (registry `Died`/`Left`, or a connection from or to it ends
//!   during the run: the registry is asked to check it, `maybe_dead`, and the member is
//!   treated as failed at once). Every survivor: gives the jobs the dead member had
//!   stolen from it back to its workers *marked redone*; announces to the survivors
//!   the keys of results it had returned to the dead member and of the jobs it runs
//!   that were stolen from it (*orphans*: they are finished, kept and announced, and
//!   their results are never sent to the dead owner). A worker running a redone job
//!   (and everything it spawns, also on thieves) is in *redo mode*: before running a
//!   job it looks its key up; a job whose result is announced somewhere is fetched
//!   from there instead of recomputed. Every survivor sends its announcement of a
//!   death even when it is empty (its *account*), and a lookup that finds nothing
//!   while some account is still on its way waits for it: the redo starts the moment
//!   the death is known and would otherwise race the announcements. A lookup never
//!   waits for an orphan of its own member (counted as `own_orphan_lookups`), and
//!   waits at most half a second for another member's or for the accounts (then the
//!   job is redone here): a wait in a sync runs other jobs on top of the stack, so
//!   waits could otherwise close a cycle.
//! - **The master dies** (registry `Died`; a master that *leaves* has ended its run,
//!   and a member still running then stops with an error). The survivors elect a new master (the registry clears the
//!   election of a dead winner); the winner calls the root closure of [`Pool::run`]
//!   again, in redo mode, so the root's subtree reuses every saved result, and ends the
//!   run as the master would have (it prints the result and the statistics of the
//!   survivors). A member that loses its connection to the master waits up to 8 s for
//!   the registry to report the master dead; if the registry says it is alive, the
//!   member stops with an error and the master redoes its work. The master dying
//!   after its root returned but before it told the members to exit (its `Done` came,
//!   its `Exit` did not) is a master crash too: its result is written only after the
//!   `Exit`s, so the members go back to stealing and a new master restarts the root
//!   (`SATIN_TEST_MASTER_DIES_AT_END=1` makes the first master die there, for tests).
//! - **Checkpoints** ([`SatinBuilder::checkpoint_dir`], `SATIN_CHECKPOINT_DIR`; interval
//!   [`SatinBuilder::checkpoint_interval`], `SATIN_CHECKPOINT_INTERVAL_MS`, default
//!   10 s): every member writes its saved results to `DIR/<member name>.ckpt` whenever
//!   they changed during an interval (written to a temporary file, synced, renamed: a
//!   failing write is a warning). The master of a later run on the same directory
//!   reads every `*.ckpt` (a file that does not decode is a warning and skipped),
//!   restores and announces them, and runs the root in redo mode: a run killed whole
//!   resumes with the work whose results were saved. A run that ends successfully
//!   removes its files.
//! - **Switch**: [`SatinBuilder::save_results`]`(false)` (`SATIN_SAVE_RESULTS=0`) keeps
//!   nothing and looks nothing up: lost work is recomputed from scratch (master
//!   re-election still works; the root restarts from scratch). For comparisons.
//! - **Statistics**: [`MemberStats`] counts jobs redone, orphans kept, results
//!   announced, lookups, results reused, bytes fetched, results restored, work lost
//!   (time the dead thieves held the jobs), recovery time (death noticed to the redone
//!   jobs queued and the results announced) and, on a new master, the time from the
//!   old master's death to the root's restart; printed (`RECOVERY`, `REUSE`,
//!   `RECOVERY_TIME` lines) only when something was recovered.
//! - A member that loses its registry (connection reset, heartbeats unanswered, or
//!   declared dead) stops within a fraction of a second with an error, and the others
//!   redo its work. The master instead finishes the run alone, so that the result of a
//!   run whose registry server died is not lost.
//! - Leaving the pool after the run may fail (the registry is gone): that is a warning,
//!   the result is still returned.
//!
//! Errors, warnings and the statistics name a member by its IPL name and cluster
//! (`member-2 (cluster h1)`): `member-R` with R the rank its launcher (`ipl-run`,
//! `srun`, `mpirun`, `mpiexec`) gave it, the number in `ipl-run`'s `[R]` output
//! prefix; under a cluster's launcher the cluster is the node's name. Never by the
//! node number the load balancer uses internally (join order), which a user cannot
//! see.

#![forbid(unsafe_code)]

mod checkpoint;
mod driver;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod malleable;
mod protocol;
mod saved;
mod stats;

pub use malleable::LeaveHandle;
pub use stats::{MemberStats, PoolStats};

use crate::error::SatinError;
use crate::{Satin, SatinBuilder};
use driver::{Driver, DriverInit, Input};
use ipl::{
    Ibis, IbisCapabilities as I, IbisIdentifier, PortCapabilities as P, PortType, ReadMessage,
    ReceivePort, RegistryEventHandler,
};
use satin_core::recovery::Recovery;
use satin_core::{ClusterId, NodeId, Policy, Topology};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The name of the election whose winner runs the root job.
pub const MASTER_ELECTION: &str = "satin-master";

/// The name of every member's receive port.
pub const PORT_NAME: &str = "satin";

/// What the driver asks of [`Pool::run`].
pub(crate) enum Control {
    /// This member became the master after the old one died: run the root job
    /// again, in redo mode.
    RestartRoot,
    /// The master's run is over: every member's statistics. The members exit when
    /// the user drops the [`PoolRun`].
    Ended(Box<PoolStats>),
}

/// Whether this process was started as a member of a pool (`IPL_REGISTRY` is set, as
/// `ipl-run` does, also under `ipl-run --launcher 'srun ...'`): then
/// [`SatinBuilder::build_distributed`] joins it.
///
/// A process started by a cluster's launcher (`srun`, `mpirun`, `mpiexec`: see
/// [`ipl::launcher`]) without `IPL_REGISTRY` has no registry to meet the others at: it
/// is not launched, and runs as a pool of one, with a warning saying so (once per
/// process). A launcher variable with an absurd value is warned about the same way.
pub fn launched() -> bool {
    if std::env::var("IPL_REGISTRY").is_ok_and(|v| !v.is_empty()) {
        return true;
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    match ipl::config::launcher() {
        Ok(Some(l)) if l.kind.is_external() => WARNED.call_once(|| {
            tracing::warn!(
                launcher = %l.kind,
                rank = ?l.rank,
                size = l.size,
                "started by a launcher but IPL_REGISTRY is not set: every process runs \
                 as a pool of one; start it with `ipl-run --launcher '...' -- PROGRAM` to \
                 form one pool"
            )
        }),
        Err(e) => WARNED.call_once(
            || tracing::warn!(error = %e, "launcher variables ignored; running as a pool of one"),
        ),
        _ => {}
    }
    false
}

/// Settings of the distributed layer (set them on the [`SatinBuilder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistConfig {
    /// The inter-node load-balancing policy: RS, CRS (default), ACRS or CMRS
    /// ([`SatinBuilder::policy`], environment `SATIN_POLICY`).
    pub policy: Policy,
    /// Pause after an unsuccessful synchronous steal before the next one
    /// ([`SatinBuilder::steal_backoff`], environment `SATIN_STEAL_BACKOFF_US`; default
    /// 0: retry at once, as in the papers).
    pub steal_backoff: Duration,
    /// Bound of every wait of joining: the pool closing, connecting to the others.
    pub join_timeout: Duration,
    /// Bound of every wait of the end-of-run handshake.
    pub end_timeout: Duration,
    /// Keep the results of stolen jobs and orphans, announce them when a member
    /// dies, and look them up while redoing ([`SatinBuilder::save_results`],
    /// environment `SATIN_SAVE_RESULTS`; default on). Off: a crash's lost work is
    /// recomputed from scratch (for comparisons).
    pub save_results: bool,
    /// Where to write checkpoints of the saved results, one file per member, and
    /// read them back at the start ([`SatinBuilder::checkpoint_dir`], environment
    /// `SATIN_CHECKPOINT_DIR`; default none). Needs `save_results`.
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// How often a member writes its checkpoint, if its saved results changed
    /// ([`SatinBuilder::checkpoint_interval`], environment
    /// `SATIN_CHECKPOINT_INTERVAL_MS`; default 10 s).
    pub checkpoint_interval: Duration,
    /// Self-adaptivity: measuring efficiency and growing or shrinking the pool
    /// (see [Adaptivity](#adaptivity)); off by default.
    pub adapt: AdaptConfig,
}

/// Settings of self-adaptivity (see [Adaptivity](self#adaptivity)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptConfig {
    /// Whether members measure and the master adapts ([`SatinBuilder::adaptive`],
    /// environment `SATIN_ADAPT`; default off: nothing is measured or sent).
    pub on: bool,
    /// The monitoring period ([`SatinBuilder::adapt_period`], environment
    /// `SATIN_ADAPT_PERIOD_MS`; default 2 s).
    pub period: Duration,
    /// The coordinator never removes members below this size (environment
    /// `SATIN_ADAPT_MIN_SIZE`; default 1).
    pub min_size: u32,
    /// The coordinator never asks for members beyond this size (environment
    /// `SATIN_ADAPT_MAX_SIZE`; default 64, `ipl-run`'s default `--max-processes`).
    pub max_size: u32,
}

impl Default for AdaptConfig {
    fn default() -> Self {
        let c = satin_core::adapt::Config::default();
        AdaptConfig {
            on: false,
            period: Duration::from_secs(2),
            min_size: c.min_size,
            max_size: c.max_size,
        }
    }
}

impl Default for DistConfig {
    fn default() -> Self {
        DistConfig {
            policy: Policy::Crs,
            steal_backoff: Duration::ZERO,
            join_timeout: Duration::from_secs(60),
            end_timeout: Duration::from_secs(30),
            save_results: true,
            checkpoint_dir: None,
            checkpoint_interval: Duration::from_secs(10),
            adapt: AdaptConfig::default(),
        }
    }
}

/// Parses a policy name: `rs`, `crs`, `acrs` or `cmrs:K` (any case).
pub fn parse_policy(s: &str) -> Result<Policy, SatinError> {
    let l = s.trim().to_ascii_lowercase();
    match l.as_str() {
        "rs" => Ok(Policy::Rs),
        "crs" => Ok(Policy::Crs),
        "acrs" => Ok(Policy::Acrs),
        _ => match l.strip_prefix("cmrs") {
            Some(rest) => {
                let k = rest.trim_start_matches([':', '=']);
                let credits = if k.is_empty() {
                    Ok(2)
                } else {
                    k.parse::<u32>()
                };
                credits
                    .map(|credits| Policy::Cmrs {
                        credits: credits.max(1),
                    })
                    .map_err(|_| {
                        SatinError::Config(format!("bad policy {s:?} (cmrs:K, K a number)"))
                    })
            }
            None => Err(SatinError::Config(format!(
                "unknown policy {s:?} (rs, crs, acrs, cmrs:K)"
            ))),
        },
    }
}

impl SatinBuilder {
    /// Starts the workers and joins the pool described by the environment (`ipl-run`;
    /// see [`ipl::IbisBuilder::from_env`]) with this builder's settings of the
    /// distributed layer ([`SatinBuilder::policy`], ...).
    pub fn build_distributed(self) -> Result<Pool, SatinError> {
        let (satin, config) = self.start()?;
        Pool::join(satin, config)
    }
}

fn ipl_err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> SatinError + '_ {
    move |e| SatinError::Pool(format!("{what}: {e}"))
}

/// The port type of the `satin` receive ports.
pub fn port_type() -> Result<PortType, SatinError> {
    PortType::new(
        P::CONNECTION_MANY_TO_ONE
            | P::CONNECTION_UPCALLS
            | P::RECEIVE_AUTO_UPCALLS
            | P::SERIALIZATION_OBJECT
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
    .map_err(ipl_err("port type"))
}

/// Forwards registry joins and departures to the driver.
struct Departures(mpsc::Sender<Input>);

impl RegistryEventHandler for Departures {
    fn joined(&mut self, member: &IbisIdentifier) {
        let _ = self
            .0
            .send(Input::Membership(driver::Change::Joined(member.clone())));
    }
    fn left(&mut self, member: &IbisIdentifier) {
        let _ = self
            .0
            .send(Input::Membership(driver::Change::Left(member.id().get())));
    }
    fn died(&mut self, member: &IbisIdentifier) {
        let _ = self.0.send(Input::Gone {
            member: member.id().get(),
            died: true,
        });
    }
}

/// Hands writes to shared objects to the driver, which broadcasts them.
struct SharedLink(mpsc::Sender<Input>);

impl crate::shared::Link for SharedLink {
    fn write(&self, name: &str, op: Vec<u8>) {
        let _ = self.0.send(Input::SharedWrite {
            object: name.to_string(),
            op,
        });
    }
}

/// Forwards the end of a connection from another member to the driver.
struct Links(std::sync::Mutex<mpsc::Sender<Input>>);

impl ipl::ReceivePortConnectUpcall for Links {
    fn lost_connection(
        &self,
        _port: &ipl::ReceivePortIdentifier,
        origin: &ipl::SendPortIdentifier,
        why: &ipl::Disconnect,
    ) {
        let lost = match why {
            ipl::Disconnect::Closed => false,
            ipl::Disconnect::Lost(_) => true,
            ipl::Disconnect::Local => return,
        };
        if let Ok(tx) = self.0.lock() {
            let _ = tx.send(Input::LinkLost {
                member: origin.ibis.id().get(),
                lost,
            });
        }
    }
}

/// One member of a Satin pool: the local workers, the IPL instance and the driver
/// thread that steals from and serves the other members.
///
/// Made by [`SatinBuilder::build_distributed`]; used once, by [`Pool::run`].
pub struct Pool {
    satin: Arc<Satin>,
    ibis: Option<Arc<Ibis>>,
    port: Option<ReceivePort>,
    tx: mpsc::Sender<Input>,
    control: mpsc::Receiver<Control>,
    name: String,
    driver: Option<JoinHandle<Result<(), SatinError>>>,
    node: u32,
    master: bool,
    size: usize,
    clusters: usize,
    policy: Policy,
    end_timeout: Duration,
    leave: Arc<AtomicBool>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("node", &self.node)
            .field("master", &self.master)
            .field("size", &self.size)
            .field("clusters", &self.clusters)
            .field("policy", &self.policy)
            .finish()
    }
}

/// The outcome of [`Pool::run`] on one member. On the master it keeps the pool
/// formed until it is dropped (see [`Pool::run`]).
#[derive(Debug)]
#[must_use = "on the master, dropping it ends the pool: deal with the result first"]
pub struct PoolRun<T> {
    /// The root job's result: on the master only.
    pub result: Option<T>,
    /// The time the root job took: on the master only.
    pub elapsed: Option<Duration>,
    /// Every member's statistics and the total, gathered at the end: on the master
    /// only.
    pub stats: Option<PoolStats>,
    /// This member became the master after the first one died, and restarted the
    /// root job (then `elapsed` counts from the start of [`Pool::run`]).
    pub restarted: bool,
    /// On the master: the pool, ended when this is dropped (see [`Pool::run`]).
    end: Option<Pool>,
}

impl<T> PoolRun<T> {
    /// Ends the pool now, as dropping this does (see [`Pool::run`]), and says whether
    /// it ended cleanly (dropping only logs a failure). Nothing to do on a member
    /// that is not the master.
    pub fn end(self) -> Result<(), SatinError> {
        match self.end {
            Some(mut pool) => {
                let _ = pool.tx.send(Input::Shutdown);
                pool.finish()
            }
            None => Ok(()),
        }
    }
}

impl Pool {
    /// Joins the pool of the environment with a started Satin instance.
    pub fn join(satin: Satin, config: DistConfig) -> Result<Pool, SatinError> {
        let t = port_type()?;
        let ibis = Ibis::builder()
            .capabilities(I::MEMBERSHIP | I::ELECTIONS)
            .from_env()
            .map_err(ipl_err("joining the pool"))?
            .port_type(t)
            .build()
            .map_err(ipl_err("joining the pool"))?;
        let reg = ibis.registry();
        let me = ibis.identifier().clone();
        let malleable = ibis.capabilities().contains(I::MALLEABLE);
        let master_id = if malleable {
            let initial = ipl::config::launcher()
                .ok()
                .flatten()
                .map_or(1, |l| l.size.max(1));
            malleable::meet(reg, me.id().get(), initial, config.join_timeout)?
        } else {
            reg.wait_until_pool_closed(Some(config.join_timeout))
                .map_err(ipl_err(
                    "waiting for the pool to close (is IPL_POOL_SIZE set?)",
                ))?;
            reg.elect(MASTER_ELECTION).map_err(ipl_err("election"))?
        };
        let mut members = reg.members().map_err(ipl_err("pool members"))?;
        members.sort_by_key(|m| m.id().get());
        // Node numbers are IPL member ids (see `driver::membership`).
        let number = |id: &IbisIdentifier| {
            let n = id.id().get();
            (n < driver::MAX_NODE)
                .then_some(n as u32)
                .ok_or_else(|| SatinError::Pool(format!("member number {n} is too high")))
        };
        if !members.iter().any(|m| m.id() == master_id.id()) {
            return Err(SatinError::Pool("the master is not a member".into()));
        }
        let node = number(&me)?;
        let master = number(&master_id)?;
        let slots = members
            .iter()
            .map(number)
            .try_fold(node.max(master), |a, n| n.map(|n| a.max(n)))? as usize
            + 1;
        let mut idents: Vec<Option<IbisIdentifier>> = vec![None; slots];
        for m in &members {
            idents[number(m)? as usize] = Some(m.clone());
        }
        if idents[node as usize].is_none() {
            return Err(SatinError::Pool("not a member".into()));
        }
        let mut names: Vec<&str> = members.iter().map(|m| m.cluster()).collect();
        names.sort_unstable();
        names.dedup();
        let mut topology = Topology::new();
        for m in &members {
            let c = names.iter().position(|n| *n == m.cluster()).unwrap_or(0);
            topology.insert(NodeId(number(m)?), ClusterId(c as u32));
        }

        let satin = Arc::new(satin);
        let (tx, rx) = mpsc::channel::<Input>();
        let utx = tx.clone();
        let counters = satin.clone();
        let port = ibis
            .receive_port(&t, PORT_NAME)
            .message_upcall(move |mut m: ReadMessage| {
                let t0 = Instant::now();
                let input = driver::read_message(&mut m);
                m.finish();
                counters.net_counters().deserialize_nanos.fetch_add(
                    t0.elapsed().as_nanos() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
                if let Some(i) = input {
                    let _ = utx.send(i);
                }
            })
            .connection_upcall(Links(std::sync::Mutex::new(tx.clone())))
            .create()
            .map_err(ipl_err("creating the receive port"))?;
        port.enable_connections();
        port.enable_message_upcalls()
            .map_err(ipl_err("enabling upcalls"))?;
        let mut ports = Vec::with_capacity(slots);
        let mut unreachable = Vec::new();
        for (i, m) in idents.iter().enumerate() {
            let Some(m) = m.as_ref().filter(|_| i as u32 != node) else {
                ports.push(None);
                continue;
            };
            let mut sp = ibis
                .create_send_port(&t, &format!("satin-to-{i}"))
                .map_err(ipl_err("creating a send port"))?;
            match sp.connect_to(m, PORT_NAME, config.join_timeout) {
                Ok(_) => ports.push(Some(sp)),
                Err(e) => {
                    // Died while the pool formed (or unreachable): treated as a member
                    // whose link broke, once the driver runs.
                    tracing::warn!(member = %m, error = %e, "cannot connect to a member: treating it as failed");
                    ports.push(None);
                    unreachable.push(i as u32);
                }
            }
        }
        ibis.registry()
            .set_event_handler(Departures(tx.clone()))
            .map_err(ipl_err("registry events"))?;

        let kick = Arc::new(AtomicBool::new(false));
        {
            let kick = kick.clone();
            let tx = tx.clone();
            satin.set_idle_hook(move || {
                if !kick.swap(true, Ordering::AcqRel) {
                    let _ = tx.send(Input::Kick);
                }
            });
        }
        {
            // A frame aborted children: some may be away on other members.
            let tx = tx.clone();
            satin.set_abort_hook(move || {
                let _ = tx.send(Input::Aborted);
            });
        }
        let leave = Arc::new(AtomicBool::new(false));
        if malleable {
            malleable::leave_on_sigterm(&leave)?;
        }
        let ibis = Arc::new(ibis);
        let recovery = Recovery::new(
            NodeId(node),
            // Node numbers are IPL member ids, with gaps where members left: the live
            // set is the members' numbers, not 0..n.
            members.iter().map(|m| NodeId(m.id().get() as u32)),
            NodeId(master),
            me.id().get() ^ 0x5EED_0000_0000_0021,
        );
        let saved = Arc::new(saved::Shared::new(recovery, tx.clone()));
        if config.save_results {
            satin.set_result_lookup(Arc::new(saved::SavedResults(saved.clone())));
        }
        let mut checkpoints = match (&config.checkpoint_dir, config.save_results) {
            (Some(dir), true) => Some(checkpoint::Checkpoints::new(
                dir,
                me.name(),
                config.checkpoint_interval,
            )),
            (Some(_), false) => {
                tracing::warn!(
                    "checkpoints need saved results (SATIN_SAVE_RESULTS=0): none written"
                );
                None
            }
            _ => None,
        };
        if node == master {
            if let Some(c) = &mut checkpoints {
                let entries = c.read_all();
                if !entries.is_empty() {
                    tracing::info!(results = entries.len(), "resuming from checkpoints");
                    saved.with(|r| r.restore(entries));
                    // The root's subtree looks up every restored result.
                    satin.set_redo_roots(true);
                }
            }
        }
        let (control, control_rx) = mpsc::channel();
        let init = DriverInit {
            me: node,
            master,
            members: idents
                .iter()
                .enumerate()
                .map(|(i, m)| match m {
                    Some(m) => (m.id().get(), m.name().to_string(), m.cluster().to_string()),
                    None => (i as u64, String::new(), String::new()),
                })
                .collect(),
            topology,
            config: config.clone(),
            seed: me.id().get() ^ 0x5A71_0000_0000_0001,
            ports,
            idents,
            ibis: ibis.clone(),
            satin: satin.clone(),
            rx,
            tx: tx.clone(),
            kick,
            saved,
            checkpoints,
            control,
            unreachable,
            leave: leave.clone(),
        };
        let driver = Driver::new(init)?;
        // Writes to shared objects are broadcast by the driver from now on.
        crate::shared::attach(Arc::new(SharedLink(tx.clone())));
        let handle = std::thread::Builder::new()
            .name("satin-driver".into())
            .spawn(move || driver.run())
            .map_err(|e| SatinError::Spawn(e.to_string()))?;
        Ok(Pool {
            satin,
            ibis: Some(ibis),
            port: Some(port),
            tx,
            control: control_rx,
            name: me.name().to_string(),
            driver: Some(handle),
            node,
            master: node == master,
            size: members.len(),
            clusters: names.len(),
            policy: config.policy,
            end_timeout: config.end_timeout,
            leave,
        })
    }

    /// Whether this member is the master (runs the root job, prints the results).
    pub fn is_master(&self) -> bool {
        self.master
    }

    /// This member's IPL name (`member-R`, R the rank its launcher gave it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This member's node number: its IPL member id (members numbered in join order
    /// from 0, never reused).
    pub fn node(&self) -> u32 {
        self.node
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Number of clusters.
    pub fn clusters(&self) -> usize {
        self.clusters
    }

    /// The load-balancing policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// A handle that asks this member to leave the pool gracefully while it runs (as
    /// SIGTERM does in a malleable pool): see "Malleability" in [`crate::dist`].
    pub fn leave_handle(&self) -> LeaveHandle {
        LeaveHandle(self.leave.clone())
    }

    /// The local Satin instance (its workers and statistics).
    pub fn satin(&self) -> &Satin {
        &self.satin
    }

    /// Runs the program: on the master `root` is called with the local instance (it
    /// should `run` the root job there) while the other members steal; on the others it
    /// is not called and this returns when the master ends the run, or when the member
    /// left gracefully ([`Pool::leave_handle`], SIGTERM in a malleable pool; no result
    /// either way), and the member has left the pool.
    ///
    /// On the master this returns once every member reported, with the pool still
    /// formed: the members are told to exit, and the master leaves, when the returned
    /// [`PoolRun`] is dropped (or [`PoolRun::end`]ed). Deal with the result first
    /// (print it, store it): a master that dies before is replaced and the root
    /// restarted elsewhere, so the result is not lost with it. The members wait at most
    /// [`DistConfig::end_timeout`] after the root returned, then leave (with a
    /// warning). A process that ends without dropping the `PoolRun`
    /// (`std::process::exit`, `mem::forget`) looks like a dead master: another member
    /// restarts the root and delivers the result again; call [`PoolRun::end`] first. A
    /// `PoolRun` used as a temporary (`pool.run(..)?.result`) ends the pool at once. A
    /// failure to leave (the registry is gone) is logged as a warning and does not lose
    /// the run's result. A panic in `root` is returned as [`SatinError::JobPanicked`]
    /// (after the pool ended cleanly).
    ///
    /// Every member keeps `root`: if the master dies, the member elected in its place
    /// calls it (in redo mode, so the saved results of the lost run are looked up
    /// instead of recomputed) and ends the run as the master would have; its
    /// [`PoolRun`] then has the result and [`PoolRun::restarted`] set. Also the
    /// master of a run that resumes from checkpoints runs `root` in redo mode.
    pub fn run<T>(mut self, root: impl Fn(&Satin) -> T) -> Result<PoolRun<T>, SatinError> {
        let start = Instant::now();
        let mut result = None;
        let mut elapsed = None;
        let mut failure = None;
        let mut restarted = false;
        let mut go = |pool: &Pool, t0: Instant| {
            match panic::catch_unwind(AssertUnwindSafe(|| root(&pool.satin))) {
                Ok(v) => result = Some(v),
                Err(p) => failure = Some(SatinError::from_panic(p)),
            }
            elapsed = Some(t0.elapsed());
            let _ = pool.tx.send(Input::RootDone);
        };
        if self.master {
            go(&self, Instant::now());
        }
        // Until the master's run is over, or the driver ends (it drops its end of
        // the channel).
        let mut ended = None;
        while let Ok(c) = self.control.recv() {
            match c {
                Control::RestartRoot => {
                    restarted = true;
                    self.master = true;
                    self.satin.set_redo_roots(true);
                    go(&self, start);
                }
                Control::Ended(stats) => {
                    ended = Some(*stats);
                    break;
                }
            }
        }
        if let Some(stats) = ended {
            if let Some(e) = failure {
                return Err(e); // the pool ends here (dropped)
            }
            return Ok(PoolRun {
                result,
                elapsed,
                stats: Some(stats),
                restarted,
                end: Some(self),
            });
        }
        self.finish()?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(PoolRun {
            result,
            elapsed,
            stats: None,
            restarted,
            end: None,
        })
    }

    /// Waits for the driver, then leaves the pool.
    fn finish(&mut self) -> Result<(), SatinError> {
        let r = match self.driver.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(SatinError::Pool("the driver thread panicked".into()))),
            None => Ok(()),
        };
        crate::shared::detach();
        if let Some(p) = self.port.take() {
            // After a clean end the others disconnect at once; after a failure (this
            // member lost the registry, or was cut off) they may never reach it: no
            // wait then.
            let wait = if r.is_ok() {
                self.end_timeout.min(Duration::from_secs(5))
            } else {
                Duration::ZERO
            };
            p.close(Some(wait));
        }
        if let Some(ibis) = self.ibis.take() {
            // The driver, the only other owner, has ended.
            match Arc::try_unwrap(ibis) {
                Ok(ibis) => {
                    if let Err(e) = ibis.end() {
                        // The run is over: a failing goodbye (the registry is gone, or
                        // declared this member dead) must not lose its result.
                        tracing::warn!(error = %e, "leaving the pool failed after the run");
                    }
                }
                Err(_) => tracing::warn!("the IPL instance is still shared: not leaving"),
            }
        }
        r
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.driver.is_some() {
            let _ = self.tx.send(Input::Shutdown);
            if let Err(e) = self.finish() {
                tracing::warn!(error = %e, "ending the pool");
            }
        }
    }
}
