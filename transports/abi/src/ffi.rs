//! The raw `#[repr(C)]` types of the plugin ABI.
//!
//! Everything here crosses the boundary between the IPL (the host) and a transport
//! plugin, which may have been built by another compiler version. Only C types cross:
//! integers, raw pointers, and `extern "C"` function pointers. Rust trait objects,
//! `Vec`, `String` and tokio types never do.
//!
//! Most users never touch this module: plugin authors implement
//! [`TransportPlugin`](crate::TransportPlugin) and use [`declare_plugin!`](crate::declare_plugin);
//! the IPL uses [`Plugin`](crate::Plugin) and [`TransportInstance`](crate::TransportInstance).

use std::ffi::c_void;

/// The ABI version this crate speaks. A plugin whose descriptor carries another version
/// is refused by the loader before any of its functions is called. Version 7 changed no
/// layout, only a contract: a transport may keep a channel's fast-path messages for the
/// thread that took from it until `progress_end` or `wait` (see
/// [`TransportVTable::progress_end`]), which a host of version 6 does not call on every
/// path that needs it.
pub const ABI_VERSION: u32 = 7;

/// The magic number at the start of every [`PluginDescriptor`] ("IPL_TRNS"), so that a
/// library exporting an unrelated symbol of the same name is recognised as not a plugin.
pub const ABI_MAGIC: u64 = 0x4950_4c5f_5452_4e53;

/// The name of the symbol a plugin library exports: an `extern "C" fn() -> *const
/// PluginDescriptor`.
pub const ENTRY_SYMBOL: &str = "ipl_transport_plugin";

/// The type of the entry symbol.
pub type EntryFn = unsafe extern "C" fn() -> *const PluginDescriptor;

/// A borrowed byte string: pointer and length. `ptr` may be dangling when `len == 0`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawSlice {
    /// First byte.
    pub ptr: *const u8,
    /// Number of bytes.
    pub len: usize,
}

impl RawSlice {
    /// Borrows a Rust slice for the duration of a call.
    pub const fn from_slice(s: &[u8]) -> Self {
        RawSlice {
            ptr: s.as_ptr(),
            len: s.len(),
        }
    }

    /// Views the bytes again as a Rust slice.
    ///
    /// # Safety
    /// `ptr` must point to `len` initialised bytes that stay valid and unmodified for `'a`
    /// (or `len` must be 0).
    pub unsafe fn as_slice<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            &[]
        } else {
            // SAFETY: the caller guarantees that ptr..ptr+len is valid for 'a.
            unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
        }
    }
}

/// A host-owned output buffer that the plugin fills: it writes at most `cap` bytes at `ptr`
/// and stores the full length it wanted to write in `len` (which may exceed `cap`, in
/// which case the output was truncated; for addresses the call returns
/// [`Status::BUFFER_TOO_SMALL`] and the host retries with a larger buffer).
#[repr(C)]
#[derive(Debug)]
pub struct OutBuf {
    /// Start of the host's buffer.
    pub ptr: *mut u8,
    /// Capacity of the host's buffer.
    pub cap: usize,
    /// Bytes the plugin wanted to write.
    pub len: usize,
}

/// The result code of an ABI call. A plain integer, not a Rust enum, so that an unknown
/// value coming from a plugin is not undefined behaviour.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub i32);

impl Status {
    /// Success.
    pub const OK: Status = Status(0);
    /// A failure described by the error buffer.
    pub const ERROR: Status = Status(1);
    /// The operation did not complete in time.
    pub const TIMEOUT: Status = Status(2);
    /// The peer refused (nobody listens at the address, or the handshake failed).
    pub const REFUSED: Status = Status(3);
    /// The channel is closed or was lost.
    pub const CLOSED: Status = Status(4);
    /// The transport cannot run here (no device, no library); see the error buffer.
    pub const UNAVAILABLE: Status = Status(5);
    /// The output buffer was too small; `OutBuf::len` holds the size needed.
    pub const BUFFER_TOO_SMALL: Status = Status(6);
    /// The plugin panicked; the panic was caught at the boundary.
    pub const PANIC: Status = Status(7);
    /// An argument was malformed (e.g. an address that does not parse).
    pub const INVALID_ARGUMENT: Status = Status(8);
}

/// Why a channel closed, as reported by [`HostCallbacks::channel_closed`].
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CloseCode(pub u32);

impl CloseCode {
    /// The peer closed the channel in an orderly way.
    pub const CLOSED_BY_PEER: CloseCode = CloseCode(0);
    /// The channel was lost: the peer vanished or the network failed.
    pub const LOST: CloseCode = CloseCode(1);
    /// The local side closed it (the transport is shutting down).
    pub const CLOSED_LOCALLY: CloseCode = CloseCode(2);
}

/// Where [`TransportVTable::take`] hands the message it takes: the host's function
/// and its context, valid only during that call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TakeSink {
    /// The host's context, passed back to `accept`.
    pub ctx: *mut c_void,
    /// Receives the message; the host owns `buf` from then on, as a callback's buffer.
    pub accept: unsafe extern "C" fn(ctx: *mut c_void, buf: RawBuffer),
}

/// One channel's fast path (ABI version 6): the functions the host calls for every
/// message of that channel, resolved once ([`TransportVTable::fast_path`]) instead of
/// the channel being looked up on every call. `ctx` belongs to the plugin until the
/// host passes it to `release`, exactly once; until then `send` and `take` may be
/// called with it from any thread, concurrently, also after the channel closed or the
/// instance was destroyed (a send then fails, a take finds nothing).
#[repr(C)]
#[derive(Debug)]
pub struct RawFastPath {
    /// The plugin's context for the channel.
    pub ctx: *mut c_void,
    /// As [`TransportVTable::send`] on the channel.
    pub send: unsafe extern "C" fn(
        ctx: *mut c_void,
        slices: *const RawSlice,
        n: usize,
        err: *mut OutBuf,
    ) -> Status,
    /// As [`TransportVTable::take`] on the channel.
    pub take: unsafe extern "C" fn(ctx: *mut c_void, sink: TakeSink) -> usize,
    /// Frees the context.
    pub release: unsafe extern "C" fn(ctx: *mut c_void),
}

/// A received message handed from the plugin to the host. The bytes stay valid, and
/// unchanged, until the host calls `release(release_ctx)` exactly once, from any thread;
/// this is what lets shared-memory and RDMA transports deliver without copying.
#[repr(C)]
#[derive(Debug)]
pub struct RawBuffer {
    /// First byte of the message.
    pub data: *const u8,
    /// Length of the message.
    pub len: usize,
    /// Gives the buffer back to the plugin. Must be callable from any thread, and remain
    /// callable after the transport instance was destroyed.
    pub release: unsafe extern "C" fn(release_ctx: *mut c_void),
    /// The plugin's context for `release`.
    pub release_ctx: *mut c_void,
}

/// The host's callbacks, given to the plugin at `create`. The plugin calls them from any
/// of its threads, but for one channel in order (all `message` calls of a channel are
/// sequential and in the order the peer sent them). The host never blocks in them for
/// long, and the plugin must not hold a lock that `send`, `connect` or `close_channel`
/// need while it calls them (the host may send from inside a callback). No callback is
/// made after `destroy` has returned.
#[repr(C)]
#[derive(Debug)]
pub struct HostCallbacks {
    /// The host's context, passed back as the first argument of every callback.
    pub ctx: *const c_void,
    /// A peer opened a new channel to this instance.
    pub channel_opened: unsafe extern "C" fn(ctx: *const c_void, channel: u64),
    /// A message arrived on a channel. Ownership of the buffer passes to the host.
    pub message: unsafe extern "C" fn(ctx: *const c_void, channel: u64, buf: RawBuffer),
    /// A channel closed or was lost. No further callback names this channel.
    pub channel_closed:
        unsafe extern "C" fn(ctx: *const c_void, channel: u64, code: CloseCode, detail: RawSlice),
}

/// The functions of a transport plugin. All take the instance pointer returned by
/// `create` (except `availability` and `create`). All may be called concurrently from
/// several threads; every string is UTF-8.
#[repr(C)]
#[derive(Debug)]
pub struct TransportVTable {
    /// Whether the transport can run on this machine. On [`Status::UNAVAILABLE`] the
    /// reason is written to `err`.
    pub availability: unsafe extern "C" fn(err: *mut OutBuf) -> Status,
    /// Creates an instance (an endpoint that listens) from a UTF-8 configuration of
    /// `key=value` lines; stores it in `*out`.
    pub create: unsafe extern "C" fn(
        config: RawSlice,
        host: HostCallbacks,
        out: *mut *mut c_void,
        err: *mut OutBuf,
    ) -> Status,
    /// Destroys an instance: closes every channel (peers see them lost), stops every
    /// thread, and returns only when no callback can be running or be made any more.
    pub destroy: unsafe extern "C" fn(inst: *mut c_void),
    /// Writes the instance's address (opaque bytes others pass to `connect`) to `out`.
    pub local_address: unsafe extern "C" fn(inst: *mut c_void, out: *mut OutBuf) -> Status,
    /// Opens a channel to the instance at `address`, waiting at most `timeout_ms`; stores
    /// its id in `*channel`. The peer gets `channel_opened`.
    pub connect: unsafe extern "C" fn(
        inst: *mut c_void,
        address: RawSlice,
        timeout_ms: u64,
        channel: *mut u64,
        err: *mut OutBuf,
    ) -> Status,
    /// Sends one message: the concatenation of `n` slices. The slices are only borrowed
    /// for the duration of the call; the call returns once the transport no longer needs
    /// them (copied or written). Messages on one channel arrive in order.
    pub send: unsafe extern "C" fn(
        inst: *mut c_void,
        channel: u64,
        slices: *const RawSlice,
        n: usize,
        err: *mut OutBuf,
    ) -> Status,
    /// Closes a channel in an orderly way: messages already sent are still delivered; the
    /// peer then gets `channel_closed` with [`CloseCode::CLOSED_BY_PEER`].
    pub close_channel: unsafe extern "C" fn(inst: *mut c_void, channel: u64),
    /// Receiver-driven progress (ABI version 2): delivers, on the calling thread and
    /// without blocking, whatever messages have arrived, through the host callbacks;
    /// returns how many it delivered. The host calls it in a loop from a thread that
    /// waits for a message (the receive port's poll phase), so a transport that polls
    /// memory (shm, rdma) can deliver without waking a thread of its own. Transports that
    /// always deliver from their own threads return 0.
    pub progress: unsafe extern "C" fn(inst: *mut c_void) -> usize,
    /// The end of a poll phase (ABI version 3): a thread that called `progress` in a
    /// loop stops polling (it is about to sleep), so the transport's own threads must
    /// deliver again. Transports that do not rely on pollers ignore it. After a `take`
    /// on a channel (through its fast path), a transport may leave that channel's next
    /// messages sent through the fast path for the taking thread, without its own
    /// threads delivering them, until `progress_end` or `wait` is called: either then
    /// delivers what is there (shm does so).
    pub progress_end: unsafe extern "C" fn(inst: *mut c_void),
    /// Receiver-driven progress for a receiver that waits on one channel (ABI version
    /// 4): as `progress`, except that the next message of `channel` may go to
    /// `sink.accept` instead of the `message` callback, so that the waiting thread gets
    /// it without the callback's way through the host. `accept` is called at most once,
    /// on the calling thread, before `take` returns; like a callback, only after every
    /// earlier message of `channel` was delivered (and its callback returned), and
    /// before any later one can be. Returns the number of messages delivered, through
    /// the callback or the sink. A transport without such a path runs `progress`.
    pub take: unsafe extern "C" fn(inst: *mut c_void, channel: u64, sink: TakeSink) -> usize,
    /// Parks the calling thread until the transport may have something to deliver
    /// (ABI version 5): a message arrived for some channel, or [`interrupt`] was
    /// called, or `timeout_ns` passed (spurious returns are allowed). It delivers
    /// nothing itself: the host calls `take` or `progress` after it. So that a
    /// receiver whose thread sleeps is woken by the sender's signal directly, instead
    /// of by a transport thread that was woken first. Returns 1 when the transport
    /// supports it (and waited), 0 at once when it does not (the host then sleeps on
    /// its own and relies on the transport's threads).
    ///
    /// [`interrupt`]: Self::interrupt
    pub wait: unsafe extern "C" fn(inst: *mut c_void, timeout_ns: u64) -> u32,
    /// Makes every thread parked in `wait` return soon (ABI version 5): the host has
    /// something for one of them from elsewhere (another transport, a closed port).
    pub interrupt: unsafe extern "C" fn(inst: *mut c_void),
    /// The fast path of `channel` (ABI version 6): fills `out` and returns OK, or
    /// returns [`Status::UNAVAILABLE`] when the transport has none for it (the host
    /// then uses `send` and `take`).
    pub fast_path:
        unsafe extern "C" fn(inst: *mut c_void, channel: u64, out: *mut RawFastPath) -> Status,
}

/// What the entry symbol returns: who the plugin is and its functions. Lives in static
/// memory of the plugin for the life of the process (plugin libraries are never unloaded).
#[repr(C)]
#[derive(Debug)]
pub struct PluginDescriptor {
    /// Must be [`ABI_MAGIC`].
    pub magic: u64,
    /// Must be [`ABI_VERSION`]; checked before anything after this field is read.
    pub abi_version: u32,
    /// `size_of::<PluginDescriptor>()` as the plugin saw it.
    pub descriptor_size: u32,
    /// The transport's name, e.g. `"tcp"` (UTF-8).
    pub name: RawSlice,
    /// The plugin's version (UTF-8).
    pub version: RawSlice,
    /// A [`TransportCapabilities`](crate::TransportCapabilities) bit set.
    pub capabilities: u64,
    /// Higher wins when several plugins provide the requested capabilities.
    pub priority: i32,
    /// The functions.
    pub vtable: TransportVTable,
}

// SAFETY: a descriptor is immutable static data (string pointers into the plugin's
// read-only memory and function pointers); sharing it between threads is sound.
unsafe impl Sync for PluginDescriptor {}
// SAFETY: as above; it owns nothing that is tied to a thread.
unsafe impl Send for PluginDescriptor {}

/// Writes `msg` into an [`OutBuf`] (truncated to its capacity, `len` set to the full
/// length). Null `out` is ignored.
///
/// # Safety
/// `out` must be null or point to a valid `OutBuf` whose `ptr` is valid for `cap` writes.
pub unsafe fn write_out(out: *mut OutBuf, msg: &[u8]) {
    if out.is_null() {
        return;
    }
    // SAFETY: the caller guarantees that a non-null `out` is valid.
    let out = unsafe { &mut *out };
    let n = msg.len().min(out.cap);
    if n > 0 && !out.ptr.is_null() {
        // SAFETY: ptr is valid for cap >= n bytes (caller), msg for n bytes; the host's
        // buffer and the plugin's message never overlap.
        unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), out.ptr, n) };
    }
    out.len = msg.len();
}
