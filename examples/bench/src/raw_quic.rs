//! The raw limit for benchmarks: a plain quinn ping-pong and a plain quinn stream, with
//! none of the transport's framing, tables, callbacks or threads.
//!
//! Server and client may live in two processes (or two threads). Each side owns a tokio
//! runtime with one worker thread and runs its loop as a task there, so network I/O, the
//! connection driver and the loop share one thread (the fastest way to drive quinn), and
//! the connection keeps being served between calls. TLS is the same as the transport's
//! (TLS 1.3, mutual, Ed25519 certificates from a CA derived from the pool secret, by
//! the transport's own `ipl_transport_quic::tls`) but from a fixed, public benchmark
//! secret: this module is for measuring, not for protecting anything.
//! Its set-up cost is not measured; only the steady state is.
//!
//! Each [`RawServer::echo`] / [`RawServer::sink`] call serves the stream opened by the
//! client's next [`RawClient::latency`] / [`RawClient::throughput`] call with the same
//! arguments; a warm-up is simply one more pair of calls.
//!
//! ```
//! use ibis_bench::raw_quic::{serve, RawClient};
//!
//! let (addr, server) = serve("127.0.0.1:0".parse().unwrap()).unwrap();
//! let t = std::thread::spawn(move || {
//!     server.echo(1, 100).unwrap();
//!     server.sink(1024, 100).unwrap();
//! });
//! let client = RawClient::connect(addr).unwrap();
//! let rtt_us = client.latency(1, 100).unwrap();
//! let mb_s = client.throughput(1024, 100).unwrap();
//! assert!(rtt_us > 0.0 && mb_s > 0.0);
//! t.join().unwrap();
//! ```

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use ipl_auth::PoolSecret;
use ipl_transport_quic::tls::{self, PoolTls};
use parking_lot::Mutex;
use tokio::runtime::Runtime;

/// The baseline's fixed pool name (with a fixed secret; see the module documentation).
pub const POOL: &str = "ipl-quic-baseline";
/// The baseline server's endpoint id (the name in its certificate).
pub const SERVER_ID: u64 = 0xba5e;
const CLIENT_ID: u64 = 0xc11e;

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The baseline's fixed, public secret (see the module documentation).
pub fn secret() -> PoolSecret {
    PoolSecret::from_bytes([0x5a; 32])
}

/// The quinn client configuration of endpoint `id` of the baseline's pool, with
/// `transport` (for a client of [`serve`]'s server that drives quinn itself).
pub fn client_config(
    id: u64,
    transport: Arc<quinn::TransportConfig>,
) -> io::Result<quinn::ClientConfig> {
    let tls = PoolTls::new(&secret(), POOL).map_err(other)?;
    quic_client(&tls, &tls.identity(id).map_err(other)?, transport)
}

fn quic_client(
    tls: &PoolTls,
    me: &tls::Identity,
    transport: Arc<quinn::TransportConfig>,
) -> io::Result<quinn::ClientConfig> {
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls.rustls_client(me).map_err(other)?)
            .map_err(other)?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(transport);
    Ok(cfg)
}

fn setup(id: u64, bind: SocketAddr) -> io::Result<(Runtime, quinn::Endpoint)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("quic-baseline")
        .enable_all()
        .build()?;
    let tls = PoolTls::new(&secret(), POOL).map_err(other)?;
    let me = tls.identity(id).map_err(other)?;
    let mut transport = quinn::TransportConfig::default();
    transport
        .stream_receive_window(quinn::VarInt::from_u32(16 << 20))
        .send_window(64 << 20);
    let transport = Arc::new(transport);
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls.rustls_server(&me).map_err(other)?)
            .map_err(other)?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(transport.clone());
    let client = quic_client(&tls, &me, transport)?;
    let socket = std::net::UdpSocket::bind(bind)?;
    let mut endpoint = {
        let _g = rt.enter();
        quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            Some(server),
            socket,
            Arc::new(quinn::TokioRuntime),
        )?
    };
    endpoint.set_default_client_config(client);
    Ok((rt, endpoint))
}

/// The server side of the baseline.
pub struct RawServer {
    rt: Runtime,
    endpoint: quinn::Endpoint,
    conn: Mutex<Option<quinn::Connection>>,
}

impl std::fmt::Debug for RawServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawServer(..)")
    }
}

/// Starts a baseline server on `bind` (UDP); returns the address it listens on and the
/// server, which serves nothing until [`echo`](RawServer::echo) or
/// [`sink`](RawServer::sink) is called.
pub fn serve(bind: SocketAddr) -> io::Result<(SocketAddr, RawServer)> {
    let (rt, endpoint) = setup(SERVER_ID, bind)?;
    let addr = endpoint.local_addr()?;
    Ok((
        addr,
        RawServer {
            rt,
            endpoint,
            conn: Mutex::new(None),
        },
    ))
}

impl RawServer {
    /// Runs `f` with the (first) connection as a task on this side's runtime and waits
    /// for it.
    fn run<F, Fut>(&self, f: F) -> io::Result<()>
    where
        F: FnOnce(quinn::Connection) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = io::Result<()>> + Send + 'static,
    {
        let known = self.conn.lock().clone();
        let endpoint = self.endpoint.clone();
        let task = self.rt.spawn(async move {
            let conn = match known {
                Some(c) => c,
                None => {
                    let incoming = endpoint
                        .accept()
                        .await
                        .ok_or_else(|| other("baseline endpoint closed"))?;
                    incoming.await.map_err(other)?
                }
            };
            f(conn.clone()).await.map(|()| conn)
        });
        let conn = self.rt.block_on(task).map_err(other)??;
        *self.conn.lock() = Some(conn);
        Ok(())
    }

    /// Accepts the client's next stream and echoes `iters` messages of `size` bytes.
    pub fn echo(&self, size: usize, iters: usize) -> io::Result<()> {
        self.run(move |conn| async move {
            let (mut send, mut recv) = conn.accept_bi().await.map_err(other)?;
            let mut buf = vec![0u8; size];
            for _ in 0..iters {
                recv.read_exact(&mut buf).await.map_err(other)?;
                send.write_all(&buf).await.map_err(other)?;
            }
            drain(&mut recv).await
        })
    }

    /// Accepts the client's next stream, reads `count` messages of `size` bytes and
    /// acknowledges them with one byte.
    pub fn sink(&self, size: usize, count: usize) -> io::Result<()> {
        self.run(move |conn| async move {
            let (mut send, mut recv) = conn.accept_bi().await.map_err(other)?;
            let mut left = size as u64 * count as u64;
            while left > 0 {
                let chunk = recv
                    .read_chunk(usize::MAX, true)
                    .await
                    .map_err(other)?
                    .ok_or_else(|| other("baseline stream ended early"))?;
                left = left.saturating_sub(chunk.bytes.len() as u64);
            }
            send.write_all(&[1]).await.map_err(other)?;
            drain(&mut recv).await
        })
    }
}

/// Waits for the end of the client's stream. The client finishes it after it received
/// everything, so our last writes (buffered in quinn, sent only while this side's runtime
/// runs) are out before the call returns.
async fn drain(recv: &mut quinn::RecvStream) -> io::Result<()> {
    while recv
        .read_chunk(usize::MAX, true)
        .await
        .map_err(other)?
        .is_some()
    {}
    Ok(())
}

/// The client side of the baseline.
pub struct RawClient {
    rt: Runtime,
    conn: quinn::Connection,
    _endpoint: quinn::Endpoint,
}

impl std::fmt::Debug for RawClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawClient(..)")
    }
}

impl RawClient {
    /// Connects to a baseline server (the handshake completes when the server first
    /// serves a call).
    pub fn connect(addr: SocketAddr) -> io::Result<Self> {
        let unspecified = match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        let mut addr = addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        let (rt, endpoint) = setup(CLIENT_ID, SocketAddr::new(unspecified, 0))?;
        let conn = rt.block_on(async {
            endpoint
                .connect(addr, &tls::server_name(SERVER_ID))
                .map_err(other)?
                .await
                .map_err(other)
        })?;
        Ok(RawClient {
            rt,
            conn,
            _endpoint: endpoint,
        })
    }

    /// Runs `f` with the connection as a task on this side's runtime and waits for it.
    fn run<F, Fut>(&self, f: F) -> io::Result<f64>
    where
        F: FnOnce(quinn::Connection) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = io::Result<f64>> + Send + 'static,
    {
        let task = self.rt.spawn(f(self.conn.clone()));
        self.rt.block_on(task).map_err(other)?
    }

    /// Sends `iters` messages of `size` bytes, each after the echo of the previous one
    /// came back; returns microseconds per round trip.
    pub fn latency(&self, size: usize, iters: usize) -> io::Result<f64> {
        self.run(move |conn| async move {
            let (mut send, mut recv) = conn.open_bi().await.map_err(other)?;
            let out = vec![0x5au8; size];
            let mut back = vec![0u8; size];
            let start = Instant::now();
            for _ in 0..iters {
                send.write_all(&out).await.map_err(other)?;
                recv.read_exact(&mut back).await.map_err(other)?;
            }
            let us = start.elapsed().as_secs_f64() * 1e6;
            send.finish().map_err(other)?;
            Ok(us / iters.max(1) as f64)
        })
    }

    /// Streams `count` messages of `size` bytes and waits for the server's
    /// acknowledgement; returns MB/s (10^6 bytes per second) of payload.
    pub fn throughput(&self, size: usize, count: usize) -> io::Result<f64> {
        self.run(move |conn| async move {
            let (mut send, mut recv) = conn.open_bi().await.map_err(other)?;
            let out = vec![0x5au8; size];
            let start = Instant::now();
            for _ in 0..count {
                send.write_all(&out).await.map_err(other)?;
            }
            let mut ack = [0u8; 1];
            recv.read_exact(&mut ack).await.map_err(other)?;
            let secs = start.elapsed().as_secs_f64();
            send.finish().map_err(other)?;
            Ok(size as f64 * count as f64 / secs / 1e6)
        })
    }
}
