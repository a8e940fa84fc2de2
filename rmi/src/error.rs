//! [`RmiError`]: everything that can go wrong with a remote call, as a value.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a remote call (or an RMI operation such as export, lookup or bind) failed.
///
/// It is serializable, so a remote method that itself fails with an `RmiError` (a nested
/// call that timed out, say) hands it to its caller unchanged. Remote methods may also
/// return their own error type `E`; it must implement `From<RmiError>` so that the
/// failures of the call itself can be reported in it (see the crate documentation).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RmiError {
    /// No reply arrived within the call's timeout. The call may or may not have run.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The connection to the server was lost (or the server member died or left) before
    /// the reply arrived. The call may or may not have run.
    #[error("connection to the server lost: {0}")]
    ConnectionLost(String),
    /// Connecting a stub to its object failed (no such object, member unreachable).
    #[error("cannot reach the remote object {target}: {reason}")]
    Connect {
        /// The object's port.
        target: String,
        /// Why.
        reason: String,
    },
    /// The server has no method with this number (the two sides disagree on the
    /// interface).
    #[error("the remote object has no method #{0}")]
    NoSuchMethod(u16),
    /// The request was addressed to an object of another interface.
    #[error("interface mismatch: expected {expected}, found {found}")]
    WrongInterface {
        /// The interface the caller expected.
        expected: String,
        /// The interface it found.
        found: String,
    },
    /// A request or reply could not be decoded.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// Arguments or a result could not be serialized.
    #[error("serialization failed: {0}")]
    Serialize(String),
    /// The remote method panicked; the server survived and reports it.
    #[error("the remote method panicked: {0}")]
    Panicked(String),
    /// A naming registry lookup or unbind found no object under this name.
    #[error("no object is bound to {0:?}")]
    NotBound(String),
    /// `bind` found a name already bound (use `rebind` to replace it).
    #[error("{0:?} is already bound")]
    AlreadyBound(String),
    /// The RMI runtime (or its Ibis instance) has ended.
    #[error("the RMI runtime has ended")]
    Ended,
    /// An IPL or registry operation failed.
    #[error("ipl: {0}")]
    Ipl(String),
}

impl RmiError {
    /// Whether the call failed because the server could not be reached or answered in
    /// time (as opposed to an error reported by the server).
    pub fn is_communication(&self) -> bool {
        matches!(
            self,
            RmiError::Timeout(_)
                | RmiError::ConnectionLost(_)
                | RmiError::Connect { .. }
                | RmiError::Ended
        )
    }
}

impl From<ipl::IplError> for RmiError {
    fn from(e: ipl::IplError) -> Self {
        use ipl::IplError as E;
        match e {
            E::ConnectionsLost { .. } | E::ConnectionLost { .. } | E::NotConnected => {
                RmiError::ConnectionLost(e.to_string())
            }
            E::PortClosed | E::Ended => RmiError::Ended,
            E::Serialization(s) => RmiError::Serialize(s.to_string()),
            E::Decode(d) => RmiError::Malformed(d.to_string()),
            E::ConnectFailed { target, reason } => RmiError::Connect { target, reason },
            E::ConnectTimeout {
                target,
                timeout,
                last,
            } => RmiError::Connect {
                target,
                reason: format!("no connection within {timeout:?} ({last})"),
            },
            other => RmiError::Ipl(other.to_string()),
        }
    }
}

impl From<ipl::RegistryError> for RmiError {
    fn from(e: ipl::RegistryError) -> Self {
        RmiError::Ipl(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipl::{IbisIdentifier, IplError, SendPortIdentifier};
    use ipl_registry::MemberId;

    /// A receive port whose last connection died reports `IplError::ConnectionLost`;
    /// RMI counts that as a communication failure, like a lost send connection.
    #[test]
    fn a_lost_receive_connection_is_a_communication_failure() {
        let origin = SendPortIdentifier {
            ibis: IbisIdentifier::new(MemberId(1), "pool", "c0", "member-1", vec![]),
            name: "rmi-reply".into(),
        };
        let e: RmiError = IplError::ConnectionLost {
            origin: Box::new(origin),
            reason: "reset by peer".into(),
        }
        .into();
        assert!(matches!(e, RmiError::ConnectionLost(_)), "{e:?}");
        assert!(e.is_communication());
        assert!(e.to_string().contains("reset by peer"), "{e}");
    }
}
