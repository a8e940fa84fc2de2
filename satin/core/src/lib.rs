//! The sans-IO inter-node scheduler core of Satin.
//!
//! Satin runs divide-and-conquer programs on many nodes grouped in clusters.
//! Inside a node, workers spawn jobs onto a work queue; *between* nodes, idle
//! nodes steal jobs. This crate decides the inter-node part: whom an idle node
//! asks for work, whether it waits for the answer, and how to answer thieves.
//!
//! # Events and actions
//!
//! A [`Node`] is a state machine without threads, sockets, clocks or job
//! queue, like `quinn-proto` under `quinn`. A driver feeds it [`Event`]s, each
//! stamped with the current time in nanoseconds (wall-clock or virtual), and
//! drains the [`Action`]s it emits with [`Node::poll_action`]:
//!
//! | the driver sees | it feeds | the node may emit |
//! |---|---|---|
//! | the local runtime ran out of work | [`Event::Idle`] | [`Action::SendStealRequest`] |
//! | the local runtime has work again | [`Event::Busy`] | — |
//! | a steal request message arrived | [`Event::StealRequest`] | [`Action::ServeSteal`] (pop the queue's tail, reply) |
//! | a steal reply message arrived | [`Event::StealReply`] | [`Action::EnqueueStolen`], more requests, [`Action::SetTimer`] |
//! | a timer expired | [`Event::Timer`] | more requests |
//! | it sent a stolen job's result home | [`Event::ResultReturned`] | — (statistics) |
//! | membership changed | [`Event::NodeJoined`], [`Event::NodeLeft`] | more requests |
//!
//! "Synchronous" steals are synchronous *for the node*, not for the driver:
//! the node simply sends nothing else of that kind until the reply event
//! arrives. The driver never blocks.
//!
//! The same core serves three drivers: the real runtime (threads + IPL), the
//! deterministic discrete-event simulator ([`sim`], virtual time) and a
//! real-time emulation. Given a seed and an event sequence its actions are
//! fully determined ([`rng`] is a self-contained SplitMix64).
//!
//! # Policies
//!
//! [`Policy::Rs`] (random stealing), [`Policy::Crs`] (cluster-aware random
//! stealing, van Nieuwpoort et al. PPoPP 2001 / thesis fig. 6.2),
//! [`Policy::Cmrs`] and [`Policy::Acrs`] (thesis §6.5). Each node keeps
//! [`Stats`]: steal attempts and successes and messages, intra- and
//! inter-cluster, idle time and time spent waiting for steal replies.
//!
//! # Crash recovery
//!
//! [`recovery::Recovery`] is the sans-IO bookkeeping of fault tolerance, driven
//! the same way: which jobs went to which thief (redone when it dies), which
//! results this member keeps for others, which member holds which saved result
//! (announced only after a death), lookups and fetches for redone jobs, graceful
//! leave and master re-election. [`checkpoint`] is the byte format of the saved
//! results in a checkpoint file.
//!
//! # Self-adaptivity
//!
//! [`adapt::Coordinator`] turns the members' measurements (time busy, idle and
//! communicating per monitoring period) into requests to add members, remove
//! the least efficient ones, or drop a cluster with a slow wide-area link: the
//! journal version's weighted-average-efficiency rule, kept between 30 % and
//! 50 %.
//!
//! # Example
//!
//! ```
//! use satin_core::{Action, Event, JobRef, Node, NodeId, Policy, Topology};
//!
//! // Two clusters of two nodes: 0,1 in cluster 0 and 2,3 in cluster 1.
//! let mut node = Node::new(NodeId(0), Topology::from_cluster_sizes(&[2, 2]), Policy::Crs, 42);
//! node.handle(Event::Idle { now: 0 });
//! let mut wan = None;
//! let mut lan = None;
//! while let Some(action) = node.poll_action() {
//!     match action {
//!         Action::SendStealRequest { to, id, synchronous: false } => wan = Some((to, id)),
//!         Action::SendStealRequest { to, id, synchronous: true } => lan = Some((to, id)),
//!         other => panic!("unexpected {other:?}"),
//!     }
//! }
//! // One asynchronous wide-area request and one synchronous local one.
//! let (wan_victim, wan_id) = wan.unwrap();
//! assert!(wan_victim.0 >= 2);
//! assert_eq!(lan.unwrap().0, NodeId(1));
//!
//! // The wide-area reply brings a job: the driver enqueues and runs it.
//! node.handle(Event::StealReply { from: wan_victim, id: wan_id, job: Some(JobRef(1)), now: 20_000_000 });
//! assert_eq!(node.poll_action(), Some(Action::EnqueueStolen { job: JobRef(1), from: wan_victim }));
//! assert!(!node.is_idle());
//! ```
//!
//! A whole system in virtual time:
//!
//! ```
//! use satin_core::sim::{run, SimConfig};
//! use satin_core::Policy;
//!
//! let mut config = SimConfig::new(&[4, 4], Policy::Crs, 1);
//! config.tree.depth = 8;
//! let report = run(config).unwrap();
//! assert!(report.executions.iter().all(|&n| n == 1));
//! ```

#![forbid(unsafe_code)]

pub mod adapt;
pub mod checkpoint;
pub mod key;
pub mod node;
pub mod recovery;
pub mod rng;
pub mod sim;
pub mod stats;
pub mod topology;

pub use key::JobKey;
pub use node::{Action, Config, Error, Event, JobRef, Node, Policy, StealId, TimerId};
pub use recovery::{Recovery, RecoveryStats};
pub use stats::{Counters, Stats};
pub use topology::{ClusterId, NodeId, Topology};

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
