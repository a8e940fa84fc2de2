//! A pool of receive buffers for plugins that deliver heap buffers: a buffer the host
//! releases goes back to the pool instead of to the allocator, so a stream of large
//! messages costs no `mmap`/`munmap` and no page faults per message.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, Weak};

use crate::ffi::RawBuffer;
use crate::plugin::HostSink;

struct Inner {
    free: Mutex<Vec<Vec<u8>>>,
    max_cached: usize,
    max_capacity: usize,
}

/// A pool of byte buffers shared by a plugin's receive paths. Cheap to clone.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.inner.free.lock().map(|v| v.len()).unwrap_or(0);
        write!(f, "BufferPool({n} cached)")
    }
}

impl BufferPool {
    /// A pool that keeps at most `max_cached` released buffers, each of at most
    /// `max_capacity` bytes (larger ones are freed, so one huge message does not stay
    /// resident).
    pub fn new(max_cached: usize, max_capacity: usize) -> Self {
        BufferPool {
            inner: Arc::new(Inner {
                free: Mutex::new(Vec::new()),
                max_cached,
                max_capacity,
            }),
        }
    }

    /// A buffer from the pool (or a new, empty one). Its length is whatever it had: the
    /// caller truncates or grows it; growing zeroes only the new part, so a recycled
    /// buffer is not cleared again.
    pub fn take(&self) -> Vec<u8> {
        self.inner
            .free
            .lock()
            .ok()
            .and_then(|mut f| f.pop())
            .unwrap_or_default()
    }

    /// Hands `data` to the host as the message on `channel`; when the host releases it,
    /// the buffer returns to this pool (or is freed if the pool is full or gone).
    pub fn deliver(&self, host: &HostSink, channel: u64, data: Vec<u8>) {
        let boxed = Box::new((data, Arc::downgrade(&self.inner)));
        let raw = Box::into_raw(boxed);
        // SAFETY: raw comes from Box::into_raw just above: valid and aligned.
        let (ptr, len) = unsafe { ((*raw).0.as_ptr(), (*raw).0.len()) };
        let buf = RawBuffer {
            data: ptr,
            len,
            release: release_pooled,
            release_ctx: raw.cast(),
        };
        // SAFETY: the bytes live in the boxed vector, which nobody touches until the host
        // calls `release_pooled` exactly once; that reclaims the box, from any thread,
        // and is valid after the pool or the transport is gone (it holds a Weak).
        unsafe { host.message_raw(channel, buf) }
    }
}

unsafe extern "C" fn release_pooled(ctx: *mut c_void) {
    // SAFETY: ctx was made by Box::into_raw in `deliver`, and the host releases each
    // buffer exactly once (ABI contract), so reclaiming the box is sound.
    let boxed = unsafe { Box::from_raw(ctx.cast::<(Vec<u8>, Weak<Inner>)>()) };
    let (buf, pool) = *boxed;
    if let Some(pool) = pool.upgrade() {
        if let Ok(mut free) = pool.free.lock() {
            if free.len() < pool.max_cached && buf.capacity() <= pool.max_capacity {
                free.push(buf);
            }
        }
    }
}
