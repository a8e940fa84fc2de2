//! Helpers shared by the integration tests.
#![allow(dead_code)]

use satin_core::rng::SplitMix64;
use satin_core::{Action, ClusterId, Event, JobRef, Node, NodeId, StealId, Topology};

/// Drains all pending actions.
pub fn drain(node: &mut Node) -> Vec<Action> {
    std::iter::from_fn(|| node.poll_action()).collect()
}

/// Only the steal requests among `actions`, as `(to, id, synchronous)`.
pub fn requests(actions: &[Action]) -> Vec<(NodeId, StealId, bool)> {
    actions
        .iter()
        .filter_map(|a| match *a {
            Action::SendStealRequest {
                to,
                id,
                synchronous,
            } => Some((to, id, synchronous)),
            _ => None,
        })
        .collect()
}

/// A random driver for one node: it plays the rest of the world, answering
/// the node's requests in random order with random outcomes, sending it
/// requests, toggling idle/busy, firing timers and changing membership.
/// `check` runs after every event on the node and the actions it emitted.
pub fn fuzz(
    mut node: Node,
    harness_seed: u64,
    steps: usize,
    churn: bool,
    mut check: impl FnMut(&Node, &[Action]),
) -> Vec<Action> {
    let mut rng = SplitMix64::new(harness_seed);
    let mut log = Vec::new();
    let mut pending: Vec<(NodeId, StealId)> = Vec::new();
    let mut timers = Vec::new();
    let mut now = 0u64;
    let me = node.id();
    let mut gone: Vec<(NodeId, ClusterId)> = Vec::new();
    let mut next_job = 0u64;
    for _ in 0..steps {
        now += 1 + rng.below(50_000);
        let roll = rng.below(100);
        let event = if roll < 15 {
            Event::Idle { now }
        } else if roll < 22 {
            Event::Busy { now }
        } else if roll < 70 && !pending.is_empty() {
            let (from, id) = pending.swap_remove(rng.index(pending.len()));
            let job = if rng.below(4) == 0 {
                next_job += 1;
                Some(JobRef(next_job))
            } else {
                None
            };
            Event::StealReply { from, id, job, now }
        } else if roll < 80 {
            let others: Vec<NodeId> = node
                .topology()
                .nodes()
                .map(|(n, _)| n)
                .filter(|&n| n != me)
                .collect();
            if others.is_empty() {
                Event::Idle { now }
            } else {
                Event::StealRequest {
                    from: others[rng.index(others.len())],
                    id: StealId(rng.next_u64()),
                    synchronous: rng.below(2) == 0,
                    now,
                }
            }
        } else if roll < 88 && !timers.is_empty() {
            let id = timers.swap_remove(rng.index(timers.len()));
            Event::Timer { id, now }
        } else if churn && roll < 92 {
            if let Some((node_id, cluster)) = gone.pop() {
                Event::NodeJoined {
                    node: node_id,
                    cluster,
                    now,
                }
            } else {
                let all: Vec<(NodeId, ClusterId)> =
                    node.topology().nodes().filter(|&(n, _)| n != me).collect();
                if all.is_empty() {
                    Event::Idle { now }
                } else {
                    let (n, c) = all[rng.index(all.len())];
                    gone.push((n, c));
                    // Replies from a departed node may still arrive (or not).
                    if rng.below(2) == 0 {
                        pending.retain(|&(p, _)| p != n);
                    }
                    Event::NodeLeft { node: n, now }
                }
            }
        } else {
            Event::Idle { now }
        };
        node.handle(event);
        let actions = drain(&mut node);
        for a in &actions {
            match *a {
                Action::SendStealRequest { to, id, .. } => pending.push((to, id)),
                Action::SetTimer { id, .. } => timers.push(id),
                _ => {}
            }
        }
        check(&node, &actions);
        log.extend(actions);
    }
    log
}

/// Cluster of `n` in `t` (panics if absent).
pub fn cluster(t: &Topology, n: NodeId) -> ClusterId {
    t.cluster_of(n).expect("member")
}
