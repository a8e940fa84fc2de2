//! The TCP transport: endpoints in other processes and on other hosts, one
//! authenticated TCP connection per pair of endpoints carrying all their channels.
//!
//! **Configuration** (`key=value` lines given to `create`; unknown keys are ignored):
//! `secret=<64 hex>` the pool's secret (required; the IPL passes the value of
//! `IPL_POOL_SECRET`), `pool=<name>`, `interfaces=<list>` (the interfaces to listen on
//! and advertise, see [`ipl_transport_kit::interfaces`]; default all; the IPL passes
//! `IPL_INTERFACES`), `bind=<ip:port>` (listen there instead), `advertise=<ip>` (publish
//! this IP instead), `max_message=<bytes>` (default 1 GiB), `tcp.send_timeout_ms=<ms>`
//! (default 60000: a send that makes no progress that long, because the peer's process
//! takes no data, fails with `Timeout` and closes the connection).
//! **Address** ([`ipl_transport_kit::address`]): UTF-8
//! `ip:port[,ip:port...]/id/host`, every selected address with the listening port, the
//! endpoint's random 64-bit id in 16 hex digits (a stale address never reaches a newer
//! endpoint on the same port) and the host's id. `connect` tries the addresses in the
//! order of [`ipl_transport_kit::dial`] (same host: loopback first; then the same
//! subnet), each with a share of the timeout, and moves on when one fails.
//!
//! **Channel pairing** (as in Ibis): `connect` reuses the connection to the target
//! endpoint, whichever side opened it, and only dials when there is none. If two
//! endpoints dial each other at the same moment both connections are kept; each channel
//! lives on exactly one of them.
//!
//! **Security**: every new connection first runs the pool-secret challenge-response of
//! [`ipl_auth`] with context `ipl-tcp/<pool>`, proving knowledge of the secret in both
//! directions (preamble [`wire::MAGIC`] + `Hello`, `Challenge`, `Finish`; then each side
//! sends its endpoint id). A peer without the secret is refused before any channel
//! exists: the accepting side logs a warning naming it, the dialing side's `connect`
//! fails with [`Refused`](ipl_transport_abi::TransportError::Refused). Traffic is
//! authenticated at connection set-up but not encrypted.
//!
//! **Wire format**: frames of a 13-byte header, `u32` LE payload length, `u64` LE channel
//! id, `u8` kind ([`OPEN`](wire::KIND_OPEN), [`DATA`](wire::KIND_DATA),
//! [`CLOSE`](wire::KIND_CLOSE)), then the payload. The side that opens a channel numbers
//! it; bit 63 ([`wire::OPENED_BY_SENDER`]) tells whether the frame's sender is that
//! side, so ids from the two directions never collide. A send is one `sendmsg` of the
//! header and the caller's slices (no copy), looping over partial writes, under a
//! per-connection lock so frames never interleave.
//!
//! **Threading**: plain threads and blocking sockets (`TCP_NODELAY`, 4 MiB buffers): one
//! accept thread, one thread per connection that runs the handshake (accepting side)
//! and then reads frames and makes the host callbacks itself, in order per channel.
//! Waking a blocked thread costs 11-12 µs on the development machine; an async runtime
//! would add a second hand-off per message, so none is used.
//!
//! **Receiver-driven progress** (the transport is `POLLED`, as MPI's receivers read
//! their own sockets): a receiver that waits polls the transport (`take`/`progress`),
//! reading the sockets itself without blocking and making the callbacks on its own
//! thread; the next message of its channel is handed to it directly. While receivers
//! poll (the poll lease, renewed by every poll, ended by `progress_end`; `lease`), the
//! reader threads stand back, so that a message wakes no thread. A receiver that stops
//! polling without ending its phase costs the other channels at most one lease (2 ms)
//! before the reader threads deliver again. A connection's receive side (`rx`, a state
//! machine of frames over the bytes read) is held by one reader at a time, so frames
//! keep their order whoever reads them. Beyond four connections a poll first asks
//! `poll` which sockets have data. A receiver that sleeps waiting for a reply parks in
//! the transport (`wait`): it sleeps in `poll` on the sockets and an eventfd
//! (`interrupt`, a new connection, shutdown), so the peer's data wakes it and no reader
//! thread; the reader threads stand back while a receiver is parked. A drain that stops
//! early (its budget, or a message handed to a receiver) leaves a backlog mark, so a
//! reader thread drains again before it waits for the socket: frames already read into
//! the buffer do not show as readiness. While a large frame comes in, a reader thread
//! reads on without waiting for readability (`stream_spin`, `tcp.reader_spin_us`): a
//! wait after every segment would cost the sender a wake-up per segment.
//!
//! **Receiving**: a payload up to 64 KiB is read through a staging buffer; larger ones
//! straight into their own vector, growing as their bytes arrive, so a lying length
//! costs nothing. A length above `max_message`, an unknown kind, or a malformed frame is
//! a protocol error: the connection is closed and its channels are reported lost, as on
//! end of stream. `shutdown` closes an in-flight gate (no callback after it returns),
//! stops the listener, breaks every connection (peers see their channels lost) and
//! joins the threads.

#![forbid(unsafe_code)]

mod config;
mod endpoint;
mod lease;
mod net;
mod rx;
mod stream_spin;
pub mod wire;

pub use config::DEFAULT_MAX_MESSAGE;
#[doc(hidden)]
pub use endpoint::ConnectionStats;
pub use endpoint::TcpTransport;
/// A TCP endpoint's address, `ip:port/id`.
pub use ipl_transport_kit::IpEndpoint as Address;

ipl_transport_abi::declare_plugin!(
    /// The TCP transport's descriptor, for static linking.
    pub static PLUGIN = TcpTransport;
);

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;
