//! Helpers for transport authors, on top of the plugin ABI of `ipl-transport-abi`:
//!
//! - [`admission`]: the bound on connections in the handshake, the handshake deadline
//!   and the rate-limited refusal warning of an accepting endpoint;
//! - [`channels`]: the channel tables of an endpoint that carries many channels over one
//!   link per peer (channel pairing);
//! - [`gate`]: the in-flight [`Gate`] that keeps host callbacks from running after
//!   `shutdown`;
//! - [`pool`]: a [`BufferPool`] of receive buffers handed to the host;
//! - [`config`]: the `key=value` configuration text, and the keys that network
//!   transports share ([`NetConfig`]);
//! - [`interfaces`]: which of the host's interfaces to use ([`InterfaceSpec`](interfaces::InterfaceSpec));
//! - [`host`]: which host (machine and network namespace) an endpoint runs on
//!   ([`host_id`](host::host_id));
//! - [`address`]: the `ip:port,.../id/host` endpoint address ([`IpEndpoint`]);
//! - [`listen`]: where an endpoint listens and what it advertises;
//! - [`dial`]: the order to dial a peer's addresses in, and the loop that tries them;
//! - [`testing`]: an event log to wait on and endpoint set-up, for a transport's tests.
//!
//! ```
//! use ipl_transport_kit::{config::entries, IpEndpoint};
//! let a = IpEndpoint::single("127.0.0.1:4000".parse().unwrap(), 0xab);
//! assert_eq!(a.to_bytes(), b"127.0.0.1:4000/00000000000000ab");
//! assert_eq!(IpEndpoint::parse("tcp", &a.to_bytes()).unwrap(), a);
//! assert_eq!(entries("pool = p1\n# comment", "tcp").unwrap(), vec![("pool", "p1")]);
//! ```

#![forbid(unsafe_code)]

pub mod address;
/// The admission of unauthenticated connections, shared with the registry server.
pub use ipl_auth::admission;
pub mod channels;
pub mod config;
pub mod dial;
pub mod gate;
pub mod host;
pub mod interfaces;
pub mod listen;
pub mod park;
pub mod pool;
pub mod testing;

pub use address::IpEndpoint;
pub use config::NetConfig;
pub use gate::Gate;
pub use pool::BufferPool;

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
