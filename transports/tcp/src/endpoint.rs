//! A TCP endpoint: the listener, the connections (one per peer endpoint), the channel
//! tables, and the receive side that turns frames into host callbacks: each
//! connection's reader thread, or a receiver that polls the transport itself
//! (receiver-driven progress, as MPI's receivers read their sockets), while the reader
//! threads stand back for the poll lease ([`crate::lease`]).

use std::collections::HashMap;
use std::io::IoSlice;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ipl_auth::{AuthError, Initiator, Responder, CHALLENGE_LEN, HELLO_LEN};
use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::{
    ChannelSink, FastChannel, HostSink, TransportCapabilities, TransportError, TransportPlugin,
};
use ipl_transport_kit::admission::{self, Admission, DeadlineIo, Slot};
use ipl_transport_kit::channels::{
    CachedRoute, ChannelLink, ChannelTable, LinkChannels, PeerLink, Peers, Route,
};
use ipl_transport_kit::host::{host_id, HostId};
use ipl_transport_kit::listen::ListenPlan;
use ipl_transport_kit::{dial, BufferPool, Gate};
use socket2::{SockAddr, Socket};

use crate::config::Config;
use crate::lease::{PollLease, LEASE};
use crate::net;
use crate::rx::{Fill, Frame, FrameReader};
use crate::stream_spin::StreamSpin;
use crate::wire::{self, KIND_CLOSE, KIND_DATA, KIND_OPEN, MAGIC, OPENED_BY_SENDER};
use crate::Address;
use ipl_transport_kit::config::message_len;
use ipl_transport_kit::park::Parking;
use parking_lot::{Mutex, RwLock};

/// How long a reader thread waits for its socket before it looks again (at the poll
/// lease and at whether its connection ended).
const READER_TICK: Duration = Duration::from_secs(1);

/// Most frames a poller takes from one connection per call, so that a stream on one
/// connection does not keep it from the others (or from its own port); and most a
/// reader thread takes before it looks at the poll lease again.
const POLL_BUDGET: usize = 64;

/// Up to this many connections a poller reads each socket directly; beyond, one `poll`
/// first picks the readable ones.
const DIRECT_READS: usize = 4;

/// A connection dropped during the accepting side's handshake (already logged).
struct Dropped;

/// Live endpoints of this process by id, for [`TcpTransport::connection_stats`].
fn directory() -> &'static Mutex<HashMap<u64, Weak<Inner>>> {
    static DIR: OnceLock<Mutex<HashMap<u64, Weak<Inner>>>> = OnceLock::new();
    DIR.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One TCP connection to a peer endpoint, carrying every channel between the two.
struct Conn {
    /// Serial number of the connection within this endpoint.
    serial: u64,
    /// The peer endpoint's id.
    peer_id: u64,
    /// The peer's socket address (for messages).
    peer: SocketAddr,
    sock: Arc<Socket>,
    /// Held while a frame is written, so frames never interleave.
    write: Mutex<()>,
    /// Wire id as received from the peer → local channel id. `None` once the connection
    /// is lost: whoever takes an entry out owns the channel's last callback.
    chans: LinkChannels,
    /// The receive side, held by whoever reads: the reader thread or a poller. Frames
    /// are delivered under it, so a connection's frames keep their order.
    rx: Mutex<ConnRx>,
    /// Set once the receive side ended (`ConnRx::end`): pollers skip the connection and
    /// its reader thread reports it.
    rx_ended: AtomicBool,
    /// Whether, after the last drain, whole frames wait in the reader's buffer
    /// (`FrameReader::has_buffered_frame`: the drain stopped at its budget or at a
    /// message given to a receiver). The socket's readiness does not show them, so
    /// neither the reader thread nor a parked receiver sleeps while it is set.
    backlog: AtomicBool,
}

/// A connection's receive state.
struct ConnRx {
    reader: FrameReader,
    /// How the stream ended (a clean close between frames, or why not), for the reader
    /// thread to report once.
    end: Option<Result<(), String>>,
}

impl ChannelLink for Conn {
    type Hasher = std::collections::hash_map::RandomState;
    fn channels(&self) -> &LinkChannels {
        &self.chans
    }
}

impl PeerLink for Conn {
    fn peer_id(&self) -> u64 {
        self.peer_id
    }
}

impl Conn {
    /// Writes one frame: header and payload slices in one vectored write.
    fn send_frame(
        &self,
        wire_id: u64,
        kind: u8,
        slices: &[&[u8]],
        len: u32,
    ) -> std::io::Result<()> {
        let h = wire::header(len, wire_id, kind);
        const INLINE: usize = 9;
        let mut inline = [IoSlice::new(&[]); INLINE];
        let mut heap: Vec<IoSlice<'_>>;
        let iov: &mut [IoSlice<'_>] = if slices.len() < INLINE {
            inline[0] = IoSlice::new(&h);
            for (d, s) in inline[1..].iter_mut().zip(slices) {
                *d = IoSlice::new(s);
            }
            &mut inline[..=slices.len()]
        } else {
            heap = Vec::with_capacity(slices.len() + 1);
            heap.push(IoSlice::new(&h));
            heap.extend(slices.iter().map(|s| IoSlice::new(s)));
            &mut heap
        };
        let _g = self.write.lock();
        net::write_all_vectored(&self.sock, iov)
    }

    /// Breaks the connection: blocked reads and writes return, the peer sees EOF.
    fn kill(&self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }

    fn is_alive(&self) -> bool {
        self.chans.is_open()
    }
}

#[derive(Default)]
struct State {
    /// Set by `shutdown`: nothing registers any more.
    stopped: bool,
    /// The connections, and the one `connect` uses for each peer endpoint id.
    peers: Peers<Conn>,
    /// Accepted sockets still in the handshake (so `shutdown` can break them).
    pending: HashMap<u64, Arc<Socket>>,
    /// Connection threads, joined by `shutdown`.
    threads: Vec<JoinHandle<()>>,
}

struct Inner {
    id: u64,
    cfg: Config,
    context: Vec<u8>,
    address: Vec<u8>,
    /// The address the listener is bound to.
    bound: SocketAddr,
    /// Where it listens and what it advertises (its own addresses rank a peer's).
    plan: ListenPlan,
    /// This endpoint's host, if known.
    here: Option<HostId>,
    host: HostSink,
    /// Receive buffers, recycled when the host releases them.
    pool: BufferPool,
    /// Accepted connections still in the handshake, and their bound.
    admission: Admission,
    gate: Gate,
    stopping: AtomicBool,
    next_serial: AtomicU64,
    established: AtomicU64,
    state: Mutex<State>,
    /// Local channel id → route. Read on every send, hence its own lock.
    channels: ChannelTable<Conn>,
    /// The open connections, for pollers (a snapshot replaced when one comes or goes).
    live: RwLock<Arc<[Arc<Conn>]>>,
    /// While receivers poll, the reader threads stand back.
    lease: PollLease,
    /// Wakes the receivers parked in `wait` (`interrupt`, a new connection, shutdown).
    /// Host threads parked in `wait`, each on an eventfd of its own.
    parking: Parking,
}

/// Counters of one endpoint's connections, for tests and diagnostics.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionStats {
    /// TCP connections open now.
    pub open: usize,
    /// TCP connections that completed the handshake since the endpoint was created
    /// (dialed or accepted).
    pub established: u64,
    /// Accepted connections in the handshake now.
    pub handshakes: usize,
    /// Accepted connections closed at once because `tcp.max_handshakes` were in the
    /// handshake.
    pub refused: u64,
}

/// A TCP endpoint (the plugin's instance type). See the crate documentation.
pub struct TcpTransport {
    inner: Arc<Inner>,
    listener: Arc<Socket>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

fn random_id() -> Result<u64, TransportError> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b)
        .map_err(|e| TransportError::Unavailable(format!("random source failed: {e}")))?;
    Ok(u64::from_le_bytes(b))
}

fn refused_secret(peer: SocketAddr) -> TransportError {
    TransportError::Refused(format!(
        "tcp peer {peer} does not know this pool's secret (handshake refused)"
    ))
}

impl Inner {
    /// Registers a connection that finished its handshake. Fails once shut down.
    fn register(&self, conn: &Arc<Conn>) -> Result<(), TransportError> {
        let mut st = self.state.lock();
        self.register_locked(&mut st, conn)
    }

    fn register_locked(&self, st: &mut State, conn: &Arc<Conn>) -> Result<(), TransportError> {
        if st.stopped {
            return Err(TransportError::Closed(
                "tcp endpoint is shutting down".into(),
            ));
        }
        st.peers.conns.insert(conn.serial, conn.clone());
        st.peers.by_peer.insert(conn.peer_id, conn.clone());
        self.refresh_live(st);
        self.established.fetch_add(1, Ordering::Relaxed);
        // A parked receiver sleeps on the sockets it knew: it must look at this one too.
        self.parking.interrupt();
        tracing::debug!(
            endpoint = format_args!("{:016x}", self.id),
            peer = %conn.peer,
            peer_id = format_args!("{:016x}", conn.peer_id),
            "tcp connection established"
        );
        Ok(())
    }

    /// The live connection to peer endpoint `id`, if any.
    fn existing(&self, id: u64) -> Option<Arc<Conn>> {
        let c = self.state.lock().peers.by_peer.get(&id).cloned()?;
        c.is_alive().then_some(c)
    }

    fn new_conn(&self, sock: Arc<Socket>, peer_id: u64, peer: SocketAddr) -> Arc<Conn> {
        Arc::new(Conn {
            serial: self.next_serial.fetch_add(1, Ordering::Relaxed),
            peer_id,
            peer,
            sock,
            write: Mutex::new(()),
            chans: LinkChannels::default(),
            rx: Mutex::new(ConnRx {
                reader: FrameReader::new(self.cfg.max_message),
                end: None,
            }),
            rx_ended: AtomicBool::new(false),
            backlog: AtomicBool::new(false),
        })
    }

    /// Replaces the pollers' snapshot of the open connections.
    fn refresh_live(&self, st: &State) {
        *self.live.write() = st.peers.conns.values().cloned().collect();
    }

    /// Dials each of `addr`'s addresses in turn (see [`dial`]) until one connects.
    fn dial_any(
        self: &Arc<Self>,
        addr: &Address,
        timeout: Duration,
    ) -> Result<Arc<Conn>, TransportError> {
        let plan = dial::order(addr, self.here, &self.plan.own);
        dial::try_in_order("tcp", addr, &plan, timeout, |to, budget| {
            if self.stopping.load(Ordering::SeqCst) {
                return Err(TransportError::Closed(
                    "tcp endpoint is shutting down".into(),
                ));
            }
            self.dial(to, addr.id, budget)
        })
    }

    /// Dials `peer`, runs the initiator's side of the handshake with endpoint `want`,
    /// and registers the connection with a reader thread.
    fn dial(
        self: &Arc<Self>,
        peer: SocketAddr,
        want: u64,
        timeout: Duration,
    ) -> Result<Arc<Conn>, TransportError> {
        let deadline = Instant::now() + timeout;
        let io_err = |what: &str, e: std::io::Error| -> TransportError {
            if net::is_timeout(&e) {
                TransportError::Timeout(format!("tcp {what} {peer}: {e}"))
            } else {
                TransportError::Refused(format!("tcp {what} {peer}: {e}"))
            }
        };
        let sock = net::new_socket(&peer).map_err(|e| io_err("socket for", e))?;
        net::tune(&sock);
        sock.connect_timeout(&SockAddr::from(peer), timeout.max(Duration::from_millis(1)))
            .map_err(|e| io_err("connect to", e))?;
        let remaining = || {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| TransportError::Timeout(format!("tcp handshake with {peer}")))
        };
        let set_timeouts = |d: Option<Duration>| -> Result<(), TransportError> {
            sock.set_read_timeout(d)
                .and_then(|_| sock.set_write_timeout(d))
                .map_err(|e| TransportError::Other(format!("tcp socket option: {e}")))
        };
        set_timeouts(Some(remaining()?))?;
        let (init, hello) = Initiator::start(&self.cfg.secret, &self.context)
            .map_err(|e| TransportError::Other(format!("tcp handshake: {e}")))?;
        let mut first = [0u8; MAGIC.len() + HELLO_LEN];
        first[..MAGIC.len()].copy_from_slice(&MAGIC);
        first[MAGIC.len()..].copy_from_slice(&hello);
        net::write_all(&sock, &first).map_err(|e| io_err("handshake with", e))?;
        let mut challenge = [0u8; CHALLENGE_LEN];
        set_timeouts(Some(remaining()?))?;
        match net::read_exact_or_eof(&mut &sock, &mut challenge) {
            Ok(true) => {}
            Ok(false) => {
                return Err(TransportError::Refused(format!(
                    "tcp peer {peer} closed the connection during the handshake"
                )))
            }
            Err(e) => return Err(io_err("handshake with", e)),
        }
        let finish = init.on_challenge(&challenge).map_err(|e| match e {
            AuthError::BadProof => refused_secret(peer),
            e => TransportError::Refused(format!("tcp handshake with {peer}: {e}")),
        })?;
        let third = wire::finish_msg(&finish, self.id, want);
        net::write_all(&sock, &third).map_err(|e| io_err("handshake with", e))?;
        let mut their = [0u8; 8];
        set_timeouts(Some(remaining()?))?;
        match net::read_exact_or_eof(&mut &sock, &mut their) {
            Ok(true) => {}
            // The responder closes without answering when our proof is wrong.
            Ok(false) => return Err(refused_secret(peer)),
            Err(e) if net::is_timeout(&e) => return Err(io_err("handshake with", e)),
            Err(e) => {
                return Err(TransportError::Refused(format!(
                    "tcp peer {peer} ended the handshake ({e}); it may not know this pool's secret"
                )))
            }
        }
        let peer_id = u64::from_le_bytes(their);
        if peer_id != want {
            return Err(TransportError::Refused(format!(
                "no tcp endpoint {want:016x} at {peer} any more (found {peer_id:016x})"
            )));
        }
        sock.set_read_timeout(None)
            .and_then(|_| sock.set_write_timeout(Some(self.cfg.send_timeout)))
            .map_err(|e| TransportError::Other(format!("tcp socket option: {e}")))?;
        let conn = self.new_conn(Arc::new(sock), peer_id, peer);
        // Register and start the reader under one lock: the reader cannot report the
        // connection lost before it is registered, and `shutdown` joins the thread.
        let mut st = self.state.lock();
        st.threads.retain(|t| !t.is_finished());
        let me = self.clone();
        let c = conn.clone();
        let handle = thread::Builder::new()
            .name("ipl-tcp-conn".into())
            .spawn(move || me.read_loop(c))
            .map_err(|e| TransportError::Other(format!("cannot start tcp reader thread: {e}")))?;
        st.threads.push(handle);
        if let Err(e) = self.register_locked(&mut st, &conn) {
            // Shutting down: the reader finds the socket broken and ends.
            conn.kill();
            return Err(e);
        }
        Ok(conn)
    }

    /// The accepting side of the handshake, on its own thread; then the reader loop.
    fn serve_accepted(
        self: Arc<Self>,
        token: u64,
        sock: Arc<Socket>,
        peer: SocketAddr,
        slot: Slot,
        deadline: Instant,
    ) {
        let result = self.accept_handshake(&sock, peer, deadline);
        drop(slot);
        self.state.lock().pending.remove(&token);
        match result {
            Ok(conn) => self.read_loop(conn),
            Err(Dropped) => {
                let _ = sock.shutdown(Shutdown::Both);
            }
        }
    }

    /// The accepting side's handshake, all of it before `deadline` (`tcp.handshake_timeout_ms`
    /// after accept): every read and write may use only the time left, so a peer that
    /// trickles its bytes is dropped at the deadline.
    fn accept_handshake(
        &self,
        sock: &Arc<Socket>,
        peer: SocketAddr,
        deadline: Instant,
    ) -> Result<Arc<Conn>, Dropped> {
        let fail = |what: &dyn std::fmt::Display| {
            if self.stopping.load(Ordering::SeqCst) {
                tracing::debug!(peer = %peer, "tcp: handshake with {peer} cut by shutdown: {what}");
            } else {
                self.admission.dropped(&peer, what);
            }
            Dropped
        };
        let set_timeouts = |left: Duration| {
            sock.set_read_timeout(Some(left))?;
            sock.set_write_timeout(Some(left))
        };
        let mut r = DeadlineIo::new(&**sock, deadline, set_timeouts);
        // Before a write: the time left as its timeout.
        let arm = || {
            admission::left(deadline)
                .and_then(set_timeouts)
                .map_err(|e| fail(&format_args!("handshake: {e}")))
        };
        // The preamble first, so that a client speaking another protocol is dropped at
        // once rather than after the timeout.
        let mut magic = [0u8; MAGIC.len()];
        match net::read_exact_or_eof(&mut r, &mut magic) {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(peer = %peer, "tcp: connection closed before the handshake");
                return Err(Dropped);
            }
            Err(e) => return Err(fail(&format_args!("handshake: {e}"))),
        }
        if magic != MAGIC {
            return Err(fail(&"not an IPL tcp endpoint (bad preamble)"));
        }
        let mut hello = [0u8; HELLO_LEN];
        net::read_exact_or_eof(&mut r, &mut hello)
            .and_then(|full| {
                full.then_some(())
                    .ok_or_else(|| std::io::ErrorKind::UnexpectedEof.into())
            })
            .map_err(|e| fail(&format_args!("handshake: {e}")))?;
        let (resp, challenge) = Responder::on_hello(&self.cfg.secret, &self.context, &hello)
            .map_err(|e| fail(&format_args!("handshake: {e}")))?;
        arm()?;
        net::write_all(sock, &challenge).map_err(|e| fail(&format_args!("handshake: {e}")))?;
        let mut third = [0u8; wire::FINISH_MSG_LEN];
        match net::read_exact_or_eof(&mut r, &mut third) {
            Ok(true) => {}
            // The initiator hangs up when our proof is wrong: it does not share the secret.
            Ok(false) => return Err(fail(&"it does not know this pool's secret (hung up)")),
            Err(e) => return Err(fail(&format_args!("handshake: {e}"))),
        }
        let wire::FinishMsg {
            finish,
            peer_id,
            wanted,
        } = wire::parse_finish_msg(&third);
        if resp.on_finish(&finish).is_err() {
            return Err(fail(&"it does not know this pool's secret"));
        }
        if wanted != self.id {
            tracing::debug!(peer = %peer, "tcp: peer wanted endpoint {wanted:016x}, a stale address");
            arm()?;
            let _ = net::write_all(sock, &self.id.to_le_bytes());
            return Err(Dropped);
        }
        sock.set_read_timeout(None)
            .and_then(|_| sock.set_write_timeout(Some(self.cfg.send_timeout)))
            .map_err(|e| fail(&format_args!("socket option: {e}")))?;
        let conn = self.new_conn(sock.clone(), peer_id, peer);
        // Our id is the last handshake message; hold the write lock until it is out so
        // that a frame sent on the connection by a concurrent `connect` cannot precede it.
        let guard = conn.write.lock();
        self.register(&conn).map_err(|_| Dropped)?;
        let sent = net::write_all(sock, &self.id.to_le_bytes());
        drop(guard);
        if let Err(e) = sent {
            // The reader loop will find the socket broken and clean up.
            tracing::debug!(peer = %peer, "tcp: handshake: {e}");
            conn.kill();
        }
        Ok(conn)
    }

    /// Reads frames until the connection ends, then reports its channels lost.
    fn read_loop(self: Arc<Self>, conn: Arc<Conn>) {
        let reason = match self.read_frames(&conn) {
            Ok(()) => format!("tcp connection to {} closed by the peer", conn.peer),
            Err(e) => e,
        };
        self.conn_lost(&conn, &reason);
    }

    /// `Ok` on a clean end of stream between frames; `Err(reason)` otherwise. Waits for
    /// the socket to be readable (standing back while receivers poll), then reads
    /// what arrived and delivers it; while a frame comes in, it reads on without
    /// waiting (see `stream_spin`).
    fn read_frames(&self, conn: &Arc<Conn>) -> Result<(), String> {
        let mut spin = StreamSpin::new(self.cfg.reader_spin);
        loop {
            self.lease.stand_back(|| {
                conn.rx_ended.load(Ordering::Acquire) || self.stopping.load(Ordering::Acquire)
            });
            if spin.read_on(Instant::now()) {
                std::hint::spin_loop();
            } else if !conn.rx_ended.load(Ordering::Acquire)
                && !conn.backlog.load(Ordering::Acquire)
            {
                net::wait_readable(&conn.sock, READER_TICK);
            }
            let mut rx = conn.rx.lock();
            let before = rx.reader.received();
            if rx.end.is_none() {
                // A budget, so that a poller that started meanwhile gets the rest.
                self.drain(conn, &mut rx, None, POLL_BUDGET);
            }
            if let Some(end) = rx.end.take() {
                return end;
            }
            let moved = rx.reader.received() != before;
            let missing = rx.reader.missing();
            drop(rx);
            spin.after_drain(moved, missing, Instant::now());
        }
    }

    /// Reads what has arrived on `conn` without blocking and delivers every whole
    /// frame, at most `budget`; with `want` (a local channel and a receiver's sink) the
    /// next message of that channel goes to the sink and the drain stops there. The end
    /// of the stream or a failure is kept in `rx.end` (a failed connection is killed)
    /// for the reader thread to report. Returns the messages delivered.
    fn drain(
        &self,
        conn: &Arc<Conn>,
        rx: &mut ConnRx,
        want: Option<(u64, &mut ChannelSink<'_>)>,
        budget: usize,
    ) -> usize {
        let delivered = self.drain_frames(conn, rx, want, budget);
        let backlog = rx.end.is_none() && rx.reader.has_buffered_frame();
        conn.backlog.store(backlog, Ordering::Release);
        delivered
    }

    /// The loop of [`drain`](Self::drain).
    fn drain_frames(
        &self,
        conn: &Arc<Conn>,
        rx: &mut ConnRx,
        mut want: Option<(u64, &mut ChannelSink<'_>)>,
        budget: usize,
    ) -> usize {
        let mut delivered = 0;
        while rx.end.is_none() {
            loop {
                match rx.reader.next(|| self.pool.take()) {
                    Ok(Some(frame)) => match self.on_frame(conn, frame, &mut want) {
                        Ok(given) => {
                            delivered += 1;
                            if given || delivered >= budget {
                                return delivered;
                            }
                        }
                        Err(e) => {
                            self.end_rx(conn, rx, Err(self.protocol_error(conn, &e)));
                            return delivered;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        self.end_rx(conn, rx, Err(self.protocol_error(conn, &e)));
                        return delivered;
                    }
                }
            }
            match rx.reader.fill(|b| net::recv_now(&conn.sock, b)) {
                Ok(Fill::Read(_)) => {}
                Ok(Fill::Empty) => break,
                Ok(Fill::Eof) => {
                    let end = if rx.reader.between_frames() {
                        Ok(())
                    } else {
                        let e = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                        Err(net::read_failure(&conn.peer, &e))
                    };
                    self.end_rx(conn, rx, end);
                }
                Err(e) => self.end_rx(conn, rx, Err(net::read_failure(&conn.peer, &e))),
            }
        }
        delivered
    }

    /// Records how a connection's receive side ended; a failed one is killed, and a
    /// reader thread standing back is woken to report it.
    fn end_rx(&self, conn: &Conn, rx: &mut ConnRx, end: Result<(), String>) {
        if end.is_err() {
            conn.kill();
        }
        rx.end = Some(end);
        conn.rx_ended.store(true, Ordering::Release);
        self.lease.wake();
    }

    /// Logs a protocol error of the peer and says what it was.
    fn protocol_error(&self, conn: &Conn, what: &str) -> String {
        let peer = conn.peer;
        tracing::warn!(peer = %peer, "tcp: protocol error from {peer}: {what}");
        format!("tcp protocol error from {peer}: {what}")
    }

    /// Delivers one frame: a message through the host (or to `want`'s sink, returning
    /// true), a channel opened or closed by the peer. `Err` is a protocol error.
    fn on_frame(
        &self,
        conn: &Arc<Conn>,
        frame: Frame,
        want: &mut Option<(u64, &mut ChannelSink<'_>)>,
    ) -> Result<bool, String> {
        let Frame {
            kind,
            wire_id,
            data,
        } = frame;
        match kind {
            KIND_DATA => {
                // A message for a channel we closed locally is dropped.
                let Some(local) = conn.chans.get(wire_id) else {
                    return Ok(false);
                };
                let Some(_e) = self.gate.enter() else {
                    return Ok(false);
                };
                if let Some((ch, sink)) = want {
                    if *ch == local && !sink.given() {
                        return match sink.give(self.pool.wrap(data)) {
                            Ok(()) => Ok(true),
                            Err(buf) => {
                                self.host.message(local, buf);
                                Ok(false)
                            }
                        };
                    }
                }
                self.pool.deliver(&self.host, local, data);
            }
            KIND_OPEN => {
                if wire_id & OPENED_BY_SENDER == 0 {
                    return Err(format!("malformed OPEN (id {wire_id:#x})"));
                }
                let Some(local) = self.channels.accept(conn, wire_id) else {
                    return Err(format!("duplicate OPEN of channel {wire_id:#x}"));
                };
                if let Some(_e) = self.gate.enter() {
                    self.host.channel_opened(local);
                }
            }
            KIND_CLOSE => {
                if let Some(local) = self.channels.peer_closed(conn, wire_id) {
                    if let Some(_e) = self.gate.enter() {
                        self.host.channel_closed(
                            local,
                            CloseCode::CLOSED_BY_PEER,
                            "closed by peer",
                        );
                    }
                }
            }
            other => return Err(format!("unknown frame kind {other}")),
        }
        Ok(false)
    }

    /// Receiver-driven progress: renews the poll lease and delivers what arrived on
    /// every connection whose receive side nobody else holds; with `want`, that
    /// channel's connection first, its next message to the sink.
    fn poll_conns(&self, want: Option<(u64, &mut ChannelSink<'_>)>) -> usize {
        match want {
            Some((ch, sink)) => match self.route(ch) {
                Ok(route) => self.poll_conns_on(Some((&route.link, ch, sink))),
                Err(_) => self.poll_conns_on(None),
            },
            None => self.poll_conns_on(None),
        }
    }

    /// [`poll_conns`](Self::poll_conns) with the wanted channel's connection known.
    fn poll_conns_on(&self, want: Option<(&Arc<Conn>, u64, &mut ChannelSink<'_>)>) -> usize {
        self.lease.touch();
        let mut delivered = 0;
        let mut first: Option<*const Conn> = None;
        if let Some((c, ch, sink)) = want {
            first = Some(Arc::as_ptr(c));
            if !c.rx_ended.load(Ordering::Acquire) {
                if let Some(mut rx) = c.rx.try_lock() {
                    delivered += self.drain(c, &mut rx, Some((ch, &mut *sink)), POLL_BUDGET);
                }
            }
            if sink.given() {
                return delivered;
            }
        }
        let live = Arc::clone(&*self.live.read());
        let others = live
            .iter()
            .filter(|c| first != Some(Arc::as_ptr(c)) && !c.rx_ended.load(Ordering::Acquire));
        let mut read_conn = |c: &Arc<Conn>| {
            if let Some(mut rx) = c.rx.try_lock() {
                delivered += self.drain(c, &mut rx, None, POLL_BUDGET);
            }
        };
        if live.len() <= DIRECT_READS {
            // A read of each socket; nothing allocated on this path, which a waiting
            // receiver runs in a loop.
            others.for_each(read_conn);
        } else {
            // A read costs a system call: one `poll` first finds the sockets with
            // something to read (frames already buffered do not show there).
            let conns: Vec<&Arc<Conn>> = others.collect();
            let ready = net::readable(conns.iter().map(|c| &*c.sock));
            for (c, r) in conns.into_iter().zip(ready) {
                if r || c.backlog.load(Ordering::Acquire) {
                    read_conn(c);
                }
            }
        }
        delivered
    }

    /// Forgets a connection that ended and reports each of its channels lost.
    fn conn_lost(&self, conn: &Arc<Conn>, reason: &str) {
        conn.kill();
        let locals = conn.chans.take().unwrap_or_default();
        {
            let mut st = self.state.lock();
            st.peers.remove(conn.serial, conn);
            self.refresh_live(&st);
        }
        self.channels.forget_all(&locals);
        tracing::debug!(peer = %conn.peer, channels = locals.len(), "tcp connection ended: {reason}");
        for l in locals {
            if let Some(_e) = self.gate.enter() {
                self.host.channel_closed(l, CloseCode::LOST, reason);
            }
        }
    }

    fn route(&self, channel: u64) -> Result<Route<Conn>, TransportError> {
        self.channels.route("tcp", channel)
    }

    /// A data message on a route (the size checked against `max_message`).
    fn send_on(&self, route: &Route<Conn>, slices: &[&[u8]]) -> Result<(), TransportError> {
        let len = message_len(slices, self.cfg.max_message)?;
        route
            .link
            .send_frame(route.wire, KIND_DATA, slices, len)
            .map_err(|e| {
                // A partly written frame leaves the stream unusable.
                route.link.kill();
                if net::is_timeout(&e) {
                    TransportError::Timeout(format!(
                        "tcp: the peer at {} took no data for {} ms (tcp.send_timeout_ms); connection closed",
                        route.link.peer,
                        self.cfg.send_timeout.as_millis()
                    ))
                } else {
                    TransportError::Closed(format!(
                        "tcp connection to {} failed: {e}",
                        route.link.peer
                    ))
                }
            })
    }
}

impl TcpTransport {
    /// Connection counters of the live endpoint at `address` in this process (`None` if
    /// there is none). For tests: e.g. to check that channel pairing uses one connection.
    #[doc(hidden)]
    pub fn connection_stats(address: &[u8]) -> Option<ConnectionStats> {
        let id = Address::parse("tcp", address).ok()?.id;
        let inner = directory().lock().get(&id).and_then(Weak::upgrade)?;
        let open = inner.state.lock().peers.conns.len();
        Some(ConnectionStats {
            open,
            established: inner.established.load(Ordering::Relaxed),
            handshakes: inner.admission.pending(),
            refused: inner.admission.refused(),
        })
    }

    /// The remote addresses of the connections of the live endpoint at `address` in
    /// this process (`None` if there is none). For tests: which path a connection took.
    #[doc(hidden)]
    pub fn peer_addresses(address: &[u8]) -> Option<Vec<SocketAddr>> {
        let id = Address::parse("tcp", address).ok()?.id;
        let inner = directory().lock().get(&id).and_then(Weak::upgrade)?;
        let peers = inner
            .state
            .lock()
            .peers
            .conns
            .values()
            .map(|c| c.peer)
            .collect();
        Some(peers)
    }

    fn accept_loop(inner: Arc<Inner>, listener: Arc<Socket>) {
        loop {
            let accepted = listener.accept();
            if inner.stopping.load(Ordering::SeqCst) {
                break;
            }
            let (sock, from) = match accepted {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. out of file descriptors: wait a little instead of spinning.
                    inner.admission.accept_failed(&e);
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            // An IPv4 peer of a dual-stack listener shows as ::ffff:a.b.c.d.
            let peer = from
                .as_socket()
                .map(|a| SocketAddr::new(a.ip().to_canonical(), a.port()))
                .unwrap_or_else(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
            net::tune(&sock);
            let deadline = Instant::now() + inner.cfg.handshake_timeout;
            // Beyond `tcp.max_handshakes` strangers could hold every thread and file
            // descriptor: closed at once (and counted, the warning rate-limited).
            let Some(slot) = inner.admission.admit(&peer) else {
                drop(sock);
                continue;
            };
            let sock = Arc::new(sock);
            let token = inner.next_serial.fetch_add(1, Ordering::Relaxed);
            {
                let mut st = inner.state.lock();
                if st.stopped {
                    break;
                }
                st.threads.retain(|t| !t.is_finished());
                st.pending.insert(token, sock.clone());
            }
            let me = inner.clone();
            let s = sock.clone();
            match thread::Builder::new()
                .name("ipl-tcp-conn".into())
                .spawn(move || me.serve_accepted(token, s, peer, slot, deadline))
            {
                Ok(h) => inner.state.lock().threads.push(h),
                Err(e) => {
                    tracing::warn!("tcp: cannot start a thread for {peer}: {e}");
                    inner.state.lock().pending.remove(&token);
                    let _ = sock.shutdown(Shutdown::Both);
                }
            }
        }
        tracing::debug!("tcp: accept loop ended");
    }

    /// Stops the accept loop: shuts the listening socket down (which wakes `accept` on
    /// Linux) and, if that is not enough, connects to it once.
    fn stop_acceptor(&self) {
        let _ = self.listener.shutdown(Shutdown::Both);
        let Some(handle) = self.acceptor.lock().take() else {
            return;
        };
        let wait = |limit: Duration| {
            let end = Instant::now() + limit;
            while !handle.is_finished() && Instant::now() < end {
                thread::sleep(Duration::from_millis(1));
            }
            handle.is_finished()
        };
        if !wait(Duration::from_millis(200)) {
            let mut to = self.inner.bound;
            if to.ip().is_unspecified() {
                to.set_ip(match to.ip() {
                    IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                });
            }
            let _ = std::net::TcpStream::connect_timeout(&to, Duration::from_millis(500));
            if !wait(Duration::from_secs(2)) {
                // Never happens on the platforms we know; the thread makes no callbacks,
                // so leaving it is safe.
                tracing::warn!("tcp: accept thread did not stop; leaving it");
                return;
            }
        }
        let _ = handle.join();
    }
}

impl TransportPlugin for TcpTransport {
    const NAME: &'static str = "tcp";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const CAPABILITIES: TransportCapabilities = TransportCapabilities::RELIABLE
        .union(TransportCapabilities::FIFO)
        .union(TransportCapabilities::NETWORK)
        .union(TransportCapabilities::SAME_HOST)
        .union(TransportCapabilities::POLLED);
    const PRIORITY: i32 = 50;

    fn create(config: &str, host: HostSink) -> Result<Self, TransportError> {
        let cfg = Config::parse(config)?;
        let mut plan = cfg.listen_plan("tcp")?;
        let listener = match net::listen(plan.bind, plan.only_v6()) {
            Err(e) if plan.dual_stack => {
                // No IPv6 here: IPv4 only.
                tracing::debug!("tcp: cannot listen on {} ({e}); IPv4 only", plan.bind);
                plan = plan.ipv4_only().unwrap_or(plan);
                net::listen(plan.bind, plan.only_v6())
            }
            r => r,
        }
        .map_err(|e| {
            let msg = format!("tcp: cannot listen on {}: {e}", plan.bind);
            match e.kind() {
                std::io::ErrorKind::AddrNotAvailable | std::io::ErrorKind::InvalidInput => {
                    TransportError::InvalidArgument(msg)
                }
                _ => TransportError::Unavailable(msg),
            }
        })?;
        let bound = listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| TransportError::Other("tcp: listener has no address".into()))?;
        let id = random_id()?;
        let here = host_id()
            .inspect_err(|e| {
                tracing::debug!("tcp: no host id ({e}); peers try loopback as any address")
            })
            .ok();
        let address = plan.endpoint(bound.port(), id, here).to_bytes();
        let inner = Arc::new(Inner {
            id,
            context: cfg.auth_context(),
            admission: Admission::new("tcp", cfg.max_handshakes),
            cfg,
            address,
            bound,
            plan,
            here,
            host,
            pool: BufferPool::new(16, 64 << 20),
            gate: Gate::new(),
            stopping: AtomicBool::new(false),
            next_serial: AtomicU64::new(1),
            established: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            channels: ChannelTable::default(),
            live: RwLock::new(Arc::from(Vec::new())),
            lease: PollLease::new(LEASE),
            parking: Parking::default(),
        });
        let listener = Arc::new(listener);
        let (i, l) = (inner.clone(), listener.clone());
        let acceptor = thread::Builder::new()
            .name("ipl-tcp-accept".into())
            .spawn(move || TcpTransport::accept_loop(i, l))
            .map_err(|e| {
                TransportError::Unavailable(format!("cannot start tcp accept thread: {e}"))
            })?;
        directory().lock().insert(id, Arc::downgrade(&inner));
        tracing::debug!(
            address = %String::from_utf8_lossy(&inner.address),
            bound = %bound,
            "tcp endpoint created"
        );
        Ok(TcpTransport {
            inner,
            listener,
            acceptor: Mutex::new(Some(acceptor)),
        })
    }

    fn local_address(&self) -> Vec<u8> {
        self.inner.address.clone()
    }

    fn connect(&self, address: &[u8], timeout: Duration) -> Result<u64, TransportError> {
        let addr = Address::parse("tcp", address)?;
        let inner = &self.inner;
        // A reused connection may turn out dead only when we write to it; then dial anew
        // once.
        inner.channels.connect(
            "tcp",
            &inner.stopping,
            || match inner.existing(addr.id) {
                Some(c) => Ok(c),
                None => inner.dial_any(&addr, timeout),
            },
            |conn| TransportError::Closed(format!("tcp connection to {} was lost", conn.peer)),
            |conn, wire| {
                conn.send_frame(wire, KIND_OPEN, &[], 0).map_err(|e| {
                    conn.kill();
                    TransportError::Closed(format!("tcp connection to {} failed: {e}", conn.peer))
                })
            },
        )
    }

    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        let route = self.inner.route(channel)?;
        self.inner.send_on(&route, slices)
    }

    fn progress(&self) -> usize {
        self.inner.poll_conns(None)
    }

    fn take(&self, channel: u64, sink: &mut ChannelSink<'_>) -> usize {
        self.inner.poll_conns(Some((channel, sink)))
    }

    fn progress_end(&self) {
        self.inner.lease.end();
    }

    fn fast_path(&self, channel: u64) -> Option<Box<dyn FastChannel>> {
        let route = CachedRoute::new(&self.inner.channels, "tcp", channel)?;
        Some(Box::new(TcpFast {
            inner: Arc::clone(&self.inner),
            route,
        }))
    }

    /// Sleeps in `poll` on every connection's socket (and an eventfd of this thread's own, for `interrupt`), so that the
    /// peer's data wakes this thread and not a reader thread first; the reader threads
    /// stand back meanwhile. Delivers nothing: the host calls `take` or `progress` next.
    fn wait(&self, timeout: Duration) -> bool {
        let inner = &*self.inner;
        if inner.stopping.load(Ordering::Acquire) {
            return false;
        }
        // Registered before the look at the buffers and sockets: an interrupt from now
        // on signals this thread's eventfd, and one since its last wait returns at once.
        let parked = match inner.parking.park() {
            Ok(Some(p)) => p,
            Ok(None) => return true,
            Err(e) => {
                tracing::debug!("tcp: cannot park a thread: {e}");
                return false;
            }
        };
        let _standing_back = inner.lease.park();
        let live = Arc::clone(&*inner.live.read());
        // Frames already in a reader's buffer do not wake `poll`: the host takes them
        // first.
        if live.iter().any(|c| c.backlog.load(Ordering::Acquire)) {
            return true;
        }
        let socks = live
            .iter()
            .filter(|c| !c.rx_ended.load(Ordering::Acquire))
            .map(|c| &*c.sock);
        net::wait_parked(parked.fd(), socks, timeout);
        true
    }

    fn interrupt(&self) {
        self.inner.parking.interrupt();
    }

    fn close_channel(&self, channel: u64) {
        // Unless the connection's loss report owns the channel, tell the peer.
        if let Some(route) = self.inner.channels.close(channel) {
            if let Err(e) = route.link.send_frame(route.wire, KIND_CLOSE, &[], 0) {
                tracing::debug!(peer = %route.link.peer, "tcp: CLOSE not sent: {e}");
                route.link.kill();
            }
        }
    }

    fn shutdown(&self) {
        let inner = &self.inner;
        if inner.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        inner.state.lock().stopped = true;
        // From here on no host callback starts, and none is running when close returns.
        inner.gate.close();
        self.stop_acceptor();
        let (conns, pending, threads) = {
            let mut st = inner.state.lock();
            st.peers.by_peer.clear();
            (
                std::mem::take(&mut st.peers.conns),
                std::mem::take(&mut st.pending),
                std::mem::take(&mut st.threads),
            )
        };
        inner.channels.clear();
        *inner.live.write() = Arc::from(Vec::new());
        // Reader threads standing back for a poll lease look at `stopping`; parked
        // receivers return.
        inner.lease.wake();
        inner.parking.interrupt();
        // Peers see EOF and report their channels lost.
        for c in conns.values() {
            c.kill();
        }
        for s in pending.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let me = thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        directory().lock().remove(&inner.id);
        tracing::debug!(
            endpoint = format_args!("{:016x}", inner.id),
            "tcp endpoint shut down"
        );
    }
}

/// One channel's fast path: its route, found once (see [`CachedRoute`]).
struct TcpFast {
    inner: Arc<Inner>,
    route: CachedRoute<Conn>,
}

impl FastChannel for TcpFast {
    fn send(&self, slices: &[&[u8]]) -> Result<(), TransportError> {
        let route = self.route.confirm(&self.inner.channels, "tcp")?;
        self.inner.send_on(route, slices)
    }

    fn take(&self, sink: &mut ChannelSink<'_>) -> usize {
        let ch = self.route.channel();
        self.inner
            .poll_conns_on(Some((&self.route.route().link, ch, sink)))
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}
