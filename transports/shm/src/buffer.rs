//! Zero-copy buffers handed to the host: a pointer into the ring and a release
//! function that gives the slot back to the ring's reclaimer.
//!
//! The release context owns an `Arc` of the ring's shared receive state, which owns an
//! `Arc` of the mapping: a buffer keeps its mapping alive on its own, so a release is
//! sound from any thread, at any time, even after the endpoint was destroyed or the
//! peer died.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use ipl_transport_abi::ffi::RawBuffer;
use ipl_transport_abi::PluginBuffer;

use crate::ring::RxShared;

/// What a buffer's release needs: the ring's shared receive state and the slot's ticket.
/// `shared` is `None` only while the context waits in a [`CtxCache`] (so a cached
/// context never keeps its own ring alive).
struct ReleaseCtx {
    shared: Option<Arc<RxShared>>,
    seq: u64,
}

/// One spare release context per ring: a message handed out in place needs a context
/// that outlives the call, and the one freed by the previous release is taken again
/// instead of allocating (a malloc and free cost as much as a tenth of a round trip).
/// Contexts beyond the one kept are freed as usual.
#[derive(Default)]
pub(crate) struct CtxCache(AtomicPtr<ReleaseCtx>);

impl CtxCache {
    /// A context to fill: the spare one, or a new one.
    fn take(&self) -> Box<ReleaseCtx> {
        let p = self.0.swap(ptr::null_mut(), Ordering::Acquire);
        if p.is_null() {
            Box::new(ReleaseCtx {
                shared: None,
                seq: 0,
            })
        } else {
            // SAFETY: only `put` stores non-null pointers here, each from
            // `Box::into_raw`, and the swap above took this one out exclusively.
            unsafe { Box::from_raw(p) }
        }
    }

    /// Keeps `ctx` as the spare (if there is none yet), else frees it.
    fn put(&self, mut ctx: Box<ReleaseCtx>) {
        ctx.shared = None;
        let p = Box::into_raw(ctx);
        if self
            .0
            .compare_exchange(ptr::null_mut(), p, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            // SAFETY: p came from Box::into_raw just above and was not stored.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

impl Drop for CtxCache {
    fn drop(&mut self) {
        let p = *self.0.get_mut();
        if !p.is_null() {
            // SAFETY: a non-null pointer here came from Box::into_raw in `put` and is
            // owned by the cache alone.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

impl std::fmt::Debug for CtxCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CtxCache")
    }
}

unsafe extern "C" fn release_slot(ctx: *mut c_void) {
    // SAFETY: ctx comes from Box::into_raw in `in_place`, and the host calls
    // release exactly once per buffer (ABI contract), so it is reclaimed once.
    let mut ctx = unsafe { Box::from_raw(ctx.cast::<ReleaseCtx>()) };
    if let Some(shared) = ctx.shared.take() {
        // No panic can cross the boundary: `release` takes a lock that cannot be
        // poisoned and only does arithmetic, atomics and a non-blocking socket write.
        let seq = ctx.seq;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.release(seq)));
        // Dropping `shared` after this may free the ring, and with it the cache: the
        // context is in it (or freed) by then.
        shared.release_ctx_cache().put(ctx);
    }
}

/// The `len` bytes at `ptr` (inside `shared`'s region, in a slot held under `seq`) as
/// a buffer for the host, read in place; the slot is released when the host releases
/// the buffer (or when the value is dropped before it was handed over).
pub(crate) fn in_place(
    shared: &Arc<RxShared>,
    seq: u64,
    ptr: *const u8,
    len: usize,
) -> PluginBuffer {
    debug_assert!(len == 0 || shared.region().contains(ptr));
    let mut ctx = shared.release_ctx_cache().take();
    ctx.shared = Some(shared.clone());
    ctx.seq = seq;
    let ctx = Box::into_raw(ctx);
    let buf = RawBuffer {
        data: ptr,
        len,
        release: release_slot,
        release_ctx: ctx.cast(),
    };
    // SAFETY: ptr..ptr+len lies in a slot that the reclaimer holds until `seq` is
    // released, so the producer has no credits for it (a peer that writes it anyway is
    // the one case the trust model in `region.rs` leaves to the pool's authentication),
    // and the mapping stays alive through the Arc in the context; `release_slot` is callable
    // from any thread and after the endpoint is gone (it touches only the context),
    // and the context is released once: by the host, or by the PluginBuffer's drop.
    unsafe { PluginBuffer::from_raw(buf) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spare_context_is_reused_and_extra_ones_are_freed() {
        let cache = CtxCache::default();
        let a = cache.take();
        let b = cache.take();
        let a_at: *const ReleaseCtx = &*a;
        cache.put(a);
        // A second spare is freed (memcheck in CI sees a leak or double free).
        cache.put(b);
        let again = cache.take();
        assert!(ptr::eq(a_at, &*again), "the spare came back");
        assert!(again.shared.is_none(), "a cached context holds no ring");
        let fresh = cache.take();
        assert!(!ptr::eq(a_at, &*fresh), "the cache was empty");
        cache.put(again);
        drop(fresh);
        // Dropping the cache frees the spare it holds.
    }
}
