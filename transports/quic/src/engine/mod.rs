//! The sans-IO core of an endpoint: quinn-proto's endpoint and connections, the channel
//! table, and the transport's protocol on top of QUIC (hellos, stream headers,
//! length-prefixed messages, datagrams). It owns no socket, thread or clock: the
//! [`driver`](crate::driver) feeds it datagrams and the time, sends what it transmits,
//! and hands the [`HostEvent`]s it queues to the host.
//!
//! The [`Engine`] is here with its life (creation, counters, shutdown); its parts are
//! in modules named after what they hold:
//! - [`dispatch`]: the endpoint's dispatch: datagrams in, each connection's events to
//!   their handlers, transmits out, timers;
//! - [`connection`]: one connection's life: dial, handshake, hellos, failure;
//! - [`channels`]: the channel table: opening, reading, writing and closing channels,
//!   datagrams of unreliable channels.

mod channels;
mod connection;
mod dispatch;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::TransportError;
use ipl_transport_kit::admission::Admission;
use ipl_transport_kit::BufferPool;
use quinn_proto::{ClientConfig, ConnectionHandle, ServerConfig, StreamId, Transmit, VarInt};

use crate::wire;
use channels::Chan;
use connection::{Conn, Phase};

pub use connection::ConnectionStats;
pub(crate) use connection::DialState;

/// Application error code of a connection closed by `shutdown`.
const CODE_SHUTDOWN: u32 = 0;
/// Application error code of a stream or connection closed for a protocol error.
const CODE_PROTOCOL: u32 = 1;
/// Application error code of a connection closed because its handshake (TLS and hello)
/// did not complete by its deadline.
const CODE_HANDSHAKE_TIMEOUT: u32 = 2;

/// How long a dialer's connection has for the TLS handshake and the peer's hello (its
/// `connect` may give up sooner). Incoming connections have
/// [`HandshakeBounds::timeout`].
const DIAL_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The bounds on incoming connections that have not completed their handshake (TLS and
/// hello): `quic.handshake_timeout_ms` and `quic.max_handshakes`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandshakeBounds {
    /// The deadline of each, from its first packet.
    pub(crate) timeout: Duration,
    /// How many at once; one beyond is refused at once.
    pub(crate) max: usize,
}

/// Datagrams one transmit carries at most (GSO segments; quinn's own limit): larger
/// bursts overflow the receiver's socket buffer on a fast path.
const MAX_SEGMENTS: usize = 10;
/// Datagrams a connection transmits before the driver reads the socket again (acks
/// that come meanwhile keep the congestion controller's view current), as quinn does.
const MAX_BURST: usize = 20;

/// A send within this time of the last one that transmitted at once, with no stream
/// data from the peer in between, joins the next batch (see [`Engine::coalesce`]).
const COALESCE_WINDOW: Duration = Duration::from_micros(50);

/// Where the engine sends a datagram: `(transmit, its bytes)`.
pub(crate) type Tx<'a> = dyn FnMut(&Transmit, &[u8]) + 'a;

/// What the host is told, in order, once the engine's lock is released.
#[derive(Debug)]
pub(crate) enum HostEvent {
    /// A peer opened a channel.
    Opened(u64),
    /// A message on a channel.
    Message(u64, Vec<u8>),
    /// A channel closed or was lost.
    Closed(u64, CloseCode, String),
}

/// The endpoint's protocol state. See the module documentation.
pub(crate) struct Engine {
    id: u64,
    max_message: u32,
    client: ClientConfig,
    server: Arc<ServerConfig>,
    pool: BufferPool,
    ep: quinn_proto::Endpoint,
    conns: HashMap<ConnectionHandle, Conn>,
    chans: HashMap<u64, Chan>,
    /// The connection `connect` uses for each peer endpoint id.
    by_peer: HashMap<u64, ConnectionHandle>,
    /// Dials in progress by peer endpoint id, so concurrent `connect`s dial once.
    dialing: HashMap<u64, ConnectionHandle>,
    /// Why a dial's connection ended, kept from its removal until its dialer looks
    /// ([`dial_state`](Self::dial_state)) or gives up: a dialer that runs late (a loaded
    /// machine) would otherwise find the connection gone and lose the reason (a refused
    /// handshake read as a plain close).
    failed_dials: HashMap<ConnectionHandle, TransportError>,
    /// How long an incoming connection has for its handshake.
    handshake_timeout: Duration,
    /// Incoming connections in the handshake, and their bound.
    admission: Admission,
    /// `quic.max_handshakes` (from half of it on, addresses are validated first).
    max_handshakes: usize,
    /// Locally finished streams whose data the peer has not acknowledged yet.
    unacked: HashSet<(ConnectionHandle, StreamId)>,
    next_channel: u64,
    established: u64,
    stopping: bool,
    /// How many datagrams one transmit may carry (GSO).
    max_datagrams: usize,
    /// A connection stopped transmitting at [`MAX_BURST`] with more to send.
    more: bool,
    events: VecDeque<HostEvent>,
    tx_buf: Vec<u8>,
    resp_buf: Vec<u8>,
    handles: Vec<ConnectionHandle>,
}

fn shutting_down() -> TransportError {
    TransportError::Closed("quic endpoint is shutting down".into())
}

impl Engine {
    /// An engine for endpoint `id`.
    pub(crate) fn new(
        id: u64,
        max_message: u32,
        server: ServerConfig,
        client: ClientConfig,
        pool: BufferPool,
        max_datagrams: usize,
        bounds: HandshakeBounds,
    ) -> Self {
        let server = Arc::new(server);
        let ep = quinn_proto::Endpoint::new(
            Arc::new(quinn_proto::EndpointConfig::default()),
            Some(server.clone()),
            false,
            None,
        );
        Engine {
            id,
            max_message,
            client,
            server,
            pool,
            ep,
            conns: HashMap::new(),
            chans: HashMap::new(),
            by_peer: HashMap::new(),
            dialing: HashMap::new(),
            failed_dials: HashMap::new(),
            handshake_timeout: bounds.timeout,
            admission: Admission::new("quic", bounds.max),
            max_handshakes: bounds.max,
            unacked: HashSet::new(),
            next_channel: 1,
            established: 0,
            stopping: false,
            max_datagrams: max_datagrams.clamp(1, MAX_SEGMENTS),
            more: false,
            events: VecDeque::new(),
            tx_buf: Vec::new(),
            resp_buf: Vec::new(),
            handles: Vec::new(),
        }
    }

    /// The largest UDP payload the endpoint receives (for receive buffers).
    pub(crate) fn max_udp_payload(&self) -> usize {
        self.ep.config().get_max_udp_payload_size().min(65_527) as usize
    }

    /// Whether any connection exists (a receiver with none has nothing to poll).
    pub(crate) fn has_connections(&self) -> bool {
        !self.conns.is_empty()
    }

    /// Takes the queued host events, in order.
    pub(crate) fn take_events(&mut self, into: &mut VecDeque<HostEvent>) {
        std::mem::swap(&mut self.events, into);
    }

    /// Whether a connection stopped at its burst limit with more to send (and clears
    /// the flag).
    pub(crate) fn take_more(&mut self) -> bool {
        std::mem::take(&mut self.more)
    }

    /// Whether host events wait.
    pub(crate) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Counters for tests.
    pub(crate) fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            open: self
                .conns
                .values()
                .filter(|c| matches!(c.phase, Phase::Ready))
                .count(),
            established: self.established,
            connections: self.conns.len(),
            handshakes: self.admission.pending(),
            refused: self.admission.refused(),
        }
    }

    /// The remote addresses of the ready connections (IPv4-mapped ones as IPv4).
    pub(crate) fn peer_addresses(&self) -> Vec<std::net::SocketAddr> {
        self.conns
            .values()
            .filter(|c| matches!(c.phase, Phase::Ready))
            .map(|c| std::net::SocketAddr::new(c.peer.ip().to_canonical(), c.peer.port()))
            .collect()
    }

    /// Starts an orderly shutdown: every channel says [`wire::GOODBYE`] (the peer
    /// reports it lost after the messages before it) and is finished; no new
    /// connection is accepted.
    pub(crate) fn begin_shutdown(&mut self) {
        self.stopping = true;
        let bye = wire::len_prefix(wire::GOODBYE);
        for (local, chan) in std::mem::take(&mut self.chans) {
            let Some(conn) = self.conns.get_mut(&chan.conn) else {
                continue;
            };
            if chan.busy {
                // A sender is in the middle of a message: it cannot complete.
                tracing::debug!(channel = local, "quic: channel busy at shutdown");
            } else if let Ok(n) = conn.proto.send_stream(chan.stream).write(&bye) {
                // If the window is full the peer learns from the connection's close.
                if n < bye.len() {
                    tracing::debug!(channel = local, "quic: partial goodbye");
                }
            }
            conn.streams.insert(chan.stream, None);
            if conn.proto.send_stream(chan.stream).finish().is_ok() {
                self.unacked.insert((chan.conn, chan.stream));
            }
            conn.dirty = true;
        }
        self.by_peer.clear();
        self.dialing.clear();
        self.failed_dials.clear();
    }

    /// Whether the peers acknowledged everything sent on finished streams.
    pub(crate) fn all_acked(&self) -> bool {
        self.unacked.is_empty()
    }

    /// Closes every connection (peers report their channels lost).
    pub(crate) fn close_all(&mut self, now: Instant) {
        for c in self.conns.values_mut() {
            c.proto.close(
                now,
                VarInt::from_u32(CODE_SHUTDOWN),
                Bytes::from_static(b"endpoint shut down"),
            );
            c.dirty = true;
        }
    }
}
