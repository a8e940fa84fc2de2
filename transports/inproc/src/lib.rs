//! The in-process transport: endpoints inside one process, behind the same plugin ABI
//! as every network transport.
//!
//! Several Ibis instances in one process (tests, examples, a multi-threaded program that
//! wants the IPL's port semantics) connect through it. A send copies the message's
//! slices once into a heap buffer and hands it to the receiving endpoint's host
//! callback in the sender's thread; the receiver reads that buffer in place until it
//! releases it. Messages on a channel arrive in order; nothing is lost while both
//! endpoints live. Destroying an endpoint reports all its channels as lost to the peers,
//! which is how tests model a crashed member.
//!
//! ```
//! use ipl_transport_abi::{Plugin, TransportEvents, ReceivedBuffer, ChannelClosed};
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//!
//! #[derive(Default)]
//! struct Inbox(Mutex<Vec<Vec<u8>>>);
//! impl TransportEvents for Inbox {
//!     fn channel_opened(&self, _: u64) {}
//!     fn message(&self, _: u64, buf: ReceivedBuffer) { self.0.lock().unwrap().push(buf.to_vec()) }
//!     fn channel_closed(&self, _: u64, _: ChannelClosed) {}
//! }
//!
//! let plugin = Plugin::from_static(&ipl_transport_inproc::PLUGIN).unwrap();
//! let inbox = Arc::new(Inbox::default());
//! let a = plugin.create("", Arc::new(Inbox::default())).unwrap();
//! let b = plugin.create("", inbox.clone()).unwrap();
//! let ch = a.connect(&b.local_address().unwrap(), Duration::from_secs(1)).unwrap();
//! a.send(ch, &[b"hello, ", b"world"]).unwrap();
//! assert_eq!(inbox.0.lock().unwrap()[0], b"hello, world");
//! ```

#![forbid(unsafe_code)]

mod endpoint;

pub use endpoint::InProcTransport;

ipl_transport_abi::declare_plugin!(
    /// The in-process transport's descriptor, for static linking.
    pub static PLUGIN = InProcTransport;
);

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
