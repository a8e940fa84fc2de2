//! The Ibis Portability Layer (IPL): typed, connection-oriented send and receive ports
//! for grid programs, over transports that are plugins.
//!
//! The concepts are the thesis's (ch. 7) and the Java IPL's:
//! - an [`Ibis`] instance is one member of a **pool**, built by [`IbisBuilder`] from
//!   [`IbisCapabilities`] and the [`PortType`]s it will use; it joins the pool's
//!   [`Registry`] (membership events, elections, signals, closed world, termination);
//! - a [`PortType`] is a set of [`PortCapabilities`] (connection pattern, receive mode,
//!   communication properties, serialization level); only ports of equal types
//!   connect, and each type is **negotiated** to a transport plugin that provides its
//!   communication properties, or the error names the capability none provides;
//! - a [`SendPort`] connects to one or more [`ReceivePort`]s (multicast when several;
//!   many senders may share a receiver); a [`WriteMessage`] is written and `finish`ed;
//!   a [`ReadMessage`] is delivered by explicit receive, poll, receive with timeout,
//!   async receive, or upcall, and the next one only after it is finished;
//! - lost connections are reported (lists and upcalls), never hidden.
//!
//! The RPC pattern of thesis figure 7.4, in one process over the in-process transport:
//!
//! ```
//! use ipl::{Ibis, PortType, PortCapabilities as P, EmbeddedRegistry};
//! use std::time::Duration;
//!
//! let t = PortType::new(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_EXPLICIT
//!     | P::SERIALIZATION_DATA | P::COMMUNICATION_RELIABLE | P::COMMUNICATION_FIFO)?;
//! let reg = EmbeddedRegistry::new();
//! let server = Ibis::builder().pool("doc").registry(&reg).port_type(t).build()?;
//! let client = Ibis::builder().pool("doc").registry(&reg).port_type(t).build()?;
//!
//! let requests = server.create_receive_port(&t, "requests")?;
//! requests.enable_connections();
//! let replies = client.create_receive_port(&t, "replies")?;
//! replies.enable_connections();
//!
//! let mut to_server = client.create_send_port(&t, "to-server")?;
//! to_server.connect(requests.identifier(), Duration::from_secs(5))?;
//! let mut m = to_server.new_message()?;
//! m.write_i32(20)?;
//! m.finish()?;
//!
//! let mut req = requests.receive()?;
//! let x = req.read_i32()?;
//! let client_id = req.origin().ibis.clone();
//! req.finish();
//! let mut to_client = server.create_send_port(&t, "to-client")?;
//! to_client.connect_to(&client_id, "replies", Duration::from_secs(5))?;
//! let mut m = to_client.new_message()?;
//! m.write_i32(x + 22)?;
//! m.finish()?;
//!
//! assert_eq!(replies.receive()?.read_i32()?, 42);
//! # Ok::<(), ipl::IplError>(())
//! ```

#![forbid(unsafe_code)]

pub mod capabilities;
mod channel_map;
pub mod config;
pub mod error;
mod ibis;
pub mod identifiers;
mod lane;
pub mod launcher;
mod message;
pub mod negotiate;
mod port_protocol;
pub mod port_type;
pub mod protocol;
mod receive_port;
mod receive_wait;
mod send_port;

pub use capabilities::{IbisCapabilities, PortCapabilities};
pub use error::{IplError, Result};
pub use ibis::{
    default_plugins, default_registry, register_static_plugin, static_plugins, Ibis, IbisBuilder,
    ReceivePortBuilder,
};
pub use identifiers::{ReceivePortIdentifier, SendPortIdentifier};
pub use ipl_registry::{
    EmbeddedRegistry, Event, IbisIdentifier, Registry, RegistryError, RegistryEventHandler,
};
pub use ipl_serialization::{ArraySpan, Level, MessageReader, MessageWriter, Primitive};
pub use ipl_transport_abi::{Plugin, TransportCapabilities};
pub use message::{ReadMessage, WriteMessage};
pub use port_type::PortType;
pub use receive_port::{Disconnect, MessageUpcall, ReceivePort, ReceivePortConnectUpcall};
pub use send_port::{SendPort, SendPortDisconnectUpcall};

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
