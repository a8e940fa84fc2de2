//! The host side: a validated plugin, a live transport instance, and received buffers.

use std::ffi::c_void;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crate::capabilities::TransportCapabilities;
use crate::error::{LoadError, TransportError};
use crate::ffi::{
    CloseCode, HostCallbacks, OutBuf, PluginDescriptor, RawBuffer, RawFastPath, RawSlice, Status,
    TakeSink, ABI_MAGIC, ABI_VERSION,
};

/// Why a channel closed, as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelClosed {
    /// The peer closed it in an orderly way.
    ByPeer,
    /// It was lost (the peer vanished, the network failed), with the transport's reason.
    Lost(String),
    /// The local transport shut down.
    Locally,
}

impl ChannelClosed {
    /// The close code and detail that report this through a
    /// [`HostSink`](crate::HostSink) (a stacking transport passes its inner
    /// transport's closes on).
    pub fn code(&self) -> (CloseCode, &str) {
        match self {
            ChannelClosed::ByPeer => (CloseCode::CLOSED_BY_PEER, ""),
            ChannelClosed::Lost(why) => (CloseCode::LOST, why),
            ChannelClosed::Locally => (CloseCode::CLOSED_LOCALLY, ""),
        }
    }
}

/// The IPL's side of the callbacks: what a transport instance reports. Called from the
/// transport's threads; for one channel in order. Implementations must not block for
/// long.
pub trait TransportEvents: Send + Sync + 'static {
    /// A peer opened `channel` to us.
    fn channel_opened(&self, channel: u64);
    /// A message arrived on `channel`.
    fn message(&self, channel: u64, buf: ReceivedBuffer);
    /// `channel` closed or was lost; it is not named again.
    fn channel_closed(&self, channel: u64, why: ChannelClosed);
}

/// A message as the transport delivered it: the bytes stay in the transport's memory
/// (a shared-memory ring, a registered RDMA region, or a heap buffer) until this value
/// is dropped, which gives them back.
pub struct ReceivedBuffer {
    raw: RawBuffer,
}

// SAFETY: the ABI requires that the buffer's bytes stay valid and unchanged until release,
// and that `release` may be called from any thread; so the value may move between threads
// and be read from several.
unsafe impl Send for ReceivedBuffer {}
// SAFETY: as above; the bytes are immutable while we hold them.
unsafe impl Sync for ReceivedBuffer {}

impl ReceivedBuffer {
    /// Takes ownership of a raw buffer from a plugin.
    ///
    /// # Safety
    /// `raw` must satisfy the [`RawBuffer`] contract and not be released by anyone else.
    pub unsafe fn from_raw(raw: RawBuffer) -> Self {
        ReceivedBuffer { raw }
    }

    /// The message bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the plugin guarantees data..data+len valid until release, which only
        // our Drop calls.
        unsafe {
            RawSlice {
                ptr: self.raw.data,
                len: self.raw.len,
            }
            .as_slice()
        }
    }
}

impl std::ops::Deref for ReceivedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for ReceivedBuffer {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for ReceivedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReceivedBuffer({} bytes)", self.raw.len)
    }
}

impl From<ReceivedBuffer> for crate::PluginBuffer {
    /// Passes a received message on unchanged, as a message of this plugin: a stacking
    /// transport forwards what its inner transport delivered, without a copy.
    fn from(buf: ReceivedBuffer) -> Self {
        let buf = std::mem::ManuallyDrop::new(buf);
        let raw = RawBuffer { ..buf.raw };
        // SAFETY: a ReceivedBuffer holds a buffer obeying the RawBuffer contract that
        // nobody else releases; ManuallyDrop hands its one release over unused.
        unsafe { crate::PluginBuffer::from_raw(raw) }
    }
}

/// A plugin's buffer received without crossing the ABI: the IPL's `fuzzing` feature
/// builds messages from bytes with it. Only with the feature `fuzzing`.
#[cfg(feature = "fuzzing")]
impl From<crate::PluginBuffer> for ReceivedBuffer {
    fn from(buf: crate::PluginBuffer) -> Self {
        // SAFETY: a PluginBuffer holds a buffer obeying the RawBuffer contract, and
        // into_raw hands over its one release, unused, to the new owner.
        unsafe { ReceivedBuffer::from_raw(buf.into_raw()) }
    }
}

impl Drop for ReceivedBuffer {
    fn drop(&mut self) {
        // SAFETY: release is called exactly once, here; the plugin promises it is valid
        // from any thread and after its instance was destroyed.
        unsafe { (self.raw.release)(self.raw.release_ctx) }
    }
}

/// A transport plugin whose descriptor passed validation: linked statically, or loaded
/// from a library (libraries are never unloaded, so the descriptor is `'static`).
#[derive(Clone)]
pub struct Plugin {
    desc: &'static PluginDescriptor,
    name: &'static str,
    version: &'static str,
    origin: Arc<str>,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("capabilities", &self.capabilities())
            .field("priority", &self.priority())
            .field("origin", &self.origin)
            .finish()
    }
}

fn static_str(origin: &str, what: &str, s: &RawSlice) -> Result<&'static str, LoadError> {
    if s.len > 4096 || (s.ptr.is_null() && s.len > 0) {
        return Err(LoadError::Malformed {
            origin: origin.to_string(),
            reason: format!("{what} string is invalid"),
        });
    }
    // SAFETY: the descriptor lives in static memory of a library that is never unloaded;
    // its strings are static too (ABI contract).
    let bytes: &'static [u8] = unsafe { s.as_slice() };
    std::str::from_utf8(bytes).map_err(|_| LoadError::Malformed {
        origin: origin.to_string(),
        reason: format!("{what} is not UTF-8"),
    })
}

impl Plugin {
    /// Validates a descriptor: magic number first, then ABI version, then the rest.
    ///
    /// # Safety
    /// `desc` must be null or point to memory that stays valid for the life of the
    /// process and is at least 12 bytes (magic and version); the rest is read only after
    /// magic and version match, as a [`PluginDescriptor`].
    pub unsafe fn from_raw(desc: *const PluginDescriptor, origin: &str) -> Result<Self, LoadError> {
        if desc.is_null() {
            return Err(LoadError::NullDescriptor {
                origin: origin.to_string(),
            });
        }
        // Read the header fields one at a time, unaligned, before trusting the layout.
        // SAFETY: only the field's address is computed (nothing is read); `desc` is not
        // null and points into memory of at least the header's size (the caller).
        let magic_at = unsafe { std::ptr::addr_of!((*desc).magic) };
        // SAFETY: the caller guarantees at least the magic and version are readable.
        let magic = unsafe { std::ptr::read_unaligned(magic_at) };
        if magic != ABI_MAGIC {
            return Err(LoadError::BadMagic {
                origin: origin.to_string(),
            });
        }
        // SAFETY: as for `magic_at`.
        let version_at = unsafe { std::ptr::addr_of!((*desc).abi_version) };
        // SAFETY: as for `magic`.
        let version = unsafe { std::ptr::read_unaligned(version_at) };
        if version != ABI_VERSION {
            return Err(LoadError::WrongAbiVersion {
                origin: origin.to_string(),
                found: version,
                expected: ABI_VERSION,
            });
        }
        // SAFETY: magic and version match, so this is a descriptor of our layout that
        // lives for the process (caller).
        let desc: &'static PluginDescriptor = unsafe { &*desc };
        if desc.descriptor_size as usize != std::mem::size_of::<PluginDescriptor>() {
            return Err(LoadError::Malformed {
                origin: origin.to_string(),
                reason: format!(
                    "descriptor size {} != {}",
                    desc.descriptor_size,
                    std::mem::size_of::<PluginDescriptor>()
                ),
            });
        }
        let name = static_str(origin, "name", &desc.name)?;
        let version = static_str(origin, "version", &desc.version)?;
        if name.is_empty() {
            return Err(LoadError::Malformed {
                origin: origin.to_string(),
                reason: "empty name".into(),
            });
        }
        Ok(Plugin {
            desc,
            name,
            version,
            origin: origin.into(),
        })
    }

    /// Uses a statically linked descriptor (declared with
    /// [`declare_plugin!`](crate::declare_plugin)).
    pub fn from_static(desc: &'static PluginDescriptor) -> Result<Self, LoadError> {
        // SAFETY: a &'static reference is valid for the life of the process.
        unsafe { Self::from_raw(desc, &format!("static:{}", describe_static(desc))) }
    }

    /// The transport's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The plugin's version.
    pub fn version(&self) -> &'static str {
        self.version
    }

    /// Where the plugin came from (a file path, or `static:NAME`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// What the transport provides.
    pub fn capabilities(&self) -> TransportCapabilities {
        TransportCapabilities(self.desc.capabilities)
    }

    /// Rank among plugins (higher wins).
    pub fn priority(&self) -> i32 {
        self.desc.priority
    }

    /// Whether the transport can run here; `Err` holds the plugin's reason.
    pub fn availability(&self) -> Result<(), String> {
        let mut buf = [0u8; 512];
        let mut out = OutBuf {
            ptr: buf.as_mut_ptr(),
            cap: buf.len(),
            len: 0,
        };
        // SAFETY: the vtable comes from a validated descriptor; `out` is valid for the call.
        let st = guard_call(|| unsafe { (self.desc.vtable.availability)(&mut out) });
        if st == Status::OK {
            Ok(())
        } else {
            Err(out_message(&buf, &out, st))
        }
    }

    /// Creates a transport instance (an endpoint) whose events go to `events`.
    pub fn create(
        &self,
        config: &str,
        events: Arc<dyn TransportEvents>,
    ) -> Result<TransportInstance, TransportError> {
        let (ctx, host) = EventsCtx::new(events);
        let mut inst: *mut c_void = std::ptr::null_mut();
        let mut buf = [0u8; 512];
        let mut err = OutBuf {
            ptr: buf.as_mut_ptr(),
            cap: buf.len(),
            len: 0,
        };
        let cfg = RawSlice::from_slice(config.as_bytes());
        // SAFETY: validated vtable; all pointers valid for the call; ctx lives until the
        // instance is destroyed (TransportInstance drops it after destroy).
        let st =
            guard_call(|| unsafe { (self.desc.vtable.create)(cfg, host, &mut inst, &mut err) });
        if st != Status::OK || inst.is_null() {
            // The plugin failed, so it holds no reference to ctx: dropped here.
            drop(ctx);
            let st = if st == Status::OK { Status::ERROR } else { st };
            return Err(TransportError::from_status(st, out_message(&buf, &err, st)));
        }
        Ok(TransportInstance {
            plugin: self.clone(),
            inst,
            _ctx: ctx,
        })
    }
}

fn describe_static(desc: &'static PluginDescriptor) -> String {
    if desc.magic == ABI_MAGIC && desc.abi_version == ABI_VERSION {
        static_str("static", "name", &desc.name)
            .unwrap_or("?")
            .to_string()
    } else {
        "?".to_string()
    }
}

/// Calls a plugin's send (`call(slices, n, err)`) with `slices` as RawSlices (on the
/// stack for up to eight) and an error buffer, and turns its status into a result.
fn send_with(
    slices: &[&[u8]],
    call: impl FnOnce(*const RawSlice, usize, *mut OutBuf) -> Status,
) -> Result<(), TransportError> {
    const INLINE: usize = 8;
    // Not initialised beyond the slices: the plugin reads only the first `n`.
    let mut inline = [std::mem::MaybeUninit::<RawSlice>::uninit(); INLINE];
    let heap: Vec<RawSlice>;
    let (ptr, n): (*const RawSlice, usize) = if slices.len() <= INLINE {
        for (d, s) in inline.iter_mut().zip(slices) {
            d.write(RawSlice::from_slice(s));
        }
        (inline.as_ptr().cast(), slices.len())
    } else {
        heap = slices.iter().map(|s| RawSlice::from_slice(s)).collect();
        (heap.as_ptr(), heap.len())
    };
    // Not zeroed: a send is hot, and only a failed one reads the buffer.
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 256];
    let mut err = OutBuf {
        ptr: buf.as_mut_ptr().cast(),
        cap: buf.len(),
        len: 0,
    };
    let st = guard_call(|| call(ptr, n, &mut err));
    if st == Status::OK {
        Ok(())
    } else {
        let n = err.len.min(buf.len());
        // SAFETY: the plugin wrote the first min(len, cap) bytes of the buffer (the
        // OutBuf contract, kept by the trampolines of `plugin.rs`), the same trust
        // the host gives the bytes of a RawBuffer; `n` is within the array.
        let written = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        Err(TransportError::from_status(
            st,
            out_message(written, &err, st),
        ))
    }
}

/// Calls a plugin's take (`call(sink)`) with `accept` behind the sink.
fn take_with<F: FnMut(ReceivedBuffer)>(
    mut accept: F,
    call: impl FnOnce(TakeSink) -> usize,
) -> usize {
    unsafe extern "C" fn hand<F: FnMut(ReceivedBuffer)>(ctx: *mut c_void, buf: RawBuffer) {
        // SAFETY: the plugin hands over a buffer obeying the RawBuffer contract.
        let buf = unsafe { ReceivedBuffer::from_raw(buf) };
        // SAFETY: ctx is the `&mut F` made below, alive for the whole take call,
        // within which the plugin calls this (ABI contract), on the same thread.
        let f = unsafe { &mut *ctx.cast::<F>() };
        let _ = catch_unwind(AssertUnwindSafe(|| f(buf)));
    }
    call(TakeSink {
        ctx: (&mut accept as *mut F).cast(),
        accept: hand::<F>,
    })
}

/// One channel's fast path ([`TransportInstance::fast_path`]): its send and take,
/// called directly. Released when dropped.
#[derive(Debug)]
pub struct FastPath {
    raw: RawFastPath,
}

// SAFETY: the ABI contract of RawFastPath: the context may be used from any thread,
// concurrently, until it is released (once, by Drop).
unsafe impl Send for FastPath {}
// SAFETY: as above.
unsafe impl Sync for FastPath {}

impl FastPath {
    /// As [`TransportInstance::send`] on the channel.
    pub fn send(&self, slices: &[&[u8]]) -> Result<(), TransportError> {
        // SAFETY: the context is live until drop; the slices are valid for the call.
        send_with(slices, |raw, n, err| unsafe {
            (self.raw.send)(self.raw.ctx, raw, n, err)
        })
    }

    /// As [`TransportInstance::take`] on the channel.
    pub fn take<F: FnMut(ReceivedBuffer)>(&self, accept: F) -> usize {
        // SAFETY: the context is live until drop; the sink's context outlives the call;
        // the trampoline catches panics inside the plugin, `hand` those of `accept`.
        take_with(accept, |sink| unsafe {
            (self.raw.take)(self.raw.ctx, sink)
        })
    }
}

impl Drop for FastPath {
    fn drop(&mut self) {
        let _ = guard_call(|| {
            // SAFETY: released exactly once, here; nothing uses the context after.
            unsafe { (self.raw.release)(self.raw.ctx) };
            Status::OK
        });
    }
}

fn guard_call<F: FnOnce() -> Status>(f: F) -> Status {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Status::PANIC)
}

fn out_message(buf: &[u8], out: &OutBuf, st: Status) -> String {
    let n = out.len.min(buf.len());
    let s = String::from_utf8_lossy(&buf[..n]).into_owned();
    if s.is_empty() {
        format!("status {}", st.0)
    } else {
        s
    }
}

/// The context behind [`HostCallbacks::ctx`]: the host's events, boxed so that a thin
/// pointer reaches them. Whoever holds it must drop it only when the plugin can make no
/// further callback (after `destroy`, or with the [`HostSink`](crate::HostSink) that
/// holds it).
pub(crate) struct EventsCtx(*const Arc<dyn TransportEvents>);

// SAFETY: it owns a Box<Arc<dyn TransportEvents>>, which is Send (the events are Send +
// Sync); the raw pointer is only there so that the plugin may alias it.
unsafe impl Send for EventsCtx {}
// SAFETY: as above; `&EventsCtx` gives access to nothing.
unsafe impl Sync for EventsCtx {}

impl EventsCtx {
    /// The context and the callbacks that reach `events` through it.
    pub(crate) fn new(events: Arc<dyn TransportEvents>) -> (Self, HostCallbacks) {
        let ctx: *const Arc<dyn TransportEvents> = Box::into_raw(Box::new(events));
        let host = HostCallbacks {
            ctx: ctx.cast(),
            channel_opened: cb_channel_opened,
            message: cb_message,
            channel_closed: cb_channel_closed,
        };
        (EventsCtx(ctx), host)
    }
}

impl fmt::Debug for EventsCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventsCtx")
    }
}

impl Drop for EventsCtx {
    fn drop(&mut self) {
        // SAFETY: the pointer came from Box::into_raw in `new` and is reclaimed once,
        // here; the owner drops this only when no callback can use it (see the type).
        drop(unsafe { Box::from_raw(self.0.cast_mut()) });
    }
}

/// Recovers the host's context from the pointer given to the plugin.
///
/// # Safety
/// `ctx` must be the pointer of a live [`EventsCtx`].
unsafe fn events<'a>(ctx: *const c_void) -> &'a Arc<dyn TransportEvents> {
    // SAFETY: ctx is the Box<Arc<dyn TransportEvents>> pointer of a live EventsCtx,
    // which its owner keeps until no callback can come (the caller's contract).
    unsafe { &*ctx.cast::<Arc<dyn TransportEvents>>() }
}

unsafe extern "C" fn cb_channel_opened(ctx: *const c_void, channel: u64) {
    // SAFETY: ctx is our live context (ABI contract).
    let ev = unsafe { events(ctx) };
    let _ = catch_unwind(AssertUnwindSafe(|| ev.channel_opened(channel)));
}

unsafe extern "C" fn cb_message(ctx: *const c_void, channel: u64, buf: RawBuffer) {
    // SAFETY: the plugin hands us ownership of a buffer obeying the RawBuffer contract.
    let buf = unsafe { ReceivedBuffer::from_raw(buf) };
    // SAFETY: ctx is our live context (ABI contract).
    let ev = unsafe { events(ctx) };
    let _ = catch_unwind(AssertUnwindSafe(|| ev.message(channel, buf)));
}

unsafe extern "C" fn cb_channel_closed(
    ctx: *const c_void,
    channel: u64,
    code: CloseCode,
    detail: RawSlice,
) {
    // SAFETY: detail is valid for the duration of the callback (ABI contract).
    let detail = String::from_utf8_lossy(unsafe { detail.as_slice() }).into_owned();
    let why = match code {
        CloseCode::CLOSED_BY_PEER => ChannelClosed::ByPeer,
        CloseCode::CLOSED_LOCALLY => ChannelClosed::Locally,
        _ => ChannelClosed::Lost(detail),
    };
    // SAFETY: ctx is our live context (ABI contract).
    let ev = unsafe { events(ctx) };
    let _ = catch_unwind(AssertUnwindSafe(|| ev.channel_closed(channel, why)));
}

/// A live endpoint of a transport plugin. Dropping it destroys the endpoint: every
/// channel is closed (peers see them lost) and no callback follows.
pub struct TransportInstance {
    plugin: Plugin,
    inst: *mut c_void,
    /// Dropped after `destroy` (in `drop`), when no callback can use it any more.
    _ctx: EventsCtx,
}

// SAFETY: the ABI requires every vtable function to be callable concurrently from any
// thread with the same instance pointer.
unsafe impl Send for TransportInstance {}
// SAFETY: as above.
unsafe impl Sync for TransportInstance {}

impl fmt::Debug for TransportInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportInstance")
            .field("plugin", &self.plugin.name)
            .finish()
    }
}

impl TransportInstance {
    /// The plugin this instance belongs to.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// The endpoint's address, to publish in the registry.
    pub fn local_address(&self) -> Result<Vec<u8>, TransportError> {
        let mut cap = 256usize;
        loop {
            let mut buf = vec![0u8; cap];
            let mut out = OutBuf {
                ptr: buf.as_mut_ptr(),
                cap,
                len: 0,
            };
            // SAFETY: live instance; out valid for the call.
            let st = guard_call(|| unsafe {
                (self.plugin.desc.vtable.local_address)(self.inst, &mut out)
            });
            match st {
                Status::OK => {
                    buf.truncate(out.len.min(cap));
                    return Ok(buf);
                }
                Status::BUFFER_TOO_SMALL if out.len > cap && out.len <= 1 << 16 => cap = out.len,
                st => {
                    return Err(TransportError::from_status(
                        st,
                        "local_address failed".to_string(),
                    ))
                }
            }
        }
    }

    /// Opens a channel to the endpoint at `address`.
    pub fn connect(&self, address: &[u8], timeout: Duration) -> Result<u64, TransportError> {
        let mut ch = 0u64;
        let mut buf = [0u8; 512];
        let mut err = OutBuf {
            ptr: buf.as_mut_ptr(),
            cap: buf.len(),
            len: 0,
        };
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let addr = RawSlice::from_slice(address);
        // SAFETY: live instance; address, ch and err valid for the call.
        let st = guard_call(|| unsafe {
            (self.plugin.desc.vtable.connect)(self.inst, addr, ms, &mut ch, &mut err)
        });
        if st == Status::OK {
            Ok(ch)
        } else {
            Err(TransportError::from_status(st, out_message(&buf, &err, st)))
        }
    }

    /// Sends one message, the concatenation of `slices`, on `channel`.
    pub fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        // SAFETY: live instance; the slices borrow `slices`, valid for the whole call.
        send_with(slices, |raw, n, err| unsafe {
            (self.plugin.desc.vtable.send)(self.inst, channel, raw, n, err)
        })
    }

    /// The fast path of `channel`, if the transport has one: to call for every
    /// message of the channel instead of [`send`](Self::send) and [`take`](Self::take).
    pub fn fast_path(&self, channel: u64) -> Option<FastPath> {
        let mut out = std::mem::MaybeUninit::<RawFastPath>::uninit();
        // SAFETY: live instance; `out` is valid for the plugin's write.
        let st = guard_call(|| unsafe {
            (self.plugin.desc.vtable.fast_path)(self.inst, channel, out.as_mut_ptr())
        });
        (st == Status::OK).then(|| FastPath {
            // SAFETY: the plugin wrote `out` when it returned OK (the ABI contract, kept
            // by the `fast_path` trampoline).
            raw: unsafe { out.assume_init() },
        })
    }

    /// Receiver-driven progress: lets the transport deliver what has arrived on this
    /// thread, without blocking; returns the number of messages delivered (0 for
    /// transports that deliver from threads of their own).
    pub fn progress(&self) -> usize {
        // SAFETY: live instance; the trampoline catches panics inside the plugin.
        unsafe { (self.plugin.desc.vtable.progress)(self.inst) }
    }

    /// Receiver-driven progress for a thread that waits on `channel`: as
    /// [`progress`](Self::progress), and the next message of `channel` may go to
    /// `accept` (on this thread, at most once) instead of through
    /// [`TransportEvents::message`]. As with a callback, every earlier message of
    /// `channel` was delivered before, and no later one is until `accept` returns.
    /// Returns the number of messages delivered, the one accepted included.
    pub fn take<F: FnMut(ReceivedBuffer)>(&self, channel: u64, accept: F) -> usize {
        // SAFETY: live instance; the sink's context outlives the call; the trampoline
        // catches panics inside the plugin and `hand` those of `accept`.
        take_with(accept, |sink| unsafe {
            (self.plugin.desc.vtable.take)(self.inst, channel, sink)
        })
    }

    /// Parks this thread until the transport may have something to deliver, or
    /// [`interrupt`](Self::interrupt) is called, or `timeout` passes (it may return
    /// early); delivers nothing itself. False (at once) when the transport does not
    /// support it: the caller must then sleep on its own.
    pub fn wait(&self, timeout: Duration) -> bool {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: live instance; the trampoline catches panics inside the plugin.
        unsafe { (self.plugin.desc.vtable.wait)(self.inst, ns) != 0 }
    }

    /// Makes every thread parked in [`wait`](Self::wait) return soon.
    pub fn interrupt(&self) {
        // SAFETY: live instance; the trampoline catches panics inside the plugin.
        unsafe { (self.plugin.desc.vtable.interrupt)(self.inst) }
    }

    /// Tells the transport that this thread stops calling [`progress`](Self::progress)
    /// in a loop (it is about to sleep).
    pub fn progress_end(&self) {
        // SAFETY: live instance; the trampoline catches panics inside the plugin.
        unsafe { (self.plugin.desc.vtable.progress_end)(self.inst) }
    }

    /// Closes `channel` in an orderly way.
    pub fn close_channel(&self, channel: u64) {
        let _ = guard_call(|| {
            // SAFETY: live instance; the trampoline catches panics inside the plugin.
            unsafe { (self.plugin.desc.vtable.close_channel)(self.inst, channel) };
            Status::OK
        });
    }
}

impl Drop for TransportInstance {
    fn drop(&mut self) {
        let _ = guard_call(|| {
            // SAFETY: the instance is live and destroyed exactly once, here.
            unsafe { (self.plugin.desc.vtable.destroy)(self.inst) };
            Status::OK
        });
        // `_ctx` is dropped after this: destroy has returned, so the plugin makes no
        // further callback and holds no reference to it (ABI contract).
    }
}
