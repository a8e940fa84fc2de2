//! The plugin's face: a QUIC endpoint made of the sans-IO [`Engine`] and the
//! [`Driver`] that moves its datagrams, plus the background thread that drives it when
//! no receiver polls.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use ipl_transport_abi::{HostSink, TransportCapabilities, TransportError, TransportPlugin};
use ipl_transport_kit::config::message_len;
use ipl_transport_kit::host::{host_id, HostId};
use ipl_transport_kit::listen::ListenPlan;
use ipl_transport_kit::{dial, BufferPool};
use parking_lot::Mutex;
use quinn_proto::{IdleTimeout, TransportConfig, VarInt};

use crate::address::Address;
use crate::config::Config;
use crate::driver::Driver;
pub use crate::engine::ConnectionStats;
use crate::engine::{DialState, Engine, HandshakeBounds};
use crate::tls::PoolTls;
use crate::wire;

/// Messages up to this size are copied behind their length prefix and written in one
/// call; larger ones are written slice by slice.
const COALESCE: usize = 16 << 10;
/// Channels one peer may have open towards us at once (QUIC bidirectional streams).
const MAX_CHANNELS_PER_PEER: u32 = 4096;
/// Bytes quinn-proto buffers at most for a connection attempt not yet accepted or
/// refused (its 0-RTT or handshake packets after the first).
const INCOMING_BUFFER: u64 = 64 << 10;
/// Requested UDP socket buffer sizes (the kernel may cap them).
const SOCKET_BUFFER: usize = 4 << 20;

/// Live endpoints of this process by id, for [`QuicTransport::connection_stats`].
fn directory() -> &'static Mutex<HashMap<u64, Weak<Inner>>> {
    static DIR: OnceLock<Mutex<HashMap<u64, Weak<Inner>>>> = OnceLock::new();
    DIR.get_or_init(|| Mutex::new(HashMap::new()))
}

struct Inner {
    id: u64,
    cfg: Config,
    address: Vec<u8>,
    /// Where the socket is bound.
    bound: SocketAddr,
    /// Where it listens and what it advertises (its own addresses rank a peer's).
    plan: ListenPlan,
    /// This endpoint's host, if known.
    here: Option<HostId>,
    driver: Driver,
    stopping: AtomicBool,
}

/// A QUIC endpoint (the plugin's instance type). See the crate documentation.
pub struct QuicTransport {
    inner: Arc<Inner>,
    background: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn random_id() -> Result<u64, TransportError> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b)
        .map_err(|e| TransportError::Unavailable(format!("random source failed: {e}")))?;
    Ok(u64::from_le_bytes(b))
}

fn shutting_down() -> TransportError {
    TransportError::Closed("quic endpoint is shutting down".into())
}

fn transport_config(cfg: &Config) -> Result<TransportConfig, TransportError> {
    let mut t = TransportConfig::default();
    let idle = IdleTimeout::try_from(cfg.idle_timeout)
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

/// A UDP socket bound to `bind`; `only_v6` sets `IPV6_V6ONLY` on an IPv6 socket.
fn udp_socket(
    bind: SocketAddr,
    only_v6: Option<bool>,
) -> Result<std::net::UdpSocket, TransportError> {
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
    if let Some(v6) = only_v6 {
        sock.set_only_v6(v6).map_err(|e| {
            TransportError::Unavailable(format!("quic: IPV6_V6ONLY on {bind}: {e}"))
        })?;
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
        let inner = directory().lock().get(&id).and_then(Weak::upgrade)?;
        let stats = inner.driver.lock().engine.stats();
        Some(stats)
    }

    /// The remote addresses of the connections of the live endpoint at `address` in
    /// this process (`None` if there is none). For tests: which path a connection took.
    #[doc(hidden)]
    pub fn peer_addresses(address: &[u8]) -> Option<Vec<SocketAddr>> {
        let id = Address::parse(address).ok()?.id;
        let inner = directory().lock().get(&id).and_then(Weak::upgrade)?;
        let peers = inner.driver.lock().engine.peer_addresses();
        Some(peers)
    }
}

impl Inner {
    /// A ready connection to `addr`'s endpoint: the existing one, or a new one to one of
    /// its addresses, tried in the order of [`dial`] with a share of the time left
    /// before `deadline` each.
    fn connection(
        &self,
        addr: &Address,
        deadline: Instant,
    ) -> Result<quinn_proto::ConnectionHandle, TransportError> {
        if let Some(ch) = self.driver.lock().engine.ready_conn(addr.id) {
            return Ok(ch);
        }
        let peer = addr.endpoint();
        let mut plan = dial::order(&peer, self.here, &self.plan.own);
        let (order, unreachable): (Vec<_>, Vec<_>) = plan
            .order
            .iter()
            .partition(|&&to| self.plan.can_reach(self.bound, to));
        plan.order = order;
        plan.skipped.extend(unreachable.into_iter().map(|to| {
            (
                to,
                "not reachable from this endpoint's socket (address family, or bound to loopback)",
            )
        }));
        let left = deadline.saturating_duration_since(Instant::now());
        dial::try_in_order("quic", &peer, &plan, left, |to, budget| {
            if self.stopping.load(Ordering::SeqCst) {
                return Err(shutting_down());
            }
            self.dial_one(to, addr.id, Instant::now() + budget, budget)
        })
    }

    /// Dials endpoint `id` at `to` (an IPv4 address as IPv4-mapped IPv6 on a dual-stack
    /// socket) and waits for the connection until `deadline`.
    fn dial_one(
        &self,
        to: SocketAddr,
        id: u64,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<quinn_proto::ConnectionHandle, TransportError> {
        let d = &self.driver;
        let dest = match to.ip() {
            IpAddr::V4(v4) if self.bound.is_ipv6() => {
                SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), to.port())
            }
            _ => to,
        };
        let ch = {
            let mut g = d.lock();
            if let Some(ch) = g.engine.ready_conn(id) {
                return Ok(ch);
            }
            let now = Instant::now();
            let ch = g.engine.dial(now, dest, id)?;
            d.drive(&mut g, now);
            d.after_drive(&mut g);
            ch
        };
        let state = d.wait_for(Some(deadline), |e, _| match e.dial_state(ch, id) {
            DialState::Pending => None,
            s => Some(s),
        });
        match state {
            Some(DialState::Ready) => Ok(ch),
            Some(DialState::Failed(e)) => Err(e),
            Some(DialState::Pending) | None => {
                let mut g = d.lock();
                g.engine.abandon(ch, id, Instant::now());
                d.flush(&mut g);
                Err(TransportError::Timeout(format!(
                    "quic connection to {to} not established within {timeout:?}"
                )))
            }
        }
    }

    /// Writes a message that did not fit the stream's window at once: the rest waits
    /// for flow control, with this thread driving the endpoint meanwhile.
    fn write_rest(&self, channel: u64, rest: Vec<u8>) -> Result<(), TransportError> {
        let d = &self.driver;
        let mut off = 0;
        let r = d
            .wait_for(None, |e, _| match e.write(channel, &rest[off..]) {
                Ok(n) => {
                    off += n;
                    (off == rest.len()).then_some(Ok(()))
                }
                Err(err) => Some(Err(err)),
            })
            .unwrap_or_else(|| Err(TransportError::Closed("quic send interrupted".into())));
        let mut g = d.lock();
        g.engine.set_busy(channel, false);
        if r.is_err() {
            // A partly written message leaves the stream unusable.
            g.engine.reset(channel);
        }
        d.flush_chan(&mut g, channel);
        drop(g);
        d.deliver();
        r
    }
}

impl TransportPlugin for QuicTransport {
    const NAME: &'static str = "quic";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const CAPABILITIES: TransportCapabilities = TransportCapabilities::RELIABLE
        .union(TransportCapabilities::FIFO)
        .union(TransportCapabilities::UNRELIABLE)
        .union(TransportCapabilities::ENCRYPTED)
        .union(TransportCapabilities::NETWORK)
        .union(TransportCapabilities::POLLED);
    const PRIORITY: i32 = 40;

    fn create(config: &str, host: HostSink) -> Result<Self, TransportError> {
        let cfg = Config::parse(config)?;
        let id = random_id()?;
        let tls = PoolTls::new(&cfg.secret, &cfg.pool)?;
        let me = tls.identity(id)?;
        let transport = Arc::new(transport_config(&cfg)?);
        let mut server = tls.server_config(&me, transport.clone())?;
        // quinn-proto's own bounds on connection attempts not yet accepted or refused:
        // the engine decides on each as its first packet comes, so at most one waits and
        // nothing is buffered for it; these keep that so should it ever change.
        server
            .max_incoming(cfg.max_handshakes)
            .incoming_buffer_size(INCOMING_BUFFER)
            .incoming_buffer_size_total(INCOMING_BUFFER * cfg.max_handshakes as u64);
        let client = tls.client_config(&me, transport)?;
        let mut plan = cfg.net.listen_plan("quic")?;
        let socket = match udp_socket(plan.bind, plan.only_v6()) {
            Err(e) if plan.dual_stack => {
                // No IPv6 here: IPv4 only.
                tracing::debug!("quic: {e}; IPv4 only");
                plan = plan.ipv4_only().unwrap_or(plan);
                udp_socket(plan.bind, plan.only_v6())
            }
            r => r,
        }?;
        let bound = socket
            .local_addr()
            .map_err(|e| TransportError::Other(format!("quic: socket has no address: {e}")))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| TransportError::Unavailable(format!("quic: socket: {e}")))?;
        let udp = quinn_udp::UdpSocketState::new((&socket).into())
            .map_err(|e| TransportError::Unavailable(format!("quic: socket: {e}")))?;
        let pool = BufferPool::new(16, 64 << 20);
        let engine = Engine::new(
            id,
            cfg.max_message,
            server,
            client,
            pool.clone(),
            udp.max_gso_segments(),
            HandshakeBounds {
                timeout: cfg.handshake_timeout,
                max: cfg.max_handshakes,
            },
        );
        let driver = Driver::new(engine, socket, udp, host, pool)
            .map_err(|e| TransportError::Unavailable(format!("quic: eventfd: {e}")))?;
        let here = host_id()
            .inspect_err(|e| {
                tracing::debug!("quic: no host id ({e}); peers try loopback as any address")
            })
            .ok();
        let address = plan.endpoint(bound.port(), id, here).to_bytes();
        let inner = Arc::new(Inner {
            id,
            cfg,
            address,
            bound,
            plan,
            here,
            driver,
            stopping: AtomicBool::new(false),
        });
        let bg = inner.clone();
        let background = std::thread::Builder::new()
            .name("ipl-quic".into())
            .spawn(move || bg.driver.run_background())
            .map_err(|e| TransportError::Unavailable(format!("quic: no thread: {e}")))?;
        directory().lock().insert(id, Arc::downgrade(&inner));
        tracing::debug!(
            address = %String::from_utf8_lossy(&inner.address),
            bound = %bound,
            "quic endpoint created"
        );
        Ok(QuicTransport {
            inner,
            background: Mutex::new(Some(background)),
        })
    }

    fn local_address(&self) -> Vec<u8> {
        self.inner.address.clone()
    }

    fn connect(&self, address: &[u8], timeout: Duration) -> Result<u64, TransportError> {
        let addr = Address::parse(address)?;
        let inner = &self.inner;
        let d = &inner.driver;
        let deadline = Instant::now() + timeout;
        let mut last = None;
        // A reused connection may turn out dead when we open the stream; then dial anew
        // once.
        for _ in 0..2 {
            if inner.stopping.load(Ordering::SeqCst) {
                return Err(shutting_down());
            }
            let ch = inner.connection(&addr, deadline)?;
            let opened = d.wait_for(Some(deadline), |e, _| {
                match e.open_channel(ch, addr.unreliable) {
                    Ok(Some(local)) => Some(Ok(local)),
                    Ok(None) => None,
                    Err(err) => Some(Err(err)),
                }
            });
            match opened {
                Some(Ok(local)) => {
                    let mut g = d.lock();
                    d.flush_chan(&mut g, local);
                    return Ok(local);
                }
                Some(Err(e)) => last = Some(e),
                None => {
                    return Err(TransportError::Timeout(format!(
                        "quic: no channel to endpoint {:016x} could be opened within {timeout:?} \
                         (at most {MAX_CHANNELS_PER_PEER} per peer)",
                        addr.id
                    )))
                }
            }
        }
        Err(last.unwrap_or_else(|| TransportError::Closed("quic connect failed".into())))
    }

    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        let len = message_len(slices, self.inner.cfg.max_message)?;
        let total = u64::from(len);
        let d = &self.inner.driver;
        let mut g = d.lock();
        while g.engine.is_busy(channel) {
            // Another sender is in the middle of a message on this channel.
            drop(g);
            d.wait_for(None, |e, _| (!e.is_busy(channel)).then_some(()));
            g = d.lock();
        }
        if g.engine.try_datagram(channel, slices, total)? {
            d.flush_chan(&mut g, channel);
            drop(g);
            d.deliver();
            return Ok(());
        }
        let prefix = wire::len_prefix(len);
        let mut rest = Vec::new();
        if (len as usize) <= COALESCE {
            let mut buf = std::mem::take(&mut g.scratch);
            buf.clear();
            buf.extend_from_slice(&prefix);
            for s in slices {
                buf.extend_from_slice(s);
            }
            let written = g.engine.write(channel, &buf);
            if let Ok(n) = written {
                if n < buf.len() {
                    rest.extend_from_slice(&buf[n..]);
                }
            }
            g.scratch = buf;
            written?;
        } else {
            let mut pieces = std::iter::once(&prefix[..]).chain(slices.iter().copied());
            for piece in pieces.by_ref() {
                let n = match g.engine.write(channel, piece) {
                    Ok(n) => n,
                    Err(e) => {
                        g.engine.reset(channel);
                        return Err(e);
                    }
                };
                if n < piece.len() {
                    rest.extend_from_slice(&piece[n..]);
                    break;
                }
            }
            for piece in pieces {
                rest.extend_from_slice(piece);
            }
        }
        if rest.is_empty() {
            d.sent(&mut g, channel);
            drop(g);
            d.deliver();
            return Ok(());
        }
        g.engine.set_busy(channel, true);
        d.flush_chan(&mut g, channel);
        drop(g);
        self.inner.write_rest(channel, rest)
    }

    fn close_channel(&self, channel: u64) {
        let d = &self.inner.driver;
        let mut g = d.lock();
        g.engine.close_channel(channel);
        d.flush(&mut g);
        drop(g);
        d.deliver();
    }

    fn progress(&self) -> usize {
        self.inner.driver.progress()
    }

    fn progress_end(&self) {
        self.inner.driver.progress_end();
    }

    fn shutdown(&self) {
        let inner = &self.inner;
        if inner.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        let d = &inner.driver;
        // From here on no host callback starts, and none is running when close returns.
        d.gate.close();
        {
            let mut g = d.lock();
            g.engine.begin_shutdown();
            d.flush(&mut g);
        }
        // Wait (up to `linger`) until the peers have acknowledged the data sent so far:
        // closing a QUIC connection discards what is still unsent, while `send`
        // returned as soon as its bytes were queued.
        let linger = inner.cfg.linger;
        if !linger.is_zero()
            && d.wait_for(Some(Instant::now() + linger), |e, _| {
                e.all_acked().then_some(())
            })
            .is_none()
        {
            tracing::warn!(
                "quic: peers did not acknowledge all data within {linger:?}; closing anyway"
            );
        }
        // Peers see the connections closed with CODE_SHUTDOWN and report their channels
        // lost (or closed, if they read the end of the stream first).
        {
            let mut g = d.lock();
            g.engine.close_all(Instant::now());
            d.flush(&mut g);
        }
        d.stop.store(true, Ordering::Release);
        d.wake();
        if let Some(t) = self.background.lock().take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        directory().lock().remove(&inner.id);
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
