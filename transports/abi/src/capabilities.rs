//! What a transport can do, as a bit set declared in its descriptor.

use std::fmt;

/// The capabilities a transport declares. The IPL maps the transport-related port type
/// capabilities onto these when it negotiates a transport for a port type.
///
/// A transparent `u64`: the descriptor carries the bits as they are (`.0`), so the set
/// crosses the plugin boundary unchanged. The set operations (`union`, `contains`,
/// `difference`, `|`, iteration) come from [`bitflags`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct TransportCapabilities(pub u64);

bitflags::bitflags! {
    impl TransportCapabilities: u64 {
        /// Messages are never lost or corrupted while the channel lives.
        const RELIABLE = 1 << 0;
        /// Messages on one channel arrive in the order they were sent.
        const FIFO = 1 << 1;
        /// Can carry messages without retransmission (datagrams), for unreliable port
        /// types.
        const UNRELIABLE = 1 << 2;
        /// Received buffers are delivered in place, without a copy on the receiving side.
        const ZERO_COPY = 1 << 3;
        /// Traffic is encrypted and authenticated.
        const ENCRYPTED = 1 << 4;
        /// Reaches other hosts (not only this process or this host).
        const NETWORK = 1 << 5;
        /// Reaches other processes on the same host.
        const SAME_HOST = 1 << 6;
        /// Reaches only endpoints inside the same process.
        const IN_PROCESS = 1 << 7;
        /// Native multicast (one send reaches several channels).
        const MULTICAST = 1 << 8;
        /// Delivers through receiver-driven progress (`progress`): a waiting receiver
        /// should poll the transport rather than wait for a thread of the transport to
        /// deliver.
        const POLLED = 1 << 9;
    }
}

impl TransportCapabilities {
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

    /// The capabilities of `wanted` that `self` lacks.
    pub const fn missing(self, wanted: Self) -> Self {
        wanted.difference(self)
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

#[cfg(test)]
mod tests {
    use super::TransportCapabilities as C;

    #[test]
    fn bits_names_and_set_operations() {
        assert_eq!(C::RELIABLE.0, 1);
        assert_eq!(C::POLLED.0, 1 << 9);
        assert_eq!(std::mem::size_of::<C>(), 8);
        let s = C::RELIABLE | C::FIFO;
        assert!(s.contains(C::FIFO));
        assert!(!s.contains(C::NETWORK));
        assert_eq!(s.missing(C::FIFO | C::NETWORK), C::NETWORK);
        assert_eq!(s.names(), vec!["reliable", "fifo"]);
        assert_eq!(format!("{s:?}"), "{reliable, fifo}");
        assert_eq!(s.to_string(), "reliable,fifo");
        // Unknown bits (a newer plugin) are kept, and left out of the names.
        let u = C(1 << 40 | 1);
        assert_eq!(u.0, 1 << 40 | 1);
        assert_eq!(u.names(), vec!["reliable"]);
        assert!(C::empty().is_empty());
    }
}
