//! The per-worker free list of invocation records: a spawn does not allocate.

use super::record::Record;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};

/// A per-worker free list of invocation records (no allocation per spawn), linked
/// through the records' `next` field.
pub(crate) struct RecordPool {
    free: *mut Record,
    chunks: Vec<Box<[MaybeUninit<Record>]>>,
}

/// Records allocated at a time.
const CHUNK: usize = 256;

impl RecordPool {
    pub(crate) fn new() -> Self {
        RecordPool {
            free: ptr::null_mut(),
            chunks: Vec::new(),
        }
    }

    /// A record for a spawn, exclusively the caller's (I1); its fields other than
    /// `next` are uninitialized.
    #[inline(always)]
    pub(super) fn alloc(&mut self) -> NonNull<Record> {
        match NonNull::new(self.free) {
            Some(r) => {
                // SAFETY: a record on the free list is owned by the pool (I1), lives in
                // one of its chunks (I4), and its `next` field was written when it was
                // freed.
                self.free = unsafe { (*r.as_ptr()).next };
                r
            }
            None => self.grow(),
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) -> NonNull<Record> {
        let mut chunk: Box<[MaybeUninit<Record>]> =
            (0..CHUNK).map(|_| MaybeUninit::uninit()).collect();
        let base = chunk.as_mut_ptr().cast::<Record>();
        for i in 1..CHUNK {
            // SAFETY: `i < CHUNK`, so the pointer stays inside the chunk allocation,
            // which is never freed before the pool (I4); boxes do not move their
            // contents.
            let r = unsafe { base.add(i) };
            // SAFETY: `r` points to a record slot of the chunk; the projection only
            // forms the address of its `next` field (no reference to uninit memory).
            let next = unsafe { ptr::addr_of_mut!((*r).next) };
            // SAFETY: the field is inside the live chunk, aligned, and nobody else
            // refers to this fresh record. The other fields stay uninitialized until a
            // spawn writes the whole record.
            unsafe { next.write(self.free) };
            self.free = r;
        }
        self.chunks.push(chunk);
        // SAFETY: `base` is the start of a live, non-empty boxed slice: not null.
        unsafe { NonNull::new_unchecked(base) }
    }

    /// Returns a dead frame's list of records whose slots hold nothing to drop (their
    /// vtables have no `release`), from `head` (the newest) to `tail` (the oldest,
    /// whose `next` is null), in one splice: no record but `tail` is touched.
    ///
    /// # Safety
    /// As [`RecordPool::free_list`]; also `tail` is the last record of the list that
    /// starts at `head`, and no record of the list has a `release` in its vtable.
    #[inline(always)]
    pub(super) unsafe fn free_chain(&mut self, head: NonNull<Record>, tail: NonNull<Record>) {
        // SAFETY: `tail` is a live record of the dead frame's list (caller contract),
        // ours alone; its `next` (null, the end of the list) now links to the old
        // free list. The records' slots need no drop (caller contract).
        unsafe { (*tail.as_ptr()).next = self.free };
        self.free = head.as_ptr();
    }

    /// Returns a dead frame's list of records (linked by `next`, ending in null) to
    /// the pool, dropping what their slots hold.
    ///
    /// # Safety
    /// The records belong to a dead frame of this worker (I3): no other thread refers
    /// to them, and their vtables match their slots (I5).
    #[inline(always)]
    pub(super) unsafe fn free_list(&mut self, head: NonNull<Record>) {
        let mut r = head;
        loop {
            // SAFETY: `r` is a live record of the dead frame's list (caller contract);
            // its vtable is immutable.
            let release = unsafe { (*r.as_ptr()).vtable.release };
            if let Some(release) = release {
                // SAFETY: the vtable was made for the record's slot type (I5) and the
                // frame is dead, so this is the one release of the slot (I3).
                unsafe { release(r) };
            }
            // SAFETY: as above; the release does not touch `next`.
            let next = unsafe { (*r.as_ptr()).next };
            match NonNull::new(next) {
                Some(n) => r = n,
                None => {
                    // SAFETY: the record is ours alone (caller contract); the list's
                    // tail now links to the old free list.
                    unsafe { (*r.as_ptr()).next = self.free };
                    break;
                }
            }
        }
        self.free = head.as_ptr();
    }
}
