//! The per-node state machine: [`Node`], its [`Event`]s, [`Action`]s and
//! [`Policy`].

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use tracing::trace;

use crate::rng::SplitMix64;
use crate::stats::Stats;
use crate::topology::{ClusterId, NodeId, Topology};

/// An opaque handle for a job (an invocation record), chosen by the driver.
/// The core only passes it through and uses it in statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobRef(pub u64);

/// Identifies one steal request of one thief. The driver carries it in the
/// request message, the victim's driver echoes it in the reply, and the
/// thief's [`Event::StealReply`] hands it back, so replies are matched exactly
/// (a thief may have a synchronous and several asynchronous requests in
/// flight, possibly to the same node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StealId(pub u64);

/// Identifies a timer the node asked for with [`Action::SetTimer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimerId(pub u64);

/// The inter-node load-balancing algorithm.
///
/// All are stable (they communicate only while the node is idle) and take no
/// tuning except the credit count of CMRS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    /// Random Stealing: an idle node sends a synchronous steal request to a
    /// uniformly random other node (any cluster), waits for the reply, and
    /// repeats while idle.
    Rs,
    /// Cluster-aware Random Stealing (thesis fig. 6.2): an idle node without a
    /// wide-area steal in flight sends one *asynchronous* request to a node
    /// chosen uniformly over *all* nodes of other clusters, and meanwhile
    /// steals synchronously from random nodes of its own cluster. At most one
    /// wide-area request is outstanding. On one cluster it is RS.
    Crs,
    /// Cluster-aware Multiple Random Stealing (thesis fig. 6.17): CRS with up
    /// to `credits` asynchronous wide-area requests outstanding. Each idle
    /// iteration spends at most one credit (all of them at once when there is
    /// no local victim); victims are drawn uniformly over the remote nodes of
    /// clusters that have no request of ours in flight (over all remote nodes
    /// when every remote cluster has one). `credits: 1` is exactly CRS.
    Cmrs {
        /// Maximum number of outstanding wide-area steal requests (≥ 1).
        credits: u32,
    },
    /// Adaptive CRS (thesis §6.5.2): like CRS, but the remote *cluster* `p`
    /// is chosen with probability proportional to `1/t_p`, `t_p` being the
    /// round-trip time of the last wide-area steal to `p`; the victim is then
    /// uniform inside `p`. Clusters not measured yet get the weight of the
    /// fastest measured cluster (all equal before any measurement), so every
    /// cluster gets probed.
    Acrs,
    /// Master-worker, for comparison: idle workers steal synchronously from
    /// `master` only (which should be where the root job starts); the master
    /// never steals. If the master is not in the topology, nobody steals.
    MasterWorker {
        /// The node all work is taken from.
        master: NodeId,
    },
}

impl Policy {
    /// The maximum number of outstanding asynchronous wide-area steals
    /// (0 for RS).
    pub fn wan_credits(&self) -> u32 {
        match *self {
            Policy::Rs | Policy::MasterWorker { .. } => 0,
            Policy::Crs | Policy::Acrs => 1,
            Policy::Cmrs { credits } => credits.max(1),
        }
    }

    /// Short name as used in the papers ("RS", "CRS", ...).
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Rs => "RS",
            Policy::Crs => "CRS",
            Policy::Cmrs { .. } => "CMRS",
            Policy::Acrs => "ACRS",
            Policy::MasterWorker { .. } => "MW",
        }
    }
}

/// Knobs the papers leave open (notes §1.8). The defaults are the papers'
/// behaviour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Wait this long after an unsuccessful synchronous steal before the next
    /// one (0, the default, retries immediately as in the papers). Uses
    /// [`Action::SetTimer`].
    pub retry_backoff_ns: u64,
}

/// Something that happened, fed to [`Node::handle`]. Every event carries the
/// driver's current time `now` in nanoseconds (wall-clock or virtual); times
/// fed to one node should not decrease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// The local runtime has no work (its queue is empty and no job runs, or
    /// a `sync` found nothing to run): the node should try to get some.
    /// Repeating it while idle is harmless.
    Idle {
        /// Current time (ns).
        now: u64,
    },
    /// The local runtime has work again (e.g. a `sync` completed, or a job
    /// arrived other than through this core). Harmless if already busy.
    Busy {
        /// Current time (ns).
        now: u64,
    },
    /// A thief asks this node for work. The node answers with
    /// [`Action::ServeSteal`].
    StealRequest {
        /// The thief.
        from: NodeId,
        /// The thief's request id, to echo in the reply.
        id: StealId,
        /// Whether the thief blocks for the answer (informational).
        synchronous: bool,
        /// Current time (ns).
        now: u64,
    },
    /// The answer to one of this node's [`Action::SendStealRequest`]s.
    StealReply {
        /// The victim.
        from: NodeId,
        /// The id from the request.
        id: StealId,
        /// The stolen job, or `None` if the victim had no work.
        job: Option<JobRef>,
        /// Current time (ns).
        now: u64,
    },
    /// A timer set with [`Action::SetTimer`] expired. Stale timers are
    /// ignored, so the driver need not cancel them.
    Timer {
        /// The timer's id.
        id: TimerId,
        /// Current time (ns).
        now: u64,
    },
    /// This node finished a stolen job and sent its result back to the
    /// owner (`to`, the node that spawned it). Only counted in statistics.
    ResultReturned {
        /// The job whose result was sent.
        job: JobRef,
        /// The node the result went to.
        to: NodeId,
        /// Current time (ns).
        now: u64,
    },
    /// A node joined the run (or moved to another cluster).
    NodeJoined {
        /// The node.
        node: NodeId,
        /// Its cluster.
        cluster: ClusterId,
        /// Current time (ns).
        now: u64,
    },
    /// A node left (or crashed). Steal requests outstanding to it are
    /// abandoned as if it had answered "no job".
    NodeLeft {
        /// The node.
        node: NodeId,
        /// Current time (ns).
        now: u64,
    },
}

impl Event {
    /// The event's time stamp.
    pub fn now(&self) -> u64 {
        match *self {
            Event::Idle { now }
            | Event::Busy { now }
            | Event::StealRequest { now, .. }
            | Event::StealReply { now, .. }
            | Event::Timer { now, .. }
            | Event::ResultReturned { now, .. }
            | Event::NodeJoined { now, .. }
            | Event::NodeLeft { now, .. } => now,
        }
    }
}

/// What the node wants the driver to do, taken with [`Node::poll_action`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Send a steal request to `to`, carrying `id`. The victim's driver feeds
    /// it as [`Event::StealRequest`]; the reply comes back as
    /// [`Event::StealReply`] with the same `id`.
    ///
    /// `synchronous` says how the *thief* waits: `true` means the node steals
    /// nothing else locally until this reply arrives (RS, the local steals of
    /// CRS); `false` is a wide-area prefetch that runs in the background.
    /// Either way the driver itself never blocks: the core does the waiting.
    SendStealRequest {
        /// The victim.
        to: NodeId,
        /// Request id to carry.
        id: StealId,
        /// Whether the thief waits for this reply before stealing again.
        synchronous: bool,
    },
    /// Answer the thief `to`: take the job at the *tail* of the local work
    /// queue (the oldest, coarsest one), or none if the queue is empty, and
    /// send it back in a steal reply carrying `id`. The core does not own the
    /// queue; serve from the communication side without disturbing workers.
    ServeSteal {
        /// The thief.
        to: NodeId,
        /// The thief's request id, to echo.
        id: StealId,
        /// Copied from the request (informational).
        synchronous: bool,
    },
    /// A steal reply brought `job`: add it at the tail of the local work
    /// queue and run it. The node now counts itself busy; report
    /// [`Event::Idle`] again when the local runtime runs dry.
    EnqueueStolen {
        /// The stolen job.
        job: JobRef,
        /// The victim it came from (its owner for the result return).
        from: NodeId,
    },
    /// Feed [`Event::Timer`] with this `id` at time `at` (or later).
    SetTimer {
        /// The timer's id.
        id: TimerId,
        /// Expiry time (ns).
        at: u64,
    },
}

/// Why a [`Node`] could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The node's own id is not in the topology.
    #[error("node {0} is not in the topology")]
    NotInTopology(NodeId),
}

/// A steal request in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Outstanding {
    id: StealId,
    to: NodeId,
    cluster: ClusterId,
    synchronous: bool,
    sent_at: u64,
}

/// The load-balancing state machine of one node.
///
/// Feed it [`Event`]s with [`Node::handle`] and drain [`Action`]s with
/// [`Node::poll_action`] after each one. It owns no threads, sockets, clocks
/// or job queue, and given the same seed and the same event sequence it emits
/// the same actions.
///
/// A new node counts itself busy; send [`Event::Idle`] to make it steal.
#[derive(Debug, Clone)]
pub struct Node {
    id: NodeId,
    policy: Policy,
    config: Config,
    topology: Topology,
    rng: SplitMix64,

    // Victim sets, derived from `topology` (all in NodeId order).
    my_cluster: ClusterId,
    others: Vec<NodeId>,
    local: Vec<NodeId>,
    remote: Vec<NodeId>,
    remote_by_cluster: BTreeMap<ClusterId, Vec<NodeId>>,

    idle: bool,
    idle_since: u64,
    outstanding: Vec<Outstanding>,
    next_steal: u64,
    backoff: Option<TimerId>,
    next_timer: u64,
    /// ACRS: round-trip time of the last wide-area steal per cluster.
    wan_rtt: BTreeMap<ClusterId, u64>,

    actions: VecDeque<Action>,
    stats: Stats,
    now: u64,
}

impl Node {
    /// A node `id` of `topology` balancing load with `policy`, its random
    /// choices determined by `seed`, with the default [`Config`].
    ///
    /// # Panics
    ///
    /// Panics if `id` is not in `topology` (see [`Node::try_new`]).
    pub fn new(id: NodeId, topology: Topology, policy: Policy, seed: u64) -> Self {
        match Self::try_new(id, topology, policy, seed, Config::default()) {
            Ok(n) => n,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like [`Node::new`] with an explicit [`Config`], returning an error
    /// instead of panicking.
    pub fn try_new(
        id: NodeId,
        topology: Topology,
        policy: Policy,
        seed: u64,
        config: Config,
    ) -> Result<Self, Error> {
        let my_cluster = topology.cluster_of(id).ok_or(Error::NotInTopology(id))?;
        let mut node = Self {
            id,
            policy,
            config,
            topology,
            rng: SplitMix64::new(seed),
            my_cluster,
            others: Vec::new(),
            local: Vec::new(),
            remote: Vec::new(),
            remote_by_cluster: BTreeMap::new(),
            idle: false,
            idle_since: 0,
            outstanding: Vec::new(),
            next_steal: 0,
            backoff: None,
            next_timer: 0,
            wan_rtt: BTreeMap::new(),
            actions: VecDeque::new(),
            stats: Stats::default(),
            now: 0,
        };
        node.rebuild_victims();
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// This node's cluster.
    pub fn cluster(&self) -> ClusterId {
        self.my_cluster
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The node's current view of the topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Whether the node counts itself idle (wants work).
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// Whether a synchronous steal request is in flight.
    pub fn sync_outstanding(&self) -> bool {
        self.outstanding.iter().any(|o| o.synchronous)
    }

    /// Number of asynchronous steal requests in flight (CRS: 0 or 1).
    pub fn async_outstanding(&self) -> usize {
        self.outstanding.iter().filter(|o| !o.synchronous).count()
    }

    /// Number of steal requests in flight to nodes of other clusters,
    /// synchronous or not.
    pub fn wan_outstanding(&self) -> usize {
        self.outstanding
            .iter()
            .filter(|o| o.cluster != self.my_cluster)
            .count()
    }

    /// The requests in flight as `(victim, id, synchronous)`.
    pub fn outstanding(&self) -> impl Iterator<Item = (NodeId, StealId, bool)> + '_ {
        self.outstanding.iter().map(|o| (o.to, o.id, o.synchronous))
    }

    /// Statistics up to the last event handled.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Statistics including the current idle period up to `now`.
    pub fn stats_at(&self, now: u64) -> Stats {
        let mut s = self.stats;
        if self.idle {
            s.idle_ns += now.saturating_sub(self.idle_since);
        }
        s
    }

    /// The next thing to do, if any. Drain after every [`Node::handle`].
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Feeds one event; the resulting actions are queued for
    /// [`Node::poll_action`].
    pub fn handle(&mut self, event: Event) {
        let now = event.now();
        self.now = self.now.max(now);
        trace!(node = %self.id, ?event, "satin-core event");
        match event {
            Event::Idle { now } => {
                if !self.idle {
                    self.idle = true;
                    self.idle_since = now;
                }
                self.step(now);
            }
            Event::Busy { now } => self.set_busy(now),
            Event::StealRequest {
                from,
                id,
                synchronous,
                ..
            } => {
                self.class_mut(from).requests_served += 1;
                self.push(Action::ServeSteal {
                    to: from,
                    id,
                    synchronous,
                });
            }
            Event::StealReply { from, id, job, now } => self.on_reply(from, id, job, now),
            Event::Timer { id, now } => {
                if self.backoff == Some(id) {
                    self.backoff = None;
                    self.step(now);
                }
            }
            Event::ResultReturned { to, .. } => {
                self.class_mut(to).results_sent += 1;
            }
            Event::NodeJoined { node, cluster, now } => {
                self.topology.insert(node, cluster);
                self.rebuild_victims();
                self.step(now);
            }
            Event::NodeLeft { node, now } => {
                if node == self.id {
                    return;
                }
                self.topology.remove(node);
                self.rebuild_victims();
                let before = self.outstanding.len();
                self.outstanding.retain(|o| o.to != node);
                self.stats.steals_abandoned += (before - self.outstanding.len()) as u64;
                self.step(now);
            }
        }
    }

    fn push(&mut self, action: Action) {
        trace!(node = %self.id, ?action, "satin-core action");
        self.actions.push_back(action);
    }

    fn is_local(&self, node: NodeId) -> bool {
        self.topology.cluster_of(node) == Some(self.my_cluster)
    }

    fn class_mut(&mut self, peer: NodeId) -> &mut crate::stats::Counters {
        if self.is_local(peer) {
            &mut self.stats.intra
        } else {
            &mut self.stats.inter
        }
    }

    fn set_busy(&mut self, now: u64) {
        if self.idle {
            self.idle = false;
            self.stats.idle_ns += now.saturating_sub(self.idle_since);
            // A pending back-off timer becomes stale.
            self.backoff = None;
        }
    }

    fn on_reply(&mut self, from: NodeId, id: StealId, job: Option<JobRef>, now: u64) {
        let record = self
            .outstanding
            .iter()
            .position(|o| o.id == id && o.to == from)
            .map(|i| self.outstanding.remove(i));
        let local = match record {
            Some(r) => r.cluster == self.my_cluster,
            None => self.is_local(from),
        };
        if let Some(r) = record {
            let rtt = now.saturating_sub(r.sent_at);
            if r.synchronous {
                self.stats.sync_steal_ns += rtt;
            } else {
                self.stats.async_steal_ns += rtt;
            }
            if r.cluster != self.my_cluster {
                self.wan_rtt.insert(r.cluster, rtt.max(1));
            }
        }
        if let Some(job) = job {
            // A job is never dropped, even for an unknown or abandoned request.
            if local {
                self.stats.intra.steal_successes += 1;
            } else {
                self.stats.inter.steal_successes += 1;
            }
            self.push(Action::EnqueueStolen { job, from });
            self.set_busy(now);
            return;
        }
        let failed_sync = record.is_some_and(|r| r.synchronous);
        if self.idle && failed_sync && self.config.retry_backoff_ns > 0 && self.backoff.is_none() {
            let tid = TimerId(self.next_timer);
            self.next_timer += 1;
            self.backoff = Some(tid);
            self.push(Action::SetTimer {
                id: tid,
                at: now + self.config.retry_backoff_ns,
            });
        }
        self.step(now);
    }

    /// One iteration of the idle loop of the papers' pseudo code, run
    /// whenever the thief would be free to issue requests: the node is idle,
    /// no synchronous request is in flight and no back-off is pending.
    fn step(&mut self, now: u64) {
        if !self.idle || self.backoff.is_some() || self.sync_outstanding() {
            return;
        }
        match self.policy {
            Policy::Rs => {
                if !self.others.is_empty() {
                    let victim = self.others[self.rng.index(self.others.len())];
                    self.send(victim, true, now);
                }
            }
            Policy::MasterWorker { master } => {
                if master != self.id && self.topology.contains(master) {
                    self.send(master, true, now);
                }
            }
            Policy::Crs | Policy::Cmrs { .. } | Policy::Acrs => {
                let credits = self.policy.wan_credits() as usize;
                if !self.remote.is_empty() {
                    // The paper's loop sends at most one wide-area request per
                    // iteration; with no local victim the loop spins, which
                    // amounts to spending all credits at once.
                    let budget = if self.local.is_empty() { credits } else { 1 };
                    let mut sent = 0;
                    while sent < budget && self.async_outstanding() < credits {
                        let victim = self.remote_victim();
                        self.send(victim, false, now);
                        sent += 1;
                    }
                }
                if !self.local.is_empty() {
                    let victim = self.local[self.rng.index(self.local.len())];
                    self.send(victim, true, now);
                }
            }
        }
    }

    fn remote_victim(&mut self) -> NodeId {
        match self.policy {
            Policy::Cmrs { .. } => {
                let busy: Vec<ClusterId> = self
                    .outstanding
                    .iter()
                    .filter(|o| !o.synchronous)
                    .map(|o| o.cluster)
                    .collect();
                let candidates: Vec<NodeId> = self
                    .remote_by_cluster
                    .iter()
                    .filter(|(c, _)| !busy.contains(c))
                    .flat_map(|(_, nodes)| nodes.iter().copied())
                    .collect();
                if candidates.is_empty() {
                    self.remote[self.rng.index(self.remote.len())]
                } else {
                    candidates[self.rng.index(candidates.len())]
                }
            }
            Policy::Acrs => {
                const SCALE: u128 = 1 << 64;
                let best = self
                    .remote_by_cluster
                    .keys()
                    .filter_map(|c| self.wan_rtt.get(c))
                    .min()
                    .copied();
                let weights: Vec<(ClusterId, u128)> = self
                    .remote_by_cluster
                    .keys()
                    .map(|&c| {
                        let t = self.wan_rtt.get(&c).copied().or(best).unwrap_or(1);
                        (c, SCALE / u128::from(t.max(1)))
                    })
                    .collect();
                let total: u128 = weights.iter().map(|&(_, w)| w).sum();
                // Draw below `total` (< 2^70) from two 64-bit words; the tiny
                // modulo bias is irrelevant here.
                let r = ((u128::from(self.rng.next_u64()) << 64) | u128::from(self.rng.next_u64()))
                    % total;
                let mut acc = 0u128;
                let mut chosen = weights[weights.len() - 1].0;
                for &(c, w) in &weights {
                    acc += w;
                    if r < acc {
                        chosen = c;
                        break;
                    }
                }
                let nodes = &self.remote_by_cluster[&chosen];
                nodes[self.rng.index(nodes.len())]
            }
            // CRS (thesis fig. 6.2): uniform over all remote nodes, which is
            // what drawing from all hosts until one is remote amounts to.
            Policy::Crs | Policy::Rs | Policy::MasterWorker { .. } => {
                self.remote[self.rng.index(self.remote.len())]
            }
        }
    }

    fn send(&mut self, to: NodeId, synchronous: bool, now: u64) {
        let id = StealId(self.next_steal);
        self.next_steal += 1;
        let cluster = self
            .topology
            .cluster_of(to)
            .expect("victims come from the topology");
        self.class_mut(to).steal_attempts += 1;
        self.outstanding.push(Outstanding {
            id,
            to,
            cluster,
            synchronous,
            sent_at: now,
        });
        self.push(Action::SendStealRequest {
            to,
            id,
            synchronous,
        });
    }

    fn rebuild_victims(&mut self) {
        if let Some(c) = self.topology.cluster_of(self.id) {
            self.my_cluster = c;
        }
        self.others.clear();
        self.local.clear();
        self.remote.clear();
        self.remote_by_cluster.clear();
        for (n, c) in self.topology.nodes() {
            if n == self.id {
                continue;
            }
            self.others.push(n);
            if c == self.my_cluster {
                self.local.push(n);
            } else {
                self.remote.push(n);
                self.remote_by_cluster.entry(c).or_default().push(n);
            }
        }
        // Forget measurements of clusters that no longer exist.
        let by_cluster = &self.remote_by_cluster;
        self.wan_rtt.retain(|c, _| by_cluster.contains_key(c));
    }
}
