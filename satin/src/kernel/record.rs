//! The invocation record: one spawned job, its result slot and its state, and the
//! type-erased operations on it (one static table per job type).

use super::ctx::Ctx;
use crate::error::SatinError;
use crate::Job;
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::{self, MaybeUninit};
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU32;

/// Bytes of job/result storage inside an invocation record; larger jobs are boxed.
pub const INLINE_BYTES: usize = 64;

/// Spawned and never published: it runs (or ran) on the spawning thread.
pub(super) const QUEUED: u32 = 0;
/// Published, then popped back from the deque by its own worker.
pub(super) const LOCAL: u32 = 1;
/// Taken by a thief (another worker or the external stealer).
pub(super) const STOLEN: u32 = 2;
/// Finished by a thief; the owner may read the slot after observing this (Acquire).
pub(super) const DONE: u32 = 3;
/// Moved to the worker's deque, where a thief may take it.
pub(super) const PUBLISHED: u32 = 5;
/// Done, and its panic payload waits in `Shared::panics` (rare, kept out of the slot
/// so that slots of plain types need no drop).
pub(super) const PANICKED: u32 = 4;

/// Set in a record's state by its frame when the frame aborts it (see [`super::abort`]);
/// kept by every later transition of a thief (they add to the state instead of
/// storing it), so the frame still sees it when the thief is done.
pub(super) const ABORT_BIT: u32 = 1 << 8;
/// Set by a frame with inlets in a stolen child's state once its outcome was looked at
/// (so its error goes to the inlet once).
pub(super) const SEEN_BIT: u32 = 1 << 9;
/// The state without the abort and seen bits.
pub(super) const STATE_MASK: u32 = 0xff;

/// A record's state without its flag bits.
#[inline(always)]
pub(super) const fn base_state(s: u32) -> u32 {
    s & STATE_MASK
}

/// A serialized job: its registered type name and bytes.
type WireResult = Option<Result<(&'static str, Vec<u8>), SatinError>>;

/// The state of a job's storage: the parameters before it runs, the result after.
pub(super) enum Slot<J: Job> {
    Job(J),
    Done(J::Output),
    Empty,
}

/// [`VTable::run`]: takes the job out of the slot, runs it, stores `Done(output)`;
/// may unwind.
pub(super) type RunFn = unsafe fn(NonNull<Record>, &mut Ctx);

/// Type-erased operations on a record, one static table per job type.
pub(super) struct VTable {
    /// Takes the job out of the slot, runs it, stores `Done(output)`; may unwind.
    pub(super) run: RunFn,
    /// Drops whatever the slot holds and frees a boxed slot (`None`: nothing to do).
    pub(super) release: Option<unsafe fn(NonNull<Record>)>,
    /// Serializes the job if its type is remote-capable (`None` otherwise).
    pub(super) to_wire: unsafe fn(NonNull<Record>) -> WireResult,
    /// Deserializes a result and stores it as `Done` (dropping the job).
    pub(super) complete_wire: unsafe fn(NonNull<Record>, &[u8]) -> Result<(), SatinError>,
    /// The registered wire name of the job type.
    pub(super) name: fn() -> Option<&'static str>,
    /// For a child of a frame with inlets (its output a `Result<T, E>`): moves the
    /// error of a `Done(Err(e))` slot to the `Option<E>` the pointer points to and
    /// leaves the slot `Empty` (see [`super::inlet`]); `None` for other records.
    pub(super) take_err: Option<unsafe fn(NonNull<Record>, *mut ())>,
}

/// The bit of [`Record::owner`] that marks a record spawned by a job running in redo
/// mode (see [`super::redo`]). Below it: the record's depth in its redone subtree
/// ([`DEPTH_SHIFT`]), then the owner's worker index ([`WORKER_BITS`] bits).
pub(super) const REDO_BIT: u32 = 1 << 31;

/// Bits of the owner word that hold the owner's worker index (the low ones).
pub(super) const WORKER_BITS: u32 = 16;

/// The most workers one Satin instance may have: worker indices fit in
/// 16 bits of the owner word.
pub const MAX_WORKERS: usize = 1 << WORKER_BITS;

/// Where the depth of a marked record starts in its owner word (the bits between the
/// worker index and [`REDO_BIT`]).
const DEPTH_SHIFT: u32 = WORKER_BITS;

/// The largest depth a marked record carries; deeper records carry it too (it only
/// matters when the redo depth is unbounded, see [`MAX_REDO_DEPTH`]).
pub(super) const MAX_DEPTH: u32 = (REDO_BIT >> DEPTH_SHIFT) - 1;

/// [`SatinBuilder::redo_depth`](crate::SatinBuilder::redo_depth)s from this one up
/// mean "unbounded" (the depth in an owner word saturates there).
pub const MAX_REDO_DEPTH: usize = MAX_DEPTH as usize;

/// The worker index in a record's owner word.
#[inline(always)]
pub(super) const fn owner_index(owner: u32) -> usize {
    (owner & (MAX_WORKERS as u32 - 1)) as usize
}

/// Whether a record's owner word carries the redo mark.
#[inline(always)]
pub(super) const fn owner_redone(owner: u32) -> bool {
    owner & REDO_BIT != 0
}

/// The depth of a marked record below its redone job (1 for the redone job's
/// children), from its owner word; 0 for an unmarked record.
#[inline(always)]
pub(super) const fn owner_depth(owner: u32) -> u32 {
    (owner & !REDO_BIT) >> DEPTH_SHIFT
}

/// The owner word of a record that worker `worker` spawns at `depth` (at least 1,
/// saturated at [`MAX_DEPTH`]) of a redone subtree.
#[inline(always)]
pub(super) const fn marked_owner(worker: usize, depth: u32) -> u32 {
    let d = if depth > MAX_DEPTH { MAX_DEPTH } else { depth };
    REDO_BIT | (d << DEPTH_SHIFT) | worker as u32
}

/// An invocation record (Satin's term): one spawned job, its result slot and state.
#[repr(C)]
pub(crate) struct Record {
    pub(super) state: AtomicU32,
    /// Index of the worker whose frame spawned it (whose thread waits for it) in the
    /// low [`WORKER_BITS`]; if that frame's job ran in redo mode and the record is at
    /// most the redo depth below its redone job, also [`REDO_BIT`] and that depth
    /// (see [`marked_owner`]). Written at spawn (the spawning worker's
    /// `Ctx::owner_tag`, one load as before the mark existed) and immutable after.
    pub(super) owner: u32,
    /// Id of the spawning frame, unique per worker.
    pub(super) frame_id: u64,
    /// Next record of the same frame (intrusive list, newest first), or of the free
    /// list.
    pub(super) next: *mut Record,
    pub(super) vtable: &'static VTable,
    pub(super) data: UnsafeCell<MaybeUninit<[u64; INLINE_BYTES / 8]>>,
}

/// Writes the header of a fresh record with the vtable `vtable` (its slot still to be
/// written with [`init_slot`]), field by field: building a whole `Record` and writing it
/// made every spawn copy the uninitialized slot too (satin-bench: spawn+sync 7.2 -> 8.2 ns).
///
/// # Safety
/// `rec` is a record just taken from the pool and exclusively owned (I1); nothing in it
/// needs dropping; `vtable` is one of the tables of the job type the slot will hold (I5).
#[inline(always)]
pub(super) unsafe fn init_header(
    rec: NonNull<Record>,
    owner: u32,
    frame_id: u64,
    next: *mut Record,
    vtable: &'static VTable,
) {
    let p = rec.as_ptr();
    // SAFETY: for this block and the nine below: `p` is a live record, exclusively ours
    // (I1); a block either forms a pointer to one of its fields or writes that aligned
    // field, which holds nothing to drop.
    let f = unsafe { &raw mut (*p).state };
    // SAFETY: see above.
    unsafe { f.write(AtomicU32::new(QUEUED)) };
    // SAFETY: see above.
    let f = unsafe { &raw mut (*p).owner };
    // SAFETY: see above.
    unsafe { f.write(owner) };
    // SAFETY: see above.
    let f = unsafe { &raw mut (*p).frame_id };
    // SAFETY: see above.
    unsafe { f.write(frame_id) };
    // SAFETY: see above.
    let f = unsafe { &raw mut (*p).next };
    // SAFETY: see above.
    unsafe { f.write(next) };
    // SAFETY: see above.
    let f = unsafe { &raw mut (*p).vtable };
    // SAFETY: see above.
    unsafe { f.write(vtable) };
}

/// A pointer to a record as stored in the deques; see I2 for who may touch it.
#[derive(Clone, Copy)]
pub(crate) struct JobRef(pub(super) NonNull<Record>);

// SAFETY: a JobRef is only a handle; exactly one thread at a time dereferences the
// record's slot (I2), the other fields are immutable while it is published or atomic.
unsafe impl Send for JobRef {}

/// Whether a `Slot<J>` fits the record's inline storage (else it is boxed).
pub(super) const fn fits_inline<J: Job>() -> bool {
    mem::size_of::<Slot<J>>() <= INLINE_BYTES && mem::align_of::<Slot<J>>() <= 8
}

/// Whether the slot of a `J` needs its vtable's `release` (it holds something to drop
/// or is boxed); records of other types are returned to the pool by one splice of
/// their frame's list ([`RecordPool::free_chain`](super::record_pool::RecordPool::free_chain)).
pub(super) const fn needs_release<J: Job>() -> bool {
    !fits_inline::<J>() || mem::needs_drop::<Slot<J>>()
}

/// The slot of a record holding a `J`.
///
/// # Safety
/// `rec` must be a live record created by `spawn::<J>` (I5) whose slot was written by
/// [`init_slot`], and the caller must have the slot access right of I2.
#[inline(always)]
pub(super) unsafe fn slot<J: Job>(rec: NonNull<Record>) -> *mut Slot<J> {
    // SAFETY: `rec` is a live record (caller contract); `data` is a field of it, and
    // `UnsafeCell::get` only forms a pointer.
    let data = unsafe { (*rec.as_ptr()).data.get() }.cast::<u8>();
    if fits_inline::<J>() {
        data.cast::<Slot<J>>()
    } else {
        // SAFETY: for a boxed slot `init_slot` wrote a `*mut Slot<J>` at the start of
        // `data` (8-aligned, INLINE_BYTES long); the caller may read it (I2, I5).
        unsafe { *data.cast::<*mut Slot<J>>() }
    }
}

/// Writes the first slot value of a fresh record.
///
/// # Safety
/// `rec` is a record just taken from the pool and exclusively owned (I1); its slot is
/// uninitialized.
#[inline(always)]
pub(super) unsafe fn init_slot<J: Job>(rec: NonNull<Record>, job: J) {
    // SAFETY: the record is live and exclusively ours (I1); only a pointer is formed.
    let data = unsafe { (*rec.as_ptr()).data.get() }.cast::<u8>();
    if fits_inline::<J>() {
        // SAFETY: `data` is 8-aligned and INLINE_BYTES long, enough for a `Slot<J>`
        // (`fits_inline`); nobody else accesses it (I1) and it holds nothing to drop.
        unsafe { ptr::write(data.cast::<Slot<J>>(), Slot::Job(job)) };
    } else {
        let b = Box::into_raw(Box::new(Slot::Job(job)));
        // SAFETY: a pointer fits in the 8-aligned INLINE_BYTES of `data`; nobody else
        // accesses it (I1) and it holds nothing to drop.
        unsafe { ptr::write(data.cast::<*mut Slot<J>>(), b) };
    }
}

/// [`VTable::run`] of `J`.
///
/// # Safety
/// The caller popped or stole the record (it has the slot, I2), the record was made
/// for `J` (I5), and it has not run yet.
unsafe fn vt_run<J: Job>(rec: NonNull<Record>, ctx: &mut Ctx) {
    // SAFETY: the caller's contract is `slot`'s.
    let s = unsafe { slot::<J>(rec) };
    // SAFETY: we hold the initialized slot (I2); the job is moved out and `Empty` left
    // in its place, so nothing is dropped twice if `run` unwinds.
    let job = match unsafe { ptr::replace(s, Slot::Empty) } {
        Slot::Job(j) => j,
        _ => unreachable!("a record ran twice"),
    };
    let out = job.run(ctx);
    // SAFETY: still the only accessor (I2); the slot holds `Empty` (nothing to drop).
    unsafe { ptr::write(s, Slot::Done(out)) };
}

/// [`VTable::release`] of `J`.
///
/// # Safety
/// Called only by the owner when the record is released (I3), once per spawn, so it
/// has the slot; the record was made for `J` (I5).
unsafe fn vt_release<J: Job>(rec: NonNull<Record>) {
    // SAFETY: the caller's contract is `slot`'s.
    let s = unsafe { slot::<J>(rec) };
    if fits_inline::<J>() {
        // SAFETY: the slot holds a valid `Slot<J>` (job, result or empty) that nothing
        // reads after the release.
        unsafe { ptr::drop_in_place(s) };
    } else {
        // SAFETY: `s` came from `Box::into_raw` in `init_slot` and is freed only here,
        // once (the record is released once per spawn, I3).
        drop(unsafe { Box::from_raw(s) });
    }
}

/// [`VTable::to_wire`] of `J`.
///
/// # Safety
/// The caller holds the slot (I2): the holder of a `StolenJob` (taken by the external
/// stealer or offered to the result lookup), or the worker about to offer the record
/// to the lookup; the record was made for `J` (I5).
unsafe fn vt_to_wire<J: Job>(rec: NonNull<Record>) -> WireResult {
    let remote = J::REMOTE?;
    // SAFETY: the caller's contract is `slot`'s.
    let s = unsafe { slot::<J>(rec) };
    // SAFETY: we hold the initialized slot (I2); nobody writes it while we read.
    match unsafe { &*s } {
        Slot::Job(j) => Some((remote.encode_job)(j).map(|b| (remote.name, b))),
        _ => None,
    }
}

/// [`VTable::complete_wire`] of `J`.
///
/// # Safety
/// The completer holds the slot until it stores DONE (I2) and the record was made for
/// `J` (I5).
///
/// Decodes before it touches the slot: on an error the slot still holds the unrun job
/// (`StolenJob::try_complete_from_wire` relies on it).
unsafe fn vt_complete_wire<J: Job>(rec: NonNull<Record>, bytes: &[u8]) -> Result<(), SatinError> {
    let remote = J::REMOTE.ok_or(SatinError::NotRemote)?;
    let out = (remote.decode_output)(bytes)?;
    // SAFETY: the caller's contract is `slot`'s.
    let s = unsafe { slot::<J>(rec) };
    // SAFETY: we hold the initialized slot (I2); the job it holds is dropped here.
    unsafe { *s = Slot::Done(out) };
    Ok(())
}

fn vt_name<J: Job>() -> Option<&'static str> {
    J::REMOTE.map(|r| r.name)
}

/// The vtable of the records of `J`.
pub(super) struct VTableOf<J>(PhantomData<J>);

impl<J: Job> VTableOf<J> {
    pub(super) const VT: VTable = VTable {
        run: vt_run::<J>,
        release: if needs_release::<J>() {
            Some(vt_release::<J>)
        } else {
            None
        },
        to_wire: vt_to_wire::<J>,
        complete_wire: vt_complete_wire::<J>,
        name: vt_name::<J>,
        take_err: None,
    };
}

/// [`VTable::take_err`] of a job whose output is `Result<T, E>`.
///
/// # Safety
/// The caller holds the slot of a record made for `J` (I2, I5) whose job has run (or
/// was completed from the wire), and `out` points to a live `Option<E>`.
unsafe fn vt_take_err<T, E, J: Job<Output = Result<T, E>>>(rec: NonNull<Record>, out: *mut ()) {
    // SAFETY: the caller's contract is `slot`'s.
    let s = unsafe { slot::<J>(rec) };
    // SAFETY: we hold the initialized slot (I2); an error is moved out and `Empty`
    // left in its place, anything else is put back untouched.
    match unsafe { ptr::replace(s, Slot::Empty) } {
        Slot::Done(Err(e)) => {
            // SAFETY: the caller's contract: `out` is a live `Option<E>`.
            unsafe { *out.cast::<Option<E>>() = Some(e) };
        }
        // SAFETY: as above; `Empty` holds nothing to drop.
        other => unsafe { ptr::write(s, other) },
    }
}

/// The vtable of the records of `J` spawned in a frame with inlets: `J`'s, with
/// [`VTable::take_err`].
pub(super) struct CatchVTableOf<T, E, J>(PhantomData<(T, E, J)>);

impl<T, E, J: Job<Output = Result<T, E>>> CatchVTableOf<T, E, J> {
    pub(super) const VT: VTable = VTable {
        take_err: Some(vt_take_err::<T, E, J>),
        ..VTableOf::<J>::VT
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_word_holds_worker_mark_and_depth_apart() {
        let last = MAX_WORKERS - 1;
        for (worker, depth) in [(0, 1), (last, 1), (7, 12), (last, MAX_DEPTH)] {
            let w = marked_owner(worker, depth);
            assert_eq!(owner_index(w), worker);
            assert!(owner_redone(w));
            assert_eq!(owner_depth(w), depth);
        }
        // Deeper than MAX_DEPTH saturates; the worker index is untouched.
        let w = marked_owner(last, MAX_DEPTH + 5);
        assert_eq!((owner_index(w), owner_depth(w)), (last, MAX_DEPTH));
        // An unmarked word is the worker index alone.
        assert_eq!(owner_index(last as u32), last);
        assert!(!owner_redone(last as u32));
        assert_eq!(owner_depth(last as u32), 0);
    }
}
