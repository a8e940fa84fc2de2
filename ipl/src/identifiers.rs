//! Identifiers of ports: the member they live on plus a name.

use std::fmt;

use ipl_registry::IbisIdentifier;

/// Names a send port: its Ibis instance and its name (unique within the instance).
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct SendPortIdentifier {
    /// The member the port lives on.
    pub ibis: IbisIdentifier,
    /// The port's name.
    pub name: String,
}

/// Names a receive port: its Ibis instance and its name (unique within the instance).
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct ReceivePortIdentifier {
    /// The member the port lives on.
    pub ibis: IbisIdentifier,
    /// The port's name.
    pub name: String,
}

impl fmt::Display for SendPortIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ibis, self.name)
    }
}

impl fmt::Display for ReceivePortIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ibis, self.name)
    }
}
