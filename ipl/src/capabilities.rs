//! The capability vocabulary: what an Ibis instance and a port type may ask for.
//!
//! Both sets are [`bitflags`]: the usual set operations (`|`, `&`, `-`, `contains`,
//! `intersects`, `iter`), plus the textual name of each capability (the Java IPL's,
//! e.g. `receive.poll`), which `from_name`, `iter_names`, [`names`](PortCapabilities::names)
//! and `Display` use.

use std::fmt;

/// Capabilities of a port type (the Java IPL's `PortType` capabilities). A port type
/// is a set of these; only ports of equal types connect.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct PortCapabilities(pub u32);

bitflags::bitflags! {
    impl PortCapabilities: u32 {
        /// One send port connects to one receive port.
        #[bitflags(flag_name = "connection.onetoone")]
        const CONNECTION_ONE_TO_ONE = 1 << 0;
        /// One send port may connect to several receive ports (multicast).
        #[bitflags(flag_name = "connection.onetomany")]
        const CONNECTION_ONE_TO_MANY = 1 << 1;
        /// Several send ports may connect to one receive port.
        #[bitflags(flag_name = "connection.manytoone")]
        const CONNECTION_MANY_TO_ONE = 1 << 2;
        /// Several to several.
        #[bitflags(flag_name = "connection.manytomany")]
        const CONNECTION_MANY_TO_MANY = 1 << 3;
        /// New-connection and lost-connection upcalls.
        #[bitflags(flag_name = "connection.upcalls")]
        const CONNECTION_UPCALLS = 1 << 4;
        /// Blocking explicit receive.
        #[bitflags(flag_name = "receive.explicit")]
        const RECEIVE_EXPLICIT = 1 << 5;
        /// Non-blocking poll for a message.
        #[bitflags(flag_name = "receive.poll")]
        const RECEIVE_POLL = 1 << 6;
        /// Explicit receive with a timeout.
        #[bitflags(flag_name = "receive.timeout")]
        const RECEIVE_TIMEOUT = 1 << 7;
        /// Messages delivered by upcalls, without polling.
        #[bitflags(flag_name = "receive.autoupcalls")]
        const RECEIVE_AUTO_UPCALLS = 1 << 8;
        /// Messages of one connection arrive in the order sent.
        #[bitflags(flag_name = "communication.fifo")]
        const COMMUNICATION_FIFO = 1 << 9;
        /// Messages carry a per-send-port sequence number.
        #[bitflags(flag_name = "communication.numbered")]
        const COMMUNICATION_NUMBERED = 1 << 10;
        /// No message is lost while the connection lives.
        #[bitflags(flag_name = "communication.reliable")]
        const COMMUNICATION_RELIABLE = 1 << 11;
        /// Messages may be lost (datagram transports); needs a transport that offers it.
        #[bitflags(flag_name = "communication.unreliable")]
        const COMMUNICATION_UNRELIABLE = 1 << 12;
        /// Only raw bytes may be written.
        #[bitflags(flag_name = "serialization.byte")]
        const SERIALIZATION_BYTE = 1 << 13;
        /// Primitives and primitive arrays.
        #[bitflags(flag_name = "serialization.data")]
        const SERIALIZATION_DATA = 1 << 14;
        /// serde objects as well.
        #[bitflags(flag_name = "serialization.object")]
        const SERIALIZATION_OBJECT = 1 << 15;
        /// Traffic must be encrypted.
        #[bitflags(flag_name = "communication.encrypted")]
        const COMMUNICATION_ENCRYPTED = 1 << 16;
    }
}

/// Capabilities of an Ibis instance: what it needs from the registry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct IbisCapabilities(pub u32);

bitflags::bitflags! {
    impl IbisCapabilities: u32 {
        /// Join, leave and died events.
        #[bitflags(flag_name = "membership")]
        const MEMBERSHIP = 1 << 0;
        /// Membership events in the same order at every member.
        #[bitflags(flag_name = "membership.totallyordered")]
        const MEMBERSHIP_TOTALLY_ORDERED = 1 << 1;
        /// Elections.
        #[bitflags(flag_name = "elections")]
        const ELECTIONS = 1 << 2;
        /// Signals to members.
        #[bitflags(flag_name = "signals")]
        const SIGNALS = 1 << 3;
        /// The pool has a fixed size and closes when all have joined.
        #[bitflags(flag_name = "closedworld")]
        const CLOSED_WORLD = 1 << 4;
        /// Members may join and leave while the pool runs.
        #[bitflags(flag_name = "malleable")]
        const MALLEABLE = 1 << 5;
        /// The pool can be terminated.
        #[bitflags(flag_name = "termination")]
        const TERMINATION = 1 << 6;
    }
}

/// The text forms of a capability set: `Debug` as `Type{a, b}`, `Display` as `a,b`, and
/// `names()`, all with the capabilities' textual names in bit order.
macro_rules! textual {
    ($($name:ident),*) => {$(
        impl $name {
            /// The textual names of the capabilities in the set, in bit order.
            pub fn names(self) -> Vec<&'static str> {
                self.iter_names().map(|(n, _)| n).collect()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{{{}}}", stringify!($name), self.names().join(", "))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.names().join(","))
            }
        }
    )*};
}

textual!(PortCapabilities, IbisCapabilities);

impl PortCapabilities {
    /// The connection patterns.
    pub const CONNECTION_PATTERNS: Self = Self::CONNECTION_ONE_TO_ONE
        .union(Self::CONNECTION_ONE_TO_MANY)
        .union(Self::CONNECTION_MANY_TO_ONE)
        .union(Self::CONNECTION_MANY_TO_MANY);

    /// The serialization levels.
    pub const SERIALIZATIONS: Self = Self::SERIALIZATION_BYTE
        .union(Self::SERIALIZATION_DATA)
        .union(Self::SERIALIZATION_OBJECT);

    /// The receive modes.
    pub const RECEIVE_MODES: Self = Self::RECEIVE_EXPLICIT
        .union(Self::RECEIVE_POLL)
        .union(Self::RECEIVE_TIMEOUT)
        .union(Self::RECEIVE_AUTO_UPCALLS);

    /// Whether a send port of this type may connect to several receive ports.
    pub fn allows_many_receivers(self) -> bool {
        self.intersects(Self::CONNECTION_ONE_TO_MANY.union(Self::CONNECTION_MANY_TO_MANY))
    }

    /// Whether a receive port of this type may accept several senders.
    pub fn allows_many_senders(self) -> bool {
        self.intersects(Self::CONNECTION_MANY_TO_ONE.union(Self::CONNECTION_MANY_TO_MANY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textual_names_parse_and_print() {
        type P = PortCapabilities;
        assert_eq!(P::from_name("receive.poll"), Some(P::RECEIVE_POLL));
        assert_eq!(P::from_name("RECEIVE_POLL"), None);
        assert_eq!(
            IbisCapabilities::from_name("closedworld"),
            Some(IbisCapabilities::CLOSED_WORLD)
        );
        let c = P::SERIALIZATION_DATA | P::CONNECTION_ONE_TO_ONE;
        assert_eq!(c.names(), vec!["connection.onetoone", "serialization.data"]);
        assert_eq!(c.to_string(), "connection.onetoone,serialization.data");
        assert_eq!(
            format!("{c:?}"),
            "PortCapabilities{connection.onetoone, serialization.data}"
        );
    }

    #[test]
    fn the_wire_form_is_the_bits() {
        // A port type travels in the connect handshake: its encoding is the u32 itself.
        let c = PortCapabilities::RECEIVE_POLL | PortCapabilities::CONNECTION_ONE_TO_ONE;
        let bytes = postcard::to_stdvec(&c).unwrap();
        assert_eq!(bytes, postcard::to_stdvec(&c.bits()).unwrap());
        assert_eq!(postcard::from_bytes::<PortCapabilities>(&bytes).unwrap(), c);
    }
}
