//! The shared-memory transport: processes on one host exchange messages through rings
//! in shared memory, with one copy on send (the sender copies its scatter/gather
//! slices straight into the ring) and none on receive (the host gets a buffer that
//! points into the ring and gives the space back when it releases it).
//!
//! **Model** (RDMA-like, so that the rdma transport can share the protocol): a
//! connection between two endpoints is one *registered region* (a sealed memfd mapped
//! by both) holding one ring per direction (`layout`). The sender writes slots and
//! publishes its `head`; the receiver turns published slots into *completions*
//! ("message on channel c at offset o, length l", `consumer`); *credits* are the
//! ring space the receiver has reclaimed (`tail`, `producer`), advanced in ring
//! order over slots released in any order (`reclaim`). These three are pure state
//! machines; `ring` is the thin driver over the mapping (`region`, the only
//! module that touches shared memory).
//!
//! **Setup**: each endpoint listens on a Unix socket in the abstract namespace named
//! after its random id (nothing on disk). `connect` dials it, runs the pool-secret
//! handshake of [`ipl_auth`] in both directions, then passes the segment with
//! `SCM_RIGHTS` (`handshake`). All channels between two endpoints share one
//! connection, tagged by channel id. The address names the host (boot id, network
//! namespace, host name); `connect` to another host fails at once with
//! `Unavailable`, so the IPL tries its next transport.
//!
//! **Delivery**: receiver-driven. [`progress`](ipl_transport_abi::TransportPlugin::progress)
//! checks the rings (a few loads when nothing arrived) and delivers on the calling
//! thread; one consumer per ring at a time (a try-lock). An endpoint thread delivers
//! when nobody polls: it sleeps in `poll` on the connection sockets, after setting a
//! "sleeping" flag in the ring and re-checking it; a sender writes a wake-up byte only
//! when it finds the flag set, and (with `shm.wait=spin_block`, the default) only
//! after giving a polling receiver `shm.spin_us` to take the slot itself (the IPL's
//! receive spin). `spin` (the thread never sleeps) and `block` (wake at once) are the
//! alternatives.
//!
//! **Flow control**: a sender without credits spins for `shm.spin_us`, then sets a
//! "waiting" flag and sleeps until the receiver's release wakes it (or the peer dies,
//! or `shm.send_timeout_ms` passes: a `Timeout` error). A send that fails after part of
//! a fragmented message is in the ring ends the connection (both sides see its channels
//! lost): the peer would otherwise take what follows for the rest of that message. Messages above a quarter of
//! the ring are sent in fragments and reassembled into an owned buffer (a copy on
//! receive for huge messages only). When unreleased messages hold half the ring, further
//! messages are copied out and released at once, so a receiver that keeps buffers
//! cannot stop the stream by itself.
//!
//! **Failures**: the peer's death closes its socket; the endpoint thread sees it,
//! delivers what the peer published before, and reports every channel lost. Every
//! index and header read from the ring is checked; a violation ends the connection.
//! What a peer that ignores the protocol can and cannot do is the trust model, written
//! down in [`region`] (the module that maps the peer's memory).
//! Segments are memfds: when both processes are gone, nothing is left (no file in
//! `/dev/shm`).
//!
//! **Configuration** (`key=value`): `secret=` (required), `pool=`,
//! `shm.ring_size=` (bytes per ring, power of two, default 8 MiB), `max_message=`
//! (default 1 GiB), `shm.wait=spin|spin_block|block`, `shm.spin_us=` (default 10),
//! `shm.send_timeout_ms=` (default 60000), `shm.idle_check_ms=` (default 1000).
//!
//! The benchmarks (`ibis-bench`) compare this transport with a plain spinning
//! shared-memory ping-pong (the raw limit) and with its own rings driven between two
//! processes with nothing above them (the protocol floor); the feature
//! `bench-internals` exposes the few ring items that floor needs.

mod address;
mod buffer;
mod chan_map;
mod config;
mod consumer;
mod endpoint;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
mod layout;
mod link;
mod producer;
mod reassembly;
mod reclaim;
mod region;
mod ring;
mod sys;

/// The ring internals that `ibis-bench`'s protocol-floor benchmark drives directly (the
/// transport's rings between two processes with nothing above them). Not part of the
/// transport's API: only with the feature `bench-internals`.
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod bench_internals {
    pub use crate::layout::{
        check_segment, segment_header, segment_size, Kind, DATA_OFFSET, HEADER_LEN, MIN_CAPACITY,
        SEGMENT_HEADER,
    };
    pub use crate::region::Region;
    pub use crate::ring::{Cursor, RingPlace, RingRx, RingTx};
}

pub use endpoint::{ShmTransport, OPENED_BY_SENDER};

ipl_transport_abi::declare_plugin!(
    /// The shm transport's descriptor, for static linking.
    pub static PLUGIN = ShmTransport;
);

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
