//! The RDMA transport: IPL channels over InfiniBand/RoCE verbs (libibverbs, through
//! `rdma-sys`), for clusters with RDMA hardware.
//!
//! **Availability.** The plugin loads everywhere: nothing links against libibverbs.
//! [`availability`](ipl_transport_abi::TransportPlugin::availability) opens
//! `libibverbs.so.1` at run time (libloading; `IPL_RDMA_LIBRARY` names another) and calls
//! `ibv_get_device_list`. Without the library it reports `no libibverbs found (...)`,
//! without a device `no RDMA device (...)`, and with devices but a build without the data
//! path `... no verbs data path (build with the cargo feature verbs)`. The IPL then moves
//! on to the next transport; `create` fails with
//! [`Unavailable`](ipl_transport_abi::TransportError::Unavailable) and the same reason.
//!
//! **Data path.** Behind the cargo feature `verbs` (off by default, since `rdma-sys`
//! needs libibverbs-dev, librdmacm-dev and libclang to build). See the README for what it
//! contains and what was and was not run.
//!
//! ```
//! use ipl_transport_abi::Plugin;
//! let p = Plugin::from_static(&ipl_transport_rdma::PLUGIN).unwrap();
//! assert_eq!(p.name(), "rdma");
//! if let Err(why) = p.availability() {
//!     // E.g. "no libibverbs found (libibverbs.so.1: ...)" or "no RDMA device (...)".
//!     println!("rdma unavailable: {why}");
//! }
//! ```

mod endpoint;
pub mod probe;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use endpoint::RdmaTransport;
pub use probe::Unavailable;

ipl_transport_abi::declare_plugin!(
    /// The RDMA transport's descriptor, for static linking.
    pub static PLUGIN = RdmaTransport;
);

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
