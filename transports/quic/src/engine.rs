//! The sans-IO core of an endpoint: quinn-proto's endpoint and connections, the channel
//! table, and the transport's protocol on top of QUIC (hellos, stream headers,
//! length-prefixed messages, datagrams). It owns no socket, thread or clock: the
//! [`driver`](crate::driver) feeds it datagrams and the time, sends what it transmits,
//! and hands the [`HostEvent`]s it queues to the host.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::TransportError;
use ipl_transport_kit::BufferPool;
use quinn_proto::{
    ClientConfig, ConnectionError, ConnectionHandle, DatagramEvent, Dir, EcnCodepoint, Event,
    ReadError, ServerConfig, StreamEvent, StreamId, Transmit, VarInt, WriteError,
};

use crate::tls;
use crate::wire::{self, Decoder, StreamHeader, DATAGRAM_HEADER_LEN, STREAM_HEADER_LEN};

/// Application error code of a connection closed by `shutdown`.
pub(crate) const CODE_SHUTDOWN: u32 = 0;
/// Application error code of a stream or connection closed for a protocol error.
pub(crate) const CODE_PROTOCOL: u32 = 1;

/// How long each side waits for the other's hello after the TLS handshake began.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Where a connection is in its life.
#[derive(Debug)]
enum Phase {
    /// The TLS handshake runs.
    Handshaking,
    /// The handshake is done; the peer's hello has not come yet.
    Hello,
    /// Both hellos exchanged: channels may be opened.
    Ready,
    /// Closed or lost; the error is what a dialer waiting for it is told.
    Closed(TransportError),
}

/// One QUIC connection to a peer endpoint, carrying every channel between the two.
struct Conn {
    proto: quinn_proto::Connection,
    peer: SocketAddr,
    /// The peer's endpoint id, from its hello.
    peer_id: Option<u64>,
    /// The endpoint id a dialer expects (None on the accepting side).
    expect: Option<u64>,
    phase: Phase,
    /// The hello must have come by then.
    hello_deadline: Instant,
    /// The peer's hello stream and the bytes read from it so far.
    hello_in: Option<(StreamId, Vec<u8>)>,
    /// Stream → local channel; `None` once closed locally (what still comes is dropped).
    streams: HashMap<StreamId, Option<u64>>,
    /// Streams the peer opened whose header is incomplete (or came before the hello).
    pending: HashMap<StreamId, Vec<u8>>,
    /// Events to process (a datagram or a write reached it).
    dirty: bool,
    /// Sends since stream data last came from the peer (see [`Engine::coalesce`]).
    sends_since_data: u32,
    /// When a send last transmitted at once.
    last_send_tx: Option<Instant>,
}

/// One channel: a bidirectional QUIC stream.
struct Chan {
    conn: ConnectionHandle,
    stream: StreamId,
    /// Messages go as datagrams when they fit.
    unreliable: bool,
    decoder: Decoder,
    /// A sender is in the middle of a message that did not fit the stream's window.
    busy: bool,
}

/// Counters of one endpoint's connections, for tests and diagnostics.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionStats {
    /// QUIC connections open now (hellos exchanged).
    pub open: usize,
    /// QUIC connections that completed the handshake since the endpoint was created.
    pub established: u64,
}

/// What the engine knows of a dial in progress.
pub(crate) enum DialState {
    /// Still handshaking.
    Pending,
    /// Usable.
    Ready,
    /// Failed.
    Failed(TransportError),
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

/// Why a connection ended, in words.
fn describe(e: &ConnectionError, peer: SocketAddr) -> String {
    match e {
        ConnectionError::ApplicationClosed(c)
            if c.error_code == VarInt::from_u32(CODE_SHUTDOWN) =>
        {
            format!("quic peer {peer} shut down")
        }
        ConnectionError::TimedOut => format!("quic peer {peer} stopped answering (idle timeout)"),
        ConnectionError::LocallyClosed => "quic endpoint shut down".to_string(),
        e => format!("quic connection to {peer} lost: {e}"),
    }
}

fn refused_handshake(peer: SocketAddr, e: &dyn std::fmt::Display) -> TransportError {
    TransportError::Refused(format!(
        "quic handshake with {peer} refused: {e} (the peer's certificate is not from this \
         pool's CA or ours is not from its: it does not know this pool's secret)"
    ))
}

/// Maps a connection error during connection set-up.
fn setup_error(e: &ConnectionError, peer: SocketAddr) -> TransportError {
    match e {
        ConnectionError::TimedOut => {
            TransportError::Timeout(format!("no quic endpoint answered at {peer}"))
        }
        ConnectionError::LocallyClosed => {
            TransportError::Closed("quic endpoint is shutting down".into())
        }
        e @ (ConnectionError::TransportError(_) | ConnectionError::ConnectionClosed(_)) => {
            refused_handshake(peer, e)
        }
        e => TransportError::Refused(format!("quic connection to {peer} failed: {e}")),
    }
}

fn shutting_down() -> TransportError {
    TransportError::Closed("quic endpoint is shutting down".into())
}

/// The end of a stream's readable data, as far as one read got.
enum End {
    /// More may come.
    Open,
    /// The peer finished the stream.
    Finished,
    /// The peer reset it.
    Reset(VarInt),
}

/// Refuses a stream the peer opened or broke: both halves end with the protocol error
/// code.
fn reject_stream(conn: &mut Conn, id: StreamId, what: &str) {
    tracing::warn!(peer = %conn.peer, "quic: protocol error from {}: {what}", conn.peer);
    let _ = conn
        .proto
        .recv_stream(id)
        .stop(VarInt::from_u32(CODE_PROTOCOL));
    let _ = conn
        .proto
        .send_stream(id)
        .reset(VarInt::from_u32(CODE_PROTOCOL));
}

/// Reads what a stream has now (ordered).
fn read_all(proto: &mut quinn_proto::Connection, id: StreamId, out: &mut Vec<Bytes>) -> End {
    let mut rs = proto.recv_stream(id);
    let Ok(mut chunks) = rs.read(true) else {
        // Closed already (we stopped it, or saw its end).
        return End::Finished;
    };
    let end = loop {
        match chunks.next(usize::MAX) {
            Ok(Some(chunk)) => out.push(chunk.bytes),
            Ok(None) => break End::Finished,
            Err(ReadError::Blocked) => break End::Open,
            Err(ReadError::Reset(code)) => break End::Reset(code),
        }
    };
    // Whether a flow-control update is due is seen by the next poll_transmit anyway.
    let _ = chunks.finalize();
    end
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
        }
    }

    /// The earliest time the engine needs to be driven again without input.
    pub(crate) fn next_timeout(&mut self) -> Option<Instant> {
        self.conns
            .values_mut()
            .filter_map(|c| {
                let t = c.proto.poll_timeout();
                if matches!(c.phase, Phase::Handshaking | Phase::Hello) {
                    Some(t.map_or(c.hello_deadline, |t| t.min(c.hello_deadline)))
                } else {
                    t
                }
            })
            .min()
    }

    /// Feeds one received UDP datagram.
    pub(crate) fn handle_datagram(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        ecn: Option<EcnCodepoint>,
        data: BytesMut,
        tx: &mut Tx<'_>,
    ) {
        let mut resp = std::mem::take(&mut self.resp_buf);
        resp.clear();
        match self.ep.handle(now, remote, local_ip, ecn, data, &mut resp) {
            Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                if let Some(c) = self.conns.get_mut(&ch) {
                    c.proto.handle_event(ev);
                    c.dirty = true;
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                if self.stopping {
                    let t = self.ep.refuse(incoming, &mut resp);
                    tx(&t, &resp[..t.size]);
                } else {
                    let peer = incoming.remote_address();
                    match self
                        .ep
                        .accept(incoming, now, &mut resp, Some(self.server.clone()))
                    {
                        Ok((ch, proto)) => {
                            self.conns.insert(ch, Conn::new(proto, peer, None, now));
                        }
                        Err(e) => {
                            tracing::debug!(peer = %peer, "quic: incoming connection not accepted: {}", e.cause);
                            if let Some(t) = e.response {
                                tx(&t, &resp[..t.size]);
                            }
                        }
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => tx(&t, &resp[..t.size]),
            None => {}
        }
        self.resp_buf = resp;
    }

    /// Processes every connection that has input, a write or a due timer: protocol
    /// events, host events, transmits.
    pub(crate) fn process(&mut self, now: Instant, tx: &mut Tx<'_>) {
        let mut handles = std::mem::take(&mut self.handles);
        handles.clear();
        handles.extend(self.conns.iter_mut().filter_map(|(ch, c)| {
            let due = c.dirty
                || c.proto.poll_timeout().is_some_and(|t| t <= now)
                || (matches!(c.phase, Phase::Handshaking | Phase::Hello)
                    && c.hello_deadline <= now);
            due.then_some(*ch)
        }));
        for &ch in &handles {
            self.process_conn(ch, now, tx);
        }
        self.handles = handles;
    }

    /// Processes one connection (see [`process`](Self::process)).
    fn process_conn(&mut self, ch: ConnectionHandle, now: Instant, tx: &mut Tx<'_>) {
        let Some(mut conn) = self.conns.remove(&ch) else {
            return;
        };
        conn.dirty = false;
        if conn.proto.poll_timeout().is_some_and(|t| t <= now) {
            conn.proto.handle_timeout(now);
        }
        if matches!(conn.phase, Phase::Handshaking | Phase::Hello) && conn.hello_deadline <= now {
            let what = if matches!(conn.phase, Phase::Handshaking) {
                format!("no quic endpoint answered at {} in time", conn.peer)
            } else {
                format!("quic peer {} sent no hello", conn.peer)
            };
            conn.proto.close(
                now,
                VarInt::from_u32(CODE_PROTOCOL),
                Bytes::from_static(b"no hello"),
            );
            self.fail(ch, &mut conn, TransportError::Timeout(what.clone()), &what);
        }
        let mut buf = std::mem::take(&mut self.tx_buf);
        let mut drained = false;
        let mut sent = 0;
        loop {
            let mut progress = false;
            while let Some(ev) = conn.proto.poll_endpoint_events() {
                progress = true;
                drained |= ev.is_drained();
                if let Some(back) = self.ep.handle_event(ch, ev) {
                    conn.proto.handle_event(back);
                }
            }
            while let Some(ev) = conn.proto.poll() {
                progress = true;
                self.app_event(ch, &mut conn, ev);
            }
            loop {
                if sent >= MAX_BURST {
                    // More may wait: the driver reads the socket, then comes back.
                    conn.dirty = true;
                    self.more = true;
                    break;
                }
                buf.clear();
                let Some(t) = conn.proto.poll_transmit(now, self.max_datagrams, &mut buf) else {
                    break;
                };
                progress = true;
                sent += t.segment_size.map_or(1, |s| t.size.div_ceil(s.max(1)));
                tx(&t, &buf[..t.size]);
            }
            if !progress || sent >= MAX_BURST {
                break;
            }
        }
        self.tx_buf = buf;
        if drained {
            self.forget(ch, &mut conn);
        } else {
            self.conns.insert(ch, conn);
        }
    }

    /// A connection that is gone for good.
    fn forget(&mut self, ch: ConnectionHandle, conn: &mut Conn) {
        if !matches!(conn.phase, Phase::Closed(_)) {
            let what = format!("quic connection to {} ended", conn.peer);
            self.fail(ch, conn, TransportError::Closed(what.clone()), &what);
        }
        self.unacked.retain(|(c, _)| *c != ch);
        self.dialing.retain(|_, c| *c != ch);
    }

    /// Marks a connection closed: its channels are lost, `connect` stops using it.
    fn fail(&mut self, ch: ConnectionHandle, conn: &mut Conn, err: TransportError, why: &str) {
        if matches!(conn.phase, Phase::Closed(_)) {
            return;
        }
        let st = conn.proto.stats();
        tracing::debug!(
            peer = %conn.peer,
            sent = st.udp_tx.datagrams,
            received = st.udp_rx.datagrams,
            lost = st.path.lost_packets,
            congestion_events = st.path.congestion_events,
            rtt_us = st.path.rtt.as_micros() as u64,
            "quic connection statistics"
        );
        if matches!(conn.phase, Phase::Ready) {
            tracing::debug!(peer = %conn.peer, "quic connection ended: {why}");
        }
        conn.phase = Phase::Closed(err);
        for local in conn.streams.values().flatten() {
            if self.chans.remove(local).is_some() && !self.stopping {
                self.events
                    .push_back(HostEvent::Closed(*local, CloseCode::LOST, why.to_string()));
            }
        }
        conn.streams.clear();
        conn.pending.clear();
        if let Some(id) = conn.peer_id {
            if self.by_peer.get(&id) == Some(&ch) {
                self.by_peer.remove(&id);
                // Another ready connection to the same peer (both sides dialed at once)
                // takes over.
                if let Some((other, _)) = self.conns.iter().find(|(h, o)| {
                    **h != ch && o.peer_id == Some(id) && matches!(o.phase, Phase::Ready)
                }) {
                    self.by_peer.insert(id, *other);
                }
            }
        }
    }

    /// Handles one application event of a connection.
    fn app_event(&mut self, ch: ConnectionHandle, conn: &mut Conn, ev: Event) {
        match ev {
            Event::HandshakeDataReady => {}
            Event::Connected => {
                conn.phase = Phase::Hello;
                // Our hello: our endpoint id on a unidirectional stream.
                let hello = StreamHeader {
                    opener: self.id,
                    unreliable: false,
                }
                .encode();
                if let Some(id) = conn.proto.streams().open(Dir::Uni) {
                    let mut s = conn.proto.send_stream(id);
                    let _ = s.write(&hello);
                    let _ = s.finish();
                }
                self.accept_streams(ch, conn);
            }
            Event::ConnectionLost { reason } => {
                let (err, why) = match conn.phase {
                    Phase::Handshaking | Phase::Hello => {
                        let err = setup_error(&reason, conn.peer);
                        if conn.expect.is_none() && !self.stopping {
                            tracing::warn!(peer = %conn.peer, "quic: dropping connection from {}: {err}", conn.peer);
                        }
                        let why = err.detail().to_string();
                        (err, why)
                    }
                    _ => {
                        let why = describe(&reason, conn.peer);
                        (TransportError::Closed(why.clone()), why)
                    }
                };
                self.fail(ch, conn, err, &why);
            }
            Event::Stream(StreamEvent::Opened { .. }) => self.accept_streams(ch, conn),
            Event::Stream(StreamEvent::Readable { id }) => self.read(ch, conn, id),
            Event::Stream(StreamEvent::Finished { id }) => {
                self.unacked.remove(&(ch, id));
            }
            Event::Stream(StreamEvent::Stopped { id, .. }) => {
                self.unacked.remove(&(ch, id));
            }
            Event::Stream(StreamEvent::Writable { .. } | StreamEvent::Available { .. }) => {}
            Event::DatagramReceived => self.read_datagrams(conn),
            Event::DatagramsUnblocked => {}
        }
    }

    /// Accepts the streams the peer opened and reads what they carry.
    fn accept_streams(&mut self, ch: ConnectionHandle, conn: &mut Conn) {
        while let Some(id) = conn.proto.streams().accept(Dir::Uni) {
            if conn.hello_in.is_none() && conn.peer_id.is_none() {
                conn.hello_in = Some((id, Vec::new()));
            } else {
                // Only one hello per connection.
                let _ = conn
                    .proto
                    .recv_stream(id)
                    .stop(VarInt::from_u32(CODE_PROTOCOL));
                continue;
            }
            self.read(ch, conn, id);
        }
        while let Some(id) = conn.proto.streams().accept(Dir::Bi) {
            conn.pending.insert(id, Vec::new());
            self.read(ch, conn, id);
        }
    }

    /// Reads a stream that became readable.
    fn read(&mut self, ch: ConnectionHandle, conn: &mut Conn, id: StreamId) {
        let mut data = Vec::new();
        let end = read_all(&mut conn.proto, id, &mut data);
        if conn.hello_in.as_ref().is_some_and(|(h, _)| *h == id) {
            self.read_hello(ch, conn, &data, &end);
        } else if conn.pending.contains_key(&id) {
            if let Some(p) = conn.pending.get_mut(&id) {
                for d in &data {
                    p.extend_from_slice(d);
                }
            }
            self.try_open(ch, conn, id, &end);
        } else {
            match conn.streams.get(&id).copied() {
                Some(Some(local)) => self.read_channel(conn, id, local, &data, &end),
                // Closed locally: what still comes is dropped until the stream ends.
                Some(None) if !matches!(end, End::Open) => {
                    conn.streams.remove(&id);
                }
                _ => {}
            }
        }
    }

    fn read_hello(&mut self, ch: ConnectionHandle, conn: &mut Conn, data: &[Bytes], end: &End) {
        let Some((_, buf)) = conn.hello_in.as_mut() else {
            return;
        };
        for d in data {
            buf.extend_from_slice(d);
        }
        if buf.len() < STREAM_HEADER_LEN {
            if !matches!(end, End::Open) {
                self.protocol_close(ch, conn, "bad hello: the stream ended early");
            }
            return;
        }
        let mut h = [0u8; STREAM_HEADER_LEN];
        h.copy_from_slice(&buf[..STREAM_HEADER_LEN]);
        conn.hello_in = None;
        let theirs = match StreamHeader::parse(&h) {
            Ok(t) => t,
            Err(e) => {
                self.protocol_close(ch, conn, &format!("bad hello: {e}"));
                return;
            }
        };
        if let Some(want) = conn.expect {
            if theirs.opener != want {
                let err = TransportError::Refused(format!(
                    "no quic endpoint {want:016x} at {} any more (found {:016x})",
                    conn.peer, theirs.opener
                ));
                conn.proto.close(
                    Instant::now(),
                    VarInt::from_u32(CODE_PROTOCOL),
                    Bytes::from_static(b"wrong endpoint"),
                );
                let why = err.detail().to_string();
                self.fail(ch, conn, err, &why);
                return;
            }
        }
        conn.peer_id = Some(theirs.opener);
        conn.phase = Phase::Ready;
        self.established += 1;
        let replace = conn.expect.is_some()
            || self
                .by_peer
                .get(&theirs.opener)
                .is_none_or(|c| !self.conns.contains_key(c));
        if replace {
            self.by_peer.insert(theirs.opener, ch);
        }
        tracing::debug!(
            endpoint = format_args!("{:016x}", self.id),
            peer = %conn.peer,
            peer_id = format_args!("{:016x}", theirs.opener),
            "quic connection established"
        );
        let waiting: Vec<StreamId> = conn.pending.keys().copied().collect();
        for id in waiting {
            self.try_open(ch, conn, id, &End::Open);
        }
    }

    /// A protocol error that ends the whole connection.
    fn protocol_close(&mut self, ch: ConnectionHandle, conn: &mut Conn, what: &str) {
        tracing::warn!(peer = %conn.peer, "quic: protocol error from {}: {what}", conn.peer);
        conn.proto.close(
            Instant::now(),
            VarInt::from_u32(CODE_PROTOCOL),
            Bytes::from_static(b"protocol error"),
        );
        let err = TransportError::Refused(format!("quic peer {}: {what}", conn.peer));
        self.fail(ch, conn, err, what);
    }

    /// A stream the peer opened: once its header is complete (and the peer's hello
    /// came), check it and announce the channel.
    fn try_open(&mut self, ch: ConnectionHandle, conn: &mut Conn, id: StreamId, end: &End) {
        let Some(peer_id) = conn.peer_id else {
            return;
        };
        let complete = conn
            .pending
            .get(&id)
            .is_some_and(|b| b.len() >= STREAM_HEADER_LEN);
        if !complete {
            if !matches!(end, End::Open) {
                conn.pending.remove(&id);
            }
            return;
        }
        let Some(buf) = conn.pending.remove(&id) else {
            return;
        };
        let mut h = [0u8; STREAM_HEADER_LEN];
        h.copy_from_slice(&buf[..STREAM_HEADER_LEN]);
        let header = match StreamHeader::parse(&h) {
            Ok(h) if h.opener == peer_id => h,
            Ok(h) => {
                let what = format!(
                    "channel header names endpoint {:016x}, the connection's peer is {peer_id:016x}",
                    h.opener
                );
                return reject_stream(conn, id, &what);
            }
            Err(e) => return reject_stream(conn, id, &format!("stream header: {e}")),
        };
        let local = self.add_channel(ch, id, header.unreliable);
        conn.streams.insert(id, Some(local));
        self.events.push_back(HostEvent::Opened(local));
        let rest = Bytes::copy_from_slice(&buf[STREAM_HEADER_LEN..]);
        self.read_channel(conn, id, local, &[rest], end);
    }

    /// Decodes a channel's bytes into messages; reports the channel's end.
    fn read_channel(
        &mut self,
        conn: &mut Conn,
        id: StreamId,
        local: u64,
        data: &[Bytes],
        end: &End,
    ) {
        let Some(chan) = self.chans.get_mut(&local) else {
            return;
        };
        if !data.is_empty() {
            conn.sends_since_data = 0;
        }
        let pool = &self.pool;
        let events = &mut self.events;
        let mut outcome: Option<Result<(CloseCode, String), String>> = None;
        for d in data {
            let pushed = chan.decoder.push(d, &mut || pool.take(), &mut |m| {
                events.push_back(HostEvent::Message(local, m))
            });
            match pushed {
                Ok(false) => {}
                Ok(true) => {
                    outcome = Some(Ok((
                        CloseCode::LOST,
                        format!("quic peer {} shut down", conn.peer),
                    )));
                    break;
                }
                Err(e) => {
                    outcome = Some(Err(format!("channel {local}: {e}")));
                    break;
                }
            }
        }
        let outcome = outcome.or_else(|| match end {
            End::Open => None,
            End::Finished if chan.decoder.at_boundary() => Some(Ok((
                CloseCode::CLOSED_BY_PEER,
                "closed by peer".to_string(),
            ))),
            End::Finished => Some(Ok((
                CloseCode::LOST,
                format!(
                    "quic peer {} ended channel {local} in the middle of a message",
                    conn.peer
                ),
            ))),
            End::Reset(code) => Some(Ok((
                CloseCode::LOST,
                format!("quic peer {} reset the channel (code {code})", conn.peer),
            ))),
        });
        let Some(outcome) = outcome else {
            return;
        };
        let (code, detail) = match outcome {
            Ok(x) => x,
            Err(what) => {
                reject_stream(conn, id, &what);
                (
                    CloseCode::LOST,
                    format!("quic protocol error from {}: {what}", conn.peer),
                )
            }
        };
        self.chans.remove(&local);
        conn.streams.remove(&id);
        // Our half ends too (a stopped or reset stream reports an error, ignored).
        let _ = conn
            .proto
            .recv_stream(id)
            .stop(VarInt::from_u32(CODE_SHUTDOWN));
        let _ = conn.proto.send_stream(id).finish();
        self.events
            .push_back(HostEvent::Closed(local, code, detail));
    }

    /// Delivers a connection's datagrams to their channels.
    fn read_datagrams(&mut self, conn: &mut Conn) {
        while let Some(d) = conn.proto.datagrams().recv() {
            let (stream, body) = match wire::parse_datagram(&d) {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(peer = %conn.peer, "quic: protocol error from {}: datagram: {e}", conn.peer);
                    continue;
                }
            };
            if body.len() as u64 > u64::from(self.max_message) {
                tracing::warn!(peer = %conn.peer, "quic: datagram of {} bytes exceeds max_message", body.len());
                continue;
            }
            let local = VarInt::from_u64(stream)
                .ok()
                .map(StreamId::from)
                .and_then(|id| conn.streams.get(&id).copied().flatten());
            let Some(local) = local else {
                tracing::trace!(peer = %conn.peer, "quic: datagram for no open channel dropped");
                continue;
            };
            let mut buf = self.pool.take();
            buf.clear();
            buf.extend_from_slice(body);
            self.events.push_back(HostEvent::Message(local, buf));
        }
    }

    /// The ready connection `connect` uses for peer endpoint `id`.
    pub(crate) fn ready_conn(&self, id: u64) -> Option<ConnectionHandle> {
        let ch = *self.by_peer.get(&id)?;
        self.conns
            .get(&ch)
            .filter(|c| matches!(c.phase, Phase::Ready))
            .map(|_| ch)
    }

    /// The dial in progress to peer endpoint `id`, or a new one.
    pub(crate) fn dial(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        id: u64,
    ) -> Result<ConnectionHandle, TransportError> {
        if self.stopping {
            return Err(shutting_down());
        }
        if let Some(&ch) = self.dialing.get(&id) {
            if self.conns.contains_key(&ch) {
                return Ok(ch);
            }
        }
        let (ch, proto) = self
            .ep
            .connect(now, self.client.clone(), peer, &tls::server_name(id))
            .map_err(|e| TransportError::InvalidArgument(format!("quic connect to {peer}: {e}")))?;
        let mut conn = Conn::new(proto, peer, Some(id), now);
        conn.dirty = true;
        self.conns.insert(ch, conn);
        self.dialing.insert(id, ch);
        Ok(ch)
    }

    /// Where a dial stands.
    pub(crate) fn dial_state(&mut self, ch: ConnectionHandle, id: u64) -> DialState {
        let state = match self.conns.get(&ch).map(|c| &c.phase) {
            None => DialState::Failed(TransportError::Closed(
                "quic connection ended during set-up".into(),
            )),
            Some(Phase::Ready) => DialState::Ready,
            Some(Phase::Closed(e)) => DialState::Failed(e.clone()),
            Some(_) => DialState::Pending,
        };
        if !matches!(state, DialState::Pending) && self.dialing.get(&id) == Some(&ch) {
            self.dialing.remove(&id);
        }
        state
    }

    /// Gives up a dial (its caller's time ran out).
    pub(crate) fn abandon(&mut self, ch: ConnectionHandle, id: u64, now: Instant) {
        if self.dialing.get(&id) == Some(&ch) {
            self.dialing.remove(&id);
        }
        if let Some(c) = self.conns.get_mut(&ch) {
            if !matches!(c.phase, Phase::Ready) {
                c.proto.close(
                    now,
                    VarInt::from_u32(CODE_PROTOCOL),
                    Bytes::from_static(b"timeout"),
                );
                c.dirty = true;
            }
        }
    }

    /// Opens a channel on ready connection `ch`; `Ok(None)` while the peer's stream limit
    /// holds it back.
    pub(crate) fn open_channel(
        &mut self,
        ch: ConnectionHandle,
        unreliable: bool,
    ) -> Result<Option<u64>, TransportError> {
        if self.stopping {
            return Err(shutting_down());
        }
        let Some(conn) = self.conns.get_mut(&ch) else {
            return Err(TransportError::Closed("quic connection ended".into()));
        };
        if let Phase::Closed(e) = &conn.phase {
            return Err(e.clone());
        }
        let Some(id) = conn.proto.streams().open(Dir::Bi) else {
            return Ok(None);
        };
        let header = StreamHeader {
            opener: self.id,
            unreliable,
        }
        .encode();
        // A fresh stream's window (megabytes) always takes its 14-byte header.
        let _ = conn.proto.send_stream(id).write(&header);
        conn.dirty = true;
        let local = self.add_channel(ch, id, unreliable);
        if let Some(conn) = self.conns.get_mut(&ch) {
            conn.streams.insert(id, Some(local));
        }
        Ok(Some(local))
    }

    /// Enters a channel on stream `id` of connection `ch`; the caller maps the stream
    /// to the returned local id.
    fn add_channel(&mut self, ch: ConnectionHandle, id: StreamId, unreliable: bool) -> u64 {
        let local = self.next_channel;
        self.next_channel += 1;
        self.chans.insert(
            local,
            Chan {
                conn: ch,
                stream: id,
                unreliable,
                decoder: Decoder::new(self.max_message),
                busy: false,
            },
        );
        local
    }

    fn chan_error(local: u64) -> TransportError {
        TransportError::Closed(format!("no open quic channel {local}"))
    }

    /// Whether a sender is in the middle of a message on `local` (false if closed).
    pub(crate) fn is_busy(&self, local: u64) -> bool {
        self.chans.get(&local).is_some_and(|c| c.busy)
    }

    /// Marks a sender in (or out of) the middle of a message.
    pub(crate) fn set_busy(&mut self, local: u64, busy: bool) {
        if let Some(c) = self.chans.get_mut(&local) {
            c.busy = busy;
        }
    }

    /// Sends the message as a datagram if the channel is unreliable and it fits;
    /// returns whether it did.
    pub(crate) fn try_datagram(
        &mut self,
        local: u64,
        slices: &[&[u8]],
        total: u64,
    ) -> Result<bool, TransportError> {
        let chan = self
            .chans
            .get(&local)
            .ok_or_else(|| Self::chan_error(local))?;
        if !chan.unreliable {
            return Ok(false);
        }
        let (ch, stream) = (chan.conn, chan.stream);
        let Some(conn) = self.conns.get_mut(&ch) else {
            return Err(Self::chan_error(local));
        };
        let fits = conn
            .proto
            .datagrams()
            .max_size()
            .is_some_and(|m| DATAGRAM_HEADER_LEN as u64 + total <= m as u64);
        if !fits {
            return Ok(false);
        }
        let d = Bytes::from(wire::encode_datagram(u64::from(stream), slices));
        match conn.proto.datagrams().send(d, true) {
            Ok(()) => {
                conn.dirty = true;
                Ok(true)
            }
            Err(e) => {
                // Not possible after all (e.g. the path's size shrank): the stream
                // carries it, which is more than an unreliable channel promises.
                tracing::debug!("quic: datagram not sent ({e}); using the stream");
                Ok(false)
            }
        }
    }

    /// Writes as much of `data` on the channel's stream as its window takes.
    pub(crate) fn write(&mut self, local: u64, data: &[u8]) -> Result<usize, TransportError> {
        let chan = self
            .chans
            .get(&local)
            .ok_or_else(|| Self::chan_error(local))?;
        let (ch, stream) = (chan.conn, chan.stream);
        let Some(conn) = self.conns.get_mut(&ch) else {
            return Err(Self::chan_error(local));
        };
        let peer = conn.peer;
        match conn.proto.send_stream(stream).write(data) {
            Ok(n) => {
                conn.dirty = true;
                Ok(n)
            }
            Err(WriteError::Blocked) => Ok(0),
            Err(WriteError::Stopped(code)) => Err(TransportError::Closed(format!(
                "quic peer {peer} stopped channel {local} (code {code})"
            ))),
            Err(WriteError::ClosedStream) => Err(TransportError::Closed(format!(
                "quic channel {local} to {peer} is closed"
            ))),
        }
    }

    /// Resets a channel's stream after a partly written message.
    pub(crate) fn reset(&mut self, local: u64) {
        if let Some(chan) = self.chans.get(&local) {
            let (ch, stream) = (chan.conn, chan.stream);
            if let Some(conn) = self.conns.get_mut(&ch) {
                let _ = conn
                    .proto
                    .send_stream(stream)
                    .reset(VarInt::from_u32(CODE_PROTOCOL));
                conn.dirty = true;
            }
        }
    }

    /// Whether a message just written on `local` may wait for the next batch instead of
    /// being transmitted at once: when this connection streams (a second send with no
    /// stream data from the peer in between, within [`COALESCE_WINDOW`] of the last
    /// immediate transmit). A send that follows a message from the peer (a reply, a
    /// ping-pong) or a quiet spell always goes at once.
    pub(crate) fn coalesce(&mut self, local: u64, now: Instant) -> bool {
        let Some(ch) = self.chans.get(&local).map(|c| c.conn) else {
            return false;
        };
        let Some(conn) = self.conns.get_mut(&ch) else {
            return false;
        };
        conn.sends_since_data = conn.sends_since_data.saturating_add(1);
        let streaming = conn.sends_since_data >= 2
            && conn
                .last_send_tx
                .is_some_and(|t| now.saturating_duration_since(t) < COALESCE_WINDOW);
        if !streaming {
            conn.last_send_tx = Some(now);
        }
        streaming
    }

    /// Transmits what a connection has to send now (after a write).
    pub(crate) fn flush(&mut self, local: u64, now: Instant, tx: &mut Tx<'_>) {
        if let Some(ch) = self.chans.get(&local).map(|c| c.conn) {
            self.process_conn(ch, now, tx);
        }
    }

    /// Closes a channel: the stream is finished after what was written; what still
    /// arrives on it is dropped.
    pub(crate) fn close_channel(&mut self, local: u64) {
        let Some(chan) = self.chans.remove(&local) else {
            return;
        };
        if let Some(conn) = self.conns.get_mut(&chan.conn) {
            conn.streams.insert(chan.stream, None);
            if conn.proto.send_stream(chan.stream).finish().is_ok() {
                self.unacked.insert((chan.conn, chan.stream));
            }
            conn.dirty = true;
        }
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

impl Conn {
    fn new(
        proto: quinn_proto::Connection,
        peer: SocketAddr,
        expect: Option<u64>,
        now: Instant,
    ) -> Self {
        Conn {
            proto,
            peer,
            peer_id: None,
            expect,
            phase: Phase::Handshaking,
            hello_deadline: now + HANDSHAKE_TIMEOUT,
            hello_in: None,
            streams: HashMap::new(),
            pending: HashMap::new(),
            dirty: true,
            sends_since_data: 0,
            last_send_tx: None,
        }
    }
}
