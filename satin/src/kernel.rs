//! The scheduling kernel: invocation records, the per-worker record pool, frames,
//! `spawn`/`sync`, and the execution paths of local and stolen jobs.
//!
//! This is the only module of the crate with `unsafe` code. The design follows the
//! invocation records of Satin (Euro-Par 2000, section 3):
//!
//! - An invocation record ([`Record`]) holds the job's parameters (the job value), the
//!   place where its result is stored, and a state word. Records come from a per-worker
//!   free list ([`RecordPool`]), so a spawn does not allocate (jobs larger than
//!   [`INLINE_BYTES`] are boxed into the record instead of stored inline).
//! - A spawn writes the record and pushes a pointer to it onto the worker's *private
//!   stack*, a plain vector no other thread sees: no fence, no atomic read-modify-write.
//!   The oldest part of a worker's work lives in its crossbeam deque instead (owner
//!   LIFO, thieves FIFO): every deque entry is older than every private one, so the
//!   two together form one deque, popped private end first.
//! - Publishing moves the oldest private record to the deque. A worker publishes when
//!   its deque is empty and someone could steal (other workers, or an
//!   [`ExternalStealer`](crate::ExternalStealer) of the distributed layer): then one
//!   job, the oldest and usually largest, is always there for a thief, and the fenced
//!   deque operations happen only when that job is taken or popped back, not per spawn.
//!   With one worker and no external stealer nothing is ever published (the split
//!   deque of Lace, van Dijk and van de Pol 2014, with a fixed one-job shared part).
//! - Adaptive inlining (lazy task creation): when the worker already holds
//!   `inline_depth` unstarted jobs, a spawn runs the child at once as a plain call and
//!   its ticket carries the result; no record is made. Thieves take the oldest jobs,
//!   which stay queued, so parallelism is not lost; the deep, small jobs that nobody
//!   would steal cost a call. `SatinBuilder::inline_depth` sets the depth
//!   (`usize::MAX`: never inline).
//! - The record lives until the frame that spawned it has been synced and its results
//!   are dead. Frames are strictly nested on a worker's stack, a job runs to completion
//!   on one thread, and a frame never returns (not even by unwinding) while one of its
//!   children is still running elsewhere, so a thief's pointer stays valid.
//!
//! Invariants a reviewer can check (referred to as I1..I5 in the SAFETY comments):
//!
//! - I1: a record pointer taken from the free list is owned exclusively by the frame
//!   that spawned it until that frame's list is released; a released record is only in
//!   the free list.
//! - I2: the slot of a record is accessed by exactly one thread at a time: the spawning
//!   thread until the record is published on the deque; then the single thread that
//!   popped/stole it (crossbeam hands each element to exactly one taker) until it
//!   stores `DONE` with `Release`; then the spawning thread again after it observed
//!   `DONE` with `Acquire` (or after it ran the record itself).
//! - I3: a frame's records are released only after every child is `DONE`, was run by
//!   this thread (`QUEUED`: never published; `LOCAL`: popped back from the deque), or
//!   was popped back and dropped unrun by this thread. Only `PUBLISHED` and `STOLEN`
//!   children may still be in another thread's hands.
//! - I4: the pool memory (chunks) lives as long as the worker's `Ctx`, which outlives
//!   every record of that worker (the worker thread leaves its loop only when idle).
//! - I5: `Slot<J>` of a record is accessed only through the vtable or ticket of the
//!   same `J` it was created with (the vtable is written at spawn; tickets carry `J`
//!   and are checked against the record's frame id, which is unique per worker).

use crate::error::SatinError;
use crate::pool::{Injected, Shared};
use crate::stats::LocalStats;
use crate::Job;
use crossbeam_deque::{Steal, Worker};
use std::any::Any;
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::{self, MaybeUninit};
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Bytes of job/result storage inside an invocation record; larger jobs are boxed.
pub const INLINE_BYTES: usize = 64;

/// Spawned and never published: it runs (or ran) on the spawning thread.
const QUEUED: u32 = 0;
/// Published, then popped back from the deque by its own worker.
const LOCAL: u32 = 1;
/// Taken by a thief (another worker or the external stealer).
const STOLEN: u32 = 2;
/// Finished by a thief; the owner may read the slot after observing this (Acquire).
const DONE: u32 = 3;
/// Moved to the worker's deque, where a thief may take it.
const PUBLISHED: u32 = 5;
/// Done, and its panic payload waits in `Shared::panics` (rare, kept out of the slot
/// so that slots of plain types need no drop).
const PANICKED: u32 = 4;

/// A panic payload carried from a thief back to the parent.
type Panic = Box<dyn Any + Send + 'static>;
/// A serialized job: its registered type name and bytes.
type WireResult = Option<Result<(&'static str, Vec<u8>), SatinError>>;
/// An invariant lifetime brand that also makes the branded type `!Send`.
type Brand<'a, T> = PhantomData<(fn(&'a ()) -> &'a (), *const T)>;

/// The state of a job's storage: the parameters before it runs, the result after.
enum Slot<J: Job> {
    Job(J),
    Done(J::Output),
    Empty,
}

/// Type-erased operations on a record, one static table per job type.
struct VTable {
    /// Takes the job out of the slot, runs it, stores `Done(output)`; may unwind.
    run: unsafe fn(NonNull<Record>, &mut Ctx),
    /// Drops whatever the slot holds and frees a boxed slot (`None`: nothing to do).
    release: Option<unsafe fn(NonNull<Record>)>,
    /// Serializes the job if its type is remote-capable (`None` otherwise).
    to_wire: unsafe fn(NonNull<Record>) -> WireResult,
    /// Deserializes a result and stores it as `Done` (dropping the job).
    complete_wire: unsafe fn(NonNull<Record>, &[u8]) -> Result<(), SatinError>,
    /// The registered wire name of the job type.
    name: fn() -> Option<&'static str>,
}

/// An invocation record (Satin's term): one spawned job, its result slot and state.
#[repr(C)]
pub(crate) struct Record {
    state: AtomicU32,
    /// Index of the worker whose frame spawned it (whose thread waits for it).
    owner: u32,
    /// Id of the spawning frame, unique per worker.
    frame_id: u64,
    /// Next record of the same frame (intrusive list, newest first).
    next: *mut Record,
    vtable: &'static VTable,
    data: UnsafeCell<MaybeUninit<[u64; INLINE_BYTES / 8]>>,
}

/// A pointer to a record as stored in the deques; see I2 for who may touch it.
#[derive(Clone, Copy)]
pub(crate) struct JobRef(NonNull<Record>);

// SAFETY: a JobRef is only a handle; exactly one thread at a time dereferences the
// record's slot (I2), the other fields are immutable while it is published or atomic.
unsafe impl Send for JobRef {}

const fn fits_inline<J: Job>() -> bool {
    mem::size_of::<Slot<J>>() <= INLINE_BYTES && mem::align_of::<Slot<J>>() <= 8
}

/// The slot of a record holding a `J`.
///
/// # Safety
/// `rec` must be a live record created by `spawn::<J>` (I5) and the caller must have
/// the slot access right of I2.
unsafe fn slot<J: Job>(rec: NonNull<Record>) -> *mut Slot<J> {
    // SAFETY: `data` is inside the live record (caller contract).
    let data = unsafe { (*rec.as_ptr()).data.get() } as *mut u8;
    if fits_inline::<J>() {
        data as *mut Slot<J>
    } else {
        // SAFETY: for large jobs `data` holds a `*mut Slot<J>` written by `init_slot`.
        unsafe { *(data as *mut *mut Slot<J>) }
    }
}

/// Writes the first slot value of a fresh record.
///
/// # Safety
/// `rec` is a record just taken from the pool and exclusively owned (I1); its slot is
/// uninitialized.
unsafe fn init_slot<J: Job>(rec: NonNull<Record>, job: J) {
    // SAFETY: exclusive access (I1); alignment/size checked by `fits_inline`, the data
    // field is 8-aligned and INLINE_BYTES long.
    unsafe {
        let data = (*rec.as_ptr()).data.get() as *mut u8;
        if fits_inline::<J>() {
            ptr::write(data as *mut Slot<J>, Slot::Job(job));
        } else {
            let b = Box::into_raw(Box::new(Slot::Job(job)));
            ptr::write(data as *mut *mut Slot<J>, b);
        }
    }
}

unsafe fn vt_run<J: Job>(rec: NonNull<Record>, ctx: &mut Ctx) {
    // SAFETY: the caller popped or stole the record, so it has the slot (I2), and the
    // record was made for `J` (I5).
    let s = unsafe { slot::<J>(rec) };
    // SAFETY: as above; the slot is initialized. The job is moved out field-wise and
    // the slot marked `Empty` (so nothing is dropped twice if `run` unwinds).
    let job = unsafe {
        match &*s {
            Slot::Job(j) => {
                let j = ptr::read(j);
                ptr::write(s, Slot::Empty);
                j
            }
            _ => unreachable!("a record ran twice"),
        }
    };
    let out = job.run(ctx);
    // SAFETY: still the only accessor; the slot holds `Empty` (nothing to drop).
    unsafe { ptr::write(s, Slot::Done(out)) };
}

unsafe fn vt_release<J: Job>(rec: NonNull<Record>) {
    // SAFETY: called only by the owner when the record is released (I3), so it has the
    // slot; `J` matches (I5).
    unsafe {
        let s = slot::<J>(rec);
        if fits_inline::<J>() {
            ptr::drop_in_place(s);
        } else {
            drop(Box::from_raw(s));
        }
    }
}

unsafe fn vt_to_wire<J: Job>(
    rec: NonNull<Record>,
) -> Option<Result<(&'static str, Vec<u8>), SatinError>> {
    let remote = J::REMOTE?;
    // SAFETY: the external stealer holds the slot (I2), `J` matches (I5).
    match unsafe { &*slot::<J>(rec) } {
        Slot::Job(j) => Some((remote.encode_job)(j).map(|b| (remote.name, b))),
        _ => None,
    }
}

unsafe fn vt_complete_wire<J: Job>(rec: NonNull<Record>, bytes: &[u8]) -> Result<(), SatinError> {
    let remote = J::REMOTE.ok_or(SatinError::NotRemote)?;
    let out = (remote.decode_output)(bytes)?;
    // SAFETY: the completer holds the slot until it stores DONE (I2), `J` matches (I5).
    unsafe { *slot::<J>(rec) = Slot::Done(out) };
    Ok(())
}

fn vt_name<J: Job>() -> Option<&'static str> {
    J::REMOTE.map(|r| r.name)
}

struct VTableOf<J>(PhantomData<J>);
impl<J: Job> VTableOf<J> {
    const VT: VTable = VTable {
        run: vt_run::<J>,
        release: if fits_inline::<J>() && !mem::needs_drop::<Slot<J>>() {
            None
        } else {
            Some(vt_release::<J>)
        },
        to_wire: vt_to_wire::<J>,
        complete_wire: vt_complete_wire::<J>,
        name: vt_name::<J>,
    };
}

/// A per-worker free list of invocation records (no allocation per spawn), linked
/// through the records' `next` field.
pub(crate) struct RecordPool {
    free: *mut Record,
    chunks: Vec<Box<[MaybeUninit<Record>]>>,
}

const CHUNK: usize = 256;

impl RecordPool {
    pub(crate) fn new() -> Self {
        RecordPool {
            free: ptr::null_mut(),
            chunks: Vec::new(),
        }
    }

    #[inline(always)]
    fn alloc(&mut self) -> NonNull<Record> {
        match NonNull::new(self.free) {
            Some(r) => {
                // SAFETY: a record on the free list is owned by the pool (I1) and its
                // `next` field was written when it was freed.
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
        let base = chunk.as_mut_ptr() as *mut Record;
        for i in 1..CHUNK {
            // SAFETY: `i < CHUNK`, so the pointer is inside the chunk allocation, which is
            // never freed before the pool (I4); boxes do not move their contents. Only
            // the `next` field is written; the rest stays uninitialized until a spawn.
            unsafe {
                let r = base.add(i);
                ptr::addr_of_mut!((*r).next).write(self.free);
                self.free = r;
            }
        }
        self.chunks.push(chunk);
        // SAFETY: index 0 of the same live chunk.
        unsafe { NonNull::new_unchecked(base) }
    }

    /// Returns a dead frame's list of records (linked by `next`, ending in null) to
    /// the pool, dropping what their slots hold.
    ///
    /// # Safety
    /// The records belong to a dead frame of this worker (I3): no other thread refers
    /// to them, and their vtables match their slots (I5).
    #[inline(always)]
    unsafe fn free_list(&mut self, head: *mut Record) {
        let mut r = head;
        // SAFETY: caller contract; every record of the list is live and ours.
        unsafe {
            loop {
                if let Some(release) = (*r).vtable.release {
                    release(NonNull::new_unchecked(r));
                }
                let next = (*r).next;
                if next.is_null() {
                    (*r).next = self.free;
                    break;
                }
                r = next;
            }
        }
        self.free = head;
    }
}

/// The context of the job running on a worker: gives access to frames (spawn/sync).
///
/// Every [`Job::run`] receives `&mut Ctx`; it is not `Send` (a job runs to completion
/// on one worker thread).
#[repr(C)] // field order chosen so that counters bumped together are not adjacent
pub struct Ctx {
    pub(crate) worker: usize,
    pub(crate) deque: Worker<JobRef>,
    /// Spawned records not yet published, oldest at `private_base`. Only this thread
    /// sees them; all are younger than every record in `deque`.
    private: Vec<JobRef>,
    /// Index of the oldest unpublished record in `private` (the ones below were
    /// published; the vector is compacted when it empties).
    private_base: usize,
    /// Whether another thread may steal from this worker (so one job is kept
    /// published); refreshed from `Shared` whenever the worker takes outside work.
    thieves: bool,
    /// Spawns run inline once this many private jobs wait.
    inline_depth: usize,
    /// `private_base + inline_depth`: spawns run inline while `private.len()` is at
    /// least this (kept in step with `private_base`, so a spawn tests one field).
    inline_at: usize,
    pub(crate) shared: Arc<Shared>,
    next_frame_id: u64,
    rng: u64,
    pool: RecordPool,
    /// Whether this worker is counted in `Shared::hungry` (it found no work).
    hungry: bool,
    /// The records of the last synced frame whose results may still be read.
    deferred: *mut Record,
    pub(crate) stats: LocalStats,
    _not_send: PhantomData<*const ()>,
}

impl Ctx {
    pub(crate) fn new(worker: usize, deque: Worker<JobRef>, shared: Arc<Shared>) -> Ctx {
        Ctx {
            worker,
            deque,
            private: Vec::with_capacity(64),
            private_base: 0,
            thieves: shared.has_thieves(),
            inline_depth: shared.inline_depth,
            inline_at: shared.inline_depth,
            shared,
            pool: RecordPool::new(),
            next_frame_id: 1,
            deferred: ptr::null_mut(),
            stats: LocalStats::default(),
            rng: 0x9E37_79B9_7F4A_7C15 ^ ((worker as u64 + 1) << 17),
            hungry: false,
            _not_send: PhantomData,
        }
    }

    /// Opens a spawn frame: the scope of a group of spawns and their `sync`.
    ///
    /// Results of an earlier frame of this context can no longer be read after this
    /// (the borrow checker enforces it: its [`Synced`] and tickets borrow the context).
    /// Opening a frame costs nothing: its id is drawn, and the records of the last
    /// synced frame are recycled, only once it queues a child.
    #[inline(always)]
    pub fn frame(&mut self) -> Frame<'_> {
        Frame {
            ctx: self,
            id: 0,
            head: ptr::null_mut(),
            outstanding: 0,
            _brand: PhantomData,
        }
    }

    /// The index of the worker thread running this job (0-based).
    pub fn worker_index(&self) -> usize {
        self.worker
    }

    /// Number of worker threads in this Satin instance.
    pub fn workers(&self) -> usize {
        self.shared.stealers.len()
    }

    #[inline(always)]
    pub(crate) fn release_deferred(&mut self) {
        let head = mem::replace(&mut self.deferred, ptr::null_mut());
        self.release_list(head);
    }

    /// Returns every record of a dead frame's list to the pool, dropping what their
    /// slots hold.
    #[inline(always)]
    fn release_list(&mut self, head: *mut Record) {
        if !head.is_null() {
            // SAFETY: the list's records belong to a dead frame of this worker (I3).
            unsafe { self.pool.free_list(head) };
        }
    }

    /// Pushes a fresh record onto the private stack; publishes the oldest private
    /// record if thieves could find nothing on the deque.
    #[inline(always)]
    fn push_private(&mut self, j: JobRef) {
        self.private.push(j);
        if self.thieves && self.deque.is_empty() {
            self.publish_oldest();
        }
    }

    /// Moves the base of the private stack (and the inlining threshold with it).
    #[inline(always)]
    fn set_private_base(&mut self, base: usize) {
        self.private_base = base;
        self.inline_at = base.saturating_add(self.inline_depth);
    }

    /// Runs a spawned job at once (enough work is queued for thieves already).
    #[inline(always)]
    fn run_inline<J: Job>(&mut self, job: J) -> J::Output {
        self.stats.inlined += 1;
        if self.thieves && self.deque.is_empty() {
            self.publish_oldest();
        }
        job.run(self)
    }

    /// Moves the oldest private record to the deque (every deque entry stays older
    /// than every private one).
    #[cold]
    #[inline(never)]
    fn publish_oldest(&mut self) {
        if let Some(&j) = self.private.get(self.private_base) {
            self.set_private_base(self.private_base + 1);
            publish(&self.deque, j);
        }
    }

    /// Publishes every private record, oldest first.
    fn publish_all(&mut self) {
        for &j in &self.private[self.private_base..] {
            publish(&self.deque, j);
        }
        self.private.clear();
        self.set_private_base(0);
    }

    /// Takes the newest own record (private stack first, then the deque) if it belongs
    /// to frame `frame`; anything else stays where it is.
    #[inline(always)]
    fn pop_own(&mut self, frame: u64) -> Option<JobRef> {
        if self.private.len() > self.private_base {
            let j = *self.private.last()?;
            // SAFETY: records on our stack are live (I3); frame_id is immutable.
            if unsafe { (*j.0.as_ptr()).frame_id } != frame {
                return None;
            }
            self.private.pop();
            if self.thieves && self.deque.is_empty() {
                self.publish_oldest();
            }
            return Some(j);
        }
        self.pop_own_deque(frame)
    }

    /// [`Ctx::pop_own`] once the private stack is empty: from the deque.
    #[inline(never)]
    fn pop_own_deque(&mut self, frame: u64) -> Option<JobRef> {
        self.private.clear();
        self.set_private_base(0);
        let j = self.deque.pop()?;
        // SAFETY: records on our deque are live (I3); frame_id is immutable.
        if unsafe { (*j.0.as_ptr()).frame_id } == frame {
            // SAFETY: popped by us: we hold the slot again (I2); it runs here.
            unsafe { (*j.0.as_ptr()).state.store(LOCAL, Ordering::Relaxed) };
            Some(j)
        } else {
            // Not ours: every remaining child of that frame was stolen.
            self.deque.push(j);
            None
        }
    }

    /// Takes the newest record of this worker whatever its frame (to help while a
    /// sync waits).
    fn pop_any(&mut self) -> Option<JobRef> {
        if self.private.len() > self.private_base {
            return self.private.pop();
        }
        self.private.clear();
        self.set_private_base(0);
        let j = self.deque.pop()?;
        // SAFETY: popped by us: we hold the slot again (I2); it runs here.
        unsafe { (*j.0.as_ptr()).state.store(LOCAL, Ordering::Relaxed) };
        Some(j)
    }

    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Steals from a random other worker (trying each once), then the injector.
    pub(crate) fn steal_work(&mut self) -> Option<Injected> {
        let n = self.shared.stealers.len();
        let start = Instant::now();
        let mut found = None;
        if n > 1 {
            let first = (self.next_rand() % n as u64) as usize;
            'victims: for k in 0..n {
                let v = (first + k) % n;
                if v == self.worker {
                    continue;
                }
                self.stats.steal_attempts += 1;
                loop {
                    match self.shared.stealers[v].steal() {
                        Steal::Success(j) => {
                            self.stats.steal_successes += 1;
                            found = Some(Injected::Record(j));
                            break 'victims;
                        }
                        Steal::Retry => continue,
                        Steal::Empty => break,
                    }
                }
            }
        }
        if found.is_none() {
            loop {
                match self.shared.injector.steal() {
                    Steal::Success(j) => {
                        found = Some(j);
                        break;
                    }
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
        }
        self.stats.steal_nanos += start.elapsed().as_nanos() as u64;
        found
    }

    /// Steals work and runs it; if none is found, counts this worker as hungry and
    /// returns `false`.
    pub(crate) fn steal_and_run(&mut self) -> bool {
        match self.steal_work() {
            Some(w) => {
                self.set_hungry(false);
                self.execute(w);
                true
            }
            None => {
                self.set_hungry(true);
                false
            }
        }
    }

    /// Runs work found by the idle loop or by a waiting sync.
    pub(crate) fn execute(&mut self, w: Injected) {
        self.thieves = self.shared.has_thieves();
        match w {
            Injected::Record(j) => self.execute_stolen(j),
            Injected::Task(t) => {
                t(self);
                self.release_deferred();
            }
        }
    }

    /// Runs a record owned by this worker that was popped from its own deque.
    #[inline(always)]
    fn run_local(&mut self, j: JobRef) {
        let r = j.0;
        // SAFETY: we popped it from our own stack or deque, so we hold the slot (I2)
        // and its state is QUEUED or LOCAL, which its frame counts as done once it
        // is popped; the record is live because its frame is suspended below us on this
        // thread (I3).
        unsafe { ((*r.as_ptr()).vtable.run)(r, self) }
    }

    /// Runs a record that was stolen from another worker or given back by the
    /// external stealer; a panic is caught and handed to the parent.
    pub(crate) fn execute_stolen(&mut self, j: JobRef) {
        let r = j.0;
        // (A record given back by the external stealer may be picked up by its own
        // worker while its frame is suspended below on this stack: that is fine.)
        // SAFETY: crossbeam handed this record to us alone (I2); it stays live until we
        // store DONE because its frame waits for DONE before releasing it (I3).
        unsafe {
            (*r.as_ptr()).state.store(STOLEN, Ordering::Relaxed);
            let vt = (*r.as_ptr()).vtable;
            let owner = (*r.as_ptr()).owner as usize;
            let res = panic::catch_unwind(AssertUnwindSafe(|| (vt.run)(r, self)));
            self.release_deferred();
            let done = match res {
                Ok(()) => DONE,
                Err(p) => {
                    self.shared.put_panic(r.as_ptr() as usize, p);
                    PANICKED
                }
            };
            self.stats.stolen_executed += 1;
            self.flush_stats();
            // After this store the owner may release the record: do not touch it.
            (*r.as_ptr()).state.store(done, Ordering::Release);
            self.shared.wake_worker(owner);
        }
    }

    /// Marks this worker as having found no work (`true`) or as working again. Only
    /// transitions touch the shared counter; becoming hungry calls the idle hook (the
    /// distributed layer's driver), so this costs nothing while work is found.
    #[inline]
    pub(crate) fn set_hungry(&mut self, hungry: bool) {
        if self.hungry != hungry {
            self.hungry = hungry;
            self.shared.set_hungry(hungry);
        }
    }

    pub(crate) fn flush_stats(&mut self) {
        let s = mem::take(&mut self.stats);
        self.shared.stats[self.worker].add(&s);
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.release_deferred();
    }
}

/// A group of spawned jobs and their sync (one per `sync` in a Satin method).
///
/// Dropping a frame without calling [`Frame::sync`] is an implicit sync: it waits for
/// all children; their results are dropped.
pub struct Frame<'a> {
    ctx: &'a mut Ctx,
    id: u64,
    head: *mut Record,
    /// Children not known to have run on this thread.
    outstanding: usize,
    _brand: PhantomData<fn(&'a ()) -> &'a ()>,
}

/// A ticket for a spawned job's result; redeem it with [`Synced::get`] after the
/// frame's sync. It cannot be read before, and belongs to its frame only.
#[must_use = "a spawned result can only be read with its ticket"]
pub struct Spawned<'a, J: Job> {
    ticket: Ticket<J>,
    _brand: Brand<'a, J>,
}

/// Where a spawned child's result is: in its record, or already here (inlined).
enum Ticket<J: Job> {
    Record(NonNull<Record>),
    Ready(J::Output),
}

impl<J: Job> std::fmt::Debug for Spawned<'_, J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Spawned")
    }
}

/// The results of a synced frame: redeem the frame's tickets with [`Synced::get`].
pub struct Synced<'a> {
    id: u64,
    _brand: Brand<'a, ()>,
}

impl std::fmt::Debug for Synced<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Synced").field("frame", &self.id).finish()
    }
}

impl<'a> Synced<'a> {
    /// The result of a child spawned in the frame this came from.
    ///
    /// # Panics
    /// If the ticket belongs to another frame (the lifetimes normally rule this out at
    /// compile time; this is the run-time check behind them).
    #[inline]
    pub fn get<J: Job>(&self, ticket: Spawned<'a, J>) -> J::Output {
        let r = match ticket.ticket {
            Ticket::Ready(v) => return v,
            Ticket::Record(r) => r,
        };
        // SAFETY: the ticket's record is live: it belongs to a frame of this worker
        // (tickets are !Send), and its frame id is checked against ours before the
        // slot is touched; frame ids are unique per worker and records of a frame are
        // released only once no Synced/ticket of it can be used (I3). The frame is
        // synced, so the owner holds the slot (I2), and the ticket's `J` is the
        // record's type (I5).
        unsafe {
            assert_eq!(
                (*r.as_ptr()).frame_id,
                self.id,
                "satin: ticket used with the results of another frame"
            );
            let s = slot::<J>(r);
            match &*s {
                Slot::Done(v) => {
                    let v = ptr::read(v);
                    ptr::write(s, Slot::Empty);
                    v
                }
                _ => unreachable!("satin: result missing after sync"),
            }
        }
    }
}

impl<'a> Frame<'a> {
    /// Spawns a child job. It may run on this worker at the sync, or be stolen by an
    /// idle worker (or, when the job type is remote-capable, by another process).
    #[inline(always)]
    pub fn spawn<J: Job>(&mut self, job: J) -> Spawned<'a, J> {
        let ctx = &mut *self.ctx;
        if ctx.private.len() >= ctx.inline_at && !ctx.shared.any_hungry() {
            return Spawned {
                ticket: Ticket::Ready(ctx.run_inline(job)),
                _brand: PhantomData,
            };
        }
        if self.id == 0 {
            // The first queued child: the frame gets its id (0 matches no record).
            ctx.release_deferred();
            self.id = ctx.next_frame_id;
            ctx.next_frame_id += 1;
        }
        ctx.stats.queued += 1;
        let r = ctx.pool.alloc();
        // SAFETY: a fresh record from our pool, exclusively ours (I1); all fields are
        // written before it is published on the deque (push has Release semantics).
        unsafe {
            let p = r.as_ptr();
            ptr::addr_of_mut!((*p).state).write(AtomicU32::new(QUEUED));
            ptr::addr_of_mut!((*p).owner).write(ctx.worker as u32);
            ptr::addr_of_mut!((*p).frame_id).write(self.id);
            ptr::addr_of_mut!((*p).next).write(self.head);
            ptr::addr_of_mut!((*p).vtable).write(&VTableOf::<J>::VT);
            init_slot(r, job);
        }
        self.head = r.as_ptr();
        self.outstanding += 1;
        ctx.push_private(JobRef(r));
        Spawned {
            ticket: Ticket::Record(r),
            _brand: PhantomData,
        }
    }

    /// Makes every spawned child of this frame (and every older unstarted job of this
    /// worker) stealable. Spawned children are private to the worker until a thief
    /// could use them; call this before long sequential work between the last spawn
    /// and the sync, when idle workers should get all of them at once.
    #[inline]
    pub fn publish(&mut self) {
        self.ctx.publish_all();
    }

    /// The context, for sequential calls (`job.run(f.ctx())`) or nested frames.
    #[inline]
    pub fn ctx(&mut self) -> &mut Ctx {
        self.ctx
    }

    /// Waits for all children of this frame and returns their results. Own children
    /// run here (newest first); while stolen children still run elsewhere this worker
    /// steals other work.
    ///
    /// # Panics
    /// Resumes the panic of a child that panicked on another worker.
    #[inline(always)]
    pub fn sync(mut self) -> Synced<'a> {
        // The slow paths take the frame's fields by value, never `&mut self`: the
        // frame's address does not escape, so it lives in registers and is not copied
        // through memory when it moves into this call.
        self.ctx.stats.syncs += 1;
        let head = self.head;
        if !head.is_null() {
            // If a child run here panics, the unwinding passes through this frame's
            // Drop, which waits for the stolen children and releases the records.
            let failed = sync_children(self.ctx, self.id, head, self.outstanding);
            // The frame is now empty: its Drop does nothing.
            self.head = ptr::null_mut();
            if failed {
                sync_failed(self.ctx, head);
            }
            // The records of the frame synced before are dead: no Synced of it can
            // be alive while this frame borrows the context.
            self.ctx.release_deferred();
            self.ctx.deferred = head;
        }
        Synced {
            id: self.id,
            _brand: PhantomData,
        }
    }
}

/// Runs a frame's own children from the private stack (then the deque), then waits
/// for stolen ones. Returns whether a stolen child panicked.
#[inline(always)]
fn sync_children(ctx: &mut Ctx, id: u64, head: *mut Record, mut outstanding: usize) -> bool {
    while outstanding > 0 {
        match ctx.pop_own(id) {
            Some(j) => {
                outstanding -= 1;
                ctx.run_local(j);
            }
            // Every remaining child of this frame was stolen.
            None => return wait_stolen(ctx, head, true),
        }
    }
    false
}

/// Releases a synced frame's records and resumes the panic of its first panicked
/// child.
#[cold]
#[inline(never)]
fn sync_failed(ctx: &mut Ctx, head: *mut Record) -> ! {
    let p = take_first_panic(ctx, head);
    ctx.release_list(head);
    match p {
        Some(p) => panic::resume_unwind(p),
        None => panic::resume_unwind(Box::new("satin: a stolen child failed")),
    }
}

/// Marks a record published and pushes it onto the worker's deque.
#[inline]
fn publish(deque: &Worker<JobRef>, j: JobRef) {
    // SAFETY: the record is private to this worker (I2) until the push below, which
    // publishes it with Release semantics.
    unsafe { (*j.0.as_ptr()).state.store(PUBLISHED, Ordering::Relaxed) };
    deque.push(j);
}

/// Whether every record of a frame's list ran here or is done elsewhere.
fn all_done(head: *mut Record) -> bool {
    let mut p = head;
    while let Some(r) = NonNull::new(p) {
        // SAFETY: our own live records (I1); the state is atomic, `next` immutable.
        unsafe {
            let s = (*r.as_ptr()).state.load(Ordering::Acquire);
            if s == PUBLISHED || s == STOLEN {
                return false;
            }
            p = (*r.as_ptr()).next;
        }
    }
    true
}

/// Waits until every stolen child of the frame whose list starts at `head` stored
/// DONE; while waiting, runs other work if `help` (the ancestors' jobs of this worker,
/// then stolen jobs), then spins and parks. Returns whether a stolen child panicked.
#[cold]
#[inline(never)]
fn wait_stolen(ctx: &mut Ctx, head: *mut Record, help: bool) -> bool {
    let mut idle = 0u32;
    while !all_done(head) {
        if help {
            if let Some(j) = ctx.pop_any() {
                ctx.run_local(j);
                idle = 0;
                continue;
            }
            if ctx.steal_and_run() {
                idle = 0;
                continue;
            }
        }
        idle += 1;
        if idle < 64 {
            std::hint::spin_loop();
        } else if idle < 128 {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(std::time::Duration::from_micros(200));
        }
    }
    ctx.set_hungry(false);
    let mut p = head;
    while let Some(r) = NonNull::new(p) {
        // SAFETY: every child is DONE (Acquire observed) or ran here: we hold the
        // slots again (I2).
        unsafe {
            if (*r.as_ptr()).state.load(Ordering::Acquire) == PANICKED {
                return true;
            }
            p = (*r.as_ptr()).next;
        }
    }
    false
}

/// Takes the panic payloads of a synced frame's panicked children; returns the first.
fn take_first_panic(ctx: &mut Ctx, head: *mut Record) -> Option<Panic> {
    let mut first = None;
    let mut p = head;
    while let Some(r) = NonNull::new(p) {
        // SAFETY: the frame is synced: every child is DONE or PANICKED (Acquire
        // observed) or ran here, so we hold the slots again (I2).
        unsafe {
            if (*r.as_ptr()).state.load(Ordering::Acquire) == PANICKED {
                let payload = ctx.shared.take_panic(r.as_ptr() as usize);
                if first.is_none() {
                    first = payload;
                }
            }
            p = (*r.as_ptr()).next;
        }
    }
    first
}

impl Drop for Frame<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.head.is_null() {
            return; // synced, or nothing spawned
        }
        frame_drop_slow(self.ctx, self.id, self.head, self.outstanding);
    }
}

/// The implicit sync of a frame dropped unsynced (or while unwinding).
#[cold]
#[inline(never)]
fn frame_drop_slow(ctx: &mut Ctx, id: u64, head: *mut Record, outstanding: usize) {
    if std::thread::panicking() {
        abandon(ctx, id, head);
        return;
    }
    ctx.stats.syncs += 1;
    match panic::catch_unwind(AssertUnwindSafe(|| {
        sync_children(ctx, id, head, outstanding)
    })) {
        Ok(false) => ctx.release_list(head),
        Ok(true) => sync_failed(ctx, head),
        Err(p) => {
            // A child run here panicked: clean up as an unwinding frame does.
            abandon(ctx, id, head);
            panic::resume_unwind(p);
        }
    }
}

/// Ends a frame that unwinds: drops its children still queued here unrun, waits for
/// the stolen ones (without running other work), then releases every record.
fn abandon(ctx: &mut Ctx, id: u64, head: *mut Record) {
    while let Some(j) = ctx.pop_own(id) {
        // SAFETY: popped by us: we hold the slot; release() drops the job.
        unsafe { (*j.0.as_ptr()).state.store(DONE, Ordering::Relaxed) };
    }
    if wait_stolen(ctx, head, false) {
        drop(take_first_panic(ctx, head));
    }
    ctx.release_list(head);
}

/// A job taken from a worker's deque (FIFO end) by a thread outside the worker pool,
/// such as the network thread of the distributed layer.
///
/// It must be finished exactly once: [`StolenJob::complete_from_wire`],
/// [`StolenJob::fail`] or [`StolenJob::give_back`]. Dropping it gives it back.
pub struct StolenJob {
    rec: Option<JobRef>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StolenJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StolenJob")
            .field("name", &self.name())
            .finish()
    }
}

impl StolenJob {
    pub(crate) fn new(j: JobRef, shared: Arc<Shared>) -> Self {
        // SAFETY: the stealer handed the record to us alone (I2).
        unsafe { (*j.0.as_ptr()).state.store(STOLEN, Ordering::Relaxed) };
        StolenJob {
            rec: Some(j),
            shared,
        }
    }

    fn rec(&self) -> NonNull<Record> {
        self.rec.expect("StolenJob used after completion").0
    }

    /// The registered name of the job's type, if it is remote-capable.
    pub fn name(&self) -> Option<&'static str> {
        // SAFETY: the record is live while stolen and unfinished (I3).
        unsafe { ((*self.rec().as_ptr()).vtable.name)() }
    }

    /// Serializes the job for another process: `(type name, bytes)`, or `None` if the
    /// job type is not registered as remote-capable or fails to serialize (give it
    /// back then).
    pub fn to_wire(&self) -> Option<(&'static str, Vec<u8>)> {
        let r = self.rec();
        // SAFETY: we hold the slot (I2) and the vtable matches (I5).
        match unsafe { ((*r.as_ptr()).vtable.to_wire)(r) } {
            Some(Ok(w)) => Some(w),
            _ => None,
        }
    }

    /// Finishes the job with a result that came back as bytes (its serialized
    /// `Output`). On a decoding error the parent's sync panics with that error.
    pub fn complete_from_wire(mut self, bytes: &[u8]) -> Result<(), SatinError> {
        let r = self.rec();
        // SAFETY: we hold the slot until DONE (I2), vtable matches (I5).
        let res = unsafe { ((*r.as_ptr()).vtable.complete_wire)(r, bytes) };
        match &res {
            Ok(()) => self.finish(DONE),
            Err(e) => {
                self.shared
                    .put_panic(r.as_ptr() as usize, Box::new(e.to_string()));
                self.finish(PANICKED);
            }
        }
        res
    }

    /// Finishes the job with an error: the parent's sync panics with its message.
    pub fn fail(mut self, err: SatinError) {
        let r = self.rec();
        // The job stays in the slot; the parent's release drops it.
        self.shared
            .put_panic(r.as_ptr() as usize, Box::new(err.to_string()));
        self.finish(PANICKED);
    }

    /// Returns the job to the pool: a local worker will run it.
    pub fn give_back(mut self) {
        if let Some(j) = self.rec.take() {
            self.shared.injector.push(Injected::Record(j));
        }
    }

    fn finish(&mut self, state: u32) {
        if let Some(j) = self.rec.take() {
            // SAFETY: live until the DONE store; after it the owner may free it, so
            // the owner index is read first.
            unsafe {
                let owner = (*j.0.as_ptr()).owner as usize;
                (*j.0.as_ptr()).state.store(state, Ordering::Release);
                self.shared.wake_worker(owner);
            }
        }
    }
}

impl Drop for StolenJob {
    fn drop(&mut self) {
        if let Some(j) = self.rec.take() {
            self.shared.injector.push(Injected::Record(j));
        }
    }
}
