//! A registered memory region: the shared segment mapped into this process (or, for
//! tests, plain heap memory with the same interface). Every access to shared memory
//! goes through here or through a pointer taken from here; offsets are bounds-checked.
//!
//! # Trust model
//!
//! A peer is a process that passed the pool-secret handshake ([`handshake`]); it maps
//! the same segment and can write any byte of it at any time. The transport assumes
//! nothing about what it writes.
//!
//! **What a peer that ignores the protocol can do:** overwrite slots it already handed
//! over (including a message the host is reading in place), write garbage headers,
//! kinds and lengths, publish impossible indices (tail, read position) or raise the
//! wake-up flags at will, stop publishing or releasing (stall), or vanish.
//!
//! **What it cannot do, and why:**
//! - *Make us access memory outside the segment.* The mapping is exactly the size
//!   announced, of a memfd sealed against shrinking (checked before mapping, see
//!   `sys::sealed_size`), so no access can fault. Every offset comes from our own
//!   private state (the consumer's read position, the producer's head) reduced
//!   modulo the ring capacity; every length from the ring is
//!   checked against the end of the ring and the credits before it is used
//!   ([`Consumer::take`](crate::consumer::Consumer::take)), every tail against our head
//!   ([`Producer::check_tail`](crate::producer::Producer::check_tail)), and the region
//!   checks bounds again on each access by offset.
//! - *Make us allocate by its numbers.* A payload is at most the ring (its slot must
//!   fit the space this side reclaimed, counted in private memory),
//!   a reassembled message at most `max_message` (checked before each append), a ring
//!   at most our own configured size (checked in the handshake).
//! - *Make us panic.* A value that breaks the protocol is a typed error
//!   ([`RingError`](crate::consumer::RingError), [`BadTail`](crate::producer::BadTail)):
//!   the connection is dropped and its channels reported lost.
//! - *Make us hang.* A sender waits for credits at most `shm.send_timeout_ms`, each
//!   handshake step has a deadline, a dead peer is noticed by its socket closing, and
//!   what it published before is drained for at most a second.
//! - *Make the transport's reads race.* Memory the peer may write is read only with
//!   atomic loads, never through a `&[u8]` the compiler would take as immutable: header
//!   words and indices are [`AtomicU64`] loads, and payload copied out of the ring
//!   ([`Region::read`], [`Region::append_to`]) is loaded with relaxed atomic loads a
//!   word at a time, or for large copies on x86-64 with one `rep movsb`, which the
//!   compiler must take as such loads (`bulk_copy`). A racing write yields some
//!   bytes, never undefined behaviour; the bytes are then checked like any input.
//!   Our own writes go only into ranges the credits give us (one plain copy per
//!   message on send), and we never read those back except atomically: a peer that
//!   reads them early only harms itself.
//!
//! **The one place trust is extended: payloads handed out in place.** A message within
//! the zero-copy window is given to the host as a buffer that points into the ring
//! (`buffer.rs`), and the host reads it as a byte slice until it releases it. The
//! credit protocol gives that slot to us until the release, so a well-behaved peer
//! never writes it; a peer that does changes bytes under the host's reads: the host
//! then decodes garbage (its decoding is bounded and checked as for any received
//! bytes), but such a write is, in the language's terms, a data race on memory the
//! host holds as a shared slice, which only the peer's good behaviour excludes. The
//! guard is authentication: only a process that knows the pool's secret ever gets a
//! segment. Pools whose members are not trusted that far use another transport (tcp
//! copies every message into the receiver's own memory).
//!
//! [`handshake`]: crate::handshake

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

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
    /// Heap memory (tests, fuzzing): the allocation the pointer points into.
    #[cfg(any(test, feature = "fuzzing"))]
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

// SAFETY: the region is plain memory that lives as long as the value; every access
// through `&Region` is atomic, or a write into a range the ring protocol gives to one
// side at a time (see the trust model above), so the handle may move between threads.
unsafe impl Send for Region {}
// SAFETY: as above: no access through a shared `&Region` relies on exclusive access.
unsafe impl Sync for Region {}

impl Region {
    /// Zeroed heap memory of `size` bytes (rounded up to 8), for tests and in-process
    /// use of the ring code.
    #[cfg(any(test, feature = "fuzzing"))]
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
        // nothing of ours; rustix checks the result. The caller checked that the file is
        // sealed against shrinking and at least `size` bytes long, so no access within
        // `size` can fault.
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
        // SAFETY: in bounds and 8-aligned (checked just above; the base is page- or
        // u64-aligned), and the memory lives as long as `self`.
        Ok(unsafe { self.word(off) })
    }

    /// The word at `off`, unchecked.
    ///
    /// # Safety
    /// `off..off + 8` must lie in the region and `off` be a multiple of 8.
    #[inline]
    unsafe fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: the caller's promise makes the pointer in bounds and aligned for an
        // AtomicU64; the region outlives the borrow of `self`; whatever the peer writes
        // there, every u64 bit pattern is a valid AtomicU64.
        unsafe { &*self.base.wrapping_add(off).cast::<AtomicU64>() }
    }

    /// The byte at `off`, unchecked.
    ///
    /// # Safety
    /// `off` must lie in the region.
    #[inline]
    unsafe fn byte(&self, off: usize) -> &AtomicU8 {
        // SAFETY: in bounds (the caller's promise), any alignment suits an AtomicU8, and
        // the region outlives the borrow of `self`.
        unsafe { &*self.base.wrapping_add(off).cast::<AtomicU8>() }
    }

    /// A raw pointer to `len` bytes at `off` (for zero-copy delivery).
    pub fn ptr(&self, off: usize, len: usize) -> Result<*const u8, OutOfBounds> {
        self.check(off, len)?;
        // In bounds (checked), so the same as an in-bounds `add`.
        Ok(self.base.wrapping_add(off))
    }

    /// Copies `src` into the region at `off`.
    pub fn write(&self, off: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        self.check(off, src.len())?;
        // SAFETY: the destination is in bounds (checked) and cannot overlap `src` (a
        // Rust slice outside this region, or a range of it the ring protocol gives to the
        // writer alone; the reader does not look at it until the head is published, and
        // we never read it back except atomically).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.wrapping_add(off), src.len())
        };
        Ok(())
    }

    /// Copies `len` bytes at `off` (in the region: checked by the caller) to `dst`.
    /// Memory the peer may write concurrently is never read with plain loads (see the
    /// trust model): small copies are relaxed atomic loads, a word at a time (bytes at
    /// unaligned edges); large ones, on x86-64, one `rep movsb` (see [`bulk_copy`]).
    ///
    /// # Safety
    /// `dst` must be valid for `len` bytes of writes and not overlap the region.
    unsafe fn copy_out(&self, off: usize, dst: *mut u8, len: usize) {
        debug_assert!(self.check(off, len).is_ok());
        #[cfg(target_arch = "x86_64")]
        if len >= BULK_COPY {
            // SAFETY: the source range lies in the region (the caller checked it), the
            // destination is the caller's, and the two do not overlap.
            unsafe { bulk_copy(self.base.wrapping_add(off), dst, len) };
            return;
        }
        let mut i = 0;
        while i < len {
            let at = off + i;
            if at.is_multiple_of(8) && i + 8 <= len {
                // SAFETY: `at` is 8-aligned and at + 8 <= off + len <= size.
                let w = unsafe { self.word(at) }.load(Ordering::Relaxed);
                let to = dst.wrapping_add(i).cast::<u64>();
                // SAFETY: i + 8 <= len: inside the caller's destination.
                unsafe { to.write_unaligned(w) };
                i += 8;
            } else {
                // SAFETY: at < off + len <= size.
                let b = unsafe { self.byte(at) }.load(Ordering::Relaxed);
                // SAFETY: i < len: inside the caller's destination.
                unsafe { dst.wrapping_add(i).write(b) };
                i += 1;
            }
        }
    }

    /// Copies `dst.len()` bytes at `off` out of the region (never plain loads: a peer
    /// writing the range at the same time can only make us read garbage bytes, which
    /// the callers validate).
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.check(off, dst.len())?;
        // SAFETY: `dst` is a live exclusive slice of that length, outside the region
        // (a `&mut [u8]` over the mapping is never formed).
        unsafe { self.copy_out(off, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Appends `len` bytes at `off` to `v` (grows `v` by exactly `len`; loads as
    /// [`read`](Self::read)).
    pub fn append_to(&self, off: usize, len: usize, v: &mut Vec<u8>) -> Result<(), OutOfBounds> {
        self.check(off, len)?;
        v.reserve(len);
        let at = v.len();
        let dst = v.spare_capacity_mut().as_mut_ptr().cast::<u8>();
        // SAFETY: the spare capacity holds at least `len` bytes (reserved above) and is
        // the vector's own heap memory, outside the region.
        unsafe { self.copy_out(off, dst, len) };
        // SAFETY: the `len` bytes after `at` are within the capacity (reserved above)
        // and were all written by `copy_out`.
        unsafe { v.set_len(at + len) };
        Ok(())
    }
}

/// From this many bytes on, a copy out of the region is one `rep movsb` (x86-64).
const BULK_COPY: usize = 256;

/// Copies `len` bytes from `src` (memory another process may write at the same time) to
/// `dst` with one `rep movsb`: as fast as `memcpy` for large copies, and without a data
/// race. A racing write would make a plain copy (`copy_nonoverlapping`) undefined
/// behaviour, and a loop of atomic loads cannot use the wide moves `memcpy` does. An
/// `asm!` block is opaque to the compiler, which must treat it as some operations the
/// language allows; this one is exactly explained by a sequence of relaxed atomic byte
/// loads (every byte load on x86-64 is single-copy atomic, and the instruction does
/// nothing else with the source) followed by plain stores to `dst`. So a concurrent
/// write yields some bytes, never undefined behaviour.
///
/// # Safety
/// `src` must be valid for `len` bytes of reads, `dst` for `len` bytes of writes, and
/// the ranges must not overlap.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn bulk_copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller guarantees both ranges; `rep movsb` reads exactly
    // `src..src + len` and writes exactly `dst..dst + len` (the direction flag is clear
    // on entry to an asm block, as the Rust ABI requires), uses no stack and leaves
    // the flags alone; the three registers it advances are declared clobbered.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags)
        )
    };
}

impl Drop for Region {
    fn drop(&mut self) {
        match self.backing {
            Backing::Mapped => {
                // SAFETY: base/size describe a mapping made by `map` and never unmapped
                // before; nothing borrows it any more (every user holds an Arc<Region>, and
                // buffers handed out in place hold one too).
                let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.size) };
            }
            #[cfg(any(test, feature = "fuzzing"))]
            Backing::Heap(_) => {}
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

    #[test]
    fn copies_out_of_the_region_keep_every_byte_at_any_alignment() {
        // The copies load words where they can and bytes at the edges.
        let r = Region::heap(64);
        let bytes: Vec<u8> = (1..=64).collect();
        r.write(0, &bytes).unwrap();
        for off in 0..20 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 31, 44] {
                let mut b = vec![0u8; len];
                r.read(off, &mut b).unwrap();
                assert_eq!(b, bytes[off..off + len], "read {len} at {off}");
                let mut v = vec![0xee];
                r.append_to(off, len, &mut v).unwrap();
                assert_eq!(v[0], 0xee);
                assert_eq!(v[1..], bytes[off..off + len], "append {len} at {off}");
            }
        }
        assert!(r.append_to(60, 5, &mut Vec::new()).is_err());
        // Large copies (the bulk path on x86-64), at odd offsets and lengths too.
        let r = Region::heap(4096);
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7 + i / 256) as u8).collect();
        r.write(0, &bytes).unwrap();
        for (off, len) in [(0, 4096), (3, 1000), (16, 257), (4000, 96), (1, 255)] {
            let mut v = vec![1, 2, 3];
            r.append_to(off, len, &mut v).unwrap();
            assert_eq!(v[3..], bytes[off..off + len], "append {len} at {off}");
            let mut b = vec![0u8; len];
            r.read(off, &mut b).unwrap();
            assert_eq!(b, bytes[off..off + len], "read {len} at {off}");
        }
    }
}
