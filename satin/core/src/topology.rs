//! Node and cluster identities and the cluster map.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A node (one Satin process) in the run, as numbered by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

/// A cluster: a group of nodes connected by a fast LAN; links between
/// clusters are wide-area (WAN) links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClusterId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// Which cluster every node of the run is in.
///
/// A plain value: the driver builds it (from the pool's membership, where each
/// member reports a location/cluster name) and keeps nodes informed of
/// changes with [`Event::NodeJoined`](crate::Event::NodeJoined) and
/// [`Event::NodeLeft`](crate::Event::NodeLeft). Iteration is in [`NodeId`]
/// order, so victim choices depend only on the seed and the membership.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    nodes: BTreeMap<NodeId, ClusterId>,
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Self {
        Self::default()
    }

    /// Clusters of the given sizes, nodes numbered consecutively from 0:
    /// `from_cluster_sizes(&[1, 7])` puts node 0 in cluster 0 and nodes 1..=7
    /// in cluster 1.
    pub fn from_cluster_sizes(sizes: &[usize]) -> Self {
        let mut t = Self::new();
        let mut next = 0u32;
        for (c, &size) in sizes.iter().enumerate() {
            for _ in 0..size {
                t.insert(NodeId(next), ClusterId(c as u32));
                next += 1;
            }
        }
        t
    }

    /// `clusters` clusters of `per_cluster` nodes each (see
    /// [`Topology::from_cluster_sizes`]).
    pub fn uniform(clusters: usize, per_cluster: usize) -> Self {
        Self::from_cluster_sizes(&vec![per_cluster; clusters])
    }

    /// Adds `node` to `cluster` (or moves it there); returns its previous
    /// cluster.
    pub fn insert(&mut self, node: NodeId, cluster: ClusterId) -> Option<ClusterId> {
        self.nodes.insert(node, cluster)
    }

    /// Removes `node`; returns the cluster it was in.
    pub fn remove(&mut self, node: NodeId) -> Option<ClusterId> {
        self.nodes.remove(&node)
    }

    /// The cluster of `node`, if it is a member.
    pub fn cluster_of(&self, node: NodeId) -> Option<ClusterId> {
        self.nodes.get(&node).copied()
    }

    /// Whether `node` is a member.
    pub fn contains(&self, node: NodeId) -> bool {
        self.nodes.contains_key(&node)
    }

    /// All members with their clusters, in [`NodeId`] order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, ClusterId)> + '_ {
        self.nodes.iter().map(|(&n, &c)| (n, c))
    }

    /// The members of `cluster`, in [`NodeId`] order.
    pub fn nodes_in(&self, cluster: ClusterId) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes
            .iter()
            .filter(move |(_, &c)| c == cluster)
            .map(|(&n, _)| n)
    }

    /// The distinct clusters that have at least one member, in order.
    pub fn clusters(&self) -> Vec<ClusterId> {
        let mut v: Vec<ClusterId> = self.nodes.values().copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether `a` and `b` are both members of the same cluster.
    pub fn same_cluster(&self, a: NodeId, b: NodeId) -> bool {
        match (self.cluster_of(a), self.cluster_of(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_number_nodes_consecutively() {
        let t = Topology::from_cluster_sizes(&[1, 3]);
        assert_eq!(t.len(), 4);
        assert_eq!(t.cluster_of(NodeId(0)), Some(ClusterId(0)));
        assert_eq!(t.cluster_of(NodeId(3)), Some(ClusterId(1)));
        assert_eq!(t.clusters(), vec![ClusterId(0), ClusterId(1)]);
        assert_eq!(t.nodes_in(ClusterId(1)).count(), 3);
        assert!(t.same_cluster(NodeId(1), NodeId(2)));
        assert!(!t.same_cluster(NodeId(0), NodeId(2)));
    }
}
