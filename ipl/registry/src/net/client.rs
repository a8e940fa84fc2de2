//! [`NetRegistry`]: a [`RegistryBackend`] that talks to a
//! [`RegistryServer`](super::RegistryServer) over TCP.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{self, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ipl_auth::{AuthError, Initiator, PoolSecret};

use crate::backend::RegistryBackend;
use crate::core::{JoinRequest, PoolConfig, PoolStatus};
use crate::error::{RegistryError, Result};
use crate::event::{Event, Seq};
use crate::handle::Registry;
use crate::identifier::{IbisIdentifier, MemberId};

use super::heartbeat::{millis, Heartbeat, LastHeard};
use super::protocol::{
    encode, read_msg, write_msg, Challenge, ClientMsg, Finish, FrameError, Hello, Refusal, Reply,
    Request, ServerMsg, Welcome, AUTH_CONTEXT, MAX_FRAME, MAX_HANDSHAKE_FRAME, PROTOCOL_VERSION,
};

/// The first pause before retrying a busy registry (doubling up to [`BUSY_PAUSE_MAX`]).
const BUSY_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between attempts at a busy registry.
const BUSY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Default bound on one request/response round-trip.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type Key = (String, MemberId);

fn key(m: &IbisIdentifier) -> Key {
    (m.pool().to_owned(), m.id())
}

/// A registry client: one authenticated TCP connection to a
/// [`RegistryServer`](super::RegistryServer), usable as the
/// [`RegistryBackend`] of any number of members.
///
/// Cheap to clone (clones share the connection); the connection closes when
/// the last clone (including those inside [`Registry`] handles) is dropped.
///
/// * Requests (`join`, `elect`, `signal`, ...) are round-trips bounded by the
///   request timeout (default [`DEFAULT_REQUEST_TIMEOUT`]; then
///   [`RegistryError::Timeout`]).
/// * A background thread receives the events the server pushes and keeps a
///   per-member cache; `take_events`, `members` and `pool_status` answer from
///   it, and waiting handles are woken as in the embedded driver.
///   `election_result` asks the server.
/// * Liveness: when the connection closes (the process was killed, or the
///   last clone dropped), the server declares all of its members dead.
///   [`Registry::crash`] only stops this client from answering the server's
///   liveness probes for that member and keeps the connection open (as a
///   hung process would) until the server declares the member dead, so, as
///   with the embedded driver, the others notice it only through
///   `maybe_dead` (or `assume_dead`). To simulate a killed process instead,
///   use [`kill_connection`](Self::kill_connection) or drop the last clone
///   without leaving.
/// * Heartbeats: the client answers the server's heartbeats and sends its
///   own at the interval the server chose in the handshake
///   ([`heartbeat`](Self::heartbeat)). If nothing arrives from the server for
///   longer than the heartbeat timeout (a frozen server, a cut link), the
///   connection is closed and every pending and later call, and every
///   blocked wait of a member, fails with
///   [`RegistryError::HeartbeatTimeout`], within `timeout + interval`.
/// * If the connection to the server is lost, pending and later requests
///   fail with [`RegistryError::Disconnected`]; the members on it are gone
///   (the server declared them dead), so once their cached events are taken,
///   `take_events` reports [`RegistryError::UnknownMember`].
#[derive(Clone)]
pub struct NetRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    writer: Arc<Mutex<TcpStream>>,
    server: SocketAddr,
    next_id: AtomicU64,
    request_timeout_ms: AtomicU64,
    closing: Arc<AtomicBool>,
    reader: Mutex<Option<JoinHandle<()>>>,
    heartbeat: Heartbeat,
    /// Dropping the sender stops the heartbeat thread.
    heartbeats: Mutex<Option<(mpsc::Sender<()>, JoinHandle<()>)>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    version: u64,
    wakers: Vec<Waker>,
    members: HashMap<Key, MemberCache>,
    crashed: HashSet<Key>,
    pending: HashMap<u64, mpsc::Sender<Result<Reply>>>,
    /// Why the connection is gone (`Disconnected` or `HeartbeatTimeout`).
    disconnected: Option<RegistryError>,
    /// Keeps the connection of crashed members open (a hung process keeps
    /// its socket) until the server declares them dead.
    keepalive: Vec<NetRegistry>,
}

struct MemberCache {
    events: VecDeque<(Seq, Event)>,
    members: BTreeMap<MemberId, IbisIdentifier>,
    /// The members this client was told left or died (`Left`/`Died` events): what
    /// `is_gone` answers from. One id per departure the pool ever had.
    departed: HashSet<MemberId>,
    status: PoolStatus,
}

impl std::fmt::Debug for NetRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetRegistry")
            .field("server", &self.inner.server)
            .finish_non_exhaustive()
    }
}

fn refused_by_secret() -> RegistryError {
    RegistryError::Refused(format!(
        "authentication failed: the registry does not know this pool secret \
         (is {} the secret of this pool/server?)",
        ipl_auth::SECRET_ENV
    ))
}

fn handshake_error(step: &str, e: FrameError) -> RegistryError {
    match e {
        FrameError::Closed => RegistryError::Refused(format!(
            "the server closed the connection during the handshake ({step})"
        )),
        e if e.is_timeout() => RegistryError::Timeout,
        FrameError::Io(e) => RegistryError::Disconnected(format!("handshake ({step}): {e}")),
        e => RegistryError::Refused(format!(
            "the peer does not speak the IPL registry protocol ({step}: {e})"
        )),
    }
}

/// Why one attempt of [`NetRegistry::connect`] failed.
enum Attempt {
    /// Turned away before the handshake (busy, or cut before any answer): another
    /// attempt may get in.
    Retry(RegistryError),
    /// Refused or failed for good (wrong secret, protocol version, no server).
    Failed(RegistryError),
}

impl From<RegistryError> for Attempt {
    fn from(e: RegistryError) -> Self {
        Attempt::Failed(e)
    }
}

/// Whether reading the server's first answer failed because the connection was closed
/// or reset before any frame came (not a timeout, not a malformed answer).
fn cut_before_answer(e: &FrameError) -> bool {
    match e {
        FrameError::Closed => true,
        FrameError::Io(e) => matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

impl NetRegistry {
    /// Connects to the registry server at `addr` within `timeout` and
    /// authenticates with `secret` (the same bound applies to the handshake).
    ///
    /// Fails with [`RegistryError::BadAddress`] if `addr` is not a usable address,
    /// [`RegistryError::Refused`] if the server does not know `secret` (or refuses
    /// us), [`RegistryError::Disconnected`] if it cannot be reached,
    /// [`RegistryError::Timeout`] if it does not answer in time.
    ///
    /// A server at its bound of connections in the handshake turns the connection
    /// away at once, saying so; the client then retries (after 50 ms, doubling up to
    /// 1 s) until `timeout` has passed, and fails with [`RegistryError::Busy`]. A
    /// connection closed or reset before the server's first answer (a busy refusal
    /// lost on the way) is retried the same way; a refusal that came (another secret,
    /// another protocol version) fails at once.
    pub fn connect(
        addr: impl ToSocketAddrs,
        secret: &PoolSecret,
        timeout: Duration,
    ) -> Result<Self> {
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| RegistryError::BadAddress(e.to_string()))?
            .collect();
        if addrs.is_empty() {
            return Err(RegistryError::BadAddress(
                "it resolves to no address".into(),
            ));
        }
        let start = Instant::now();
        let deadline = start + timeout;
        let mut pause = BUSY_PAUSE;
        // The server's last busy refusal: what a final attempt that ran out of time
        // (a short remainder of the bound) reports instead of a bare timeout.
        let mut busy = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let error = match Self::connect_once(&addrs, secret, left) {
                Ok(c) => return Ok(c),
                Err(Attempt::Failed(RegistryError::Timeout)) if busy.is_some() => {
                    RegistryError::Busy {
                        in_progress: busy.unwrap_or(0),
                        waited_ms: 0,
                    }
                }
                Err(Attempt::Failed(e)) => return Err(e),
                Err(Attempt::Retry(e)) => e,
            };
            if let RegistryError::Busy { in_progress, .. } = error {
                busy = Some(in_progress);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(match error {
                    RegistryError::Busy { in_progress, .. } => RegistryError::Busy {
                        in_progress,
                        waited_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                    },
                    other => other,
                });
            }
            tracing::debug!(error = %error, "the registry turned the connection away; retrying");
            // Backoff before the next attempt, never past the deadline.
            thread::sleep(pause.min(left));
            pause = (pause * 2).min(BUSY_PAUSE_MAX);
        }
    }

    /// One attempt of [`connect`](Self::connect), within `timeout`.
    fn connect_once(
        addrs: &[SocketAddr],
        secret: &PoolSecret,
        timeout: Duration,
    ) -> Result<Self, Attempt> {
        let timeout = timeout.max(Duration::from_millis(1));
        let mut last = None;
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(format!("{a}: {e}")),
            }
        }
        let stream = stream.ok_or_else(|| {
            RegistryError::Disconnected(format!(
                "could not connect to the registry ({})",
                last.unwrap_or_else(|| "no address".into())
            ))
        })?;
        let io = |e: io::Error| RegistryError::Disconnected(e.to_string());
        let server = stream.peer_addr().map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let mut reader = BufReader::new(stream.try_clone().map_err(io)?);
        let mut writer = stream.try_clone().map_err(io)?;

        let auth = |e: AuthError| RegistryError::Refused(format!("authentication: {e}"));
        let (initiator, nonce) = Initiator::start(secret, AUTH_CONTEXT).map_err(auth)?;
        let hello = write_msg(
            &mut writer,
            &Hello {
                version: PROTOCOL_VERSION,
                nonce,
            },
        );
        let challenge: std::result::Result<Challenge, FrameError> =
            read_msg(&mut reader, MAX_HANDSHAKE_FRAME);
        // A busy server answers before reading the hello and closes: its refusal is
        // what counts, even if writing the hello failed. A connection closed or reset
        // before any answer came is most likely a busy refusal lost on the way (the
        // server closes with our hello unread, which may reset the connection before
        // its refusal is read): worth another attempt.
        let challenge = match (hello, challenge) {
            (_, Ok(c)) => c,
            (hello, Err(e)) => {
                let cut = cut_before_answer(&e);
                let e = match hello {
                    Err(h) => handshake_error("hello", h),
                    Ok(()) => handshake_error("challenge", e),
                };
                return Err(if cut {
                    Attempt::Retry(e)
                } else {
                    Attempt::Failed(e)
                });
            }
        };
        let challenge = challenge.challenge.map_err(|r| match r {
            Refusal::Busy { in_progress } => Attempt::Retry(RegistryError::Busy {
                in_progress,
                waited_ms: 0,
            }),
            Refusal::Other(reason) => Attempt::Failed(RegistryError::Refused(reason)),
        })?;
        let proof = match initiator.on_challenge(&challenge) {
            Ok(p) => p,
            Err(AuthError::BadProof) => {
                let _ = stream.shutdown(Shutdown::Both);
                return Err(refused_by_secret().into());
            }
            Err(e) => return Err(auth(e).into()),
        };
        write_msg(&mut writer, &Finish { proof }).map_err(|e| handshake_error("finish", e))?;
        let welcome: Welcome = read_msg(&mut reader, MAX_HANDSHAKE_FRAME)
            .map_err(|e| handshake_error("welcome", e))?;
        let liveness = welcome.result.map_err(RegistryError::Refused)?;
        let heartbeat =
            Heartbeat::from_millis(liveness.interval_ms, liveness.timeout_ms).map_err(|e| {
                RegistryError::Protocol(format!("the server sent unusable heartbeat settings: {e}"))
            })?;
        stream.set_read_timeout(None).map_err(io)?;
        stream
            .set_write_timeout(Some(DEFAULT_REQUEST_TIMEOUT))
            .map_err(io)?;

        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let writer = Arc::new(Mutex::new(writer));
        let closing = Arc::new(AtomicBool::new(false));
        let heard = Arc::new(LastHeard::now());
        let reader_thread = {
            let shared = Arc::clone(&shared);
            let writer = Arc::clone(&writer);
            let closing = Arc::clone(&closing);
            let heard = Arc::clone(&heard);
            thread::Builder::new()
                .name("ipl-registry-client".into())
                .spawn(move || reader_loop(&shared, reader, &writer, &closing, &heard, server))
                .map_err(|e| RegistryError::Thread(e.to_string()))?
        };
        let heartbeats = {
            let (stop, stopped) = mpsc::channel::<()>();
            let shared = Arc::clone(&shared);
            let writer = Arc::clone(&writer);
            let spawned = thread::Builder::new()
                .name("ipl-registry-heartbeat".into())
                .spawn(move || {
                    heartbeat_loop(&shared, &writer, &heard, &stopped, heartbeat, server)
                });
            match spawned {
                Ok(t) => (stop, t),
                Err(e) => {
                    let _ = stream.shutdown(Shutdown::Both);
                    return Err(RegistryError::Thread(e.to_string()).into());
                }
            }
        };
        tracing::debug!(
            server = %server,
            heartbeat_interval_ms = heartbeat.interval_ms(),
            heartbeat_timeout_ms = heartbeat.timeout_ms(),
            "connected to the registry"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                shared,
                writer,
                server,
                next_id: AtomicU64::new(0),
                request_timeout_ms: AtomicU64::new(millis(DEFAULT_REQUEST_TIMEOUT)),
                closing,
                reader: Mutex::new(Some(reader_thread)),
                heartbeat,
                heartbeats: Mutex::new(Some(heartbeats)),
            }),
        })
    }

    /// Joins `pool` (creating it with `config` if needed) and returns the
    /// member's handle.
    pub fn join(&self, pool: &str, config: PoolConfig, request: JoinRequest) -> Result<Registry> {
        Registry::join(Arc::new(self.clone()), pool, config, request)
    }

    /// The server's address.
    pub fn server_addr(&self) -> SocketAddr {
        self.inner.server
    }

    /// The heartbeat settings of this connection (chosen by the server).
    pub fn heartbeat(&self) -> Heartbeat {
        self.inner.heartbeat
    }

    /// Sets the bound on each request/response round-trip.
    pub fn set_request_timeout(&self, timeout: Duration) {
        self.inner
            .request_timeout_ms
            .store(millis(timeout), Ordering::Relaxed);
    }

    /// Fault injection: closes the connection abruptly, as if this process
    /// had been killed. The server declares all members on it dead (the
    /// others get `Died`); later operations fail with
    /// [`RegistryError::Disconnected`].
    pub fn kill_connection(&self) {
        tracing::debug!(server = %self.inner.server, "killing the registry connection");
        let _ = self.inner.writer.lock().shutdown(Shutdown::Both);
    }

    /// Whether the connection to the server is lost.
    pub fn is_disconnected(&self) -> bool {
        self.inner.shared.state.lock().disconnected.is_some()
    }

    fn request(&self, op: Request) -> Result<Reply> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        {
            let mut st = self.inner.shared.state.lock();
            if let Some(e) = &st.disconnected {
                return Err(e.clone());
            }
            st.pending.insert(id, tx);
        }
        let sent = encode(&ClientMsg::Request { id, op })
            .map_err(|e| RegistryError::Protocol(e.to_string()))
            .and_then(|frame| {
                let mut w = self.inner.writer.lock();
                w.write_all(&frame)
                    .and_then(|()| w.flush())
                    .map_err(|e| RegistryError::Disconnected(e.to_string()))
            });
        if let Err(e) = sent {
            self.inner.shared.state.lock().pending.remove(&id);
            return Err(e);
        }
        let timeout = Duration::from_millis(self.inner.request_timeout_ms.load(Ordering::Relaxed));
        match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.inner.shared.state.lock().pending.remove(&id);
                Err(RegistryError::Timeout)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let st = self.inner.shared.state.lock();
                Err(st
                    .disconnected
                    .clone()
                    .unwrap_or_else(|| RegistryError::Disconnected("connection closed".into())))
            }
        }
    }

    fn done(&self, op: Request) -> Result<()> {
        match self.request(op)? {
            Reply::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    fn with_member<R>(&self, me: &IbisIdentifier, f: impl FnOnce(&MemberCache) -> R) -> Result<R> {
        let st = self.inner.shared.state.lock();
        if let Some(e) = &st.disconnected {
            return Err(e.clone());
        }
        st.members.get(&key(me)).map(f).ok_or_else(|| unknown(me))
    }
}

fn unknown(me: &IbisIdentifier) -> RegistryError {
    RegistryError::UnknownMember {
        pool: me.pool().to_owned(),
        member: me.id(),
    }
}

fn unexpected(reply: &Reply) -> RegistryError {
    RegistryError::Protocol(format!("unexpected reply from the server: {reply:?}"))
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        if let Some((stop, t)) = self.heartbeats.lock().take() {
            drop(stop);
            if t.thread().id() != thread::current().id() && t.join().is_err() {
                tracing::warn!("registry heartbeat thread panicked");
            }
        }
        let _ = self.writer.lock().shutdown(Shutdown::Both);
        if let Some(t) = self.reader.lock().take() {
            if t.thread().id() != thread::current().id() && t.join().is_err() {
                tracing::warn!("registry client thread panicked");
            }
        }
    }
}

impl Shared {
    fn bump(&self, mut st: MutexGuard<'_, State>) {
        st.version += 1;
        let wakers = std::mem::take(&mut st.wakers);
        drop(st);
        self.changed.notify_all();
        for w in wakers {
            w.wake();
        }
    }

    /// The connection is gone because of `error` (the first reason wins):
    /// pending requests fail with it, and waiters wake up to see it.
    fn fail(&self, error: RegistryError) {
        let mut st = self.state.lock();
        if st.disconnected.is_none() {
            st.disconnected = Some(error);
        }
        st.pending.clear();
        let release = std::mem::take(&mut st.keepalive);
        self.bump(st);
        // Possibly the last reference: closes the connection.
        drop(release);
    }
}

/// Sends a heartbeat every interval; gives the server up when nothing came
/// from it for longer than the timeout. Stops when `stopped`'s sender drops.
fn heartbeat_loop(
    shared: &Shared,
    writer: &Mutex<TcpStream>,
    heard: &LastHeard,
    stopped: &mpsc::Receiver<()>,
    hb: Heartbeat,
    server: SocketAddr,
) {
    let mut seq = 0u64;
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(hb.interval()) {
        if shared.state.lock().disconnected.is_some() {
            return;
        }
        let silence = heard.silence();
        if silence > hb.timeout() {
            let error = RegistryError::HeartbeatTimeout {
                silent_ms: millis(silence),
                timeout_ms: hb.timeout_ms(),
            };
            tracing::warn!(server = %server, error = %error, "giving up the registry connection");
            shared.fail(error);
            // Wakes the reader thread, which ends.
            if let Some(w) = writer.try_lock_for(hb.interval()) {
                let _ = w.shutdown(Shutdown::Both);
            }
            return;
        }
        seq = seq.wrapping_add(1);
        match encode(&ClientMsg::Heartbeat { seq }) {
            // A writer busy with a request (a server not reading) skips a
            // beat: the silence is measured on what arrives.
            Ok(frame) => {
                if let Some(mut w) = writer.try_lock() {
                    let _ = w.write_all(&frame).and_then(|()| w.flush());
                }
            }
            Err(e) => tracing::error!(error = %e, "could not encode a heartbeat"),
        }
    }
}

fn reader_loop(
    shared: &Shared,
    mut reader: BufReader<TcpStream>,
    writer: &Mutex<TcpStream>,
    closing: &AtomicBool,
    heard: &LastHeard,
    server: SocketAddr,
) {
    let reason = loop {
        let msg = match read_msg::<ServerMsg>(&mut reader, MAX_FRAME) {
            Ok(m) => {
                heard.touch();
                m
            }
            Err(FrameError::Closed) => break "the registry closed the connection".to_owned(),
            Err(e) => break format!("connection to the registry lost: {e}"),
        };
        match msg {
            ServerMsg::Response { id, result } => {
                let waiter = shared.state.lock().pending.remove(&id);
                if let Some(w) = waiter {
                    let _ = w.send(result);
                }
            }
            ServerMsg::Events {
                pool,
                member,
                events,
                status,
            } => {
                let mut st = shared.state.lock();
                let k = (pool, member);
                if st.crashed.contains(&k) {
                    continue;
                }
                let cache = st.members.entry(k).or_insert_with(|| MemberCache {
                    events: VecDeque::new(),
                    members: BTreeMap::new(),
                    departed: HashSet::new(),
                    status,
                });
                for (_, e) in &events {
                    match e {
                        Event::Joined(m) => {
                            cache.members.insert(m.id(), m.clone());
                        }
                        Event::Left(m) | Event::Died(m) => {
                            cache.members.remove(&m.id());
                            cache.departed.insert(m.id());
                        }
                        _ => {}
                    }
                }
                cache.events.extend(events);
                cache.status = status;
                shared.bump(st);
            }
            ServerMsg::Gone { pool, member } => {
                let mut st = shared.state.lock();
                let k = (pool, member);
                st.members.remove(&k);
                let mut release = Vec::new();
                if st.crashed.remove(&k) && st.crashed.is_empty() {
                    release = std::mem::take(&mut st.keepalive);
                }
                shared.bump(st);
                // Possibly the last reference: closes the connection.
                drop(release);
            }
            ServerMsg::Ping {
                nonce,
                pool,
                member,
            } => {
                let alive = {
                    let st = shared.state.lock();
                    let k = (pool, member);
                    st.members.contains_key(&k) && !st.crashed.contains(&k)
                };
                if alive {
                    send(writer, &ClientMsg::Pong { nonce });
                }
            }
            ServerMsg::Heartbeat { seq } => send(writer, &ClientMsg::HeartbeatAck { seq }),
            ServerMsg::HeartbeatAck { .. } => {}
        }
    };
    // Members of this process still in a pool through this connection: only they lose
    // anything (after every member left, a server that stops is no news).
    let members = shared.state.lock().members.len();
    if closing.load(Ordering::SeqCst) {
        tracing::debug!(server = %server, "registry connection closed");
    } else if members == 0 {
        tracing::debug!(server = %server, reason = %reason, "registry connection ended after every member left");
    } else {
        tracing::warn!(server = %server, reason = %reason, members, "lost the registry connection; its members are considered dead");
    }
    shared.fail(RegistryError::Disconnected(reason));
}

/// Writes one message from the reader thread (a pong or an ack).
fn send(writer: &Mutex<TcpStream>, msg: &ClientMsg) {
    match encode(msg) {
        Ok(frame) => {
            let mut w = writer.lock();
            let _ = w.write_all(&frame).and_then(|()| w.flush());
        }
        Err(e) => tracing::error!(error = %e, "could not encode a message to the registry"),
    }
}

impl RegistryBackend for NetRegistry {
    fn join(&self, pool: &str, config: PoolConfig, request: JoinRequest) -> Result<IbisIdentifier> {
        match self.request(Request::Join {
            pool: pool.to_owned(),
            config,
            request,
        })? {
            Reply::Joined(me) => Ok(me),
            other => Err(unexpected(&other)),
        }
    }

    fn leave(&self, me: &IbisIdentifier) -> Result<()> {
        self.done(Request::Leave { member: me.clone() })
    }

    fn abandon(&self, me: &IbisIdentifier) {
        if let Err(e) = self.done(Request::Abandon { member: me.clone() }) {
            tracing::debug!(member = %me, error = %e, "abandon of a vanished member failed");
        }
    }

    fn crash(&self, me: &IbisIdentifier) {
        tracing::debug!(member = %me, "simulated crash: no longer answering liveness probes");
        let mut st = self.inner.shared.state.lock();
        let k = key(me);
        st.members.remove(&k);
        st.crashed.insert(k);
        if st.disconnected.is_none() {
            st.keepalive.push(self.clone());
        }
        self.inner.shared.bump(st);
    }

    fn elect(&self, me: &IbisIdentifier, election: &str) -> Result<IbisIdentifier> {
        match self.request(Request::Elect {
            member: me.clone(),
            election: election.to_owned(),
        })? {
            Reply::Winner(w) => Ok(w),
            other => Err(unexpected(&other)),
        }
    }

    fn election_result(
        &self,
        me: &IbisIdentifier,
        election: &str,
    ) -> Result<Option<IbisIdentifier>> {
        match self.request(Request::ElectionResult {
            member: me.clone(),
            election: election.to_owned(),
        })? {
            Reply::MaybeWinner(w) => Ok(w),
            other => Err(unexpected(&other)),
        }
    }

    fn signal(&self, me: &IbisIdentifier, signal: &str, targets: &[IbisIdentifier]) -> Result<()> {
        self.done(Request::Signal {
            member: me.clone(),
            signal: signal.to_owned(),
            targets: targets.to_vec(),
        })
    }

    fn terminate(&self, me: &IbisIdentifier) -> Result<()> {
        self.done(Request::Terminate { member: me.clone() })
    }

    fn maybe_dead(&self, me: &IbisIdentifier, suspect: &IbisIdentifier) -> Result<()> {
        self.done(Request::MaybeDead {
            member: me.clone(),
            suspect: suspect.clone(),
        })
    }

    fn assume_dead(&self, me: &IbisIdentifier, suspect: &IbisIdentifier) -> Result<()> {
        self.done(Request::AssumeDead {
            member: me.clone(),
            suspect: suspect.clone(),
        })
    }

    fn take_events(&self, me: &IbisIdentifier) -> Result<Vec<(Seq, Event)>> {
        // Taking events changes nothing others can observe: no version bump.
        let mut st = self.inner.shared.state.lock();
        let k = key(me);
        let disconnected = st.disconnected.is_some();
        if let Some(e @ RegistryError::HeartbeatTimeout { .. }) = &st.disconnected {
            // The server went silent: say so (once the cached events are
            // taken) rather than that the member is unknown.
            let e = e.clone();
            return match st.members.get_mut(&k) {
                Some(c) if !c.events.is_empty() => Ok(c.events.drain(..).collect()),
                _ => Err(e),
            };
        }
        match st.members.get_mut(&k) {
            Some(c) if !c.events.is_empty() => Ok(c.events.drain(..).collect()),
            Some(_) if disconnected => {
                // The server declared the member dead when the connection
                // dropped: it is no longer a member.
                st.members.remove(&k);
                Err(unknown(me))
            }
            Some(_) => Ok(Vec::new()),
            None => Err(unknown(me)),
        }
    }

    fn members(&self, me: &IbisIdentifier) -> Result<Vec<IbisIdentifier>> {
        self.with_member(me, |c| c.members.values().cloned().collect())
    }

    fn is_gone(&self, me: &IbisIdentifier, who: &IbisIdentifier) -> Result<bool> {
        self.with_member(me, |c| {
            who.pool() == me.pool() && c.departed.contains(&who.id())
        })
    }

    fn pool_status(&self, me: &IbisIdentifier) -> Result<PoolStatus> {
        self.with_member(me, |c| c.status)
    }

    fn version(&self) -> u64 {
        self.inner.shared.state.lock().version
    }

    fn wait_for_change(&self, seen: u64, deadline: Option<Instant>) -> Result<u64> {
        let shared = &self.inner.shared;
        let mut st = shared.state.lock();
        match deadline {
            None => shared.changed.wait_while(&mut st, |st| st.version == seen),
            Some(d) => {
                shared
                    .changed
                    .wait_while_until(&mut st, |st| st.version == seen, d);
            }
        }
        Ok(st.version)
    }

    fn poll_change(&self, seen: u64, waker: &Waker) -> Poll<Result<u64>> {
        let mut st = self.inner.shared.state.lock();
        if st.version != seen {
            return Poll::Ready(Ok(st.version));
        }
        if !st.wakers.iter().any(|w| w.will_wake(waker)) {
            st.wakers.push(waker.clone());
        }
        Poll::Pending
    }
}
