//! Zero-copy buffers handed to the host: a pointer into the ring and a release
//! function that gives the slot back to the ring's reclaimer.
//!
//! The release context owns an `Arc` of the ring's shared receive state, which owns an
//! `Arc` of the mapping: a buffer keeps its mapping alive on its own, so a release is
//! sound from any thread, at any time, even after the endpoint was destroyed or the
//! peer died.

use std::ffi::c_void;
use std::sync::Arc;

use ipl_transport_abi::ffi::RawBuffer;
use ipl_transport_abi::HostSink;

use crate::ring::RxShared;

struct ReleaseCtx {
    shared: Arc<RxShared>,
    seq: u64,
}

unsafe extern "C" fn release_slot(ctx: *mut c_void) {
    // SAFETY: ctx comes from Box::into_raw in `deliver_in_place`, and the host calls
    // release exactly once per buffer (ABI contract), so it is reclaimed once.
    let ctx = unsafe { Box::from_raw(ctx.cast::<ReleaseCtx>()) };
    // No panic can cross the boundary: `release` handles lock poisoning and only
    // does arithmetic, atomics and a non-blocking socket write.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.shared.release(ctx.seq)));
}

/// Hands `len` bytes at `ptr` (inside `shared`'s region, in a slot held under `seq`)
/// to the host as message on `channel`; the slot is released when the host releases
/// the buffer.
pub(crate) fn deliver_in_place(
    host: &HostSink,
    channel: u64,
    shared: &Arc<RxShared>,
    seq: u64,
    ptr: *const u8,
    len: usize,
) {
    debug_assert!(len == 0 || shared.region().contains(ptr));
    let ctx = Box::into_raw(Box::new(ReleaseCtx {
        shared: shared.clone(),
        seq,
    }));
    let buf = RawBuffer {
        data: ptr,
        len,
        release: release_slot,
        release_ctx: ctx.cast(),
    };
    // SAFETY: ptr..ptr+len lies in a slot that the reclaimer holds until `seq` is
    // released, so the producer cannot overwrite it (no credits for it) and the
    // mapping stays alive through the Arc in the context; `release_slot` is callable
    // from any thread and after the endpoint is gone (it touches only the context).
    unsafe { host.message_raw(channel, buf) }
}
