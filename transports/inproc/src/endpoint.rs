//! An in-process endpoint and the process-wide directory that finds endpoints by address.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::{
    ChannelSink, FastChannel, HostSink, TransportCapabilities, TransportError, TransportPlugin,
};
use ipl_transport_kit::gate::{Entered, Gate};
use parking_lot::Mutex;

/// Endpoint ids are unique for the life of the process, so a stale address never reaches
/// a newer endpoint.
static NEXT_ENDPOINT: AtomicU64 = AtomicU64::new(1);

fn directory() -> &'static Mutex<HashMap<u64, Weak<Shared>>> {
    static DIR: OnceLock<Mutex<HashMap<u64, Weak<Shared>>>> = OnceLock::new();
    DIR.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The far end of a channel.
#[derive(Clone)]
struct Peer {
    endpoint: Weak<Shared>,
    channel: u64,
    /// Cleared when the channel leaves this side's table (closed here or by the peer,
    /// or the endpoint shut down): a fast path that holds the peer sees it.
    open: Arc<AtomicBool>,
}

impl Peer {
    fn new(endpoint: Weak<Shared>, channel: u64) -> Peer {
        Peer {
            endpoint,
            channel,
            open: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Copies the message into a buffer of its own and hands it to the peer's host.
    fn deliver(&self, slices: &[&[u8]]) -> Result<(), TransportError> {
        let target = self
            .endpoint
            .upgrade()
            .ok_or_else(|| TransportError::Closed("peer endpoint is gone".into()))?;
        let total = slices.iter().map(|s| s.len()).sum();
        let mut data = Vec::with_capacity(total);
        for s in slices {
            data.extend_from_slice(s);
        }
        let _e = target
            .enter()
            .ok_or_else(|| TransportError::Closed("peer endpoint is gone".into()))?;
        // No lock is held here: the receiving host may send from inside the callback.
        target.host.message_owned(self.channel, data);
        Ok(())
    }

    fn closed(&self) {
        self.open.store(false, Ordering::Release);
    }
}

struct Shared {
    id: u64,
    host: HostSink,
    channels: Mutex<HashMap<u64, Peer>>,
    next_channel: AtomicU64,
    alive: std::sync::atomic::AtomicBool,
    /// Host callbacks run inside this gate; `shutdown` closes it.
    gate: Gate,
}

impl Shared {
    /// Enters the endpoint for a host callback, unless it is shutting down.
    fn enter(&self) -> Option<Entered<'_>> {
        if self.alive.load(Ordering::SeqCst) {
            self.gate.enter()
        } else {
            None
        }
    }

    /// Marks the endpoint dead and waits until no host callback runs on it.
    fn close_gate(&self) {
        self.alive.store(false, Ordering::SeqCst);
        self.gate.close();
    }

    fn add_channel(&self, peer: Peer) -> u64 {
        let ch = self.next_channel.fetch_add(1, Ordering::Relaxed);
        self.channels.lock().insert(ch, peer);
        ch
    }

    fn peer(&self, ch: u64) -> Option<Peer> {
        self.channels.lock().get(&ch).cloned()
    }

    /// Takes `ch` out of the table (its fast paths see it closed).
    fn remove(&self, ch: u64) -> Option<Peer> {
        let peer = self.channels.lock().remove(&ch)?;
        peer.closed();
        Some(peer)
    }

    /// The peer side closed or lost `ch`: forget it and tell our host.
    fn remote_closed(&self, ch: u64, code: CloseCode, detail: &str) {
        let known = self.remove(ch).is_some();
        if known {
            if let Some(_e) = self.enter() {
                self.host.channel_closed(ch, code, detail);
            }
        }
    }
}

/// Splits an address into process id and endpoint id.
fn parse_address(address: &[u8]) -> Result<(u32, u64), TransportError> {
    let bad = || {
        TransportError::InvalidArgument(format!(
            "inproc address must be 12 bytes (pid, endpoint id), got {}",
            address.len()
        ))
    };
    let pid = address
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .ok_or_else(bad)?;
    let id = address
        .get(4..)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .ok_or_else(bad)?;
    Ok((u32::from_le_bytes(pid), u64::from_le_bytes(id)))
}

/// An in-process endpoint (the plugin's instance type).
pub struct InProcTransport {
    shared: Arc<Shared>,
}

impl TransportPlugin for InProcTransport {
    const NAME: &'static str = "inproc";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const CAPABILITIES: TransportCapabilities = TransportCapabilities::RELIABLE
        .union(TransportCapabilities::FIFO)
        .union(TransportCapabilities::ZERO_COPY)
        .union(TransportCapabilities::IN_PROCESS);
    const PRIORITY: i32 = 100;

    fn create(_config: &str, host: HostSink) -> Result<Self, TransportError> {
        let id = NEXT_ENDPOINT.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            id,
            host,
            channels: Mutex::new(HashMap::new()),
            next_channel: AtomicU64::new(1),
            alive: std::sync::atomic::AtomicBool::new(true),
            gate: Gate::new(),
        });
        directory().lock().insert(id, Arc::downgrade(&shared));
        tracing::debug!(endpoint = id, "inproc endpoint created");
        Ok(InProcTransport { shared })
    }

    fn local_address(&self) -> Vec<u8> {
        // The process id makes an address from another process (published in a pool's
        // registry) fail fast, so negotiation moves on to a network transport.
        let mut a = std::process::id().to_le_bytes().to_vec();
        a.extend_from_slice(&self.shared.id.to_le_bytes());
        a
    }

    fn connect(&self, address: &[u8], _timeout: Duration) -> Result<u64, TransportError> {
        let (pid, id) = parse_address(address)?;
        if pid != std::process::id() {
            return Err(TransportError::Refused(format!(
                "inproc endpoint {id} lives in process {pid}, not in this one"
            )));
        }
        let target = directory()
            .lock()
            .get(&id)
            .and_then(Weak::upgrade)
            .filter(|t| t.alive.load(Ordering::Acquire))
            .ok_or_else(|| TransportError::Refused(format!("no inproc endpoint {id}")))?;
        // Reserve our side first so the peer can answer as soon as it hears of the channel.
        let ours = self.shared.next_channel.fetch_add(1, Ordering::Relaxed);
        let theirs = target.add_channel(Peer::new(Arc::downgrade(&self.shared), ours));
        self.shared
            .channels
            .lock()
            .insert(ours, Peer::new(Arc::downgrade(&target), theirs));
        match target.enter() {
            Some(_e) => target.host.channel_opened(theirs),
            None => {
                self.shared.remove(ours);
                return Err(TransportError::Refused(format!(
                    "inproc endpoint {id} is closing"
                )));
            }
        }
        Ok(ours)
    }

    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        self.shared
            .peer(channel)
            .ok_or_else(|| TransportError::Closed(format!("no channel {channel}")))?
            .deliver(slices)
    }

    /// The channel's far end, held: a send checks a flag instead of the table's lock.
    fn fast_path(&self, channel: u64) -> Option<Box<dyn FastChannel>> {
        let peer = self.shared.peer(channel)?;
        Some(Box::new(InProcFast { channel, peer }))
    }

    fn close_channel(&self, channel: u64) {
        let peer = self.shared.remove(channel);
        if let Some(peer) = peer {
            if let Some(t) = peer.endpoint.upgrade() {
                t.remote_closed(peer.channel, CloseCode::CLOSED_BY_PEER, "closed by peer");
            }
        }
    }

    fn shutdown(&self) {
        self.shared.close_gate();
        directory().lock().remove(&self.shared.id);
        let channels: Vec<Peer> = self
            .shared
            .channels
            .lock()
            .drain()
            .map(|(_, p)| p)
            .collect();
        for peer in channels {
            peer.closed();
            if let Some(t) = peer.endpoint.upgrade() {
                t.remote_closed(peer.channel, CloseCode::LOST, "peer endpoint destroyed");
            }
        }
        tracing::debug!(endpoint = self.shared.id, "inproc endpoint destroyed");
    }
}

/// One channel's fast path: its far end, found once.
struct InProcFast {
    channel: u64,
    peer: Peer,
}

impl FastChannel for InProcFast {
    fn send(&self, slices: &[&[u8]]) -> Result<(), TransportError> {
        if !self.peer.open.load(Ordering::Acquire) {
            return Err(TransportError::Closed(format!(
                "no channel {}",
                self.channel
            )));
        }
        self.peer.deliver(slices)
    }

    /// inproc delivers every message through the host's callback: nothing to take.
    fn take(&self, _sink: &mut ChannelSink<'_>) -> usize {
        0
    }
}
