//! Self-adaptivity: the coordinator that grows and shrinks a run, sans-IO.
//!
//! The journal version of Satin adds a *coordinator*: every member measures,
//! over each monitoring period, how much of its time it spent idle or
//! communicating, and the coordinator turns those measurements into requests to
//! add or remove members, or to drop a whole cluster whose wide-area link makes
//! it a burden. It uses no performance model: only the **weighted average
//! efficiency** of the previous period,
//!
//! ```text
//! wa_efficiency = (1/n) Σ speed_i · (1 − overhead_i),   overhead_i = (idle_i + comm_i) / period_i
//! ```
//!
//! where `speed_i` is member `i`'s speed relative to the fastest member (a
//! benchmark's result, 1.0 for the fastest), and keeps it between
//! [`Config::e_min`] (30 %) and [`Config::e_max`] (50 %).
//!
//! [`Coordinator`] holds that state and applies those rules. Like
//! [`Node`](crate::Node) it owns no threads, sockets or clocks: the driver feeds
//! it [`Sample`]s and membership changes as they come, calls
//! [`end_period`](Coordinator::end_period) once per monitoring period (the
//! journal's example period is 10 minutes) and carries out the [`Decision`]
//! (through `ipl-run`'s control socket, a cluster scheduler, ...). Given the
//! same calls it gives the same decisions; it has no random choices at all
//! (ties are broken by [`NodeId`] and [`ClusterId`]).
//!
//! # Events
//!
//! | the driver sees | it calls |
//! |---|---|
//! | a member's measurements for (part of) a period | [`sample`](Coordinator::sample) |
//! | a member joined (requested or not) | [`join`](Coordinator::join) |
//! | a member left, crashed, or was removed | [`leave`](Coordinator::leave) |
//! | members it was asked to add could not be started | [`add_failed`](Coordinator::add_failed) |
//! | a member it was asked to remove could not be stopped | [`remove_failed`](Coordinator::remove_failed) |
//! | a new master was elected | [`set_master`](Coordinator::set_master) |
//! | the monitoring period is over | [`end_period`](Coordinator::end_period), which returns the [`Decision`] |
//!
//! # The rules, in order, at the end of each period
//!
//! | # | condition | decision | [`Reason`] |
//! |---|---|---|---|
//! | 1 | a change asked for is still under way, or fewer than [`Config::cooldown_periods`] whole periods were measured since the pool settled | [`Decision::Keep`] | [`Reason::CoolingDown`] |
//! | 2 | no member was measured this period | [`Decision::Keep`] | [`Reason::NoMeasurements`] |
//! | 3 | a cluster other than the master's spends more than [`Config::cluster_overhead_max`] of its time in wide-area communication, and the pool keeps [`Config::min_size`] members without it | [`Decision::RemoveCluster`] (the worst such cluster) | [`Reason::WideAreaOverhead`] |
//! | 4 | `wa_efficiency > e_max` | [`Decision::Add`] `{ count: ⌈n · (E − e_max) / (1 − e_max)⌉ }`, at least 1, bounded by [`Config::max_size`] | [`Reason::Efficient`] ([`Reason::AtMaxSize`] and `Keep` if there is no room) |
//! | 5 | `wa_efficiency < e_min` | [`Decision::Remove`] of the `⌈n · (e_min − E) / e_min⌉` least efficient members (at least 1), never the master, never below [`Config::min_size`] | [`Reason::Inefficient`] ([`Reason::AtMinSize`] and `Keep` if none may go) |
//! | 6 | otherwise | [`Decision::Keep`] | [`Reason::InBand`] |
//!
//! (`E` is the period's `wa_efficiency`, `n` the number of members measured.)
//!
//! **Step sizes.** The journal says only "the higher the efficiency, the more
//! are added" (and the lower, the more removed). The formulas above scale the
//! step by how far the efficiency is beyond the threshold, relative to the room
//! beyond it: at 100 % efficiency the pool doubles (like slow start: every
//! member is busy all the time, so there is at least as much parallelism as
//! members), just above 50 % it grows by one; at 0 % every member but
//! [`Config::min_size`] goes (nobody does useful work), just below 30 % one goes.
//!
//! **Which members go** (the journal's "worst" ones, "taking their overheads
//! and speeds into account"): first the members slower than [`Config::e_min`]
//! relative to the fastest, then the others; within each group the least
//! efficient by `speed · (1 − overhead)` first, ties broken by the higher
//! [`NodeId`] (usually the newer member). The master never goes, nor does its
//! cluster. Why slow members first: a member whose speed is below `e_min`
//! stays below `e_min` even with no overhead at all, so it is a bad processor
//! whatever the work, while an idle member's overhead depends on the work
//! there is; and when a slow member holds jobs the others wait for (the
//! journal's overloaded processors), the fast ones run dry and are *less*
//! efficient than it by the formula, although it is the cause.
//!
//! **Why the cluster threshold is 25 %.** The papers leave it open. A healthy
//! wide-area run of the journal (5 clusters, 576 cores) reaches 72–82 %
//! efficiency, so *all* its overhead, local and wide-area, is at most ~28 %, and
//! the 960-core Grid'5000 run lost 15 % to deployment and communication
//! together. A cluster that spends more than a quarter of its time on
//! wide-area communication alone is therefore well beyond what a working
//! wide-area link costs; the journal's overloaded link (100 KB/s) pushed the
//! whole pool to 25 % efficiency, i.e. ~75 % overhead, far beyond it. The rule
//! comes before the efficiency rules, as in the journal's experiment where the
//! badly connected cluster was dropped after the first period rather than
//! single members. It needs at least two clusters (with one, wide-area
//! communication goes nowhere else), and the master's cluster is never dropped
//! (its link is every cluster's link to the master).
//!
//! # Measurements
//!
//! * A member's **samples within one period are added up** (a driver may send
//!   several, or one arrives late from the previous period); its latest valid
//!   speed is used.
//! * The period of a sample is `max(period_ns, busy_ns + idle_ns + comm_ns)`:
//!   when a member's clock and its accounting disagree, the accounting wins, so
//!   an overhead is always within 0..=1. Such a sample is counted in
//!   [`AdaptStats::clamped`], as is an `inter_comm_ns` larger than `comm_ns`
//!   (taken as `comm_ns`) and a speed outside `0.0..=1.0` (clamped) or not a
//!   number (the member's previous speed, at first 1.0).
//! * A sample with `period_ns == 0`, or from a node that is not a member (never
//!   joined, or left), is ignored ([`AdaptStats::invalid`],
//!   [`AdaptStats::ignored`]).
//! * **Members that joined during a period** are not measured in it (their
//!   first period is start-up: stealing their first work), nor are members
//!   asked to leave ([`Decision::Remove`], [`Decision::RemoveCluster`]) until
//!   they have left (or [`remove_failed`](Coordinator::remove_failed) says they
//!   stay). **Members that left during a period** are forgotten, with their
//!   samples.
//! * **A member that sent no sample in a period** is judged by its previous
//!   period's numbers if it sent some then (a report may simply be late: it
//!   then counts in the next period, [`AdaptStats::stale`]); otherwise it counts
//!   as all overhead, efficiency 0 ([`AdaptStats::silent`]): the coordinator
//!   cannot tell a silent member from a stuck one, and a member that cannot
//!   send a few bytes per period (an overloaded CPU, a saturated link) is the
//!   first one that should go.
//!
//! # Cool-down
//!
//! After a decision other than `Keep`, its effect must show before the next
//! one: the coordinator waits until every member it asked for has joined (or
//! [`add_failed`](Coordinator::add_failed)) and every member it asked to remove
//! has left (or [`remove_failed`](Coordinator::remove_failed)), and then for
//! [`Config::cooldown_periods`] whole periods that began with the pool settled;
//! it decides at the end of the last of them, on its measurements. With the
//! default (1) and a launcher that starts members within a period, that skips
//! exactly one period, the one in which the change happened. **The driver must
//! report the outcome of every change it was asked for**, or the coordinator
//! keeps waiting (and says so: [`Reason::CoolingDown`]).
//!
//! Pool-size bounds count members asked for but not yet joined (so
//! [`Config::max_size`] holds even if they join late) and not members asked to
//! leave (so [`Config::min_size`] holds even if they all leave). Joins nobody
//! asked for (a user adding members, a restart) are accepted; the bounds only
//! limit what the coordinator asks for.
//!
//! # Robustness
//!
//! No call panics, whatever the numbers (NaN, infinities, zeros, `u64::MAX`).
//! Memory is one small record per member (at most [`MAX_MEMBERS`]; further
//! joins are ignored and counted) plus the last [`PeriodReport`]: samples are
//! added up, never queued.
//!
//! # Example
//!
//! ```
//! use satin_core::adapt::{Config, Coordinator, Decision, Reason, Sample};
//! use satin_core::{ClusterId, NodeId};
//!
//! const PERIOD: u64 = 1_000_000_000;
//! let config = Config { max_size: 8, ..Config::default() };
//! // Master 0; members 0, 1 in cluster 0 and 2, 3 in cluster 1.
//! let members = [(0, 0), (1, 0), (2, 1), (3, 1)].map(|(n, c)| (NodeId(n), ClusterId(c)));
//! let mut coordinator = Coordinator::new(config, NodeId(0), members).unwrap();
//!
//! // Every member busy 90 % of the period: wa_efficiency 0.9 > 0.5.
//! for (node, cluster) in members {
//!     let mut s = Sample::new(node, cluster, PERIOD);
//!     s.busy_ns = 900_000_000;
//!     s.idle_ns = 100_000_000;
//!     coordinator.sample(s);
//! }
//! // Add ⌈4 · (0.9 − 0.5) / 0.5⌉ = ⌈3.2⌉ = 4 members.
//! assert_eq!(coordinator.end_period(), Decision::Add { count: 4 });
//! assert_eq!(coordinator.report().unwrap().reason, Reason::Efficient);
//!
//! // They join during the next period, which is therefore not judged.
//! for n in 4..8 {
//!     coordinator.join(NodeId(n), ClusterId(n % 2));
//! }
//! assert_eq!(coordinator.end_period(), Decision::Keep);
//! assert_eq!(coordinator.report().unwrap().reason, Reason::CoolingDown);
//!
//! // A whole period of 8: member 5 is starved (idle 95 %), member 6 silent;
//! // the others busy 40 %. wa_efficiency = (6 · 0.4 + 0.05 + 0) / 8 ≈ 0.31: in band.
//! for n in 0..8 {
//!     if n == 6 {
//!         continue;
//!     }
//!     let mut s = Sample::new(NodeId(n), ClusterId(n % 2), PERIOD);
//!     s.busy_ns = if n == 5 { 50_000_000 } else { 400_000_000 };
//!     s.idle_ns = PERIOD - s.busy_ns;
//!     coordinator.sample(s);
//! }
//! assert_eq!(coordinator.end_period(), Decision::Keep);
//! assert_eq!(coordinator.report().unwrap().reason, Reason::InBand);
//! assert_eq!(coordinator.stats().silent, 1);
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::topology::{ClusterId, NodeId};

/// The most members a [`Coordinator`] tracks; further joins are ignored and
/// counted in [`AdaptStats::ignored`]. Far more than any pool `ipl-run` starts
/// (at most 1024), and it bounds the coordinator's memory whatever its driver
/// does.
pub const MAX_MEMBERS: usize = 1 << 16;

/// One member's measurements over (part of) one monitoring period.
///
/// Times are nanoseconds of the member's own clock; they need not add up
/// exactly (see the [module documentation](self#measurements)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The member.
    pub node: NodeId,
    /// Its cluster (the one given to [`Coordinator::join`] wins if they differ;
    /// counted in [`AdaptStats::cluster_mismatch`]).
    pub cluster: ClusterId,
    /// How long the measurement lasted.
    pub period_ns: u64,
    /// Time spent on useful work (running jobs).
    pub busy_ns: u64,
    /// Time spent idle (no work, not waiting for a steal reply).
    pub idle_ns: u64,
    /// Time spent communicating: waiting for steal replies, sending and
    /// receiving jobs and results.
    pub comm_ns: u64,
    /// The wide-area part of [`comm_ns`](Self::comm_ns): communication with
    /// members of other clusters.
    pub inter_comm_ns: u64,
    /// Speed relative to the fastest member, from a benchmark: 1.0 for the
    /// fastest (the default), 0.5 for one half as fast.
    pub speed: f64,
}

impl Sample {
    /// A sample of `node` in `cluster` over `period_ns`, all times 0, speed 1.0;
    /// set the times with the public fields.
    pub fn new(node: NodeId, cluster: ClusterId, period_ns: u64) -> Self {
        Self {
            node,
            cluster,
            period_ns,
            busy_ns: 0,
            idle_ns: 0,
            comm_ns: 0,
            inter_comm_ns: 0,
            speed: 1.0,
        }
    }
}

/// What the coordinator asks for at the end of a period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Nothing to change.
    Keep,
    /// Start `count` more members (at least 1).
    Add {
        /// How many.
        count: u32,
    },
    /// Stop these members, least efficient first (never the master, never empty).
    Remove {
        /// The members, in the order they should go.
        nodes: Vec<NodeId>,
    },
    /// Stop every member of `cluster` (never the master's): its wide-area
    /// overhead is above [`Config::cluster_overhead_max`].
    RemoveCluster {
        /// The cluster.
        cluster: ClusterId,
        /// Its members, in [`NodeId`] order (what the driver must stop).
        nodes: Vec<NodeId>,
    },
}

/// Why [`Coordinator::end_period`] decided what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// A change asked for earlier has not shown its effect yet (rule 1).
    CoolingDown,
    /// No member was measured this period (rule 2).
    NoMeasurements,
    /// A cluster's wide-area overhead is above the threshold (rule 3).
    WideAreaOverhead,
    /// Efficiency above [`Config::e_max`]: members added (rule 4).
    Efficient,
    /// Efficiency above [`Config::e_max`], but the pool is at [`Config::max_size`].
    AtMaxSize,
    /// Efficiency below [`Config::e_min`]: members removed (rule 5).
    Inefficient,
    /// Efficiency below [`Config::e_min`], but no member may go (the pool is at
    /// [`Config::min_size`], or only the master was measured).
    AtMinSize,
    /// Efficiency within `[e_min, e_max]` (rule 6).
    InBand,
}

/// What the coordinator saw and decided at the end of one period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeriodReport {
    /// The period's number, from 0.
    pub period: u64,
    /// The weighted average efficiency of the members measured, `None` if none
    /// was (or the coordinator was cooling down and did not compute it).
    pub efficiency: Option<f64>,
    /// Members measured (the `n` of the formula).
    pub measured: u32,
    /// Of those, members judged by the previous period's numbers.
    pub stale: u32,
    /// Of those, members that sent nothing and counted as efficiency 0.
    pub silent: u32,
    /// Members not measured because they joined during the period.
    pub joined: u32,
    /// Each cluster's wide-area overhead (share of its members' time spent in
    /// wide-area communication), in [`ClusterId`] order; clusters with no
    /// measured member are left out.
    pub clusters: Vec<(ClusterId, f64)>,
    /// Why.
    pub reason: Reason,
    /// What.
    pub decision: Decision,
}

/// The coordinator's thresholds and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Below this weighted average efficiency members are removed (default
    /// 0.30, the journal's E_min).
    pub e_min: f64,
    /// Above this one members are added (default 0.50, the journal's E_max).
    pub e_max: f64,
    /// The coordinator never asks to go below this many members (default 1;
    /// at least 1: the master always stays).
    pub min_size: u32,
    /// The coordinator never asks to go above this many members, counting
    /// those asked for and not yet joined (default 64, `ipl-run`'s default
    /// `--max-processes`).
    pub max_size: u32,
    /// A cluster whose members spend more than this share of their time in
    /// wide-area communication is dropped (default 0.25; why: see the
    /// [module documentation](self#the-rules-in-order-at-the-end-of-each-period)).
    pub cluster_overhead_max: f64,
    /// Whole, settled periods observed after a change before the next decision
    /// (default 1; 0 decides every period, even while a change is under way).
    pub cooldown_periods: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            e_min: 0.30,
            e_max: 0.50,
            min_size: 1,
            max_size: 64,
            cluster_overhead_max: 0.25,
            cooldown_periods: 1,
        }
    }
}

/// A [`Config`] the coordinator cannot work with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The efficiency thresholds are not `0 <= e_min <= e_max <= 1`.
    #[error("efficiency thresholds must satisfy 0 <= e_min <= e_max <= 1 (got e_min {e_min}, e_max {e_max})")]
    Thresholds {
        /// [`Config::e_min`].
        e_min: f64,
        /// [`Config::e_max`].
        e_max: f64,
    },
    /// The size bounds are not `1 <= min_size <= max_size`.
    #[error(
        "pool size bounds must satisfy 1 <= min_size <= max_size (got {min_size} and {max_size})"
    )]
    Sizes {
        /// [`Config::min_size`].
        min_size: u32,
        /// [`Config::max_size`].
        max_size: u32,
    },
    /// The cluster threshold is not within `0 < t <= 1`.
    #[error("cluster_overhead_max must be within 0 < t <= 1 (got {0})")]
    ClusterOverhead(f64),
}

impl Config {
    /// Checks the thresholds and bounds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        if !(unit(self.e_min) && unit(self.e_max) && self.e_min <= self.e_max) {
            return Err(ConfigError::Thresholds {
                e_min: self.e_min,
                e_max: self.e_max,
            });
        }
        if self.min_size == 0 || self.min_size > self.max_size {
            return Err(ConfigError::Sizes {
                min_size: self.min_size,
                max_size: self.max_size,
            });
        }
        if !(self.cluster_overhead_max > 0.0 && self.cluster_overhead_max <= 1.0) {
            return Err(ConfigError::ClusterOverhead(self.cluster_overhead_max));
        }
        Ok(())
    }
}

/// Counters of a [`Coordinator`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptStats {
    /// Periods ended.
    pub periods: u64,
    /// Samples taken into account.
    pub samples: u64,
    /// Samples of nodes that are not members, duplicate joins, leaves of
    /// non-members, joins beyond [`MAX_MEMBERS`], failures nobody asked about.
    pub ignored: u64,
    /// Samples with a zero period (ignored).
    pub invalid: u64,
    /// Samples with a value corrected: times adding up to more than the period,
    /// wide-area time above the communication time, speed out of range or NaN.
    pub clamped: u64,
    /// Samples whose cluster differs from the member's.
    pub cluster_mismatch: u64,
    /// Member-periods judged by the previous period's numbers.
    pub stale: u64,
    /// Member-periods without any numbers (counted as efficiency 0).
    pub silent: u64,
    /// Periods that ended in [`Reason::CoolingDown`].
    pub cooling_periods: u64,
    /// [`Decision::Add`]s.
    pub adds: u64,
    /// Members asked for in them.
    pub added: u64,
    /// [`Decision::Remove`]s.
    pub removes: u64,
    /// Members asked to go in them.
    pub removed: u64,
    /// [`Decision::RemoveCluster`]s.
    pub clusters_removed: u64,
}

/// Measurements added up over a period.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    period: u64,
    busy: u64,
    idle: u64,
    comm: u64,
    inter: u64,
}

impl Acc {
    fn add(&mut self, o: &Acc) {
        self.period = self.period.saturating_add(o.period);
        self.busy = self.busy.saturating_add(o.busy);
        self.idle = self.idle.saturating_add(o.idle);
        self.comm = self.comm.saturating_add(o.comm);
        self.inter = self.inter.saturating_add(o.inter);
    }

    /// The time the shares are taken of: never 0 for an accepted sample.
    fn total(&self) -> u64 {
        self.period.max(
            self.busy
                .saturating_add(self.idle)
                .saturating_add(self.comm),
        )
    }

    /// `(idle + comm) / total`, within 0..=1.
    fn overhead(&self) -> f64 {
        share(self.idle.saturating_add(self.comm), self.total())
    }
}

/// `⌈x⌉`, but a value within 1e-9 above an integer is that integer: 4 members
/// at 70 % efficiency ask for ⌈4.0⌉ = 4 more, not 5 because the sum of the
/// shares came out as 0.7000000000000001.
fn ceil(x: f64) -> f64 {
    (x - 1e-9).ceil()
}

/// `part / whole` within 0..=1 (0 for an empty whole).
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 / whole as f64).clamp(0.0, 1.0)
}

#[derive(Debug, Clone)]
struct Member {
    cluster: ClusterId,
    /// Present since the start of the current period.
    whole_period: bool,
    /// Asked to leave; not yet gone.
    leaving: bool,
    /// This period's samples, if any.
    now: Option<Acc>,
    /// The previous period's, if any.
    last: Option<Acc>,
    /// The latest valid speed (1.0 until one arrives).
    speed: f64,
}

/// How one member is judged this period.
struct Judged {
    node: NodeId,
    cluster: ClusterId,
    efficiency: f64,
    /// Its speed relative to the fastest member.
    speed: f64,
    /// Wide-area time and total time, if it has numbers.
    inter: Option<(u64, u64)>,
}

/// The adaptivity coordinator: see the [module documentation](self).
#[derive(Debug, Clone)]
pub struct Coordinator {
    config: Config,
    master: NodeId,
    members: BTreeMap<NodeId, Member>,
    /// Members asked for and not joined yet.
    pending_joins: u32,
    /// Settled periods still to observe before the next decision.
    cooldown_left: u32,
    /// Whether no change asked for was under way when this period began.
    settled_at_start: bool,
    period: u64,
    report: Option<PeriodReport>,
    stats: AdaptStats,
}

impl Coordinator {
    /// A coordinator for a pool whose master is `master` and whose members at
    /// the start of the first period are `members` (node, cluster). Fails if
    /// `config` does not [`validate`](Config::validate).
    pub fn new(
        config: Config,
        master: NodeId,
        members: impl IntoIterator<Item = (NodeId, ClusterId)>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut c = Self {
            config,
            master,
            members: BTreeMap::new(),
            pending_joins: 0,
            cooldown_left: 0,
            settled_at_start: true,
            period: 0,
            report: None,
            stats: AdaptStats::default(),
        };
        for (node, cluster) in members {
            c.join(node, cluster);
            if let Some(m) = c.members.get_mut(&node) {
                m.whole_period = true;
            }
        }
        Ok(c)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The master (never removed).
    pub fn master(&self) -> NodeId {
        self.master
    }

    /// A new master was elected (the old one is no longer protected).
    pub fn set_master(&mut self, node: NodeId) {
        self.master = node;
        // Asked to leave before it became master: it stays now.
        if let Some(m) = self.members.get_mut(&node) {
            m.leaving = false;
        }
    }

    /// The members, with their clusters and whether they were asked to leave,
    /// in [`NodeId`] order.
    pub fn members(&self) -> impl Iterator<Item = (NodeId, ClusterId, bool)> + '_ {
        self.members.iter().map(|(&n, m)| (n, m.cluster, m.leaving))
    }

    /// Number of members (those asked to leave included, until they left).
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Members asked for and not joined (nor reported failed) yet.
    pub fn pending_joins(&self) -> u32 {
        self.pending_joins
    }

    /// The number of the current period, from 0.
    pub fn period(&self) -> u64 {
        self.period
    }

    /// What happened at the end of the last period.
    pub fn report(&self) -> Option<&PeriodReport> {
        self.report.as_ref()
    }

    /// The counters.
    pub fn stats(&self) -> AdaptStats {
        self.stats
    }

    /// `node` joined in `cluster` (now, during the current period: it is
    /// measured from the next one). Counts against the members asked for, if
    /// any.
    pub fn join(&mut self, node: NodeId, cluster: ClusterId) {
        if self.members.contains_key(&node) || self.members.len() >= MAX_MEMBERS {
            self.stats.ignored += 1;
            return;
        }
        self.pending_joins = self.pending_joins.saturating_sub(1);
        self.members.insert(
            node,
            Member {
                cluster,
                whole_period: false,
                leaving: false,
                now: None,
                last: None,
                speed: 1.0,
            },
        );
    }

    /// `node` left (gracefully, removed, or crashed): it is forgotten with its
    /// samples. The master may leave too (then call
    /// [`set_master`](Self::set_master) once a new one is elected).
    pub fn leave(&mut self, node: NodeId) {
        if self.members.remove(&node).is_none() {
            self.stats.ignored += 1;
        }
    }

    /// `count` of the members asked for ([`Decision::Add`]) could not be
    /// started: they are no longer waited for.
    pub fn add_failed(&mut self, count: u32) {
        if count > self.pending_joins {
            self.stats.ignored += 1;
        }
        self.pending_joins = self.pending_joins.saturating_sub(count);
    }

    /// `node`, asked to leave, could not be stopped: it is a member like the
    /// others again.
    pub fn remove_failed(&mut self, node: NodeId) {
        match self.members.get_mut(&node) {
            Some(m) if m.leaving => m.leaving = false,
            _ => self.stats.ignored += 1,
        }
    }

    /// Takes one member's measurements into account (see the
    /// [module documentation](self#measurements) for what is corrected and
    /// what is ignored).
    pub fn sample(&mut self, s: Sample) {
        let Some(m) = self.members.get_mut(&s.node) else {
            self.stats.ignored += 1;
            return;
        };
        if s.period_ns == 0 {
            self.stats.invalid += 1;
            return;
        }
        self.stats.samples += 1;
        if s.cluster != m.cluster {
            self.stats.cluster_mismatch += 1;
        }
        let mut clamped = false;
        if s.speed.is_nan() {
            clamped = true;
        } else {
            let speed = s.speed.clamp(0.0, 1.0);
            clamped |= speed != s.speed;
            m.speed = speed;
        }
        let acc = Acc {
            period: s.period_ns,
            busy: s.busy_ns,
            idle: s.idle_ns,
            comm: s.comm_ns,
            inter: s.inter_comm_ns.min(s.comm_ns),
        };
        clamped |= s.inter_comm_ns > s.comm_ns;
        clamped |= acc.total() > s.period_ns;
        if clamped {
            self.stats.clamped += 1;
        }
        m.now.get_or_insert_with(Acc::default).add(&acc);
    }

    /// Whether no change asked for is under way.
    fn settled(&self) -> bool {
        self.pending_joins == 0 && !self.members.values().any(|m| m.leaving)
    }

    /// The monitoring period is over: judges it, starts the next one, and
    /// returns what to do (also in [`report`](Self::report)).
    pub fn end_period(&mut self) -> Decision {
        let settled = self.settled();
        if self.cooldown_left > 0 && self.settled_at_start && settled {
            self.cooldown_left -= 1;
        }
        let waiting = self.cooldown_left > 0 || (self.config.cooldown_periods > 0 && !settled);
        let report = if waiting {
            self.stats.cooling_periods += 1;
            PeriodReport {
                period: self.period,
                efficiency: None,
                measured: 0,
                stale: 0,
                silent: 0,
                joined: self.members.values().filter(|m| !m.whole_period).count() as u32,
                clusters: Vec::new(),
                reason: Reason::CoolingDown,
                decision: Decision::Keep,
            }
        } else {
            self.judge()
        };
        self.apply(&report.decision);
        // The next period.
        for m in self.members.values_mut() {
            m.last = m.now.take();
            m.whole_period = true;
        }
        self.period += 1;
        self.stats.periods += 1;
        self.settled_at_start = self.settled();
        let decision = report.decision.clone();
        self.report = Some(report);
        decision
    }

    /// Rules 2 to 6 on this period's measurements.
    fn judge(&mut self) -> PeriodReport {
        let mut judged = Vec::new();
        let (mut stale, mut silent, mut joined) = (0u32, 0u32, 0u32);
        for (&node, m) in &self.members {
            if !m.whole_period {
                joined += 1;
                continue;
            }
            if m.leaving {
                continue;
            }
            let numbers = match (m.now, m.last) {
                (Some(a), _) => Some(a),
                (None, Some(a)) => {
                    stale += 1;
                    Some(a)
                }
                (None, None) => {
                    silent += 1;
                    None
                }
            };
            judged.push(Judged {
                node,
                cluster: m.cluster,
                efficiency: numbers.map_or(0.0, |a| m.speed * (1.0 - a.overhead())),
                speed: m.speed,
                inter: numbers.map(|a| (a.inter, a.total())),
            });
        }
        self.stats.stale += u64::from(stale);
        self.stats.silent += u64::from(silent);
        let n = judged.len();
        let mut report = PeriodReport {
            period: self.period,
            efficiency: None,
            measured: n as u32,
            stale,
            silent,
            joined,
            clusters: Vec::new(),
            reason: Reason::NoMeasurements,
            decision: Decision::Keep,
        };
        if n == 0 {
            return report;
        }
        let e = (judged.iter().map(|j| j.efficiency).sum::<f64>() / n as f64).clamp(0.0, 1.0);
        report.efficiency = Some(e);

        // Each cluster's wide-area overhead.
        let mut per_cluster: BTreeMap<ClusterId, (u64, u64)> = BTreeMap::new();
        for j in &judged {
            if let Some((inter, total)) = j.inter {
                let c = per_cluster.entry(j.cluster).or_default();
                c.0 = c.0.saturating_add(inter);
                c.1 = c.1.saturating_add(total);
            }
        }
        report.clusters = per_cluster
            .iter()
            .map(|(&c, &(inter, total))| (c, share(inter, total)))
            .collect();

        // Rule 3: the worst cluster beyond the threshold that may go.
        let staying = self.members.values().filter(|m| !m.leaving).count();
        let master_cluster = self.members.get(&self.master).map(|m| m.cluster);
        let mut clusters: Vec<ClusterId> = self.members.values().map(|m| m.cluster).collect();
        clusters.sort_unstable();
        clusters.dedup();
        if clusters.len() >= 2 {
            let mut worst: Option<(ClusterId, f64)> = None;
            for &(c, overhead) in &report.clusters {
                if Some(c) == master_cluster || overhead <= self.config.cluster_overhead_max {
                    continue;
                }
                let in_c = self
                    .members
                    .iter()
                    .filter(|(&n, m)| m.cluster == c && !m.leaving && n != self.master)
                    .count();
                if staying - in_c < self.config.min_size as usize {
                    continue;
                }
                if worst.is_none_or(|(_, w)| overhead > w) {
                    worst = Some((c, overhead));
                }
            }
            if let Some((cluster, _)) = worst {
                let nodes = self
                    .members
                    .iter()
                    .filter(|(&n, m)| m.cluster == cluster && !m.leaving && n != self.master)
                    .map(|(&n, _)| n)
                    .collect();
                report.reason = Reason::WideAreaOverhead;
                report.decision = Decision::RemoveCluster { cluster, nodes };
                return report;
            }
        }

        let c = &self.config;
        if e > c.e_max {
            // Rule 4: e_max < e <= 1, so 1 - e_max > 0.
            let want = ceil(n as f64 * (e - c.e_max) / (1.0 - c.e_max)).max(1.0);
            let size = self
                .members
                .len()
                .saturating_add(self.pending_joins as usize);
            let room = (c.max_size as usize).saturating_sub(size);
            let count = (want.min(room as f64)) as u32;
            if count == 0 {
                report.reason = Reason::AtMaxSize;
            } else {
                report.reason = Reason::Efficient;
                report.decision = Decision::Add { count };
            }
        } else if e < c.e_min {
            // Rule 5: 0 <= e < e_min, so e_min > 0.
            let want = ceil(n as f64 * (c.e_min - e) / c.e_min).max(1.0);
            let room = staying.saturating_sub(c.min_size as usize);
            let mut candidates: Vec<&Judged> =
                judged.iter().filter(|j| j.node != self.master).collect();
            // Members slower than e_min first (see "Which members go"), then the
            // least efficient first; among equals, the higher id first.
            let fast = |j: &Judged| j.speed >= c.e_min;
            candidates.sort_by(|a, b| {
                fast(a)
                    .cmp(&fast(b))
                    .then(a.efficiency.total_cmp(&b.efficiency))
                    .then(b.node.cmp(&a.node))
            });
            let count = (want.min(room as f64) as usize).min(candidates.len());
            if count == 0 {
                report.reason = Reason::AtMinSize;
            } else {
                report.reason = Reason::Inefficient;
                report.decision = Decision::Remove {
                    nodes: candidates[..count].iter().map(|j| j.node).collect(),
                };
            }
        } else {
            report.reason = Reason::InBand;
        }
        report
    }

    /// Books a decision: members asked for, members asked to leave, cool-down.
    fn apply(&mut self, decision: &Decision) {
        let nodes = match decision {
            Decision::Keep => return,
            Decision::Add { count } => {
                self.pending_joins = self.pending_joins.saturating_add(*count);
                self.stats.adds += 1;
                self.stats.added += u64::from(*count);
                &[][..]
            }
            Decision::Remove { nodes } => {
                self.stats.removes += 1;
                self.stats.removed += nodes.len() as u64;
                nodes.as_slice()
            }
            Decision::RemoveCluster { nodes, .. } => {
                self.stats.clusters_removed += 1;
                self.stats.removed += nodes.len() as u64;
                nodes.as_slice()
            }
        };
        for n in nodes {
            if let Some(m) = self.members.get_mut(n) {
                m.leaving = true;
            }
        }
        self.cooldown_left = self.config.cooldown_periods;
    }
}
