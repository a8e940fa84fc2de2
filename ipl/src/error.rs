//! The IPL's error type.

use std::time::Duration;

use crate::identifiers::ReceivePortIdentifier;

/// Everything that can go wrong in the IPL. Never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IplError {
    /// A port type's capability set is inconsistent.
    #[error("invalid port type: {0}")]
    InvalidPortType(String),
    /// A builder option or an environment variable has a value that cannot be used.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// No available transport provides a capability the port type asks for.
    #[error("no transport provides capability {capability} (needed: {needed}; {detail})")]
    CapabilityUnavailable {
        /// The port capability that cannot be met, e.g. `communication.unreliable`.
        capability: &'static str,
        /// The transport capability behind it.
        needed: String,
        /// What was tried.
        detail: String,
    },
    /// The preferred transport is unknown or unavailable.
    #[error("transport {name}: {reason}")]
    TransportUnavailable {
        /// The transport's name.
        name: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// An operation needs a capability the port type (or Ibis) did not ask for.
    #[error("operation needs capability {0}, which was not requested")]
    CapabilityNotRequested(&'static str),
    /// The port type was not declared to the Ibis builder.
    #[error("port type {0} was not declared when the Ibis instance was built")]
    UndeclaredPortType(String),
    /// A port with this name exists already.
    #[error("a port named {0:?} exists already")]
    DuplicatePortName(String),
    /// Connecting failed for good.
    #[error("connecting to {target} failed: {reason}")]
    ConnectFailed {
        /// The receive port we tried.
        target: String,
        /// Why.
        reason: String,
    },
    /// Connecting did not succeed within the timeout.
    #[error("connecting to {target} timed out after {timeout:?}: {last}")]
    ConnectTimeout {
        /// The receive port we tried.
        target: String,
        /// The timeout.
        timeout: Duration,
        /// The last reason the receiver gave.
        last: String,
    },
    /// A send port of a one-to-one or many-to-one type is already connected.
    #[error("send port is already connected and its type lacks connection.onetomany")]
    AlreadyConnected,
    /// The send port has no connection to send to.
    #[error("send port is not connected")]
    NotConnected,
    /// Sending lost some connections; the message went to the rest.
    #[error("message not delivered to {}: connection lost", ports(lost))]
    ConnectionsLost {
        /// The receive ports whose connection was lost.
        lost: Vec<ReceivePortIdentifier>,
    },
    /// A receive port's connection was lost (the sender's process died, or the network
    /// failed) and no other connection is left to wait for: returned once per lost
    /// connection by an explicit receive, after the messages that arrived before.
    #[error("connection from {origin} lost: {reason}")]
    ConnectionLost {
        /// The send port of the lost connection.
        origin: Box<crate::identifiers::SendPortIdentifier>,
        /// Why it was lost.
        reason: String,
    },
    /// The port is closed.
    #[error("port closed")]
    PortClosed,
    /// A receive with timeout expired.
    #[error("receive timed out after {0:?}")]
    Timeout(Duration),
    /// Writing the message failed.
    #[error("serialization: {0}")]
    Serialization(#[from] ipl_serialization::SerError),
    /// Reading the message failed.
    #[error("malformed message: {0}")]
    Decode(#[from] ipl_serialization::DecodeError),
    /// The port type's serialization level does not allow this operation.
    #[error("serialization level {allowed:?} does not allow {needed:?} operations")]
    LevelNotAllowed {
        /// What the port type allows.
        allowed: ipl_serialization::Level,
        /// What the operation needs.
        needed: ipl_serialization::Level,
    },
    /// A wire protocol violation by a peer.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] ipl_transport_abi::TransportError),
    /// The registry failed.
    #[error(transparent)]
    Registry(#[from] ipl_registry::RegistryError),
    /// The pool secret of the environment cannot be used: `IPL_POOL_SECRET` is not 64
    /// hex digits, the `IPL_POOL_SECRET_FILE` cannot be read or others may read it, or
    /// `IPL_REGISTRY` is set without either. A local configuration error: the registry
    /// was not contacted.
    #[error("pool secret: {0}")]
    Secret(#[source] ipl_auth::AuthError),
    /// `IPL_REGISTRY` is not a usable `host:port`. A local configuration error: the
    /// registry was not contacted.
    #[error("IPL_REGISTRY={address:?} is not a registry address (host:port): {reason}")]
    RegistryAddress {
        /// The value of `IPL_REGISTRY`.
        address: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The Ibis instance has ended.
    #[error("the Ibis instance has ended")]
    Ended,
}

/// The ports' short names (`pool#1 (member-1 @ cluster)/port`, comma-separated), not
/// their debug form, which spells out every transport address byte by byte.
fn ports(ids: &[ReceivePortIdentifier]) -> String {
    let names: Vec<String> = ids.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// The IPL's result type.
pub type Result<T, E = IplError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use ipl_registry::{IbisIdentifier, MemberId, TransportAddress};

    /// A peer reached over shm publishes an address of some 80 bytes; the error
    /// names the peer's member and port, not those bytes one by one.
    #[test]
    fn a_lost_connection_names_the_peer_briefly() {
        let shm = "shm1;0123456789abcdef0123456789abcdef;net:[4026531840];00c0ffee00c0ffee;node7";
        let ibis = IbisIdentifier::new(
            MemberId(3),
            "pool",
            "c0",
            "member-2",
            vec![TransportAddress::new("shm", shm.as_bytes())],
        );
        let e = IplError::ConnectionsLost {
            lost: vec![ReceivePortIdentifier {
                ibis,
                name: "satin".into(),
            }],
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "message not delivered to pool#3 (member-2 @ c0)/satin: connection lost"
        );
    }
}
