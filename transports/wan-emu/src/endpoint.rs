//! The stacking endpoint: a wan-emu endpoint owns an endpoint of the inner transport,
//! holds inter-cluster messages back on the sending side, and passes everything else
//! through.

use std::collections::HashMap;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use ipl_transport_abi::ffi::{CloseCode, HostCallbacks, OutBuf, RawBuffer, RawSlice, Status};
use ipl_transport_abi::{
    Gate, HostSink, ReceivedBuffer, TransportCapabilities, TransportError, TransportPlugin,
};

use crate::address;
use crate::config::{WanConfig, ENV_VAR};
use crate::control::{self, lock, FileSource, LinkState, Links};
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
    inner: OnceLock<Box<T>>,
    channels: Mutex<HashMap<u64, Channel>>,
    emulation: Mutex<Emulation>,
    links: Arc<LinkState>,
    scheduler: OnceLock<Scheduler>,
}

impl<T: TransportPlugin> Core<T> {
    fn inner(&self) -> Result<&T, TransportError> {
        self.inner
            .get()
            .map(|b| &**b)
            .ok_or_else(|| TransportError::Closed("wan-emu endpoint is not ready".into()))
    }

    /// The inner transport opened a channel to us: wait for its hello.
    fn inner_opened(&self, ch: u64) {
        lock(&self.channels).insert(
            ch,
            Channel {
                peer: None,
                closing: false,
            },
        );
    }

    fn inner_message(&self, ch: u64, raw: RawBuffer) {
        let mut chans = lock(&self.channels);
        let peer_known = chans.get(&ch).map(|c| c.peer.is_some());
        if peer_known == Some(true) {
            drop(chans);
            match self.gate.enter() {
                // SAFETY: `raw` came from the inner transport, which promised the
                // RawBuffer contract (valid until released once, from any thread); its
                // ownership passes on to our host unchanged.
                Some(_e) => unsafe { self.host.message_raw(ch, raw) },
                // SAFETY: as above; released here, once, since nobody will read it.
                None => drop(unsafe { ReceivedBuffer::from_raw(raw) }),
            }
            return;
        }
        // SAFETY: as above; the wrapper releases the buffer once, when dropped below.
        let buf = unsafe { ReceivedBuffer::from_raw(raw) };
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
        let known = lock(&self.channels).remove(&ch);
        lock(&self.emulation).forget(ch);
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
        let known = lock(&self.channels).remove(&ch);
        lock(&self.emulation).forget(ch);
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
                lock(&self.emulation).on_released(ch);
                if let Err(e) = r {
                    self.lose(ch, &e);
                }
            }
            Action::Close => {
                lock(&self.channels).remove(&ch);
                lock(&self.emulation).forget(ch);
                inner.close_channel(ch);
            }
        }
    }
}

// ---- the inner transport's callbacks: `ctx` is an `Arc<Core<T>>` given to it ----

/// # Safety
/// `ctx` is the pointer made by `Arc::into_raw` in `WanEmu::create`, whose reference is
/// given back only after the inner transport's `shutdown` returned (so no callback runs).
unsafe fn core<'a, T: TransportPlugin>(ctx: *const c_void) -> &'a Core<T> {
    // SAFETY: per the contract above the Arc is alive for the whole callback.
    unsafe { &*ctx.cast::<Core<T>>() }
}

unsafe extern "C" fn cb_opened<T: TransportPlugin>(ctx: *const c_void, ch: u64) {
    // SAFETY: ctx is our live core (see `core`).
    let c = unsafe { core::<T>(ctx) };
    let _ = catch_unwind(AssertUnwindSafe(|| c.inner_opened(ch)));
}

unsafe extern "C" fn cb_message<T: TransportPlugin>(ctx: *const c_void, ch: u64, buf: RawBuffer) {
    // SAFETY: ctx is our live core (see `core`).
    let c = unsafe { core::<T>(ctx) };
    // The buffer (owned by us now, per the RawBuffer contract) is forwarded or released
    // by `inner_message`; a panic there would leak it, never free it twice.
    let _ = catch_unwind(AssertUnwindSafe(|| c.inner_message(ch, buf)));
}

unsafe extern "C" fn cb_closed<T: TransportPlugin>(
    ctx: *const c_void,
    ch: u64,
    code: CloseCode,
    detail: RawSlice,
) {
    // SAFETY: detail is valid for the duration of the callback (ABI contract).
    let detail = String::from_utf8_lossy(unsafe { detail.as_slice() }).into_owned();
    // SAFETY: ctx is our live core (see `core`).
    let c = unsafe { core::<T>(ctx) };
    let _ = catch_unwind(AssertUnwindSafe(|| c.inner_closed(ch, code, &detail)));
}

/// Creates the inner endpoint through its own ABI trampoline, which is the only way to
/// give it a [`HostSink`] whose callbacks reach us.
fn create_inner<T: TransportPlugin>(
    config: &str,
    ctx: *const Core<T>,
) -> Result<Box<T>, TransportError> {
    let callbacks = HostCallbacks {
        ctx: ctx.cast(),
        channel_opened: cb_opened::<T>,
        message: cb_message::<T>,
        channel_closed: cb_closed::<T>,
    };
    let mut out: *mut c_void = std::ptr::null_mut();
    let mut msg = [0u8; 512];
    let mut err = OutBuf {
        ptr: msg.as_mut_ptr(),
        cap: msg.len(),
        len: 0,
    };
    // SAFETY: the config slice, `out` and `err` are valid for the call; the callbacks are
    // thread-safe and `ctx` outlives the inner endpoint (released after its shutdown).
    let st = unsafe {
        ipl_transport_abi::plugin::create::<T>(
            RawSlice::from_slice(config.as_bytes()),
            callbacks,
            &mut out,
            &mut err,
        )
    };
    if st != Status::OK || out.is_null() {
        let n = err.len.min(msg.len());
        let detail = String::from_utf8_lossy(&msg[..n]).into_owned();
        return Err(TransportError::from_status(
            st,
            format!("inner transport {}: {detail}", T::NAME),
        ));
    }
    // SAFETY: on success the trampoline stored `Box::into_raw(Box<T>)` in `out`; we take
    // that box back once and own it from now on.
    Ok(unsafe { Box::from_raw(out.cast::<T>()) })
}

/// A wan-emu endpoint over an endpoint of the inner transport `T` (TCP in the plugin,
/// any transport for tests).
pub struct WanEmu<T: TransportPlugin> {
    core: Arc<Core<T>>,
    /// The strong reference lent to the inner transport as its callback context.
    ctx: *const Core<T>,
    address: Vec<u8>,
    stopped: AtomicBool,
    _inner: PhantomData<T>,
}

// SAFETY: `ctx` is only an Arc reference count we own (given back in Drop); everything
// else is Send + Sync (Core<T> is, as T: Send + Sync and the rest are locks and atomics).
unsafe impl<T: TransportPlugin> Send for WanEmu<T> {}
// SAFETY: as above; no method touches `ctx` except Drop.
unsafe impl<T: TransportPlugin> Sync for WanEmu<T> {}

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
        match lock(&self.core.channels).get(&ch) {
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
        let ctx = Arc::into_raw(core.clone());
        let inner = match create_inner::<T>(config, ctx) {
            Ok(i) => i,
            Err(e) => {
                // SAFETY: the inner endpoint was not created, so nobody holds `ctx`; this
                // gives back the reference made just above.
                drop(unsafe { Arc::from_raw(ctx) });
                return Err(e);
            }
        };
        let inner_address = inner.local_address();
        let _ = core.inner.set(inner);
        let target: Weak<dyn Release> = Arc::downgrade(&core) as Weak<dyn Release>;
        let wan = WanEmu {
            address: address::encode(&cfg.cluster, &inner_address),
            core,
            ctx,
            stopped: AtomicBool::new(false),
            _inner: PhantomData,
        };
        // From here on, dropping `wan` shuts the inner endpoint down and releases ctx.
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
        lock(&self.core.channels).insert(
            ch,
            Channel {
                peer: Some(Arc::from(peer)),
                closing: false,
            },
        );
        // The hello goes first and undelayed: connection set-up is not emulated.
        if let Err(e) = inner.send(ch, &[&address::hello(&self.core.cluster)]) {
            lock(&self.core.channels).remove(&ch);
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
        let decision = lock(&core.emulation).on_message(
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
            let mut chans = lock(&core.channels);
            match chans.get_mut(&channel) {
                Some(c) if !c.closing => c.closing = true,
                _ => return,
            }
        }
        let (_, since) = core.now();
        let decision = lock(&core.emulation).on_close(channel, since);
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
        // SAFETY: `ctx` came from Arc::into_raw in `create`, and the inner endpoint's
        // shutdown has returned, so it makes no further callback with it; given back once.
        drop(unsafe { Arc::from_raw(self.ctx) });
    }
}
