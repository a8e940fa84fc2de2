//! Remote method invocation over the Ibis Portability Layer (thesis ch. 3 and 7.3).
//!
//! A remote interface is a Rust trait marked [`#[remote]`](remote). Its methods take
//! `&self` and serde arguments and return `Result<T, E>`; the macro generates a stub
//! (`FooStub`, client side: implements the trait by calls), a skeleton
//! (`FooSkeleton<T>`, server side), and a serializable reference type
//! (`FooRef = RemoteRef<dyn Foo>`).
//!
//! - **Runtime**: [`Rmi`] runs on one [`ipl::Ibis`] built with [`port_type`] (and
//!   [`CAPABILITIES`] for naming); [`ibis_builder`] starts such a builder.
//! - **Channels** (thesis fig. 7.4): each exported object has its own receive port with
//!   an upcall (its skeleton); each stub owns a send port connected to it; replies go to
//!   the one reply port of the calling runtime, tagged with call ids, over a send port
//!   per (server, client) pair. Whatever transport the IPL negotiates carries them.
//! - **Calls**: blocking (the trait method), async (`<method>_async`, a
//!   [`PendingCall`] future, request sent at once), and one-way (`#[oneway]`). The caller
//!   receives its own reply from the reply port (no reply thread, no thread switch).
//! - **Errors are typed**: the method's error type `E` carries the application's errors;
//!   `E: From<RmiError>` carries the call's own failures: [`RmiError::Timeout`] (every
//!   call has one, [`RmiBuilder::timeout`], [`Stub::with_timeout`]),
//!   [`RmiError::ConnectionLost`] (the IPL reported the connection lost, or the member
//!   gone), [`RmiError::Panicked`], [`RmiError::Malformed`], ... Using `RmiError` itself
//!   as `E` is the simple choice.
//! - **Concurrency**: [`Rmi::export`] serves calls concurrently on a worker pool (the
//!   object is `Sync`); methods marked `#[nonblocking]` run in the receiving thread with
//!   no switch (thesis 3.3.3); [`Rmi::export_serial`] runs all calls one at a time in
//!   the receiving thread (objects that are not `Sync`).
//! - **References**: [`RemoteRef`] is serializable: pass it as an argument or result,
//!   turn it into a stub with [`Rmi::stub`].
//! - **Naming**: [`Rmi::bind`], [`Rmi::rebind`], [`Rmi::unbind`], [`Rmi::lookup`],
//!   [`Rmi::list`], served by the member elected `ibis-rmi-naming` (see [`naming`]).
//!
//! ```
//! use ibis_rmi::{remote, Rmi, RmiError};
//!
//! #[remote]
//! pub trait Echo {
//!     fn echo(&self, s: String) -> Result<String, RmiError>;
//! }
//!
//! struct Server;
//! impl Echo for Server {
//!     fn echo(&self, s: String) -> Result<String, RmiError> {
//!         Ok(s)
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let reg = ipl::EmbeddedRegistry::new();
//! let a = Rmi::start(ibis_rmi::ibis_builder()?.pool("echo").registry(&reg).build()?)?;
//! let b = Rmi::start(ibis_rmi::ibis_builder()?.pool("echo").registry(&reg).build()?)?;
//! let r: EchoRef = a.export(EchoSkeleton::new(Server))?;
//! let stub = b.stub(&r)?;
//! assert_eq!(stub.echo("hi".into())?, "hi");
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

extern crate self as ibis_rmi;

mod calls;
mod client;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod naming;
pub mod reference;
mod runtime;
mod server;
pub mod skeleton;
pub mod stub;
pub mod wire;
mod workers;

pub use error::RmiError;
pub use ibis_rmi_macros::remote;
pub use reference::{RawRef, RemoteInterface, RemoteRef, Stub};
pub use runtime::{ibis_builder, port_type, Rmi, RmiBuilder, CAPABILITIES};
pub use skeleton::{Invocation, Outcome, Skeleton};
pub use stub::{Args, PendingCall, RemoteResult, StubCore, WriteArgs};

/// What the generated code uses; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::skeleton::{
        array_at, outcome, read_args, read_array, read_array_span, unit_outcome,
    };
    pub use crate::stub::{args, StubCore};
    pub use ipl::{ReadMessage, WriteMessage};
}

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;

/// The README of `ibis-rmi-macros`, run here because its example needs this crate.
#[cfg(doctest)]
#[doc = include_str!("../macros/README.md")]
pub struct MacrosReadmeDoctest;
