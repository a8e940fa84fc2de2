//! A QUIC endpoint: the quinn endpoint and its runtime, the connections (one per peer
//! endpoint), the channel table, and the tasks that turn streams and datagrams into host
//! callbacks.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use ipl_transport_abi::channels::{PeerLink, Peers};
use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::{
    BufferPool, Gate, HostSink, TransportCapabilities, TransportError, TransportPlugin,
};
use quinn::{ConnectionError, ReadError, SendDatagramError, VarInt, WriteError};

use crate::address::Address;
use crate::blocking;
use crate::config::Config;
use crate::tls::{self, PoolTls};
use crate::wire::{self, Decoder, StreamHeader, DATAGRAM_HEADER_LEN, STREAM_HEADER_LEN};
use crate::{lock, read_lock, write_lock};

/// Application error code of a connection closed by `shutdown`.
pub(crate) const CODE_SHUTDOWN: u32 = 0;
/// Application error code of a stream or connection closed for a protocol error.
pub(crate) const CODE_PROTOCOL: u32 = 1;

/// How long each side waits for the other's hello after the TLS handshake, and an
/// accepted stream for its header.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `shutdown` waits for the close frames to leave.
const CLOSE_LINGER: Duration = Duration::from_millis(500);
/// Messages up to this size are copied behind their length prefix and written in one
/// call; larger ones are written slice by slice.
const COALESCE: usize = 16 << 10;
/// Channels one peer may have open towards us at once (QUIC bidirectional streams).
const MAX_CHANNELS_PER_PEER: u32 = 4096;
/// Requested UDP socket buffer sizes (the kernel may cap them).
const SOCKET_BUFFER: usize = 4 << 20;

/// Live endpoints of this process by id, for [`QuicTransport::connection_stats`].
fn directory() -> &'static Mutex<HashMap<u64, Weak<Inner>>> {
    static DIR: OnceLock<Mutex<HashMap<u64, Weak<Inner>>>> = OnceLock::new();
    DIR.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One QUIC connection to a peer endpoint, carrying every channel between the two.
struct Conn {
    serial: u64,
    quic: quinn::Connection,
    peer: SocketAddr,
    peer_id: u64,
    /// QUIC stream id → local channel id, for datagrams.
    streams: Mutex<HashMap<u64, u64>>,
}

impl PeerLink for Conn {
    fn peer_id(&self) -> u64 {
        self.peer_id
    }
}

/// One channel: a bidirectional QUIC stream.
struct Chan {
    local: u64,
    conn: Arc<Conn>,
    /// The QUIC stream id (the same number on both sides; datagrams carry it).
    stream: u64,
    /// Messages go as datagrams when they fit.
    unreliable: bool,
    send: Mutex<quinn::SendStream>,
    /// Cleared when the channel is closed locally: later messages are dropped.
    open: AtomicBool,
}

#[derive(Default)]
struct State {
    stopped: bool,
    /// The connections, and the one `connect` uses for each peer endpoint id.
    peers: Peers<Conn>,
}

struct Inner {
    id: u64,
    cfg: Config,
    address: Vec<u8>,
    host: HostSink,
    pool: BufferPool,
    gate: Gate,
    endpoint: quinn::Endpoint,
    client: quinn::ClientConfig,
    handle: tokio::runtime::Handle,
    stopping: AtomicBool,
    next_channel: AtomicU64,
    next_serial: AtomicU64,
    established: AtomicU64,
    state: Mutex<State>,
    /// Local channel id → channel. Read on every send, hence its own lock.
    channels: RwLock<HashMap<u64, Arc<Chan>>>,
    /// One lock per peer endpoint, so concurrent `connect`s to a new peer dial once.
    dialing: Mutex<HashMap<u64, Arc<Mutex<()>>>>,
    /// Tasks that wait until the peer acknowledged all data of a closed channel;
    /// `shutdown` waits for them (up to `linger`) before closing the connections, which
    /// would discard unsent data.
    flushing: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Counters of one endpoint's connections, for tests and diagnostics.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionStats {
    /// QUIC connections open now.
    pub open: usize,
    /// QUIC connections that completed the handshake since the endpoint was created.
    pub established: u64,
}

/// A QUIC endpoint (the plugin's instance type). See the crate documentation.
pub struct QuicTransport {
    inner: Arc<Inner>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

fn random_id() -> Result<u64, TransportError> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b)
        .map_err(|e| TransportError::Unavailable(format!("random source failed: {e}")))?;
    Ok(u64::from_le_bytes(b))
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
fn setup_error(e: ConnectionError, peer: SocketAddr) -> TransportError {
    match e {
        ConnectionError::TimedOut => {
            TransportError::Timeout(format!("no quic endpoint answered at {peer}"))
        }
        ConnectionError::LocallyClosed => {
            TransportError::Closed("quic endpoint is shutting down".into())
        }
        e @ (ConnectionError::TransportError(_) | ConnectionError::ConnectionClosed(_)) => {
            refused_handshake(peer, &e)
        }
        e => TransportError::Refused(format!("quic connection to {peer} failed: {e}")),
    }
}

fn write_error(e: WriteError, chan: &Chan) -> TransportError {
    let peer = chan.conn.peer;
    match e {
        WriteError::ConnectionLost(c) => TransportError::Closed(describe(&c, peer)),
        WriteError::Stopped(code) => TransportError::Closed(format!(
            "quic peer {peer} stopped channel {} (code {code})",
            chan.local
        )),
        e => TransportError::Closed(format!("quic channel {} to {peer}: {e}", chan.local)),
    }
}

/// Writes `buf` completely, waiting (on this thread) for flow control if needed.
fn write_all(s: &mut quinn::SendStream, buf: &[u8]) -> Result<(), WriteError> {
    blocking::wait(s.write_all(buf))
}

/// Reads the 14-byte header (hello or stream header) that opens a stream.
async fn read_header(recv: &mut quinn::RecvStream) -> Result<StreamHeader, String> {
    let mut h = [0u8; STREAM_HEADER_LEN];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, recv.read_exact(&mut h)).await {
        Err(_) => Err("no stream header in time".into()),
        Ok(Err(e)) => Err(format!("stream header: {e}")),
        Ok(Ok(())) => StreamHeader::parse(&h).map_err(|e| e.to_string()),
    }
}

impl Inner {
    fn shutting_down() -> TransportError {
        TransportError::Closed("quic endpoint is shutting down".into())
    }

    /// Exchanges hellos on a fresh connection (each side sends its endpoint id on a
    /// unidirectional stream and waits for the other's), registers it and starts its
    /// tasks. The server sends its hello only once it has accepted the client's
    /// certificate, so a dialer that gets the hello knows it is in.
    async fn adopt(
        self: &Arc<Self>,
        quic: quinn::Connection,
        expect: Option<u64>,
    ) -> Result<Arc<Conn>, TransportError> {
        let peer = quic.remote_address();
        let hello = StreamHeader {
            opener: self.id,
            unreliable: false,
        };
        let exchange = async {
            let mut out = quic.open_uni().await?;
            out.write_all(&hello.encode()).await.map_err(|e| match e {
                WriteError::ConnectionLost(c) => c,
                _ => ConnectionError::LocallyClosed,
            })?;
            let _ = out.finish();
            let mut inb = quic.accept_uni().await?;
            Ok::<_, ConnectionError>(read_header(&mut inb).await)
        };
        let theirs = match tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange).await {
            Err(_) => {
                quic.close(VarInt::from_u32(CODE_PROTOCOL), b"no hello");
                return Err(TransportError::Timeout(format!(
                    "quic peer {peer} sent no hello"
                )));
            }
            Ok(Err(e)) => return Err(setup_error(e, peer)),
            Ok(Ok(Err(e))) => {
                quic.close(VarInt::from_u32(CODE_PROTOCOL), b"bad hello");
                return Err(TransportError::Refused(format!(
                    "quic peer {peer}: bad hello: {e}"
                )));
            }
            Ok(Ok(Ok(h))) => h,
        };
        if let Some(want) = expect {
            if theirs.opener != want {
                quic.close(VarInt::from_u32(CODE_PROTOCOL), b"wrong endpoint");
                return Err(TransportError::Refused(format!(
                    "no quic endpoint {want:016x} at {peer} any more (found {:016x})",
                    theirs.opener
                )));
            }
        }
        let conn = Arc::new(Conn {
            serial: self.next_serial.fetch_add(1, Ordering::Relaxed),
            quic,
            peer,
            peer_id: theirs.opener,
            streams: Mutex::new(HashMap::new()),
        });
        {
            let mut st = lock(&self.state);
            if st.stopped {
                conn.quic
                    .close(VarInt::from_u32(CODE_SHUTDOWN), b"endpoint shut down");
                return Err(Self::shutting_down());
            }
            st.peers.conns.insert(conn.serial, conn.clone());
            let replace = st
                .peers
                .by_peer
                .get(&conn.peer_id)
                .is_none_or(|c| c.quic.close_reason().is_some() || expect.is_some());
            if replace {
                st.peers.by_peer.insert(conn.peer_id, conn.clone());
            }
        }
        self.established.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            endpoint = format_args!("{:016x}", self.id),
            peer = %peer,
            peer_id = format_args!("{:016x}", conn.peer_id),
            "quic connection established"
        );
        tokio::spawn(self.clone().accept_streams(conn.clone()));
        tokio::spawn(self.clone().read_datagrams(conn.clone()));
        Ok(conn)
    }

    /// Accepts connections until the endpoint closes.
    async fn accept_loop(self: Arc<Self>) {
        while let Some(incoming) = self.endpoint.accept().await {
            if self.stopping.load(Ordering::SeqCst) {
                incoming.refuse();
                continue;
            }
            let me = self.clone();
            tokio::spawn(async move {
                let peer = incoming.remote_address();
                let quic = match incoming.accept() {
                    Ok(connecting) => connecting.await,
                    Err(e) => Err(e),
                };
                let result = match quic {
                    Ok(quic) => me.adopt(quic, None).await.map(|_| ()),
                    Err(e) => Err(setup_error(e, peer)),
                };
                if let Err(e) = result {
                    if me.stopping.load(Ordering::SeqCst) {
                        tracing::debug!(peer = %peer, "quic: connection cut by shutdown: {e}");
                    } else {
                        tracing::warn!(peer = %peer, "quic: dropping connection from {peer}: {e}");
                    }
                }
            });
        }
        tracing::debug!("quic: accept loop ended");
    }

    /// Accepts the channels the peer opens on `conn`, until the connection ends.
    async fn accept_streams(self: Arc<Self>, conn: Arc<Conn>) {
        let reason = loop {
            match conn.quic.accept_bi().await {
                Ok((send, recv)) => {
                    tokio::spawn(self.clone().serve_stream(conn.clone(), send, recv));
                }
                Err(e) => break describe(&e, conn.peer),
            }
        };
        tracing::debug!(peer = %conn.peer, "quic connection ended: {reason}");
        let mut st = lock(&self.state);
        st.peers.remove(conn.serial, &conn);
    }

    /// A channel the peer opened: check its header, announce it, read its messages.
    async fn serve_stream(
        self: Arc<Self>,
        conn: Arc<Conn>,
        send: quinn::SendStream,
        mut recv: quinn::RecvStream,
    ) {
        let header = match read_header(&mut recv).await {
            Ok(h) if h.opener == conn.peer_id => h,
            Ok(h) => {
                self.protocol_error(
                    &conn,
                    &format!(
                        "channel header names endpoint {:016x}, the connection's peer is {:016x}",
                        h.opener, conn.peer_id
                    ),
                );
                let _ = recv.stop(VarInt::from_u32(CODE_PROTOCOL));
                return;
            }
            Err(e) => {
                self.protocol_error(&conn, &e);
                let _ = recv.stop(VarInt::from_u32(CODE_PROTOCOL));
                return;
            }
        };
        let local = self.next_channel.fetch_add(1, Ordering::Relaxed);
        let chan = Arc::new(Chan {
            local,
            conn: conn.clone(),
            stream: u64::from(recv.id()),
            unreliable: header.unreliable,
            send: Mutex::new(send),
            open: AtomicBool::new(true),
        });
        if !self.register(&chan) {
            return;
        }
        if let Some(_e) = self.gate.enter() {
            self.host.channel_opened(local);
        }
        self.read_channel(chan, recv).await;
    }

    fn protocol_error(&self, conn: &Conn, what: &str) {
        tracing::warn!(peer = %conn.peer, "quic: protocol error from {}: {what}", conn.peer);
    }

    /// Enters a channel in the tables; false once shutting down.
    fn register(&self, chan: &Arc<Chan>) -> bool {
        if self.stopping.load(Ordering::SeqCst) {
            return false;
        }
        write_lock(&self.channels).insert(chan.local, chan.clone());
        lock(&chan.conn.streams).insert(chan.stream, chan.local);
        true
    }

    /// Takes a channel out of the tables; whoever gets it owns its last callback.
    fn take(&self, local: u64) -> Option<Arc<Chan>> {
        let chan = write_lock(&self.channels).remove(&local)?;
        lock(&chan.conn.streams).remove(&chan.stream);
        chan.open.store(false, Ordering::SeqCst);
        Some(chan)
    }

    fn deliver(&self, chan: &Chan, msg: Vec<u8>) {
        if chan.open.load(Ordering::Acquire) {
            if let Some(_e) = self.gate.enter() {
                self.pool.deliver(&self.host, chan.local, msg);
            }
        }
    }

    /// Reads a channel's messages until its stream or connection ends, then reports
    /// the end (unless the channel was closed locally first).
    async fn read_channel(self: Arc<Self>, chan: Arc<Chan>, mut recv: quinn::RecvStream) {
        let mut dec = Decoder::new(self.cfg.max_message);
        let peer = chan.conn.peer;
        let end: Result<(), String> = loop {
            match recv.read_chunk(usize::MAX, true).await {
                Ok(Some(chunk)) => {
                    let pushed = dec.push(&chunk.bytes, &mut || self.pool.take(), &mut |m| {
                        self.deliver(&chan, m)
                    });
                    if let Ok(true) = pushed {
                        break Err(format!("quic peer {peer} shut down"));
                    }
                    if let Err(e) = pushed {
                        let what = format!("channel {}: {e}", chan.local);
                        self.protocol_error(&chan.conn, &what);
                        let _ = recv.stop(VarInt::from_u32(CODE_PROTOCOL));
                        if let Ok(mut s) = chan.send.try_lock() {
                            let _ = s.reset(VarInt::from_u32(CODE_PROTOCOL));
                        }
                        break Err(format!("quic protocol error from {peer}: {what}"));
                    }
                }
                Ok(None) if dec.at_boundary() => break Ok(()),
                Ok(None) => {
                    break Err(format!(
                        "quic peer {peer} ended channel {} in the middle of a message",
                        chan.local
                    ))
                }
                Err(ReadError::ConnectionLost(e)) => break Err(describe(&e, peer)),
                Err(ReadError::Reset(code)) => {
                    break Err(format!("quic peer {peer} reset the channel (code {code})"))
                }
                Err(e) => break Err(format!("quic channel from {peer}: {e}")),
            }
        };
        if self.take(chan.local).is_none() {
            return;
        }
        let (code, detail) = match &end {
            Ok(()) => (CloseCode::CLOSED_BY_PEER, "closed by peer"),
            Err(why) => (CloseCode::LOST, why.as_str()),
        };
        if let Some(_e) = self.gate.enter() {
            self.host.channel_closed(chan.local, code, detail);
        }
        // Dropping the last reference to `chan` finishes our half of the stream.
    }

    /// Delivers the datagrams of `conn` to their channels until the connection ends.
    async fn read_datagrams(self: Arc<Self>, conn: Arc<Conn>) {
        while let Ok(d) = conn.quic.read_datagram().await {
            let (stream, body) = match wire::parse_datagram(&d) {
                Ok(x) => x,
                Err(e) => {
                    self.protocol_error(&conn, &format!("datagram: {e}"));
                    continue;
                }
            };
            if body.len() as u64 > u64::from(self.cfg.max_message) {
                self.protocol_error(
                    &conn,
                    &format!("datagram of {} bytes exceeds max_message", body.len()),
                );
                continue;
            }
            let local = lock(&conn.streams).get(&stream).copied();
            let Some(chan) = local.and_then(|l| read_lock(&self.channels).get(&l).cloned()) else {
                tracing::trace!(peer = %conn.peer, "quic: datagram for no open channel dropped");
                continue;
            };
            let mut buf = self.pool.take();
            buf.clear();
            buf.extend_from_slice(body);
            self.deliver(&chan, buf);
        }
    }

    /// The live connection to peer endpoint `id`, if any.
    fn existing(&self, id: u64) -> Option<Arc<Conn>> {
        let c = lock(&self.state).peers.by_peer.get(&id).cloned()?;
        c.quic.close_reason().is_none().then_some(c)
    }

    /// The connection to `addr`'s endpoint: the existing one, or a new one.
    fn connection(
        self: &Arc<Self>,
        addr: Address,
        timeout: Duration,
    ) -> Result<Arc<Conn>, TransportError> {
        if let Some(c) = self.existing(addr.id) {
            return Ok(c);
        }
        let gate = lock(&self.dialing).entry(addr.id).or_default().clone();
        let _one = lock(&gate);
        if let Some(c) = self.existing(addr.id) {
            return Ok(c);
        }
        let me = self.clone();
        let peer = addr.socket;
        let dial = async move {
            let connecting = me
                .endpoint
                .connect_with(me.client.clone(), peer, &tls::server_name(addr.id))
                .map_err(|e| {
                    TransportError::InvalidArgument(format!("quic connect to {peer}: {e}"))
                })?;
            match tokio::time::timeout(timeout, async {
                let quic = connecting.await.map_err(|e| setup_error(e, peer))?;
                me.adopt(quic, Some(addr.id)).await
            })
            .await
            {
                Ok(r) => r,
                Err(_) => Err(TransportError::Timeout(format!(
                    "quic connection to {peer} not established within {timeout:?}"
                ))),
            }
        };
        let result = blocking::wait(self.handle.spawn(dial))
            .map_err(|e| TransportError::Closed(format!("quic dial task ended: {e}")))?;
        let mut d = lock(&self.dialing);
        if d.get(&addr.id).is_some_and(|g| Arc::strong_count(g) <= 2) {
            d.remove(&addr.id);
        }
        result
    }

    /// Keeps track of a finished stream until the peer has acknowledged all its data.
    fn flush_later(&self, s: &quinn::SendStream) {
        let acked = s.stopped();
        let task = self.handle.spawn(async move {
            let _ = acked.await;
        });
        let mut f = lock(&self.flushing);
        f.retain(|t| !t.is_finished());
        f.push(task);
    }

    fn chan(&self, channel: u64) -> Result<Arc<Chan>, TransportError> {
        read_lock(&self.channels)
            .get(&channel)
            .cloned()
            .ok_or_else(|| TransportError::Closed(format!("no open quic channel {channel}")))
    }
}

fn transport_config(cfg: &Config) -> Result<quinn::TransportConfig, TransportError> {
    let mut t = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(cfg.idle_timeout)
        .map_err(|e| TransportError::InvalidArgument(format!("quic idle timeout: {e}")))?;
    t.max_idle_timeout(Some(idle))
        .keep_alive_interval(Some(cfg.idle_timeout / 4))
        .max_concurrent_bidi_streams(VarInt::from_u32(MAX_CHANNELS_PER_PEER))
        .max_concurrent_uni_streams(VarInt::from_u32(4))
        .stream_receive_window(VarInt::from_u32(16 << 20))
        .send_window(64 << 20)
        .datagram_receive_buffer_size(Some(4 << 20));
    Ok(t)
}

fn udp_socket(bind: SocketAddr) -> Result<std::net::UdpSocket, TransportError> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(bind),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .map_err(|e| TransportError::Unavailable(format!("quic: UDP socket: {e}")))?;
    if let Err(e) = sock.set_recv_buffer_size(SOCKET_BUFFER) {
        tracing::debug!("quic: SO_RCVBUF: {e}");
    }
    if let Err(e) = sock.set_send_buffer_size(SOCKET_BUFFER) {
        tracing::debug!("quic: SO_SNDBUF: {e}");
    }
    sock.bind(&bind.into()).map_err(|e| {
        let msg = format!("quic: cannot bind {bind}: {e}");
        match e.kind() {
            std::io::ErrorKind::AddrNotAvailable | std::io::ErrorKind::InvalidInput => {
                TransportError::InvalidArgument(msg)
            }
            _ => TransportError::Unavailable(msg),
        }
    })?;
    Ok(sock.into())
}

impl QuicTransport {
    /// Connection counters of the live endpoint at `address` in this process (`None` if
    /// there is none). For tests: e.g. to check that channel pairing uses one connection.
    #[doc(hidden)]
    pub fn connection_stats(address: &[u8]) -> Option<ConnectionStats> {
        let id = Address::parse(address).ok()?.id;
        let inner = lock(directory()).get(&id).and_then(Weak::upgrade)?;
        let open = lock(&inner.state).peers.conns.len();
        Some(ConnectionStats {
            open,
            established: inner.established.load(Ordering::Relaxed),
        })
    }
}

impl TransportPlugin for QuicTransport {
    const NAME: &'static str = "quic";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const CAPABILITIES: TransportCapabilities = TransportCapabilities::RELIABLE
        .union(TransportCapabilities::FIFO)
        .union(TransportCapabilities::UNRELIABLE)
        .union(TransportCapabilities::ENCRYPTED)
        .union(TransportCapabilities::NETWORK);
    const PRIORITY: i32 = 40;

    fn create(config: &str, host: HostSink) -> Result<Self, TransportError> {
        let cfg = Config::parse(config)?;
        let id = random_id()?;
        let tls = PoolTls::new(&cfg.secret, &cfg.pool)?;
        let me = tls.identity(id)?;
        let transport = Arc::new(transport_config(&cfg)?);
        let server = tls.server_config(&me, transport.clone())?;
        let client = tls.client_config(&me, transport)?;
        let socket = udp_socket(cfg.bind)?;
        let bound = socket
            .local_addr()
            .map_err(|e| TransportError::Other(format!("quic: socket has no address: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads)
            .thread_name("ipl-quic")
            .enable_all()
            .build()
            .map_err(|e| TransportError::Unavailable(format!("quic: cannot start runtime: {e}")))?;
        let endpoint = {
            let _rt = runtime.enter();
            quinn::Endpoint::new(
                quinn::EndpointConfig::default(),
                Some(server),
                socket,
                Arc::new(quinn::TokioRuntime),
            )
            .map_err(|e| TransportError::Unavailable(format!("quic endpoint: {e}")))?
        };
        let address = Address {
            socket: SocketAddr::new(cfg.advertised_ip(&bound), bound.port()),
            id,
            unreliable: false,
        }
        .to_bytes();
        let inner = Arc::new(Inner {
            id,
            cfg,
            address,
            host,
            pool: BufferPool::new(16, 64 << 20),
            gate: Gate::new(),
            endpoint,
            client,
            handle: runtime.handle().clone(),
            stopping: AtomicBool::new(false),
            next_channel: AtomicU64::new(1),
            next_serial: AtomicU64::new(1),
            established: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            channels: RwLock::new(HashMap::new()),
            dialing: Mutex::new(HashMap::new()),
            flushing: Mutex::new(Vec::new()),
        });
        runtime.spawn(inner.clone().accept_loop());
        lock(directory()).insert(id, Arc::downgrade(&inner));
        tracing::debug!(
            address = %String::from_utf8_lossy(&inner.address),
            bound = %bound,
            "quic endpoint created"
        );
        Ok(QuicTransport {
            inner,
            runtime: Mutex::new(Some(runtime)),
        })
    }

    fn local_address(&self) -> Vec<u8> {
        self.inner.address.clone()
    }

    fn connect(&self, address: &[u8], timeout: Duration) -> Result<u64, TransportError> {
        let addr = Address::parse(address)?;
        let inner = &self.inner;
        let mut last = None;
        // A reused connection may turn out dead when we open the stream; then dial anew
        // once.
        for _ in 0..2 {
            if inner.stopping.load(Ordering::SeqCst) {
                return Err(Inner::shutting_down());
            }
            let conn = inner.connection(addr, timeout)?;
            let header = StreamHeader {
                opener: inner.id,
                unreliable: addr.unreliable,
            };
            let quic = conn.quic.clone();
            let peer = conn.peer;
            // On the runtime, for the timer: the stream limit per peer may make us wait.
            let open = inner.handle.spawn(async move {
                let open = async {
                    let (mut send, recv) = quic.open_bi().await?;
                    send.write_all(&header.encode())
                        .await
                        .map_err(|e| match e {
                            WriteError::ConnectionLost(c) => c,
                            _ => ConnectionError::LocallyClosed,
                        })?;
                    Ok::<_, ConnectionError>((send, recv))
                };
                match tokio::time::timeout(timeout, open).await {
                    Ok(r) => r.map_err(|e| TransportError::Closed(describe(&e, peer))),
                    Err(_) => Err(TransportError::Timeout(format!(
                        "quic: no channel to {peer} could be opened within {timeout:?} \
                         (at most {MAX_CHANNELS_PER_PEER} per peer)"
                    ))),
                }
            });
            let opened = blocking::wait(open)
                .map_err(|e| TransportError::Closed(format!("quic open task ended: {e}")))?;
            let (send, recv) = match opened {
                Ok(x) => x,
                Err(e @ TransportError::Timeout(_)) => return Err(e),
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            let local = inner.next_channel.fetch_add(1, Ordering::Relaxed);
            let chan = Arc::new(Chan {
                local,
                conn: conn.clone(),
                stream: u64::from(send.id()),
                unreliable: addr.unreliable,
                send: Mutex::new(send),
                open: AtomicBool::new(true),
            });
            if !inner.register(&chan) {
                return Err(Inner::shutting_down());
            }
            inner.handle.spawn(inner.clone().read_channel(chan, recv));
            return Ok(local);
        }
        Err(last.unwrap_or_else(|| TransportError::Closed("quic connect failed".into())))
    }

    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        let chan = self.inner.chan(channel)?;
        let total: u64 = slices.iter().map(|s| s.len() as u64).sum();
        let max = self.inner.cfg.max_message;
        let len = u32::try_from(total)
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| {
                TransportError::InvalidArgument(format!(
                    "message of {total} bytes exceeds max_message ({max})"
                ))
            })?;
        if chan.unreliable {
            let fits = chan
                .conn
                .quic
                .max_datagram_size()
                .is_some_and(|m| DATAGRAM_HEADER_LEN as u64 + total <= m as u64);
            if fits {
                let d = Bytes::from(wire::encode_datagram(chan.stream, slices));
                match chan.conn.quic.send_datagram(d) {
                    Ok(()) => return Ok(()),
                    Err(SendDatagramError::ConnectionLost(e)) => {
                        return Err(TransportError::Closed(describe(&e, chan.conn.peer)))
                    }
                    // Not possible after all (e.g. the path's size shrank): the stream
                    // carries it, which is more than an unreliable channel promises.
                    Err(e) => tracing::debug!("quic: datagram not sent ({e}); using the stream"),
                }
            }
        }
        let prefix = wire::len_prefix(len);
        let mut s = lock(&chan.send);
        let written = if (len as usize) <= COALESCE {
            let mut buf = Vec::with_capacity(prefix.len() + len as usize);
            buf.extend_from_slice(&prefix);
            for sl in slices {
                buf.extend_from_slice(sl);
            }
            write_all(&mut s, &buf)
        } else {
            write_all(&mut s, &prefix)
                .and_then(|()| slices.iter().try_for_each(|sl| write_all(&mut s, sl)))
        };
        written.map_err(|e| {
            // A partly written message leaves the stream unusable.
            let _ = s.reset(VarInt::from_u32(CODE_PROTOCOL));
            write_error(e, &chan)
        })
    }

    fn close_channel(&self, channel: u64) {
        if let Some(chan) = self.inner.take(channel) {
            // The peer sees the end of the stream after the last message and reports the
            // channel closed; our reader discards what still arrives until it ends too.
            let mut s = lock(&chan.send);
            let _ = s.finish();
            self.inner.flush_later(&s);
        }
    }

    fn shutdown(&self) {
        let inner = &self.inner;
        if inner.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // From here on no host callback starts, and none is running when close returns.
        inner.gate.close();
        {
            let mut st = lock(&inner.state);
            st.stopped = true;
            st.peers.by_peer.clear();
            st.peers.conns.clear();
        }
        // Finish every channel's stream and wait (up to `linger`) until the peers have
        // acknowledged the data sent so far: closing a QUIC connection discards what is
        // still unsent, while `send` returned as soon as its bytes were queued.
        let open: Vec<Arc<Chan>> = write_lock(&inner.channels)
            .drain()
            .map(|(_, c)| c)
            .collect();
        for chan in &open {
            chan.open.store(false, Ordering::SeqCst);
            match chan.send.try_lock() {
                Ok(mut s) => {
                    // GOODBYE tells the peer the channel is lost (not closed) once it has
                    // read everything before it. If the stream's window is full it is not
                    // sent; the peer then learns from the connection's close.
                    let bye = wire::len_prefix(wire::GOODBYE);
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    let polled = std::pin::pin!(s.write(&bye)).as_mut().poll(&mut cx);
                    if let std::task::Poll::Ready(Ok(n)) = polled {
                        if n < bye.len() {
                            tracing::debug!(channel = chan.local, "quic: partial goodbye");
                        }
                    }
                    let _ = s.finish();
                    inner.flush_later(&s);
                }
                // A sender is blocked on flow control: its message cannot complete.
                Err(_) => tracing::debug!(channel = chan.local, "quic: channel busy at shutdown"),
            }
        }
        drop(open);
        let flushing = std::mem::take(&mut *lock(&inner.flushing));
        if !flushing.is_empty() && !inner.cfg.linger.is_zero() {
            let linger = inner.cfg.linger;
            let all = inner.handle.spawn(async move {
                let wait_all = async {
                    for t in flushing {
                        let _ = t.await;
                    }
                };
                if tokio::time::timeout(linger, wait_all).await.is_err() {
                    tracing::warn!(
                        "quic: peers did not acknowledge all data within {linger:?}; closing anyway"
                    );
                }
            });
            let _ = blocking::wait(all);
        }
        // Peers see the connections closed with CODE_SHUTDOWN and report their channels
        // lost (or closed, if they read the end of the stream first); wait (briefly)
        // until the close frames are out.
        inner
            .endpoint
            .close(VarInt::from_u32(CODE_SHUTDOWN), b"endpoint shut down");
        let endpoint = inner.endpoint.clone();
        let linger = inner.handle.spawn(async move {
            let _ = tokio::time::timeout(CLOSE_LINGER, endpoint.wait_idle()).await;
        });
        let _ = blocking::wait(linger);
        if let Some(rt) = lock(&self.runtime).take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            } else {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        }
        lock(directory()).remove(&inner.id);
        tracing::debug!(
            endpoint = format_args!("{:016x}", inner.id),
            "quic endpoint shut down"
        );
    }
}

impl Drop for QuicTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}
