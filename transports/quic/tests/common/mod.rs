//! Shared helpers: an event log the tests wait on, configs, and a hand-made quinn peer
//! that speaks the transport's protocol (with the pool's certificates) so that tests
//! can send what a correct endpoint never would.

#![allow(dead_code)]

#[allow(unused_imports)] // each test file uses part of them
pub use ipl_transport_kit::testing::{connect, pattern, EventLog as Log, Events, PATIENCE};
use std::sync::Arc;
use std::time::Duration;

use ipl_auth::PoolSecret;
use ipl_transport_abi::{Plugin, TransportInstance};
use ipl_transport_quic::tls::{server_name, Identity, PoolTls};
use ipl_transport_quic::wire::{StreamHeader, STREAM_HEADER_LEN};
use ipl_transport_quic::Address;

pub const POOL: &str = "test";

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

/// A hand-made peer: plain quinn with certificates of a pool, speaking the transport's
/// protocol by hand.
pub struct RawPeer {
    pub rt: tokio::runtime::Runtime,
    pub conn: quinn::Connection,
    _endpoint: quinn::Endpoint,
}

pub const RAW_ID: u64 = 0x7e57;

impl RawPeer {
    /// Connects to `target` trusting the CA of `trust` and presenting `me`, and
    /// exchanges hellos.
    pub fn connect_with(target: &[u8], trust: &PoolTls, me: &Identity) -> Result<Self, String> {
        let addr = Address::parse(target).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = ipl_transport_quic::tls::quic_client(
            trust.rustls_client(me).unwrap(),
            Arc::new(quinn::TransportConfig::default()),
        )
        .unwrap();
        let endpoint = {
            let _g = rt.enter();
            quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap()
        };
        let conn = rt.block_on(async {
            let work = async {
                let conn = endpoint
                    .connect_with(client, addr.socket, &server_name(addr.id))
                    .map_err(|e| e.to_string())?
                    .await
                    .map_err(|e| format!("handshake: {e}"))?;
                let mut out = conn.open_uni().await.map_err(|e| e.to_string())?;
                let hello = StreamHeader {
                    opener: RAW_ID,
                    unreliable: false,
                };
                out.write_all(&hello.encode())
                    .await
                    .map_err(|e| format!("hello: {e}"))?;
                let _ = out.finish();
                let mut inb = conn
                    .accept_uni()
                    .await
                    .map_err(|e| format!("no hello: {e}"))?;
                let mut h = [0u8; STREAM_HEADER_LEN];
                inb.read_exact(&mut h)
                    .await
                    .map_err(|e| format!("hello: {e}"))?;
                let theirs = StreamHeader::parse(&h).map_err(|e| e.to_string())?;
                assert_eq!(theirs.opener, addr.id);
                Ok::<_, String>(conn)
            };
            tokio::time::timeout(PATIENCE, work)
                .await
                .map_err(|_| "timed out".to_string())?
        })?;
        Ok(RawPeer {
            rt,
            conn,
            _endpoint: endpoint,
        })
    }

    /// Connects as a member of the pool with `secret`.
    pub fn connect(target: &[u8], secret: &PoolSecret) -> Result<Self, String> {
        let tls = PoolTls::new(secret, POOL).unwrap();
        let me = tls.identity(RAW_ID).unwrap();
        Self::connect_with(target, &tls, &me)
    }

    /// Opens a bidirectional stream and writes `bytes` on it (a header, frames, …).
    pub fn open(&self, bytes: &[u8]) -> (quinn::SendStream, quinn::RecvStream) {
        self.rt.block_on(async {
            let (mut s, r) = self.conn.open_bi().await.unwrap();
            s.write_all(bytes).await.unwrap();
            (s, r)
        })
    }

    pub fn write(&self, s: &mut quinn::SendStream, bytes: &[u8]) {
        self.rt.block_on(s.write_all(bytes)).unwrap();
    }

    /// Reads exactly `n` bytes from a stream.
    pub fn read(&self, r: &mut quinn::RecvStream, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.rt
            .block_on(async { tokio::time::timeout(PATIENCE, r.read_exact(&mut v)).await })
            .expect("timed out reading")
            .unwrap();
        v
    }

    pub fn read_datagram(&self) -> bytes::Bytes {
        self.rt
            .block_on(async { tokio::time::timeout(PATIENCE, self.conn.read_datagram()).await })
            .expect("timed out waiting for a datagram")
            .unwrap()
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
    /// Closes the connection properly, so the endpoint under test does not wait for a
    /// peer that vanished when it shuts down.
    fn drop(&mut self) {
        self.conn.close(0u32.into(), b"test over");
        let endpoint = self._endpoint.clone();
        self.rt.block_on(async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
        });
    }
}
