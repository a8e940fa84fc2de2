//! Shared helpers: an event log the tests wait on, configs, and a hand-made client that
//! performs the handshake with `ipl_auth` on a raw socket.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ipl_auth::{Initiator, PoolSecret, CHALLENGE_LEN};
use ipl_transport_abi::{
    ChannelClosed, Plugin, ReceivedBuffer, TransportEvents, TransportInstance,
};
use ipl_transport_tcp::wire;

/// Bound on every wait: only a guard against hangs, never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Default, Debug)]
pub struct Events {
    pub opened: Vec<u64>,
    pub messages: Vec<(u64, Vec<u8>)>,
    pub closed: Vec<(u64, ChannelClosed)>,
}

#[derive(Default)]
pub struct Log {
    events: Mutex<Events>,
    changed: Condvar,
}

impl Log {
    pub fn new() -> Arc<Self> {
        Arc::new(Log::default())
    }

    pub fn events(&self) -> MutexGuard<'_, Events> {
        self.events.lock().unwrap()
    }

    /// Waits until `done` holds (panics after [`PATIENCE`], naming `what`).
    pub fn wait(&self, what: &str, done: impl Fn(&Events) -> bool) -> MutexGuard<'_, Events> {
        let end = Instant::now() + PATIENCE;
        let mut g = self.events.lock().unwrap();
        while !done(&g) {
            let left = end
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("timed out waiting for {what}: {g:?}"));
            g = self.changed.wait_timeout(g, left).unwrap().0;
        }
        g
    }

    /// Like [`wait`](Self::wait), for when the events are not needed.
    pub fn until(&self, what: &str, done: impl Fn(&Events) -> bool) {
        drop(self.wait(what, done));
    }

    fn update(&self, f: impl FnOnce(&mut Events)) {
        f(&mut self.events.lock().unwrap());
        self.changed.notify_all();
    }
}

impl TransportEvents for Log {
    fn channel_opened(&self, ch: u64) {
        self.update(|e| e.opened.push(ch));
    }
    fn message(&self, ch: u64, buf: ReceivedBuffer) {
        let v = buf.to_vec();
        self.update(|e| e.messages.push((ch, v)));
    }
    fn channel_closed(&self, ch: u64, why: ChannelClosed) {
        self.update(|e| e.closed.push((ch, why)));
    }
}

pub fn plugin() -> Plugin {
    Plugin::from_static(&ipl_transport_tcp::PLUGIN).unwrap()
}

pub fn config(secret: &PoolSecret) -> String {
    format!("secret={}\npool=test", secret.to_hex())
}

/// A fresh endpoint with its own log.
pub fn endpoint(cfg: &str) -> (TransportInstance, Arc<Log>) {
    let log = Log::new();
    let t = plugin().create(cfg, log.clone()).unwrap();
    (t, log)
}

pub fn connect(from: &TransportInstance, to: &TransportInstance) -> u64 {
    from.connect(&to.local_address().unwrap(), PATIENCE)
        .unwrap()
}

/// The socket address and id inside an endpoint address.
pub fn parse(addr: &[u8]) -> (SocketAddr, u64) {
    let a = ipl_transport_tcp::Address::parse(addr).unwrap();
    (a.socket, a.id)
}

/// Dials `target` with a raw socket and performs the handshake by hand, as endpoint
/// `my_id`. Returns the authenticated stream.
pub fn raw_client(target: &TransportInstance, secret: &PoolSecret, my_id: u64) -> TcpStream {
    let (sock, id) = parse(&target.local_address().unwrap());
    let mut s = TcpStream::connect(sock).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let (init, hello) = Initiator::start(secret, b"ipl-tcp/test").unwrap();
    s.write_all(&wire::MAGIC).unwrap();
    s.write_all(&hello).unwrap();
    let mut challenge = [0u8; CHALLENGE_LEN];
    s.read_exact(&mut challenge).unwrap();
    let finish = init.on_challenge(&challenge).unwrap();
    s.write_all(&finish).unwrap();
    s.write_all(&my_id.to_le_bytes()).unwrap();
    s.write_all(&id.to_le_bytes()).unwrap();
    let mut theirs = [0u8; 8];
    s.read_exact(&mut theirs).unwrap();
    assert_eq!(u64::from_le_bytes(theirs), id);
    s
}

/// Payload pattern for integrity checks.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
