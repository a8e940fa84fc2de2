//! The QUIC transport: endpoints in other processes and on other hosts, encrypted and
//! authenticated with TLS 1.3 (quinn-proto + rustls with the `ring` provider), one QUIC
//! connection per pair of endpoints carrying all their channels.
//!
//! **Configuration** (`key=value` lines given to `create`; unknown keys are ignored):
//! `secret=<64 hex>` the pool's secret (required), `pool=<name>`, `interfaces=<list>`
//! (the interfaces to listen on and advertise, see [`ipl_transport_kit::interfaces`];
//! default all), `bind=<ip:port>` (UDP; listen there instead), `advertise=<ip>` (publish
//! this IP instead), `max_message=<bytes>` (default 1 GiB),
//! `idle_timeout_ms` (a peer silent this long is lost; default 10 000, keep-alives every
//! quarter of it), `linger_ms` (how long `shutdown` waits for sent data to be
//! acknowledged, default 10 000), `quic.handshake_timeout_ms` (how long an incoming
//! connection has for the TLS handshake and its hello in all, default 5 000) and
//! `quic.max_handshakes` (incoming connections in the handshake at once, default 64; one
//! more is refused at once with QUIC's `CONNECTION_REFUSED`, counted, and logged at most
//! once per 10 s through [`ipl_transport_kit::admission`]).
//! **Address** ([`ipl_transport_kit::address`]): UTF-8 `ip:port[,ip:port...]/id/host`,
//! every selected address with the socket's port, the endpoint's random 64-bit id in 16
//! hex digits and the host's id. `connect` tries the addresses in the order of
//! [`ipl_transport_kit::dial`] (same host: loopback first; then the same subnet), each
//! with a share of the timeout; it also accepts the address with [`UNRELIABLE_SUFFIX`]
//! appended. One UDP socket: the selected address, or the wildcard (`[::]` dual-stack
//! when both families are selected, IPv4 peers dialed as IPv4-mapped addresses).
//!
//! **Security** ([`tls`]): every member derives the same CA from the pool secret and has
//! it sign a certificate for its endpoint id; TLS is mutual and verified with the
//! standard webpki verifiers against that CA only. A peer without the secret fails the
//! handshake: `connect` returns [`Refused`](ipl_transport_abi::TransportError::Refused)
//! naming the secret, and an accepting endpoint drops it and logs a warning (at most one
//! per 10 s). There is no switch that turns verification off.
//!
//! **Connections and channels** (channel pairing, as in Ibis): `connect` reuses the
//! connection to the target endpoint, whichever side opened it, and dials only when
//! there is none. After the TLS handshake each side sends a *hello* (its endpoint id) on
//! a unidirectional stream; the dialer's `connect` returns only after the server's hello,
//! which the server sends only after accepting the client's certificate. Each channel is
//! one bidirectional QUIC stream, opened with a [`wire::StreamHeader`]; messages on it
//! are `u32` LE length-prefixed ([`wire::Decoder`]); closing a channel finishes the
//! stream, which the peer reports as closed; a lost connection reports every channel on
//! it lost.
//!
//! **Unreliable channels**: a channel opened to `address + "?unreliable"` sends each
//! message that fits as one QUIC datagram (`u64` LE stream id of the channel, then the
//! message), in both directions; such messages may be lost, duplicated never, reordered
//! possibly. A message too large for a datagram goes on the channel's stream. The IPL
//! chooses this for port types with `communication.unreliable`.
//!
//! **Threading** (sans-IO, no async runtime): the protocol state is an
//! `engine` on quinn-proto, moved by a thin `driver` that any thread may run. `send`
//! writes and transmits on the caller's thread (back-to-back sends of a streaming
//! connection leave the transmit to the background thread, which batches them); the transport has the `polled`
//! capability, so a receiver that polls reads, decrypts and delivers its messages on its
//! own thread through `progress`; a background thread drives the endpoint when nobody
//! polls (it keeps off the socket while a receiver polls, for at most 300 us after its
//! last poll). No message crosses a thread on its way. Host callbacks run outside the
//! engine's lock, in order, through the in-flight [`Gate`](ipl_transport_kit::Gate), so a
//! callback may send. Received messages are copied into recycled buffers
//! ([`BufferPool`](ipl_transport_kit::BufferPool)). UDP goes through quinn-udp (GSO and
//! GRO where the kernel has them).
//!
//! **Errors**: a length above `max_message`, a bad stream header or a stream that ends
//! inside a message loses that channel (reported with the reason, the stream is reset),
//! never the process. `shutdown` closes the gate, writes [`wire::GOODBYE`] on every
//! channel and finishes its stream, waits up to `linger_ms` until the peers acknowledged
//! all data sent (closing a QUIC connection discards what is unsent, and `send` returns
//! once its bytes are queued), then closes every connection (peers report their channels
//! lost after the last message) and stops the background thread.

#![forbid(unsafe_code)]

mod address;
mod config;
mod driver;
mod endpoint;
mod engine;

#[doc(hidden)]
pub mod tls;
pub mod wire;

pub use address::{Address, UNRELIABLE_SUFFIX};
pub use config::{DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_MESSAGE};
pub use endpoint::QuicTransport;
#[doc(hidden)]
pub use engine::ConnectionStats;

ipl_transport_abi::declare_plugin!(
    /// The QUIC transport's descriptor, for static linking.
    pub static PLUGIN = QuicTransport;
);

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
