//! Shared helpers: an event log the tests wait on, configs, and a hand-made QUIC peer
//! (quinn-proto driven by a thread of its own) that speaks the transport's protocol (with
//! the pool's certificates) so that tests can send what a correct endpoint never would.

#![allow(dead_code)]

#[allow(unused_imports)] // each test file uses part of them
pub use ipl_transport_kit::testing::{connect, pattern, EventLog as Log, Events, PATIENCE};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::{Condvar, Mutex, MutexGuard};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, ReadError, StreamEvent, StreamId, TransportConfig, VarInt,
};

use ipl_auth::PoolSecret;
use ipl_transport_abi::{Plugin, TransportInstance};
use ipl_transport_kit::testing::addresses::IpTransport;
use ipl_transport_quic::tls::{server_name, Identity, PoolTls};
use ipl_transport_quic::wire::{StreamHeader, STREAM_HEADER_LEN};
use ipl_transport_quic::Address;

pub const POOL: &str = "test";

/// This transport as the kit's shared scenarios take it.
pub const TRANSPORT: IpTransport = IpTransport {
    name: "quic",
    plugin,
    peer_addresses: ipl_transport_quic::QuicTransport::peer_addresses,
};

pub fn plugin() -> Plugin {
    Plugin::from_static(&ipl_transport_quic::PLUGIN).unwrap()
}

pub fn config(secret: &PoolSecret) -> String {
    ipl_transport_kit::testing::config(secret, POOL)
}

/// A fresh endpoint with its own log.
pub fn endpoint(cfg: &str) -> (TransportInstance, Arc<Log>) {
    ipl_transport_kit::testing::endpoint(&plugin(), cfg)
}

pub const RAW_ID: u64 = 0x7e57;

/// How long the hand-made peer's thread sleeps in a receive at most: it looks at the
/// connection's timers at least this often.
const TICK: Duration = Duration::from_millis(5);

/// A hand-made peer: a quinn-proto connection with certificates of a pool, speaking the
/// transport's protocol by hand. A thread of its own receives and drives the connection
/// (acknowledgements, timers) between the test's calls; the calls drive it too.
pub struct RawPeer {
    shared: Arc<Shared>,
    driver: Option<JoinHandle<()>>,
}

/// A stream of the hand-made peer's connection (a bidirectional stream's send and
/// receive halves have the same id).
#[derive(Debug, Clone, Copy)]
pub struct RawStream(StreamId);

impl RawStream {
    pub fn id(&self) -> StreamId {
        self.0
    }
}

struct Shared {
    state: Mutex<State>,
    /// Notified whenever the connection moved.
    moved: Condvar,
    socket: UdpSocket,
    stop: AtomicBool,
    /// Sends its first datagram only (a stranger that goes silent after its Initial);
    /// cleared by drop.
    mute_after_first: AtomicBool,
    /// A datagram went out.
    sent_one: AtomicBool,
}

/// How far a hand-made peer goes in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// Its first Initial packet, then silence (it still reads what comes).
    InitialOnly,
    /// Dials; the TLS handshake runs (no hello is sent).
    Tls,
}

struct State {
    endpoint: Endpoint,
    handle: ConnectionHandle,
    conn: Connection,
    connected: bool,
    lost: Option<String>,
    /// Streams the endpoint under test stopped, with its code.
    stopped: HashMap<StreamId, VarInt>,
    tx_buf: Vec<u8>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Lets the connection handle its timers and events, and sends what it transmits.
    fn drive(&self, st: &mut State) {
        let now = Instant::now();
        if st.conn.poll_timeout().is_some_and(|t| t <= now) {
            st.conn.handle_timeout(now);
        }
        let mut buf = std::mem::take(&mut st.tx_buf);
        loop {
            let mut progress = false;
            while let Some(ev) = st.conn.poll_endpoint_events() {
                progress = true;
                if let Some(back) = st.endpoint.handle_event(st.handle, ev) {
                    st.conn.handle_event(back);
                }
            }
            while let Some(ev) = st.conn.poll() {
                progress = true;
                match ev {
                    Event::Connected => st.connected = true,
                    Event::ConnectionLost { reason } => st.lost = Some(reason.to_string()),
                    Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                        st.stopped.insert(id, error_code);
                    }
                    _ => {}
                }
            }
            loop {
                buf.clear();
                let Some(t) = st.conn.poll_transmit(now, 1, &mut buf) else {
                    break;
                };
                progress = true;
                if self.mute_after_first.load(Ordering::Acquire)
                    && self.sent_one.load(Ordering::Acquire)
                {
                    continue;
                }
                let _ = self.socket.send_to(&buf[..t.size], t.destination);
                self.sent_one.store(true, Ordering::Release);
            }
            if !progress {
                break;
            }
        }
        st.tx_buf = buf;
        self.moved.notify_all();
    }

    /// Calls `f` (and drives the connection) until it gives a value or `deadline`
    /// passes (`None`).
    fn wait<R>(&self, deadline: Instant, mut f: impl FnMut(&mut State) -> Option<R>) -> Option<R> {
        let mut st = self.lock();
        loop {
            self.drive(&mut st);
            let r = f(&mut st);
            if r.is_some() {
                self.drive(&mut st);
                return r;
            }
            if Instant::now() >= deadline {
                return None;
            }
            self.moved.wait_until(&mut st, deadline);
        }
    }

    /// The thread's loop: receive, feed the connection, drive it; ends with `stop`.
    fn run(&self) {
        let mut buf = vec![0u8; 65_536];
        let mut resp = Vec::new();
        while !self.stop.load(Ordering::Acquire) {
            let wait = {
                let mut st = self.lock();
                self.drive(&mut st);
                st.conn.poll_timeout().map_or(TICK, |t| {
                    t.saturating_duration_since(Instant::now())
                        .clamp(Duration::from_micros(100), TICK)
                })
            };
            let _ = self.socket.set_read_timeout(Some(wait));
            let Ok((n, from)) = self.socket.recv_from(&mut buf) else {
                continue;
            };
            let mut st = self.lock();
            resp.clear();
            let data = BytesMut::from(&buf[..n]);
            match st
                .endpoint
                .handle(Instant::now(), from, None, None, data, &mut resp)
            {
                Some(DatagramEvent::ConnectionEvent(h, ev)) if h == st.handle => {
                    st.conn.handle_event(ev)
                }
                Some(DatagramEvent::Response(t)) => {
                    let _ = self.socket.send_to(&resp[..t.size], t.destination);
                }
                _ => {}
            }
            self.drive(&mut st);
        }
    }
}

/// Reads what stream `id` has into `out`, up to `want` bytes in all; an error if the
/// stream ended or was reset before.
fn read_into(
    conn: &mut Connection,
    id: StreamId,
    out: &mut Vec<u8>,
    want: usize,
) -> Result<(), String> {
    let mut rs = conn.recv_stream(id);
    let mut chunks = rs.read(true).map_err(|e| format!("read: {e}"))?;
    let mut r = Ok(());
    while out.len() < want {
        match chunks.next(want - out.len()) {
            Ok(Some(c)) => out.extend_from_slice(&c.bytes),
            Ok(None) => {
                r = Err("the stream ended".to_string());
                break;
            }
            Err(ReadError::Blocked) => break,
            Err(ReadError::Reset(code)) => {
                r = Err(format!("the stream was reset (code {code})"));
                break;
            }
        }
    }
    let _ = chunks.finalize();
    r
}

impl RawPeer {
    /// Connects to `target` trusting the CA of `trust` and presenting `me`, and
    /// exchanges hellos.
    pub fn connect_with(target: &[u8], trust: &PoolTls, me: &Identity) -> Result<Self, String> {
        let peer = Self::start(target, trust, me, Handshake::Tls)?;
        peer.hellos(Address::parse(target).unwrap().id)?;
        Ok(peer)
    }

    /// A stranger with the pool's certificates that goes only as far as `how` in the
    /// handshake and never sends a hello.
    pub fn stranger(target: &[u8], secret: &PoolSecret, how: Handshake) -> Self {
        let tls = PoolTls::new(secret, POOL).unwrap();
        let me = tls.identity(RAW_ID).unwrap();
        Self::start(target, &tls, &me, how).unwrap()
    }

    /// Whether the TLS handshake completed within `PATIENCE` (`Err`: why not).
    pub fn tls_done(&self) -> Result<(), String> {
        self.shared
            .wait(Instant::now() + PATIENCE, |st| match &st.lost {
                Some(e) => Some(Err(format!("handshake: {e}"))),
                None => st.connected.then_some(Ok(())),
            })
            .unwrap_or_else(|| Err("the TLS handshake timed out".into()))
    }

    /// Waits (bounded by `PATIENCE`) until the peer's first datagram went out.
    pub fn sent_first(&self) -> bool {
        self.shared
            .wait(Instant::now() + PATIENCE, |_| {
                self.shared.sent_one.load(Ordering::Acquire).then_some(())
            })
            .is_some()
    }

    /// Waits until the endpoint closes the connection; why (`None`: not before `deadline`).
    pub fn lost_by(&self, deadline: Instant) -> Option<String> {
        self.shared.wait(deadline, |st| st.lost.clone())
    }

    /// Dials `target`: the driver thread runs the handshake as far as `how` allows.
    fn start(
        target: &[u8],
        trust: &PoolTls,
        me: &Identity,
        how: Handshake,
    ) -> Result<Self, String> {
        let addr = Address::parse(target).unwrap();
        let client: ClientConfig = ipl_transport_quic::tls::quic_client(
            trust.rustls_client(me).unwrap(),
            Arc::new(TransportConfig::default()),
        )
        .unwrap();
        let mut endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None);
        let (handle, conn) = endpoint
            .connect(
                Instant::now(),
                client,
                addr.primary(),
                &server_name(addr.id),
            )
            .map_err(|e| e.to_string())?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                endpoint,
                handle,
                conn,
                connected: false,
                lost: None,
                stopped: HashMap::new(),
                tx_buf: Vec::new(),
            }),
            moved: Condvar::new(),
            socket: UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap(),
            stop: AtomicBool::new(false),
            mute_after_first: AtomicBool::new(how == Handshake::InitialOnly),
            sent_one: AtomicBool::new(false),
        });
        let bg = shared.clone();
        let driver = std::thread::Builder::new()
            .name("raw-peer".into())
            .spawn(move || bg.run())
            .unwrap();
        Ok(RawPeer {
            shared,
            driver: Some(driver),
        })
    }

    /// Completes the handshake and exchanges hellos with endpoint `expect`.
    fn hellos(&self, expect: u64) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        let timed_out = || "timed out".to_string();
        self.shared
            .wait(deadline, |st| match &st.lost {
                Some(e) => Some(Err(format!("handshake: {e}"))),
                None => st.connected.then_some(Ok(())),
            })
            .ok_or_else(timed_out)??;
        {
            let mut st = self.shared.lock();
            let id = st
                .conn
                .streams()
                .open(Dir::Uni)
                .ok_or("no stream for the hello")?;
            let hello = StreamHeader {
                opener: RAW_ID,
                unreliable: false,
            }
            .encode();
            // A fresh stream's window takes the 14 bytes.
            let mut s = st.conn.send_stream(id);
            s.write(&hello).map_err(|e| format!("hello: {e}"))?;
            let _ = s.finish();
            self.shared.drive(&mut st);
        }
        let mut theirs = None;
        let mut got = Vec::new();
        self.shared
            .wait(deadline, |st| {
                if let Some(e) = &st.lost {
                    return Some(Err(format!("no hello: {e}")));
                }
                if theirs.is_none() {
                    theirs = st.conn.streams().accept(Dir::Uni);
                }
                let id = theirs?;
                match read_into(&mut st.conn, id, &mut got, STREAM_HEADER_LEN) {
                    Err(e) => Some(Err(format!("hello: {e}"))),
                    Ok(()) => (got.len() == STREAM_HEADER_LEN).then_some(Ok(())),
                }
            })
            .ok_or_else(timed_out)??;
        let mut h = [0u8; STREAM_HEADER_LEN];
        h.copy_from_slice(&got);
        let theirs = StreamHeader::parse(&h).map_err(|e| e.to_string())?;
        assert_eq!(theirs.opener, expect);
        Ok(())
    }

    /// Connects as a member of the pool with `secret`.
    pub fn connect(target: &[u8], secret: &PoolSecret) -> Result<Self, String> {
        let tls = PoolTls::new(secret, POOL).unwrap();
        let me = tls.identity(RAW_ID).unwrap();
        Self::connect_with(target, &tls, &me)
    }

    /// Opens a bidirectional stream and writes `bytes` on it (a header, frames, …);
    /// returns its send and receive halves.
    pub fn open(&self, bytes: &[u8]) -> (RawStream, RawStream) {
        let id = self
            .shared
            .lock()
            .conn
            .streams()
            .open(Dir::Bi)
            .expect("the endpoint's stream limit");
        let s = RawStream(id);
        self.write(&s, bytes);
        (s, s)
    }

    /// Writes all of `bytes` on a stream.
    pub fn write(&self, s: &RawStream, bytes: &[u8]) {
        let mut off = 0;
        self.shared
            .wait(Instant::now() + PATIENCE, |st| {
                match st.conn.send_stream(s.0).write(&bytes[off..]) {
                    Ok(n) => off += n,
                    Err(quinn_proto::WriteError::Blocked) => {}
                    Err(e) => panic!("write: {e}"),
                }
                (off == bytes.len()).then_some(())
            })
            .expect("timed out writing");
    }

    /// Finishes a stream (the endpoint reads its end).
    pub fn finish(&self, s: &RawStream) -> Result<(), String> {
        let mut st = self.shared.lock();
        let r = st.conn.send_stream(s.0).finish().map_err(|e| e.to_string());
        self.shared.drive(&mut st);
        r
    }

    /// Waits until the endpoint stops a stream; returns its code (`None`: it did not
    /// within [`PATIENCE`]).
    pub fn stopped(&self, s: &RawStream) -> Option<VarInt> {
        self.shared.wait(Instant::now() + PATIENCE, |st| {
            st.stopped.get(&s.0).copied()
        })
    }

    /// Reads exactly `n` bytes from a stream.
    pub fn read(&self, r: &RawStream, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        self.shared
            .wait(Instant::now() + PATIENCE, |st| {
                read_into(&mut st.conn, r.0, &mut v, n).unwrap();
                (v.len() == n).then_some(())
            })
            .expect("timed out reading");
        v
    }

    /// Sends one datagram.
    pub fn send_datagram(&self, d: Bytes) -> Result<(), String> {
        let mut st = self.shared.lock();
        let r = st.conn.datagrams().send(d, true).map_err(|e| e.to_string());
        self.shared.drive(&mut st);
        r
    }

    /// Waits for a datagram.
    pub fn read_datagram(&self) -> Bytes {
        self.shared
            .wait(Instant::now() + PATIENCE, |st| st.conn.datagrams().recv())
            .expect("timed out waiting for a datagram")
    }

    pub fn header(unreliable: bool) -> [u8; STREAM_HEADER_LEN] {
        StreamHeader {
            opener: RAW_ID,
            unreliable,
        }
        .encode()
    }
}

impl Drop for RawPeer {
    /// Closes the connection properly (so the endpoint under test does not wait for a
    /// peer that vanished when it shuts down), waits a bounded time until it drained,
    /// and stops the thread.
    fn drop(&mut self) {
        self.shared.mute_after_first.store(false, Ordering::Release);
        {
            let mut st = self.shared.lock();
            st.conn.close(
                Instant::now(),
                VarInt::from_u32(0),
                Bytes::from_static(b"test over"),
            );
            self.shared.drive(&mut st);
        }
        let _ = self
            .shared
            .wait(Instant::now() + Duration::from_secs(2), |st| {
                st.conn.is_drained().then_some(())
            });
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.driver.take() {
            let _ = t.join();
        }
    }
}
