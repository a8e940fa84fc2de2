//! Port types: a validated set of port capabilities.

use std::fmt;

use ipl_serialization::Level;
use ipl_transport_abi::TransportCapabilities;

use crate::capabilities::PortCapabilities;
use crate::error::IplError;

/// The type of a send or receive port: a set of [`PortCapabilities`]. Only ports of equal
/// types connect. Create one with [`PortType::new`] from a capability set.
///
/// ```
/// use ipl::{PortType, PortCapabilities as P};
/// let t = PortType::new(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_EXPLICIT
///     | P::SERIALIZATION_DATA | P::COMMUNICATION_RELIABLE | P::COMMUNICATION_FIFO).unwrap();
/// assert!(t.has(P::RECEIVE_EXPLICIT));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PortType {
    caps: PortCapabilities,
}

impl PortType {
    /// Validates a capability set: it needs a connection pattern, a receive mode and a
    /// serialization level, and cannot be both reliable and unreliable.
    pub fn new(caps: PortCapabilities) -> Result<Self, IplError> {
        if !caps.intersects(PortCapabilities::CONNECTION_PATTERNS) {
            return Err(IplError::InvalidPortType(
                "needs a connection pattern (connection.onetoone, .onetomany, .manytoone or .manytomany)".into(),
            ));
        }
        if !caps.intersects(PortCapabilities::RECEIVE_MODES) {
            return Err(IplError::InvalidPortType(
                "needs a receive mode (receive.explicit, .poll, .timeout or .autoupcalls)".into(),
            ));
        }
        if !caps.intersects(PortCapabilities::SERIALIZATIONS) {
            return Err(IplError::InvalidPortType(
                "needs a serialization (serialization.byte, .data or .object)".into(),
            ));
        }
        if caps.contains(
            PortCapabilities::COMMUNICATION_RELIABLE | PortCapabilities::COMMUNICATION_UNRELIABLE,
        ) {
            return Err(IplError::InvalidPortType(
                "communication.reliable and communication.unreliable exclude each other".into(),
            ));
        }
        Ok(PortType { caps })
    }

    /// The capabilities of this type.
    pub fn capabilities(&self) -> PortCapabilities {
        self.caps
    }

    /// Whether the type has every capability in `c`.
    pub fn has(&self, c: PortCapabilities) -> bool {
        self.caps.contains(c)
    }

    /// The most capable serialization level the type allows.
    pub fn serialization(&self) -> Level {
        if self.has(PortCapabilities::SERIALIZATION_OBJECT) {
            Level::Object
        } else if self.has(PortCapabilities::SERIALIZATION_DATA) {
            Level::Data
        } else {
            Level::Byte
        }
    }

    /// What a transport must provide for this type, each with the port capability that
    /// asks for it (so an error can name the capability).
    pub fn transport_requirements(&self) -> Vec<(PortCapabilities, TransportCapabilities)> {
        let map = [
            (
                PortCapabilities::COMMUNICATION_RELIABLE,
                TransportCapabilities::RELIABLE,
            ),
            (
                PortCapabilities::COMMUNICATION_FIFO,
                TransportCapabilities::FIFO,
            ),
            (
                PortCapabilities::COMMUNICATION_UNRELIABLE,
                TransportCapabilities::UNRELIABLE,
            ),
            (
                PortCapabilities::COMMUNICATION_ENCRYPTED,
                TransportCapabilities::ENCRYPTED,
            ),
        ];
        map.into_iter().filter(|(p, _)| self.has(*p)).collect()
    }
}

impl fmt::Debug for PortType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PortType({})", self.caps)
    }
}

impl fmt::Display for PortType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.caps, f)
    }
}
