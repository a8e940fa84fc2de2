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
//! - A spawn writes the record and pushes a pointer to it onto the worker's
//!   crossbeam deque (owner LIFO, thieves FIFO). The most recently spawned child of a
//!   frame is *held* in the frame until the next spawn or the sync, which runs it first
//!   (it is the LIFO end anyway); only held-back children are not stealable.
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
//!   this thread (`LOCAL`), or was popped back and dropped unrun by this thread.
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

const QUEUED: u32 = 0;
const LOCAL: u32 = 1;
const STOLEN: u32 = 2;
const DONE: u32 = 3;
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

/// A per-worker free list of invocation records (no allocation per spawn).
pub(crate) struct RecordPool {
    free: Vec<NonNull<Record>>,
    chunks: Vec<Box<[MaybeUninit<Record>]>>,
}

const CHUNK: usize = 256;

impl RecordPool {
    pub(crate) fn new() -> Self {
        RecordPool {
            free: Vec::new(),
            chunks: Vec::new(),
        }
    }

    #[inline]
    fn alloc(&mut self) -> NonNull<Record> {
        match self.free.pop() {
            Some(r) => r,
            None => self.grow(),
        }
    }

    #[cold]
    fn grow(&mut self) -> NonNull<Record> {
        let mut chunk: Box<[MaybeUninit<Record>]> =
            (0..CHUNK).map(|_| MaybeUninit::uninit()).collect();
        let base = chunk.as_mut_ptr() as *mut Record;
        self.free.reserve(CHUNK);
        for i in 1..CHUNK {
            // SAFETY: `i < CHUNK`, so the pointer is inside the chunk allocation, which is
            // never freed before the pool (I4); boxes do not move their contents.
            self.free
                .push(unsafe { NonNull::new_unchecked(base.add(i)) });
        }
        self.chunks.push(chunk);
        // SAFETY: index 0 of the same live chunk.
        unsafe { NonNull::new_unchecked(base) }
    }

    #[inline]
    fn free(&mut self, r: NonNull<Record>) {
        self.free.push(r);
    }
}

/// The context of the job running on a worker: gives access to frames (spawn/sync).
///
/// Every [`Job::run`] receives `&mut Ctx`; it is not `Send` (a job runs to completion
/// on one worker thread).
pub struct Ctx {
    pub(crate) worker: usize,
    pub(crate) deque: Worker<JobRef>,
    pub(crate) shared: Arc<Shared>,
    pool: RecordPool,
    next_frame_id: u64,
    /// The records of the last synced frame whose results may still be read.
    deferred: *mut Record,
    pub(crate) stats: LocalStats,
    rng: u64,
    /// Whether this worker is counted in `Shared::hungry` (it found no work).
    hungry: bool,
    _not_send: PhantomData<*const ()>,
}

impl Ctx {
    pub(crate) fn new(worker: usize, deque: Worker<JobRef>, shared: Arc<Shared>) -> Ctx {
        Ctx {
            worker,
            deque,
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
    #[inline(always)]
    pub fn frame(&mut self) -> Frame<'_> {
        self.release_deferred();
        let id = self.next_frame_id;
        self.next_frame_id += 1;
        Frame {
            ctx: self,
            id,
            head: ptr::null_mut(),
            held: None,
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

    #[inline]
    pub(crate) fn release_deferred(&mut self) {
        if !self.deferred.is_null() {
            let head = mem::replace(&mut self.deferred, ptr::null_mut());
            self.release_list(head);
        }
    }

    /// Returns every record of a list to the pool, dropping what their slots hold.
    #[inline(always)]
    fn release_list(&mut self, mut head: *mut Record) {
        while let Some(r) = NonNull::new(head) {
            // SAFETY: `r` is a record of a dead frame of this worker (I3): no other
            // thread refers to it, and the vtable matches its slot (I5).
            unsafe {
                head = (*r.as_ptr()).next;
                if let Some(release) = (*r.as_ptr()).vtable.release {
                    release(r);
                }
            }
            self.pool.free(r);
        }
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

    /// Runs work found by the idle loop or by a waiting sync.
    pub(crate) fn execute(&mut self, w: Injected) {
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
        // SAFETY: we popped it from our own deque, so we hold the slot (I2); the record
        // is live because its frame is suspended below us on this thread (I3).
        unsafe {
            (*r.as_ptr()).state.store(LOCAL, Ordering::Relaxed);
            ((*r.as_ptr()).vtable.run)(r, self);
            (*r.as_ptr()).state.store(DONE, Ordering::Relaxed);
        }
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
    held: Option<JobRef>,
    /// Children not known to have run on this thread.
    outstanding: usize,
    _brand: PhantomData<fn(&'a ()) -> &'a ()>,
}

/// A ticket for a spawned job's result; redeem it with [`Synced::get`] after the
/// frame's sync. It cannot be read before, and belongs to its frame only.
#[must_use = "a spawned result can only be read with its ticket"]
pub struct Spawned<'a, J: Job> {
    rec: NonNull<Record>,
    _brand: Brand<'a, J>,
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
        let r = ticket.rec;
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
        ctx.stats.spawns += 1;
        if let Some(prev) = self.held.replace(JobRef(r)) {
            ctx.deque.push(prev);
        }
        Spawned {
            rec: r,
            _brand: PhantomData,
        }
    }

    /// Publishes the held-back newest child, making every spawned child of this frame
    /// stealable. Call it before long sequential work between the last spawn and the
    /// sync.
    #[inline]
    pub fn publish(&mut self) {
        if let Some(h) = self.held.take() {
            self.ctx.deque.push(h);
        }
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
        self.ctx.stats.syncs += 1;
        let panic = self.sync_children();
        let head = mem::replace(&mut self.head, ptr::null_mut());
        // The frame is now empty: its Drop does nothing.
        if let Some(p) = panic {
            self.ctx.release_list(head);
            panic::resume_unwind(p);
        }
        self.ctx.release_deferred();
        self.ctx.deferred = head;
        Synced {
            id: self.id,
            _brand: PhantomData,
        }
    }

    /// Runs own children from the deque, then waits for stolen ones. Returns the
    /// first panic payload of a stolen child.
    #[inline(always)]
    fn sync_children(&mut self) -> Option<Panic> {
        if let Some(h) = self.held.take() {
            self.outstanding -= 1;
            self.ctx.run_local(h);
        }
        while self.outstanding > 0 {
            match self.ctx.deque.pop() {
                Some(j) => {
                    // SAFETY: records on our deque are live (I3); frame_id is immutable.
                    if unsafe { (*j.0.as_ptr()).frame_id } == self.id {
                        self.outstanding -= 1;
                        self.ctx.run_local(j);
                    } else {
                        // Not ours: every remaining child of this frame was stolen.
                        self.ctx.deque.push(j);
                        break;
                    }
                }
                None => break,
            }
        }
        if self.outstanding > 0 {
            self.wait_stolen(true)
        } else {
            None
        }
    }

    fn all_done(&self) -> bool {
        let mut p = self.head;
        while let Some(r) = NonNull::new(p) {
            // SAFETY: our own live records (I1); the state is atomic, `next` immutable.
            unsafe {
                let s = (*r.as_ptr()).state.load(Ordering::Acquire);
                if s != DONE && s != LOCAL && s != PANICKED {
                    return false;
                }
                p = (*r.as_ptr()).next;
            }
        }
        true
    }

    /// Waits until every stolen child stored DONE; while waiting, runs other work if
    /// `help` (the ancestors' jobs on our deque, then stolen jobs), then spins and
    /// parks. Returns the first panic payload of a stolen child.
    #[cold]
    fn wait_stolen(&mut self, help: bool) -> Option<Panic> {
        let mut idle = 0u32;
        while !self.all_done() {
            if help {
                if let Some(j) = self.ctx.deque.pop() {
                    self.ctx.run_local(j);
                    idle = 0;
                    continue;
                }
                if let Some(w) = self.ctx.steal_work() {
                    self.ctx.set_hungry(false);
                    self.ctx.execute(w);
                    idle = 0;
                    continue;
                }
                self.ctx.set_hungry(true);
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
        self.ctx.set_hungry(false);
        let mut first = None;
        let mut p = self.head;
        while let Some(r) = NonNull::new(p) {
            // SAFETY: every child is DONE (Acquire observed) or ran here: we hold the
            // slots again (I2).
            unsafe {
                if (*r.as_ptr()).state.load(Ordering::Acquire) == PANICKED {
                    let payload = self.ctx.shared.take_panic(r.as_ptr() as usize);
                    if first.is_none() {
                        first = payload;
                    }
                }
                p = (*r.as_ptr()).next;
            }
        }
        first
    }
}

impl Drop for Frame<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.head.is_null() {
            return; // synced, or nothing spawned
        }
        self.drop_slow();
    }
}

impl Frame<'_> {
    #[cold]
    fn drop_slow(&mut self) {
        if std::thread::panicking() {
            // Unwinding: drop the children still queued here unrun, wait for stolen
            // ones (without running other work), then release everything.
            if let Some(h) = self.held.take() {
                // SAFETY: the held record was never published: we hold its slot.
                unsafe { (*h.0.as_ptr()).state.store(DONE, Ordering::Relaxed) };
            }
            while let Some(j) = self.ctx.deque.pop() {
                // SAFETY: records on our deque are live (I3).
                if unsafe { (*j.0.as_ptr()).frame_id } == self.id {
                    // SAFETY: popped by us: we hold the slot; release() drops the job.
                    unsafe { (*j.0.as_ptr()).state.store(DONE, Ordering::Relaxed) };
                } else {
                    self.ctx.deque.push(j);
                    break;
                }
            }
            let _ = self.wait_stolen(false);
            let head = self.head;
            self.ctx.release_list(head);
        } else {
            self.ctx.stats.syncs += 1;
            let p = self.sync_children();
            let head = self.head;
            self.ctx.release_list(head);
            if let Some(p) = p {
                panic::resume_unwind(p);
            }
        }
    }
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
