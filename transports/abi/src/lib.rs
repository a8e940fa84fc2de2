//! The stable, versioned C ABI between the IPL and its transport plugins.
//!
//! A transport is a plugin: a `cdylib` found at run time, or the same code linked in
//! statically. The IPL and a plugin share nothing but the `#[repr(C)]` types of
//! [`ffi`]: a [`PluginDescriptor`](ffi::PluginDescriptor) (magic number, ABI version, name,
//! version, [`TransportCapabilities`], priority) and a vtable of `extern "C"` functions.
//!
//! The model is deliberately small, so that TCP, QUIC, shared memory and RDMA fit it:
//! - an **instance** is an endpoint with an opaque **address** (published in the
//!   registry);
//! - `connect(address)` opens a bidirectional **channel**; the peer is told
//!   (`channel_opened`). A transport may carry many channels over one connection per
//!   pair of endpoints (channel pairing);
//! - `send(channel, slices)` sends one message given as a scatter/gather list that is
//!   only borrowed for the call (so arrays go to `writev` or a ring without an extra
//!   copy);
//! - a received message is a buffer **owned by the transport** until the host releases
//!   it ([`ReceivedBuffer`] releases on drop), so shared-memory and RDMA transports can
//!   deliver in place;
//! - a lost or closed channel is reported (`channel_closed`).
//!
//! Plugin authors implement the safe [`TransportPlugin`] trait and declare a descriptor
//! with [`declare_plugin!`]; a plugin library exports it with [`export_plugin!`]. Panics
//! never cross the boundary: every trampoline catches them and returns
//! [`Status::PANIC`](ffi::Status::PANIC). The host validates a descriptor
//! ([`Plugin::from_raw`]) before calling anything in it, and drives an endpoint through
//! [`TransportInstance`]. Plugin libraries are found and opened at run time by the
//! [`loader`] ([`discover_default`] scans `IPL_PLUGIN_PATH` and the executable's
//! directory for `libipl_plugin_<name>.so`).
//!
//! ```
//! use ipl_transport_abi::{TransportCapabilities as C, TransportPlugin, HostSink, TransportError};
//! use std::time::Duration;
//!
//! struct Null;
//! impl TransportPlugin for Null {
//!     const NAME: &'static str = "null";
//!     const VERSION: &'static str = "0.1.0";
//!     const CAPABILITIES: C = C::RELIABLE;
//!     const PRIORITY: i32 = 0;
//!     fn availability() -> Result<(), String> { Err("this transport goes nowhere".into()) }
//!     fn create(_: &str, _: HostSink) -> Result<Self, TransportError> { Ok(Null) }
//!     fn local_address(&self) -> Vec<u8> { Vec::new() }
//!     fn connect(&self, _: &[u8], _: Duration) -> Result<u64, TransportError> {
//!         Err(TransportError::Refused("nobody here".into()))
//!     }
//!     fn send(&self, _: u64, _: &[&[u8]]) -> Result<(), TransportError> { Ok(()) }
//!     fn close_channel(&self, _: u64) {}
//!     fn shutdown(&self) {}
//! }
//! ipl_transport_abi::declare_plugin!(static NULL_PLUGIN = Null;);
//!
//! let p = ipl_transport_abi::Plugin::from_static(&NULL_PLUGIN).unwrap();
//! assert_eq!(p.name(), "null");
//! assert_eq!(p.availability().unwrap_err(), "this transport goes nowhere");
//! ```

pub mod capabilities;
pub mod error;
pub mod ffi;
pub mod host;
pub mod loader;
pub mod plugin;

pub use capabilities::{TransportCapabilities, UNRELIABLE_SUFFIX};
pub use error::{LoadError, TransportError};
pub use host::{
    ChannelClosed, FastPath, Plugin, ReceivedBuffer, TransportEvents, TransportInstance,
};
pub use loader::{
    discover, discover_default, load_file, search_path, Discovery, PLUGIN_PATH_VAR, PLUGIN_PREFIX,
};
pub use plugin::{ChannelSink, FastChannel, HostSink, PluginBuffer, TransportPlugin};

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
