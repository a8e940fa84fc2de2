//! Statistics kept by a [`Node`](crate::Node).

use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

/// Counts for one class of traffic: intra-cluster (LAN) or inter-cluster
/// (WAN), as seen from the node that keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Steal requests this node sent (one per attempt).
    pub steal_attempts: u64,
    /// Replies to this node's steal requests that carried a job.
    pub steal_successes: u64,
    /// Steal requests answered by this node (each is a reply message sent).
    pub requests_served: u64,
    /// Results of stolen jobs sent back to their owners
    /// ([`Event::ResultReturned`](crate::Event::ResultReturned)).
    pub results_sent: u64,
}

impl Counters {
    /// Messages this node sent in this class: steal requests, steal replies
    /// and result returns.
    pub fn messages_sent(&self) -> u64 {
        self.steal_attempts + self.requests_served + self.results_sent
    }

    /// Steal messages (requests and replies) this node sent.
    pub fn steal_messages_sent(&self) -> u64 {
        self.steal_attempts + self.requests_served
    }
}

impl AddAssign<&Counters> for Counters {
    fn add_assign(&mut self, o: &Counters) {
        self.steal_attempts += o.steal_attempts;
        self.steal_successes += o.steal_successes;
        self.requests_served += o.requests_served;
        self.results_sent += o.results_sent;
    }
}

/// Everything a node counts. Times are in nanoseconds of the driver's clock
/// (the `now` values of the events), so in the simulator they are virtual.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Traffic with nodes of the own cluster.
    pub intra: Counters,
    /// Traffic with nodes of other clusters.
    pub inter: Counters,
    /// Time spent idle: from [`Event::Idle`](crate::Event::Idle) until the node
    /// had work again.
    pub idle_ns: u64,
    /// Sum of round-trip times of synchronous steal requests (the thief was
    /// blocked for these).
    pub sync_steal_ns: u64,
    /// Sum of round-trip times of asynchronous (wide-area) steal requests.
    pub async_steal_ns: u64,
    /// Steal requests given up because the victim left
    /// ([`Event::NodeLeft`](crate::Event::NodeLeft)).
    pub steals_abandoned: u64,
}

impl Stats {
    /// Total steal attempts (intra + inter).
    pub fn steal_attempts(&self) -> u64 {
        self.intra.steal_attempts + self.inter.steal_attempts
    }

    /// Total successful steals (intra + inter).
    pub fn steal_successes(&self) -> u64 {
        self.intra.steal_successes + self.inter.steal_successes
    }
}

impl AddAssign<&Stats> for Stats {
    fn add_assign(&mut self, o: &Stats) {
        self.intra += &o.intra;
        self.inter += &o.inter;
        self.idle_ns += o.idle_ns;
        self.sync_steal_ns += o.sync_steal_ns;
        self.async_steal_ns += o.async_steal_ns;
        self.steals_abandoned += o.steals_abandoned;
    }
}
