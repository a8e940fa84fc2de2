//! A registered memory region: the shared segment mapped into this process (or, for
//! tests, plain heap memory with the same interface). Every raw access to shared
//! memory goes through here; offsets are bounds-checked, indices are atomics.
//!
//! The peer process writes the same memory at any time. Indices are therefore only
//! ever accessed as [`AtomicU64`]s (Acquire/Release), and payload bytes are copied
//! with raw pointer copies into or out of ranges that the ring protocol gives to one
//! side at a time (the producer between its head and the receiver's tail, the
//! receiver between the tail and the published head).

use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;

/// An access outside the region (a bug in the caller, reported rather than done).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("access of {len} bytes at offset {off} outside a region of {size} bytes")]
pub struct OutOfBounds {
    /// The offset.
    pub off: usize,
    /// The length.
    pub len: usize,
    /// The region size.
    pub size: usize,
}

enum Backing {
    /// `mmap`ed shared memory, unmapped on drop.
    Mapped,
    /// Heap memory (tests): the allocation the pointer points into.
    Heap(#[allow(dead_code)] Box<[AtomicU64]>),
}

/// A region of memory shared with a peer.
pub struct Region {
    base: *mut u8,
    size: usize,
    backing: Backing,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({} bytes at {:p})", self.size, self.base)
    }
}

// SAFETY: the region is plain memory; all accesses through `&Region` are either atomic
// or raw copies whose exclusivity the ring protocol provides (see the module docs), so
// sharing and sending the handle between threads is sound.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Zeroed heap memory of `size` bytes (rounded up to 8), for tests and in-process
    /// use of the ring code.
    pub fn heap(size: usize) -> Region {
        let words: Box<[AtomicU64]> = (0..size.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        let base = words.as_ptr() as *mut u8;
        Region {
            base,
            size: words.len() * 8,
            backing: Backing::Heap(words),
        }
    }

    /// Maps `size` bytes of the shared-memory file `fd`, readable and writable, shared.
    pub fn map(fd: &OwnedFd, size: usize) -> std::io::Result<Region> {
        if size == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "empty mapping",
            ));
        }
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a fresh mapping placed by the kernel (no address hint), so it replaces
        // nothing of ours, of a file descriptor we own; rustix checks the result.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                size,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        Ok(Region {
            base: p.cast(),
            size,
            backing: Backing::Mapped,
        })
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether `p` points into the region (tests check zero-copy delivery with it).
    pub fn contains(&self, p: *const u8) -> bool {
        let (b, p) = (self.base as usize, p as usize);
        p >= b && p < b + self.size
    }

    fn check(&self, off: usize, len: usize) -> Result<(), OutOfBounds> {
        match off.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(OutOfBounds {
                off,
                len,
                size: self.size,
            }),
        }
    }

    /// The 8-byte atomic at `off` (a multiple of 8).
    pub fn atomic(&self, off: usize) -> Result<&AtomicU64, OutOfBounds> {
        self.check(off, 8)?;
        if !off.is_multiple_of(8) {
            return Err(OutOfBounds {
                off,
                len: 8,
                size: self.size,
            });
        }
        // SAFETY: in bounds (checked), 8-aligned (the base is page- or u64-aligned and off
        // is a multiple of 8), and the memory lives as long as `self`. The peer accesses
        // these words only atomically as well.
        Ok(unsafe { &*self.base.add(off).cast::<AtomicU64>() })
    }

    /// A raw pointer to `len` bytes at `off` (for zero-copy delivery).
    pub fn ptr(&self, off: usize, len: usize) -> Result<*const u8, OutOfBounds> {
        self.check(off, len)?;
        // SAFETY: off <= size (checked), so the result stays within (or one past) the
        // allocation.
        Ok(unsafe { self.base.add(off) })
    }

    /// Copies `src` into the region at `off`.
    pub fn write(&self, off: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        self.check(off, src.len())?;
        // SAFETY: the destination is in bounds (checked) and cannot overlap `src` (a
        // Rust slice outside this region, or a range of it the ring protocol gives to the
        // writer alone; the reader does not look at it until the head is published).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(off), src.len()) };
        Ok(())
    }

    /// Copies `dst.len()` bytes at `off` out of the region.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.check(off, dst.len())?;
        // SAFETY: the source is in bounds (checked); `dst` is exclusive local memory.
        // The range is one the producer published and will not write until released
        // (a misbehaving peer can only make us read garbage bytes, which the callers
        // validate).
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Appends `len` bytes at `off` to `v` (grows `v` by exactly `len`).
    pub fn append_to(&self, off: usize, len: usize, v: &mut Vec<u8>) -> Result<(), OutOfBounds> {
        self.check(off, len)?;
        v.reserve(len);
        let at = v.len();
        // SAFETY: the source is in bounds (checked); the destination is the vector's
        // spare capacity of at least `len` bytes (reserved above), which we then mark
        // initialised.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(off), v.as_mut_ptr().add(at), len);
            v.set_len(at + len);
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Backing::Mapped = self.backing {
            // SAFETY: base/size describe a mapping made by `map` and never unmapped
            // before; nothing borrows it any more (every user holds an Arc<Region>).
            let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.size) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn bounds_are_checked() {
        let r = Region::heap(100);
        assert_eq!(r.size(), 104);
        r.write(96, &[1; 8]).unwrap();
        assert!(r.write(97, &[1; 8]).is_err());
        assert!(r.write(usize::MAX, &[1]).is_err());
        let mut b = [0u8; 8];
        r.read(96, &mut b).unwrap();
        assert_eq!(b, [1; 8]);
        assert!(r.atomic(4).is_err());
        assert!(r.atomic(104).is_err());
        r.atomic(8).unwrap().store(7, Ordering::Release);
        r.read(8, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), 7);
        let mut v = vec![9u8];
        r.append_to(96, 8, &mut v).unwrap();
        assert_eq!(v, [9, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert!(r.contains(r.ptr(0, 1).unwrap()));
        assert!(!r.contains(b.as_ptr()));
    }
}
