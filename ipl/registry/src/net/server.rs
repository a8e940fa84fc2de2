//! [`RegistryServer`]: the registry over TCP.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use parking_lot::Mutex;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ipl_auth::{PoolSecret, Responder};

use crate::core::{MaybeDead, RegistryCore};
use crate::error::{RegistryError, Result};
use crate::identifier::{IbisIdentifier, MemberId};

use super::heartbeat::{Heartbeat, LastHeard};
use super::protocol::{
    encode, read_msg, write_msg, Challenge, ClientMsg, FrameError, Hello, Liveness, Refusal, Reply,
    Request, ServerMsg, Welcome, AUTH_CONTEXT, MAX_FRAME, MAX_HANDSHAKE_FRAME, PROTOCOL_VERSION,
};
use ipl_auth::admission::{Admission, DeadlineIo, Slot, DEFAULT_MAX_HANDSHAKES};

/// Default time a suspect has to answer a liveness probe.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default time a new connection has to complete the handshake, from accept to
/// authenticated (a deadline for the whole handshake, not for each read).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the accept loop checks for shutdown.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

type Key = (String, MemberId);

fn key(m: &IbisIdentifier) -> Key {
    (m.pool().to_owned(), m.id())
}

/// A registry server: a [`RegistryCore`] served over TCP to any number of
/// members, each connection authenticated with the server's pool secret.
///
/// * One thread reads each connection (and handles its requests in order),
///   one writes to it; the core sits in one mutex.
/// * After every request, the events of every touched member are pushed to
///   that member's connection (before the request's response).
/// * A connection that closes (a killed process, a dropped
///   [`NetRegistry`](super::NetRegistry)) takes its members with it: they are
///   declared dead and the others get `Died`.
/// * A connection that goes silent without closing (a cut link, a frozen
///   host, a stopped process) is found by [heartbeats](super::heartbeat):
///   the server sends one every interval and closes a connection from which
///   nothing arrived for longer than the timeout
///   ([`with_heartbeat`](Self::with_heartbeat)); its members are declared
///   dead as above.
/// * `maybe_dead` probes the suspect: the server pings it on its connection
///   and declares it dead if no pong arrives within the probe timeout.
///   `maybe_dead` and `assume_dead` only reach members of the caller's pool.
/// * Connections that fail the handshake, send malformed frames or announce
///   oversized ones are logged (`tracing::warn!`, with the peer address; the
///   handshake failures at most once per
///   [`REFUSAL_LOG_INTERVAL`](ipl_auth::admission::REFUSAL_LOG_INTERVAL), the rest
///   at debug level) and closed; nobody else notices.
/// * A new connection has [`with_handshake_timeout`](Self::with_handshake_timeout)
///   in all to authenticate, however slowly its bytes arrive; at most
///   [`with_max_handshakes`](Self::with_max_handshakes) connections are in the
///   handshake at once, and one beyond that is turned away at once with a short
///   busy refusal ([`Refusal::Busy`]) and closed (counted, and
///   logged at most once per
///   [`REFUSAL_LOG_INTERVAL`](ipl_auth::admission::REFUSAL_LOG_INTERVAL)). Strangers
///   that hold every slot keep members out only until their deadline.
///
/// Any number of pools are served at once, by name. A pool whose members
/// have all left or died is forgotten: its state is freed, and a later join
/// of the same name starts a fresh pool.
///
/// ```
/// use std::time::Duration;
/// use ipl_auth::PoolSecret;
/// use ipl_registry::{JoinRequest, NetRegistry, PoolConfig, RegistryServer};
///
/// let secret = PoolSecret::generate().unwrap();
/// let server = RegistryServer::bind("127.0.0.1:0", secret.clone()).unwrap();
/// let handle = server.run_in_background().unwrap();
/// let client = NetRegistry::connect(handle.local_addr(), &secret, Duration::from_secs(5)).unwrap();
/// let member = client.join("pool", PoolConfig::closed_world(1), JoinRequest::new("c")).unwrap();
/// member.wait_until_pool_closed(Some(Duration::from_secs(5))).unwrap();
/// member.leave().unwrap();
/// handle.shutdown();
/// ```
pub struct RegistryServer {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<ServerShared>,
}

impl std::fmt::Debug for RegistryServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

struct ServerShared {
    secret: PoolSecret,
    heartbeat: Heartbeat,
    probe_timeout: Duration,
    handshake_timeout: Duration,
    /// The connections in the handshake, and their bound.
    admission: Admission,
    state: Mutex<ServerState>,
    stop: AtomicBool,
    next_nonce: AtomicU64,
    /// Outstanding liveness probes: nonce → (probed connection, waiter).
    probes: Mutex<HashMap<u64, (u64, mpsc::Sender<()>)>>,
}

#[derive(Default)]
struct ServerState {
    core: RegistryCore,
    conns: HashMap<u64, Conn>,
    owners: HashMap<Key, u64>,
    next_conn: u64,
}

struct Conn {
    tx: mpsc::Sender<Vec<u8>>,
    stream: TcpStream,
    peer: SocketAddr,
    members: BTreeSet<Key>,
    /// When the reader last received a frame.
    heard: Arc<LastHeard>,
}

impl RegistryServer {
    /// Binds a listener on `addr` (e.g. `"127.0.0.1:0"` for any free port).
    /// Clients must prove they know `secret`.
    pub fn bind(addr: impl ToSocketAddrs, secret: PoolSecret) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        Ok(Self {
            listener,
            addr,
            shared: Arc::new(ServerShared {
                secret,
                heartbeat: Heartbeat::default(),
                probe_timeout: DEFAULT_PROBE_TIMEOUT,
                handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
                admission: Admission::new("registry", DEFAULT_MAX_HANDSHAKES),
                state: Mutex::new(ServerState::default()),
                stop: AtomicBool::new(false),
                next_nonce: AtomicU64::new(0),
                probes: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Sets how long a suspect has to answer a liveness probe
    /// (default [`DEFAULT_PROBE_TIMEOUT`]).
    pub fn with_probe_timeout(mut self, timeout: Duration) -> Self {
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            s.probe_timeout = timeout;
        }
        self
    }

    /// Sets the heartbeat interval and timeout of every connection (default
    /// [`Heartbeat::default`]: every 2 s, given up after 10 s of silence).
    /// Clients adopt them in the handshake. A member whose connection is
    /// silent for longer than the timeout is declared dead between `timeout`
    /// and `timeout + interval` after the last frame it sent.
    pub fn with_heartbeat(mut self, heartbeat: Heartbeat) -> Self {
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            s.heartbeat = heartbeat;
        }
        self
    }

    /// Sets how long a new connection has to complete the handshake, from
    /// accept to authenticated, however its bytes trickle in (default
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`]).
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            s.handshake_timeout = timeout;
        }
        self
    }

    /// Sets how many connections may be in the handshake at once (default
    /// [`DEFAULT_MAX_HANDSHAKES`], at least 1); a connection beyond that is
    /// turned away at once (a short busy refusal, then closed; a client retries
    /// within its connect timeout). Each such connection holds a thread and a file
    /// descriptor for at most the handshake timeout.
    pub fn with_max_handshakes(mut self, max: usize) -> Self {
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            s.admission = Admission::new("registry", max);
        }
        self
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves on the calling thread, forever (until the process ends).
    pub fn serve(self) -> io::Result<()> {
        tracing::info!(
            addr = %self.addr,
            heartbeat_interval_ms = self.shared.heartbeat.interval_ms(),
            heartbeat_timeout_ms = self.shared.heartbeat.timeout_ms(),
            "registry server listening"
        );
        // Lives as long as this function: the heartbeat thread runs forever.
        let (_stop, _heartbeats) = spawn_heartbeats(&self.shared)?;
        accept_loop(&self.listener, &self.shared)
    }

    /// Serves on a background thread; the returned handle stops it.
    pub fn run_in_background(self) -> io::Result<ServerHandle> {
        let shared = Arc::clone(&self.shared);
        let listener = self.listener;
        tracing::debug!(addr = %self.addr, "registry server listening");
        let (stop_heartbeats, heartbeats) = spawn_heartbeats(&self.shared)?;
        let thread = thread::Builder::new()
            .name("ipl-registry-accept".into())
            .spawn(move || {
                if let Err(e) = accept_loop(&listener, &shared) {
                    tracing::error!(error = %e, "registry server stopped");
                }
            })?;
        Ok(ServerHandle {
            shared: self.shared,
            addr: self.addr,
            thread: Some(thread),
            heartbeats: Some((stop_heartbeats, heartbeats)),
        })
    }
}

/// A server running in the background; dropping it (or
/// [`shutdown`](Self::shutdown)) stops it and closes all connections.
pub struct ServerHandle {
    shared: Arc<ServerShared>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
    /// Dropping the sender stops the heartbeat thread.
    heartbeats: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Runs `f` on the core under the lock (read-only), e.g. for inspection.
    pub fn with_core<R>(&self, f: impl FnOnce(&RegistryCore) -> R) -> R {
        f(&self.shared.state.lock().core)
    }

    /// Number of pools the server currently holds (finished pools are
    /// forgotten).
    pub fn pools(&self) -> usize {
        self.shared.state.lock().core.pools().count()
    }

    /// Number of open, authenticated connections.
    pub fn connections(&self) -> usize {
        self.shared.state.lock().conns.len()
    }

    /// Number of connections in the handshake now (not yet authenticated).
    pub fn handshakes(&self) -> usize {
        self.shared.admission.pending()
    }

    /// Number of connections closed at once because
    /// [`with_max_handshakes`](RegistryServer::with_max_handshakes) handshakes
    /// were running.
    pub fn refused_connections(&self) -> u64 {
        self.shared.admission.refused()
    }

    /// Stops accepting, closes all connections and waits for the accept
    /// thread.
    pub fn shutdown(self) {}

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("registry accept thread panicked");
            }
        }
        if let Some((stop, t)) = self.heartbeats.take() {
            drop(stop);
            if t.join().is_err() {
                tracing::error!("registry heartbeat thread panicked");
            }
        }
        let st = self.shared.state.lock();
        for c in st.conns.values() {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        tracing::debug!(addr = %self.addr, "registry server shut down");
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the thread that sends every connection a heartbeat each interval
/// and closes the connections that stayed silent beyond the timeout. It stops
/// when the returned sender is dropped.
fn spawn_heartbeats(shared: &Arc<ServerShared>) -> io::Result<(mpsc::Sender<()>, JoinHandle<()>)> {
    let (stop, stopped) = mpsc::channel::<()>();
    let shared = Arc::clone(shared);
    let thread = thread::Builder::new()
        .name("ipl-registry-heartbeat".into())
        .spawn(move || {
            let hb = shared.heartbeat;
            let mut seq = 0u64;
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(hb.interval()) {
                seq = seq.wrapping_add(1);
                let frame = match encode(&ServerMsg::Heartbeat { seq }) {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::error!(error = %e, "could not encode a heartbeat");
                        return;
                    }
                };
                let st = shared.state.lock();
                for (id, c) in &st.conns {
                    let silence = c.heard.silence();
                    if silence > hb.timeout() {
                        tracing::warn!(
                            peer = %c.peer,
                            conn = id,
                            silent_ms = super::heartbeat::millis(silence),
                            timeout_ms = hb.timeout_ms(),
                            members = c.members.len(),
                            "registry client silent beyond the heartbeat timeout (cut link, frozen host or stopped process): closing its connection, its members are declared dead"
                        );
                        // Wakes its reader, which declares the members dead.
                        let _ = c.stream.shutdown(Shutdown::Both);
                    } else {
                        let _ = c.tx.send(frame.clone());
                    }
                }
            }
        })?;
    Ok((stop, thread))
}

fn accept_loop(listener: &TcpListener, shared: &Arc<ServerShared>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let deadline = Instant::now() + shared.handshake_timeout;
                let Some(slot) = shared.admission.admit(&peer) else {
                    turn_away(stream, shared.admission.pending());
                    continue;
                };
                let shared = Arc::clone(shared);
                let spawned = thread::Builder::new()
                    .name("ipl-registry-conn".into())
                    .spawn(move || serve_connection(&shared, stream, peer, slot, deadline));
                if let Err(e) = spawned {
                    tracing::error!(peer = %peer, error = %e, "could not start a connection thread");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                shared.admission.accept_failed(&e);
                thread::sleep(ACCEPT_POLL);
            }
        }
    }
    Ok(())
}

/// The most of a turned-away peer's bytes read before closing (see [`turn_away`]).
const TURN_AWAY_DRAIN: usize = 4096;

/// Turns away a connection beyond the handshake bound: one short frame saying so
/// (a `Challenge` refused as busy, which a client reads in the place of the
/// challenge), written without waiting (a fresh socket's buffer takes it; if not,
/// nothing is sent), then the connection is closed. Before closing, what the peer has
/// already sent (its hello) is read without waiting, at most [`TURN_AWAY_DRAIN`]
/// bytes: closing with unread bytes would reset the connection, and the reset may
/// overtake the refusal (the client then sees a reset, not "busy"). No thread is
/// started: a stranger gets a few bytes for its connection, no more.
fn turn_away(stream: TcpStream, in_progress: usize) {
    let refusal = Challenge {
        challenge: Err(Refusal::Busy {
            in_progress: u32::try_from(in_progress).unwrap_or(u32::MAX),
        }),
    };
    if stream.set_nonblocking(true).is_ok() {
        if let Ok(frame) = encode(&refusal) {
            let _ = (&stream).write(&frame);
        }
        let mut buf = [0u8; 512];
        let mut read = 0;
        while read < TURN_AWAY_DRAIN {
            match (&stream).read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Runs the server side of the handshake. Errors are reasons for the log.
fn handshake(
    shared: &ServerShared,
    reader: &mut impl io::Read,
    writer: &mut impl Write,
) -> std::result::Result<(), String> {
    let hello: Hello =
        read_msg(reader, MAX_HANDSHAKE_FRAME).map_err(|e| format!("bad hello: {e}"))?;
    if hello.version != PROTOCOL_VERSION {
        let reason = format!(
            "unsupported registry protocol version {} (this server speaks {PROTOCOL_VERSION})",
            hello.version
        );
        let _ = write_msg(
            writer,
            &Challenge {
                challenge: Err(Refusal::Other(reason.clone())),
            },
        );
        return Err(reason);
    }
    let (responder, challenge) = Responder::on_hello(&shared.secret, AUTH_CONTEXT, &hello.nonce)
        .map_err(|e| format!("handshake failed: {e}"))?;
    write_msg(
        writer,
        &Challenge {
            challenge: Ok(challenge.to_vec()),
        },
    )
    .map_err(|e| format!("could not send challenge: {e}"))?;
    let finish: super::protocol::Finish = read_msg(reader, MAX_HANDSHAKE_FRAME).map_err(|e| match e {
        FrameError::Closed => {
            "the peer closed the connection instead of proving the pool secret (it does not know it)"
                .to_owned()
        }
        e => format!("bad finish: {e}"),
    })?;
    match responder.on_finish(&finish.proof) {
        Ok(()) => {
            let liveness = Liveness {
                interval_ms: shared.heartbeat.interval_ms(),
                timeout_ms: shared.heartbeat.timeout_ms(),
            };
            write_msg(
                writer,
                &Welcome {
                    result: Ok(liveness),
                },
            )
            .map_err(|e| format!("could not send welcome: {e}"))
        }
        Err(e) => {
            let _ = write_msg(
                writer,
                &Welcome {
                    result: Err(format!("authentication failed: {e}")),
                },
            );
            Err(format!("authentication failed: {e}"))
        }
    }
}

fn serve_connection(
    shared: &Arc<ServerShared>,
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    deadline: Instant,
) {
    if let Err(e) = serve_connection_inner(shared, stream, peer, slot, deadline) {
        tracing::warn!(peer = %peer, error = %e, "registry connection failed");
    }
}

fn serve_connection_inner(
    shared: &Arc<ServerShared>,
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    deadline: Instant,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    // Unbuffered: nothing the client sends after the handshake is read ahead
    // and lost; every read and write gets only what is left of the deadline.
    let timeouts = |left| {
        stream.set_read_timeout(Some(left))?;
        stream.set_write_timeout(Some(left))
    };
    let result = handshake(
        shared,
        &mut DeadlineIo::new(&stream, deadline, timeouts),
        &mut DeadlineIo::new(&stream, deadline, timeouts),
    );
    drop(slot);
    if let Err(reason) = result {
        shared.admission.dropped(&peer, &reason);
        let _ = stream.shutdown(Shutdown::Both);
        return Ok(());
    }
    let mut reader = BufReader::new(stream.try_clone()?);
    stream.set_read_timeout(None)?;
    // Writes are done by the writer thread; a client that stops reading
    // for this long is cut off.
    stream.set_write_timeout(Some(Duration::from_secs(60)))?;

    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let write_stream = stream.try_clone()?;
    thread::Builder::new()
        .name("ipl-registry-write".into())
        .spawn(move || writer_loop(write_stream, rx, peer))?;

    let heard = Arc::new(LastHeard::now());
    let conn_id = {
        let mut st = shared.state.lock();
        if shared.stop.load(Ordering::SeqCst) {
            let _ = stream.shutdown(Shutdown::Both);
            return Ok(());
        }
        let id = st.next_conn;
        st.next_conn += 1;
        st.conns.insert(
            id,
            Conn {
                tx: tx.clone(),
                stream: stream.try_clone()?,
                peer,
                members: BTreeSet::new(),
                heard: Arc::clone(&heard),
            },
        );
        id
    };
    tracing::debug!(peer = %peer, conn = conn_id, "registry client authenticated");

    loop {
        let msg = read_msg::<ClientMsg>(&mut reader, MAX_FRAME);
        if msg.is_ok() {
            heard.touch();
        }
        match msg {
            Ok(ClientMsg::Request { id, op }) => handle_request(shared, conn_id, &tx, id, op),
            Ok(ClientMsg::Heartbeat { seq }) => {
                send_frame(&tx, &ServerMsg::HeartbeatAck { seq });
            }
            Ok(ClientMsg::HeartbeatAck { .. }) => {}
            Ok(ClientMsg::Pong { nonce }) => {
                let waiter = shared.probes.lock().remove(&nonce);
                match waiter {
                    Some((probed, w)) if probed == conn_id => {
                        let _ = w.send(());
                    }
                    Some(entry) => {
                        // A pong for somebody else's probe: put it back.
                        shared.probes.lock().insert(nonce, entry);
                    }
                    None => {}
                }
            }
            Err(FrameError::Closed) => {
                tracing::debug!(peer = %peer, conn = conn_id, "registry client disconnected");
                break;
            }
            Err(e) if shared.stop.load(Ordering::SeqCst) => {
                tracing::debug!(peer = %peer, error = %e, "connection closed by shutdown");
                break;
            }
            Err(e @ (FrameError::TooLarge { .. } | FrameError::Malformed(_))) => {
                tracing::warn!(peer = %peer, conn = conn_id, error = %e, "malformed registry message; closing the connection");
                break;
            }
            Err(e) => {
                tracing::debug!(peer = %peer, conn = conn_id, error = %e, "registry connection lost");
                break;
            }
        }
    }

    // The connection is gone: its members vanished.
    let mut st = shared.state.lock();
    if let Some(conn) = st.conns.remove(&conn_id) {
        for (pool, id) in &conn.members {
            st.owners.remove(&(pool.clone(), *id));
            let pool_state = st.core.pool_mut(pool);
            if let Ok(p) = pool_state {
                if p.died(*id).is_ok() {
                    tracing::info!(peer = %peer, pool = %pool, member = %id, "member's connection closed without leave: declared dead");
                }
            }
            st.flush(pool);
        }
    }
    drop(st);
    // Probes of members on this connection can never be answered now: end them at
    // once (their waiters see the sender dropped and declare the suspect dead) instead
    // of letting the members that asked wait out the probe timeout.
    shared
        .probes
        .lock()
        .retain(|_, (target, _)| *target != conn_id);
    let _ = stream.shutdown(Shutdown::Both);
    Ok(())
}

fn writer_loop(stream: TcpStream, rx: mpsc::Receiver<Vec<u8>>, peer: SocketAddr) {
    let mut w = BufWriter::new(&stream);
    while let Ok(frame) = rx.recv() {
        let mut r = w.write_all(&frame);
        // Coalesce whatever else is queued, then flush once.
        while r.is_ok() {
            match rx.try_recv() {
                Ok(f) => r = w.write_all(&f),
                Err(_) => break,
            }
        }
        if let Err(e) = r.and_then(|()| w.flush()) {
            tracing::debug!(peer = %peer, error = %e, "write to registry client failed");
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    }
}

fn send_frame(tx: &mpsc::Sender<Vec<u8>>, msg: &ServerMsg) {
    match encode(msg) {
        Ok(frame) => {
            // A closed channel means the connection is going away; its
            // reader cleans up.
            let _ = tx.send(frame);
        }
        Err(e) => tracing::error!(error = %e, "could not encode a registry message"),
    }
}

fn handle_request(
    shared: &Arc<ServerShared>,
    conn: u64,
    tx: &mpsc::Sender<Vec<u8>>,
    id: u64,
    op: Request,
) {
    if let Request::MaybeDead { member, suspect } = op {
        // Probing waits for the suspect; do not hold up this connection.
        let shared = Arc::clone(shared);
        let probe_tx = tx.clone();
        let spawned = thread::Builder::new()
            .name("ipl-registry-probe".into())
            .spawn(move || {
                let result = shared.maybe_dead(conn, &member, &suspect);
                send_frame(&probe_tx, &ServerMsg::Response { id, result });
            });
        if let Err(e) = spawned {
            let result = Err(RegistryError::Thread(e.to_string()));
            send_frame(tx, &ServerMsg::Response { id, result });
        }
        return;
    }
    let mut st = shared.state.lock();
    let result = st.apply(conn, op);
    // Under the lock, after the pushes `apply` queued: responses follow the
    // events they caused.
    send_frame(tx, &ServerMsg::Response { id, result });
}

impl ServerShared {
    fn maybe_dead(
        &self,
        conn: u64,
        member: &IbisIdentifier,
        suspect: &IbisIdentifier,
    ) -> Result<Reply> {
        let (nonce, rx) = {
            let mut st = self.state.lock();
            st.owned(conn, member)?;
            st.core.check_suspect(member, suspect)?;
            let id = match st.core.maybe_dead(suspect)? {
                MaybeDead::NotAMember => return Ok(Reply::Done),
                MaybeDead::ProbeNeeded(id) => id,
            };
            let k = (suspect.pool().to_owned(), id);
            let target = st.owners.get(&k).copied();
            let Some((target, tx)) =
                target.and_then(|c| st.conns.get(&c).map(|conn| (c, conn.tx.clone())))
            else {
                tracing::debug!(suspect = %suspect, "suspect has no connection: declared dead");
                st.declare_dead(suspect)?;
                return Ok(Reply::Done);
            };
            let nonce = self.next_nonce.fetch_add(1, Ordering::Relaxed);
            let (ptx, prx) = mpsc::channel();
            self.probes.lock().insert(nonce, (target, ptx));
            send_frame(
                &tx,
                &ServerMsg::Ping {
                    nonce,
                    pool: suspect.pool().to_owned(),
                    member: id,
                },
            );
            (nonce, prx)
        };
        let alive = rx.recv_timeout(self.probe_timeout).is_ok();
        self.probes.lock().remove(&nonce);
        if alive {
            tracing::trace!(suspect = %suspect, "liveness probe succeeded");
            return Ok(Reply::Done);
        }
        tracing::debug!(suspect = %suspect, "liveness probe failed: declared dead");
        self.state.lock().declare_dead(suspect)?;
        Ok(Reply::Done)
    }
}

impl ServerState {
    /// Checks that `member` joined over connection `conn` (and is still there).
    fn owned(&self, conn: u64, member: &IbisIdentifier) -> Result<()> {
        if self.owners.get(&key(member)) == Some(&conn) {
            Ok(())
        } else {
            Err(RegistryError::UnknownMember {
                pool: member.pool().to_owned(),
                member: member.id(),
            })
        }
    }

    fn apply(&mut self, conn: u64, op: Request) -> Result<Reply> {
        match op {
            Request::Join {
                pool,
                config,
                request,
            } => {
                if !self.conns.contains_key(&conn) {
                    return Err(RegistryError::Disconnected("connection closed".into()));
                }
                let ident = self.core.join(&pool, config, request)?;
                let k = key(&ident);
                self.owners.insert(k.clone(), conn);
                if let Some(c) = self.conns.get_mut(&conn) {
                    tracing::debug!(peer = %c.peer, member = %ident, "member joined over the network");
                    c.members.insert(k);
                }
                self.flush(&pool);
                Ok(Reply::Joined(ident))
            }
            Request::Leave { member } => {
                self.owned(conn, &member)?;
                self.core.leave(&member)?;
                self.forget(&member);
                self.flush(member.pool());
                Ok(Reply::Done)
            }
            Request::Abandon { member } => {
                self.owned(conn, &member)?;
                self.core.died(&member)?;
                self.forget(&member);
                self.flush(member.pool());
                Ok(Reply::Done)
            }
            Request::Elect { member, election } => {
                self.owned(conn, &member)?;
                let winner = self.core.elect(&election, &member)?;
                self.flush(member.pool());
                Ok(Reply::Winner(winner))
            }
            Request::ElectionResult { member, election } => {
                self.owned(conn, &member)?;
                let p = self.core.member_pool(&member)?;
                Ok(Reply::MaybeWinner(p.election_result(&election)))
            }
            Request::Signal {
                member,
                signal,
                targets,
            } => {
                self.owned(conn, &member)?;
                self.core.signal(&member, &signal, &targets)?;
                self.flush(member.pool());
                Ok(Reply::Done)
            }
            Request::Terminate { member } => {
                self.owned(conn, &member)?;
                self.core.terminate(&member)?;
                self.flush(member.pool());
                Ok(Reply::Done)
            }
            Request::MaybeDead { .. } => Err(RegistryError::Protocol(
                "maybe_dead is handled by the probe path".into(),
            )),
            Request::AssumeDead { member, suspect } => {
                self.owned(conn, &member)?;
                self.core.check_suspect(&member, &suspect)?;
                self.declare_dead(&suspect)?;
                Ok(Reply::Done)
            }
            Request::Members { member } => {
                self.owned(conn, &member)?;
                Ok(Reply::Members(self.core.member_pool(&member)?.members()))
            }
            Request::PoolStatus { member } => {
                self.owned(conn, &member)?;
                Ok(Reply::Status(self.core.member_pool(&member)?.status()))
            }
        }
    }

    /// Declares `who` dead (ignoring non-members), tells its connection, and
    /// pushes the resulting events.
    fn declare_dead(&mut self, who: &IbisIdentifier) -> Result<()> {
        match self.core.died(who) {
            Ok(_) => {
                self.forget(who);
                self.flush(who.pool());
                Ok(())
            }
            // Not (or no longer) a member, or its pool is already forgotten.
            Err(RegistryError::UnknownMember { .. } | RegistryError::UnknownPool(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `who` is no longer a member: drop its ownership and tell its connection.
    fn forget(&mut self, who: &IbisIdentifier) {
        let k = key(who);
        if let Some(conn) = self.owners.remove(&k).and_then(|c| self.conns.get_mut(&c)) {
            conn.members.remove(&k);
            send_frame(
                &conn.tx,
                &ServerMsg::Gone {
                    pool: k.0,
                    member: k.1,
                },
            );
        }
    }

    /// Pushes the queued events of every touched member of `pool`, then
    /// forgets the pool if it has no members left.
    fn flush(&mut self, pool: &str) {
        let Ok(p) = self.core.pool_mut(pool) else {
            return;
        };
        let status = p.status();
        for id in p.drain_touched() {
            let events = match p.take_events(id) {
                Ok(ev) if !ev.is_empty() => ev,
                _ => continue,
            };
            let owner = self
                .owners
                .get(&(pool.to_owned(), id))
                .and_then(|c| self.conns.get(c));
            if let Some(conn) = owner {
                send_frame(
                    &conn.tx,
                    &ServerMsg::Events {
                        pool: pool.to_owned(),
                        member: id,
                        events,
                        status,
                    },
                );
            }
        }
        if p.size() == 0 {
            self.core.remove_pool(pool);
            tracing::debug!(pool = %pool, "every member left or died: pool forgotten");
        }
    }
}
