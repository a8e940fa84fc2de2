//! Identities of pool members: [`MemberId`], [`TransportAddress`] and
//! [`IbisIdentifier`].

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

/// The number of a member within its pool.
///
/// Assigned by the registry core in join order, starting at 0; never reused
/// within one pool, so a smaller id always means an earlier join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MemberId(pub u64);

impl MemberId {
    /// The raw number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// An opaque endpoint address of one transport, published by a member so that
/// others can connect to it.
///
/// The registry never interprets `address`; only the transport named by
/// `transport` knows its format.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TransportAddress {
    /// Name of the transport that understands `address` (e.g. `"tcp"`, `"inproc"`).
    pub transport: String,
    /// The transport-specific endpoint address.
    pub address: Vec<u8>,
}

impl TransportAddress {
    /// Creates an address for `transport`.
    pub fn new(transport: impl Into<String>, address: impl Into<Vec<u8>>) -> Self {
        Self {
            transport: transport.into(),
            address: address.into(),
        }
    }
}

/// The identity of one member (one Ibis instance) of a pool.
///
/// Two identifiers are equal (and hash and order alike) iff they have the same
/// pool and the same [`MemberId`]; the other fields are descriptive. Ordering is
/// by pool name, then by id (i.e. join order within a pool).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IbisIdentifier {
    id: MemberId,
    pool: String,
    cluster: String,
    name: String,
    addresses: Vec<TransportAddress>,
}

impl IbisIdentifier {
    /// Creates an identifier. Normally only a registry core does this (ids are
    /// assigned by the core); drivers and tests may use it to rebuild one.
    pub fn new(
        id: MemberId,
        pool: impl Into<String>,
        cluster: impl Into<String>,
        name: impl Into<String>,
        addresses: Vec<TransportAddress>,
    ) -> Self {
        Self {
            id,
            pool: pool.into(),
            cluster: cluster.into(),
            name: name.into(),
            addresses,
        }
    }

    /// The member's number, unique within its pool and assigned in join order.
    pub fn id(&self) -> MemberId {
        self.id
    }

    /// The name of the pool this member belongs to.
    pub fn pool(&self) -> &str {
        &self.pool
    }

    /// The member's cluster (location) name, used by cluster-aware load balancing.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The member's human-readable label (e.g. `"member-3"` if none was given).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The transport endpoints this member published at join time.
    pub fn addresses(&self) -> &[TransportAddress] {
        &self.addresses
    }

    /// The published address for `transport`, if any.
    pub fn address_for(&self, transport: &str) -> Option<&TransportAddress> {
        self.addresses.iter().find(|a| a.transport == transport)
    }
}

impl PartialEq for IbisIdentifier {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.pool == other.pool
    }
}

impl Eq for IbisIdentifier {}

impl Hash for IbisIdentifier {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pool.hash(state);
        self.id.hash(state);
    }
}

impl PartialOrd for IbisIdentifier {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IbisIdentifier {
    fn cmp(&self, other: &Self) -> Ordering {
        self.pool
            .cmp(&other.pool)
            .then_with(|| self.id.cmp(&other.id))
    }
}

impl fmt::Display for IbisIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{} ({} @ {})",
            self.pool, self.id, self.name, self.cluster
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn equality_is_by_pool_and_id() {
        let a = IbisIdentifier::new(MemberId(1), "p", "c1", "a", vec![]);
        let b = IbisIdentifier::new(
            MemberId(1),
            "p",
            "c2",
            "b",
            vec![TransportAddress::new("tcp", vec![1, 2])],
        );
        let c = IbisIdentifier::new(MemberId(1), "q", "c1", "a", vec![]);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let set: HashSet<_> = [a.clone(), b, c].into_iter().collect();
        assert_eq!(set.len(), 2);
        assert!(a < IbisIdentifier::new(MemberId(2), "p", "", "", vec![]));
        assert!(a.to_string().contains("p#1"));
    }
}
