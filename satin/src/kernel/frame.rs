//! A frame (a group of spawns and their sync), the tickets of its children and the
//! results of a synced frame; the sync paths: running own children, waiting for stolen
//! ones, and the implicit sync of a dropped or unwinding frame.

use super::abort;
use super::ctx::Ctx;
use super::record::{
    base_state, init_header, init_slot, needs_release, slot, JobRef, Record, RunFn, Slot, VTable,
    VTableOf, ABORT_BIT, PANICKED, PUBLISHED, STOLEN,
};
use crate::Job;
use std::any::Any;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;

/// A panic payload carried from a thief back to the parent.
pub(super) type Panic = Box<dyn Any + Send + 'static>;
/// An invariant lifetime brand that also makes the branded type `!Send`.
pub(super) type Brand<'a, T> = PhantomData<(fn(&'a ()) -> &'a (), *const T)>;

/// A group of spawned jobs and their sync (one per `sync` in a Satin method).
///
/// Dropping a frame without calling [`Frame::sync`] is an implicit sync: it waits for
/// all children; their results are dropped.
pub struct Frame<'a> {
    pub(super) ctx: &'a mut Ctx,
    /// The frame's id (0 until its first child is queued; 0 matches no record).
    pub(super) id: u64,
    /// The newest record of the frame's list (null: nothing queued, or synced).
    pub(super) head: *mut Record,
    /// The oldest record of the frame's list (its first child; valid while `head`
    /// is not null).
    pub(super) tail: *mut Record,
    /// Whether a record of the list needs its vtable's `release` (known per job
    /// type at compile time).
    pub(super) drops: bool,
    /// The `run` of the vtable of the last spawned child's job type, inlined or not
    /// (`None`: nothing spawned yet).
    pub(super) run: Option<RunFn>,
    /// Whether two spawns of the frame had different `run`s. If not, every record of
    /// the frame has `run`: where the frame is inlined and spawns one job type, both
    /// are constants (the test of each spawn folds), and the sync calls the
    /// children's `run` directly (see [`Ctx::run_local_as`]).
    pub(super) mixed: bool,
    /// Children not known to have run on this thread.
    pub(super) outstanding: usize,
    pub(super) _brand: PhantomData<fn(&'a ()) -> &'a ()>,
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
    pub(super) id: u64,
    pub(super) _brand: Brand<'a, ()>,
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
        // (tickets are !Send) whose records are released only once no Synced or ticket
        // of it can be used (I3); `frame_id` is immutable.
        let frame_id = unsafe { (*r.as_ptr()).frame_id };
        assert_eq!(
            frame_id, self.id,
            "satin: ticket used with the results of another frame"
        );
        // SAFETY: the record belongs to this synced frame (frame ids are unique per
        // worker), so the owner holds the slot (I2), and the ticket's `J` is the
        // record's type (I5).
        let s = unsafe { slot::<J>(r) };
        // SAFETY: we hold the initialized slot; the result is moved out and `Empty`
        // left in its place, so nothing is dropped twice.
        match unsafe { ptr::replace(s, Slot::Empty) } {
            Slot::Done(v) => v,
            _ => unreachable!("satin: result missing after sync"),
        }
    }
}

impl<'a> Frame<'a> {
    /// Spawns a child job. It may run on this worker at the sync, or be stolen by an
    /// idle worker (or, when the job type is remote-capable, by another process).
    #[inline(always)]
    pub fn spawn<J: Job>(&mut self, job: J) -> Spawned<'a, J> {
        if self.ctx.private.len() >= self.ctx.inline_at && !self.ctx.shared.any_hungry() {
            // Noted for inlined children too, so that `run` is the same constant on
            // every path to the sync.
            self.note_run(VTableOf::<J>::VT.run);
            let ctx = &mut *self.ctx;
            return Spawned {
                ticket: Ticket::Ready(ctx.run_inline(job)),
                _brand: PhantomData,
            };
        }
        Spawned {
            ticket: Ticket::Record(self.spawn_record(job, &VTableOf::<J>::VT)),
            _brand: PhantomData,
        }
    }

    /// Notes the `run` of a spawned child's job type (see `Frame::run`).
    #[inline(always)]
    fn note_run(&mut self, run: RunFn) {
        if let Some(f) = self.run {
            if !ptr::fn_addr_eq(f, run) {
                self.mixed = true;
            }
        }
        self.run = Some(run);
    }

    /// Queues `job` in a fresh record with the vtable `vt` (one of `J`'s, I5).
    #[inline(always)]
    pub(super) fn spawn_record<J: Job>(&mut self, job: J, vt: &'static VTable) -> NonNull<Record> {
        let ctx = &mut *self.ctx;
        if self.id == 0 {
            // The first queued child: a safe point (the running job may have been
            // aborted), and the frame gets its id (0 matches no record).
            if ctx.aborted() {
                abort::raise(ctx);
            }
            ctx.release_deferred();
            self.id = ctx.next_frame_id;
            ctx.next_frame_id += 1;
        }
        ctx.stats.queued += 1;
        let r = ctx.pool.alloc();
        // SAFETY: a fresh record from our pool, exclusively ours (I1), with nothing to
        // drop; all of it is written before it is published on the deque (push has
        // Release semantics). `vt` is one of `J`'s (the caller's contract).
        unsafe { init_header(r, ctx.owner_tag, self.id, self.head, vt) };
        // SAFETY: the record is ours (I1) and its slot uninitialized.
        unsafe { init_slot(r, job) };
        if self.head.is_null() {
            self.tail = r.as_ptr();
        }
        if needs_release::<J>() {
            self.drops = true;
        }
        self.head = r.as_ptr();
        self.outstanding += 1;
        ctx.push_private(JobRef(r));
        self.note_run(vt.run);
        r
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
            let failed = sync_children(
                self.ctx,
                self.id,
                head,
                self.outstanding,
                if self.mixed { None } else { self.run },
            );
            // The frame is now empty: its Drop does nothing.
            self.head = ptr::null_mut();
            if failed {
                sync_failed(self.ctx, head);
            }
            // The records of the frame synced before are dead: no Synced of it can
            // be alive while this frame borrows the context.
            self.ctx.defer(head, self.tail, self.drops);
        }
        Synced {
            id: self.id,
            _brand: PhantomData,
        }
    }
}

/// Runs a frame's own children from the private stack (then the deque), then waits
/// for stolen ones. Returns whether a stolen child panicked. `run`: the `run` all of
/// the frame's records share, if known (`Frame::run`).
#[inline(always)]
fn sync_children(
    ctx: &mut Ctx,
    id: u64,
    head: *mut Record,
    mut outstanding: usize,
    run: Option<RunFn>,
) -> bool {
    // The mode is the frame's job's own for the whole sync (nested runs restore it),
    // so one test per sync keeps the loop below as it is without redo mode.
    if ctx.redo {
        return sync_children_redo(ctx, id, head, outstanding);
    }
    while outstanding > 0 {
        match ctx.pop_own(id) {
            Some(j) => {
                outstanding -= 1;
                ctx.run_local_as(j, run);
            }
            // Every remaining child of this frame was stolen.
            None => return wait_stolen(ctx, id, head, true),
        }
    }
    false
}

/// [`sync_children`] in redo mode: each child is offered to the result lookup first.
#[cold]
#[inline(never)]
fn sync_children_redo(ctx: &mut Ctx, id: u64, head: *mut Record, mut outstanding: usize) -> bool {
    while outstanding > 0 {
        match ctx.pop_own(id) {
            Some(j) => {
                // A child the lookup took is STOLEN now: it stays outstanding (it has
                // not run here), so the frame waits for its DONE below.
                if ctx.run_local_redo(j) {
                    outstanding -= 1;
                }
            }
            None => return wait_stolen(ctx, id, head, true),
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
        None => panic::resume_unwind(Box::new(crate::SatinError::Remote(
            "a stolen child failed".into(),
        ))),
    }
}

/// Whether every record of a frame's list ran here or is done elsewhere.
fn all_done(head: *mut Record) -> bool {
    let mut p = head;
    while let Some(r) = NonNull::new(p) {
        // SAFETY: our own live records (I1, I3); a shared reference is sound while a
        // thief writes the slot (an `UnsafeCell`) or the state (atomic), and `next`
        // is immutable until the list is released.
        let rec = unsafe { r.as_ref() };
        let s = base_state(rec.state.load(Ordering::Acquire));
        if s == PUBLISHED || s == STOLEN {
            return false;
        }
        p = rec.next;
    }
    true
}

/// Waits until every stolen child of the frame `id` whose list starts at `head` stored
/// DONE. A child given back to this worker (by the result lookup or the external
/// stealer) is taken first: run here if `help`, else marked DONE unrun (the frame
/// unwinds). While waiting, runs other work if `help` (the ancestors' jobs of this
/// worker, then stolen jobs), then spins and parks. Returns whether a stolen child
/// panicked.
#[cold]
#[inline(never)]
fn wait_stolen(ctx: &mut Ctx, id: u64, head: *mut Record, help: bool) -> bool {
    let mut idle = 0u32;
    while !all_done(head) {
        wait_step(ctx, id, help, &mut idle);
    }
    ctx.set_hungry(false);
    let mut p = head;
    while let Some(r) = NonNull::new(p) {
        // SAFETY: our own live records (I1, I3); every child is DONE (Acquire
        // observed) or ran here, so no other thread touches them.
        let rec = unsafe { r.as_ref() };
        // An aborted child's panic is not the frame's failure.
        if rec.state.load(Ordering::Acquire) == PANICKED {
            return true;
        }
        p = rec.next;
    }
    false
}

/// One step of a sync waiting for children of frame `id` held elsewhere: a child given
/// back to this frame (run if `help`, else dropped), and if `help` a safe point for an
/// abort, other work of this worker, or stolen work; else a spin, yield or short park.
pub(super) fn wait_step(ctx: &mut Ctx, id: u64, help: bool, idle: &mut u32) {
    // Its own children first: a given-back child is run (or dropped) by its own frame,
    // so the nesting of runs on this stack stays that of the job tree.
    if ctx.take_given_back(id, help) {
        *idle = 0;
        return;
    }
    if help {
        // A safe point: the job waiting here may have been aborted.
        if ctx.aborted() {
            abort::raise(ctx);
        }
        if let Some(j) = ctx.pop_any() {
            ctx.run_own_any(j);
            *idle = 0;
            return;
        }
        if ctx.steal_and_run() {
            *idle = 0;
            return;
        }
    }
    *idle += 1;
    if *idle < 64 {
        std::hint::spin_loop();
    } else if *idle < 128 {
        std::thread::yield_now();
    } else {
        std::thread::park_timeout(std::time::Duration::from_micros(200));
    }
}

/// Takes the panic payloads of a synced frame's panicked children; returns the first.
fn take_first_panic(ctx: &mut Ctx, head: *mut Record) -> Option<Panic> {
    let mut first = None;
    let mut p = head;
    while let Some(r) = NonNull::new(p) {
        // SAFETY: our own live records (I1, I3); the frame is synced: every child is
        // DONE or PANICKED (Acquire observed) or ran here, so no other thread touches
        // them (I2).
        let rec = unsafe { r.as_ref() };
        let s = rec.state.load(Ordering::Acquire);
        if base_state(s) == PANICKED {
            let payload = ctx.shared.take_panic(r.as_ptr() as usize);
            // An aborted child's panic is dropped (the frame did not want it).
            if first.is_none() && s & ABORT_BIT == 0 {
                first = payload;
            }
        }
        p = rec.next;
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
        sync_children(ctx, id, head, outstanding, None)
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

/// Ends a frame that unwinds: drops its children still queued here or given back to
/// it unrun, aborts the stolen ones and waits for them to stop (without running other
/// work), then releases every record.
pub(super) fn abandon(ctx: &mut Ctx, id: u64, head: *mut Record) {
    abort::abort_children(ctx, id, head);
    if wait_stolen(ctx, id, head, false) {
        drop(take_first_panic(ctx, head));
    }
    ctx.release_list(head);
}
