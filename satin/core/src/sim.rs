//! A deterministic discrete-event driver in virtual time: the seed of the
//! Tier-B simulator.
//!
//! Every node is a [`Node`] plus a work queue (a deque: the worker takes jobs
//! from the head, thieves from the tail) and one worker. The application is a
//! toy divide-and-conquer tree ([`JobTree`]): an inner job costs `spawn_ns`
//! and then spawns two children onto the head of the queue; a leaf costs
//! `leaf_ns`; an inner job completes (with no post-`sync` work) when both
//! children have completed. When a child ran on another node than its parent,
//! its result travels back in a message. Messages take a fixed one-way
//! latency, LAN or WAN; there is no bandwidth model yet.
//!
//! The run ends when the root job completes. Everything is ordered by
//! (virtual time, sequence number), so a run is a pure function of its
//! [`SimConfig`].

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use crate::node::{Action, Config, Event, JobRef, Node, Policy, StealId, TimerId};
use crate::rng::mix64;
use crate::stats::Stats;
use crate::topology::{NodeId, Topology};

/// The toy job tree: a complete binary tree of the given depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobTree {
    /// Depth of the tree: `0` is a single leaf; there are `2^depth` leaves.
    pub depth: u32,
    /// Virtual run time of a leaf (ns).
    pub leaf_ns: u64,
    /// Virtual run time of an inner job before it spawns its children (ns).
    pub spawn_ns: u64,
}

impl JobTree {
    /// Total number of jobs in the tree, `2^(depth+1) - 1`.
    pub fn job_count(&self) -> u64 {
        (1u64 << (self.depth + 1)) - 1
    }

    /// Sequential run time: all leaf and spawn work.
    pub fn sequential_ns(&self) -> u64 {
        (1u64 << self.depth) * self.leaf_ns + ((1u64 << self.depth) - 1) * self.spawn_ns
    }
}

/// One simulation run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// The cluster map; node ids should be `0..n` (node 0 starts the root).
    pub topology: Topology,
    /// The load-balancing policy of every node.
    pub policy: Policy,
    /// Per-node knobs.
    pub node_config: Config,
    /// Run seed; node `i` gets seed `mix64(seed ^ mix64(i))`.
    pub seed: u64,
    /// One-way latency between nodes of one cluster (ns).
    pub lan_latency_ns: u64,
    /// One-way latency between clusters (ns).
    pub wan_latency_ns: u64,
    /// The application.
    pub tree: JobTree,
    /// Give up after this many simulation events.
    pub max_events: u64,
}

impl SimConfig {
    /// A configuration with `sizes` clusters, LAN 18.5 µs and WAN 10 ms
    /// one-way, a depth-12 tree of 1 ms leaves, and a 10⁸-event limit.
    pub fn new(sizes: &[usize], policy: Policy, seed: u64) -> Self {
        Self {
            topology: Topology::from_cluster_sizes(sizes),
            policy,
            node_config: Config::default(),
            seed,
            lan_latency_ns: 18_500,
            wan_latency_ns: 10_000_000,
            tree: JobTree {
                depth: 12,
                leaf_ns: 1_000_000,
                spawn_ns: 2_000,
            },
            max_events: 100_000_000,
        }
    }
}

/// Messages counted by the simulated network, per class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetCounts {
    /// Steal requests.
    pub steal_requests: u64,
    /// Steal replies (with or without a job).
    pub steal_replies: u64,
    /// Steal replies that carried a job.
    pub jobs_transferred: u64,
    /// Result returns.
    pub results: u64,
}

impl NetCounts {
    /// All messages.
    pub fn total(&self) -> u64 {
        self.steal_requests + self.steal_replies + self.results
    }
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// Virtual time at which the root job completed (ns).
    pub makespan_ns: u64,
    /// How often each job ran, indexed by job number (all 1 in a correct run).
    pub executions: Vec<u32>,
    /// Each node's statistics at the end.
    pub node_stats: Vec<Stats>,
    /// Sum of all nodes' statistics.
    pub total: Stats,
    /// Messages within clusters, as counted by the network.
    pub lan: NetCounts,
    /// Messages between clusters, as counted by the network.
    pub wan: NetCounts,
    /// Simulation events processed.
    pub events: u64,
}

impl SimReport {
    /// Sequential time divided by the makespan.
    pub fn speedup(&self, tree: &JobTree) -> f64 {
        tree.sequential_ns() as f64 / self.makespan_ns as f64
    }

    /// Wide-area steal messages (requests and replies) per successful steal.
    pub fn wan_steal_messages_per_success(&self) -> f64 {
        let s = self.total.steal_successes().max(1);
        (self.wan.steal_requests + self.wan.steal_replies) as f64 / s as f64
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The event limit was hit before the root completed.
    #[error("no termination after {0} events")]
    EventLimit(u64),
    /// The event queue ran dry before the root completed (a lost job).
    #[error("event queue empty at t={0} ns before the root completed")]
    Stalled(u64),
    /// The topology is empty.
    #[error("empty topology")]
    NoNodes,
}

#[derive(Debug, Clone, Copy)]
enum Msg {
    Request { id: StealId, synchronous: bool },
    Reply { id: StealId, job: Option<u32> },
    Result { job: u32 },
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Done { node: usize },
    Deliver { from: usize, to: usize, msg: Msg },
    Timer { node: usize, id: TimerId },
}

#[derive(Debug)]
struct Scheduled {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the earliest first.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Debug, Clone, Copy)]
struct Job {
    depth: u32,
    parent: Option<u32>,
    pending: u32,
    exec_node: usize,
}

struct SimNode {
    core: Node,
    queue: VecDeque<u32>,
    running: Option<u32>,
    reported_idle: bool,
}

/// A simulation in progress. Most users call [`run`].
pub struct Sim {
    config: SimConfig,
    nodes: Vec<SimNode>,
    ids: Vec<NodeId>,
    index_of: std::collections::BTreeMap<NodeId, usize>,
    jobs: Vec<Job>,
    executions: Vec<u32>,
    heap: BinaryHeap<Scheduled>,
    seq: u64,
    now: u64,
    done_at: Option<u64>,
    lan: NetCounts,
    wan: NetCounts,
}

type Observer<'a> = dyn FnMut(&Node, &Action) + 'a;

impl Sim {
    /// Builds the nodes; node 0 (the first in the topology) holds the root.
    pub fn new(config: SimConfig) -> Result<Self, SimError> {
        if config.topology.is_empty() {
            return Err(SimError::NoNodes);
        }
        let ids: Vec<NodeId> = config.topology.nodes().map(|(n, _)| n).collect();
        let index_of = ids.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let nodes = ids
            .iter()
            .map(|&n| {
                let seed = mix64(config.seed ^ mix64(u64::from(n.0)));
                let core = Node::try_new(
                    n,
                    config.topology.clone(),
                    config.policy,
                    seed,
                    config.node_config,
                )
                .expect("node is in the topology");
                SimNode {
                    core,
                    queue: VecDeque::new(),
                    running: None,
                    reported_idle: false,
                }
            })
            .collect();
        let root = Job {
            depth: config.tree.depth,
            parent: None,
            pending: 0,
            exec_node: 0,
        };
        let mut sim = Self {
            config,
            nodes,
            ids,
            index_of,
            jobs: vec![root],
            executions: vec![0],
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
            done_at: None,
            lan: NetCounts::default(),
            wan: NetCounts::default(),
        };
        sim.nodes[0].queue.push_back(0);
        Ok(sim)
    }

    /// Runs to completion, calling `observe` with every action every node
    /// emits (right after the node emitted it), e.g. to check invariants.
    pub fn run_observed(mut self, observe: &mut Observer<'_>) -> Result<SimReport, SimError> {
        for i in 0..self.nodes.len() {
            self.settle(i, observe);
        }
        let mut events = 0u64;
        while self.done_at.is_none() {
            let Some(s) = self.heap.pop() else {
                return Err(SimError::Stalled(self.now));
            };
            events += 1;
            if events > self.config.max_events {
                return Err(SimError::EventLimit(events - 1));
            }
            self.now = s.at;
            match s.ev {
                Ev::Done { node } => self.on_done(node, observe),
                Ev::Deliver { from, to, msg } => self.on_deliver(from, to, msg, observe),
                Ev::Timer { node, id } => {
                    let now = self.now;
                    self.nodes[node].core.handle(Event::Timer { id, now });
                    self.settle(node, observe);
                }
            }
        }
        let end = self.done_at.unwrap_or(self.now);
        let node_stats: Vec<Stats> = self.nodes.iter().map(|n| n.core.stats_at(end)).collect();
        let mut total = Stats::default();
        for s in &node_stats {
            total += s;
        }
        Ok(SimReport {
            makespan_ns: end,
            executions: self.executions,
            node_stats,
            total,
            lan: self.lan,
            wan: self.wan,
            events,
        })
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn is_wan(&self, a: usize, b: usize) -> bool {
        !self.config.topology.same_cluster(self.ids[a], self.ids[b])
    }

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        let wan = self.is_wan(from, to);
        let counts = if wan { &mut self.wan } else { &mut self.lan };
        match msg {
            Msg::Request { .. } => counts.steal_requests += 1,
            Msg::Reply { job, .. } => {
                counts.steal_replies += 1;
                if job.is_some() {
                    counts.jobs_transferred += 1;
                }
            }
            Msg::Result { .. } => counts.results += 1,
        }
        let latency = if wan {
            self.config.wan_latency_ns
        } else {
            self.config.lan_latency_ns
        };
        self.schedule(self.now + latency, Ev::Deliver { from, to, msg });
    }

    /// Starts work if the worker is free, reports idleness, and carries out
    /// the node's actions until it has nothing more to say.
    fn settle(&mut self, i: usize, observe: &mut Observer<'_>) {
        let now = self.now;
        loop {
            let n = &mut self.nodes[i];
            if n.running.is_none() {
                if let Some(job) = n.queue.pop_front() {
                    if n.reported_idle {
                        n.reported_idle = false;
                        n.core.handle(Event::Busy { now });
                    }
                    n.running = Some(job);
                    self.executions[job as usize] += 1;
                    self.jobs[job as usize].exec_node = i;
                    let cost = if self.jobs[job as usize].depth == 0 {
                        self.config.tree.leaf_ns
                    } else {
                        self.config.tree.spawn_ns
                    };
                    self.schedule(now + cost, Ev::Done { node: i });
                } else if !n.reported_idle {
                    n.reported_idle = true;
                    n.core.handle(Event::Idle { now });
                }
            }
            let mut acted = false;
            while let Some(action) = self.nodes[i].core.poll_action() {
                acted = true;
                observe(&self.nodes[i].core, &action);
                self.apply(i, action);
            }
            if !acted {
                break;
            }
        }
    }

    fn apply(&mut self, i: usize, action: Action) {
        match action {
            Action::SendStealRequest {
                to,
                id,
                synchronous,
            } => {
                let to = self.index_of[&to];
                self.send(i, to, Msg::Request { id, synchronous });
            }
            Action::ServeSteal { to, id, .. } => {
                let job = self.nodes[i].queue.pop_back();
                let to = self.index_of[&to];
                self.send(i, to, Msg::Reply { id, job });
            }
            Action::EnqueueStolen { job, .. } => {
                let n = &mut self.nodes[i];
                n.queue.push_back(job.0 as u32);
                // The core counts itself busy now.
                n.reported_idle = false;
            }
            Action::SetTimer { id, at } => {
                self.schedule(at.max(self.now), Ev::Timer { node: i, id });
            }
        }
    }

    fn on_done(&mut self, i: usize, observe: &mut Observer<'_>) {
        let job = self.nodes[i].running.take().expect("a job was running");
        let info = self.jobs[job as usize];
        if info.depth == 0 {
            self.complete(job, i);
        } else {
            self.jobs[job as usize].pending = 2;
            for _ in 0..2 {
                let child = self.jobs.len() as u32;
                self.jobs.push(Job {
                    depth: info.depth - 1,
                    parent: Some(job),
                    pending: 0,
                    exec_node: i,
                });
                self.executions.push(0);
                self.nodes[i].queue.push_front(child);
            }
        }
        self.settle(i, observe);
    }

    /// `job` completed on node `i`: notify its parent, locally or by a
    /// result message.
    fn complete(&mut self, job: u32, i: usize) {
        let mut job = job;
        loop {
            let Some(parent) = self.jobs[job as usize].parent else {
                self.done_at = Some(self.now);
                return;
            };
            let owner = self.jobs[parent as usize].exec_node;
            if owner != i {
                let now = self.now;
                self.nodes[i].core.handle(Event::ResultReturned {
                    job: JobRef(u64::from(job)),
                    to: self.ids[owner],
                    now,
                });
                self.send(i, owner, Msg::Result { job });
                return;
            }
            let p = &mut self.jobs[parent as usize];
            p.pending -= 1;
            if p.pending > 0 {
                return;
            }
            job = parent;
        }
    }

    fn on_deliver(&mut self, from: usize, to: usize, msg: Msg, observe: &mut Observer<'_>) {
        let now = self.now;
        let from_id = self.ids[from];
        match msg {
            Msg::Request { id, synchronous } => {
                self.nodes[to].core.handle(Event::StealRequest {
                    from: from_id,
                    id,
                    synchronous,
                    now,
                });
            }
            Msg::Reply { id, job } => {
                self.nodes[to].core.handle(Event::StealReply {
                    from: from_id,
                    id,
                    job: job.map(|j| JobRef(u64::from(j))),
                    now,
                });
            }
            Msg::Result { job } => {
                let parent = self.jobs[job as usize]
                    .parent
                    .expect("results are sent for children");
                let p = &mut self.jobs[parent as usize];
                p.pending -= 1;
                if p.pending == 0 {
                    self.complete(parent, to);
                }
            }
        }
        self.settle(to, observe);
    }
}

/// Runs `config` to completion.
pub fn run(config: SimConfig) -> Result<SimReport, SimError> {
    Sim::new(config)?.run_observed(&mut |_, _| {})
}
