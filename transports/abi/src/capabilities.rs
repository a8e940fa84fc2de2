//! What a transport can do, as a bit set declared in its descriptor.

use std::fmt;

/// The capabilities a transport declares. The IPL maps the transport-related port type
/// capabilities onto these when it negotiates a transport for a port type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TransportCapabilities(pub u64);

impl TransportCapabilities {
    /// Messages are never lost or corrupted while the channel lives.
    pub const RELIABLE: Self = Self(1 << 0);
    /// Messages on one channel arrive in the order they were sent.
    pub const FIFO: Self = Self(1 << 1);
    /// Can carry messages without retransmission (datagrams), for unreliable port types.
    pub const UNRELIABLE: Self = Self(1 << 2);
    /// Received buffers are delivered in place, without a copy on the receiving side.
    pub const ZERO_COPY: Self = Self(1 << 3);
    /// Traffic is encrypted and authenticated.
    pub const ENCRYPTED: Self = Self(1 << 4);
    /// Reaches other hosts (not only this process or this host).
    pub const NETWORK: Self = Self(1 << 5);
    /// Reaches other processes on the same host.
    pub const SAME_HOST: Self = Self(1 << 6);
    /// Reaches only endpoints inside the same process.
    pub const IN_PROCESS: Self = Self(1 << 7);
    /// Native multicast (one send reaches several channels).
    pub const MULTICAST: Self = Self(1 << 8);
    /// Delivers through receiver-driven progress (`progress`): a waiting receiver should
    /// poll the transport rather than wait for a thread of the transport to deliver.
    pub const POLLED: Self = Self(1 << 9);

    /// Every named capability with its name, in bit order.
    pub const NAMED: [(Self, &'static str); 10] = [
        (Self::RELIABLE, "reliable"),
        (Self::FIFO, "fifo"),
        (Self::UNRELIABLE, "unreliable"),
        (Self::ZERO_COPY, "zero_copy"),
        (Self::ENCRYPTED, "encrypted"),
        (Self::NETWORK, "network"),
        (Self::SAME_HOST, "same_host"),
        (Self::IN_PROCESS, "in_process"),
        (Self::MULTICAST, "multicast"),
        (Self::POLLED, "polled"),
    ];

    /// The empty set.
    pub const fn empty() -> Self {
        Self(0)
    }

    /// The union of two sets.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every capability of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The capabilities of `wanted` that `self` lacks.
    pub const fn missing(self, wanted: Self) -> Self {
        Self(wanted.0 & !self.0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The names of the capabilities in the set (unknown bits are left out).
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMED
            .iter()
            .filter(|(c, _)| self.contains(*c))
            .map(|(_, n)| *n)
            .collect()
    }
}

impl std::ops::BitOr for TransportCapabilities {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl fmt::Debug for TransportCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}", self.names().join(", "))
    }
}

impl fmt::Display for TransportCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(","))
    }
}

/// Appended to a peer's address in `connect`, asks a transport with
/// [`TransportCapabilities::UNRELIABLE`] for a channel whose messages may be dropped or
/// reordered (QUIC datagrams, say). The IPL appends it for port types that ask for
/// unreliable communication; a transport without the capability never sees it.
pub const UNRELIABLE_SUFFIX: &[u8] = b"?unreliable";
