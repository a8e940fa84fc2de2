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
struct ReleaseCtx {
    shared: Arc<RxShared>,
    seq: u64,
}

/// One spare release context per ring: a message handed out in place needs a context
/// that outlives the call, and the one freed by the previous release is taken again
/// instead of allocating (a malloc and free cost as much as a tenth of a round trip).
/// The spare keeps its reference to the ring, so that reusing it takes and drops none
/// (two atomic read-modify-writes fewer per message); the reference cycle this makes
/// (ring, spare, ring) is broken by [`close`](Self::close) when the ring's receiving
/// end goes away, after which contexts are freed instead of kept. Contexts beyond the
/// one kept are freed as usual.
///
/// The pointer is null (no spare), [`closed`] (no spare, ever again), or a context
/// from `Box::into_raw` that the cache owns.
pub(crate) struct CtxCache(AtomicPtr<ReleaseCtx>);

/// The pointer of a closed cache: never the address of a context (the dangling pointer
/// of the type is its alignment, where no allocation lies).
fn closed() -> *mut ReleaseCtx {
    ptr::NonNull::<ReleaseCtx>::dangling().as_ptr()
}

impl Default for CtxCache {
    fn default() -> Self {
        CtxCache(AtomicPtr::new(ptr::null_mut()))
    }
}

impl CtxCache {
    /// A context for a slot of `shared` (whose cache this is): the spare, or a new one.
    fn take(&self, shared: &Arc<RxShared>, seq: u64) -> Box<ReleaseCtx> {
        let p = self.0.load(Ordering::Acquire);
        if !p.is_null()
            && p != closed()
            && self
                .0
                .compare_exchange(p, ptr::null_mut(), Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // SAFETY: only `put` stores pointers other than null and `closed()` here,
            // each from `Box::into_raw`, and the exchange above took this one out
            // exclusively (whoever put it there last handed it over).
            let mut ctx = unsafe { Box::from_raw(p) };
            debug_assert!(Arc::ptr_eq(&ctx.shared, shared), "a spare of another ring");
            ctx.seq = seq;
            return ctx;
        }
        Box::new(ReleaseCtx {
            shared: Arc::clone(shared),
            seq,
        })
    }

    /// Keeps `ctx` as the spare if there is none and the cache is open; else gives it
    /// back, for the caller to free once this call has returned (freeing it may free
    /// the ring, and with it this cache).
    fn put(&self, ctx: Box<ReleaseCtx>) -> Result<(), Box<ReleaseCtx>> {
        let p = Box::into_raw(ctx);
        match self
            .0
            .compare_exchange(ptr::null_mut(), p, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            // SAFETY: p came from Box::into_raw just above and was not stored.
            Err(_) => Err(unsafe { Box::from_raw(p) }),
        }
    }

    /// Closes the cache (the ring's receiving end is going away): the spare, if any, is
    /// freed, and no context is kept from now on.
    pub(crate) fn close(&self) {
        let p = self.0.swap(closed(), Ordering::AcqRel);
        if !p.is_null() && p != closed() {
            // SAFETY: a pointer other than null and `closed()` here came from
            // Box::into_raw in `put`; the swap took it out exclusively. Dropping it
            // drops a reference to the ring, not the last one: the caller holds one.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

impl Drop for CtxCache {
    fn drop(&mut self) {
        // A spare holds a reference to the ring that owns this cache, so a cache that
        // is dropped holds none, unless it was never closed and its ring is freed
        // through a path that skipped `close`: free it then too.
        let p = *self.0.get_mut();
        if !p.is_null() && p != closed() {
            // SAFETY: as in `close`; `&mut self` makes the access exclusive.
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
    let ctx = unsafe { Box::from_raw(ctx.cast::<ReleaseCtx>()) };
    // No panic can cross the boundary: `release` takes a lock that cannot be
    // poisoned and only does arithmetic, atomics and a non-blocking socket write.
    let seq = ctx.seq;
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.shared.release(seq)));
    let shared: *const RxShared = Arc::as_ptr(&ctx.shared);
    // SAFETY: `ctx` holds a reference to the ring until it is handed to the cache or
    // freed, so `shared` is alive while `put` runs; once the context is in the cache,
    // `put` touches nothing but the exchange's own word (as `Arc`'s drop does with its
    // count). A context given back is freed after `put` has returned, which may free
    // the ring.
    if let Err(ctx) = unsafe { &*shared }.release_ctx_cache().put(ctx) {
        drop(ctx);
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
    let ctx = Box::into_raw(shared.release_ctx_cache().take(shared, seq));
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
    use crate::layout;
    use crate::region::Region;
    use crate::ring::{RingPlace, RingRx};

    fn ring() -> RingRx {
        let cap = layout::MIN_CAPACITY;
        let region = Arc::new(Region::heap(layout::segment_size(cap)));
        RingRx::new(region, RingPlace::in_segment(0, cap), Box::new(|| {})).unwrap()
    }

    #[test]
    fn the_spare_context_is_reused_with_its_reference_and_extra_ones_are_freed() {
        let rx = ring();
        let shared = Arc::clone(rx.shared());
        let cache = shared.release_ctx_cache();
        let a = cache.take(&shared, 1);
        let b = cache.take(&shared, 2);
        assert_eq!((a.seq, b.seq), (1, 2));
        let a_at: *const ReleaseCtx = &*a;
        assert!(cache.put(a).is_ok());
        // A second spare is given back to be freed (memcheck in CI sees a leak or a
        // double free).
        let b = cache.put(b).expect_err("one spare only");
        drop(b);
        let again = cache.take(&shared, 3);
        assert!(ptr::eq(a_at, &*again), "the spare came back");
        assert_eq!(again.seq, 3);
        assert!(Arc::ptr_eq(&again.shared, &shared));
        let fresh = cache.take(&shared, 4);
        assert!(!ptr::eq(a_at, &*fresh), "the cache was empty");
        assert!(cache.put(again).is_ok());
        drop(fresh);
        // The ring, this test's reference and the spare's.
        assert_eq!(Arc::strong_count(&shared), 3);
        // The receiving end goes away: the spare is freed and none is kept after.
        drop(rx);
        assert_eq!(Arc::strong_count(&shared), 1, "the cycle is broken");
        let late = shared.release_ctx_cache().take(&shared, 5);
        assert_eq!(Arc::strong_count(&shared), 2);
        let late = shared
            .release_ctx_cache()
            .put(late)
            .expect_err("a closed cache keeps nothing");
        drop(late);
        assert_eq!(Arc::strong_count(&shared), 1);
    }

    #[test]
    fn a_buffer_released_after_its_ring_went_away_frees_the_ring() {
        let rx = ring();
        let weak = Arc::downgrade(rx.shared());
        let seq = 0;
        let buf = in_place(rx.shared(), seq, ptr::null(), 0);
        // A message handed out before: the spare is in the cache.
        drop(in_place(rx.shared(), seq, ptr::null(), 0));
        drop(rx);
        assert!(weak.upgrade().is_some(), "the buffer keeps the ring alive");
        drop(buf);
        assert!(weak.upgrade().is_none(), "the last release freed the ring");
    }
}
