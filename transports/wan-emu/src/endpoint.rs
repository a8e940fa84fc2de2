//! The stacking endpoint: a wan-emu endpoint owns an endpoint of the inner transport,
//! holds inter-cluster messages back on the sending side, and passes everything else
//! through.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::{
    ChannelClosed, HostSink, ReceivedBuffer, TransportCapabilities, TransportError,
    TransportEvents, TransportPlugin,
};
use ipl_transport_kit::Gate;
use parking_lot::Mutex;

use crate::address;
use crate::config::{WanConfig, ENV_VAR};
use crate::control::{self, FileSource, LinkState, Links};
use crate::emulation::{Delivery, Emulation};
use crate::scheduler::{Action, Release, Scheduler};

/// The origin of the emulation's time axis (durations since it).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// What the endpoint knows of a channel.
#[derive(Debug)]
struct Channel {
    /// The peer's cluster; `None` on the accepting side until the hello arrived.
    peer: Option<Arc<str>>,
    /// Closed locally: sends fail, the close is held or done.
    closing: bool,
}

/// Everything shared by the endpoint, the inner transport's callbacks and the scheduler.
struct Core<T: TransportPlugin> {
    cluster: String,
    host: HostSink,
    /// Host callbacks run inside this gate; `shutdown` closes it.
    gate: Gate,
    inner: OnceLock<T>,
    channels: Mutex<HashMap<u64, Channel>>,
    emulation: Mutex<Emulation>,
    links: Arc<LinkState>,
    scheduler: OnceLock<Scheduler>,
}

impl<T: TransportPlugin> Core<T> {
    fn inner(&self) -> Result<&T, TransportError> {
        self.inner
            .get()
            .ok_or_else(|| TransportError::Closed("wan-emu endpoint is not ready".into()))
    }

    /// The inner transport opened a channel to us: wait for its hello.
    fn inner_opened(&self, ch: u64) {
        self.channels.lock().insert(
            ch,
            Channel {
                peer: None,
                closing: false,
            },
        );
    }

    fn inner_message(&self, ch: u64, buf: ReceivedBuffer) {
        let mut chans = self.channels.lock();
        let peer_known = chans.get(&ch).map(|c| c.peer.is_some());
        if peer_known == Some(true) {
            drop(chans);
            // Passed on in place; released here if our host is gone.
            if let Some(_e) = self.gate.enter() {
                self.host.message(ch, buf.into());
            }
            return;
        }
        if peer_known.is_none() {
            tracing::debug!(
                channel = ch,
                "wan-emu: message on an unknown channel dropped"
            );
            return;
        }
        match address::parse_hello(&buf) {
            Ok(cluster) => {
                tracing::debug!(channel = ch, peer = cluster, "wan-emu: channel opened");
                if let Some(c) = chans.get_mut(&ch) {
                    c.peer = Some(Arc::from(cluster));
                }
                drop(chans);
                if let Some(_e) = self.gate.enter() {
                    self.host.channel_opened(ch);
                }
            }
            Err(why) => {
                chans.remove(&ch);
                drop(chans);
                tracing::warn!(channel = ch, %why, "wan-emu: channel refused");
                if let Ok(inner) = self.inner() {
                    inner.close_channel(ch);
                }
            }
        }
    }

    fn inner_closed(&self, ch: u64, code: CloseCode, detail: &str) {
        let known = self.channels.lock().remove(&ch);
        self.emulation.lock().forget(ch);
        if let Some(c) = known {
            if c.peer.is_some() {
                if let Some(_e) = self.gate.enter() {
                    self.host.channel_closed(ch, code, detail);
                }
            }
        }
    }

    /// A delayed send failed: the channel cannot stay reliable, so it is lost.
    fn lose(&self, ch: u64, e: &TransportError) {
        let known = self.channels.lock().remove(&ch);
        self.emulation.lock().forget(ch);
        if known.is_some() {
            tracing::warn!(channel = ch, error = %e, "wan-emu: delayed send failed; channel lost");
            if let Ok(inner) = self.inner() {
                inner.close_channel(ch);
            }
            if let Some(_e) = self.gate.enter() {
                let detail = format!("wan-emu: delayed send failed: {e}");
                self.host.channel_closed(ch, CloseCode::LOST, &detail);
            }
        }
    }

    fn now(&self) -> (Instant, Duration) {
        let now = Instant::now();
        (now, now.saturating_duration_since(epoch()))
    }
}

impl<T: TransportPlugin> Release for Core<T> {
    fn release(&self, ch: u64, action: Action) {
        let Ok(inner) = self.inner() else { return };
        match action {
            Action::Send(data) => {
                let r = inner.send(ch, &[&data]);
                self.emulation.lock().on_released(ch);
                if let Err(e) = r {
                    self.lose(ch, &e);
                }
            }
            Action::Close => {
                self.channels.lock().remove(&ch);
                self.emulation.lock().forget(ch);
                inner.close_channel(ch);
            }
        }
    }
}

/// The host of the inner endpoint: its events go to the core while the core lives.
struct InnerEvents<T: TransportPlugin>(Weak<Core<T>>);

impl<T: TransportPlugin> TransportEvents for InnerEvents<T> {
    fn channel_opened(&self, ch: u64) {
        if let Some(core) = self.0.upgrade() {
            core.inner_opened(ch);
        }
    }

    fn message(&self, ch: u64, buf: ReceivedBuffer) {
        if let Some(core) = self.0.upgrade() {
            core.inner_message(ch, buf);
        }
    }

    fn channel_closed(&self, ch: u64, why: ChannelClosed) {
        if let Some(core) = self.0.upgrade() {
            let (code, detail) = why.code();
            core.inner_closed(ch, code, detail);
        }
    }
}

/// A wan-emu endpoint over an endpoint of the inner transport `T` (TCP in the plugin,
/// any transport for tests).
pub struct WanEmu<T: TransportPlugin> {
    core: Arc<Core<T>>,
    address: Vec<u8>,
    stopped: AtomicBool,
}

impl<T: TransportPlugin> WanEmu<T> {
    /// The endpoint's link overrides (above the process-wide ones of [`crate::links`]).
    pub fn overrides(&self) -> Links {
        self.core.links.own.clone()
    }

    /// The endpoint's cluster.
    pub fn cluster(&self) -> &str {
        &self.core.cluster
    }

    fn channel_peer(&self, ch: u64) -> Result<Arc<str>, TransportError> {
        match self.core.channels.lock().get(&ch) {
            Some(Channel {
                peer: Some(p),
                closing: false,
            }) => Ok(p.clone()),
            _ => Err(TransportError::Closed(format!("no channel {ch}"))),
        }
    }
}

impl<T: TransportPlugin> TransportPlugin for WanEmu<T> {
    const NAME: &'static str = "wan-emu";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const CAPABILITIES: TransportCapabilities = T::CAPABILITIES;
    const PRIORITY: i32 = 0;

    fn availability() -> Result<(), String> {
        T::availability().map_err(|e| format!("inner transport {}: {e}", T::NAME))
    }

    fn create(config: &str, host: HostSink) -> Result<Self, TransportError> {
        let env = std::env::var(ENV_VAR).ok();
        let cfg = WanConfig::parse(config, env.as_deref())
            .map_err(|e| TransportError::InvalidArgument(e.to_string()))?;
        let file = match &cfg.file {
            Some(p) => Some(Mutex::new(
                FileSource::open(p, Instant::now())
                    .map_err(|e| TransportError::InvalidArgument(e.to_string()))?,
            )),
            None => None,
        };
        let links = Arc::new(LinkState {
            cluster: cfg.cluster.clone(),
            own: Links::default(),
            global: control::links(),
            file,
            base: cfg.table.clone(),
        });
        epoch();
        let core = Arc::new(Core {
            cluster: cfg.cluster.clone(),
            host,
            gate: Gate::new(),
            inner: OnceLock::new(),
            channels: Mutex::new(HashMap::new()),
            emulation: Mutex::new(Emulation::new(cfg.cluster.clone())),
            links,
            scheduler: OnceLock::new(),
        });
        // The inner endpoint's host holds the core weakly: the core owns the endpoint.
        let events = Arc::new(InnerEvents(Arc::downgrade(&core)));
        let inner = T::create(config, HostSink::from_events(events)).map_err(|e| {
            TransportError::from_status(
                e.status(),
                format!("inner transport {}: {}", T::NAME, e.detail()),
            )
        })?;
        let inner_address = inner.local_address();
        let _ = core.inner.set(inner);
        let target: Weak<dyn Release> = Arc::downgrade(&core) as Weak<dyn Release>;
        let wan = WanEmu {
            address: address::encode(&cfg.cluster, &inner_address),
            core,
            stopped: AtomicBool::new(false),
        };
        // From here on, dropping `wan` shuts the inner endpoint down.
        let sched = Scheduler::start(&cfg.cluster, cfg.max_queued, target)?;
        let _ = wan.core.scheduler.set(sched);
        control::register(wan.address.clone(), &wan.core.links);
        tracing::debug!(cluster = %cfg.cluster, inner = T::NAME, "wan-emu endpoint created");
        Ok(wan)
    }

    fn local_address(&self) -> Vec<u8> {
        self.address.clone()
    }

    fn connect(&self, address: &[u8], timeout: Duration) -> Result<u64, TransportError> {
        let (peer, inner_addr) = address::parse(address)?;
        let inner = self.core.inner()?;
        let ch = inner.connect(inner_addr, timeout)?;
        self.core.channels.lock().insert(
            ch,
            Channel {
                peer: Some(Arc::from(peer)),
                closing: false,
            },
        );
        // The hello goes first and undelayed: connection set-up is not emulated.
        if let Err(e) = inner.send(ch, &[&address::hello(&self.core.cluster)]) {
            self.core.channels.lock().remove(&ch);
            inner.close_channel(ch);
            return Err(e);
        }
        Ok(ch)
    }

    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        let peer = self.channel_peer(channel)?;
        let core = &self.core;
        let size: usize = slices.iter().map(|s| s.len()).sum();
        let (now, since) = core.now();
        let link = core.links.lookup(&peer, now);
        let decision = core.emulation.lock().on_message(
            channel,
            &peer,
            link.as_ref(),
            since,
            u64::try_from(size).unwrap_or(u64::MAX),
        );
        match decision {
            Delivery::Now => core.inner()?.send(channel, slices),
            Delivery::At(at) => {
                let mut data = Vec::with_capacity(size);
                for s in slices {
                    data.extend_from_slice(s);
                }
                let sched = core
                    .scheduler
                    .get()
                    .ok_or_else(|| TransportError::Closed("wan-emu endpoint is closed".into()))?;
                sched.push(epoch() + at, channel, Action::Send(data))
            }
        }
    }

    fn close_channel(&self, channel: u64) {
        let core = &self.core;
        {
            let mut chans = core.channels.lock();
            match chans.get_mut(&channel) {
                Some(c) if !c.closing => c.closing = true,
                _ => return,
            }
        }
        let (_, since) = core.now();
        let decision = core.emulation.lock().on_close(channel, since);
        let held = match (decision, core.scheduler.get()) {
            (Delivery::At(at), Some(s)) => s.push(epoch() + at, channel, Action::Close).is_ok(),
            _ => false,
        };
        if !held {
            core.release(channel, Action::Close);
        }
    }

    fn progress(&self) -> usize {
        self.core.inner().map_or(0, |i| i.progress())
    }

    /// Passed on, so that an inner transport whose own threads stand back while
    /// receivers poll (tcp's poll lease) delivers again at once, not after its lease.
    fn progress_end(&self) {
        if let Ok(i) = self.core.inner() {
            i.progress_end();
        }
    }

    fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        // No host callback after this returns; held messages are dropped (the peers see
        // the channels lost when the inner endpoint goes).
        self.core.gate.close();
        if let Some(s) = self.core.scheduler.get() {
            s.stop();
        }
        if let Ok(inner) = self.core.inner() {
            inner.shutdown();
        }
        control::unregister(&self.address);
        tracing::debug!(cluster = %self.core.cluster, "wan-emu endpoint destroyed");
    }
}

impl<T: TransportPlugin> Drop for WanEmu<T> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
