//! The capability vocabulary: what an Ibis instance and a port type may ask for.

use std::fmt;

macro_rules! capability_set {
    (
        $(#[$meta:meta])* $name:ident : $repr:ty {
            $( $(#[$cm:meta])* $cap:ident = $bit:expr, $text:literal; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
        pub struct $name(pub $repr);

        impl $name {
            $( $(#[$cm])* pub const $cap: Self = Self(1 << $bit); )*

            /// Every capability with its name, in bit order.
            pub const ALL: &'static [(Self, &'static str)] = &[ $( (Self::$cap, $text), )* ];

            /// The empty set.
            pub const fn empty() -> Self { Self(0) }

            /// The union of two sets.
            pub const fn union(self, other: Self) -> Self { Self(self.0 | other.0) }

            /// Whether every capability in `other` is in `self`.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }

            /// Whether the two sets share a capability.
            pub const fn intersects(self, other: Self) -> bool { self.0 & other.0 != 0 }

            /// The names of the capabilities in the set.
            pub fn names(self) -> Vec<&'static str> {
                Self::ALL.iter().filter(|(c, _)| self.contains(*c)).map(|(_, n)| *n).collect()
            }

            /// Looks a capability up by its name.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().find(|(_, n)| *n == name).map(|(c, _)| *c)
            }
        }

        impl std::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self { self.union(rhs) }
        }

        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) { *self = self.union(rhs) }
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
    };
}

capability_set! {
    /// Capabilities of a port type (the Java IPL's `PortType` capabilities). A port type
    /// is a set of these; only ports of equal types connect.
    PortCapabilities: u32 {
        /// One send port connects to one receive port.
        CONNECTION_ONE_TO_ONE = 0, "connection.onetoone";
        /// One send port may connect to several receive ports (multicast).
        CONNECTION_ONE_TO_MANY = 1, "connection.onetomany";
        /// Several send ports may connect to one receive port.
        CONNECTION_MANY_TO_ONE = 2, "connection.manytoone";
        /// Several to several.
        CONNECTION_MANY_TO_MANY = 3, "connection.manytomany";
        /// New-connection and lost-connection upcalls.
        CONNECTION_UPCALLS = 4, "connection.upcalls";
        /// Blocking explicit receive.
        RECEIVE_EXPLICIT = 5, "receive.explicit";
        /// Non-blocking poll for a message.
        RECEIVE_POLL = 6, "receive.poll";
        /// Explicit receive with a timeout.
        RECEIVE_TIMEOUT = 7, "receive.timeout";
        /// Messages delivered by upcalls, without polling.
        RECEIVE_AUTO_UPCALLS = 8, "receive.autoupcalls";
        /// Messages of one connection arrive in the order sent.
        COMMUNICATION_FIFO = 9, "communication.fifo";
        /// Messages carry a per-send-port sequence number.
        COMMUNICATION_NUMBERED = 10, "communication.numbered";
        /// No message is lost while the connection lives.
        COMMUNICATION_RELIABLE = 11, "communication.reliable";
        /// Messages may be lost (datagram transports); needs a transport that offers it.
        COMMUNICATION_UNRELIABLE = 12, "communication.unreliable";
        /// Only raw bytes may be written.
        SERIALIZATION_BYTE = 13, "serialization.byte";
        /// Primitives and primitive arrays.
        SERIALIZATION_DATA = 14, "serialization.data";
        /// serde objects as well.
        SERIALIZATION_OBJECT = 15, "serialization.object";
        /// Traffic must be encrypted.
        COMMUNICATION_ENCRYPTED = 16, "communication.encrypted";
    }
}

capability_set! {
    /// Capabilities of an Ibis instance: what it needs from the registry.
    IbisCapabilities: u32 {
        /// Join, leave and died events.
        MEMBERSHIP = 0, "membership";
        /// Membership events in the same order at every member.
        MEMBERSHIP_TOTALLY_ORDERED = 1, "membership.totallyordered";
        /// Elections.
        ELECTIONS = 2, "elections";
        /// Signals to members.
        SIGNALS = 3, "signals";
        /// The pool has a fixed size and closes when all have joined.
        CLOSED_WORLD = 4, "closedworld";
        /// Members may join and leave while the pool runs.
        MALLEABLE = 5, "malleable";
        /// The pool can be terminated.
        TERMINATION = 6, "termination";
    }
}

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
