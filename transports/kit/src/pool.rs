//! A pool of receive buffers for plugins that deliver heap buffers: a buffer the host
//! releases goes back to the pool instead of to the allocator, so a stream of large
//! messages costs no `mmap`/`munmap` and no page faults per message.

use std::sync::{Arc, Weak};

use ipl_transport_abi::{HostSink, PluginBuffer};
use parking_lot::Mutex;

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
        let n = self.inner.free.lock().len();
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
        self.inner.free.lock().pop().unwrap_or_default()
    }

    /// Hands `data` to the host as the message on `channel`; when the host releases it,
    /// the buffer returns to this pool (or is freed if the pool is full or gone).
    pub fn deliver(&self, host: &HostSink, channel: u64, data: Vec<u8>) {
        host.message(channel, self.wrap(data));
    }

    /// `data` as a message buffer that returns to this pool when the host releases it
    /// (for a receiver's sink, `ChannelSink::give`).
    pub fn wrap(&self, data: Vec<u8>) -> PluginBuffer {
        PluginBuffer::from_owner(Pooled {
            data,
            pool: Arc::downgrade(&self.inner),
        })
    }
}

/// A delivered buffer: goes back to its pool when the host releases it (from any
/// thread, also after the pool or the transport is gone: it holds a `Weak`).
struct Pooled {
    data: Vec<u8>,
    pool: Weak<Inner>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            let mut free = pool.free.lock();
            if free.len() < pool.max_cached && self.data.capacity() <= pool.max_capacity {
                free.push(std::mem::take(&mut self.data));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_buffers_come_back_up_to_the_limits() {
        let pool = BufferPool::new(1, 64);
        let small = PluginBuffer::from_owner(Pooled {
            data: Vec::with_capacity(32),
            pool: Arc::downgrade(&pool.inner),
        });
        let big = PluginBuffer::from_owner(Pooled {
            data: Vec::with_capacity(128),
            pool: Arc::downgrade(&pool.inner),
        });
        drop(big);
        assert_eq!(pool.inner.free.lock().len(), 0, "too large to keep");
        drop(small);
        assert_eq!(pool.take().capacity(), 32);
        assert_eq!(pool.take().capacity(), 0);
    }
}
