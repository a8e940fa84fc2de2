//! Helpers for testing a transport through the host side of the ABI: an event log that
//! records what a [`TransportInstance`] reports and lets a
//! test wait for it (with a bound, never a timing assertion), the set-up of endpoints
//! as the IPL makes them, and a payload pattern for integrity checks. Used by the tests
//! of the tcp, quic and shm transports. [`netns`] makes two hosts on one machine (network
//! namespaces joined by a veth pair) for tests that cross hosts. The IP transports (tcp,
//! quic) share their test scenarios, each taking the transport as an
//! [`IpTransport`](addresses::IpTransport): [`addresses`] (interface selection,
//! advertised addresses, the dial order) and [`across_hosts`] (a connection between two
//! namespace hosts). [`strangers`] plays the strangers that never finish a handshake;
//! [`take`] is the receiver-driven take scenario of the transports that poll (shm, tcp),
//! [`fast_path`] the scenario of a channel's fast path.
//!
//! ```
//! use ipl_transport_kit::testing::{pattern, EventLog};
//! use ipl_transport_abi::TransportEvents;
//! let log = EventLog::new();
//! log.channel_opened(7);
//! let e = log.wait("the channel", |e| e.opened.contains(&7));
//! assert_eq!(e.opened, vec![7]);
//! assert_eq!(pattern(1, 16), pattern(1, 16));
//! assert_ne!(pattern(1, 16), pattern(2, 16));
//! ```

pub mod across_hosts;
pub mod addresses;
pub mod fast_path;
pub mod netns;
pub mod strangers;
pub mod take;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_transport_abi::{
    ChannelClosed, Plugin, ReceivedBuffer, TransportEvents, TransportInstance,
};
use parking_lot::{Condvar, Mutex, MutexGuard};

/// Bound on every wait of [`EventLog::wait`]: a guard against hangs only.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// What a transport instance reported, in order.
#[derive(Default, Debug)]
pub struct Events {
    /// Channels the peer opened.
    pub opened: Vec<u64>,
    /// Messages received, copied, with their channel.
    pub messages: Vec<(u64, Vec<u8>)>,
    /// Received buffers kept unreleased (only while [`EventLog::keep`] is set).
    pub kept: Vec<(u64, ReceivedBuffer)>,
    /// Channels closed or lost, with the reason.
    pub closed: Vec<(u64, ChannelClosed)>,
}

impl Events {
    /// The messages received on channel `ch`, in order.
    pub fn on(&self, ch: u64) -> Vec<&[u8]> {
        self.messages
            .iter()
            .filter(|(c, _)| *c == ch)
            .map(|(_, m)| m.as_slice())
            .collect()
    }
}

/// A [`TransportEvents`] sink that records everything and can be waited on.
#[derive(Default)]
pub struct EventLog {
    events: Mutex<Events>,
    changed: Condvar,
    /// Also keep each received buffer (unreleased) in [`Events::kept`].
    pub keep: AtomicBool,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Arc<Self> {
        Arc::new(EventLog::default())
    }

    /// The events so far.
    pub fn events(&self) -> MutexGuard<'_, Events> {
        self.events.lock()
    }

    /// Waits until `done` holds.
    ///
    /// # Panics
    /// After [`PATIENCE`], naming `what` and showing the events (this is for tests).
    pub fn wait(&self, what: &str, done: impl Fn(&Events) -> bool) -> MutexGuard<'_, Events> {
        let end = Instant::now() + PATIENCE;
        let mut g = self.events();
        while !done(&g) {
            let left = end
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("timed out waiting for {what}: {g:?}"));
            self.changed.wait_for(&mut g, left);
        }
        g
    }

    /// Like [`wait`](Self::wait), for when the events are not needed.
    pub fn until(&self, what: &str, done: impl Fn(&Events) -> bool) {
        drop(self.wait(what, done));
    }

    fn update(&self, f: impl FnOnce(&mut Events)) {
        f(&mut self.events());
        self.changed.notify_all();
    }
}

impl TransportEvents for EventLog {
    fn channel_opened(&self, ch: u64) {
        self.update(|e| e.opened.push(ch));
    }

    fn message(&self, ch: u64, buf: ReceivedBuffer) {
        let v = buf.to_vec();
        let keep = self.keep.load(Ordering::SeqCst);
        self.update(|e| {
            e.messages.push((ch, v));
            if keep {
                e.kept.push((ch, buf));
            }
        });
    }

    fn channel_closed(&self, ch: u64, why: ChannelClosed) {
        self.update(|e| e.closed.push((ch, why)));
    }
}

/// A deterministic pseudo-random payload of `len` bytes for integrity checks.
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

/// The configuration a test endpoint of pool `pool` with `secret` gets.
pub fn config(secret: &PoolSecret, pool: &str) -> String {
    format!("secret={}\npool={pool}", secret.to_hex())
}

/// A fresh endpoint of `plugin` with its own log.
///
/// # Panics
/// If the plugin refuses `cfg` (this is for tests).
pub fn endpoint(plugin: &Plugin, cfg: &str) -> (TransportInstance, Arc<EventLog>) {
    let log = EventLog::new();
    let t = plugin
        .create(cfg, log.clone())
        .unwrap_or_else(|e| panic!("{} endpoint: {e}", plugin.name()));
    (t, log)
}

/// A channel from `from` to `to`.
///
/// # Panics
/// If the connect fails (this is for tests).
pub fn connect(from: &TransportInstance, to: &TransportInstance) -> u64 {
    let addr = to.local_address().expect("local address");
    from.connect(&addr, PATIENCE)
        .unwrap_or_else(|e| panic!("connect: {e}"))
}
