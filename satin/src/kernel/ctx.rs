//! The context of the job running on a worker: its private stack of spawned records,
//! its deque, the inlining threshold, and stealing from the other workers.

use super::abort;
use super::frame::Frame;
use super::record::{
    owner_depth, owner_index, owner_redone, JobRef, Record, RunFn, ABORT_BIT, DONE, LOCAL,
    MAX_WORKERS, PANICKED, PUBLISHED, STATE_MASK, STOLEN,
};
use super::record_pool::RecordPool;
use crate::runtime::{Injected, Rerun, ResultLookup, Shared};
use crate::stats::LocalStats;
use crate::Job;
use crossbeam_deque::{Steal, Worker};
use std::marker::PhantomData;
use std::mem;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

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
    pub(super) private: Vec<JobRef>,
    /// Index of the oldest unpublished record in `private` (the ones below were
    /// published; the vector is compacted when it empties).
    pub(super) private_base: usize,
    /// Whether another thread may steal from this worker (so one job is kept
    /// published); refreshed from `Shared` whenever the worker takes outside work.
    pub(super) thieves: bool,
    /// Whether the job running now runs in redo mode (see [`super::redo`]): its
    /// spawns are marked. Constant while a job runs its own code: every nested run
    /// that changes it restores it. Always `owner_redone(owner_tag)`.
    pub(super) redo: bool,
    /// The owner word spawns write into their records: the worker index, with
    /// `REDO_BIT` and the children's depth in redo mode (so the mark costs a spawn
    /// nothing; see `Ctx::tag_below`).
    pub(super) owner_tag: u32,
    /// Spawns run inline once this many private jobs wait.
    pub(super) inline_depth: usize,
    /// `private_base + inline_depth`: spawns run inline while `private.len()` is at
    /// least this (kept in step with `private_base`, so a spawn tests one field).
    pub(super) inline_at: usize,
    pub(crate) shared: Arc<Shared>,
    pub(super) next_frame_id: u64,
    rng: u64,
    pub(super) pool: RecordPool,
    /// Whether this worker is counted in `Shared::hungry` (it found no work).
    pub(super) hungry: bool,
    /// The records of the last synced frame whose results may still be read (its
    /// list's head, newest first).
    pub(super) deferred: *mut Record,
    /// The last (oldest) record of the `deferred` list.
    pub(super) deferred_tail: *mut Record,
    /// Whether a record of the `deferred` list needs its vtable's `release` (else
    /// the list goes back to the pool in one splice).
    pub(super) deferred_drops: bool,
    pub(crate) stats: LocalStats,
    /// This worker's reference to the result lookup, as of generation `lookup_gen`
    /// of `Shared`'s (`u64::MAX`: not read yet); used in redo mode only.
    pub(super) lookup: Option<Arc<dyn ResultLookup>>,
    pub(super) lookup_gen: u64,
    /// Offers made to the result lookup (numbers the offers, see `OfferToken`).
    pub(super) offers: u64,
    /// The abort flag of the job this worker runs for another worker or process (see
    /// [`super::abort`]): the state of its record, a wire job's `AbortHandle`, or
    /// `NEVER`.
    pub(super) abort_flag: *const AtomicU32,
    _not_send: PhantomData<*const ()>,
}

impl Ctx {
    pub(crate) fn new(worker: usize, deque: Worker<JobRef>, shared: Arc<Shared>) -> Ctx {
        // The upper bits of a record's owner word are the redo mark and depth; the
        // builder allows at most MAX_WORKERS workers.
        debug_assert!(worker < MAX_WORKERS && owner_index(worker as u32) == worker);
        Ctx {
            worker,
            deque,
            private: Vec::with_capacity(64),
            private_base: 0,
            thieves: shared.has_thieves(),
            redo: false,
            owner_tag: worker as u32,
            inline_depth: shared.inline_depth,
            inline_at: shared.inline_depth,
            shared,
            pool: RecordPool::new(),
            next_frame_id: 1,
            deferred: ptr::null_mut(),
            deferred_tail: ptr::null_mut(),
            deferred_drops: false,
            stats: LocalStats::default(),
            rng: 0x9E37_79B9_7F4A_7C15 ^ ((worker as u64 + 1) << 17),
            hungry: false,
            lookup: None,
            lookup_gen: u64::MAX,
            offers: 0,
            abort_flag: &abort::NEVER,
            _not_send: PhantomData,
        }
    }

    /// Opens a spawn frame: the scope of a group of spawns and their `sync`.
    ///
    /// Results of an earlier frame of this context can no longer be read after this
    /// (the borrow checker enforces it: its [`Synced`](super::Synced) and tickets borrow the context).
    /// Opening a frame costs nothing: its id is drawn, and the records of the last
    /// synced frame are recycled, only once it queues a child.
    #[inline(always)]
    pub fn frame(&mut self) -> Frame<'_> {
        Frame {
            ctx: self,
            id: 0,
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            drops: false,
            run: None,
            mixed: false,
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
        if let Some(head) = NonNull::new(head) {
            match NonNull::new(self.deferred_tail) {
                // SAFETY: the list of a dead frame of this worker (I3: the frame was
                // synced and no Synced of it is alive any more) from `head` to its
                // tail, none of whose records needs a release (`deferred_drops`).
                Some(tail) if !self.deferred_drops => unsafe { self.pool.free_chain(head, tail) },
                // SAFETY: the list's records belong to a dead frame of this worker (I3).
                _ => unsafe { self.pool.free_list(head) },
            }
        }
    }

    /// Releases the records of the frame synced before and keeps those of the frame
    /// just synced (list `head`..`tail`; `drops`: whether one needs a release) until
    /// no result of it can be read any more.
    #[inline(always)]
    pub(super) fn defer(&mut self, head: *mut Record, tail: *mut Record, drops: bool) {
        self.release_deferred();
        self.deferred = head;
        self.deferred_tail = tail;
        self.deferred_drops = drops;
    }

    /// Returns every record of a dead frame's list to the pool, dropping what their
    /// slots hold.
    #[inline(always)]
    pub(super) fn release_list(&mut self, head: *mut Record) {
        if let Some(head) = NonNull::new(head) {
            // SAFETY: the list's records belong to a dead frame of this worker (I3).
            unsafe { self.pool.free_list(head) };
        }
    }

    /// Pushes a fresh record onto the private stack; publishes the oldest private
    /// record if thieves could find nothing on the deque.
    #[inline(always)]
    pub(super) fn push_private(&mut self, j: JobRef) {
        self.private.push(j);
        if self.thieves && self.deque.is_empty() {
            self.publish_oldest();
        }
    }

    /// Moves the base of the private stack (and the inlining threshold with it).
    #[inline(always)]
    pub(super) fn set_private_base(&mut self, base: usize) {
        self.private_base = base;
        self.inline_at = base.saturating_add(self.inline_depth);
    }

    /// Runs a spawned job at once (enough work is queued for thieves already).
    #[inline(always)]
    pub(super) fn run_inline<J: Job>(&mut self, job: J) -> J::Output {
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
    pub(super) fn publish_all(&mut self) {
        for &j in &self.private[self.private_base..] {
            publish(&self.deque, j);
        }
        self.private.clear();
        self.set_private_base(0);
    }

    /// Takes the newest own record (private stack first, then the deque) if it belongs
    /// to frame `frame`; anything else stays where it is.
    #[inline(always)]
    pub(super) fn pop_own(&mut self, frame: u64) -> Option<JobRef> {
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
    ///
    /// A child of a frame with inlets is left where it is (`None`): its own frame's
    /// sync runs it, so that its error goes to the inlet.
    pub(super) fn pop_any(&mut self) -> Option<JobRef> {
        if self.private.len() > self.private_base {
            let j = *self.private.last()?;
            if caught(j) {
                return None;
            }
            return self.private.pop();
        }
        self.private.clear();
        self.set_private_base(0);
        let j = self.deque.pop()?;
        if caught(j) {
            // Still PUBLISHED: back where it was, for thieves or its frame.
            self.deque.push(j);
            return None;
        }
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
                            found = Some(Injected::Record(j, Rerun::AsMarked));
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
        if found.is_none() && n > 1 {
            found = self.steal_given_back();
        }
        self.stats.steal_nanos += start.elapsed().as_nanos() as u64;
        found
    }

    /// Takes the oldest record given back to another worker (that worker may be busy
    /// for long before its frame's sync gets to it).
    fn steal_given_back(&mut self) -> Option<Injected> {
        let n = self.shared.inboxes.len();
        let first = (self.next_rand() % n as u64) as usize;
        (0..n)
            .map(|k| (first + k) % n)
            .filter(|&v| v != self.worker)
            .find_map(|v| self.shared.inboxes[v].take_oldest())
            .map(|g| Injected::Record(g.job, g.rerun))
    }

    /// Takes a record of frame `frame` given back to this worker (by the result lookup
    /// or the external stealer) and runs it (`run`), or marks it `DONE` unrun (the
    /// frame unwinds; its release drops the job). Returns whether there was one.
    #[inline]
    pub(super) fn take_given_back(&mut self, frame: u64, run: bool) -> bool {
        let inbox = &self.shared.inboxes[self.worker];
        if inbox.is_empty() {
            return false;
        }
        self.take_given_back_slow(frame, run)
    }

    #[cold]
    #[inline(never)]
    fn take_given_back_slow(&mut self, frame: u64, run: bool) -> bool {
        let Some(g) = self.shared.inboxes[self.worker].take_frame(frame) else {
            return false;
        };
        if run {
            self.set_hungry(false);
            self.execute_stolen(g.job, g.rerun);
        } else {
            // SAFETY: a record of our frame `frame`, live while the frame waits (I3);
            // given back through our inbox, whose lock ordered the giver's last access
            // before ours: we hold the slot (I2). Not run: the release drops the job.
            unsafe { (*g.job.0.as_ptr()).state.store(DONE, Ordering::Relaxed) };
        }
        true
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
            Injected::Record(j, rerun) => self.execute_stolen(j, rerun),
            Injected::Task { run, redo } => {
                if redo {
                    self.stats.redo_jobs += 1;
                }
                // A redone root or wire job is at depth 0 of its redone subtree.
                let tag = self.tag_below(redo.then_some(0));
                // Not a descendant of a job this worker may be running below it: a root
                // nobody aborts (a wire job's closure sets its own flag). The closures
                // catch every panic, so the flag is put back.
                let was_flag = mem::replace(&mut self.abort_flag, &abort::NEVER);
                self.with_tag(tag, run);
                self.abort_flag = was_flag;
                self.release_deferred();
            }
        }
    }

    /// Runs a record owned by this worker that was popped from its own stack or deque
    /// by the sync of its frame, outside redo mode (in redo mode:
    /// [`Ctx::run_local_redo`], which may hand the record to the result lookup).
    #[inline(always)]
    pub(super) fn run_local(&mut self, j: JobRef) {
        self.run_local_as(j, None)
    }

    /// [`Ctx::run_local`] with the `run` of the record's vtable if the caller knows
    /// it (`Frame::run`: the frame's children all have it). Where the frame is
    /// inlined it is a constant, and the call goes straight to the job type's `run`,
    /// which the compiler can inline into the sync.
    #[inline(always)]
    pub(super) fn run_local_as(&mut self, j: JobRef, run: Option<RunFn>) {
        debug_assert!(!self.redo, "a record run in redo mode without its offer");
        let r = j.0;
        let run = match run {
            Some(run) => run,
            // SAFETY: the record is live because its frame is suspended below us on
            // this thread (I3); the vtable is immutable.
            None => unsafe { (*r.as_ptr()).vtable.run },
        };
        // SAFETY: we popped it from our own stack or deque, so we hold the slot (I2)
        // and its state is QUEUED or LOCAL, which its frame counts as done once it is
        // popped; `run` is the record's own vtable's (I5: a given `run` equals the
        // `run` of every record of the popping frame's).
        unsafe { run(r, self) }
    }

    /// Runs a record popped by a waiting sync from any frame of this worker (an
    /// ancestor's frame may have been spawned in another mode) in the mode of its
    /// mark. (Whether it ran here does not matter: the waiting sync checks states.)
    pub(super) fn run_own_any(&mut self, j: JobRef) {
        // SAFETY: popped from our own stack or deque: live (I3); `owner` is immutable.
        if owner_redone(unsafe { (*j.0.as_ptr()).owner }) {
            // Offered, then run in the mode of its depth.
            self.run_local_redo(j);
        } else {
            self.with_tag(self.worker as u32, |ctx| ctx.run_local(j));
        }
    }

    /// Runs a record that was stolen from another worker or given back by the
    /// external stealer or the result lookup; a panic is caught and handed to the
    /// parent. It runs in redo mode at the depth of its mark if it carries one, or at
    /// depth 0 (a redone job) if `rerun` says it was given back to be redone; a marked
    /// record is first offered to the result lookup unless `rerun` says it was
    /// offered already or is redone.
    pub(crate) fn execute_stolen(&mut self, j: JobRef, rerun: Rerun) {
        let r = j.0;
        // (A record given back by the external stealer may be picked up by its own
        // worker while its frame is suspended below on this stack: that is fine.)
        // SAFETY: crossbeam (or the inbox) handed this record to us alone (I2); it stays
        // live until we store DONE because its frame waits for DONE before releasing it
        // (I3).
        let rec = unsafe { &*r.as_ptr() };
        // Taken with a read-modify-write that keeps an abort of the frame's, and sees
        // one that came first.
        let prev = take_state(&rec.state);
        // SAFETY: live as above; the vtable and owner are immutable.
        let run = rec.vtable.run;
        let word = rec.owner;
        let owner = owner_index(word);
        if prev & ABORT_BIT != 0 {
            // Aborted before it started: not run.
            self.stats.aborted += 1;
            self.flush_stats();
            finish_state(&rec.state, DONE);
            self.shared.wake_worker(owner);
            return;
        }
        let marked = owner_redone(word);
        let (offer, depth) = match rerun {
            Rerun::AsMarked => (marked, marked.then(|| owner_depth(word))),
            Rerun::Offered => (false, marked.then(|| owner_depth(word))),
            Rerun::Redone => (false, Some(0)),
        };
        let redo = depth.is_some();
        let tag = self.tag_below(depth);
        let was = self.owner_tag;
        if tag != was {
            self.set_tag(tag);
        }
        // The job's abort flag is its record's state while it runs here.
        let was_flag = mem::replace(&mut self.abort_flag, &rec.state);
        let res = panic::catch_unwind(AssertUnwindSafe(|| {
            if offer {
                // SAFETY: we hold the slot (I2) of the live, unrun record.
                if unsafe { self.offer(j) }.is_none() {
                    return false;
                }
            }
            if redo {
                self.stats.redo_jobs += 1;
            }
            // SAFETY: we hold the slot (I2) and the vtable is the record's own (I5).
            unsafe { run(r, self) };
            true
        }));
        self.abort_flag = was_flag;
        if tag != was {
            self.set_tag(was);
        }
        self.release_deferred();
        let done = match res {
            Ok(true) => DONE,
            Ok(false) => {
                // The lookup took the record (it finishes it); not touched again.
                self.flush_stats();
                return;
            }
            // It stopped because its frame aborted it: done, without a result.
            Err(p) if abort::is_abort(&*p) => DONE,
            Err(p) => {
                self.shared.put_panic(r.as_ptr() as usize, p);
                PANICKED
            }
        };
        self.stats.stolen_executed += 1;
        self.flush_stats();
        // Live until this update (I3); after it the owner may release the record, so
        // it is not touched again.
        finish_state(&rec.state, done);
        self.shared.wake_worker(owner);
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

/// Whether a record of this worker is a child of a frame with inlets.
fn caught(j: JobRef) -> bool {
    // SAFETY: a record on our own stack or deque is live (I3); the vtable is immutable.
    unsafe { (*j.0.as_ptr()).vtable.take_err.is_some() }
}

/// Marks a record taken by a thief (`STOLEN`), keeping its flag bits; returns the state
/// before.
pub(super) fn take_state(state: &AtomicU32) -> u32 {
    // The closure always returns `Some`: the update cannot fail.
    match state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
        Some((s & !STATE_MASK) | STOLEN)
    }) {
        Ok(s) | Err(s) => s,
    }
}

/// Moves a `STOLEN` record to `to` (`DONE` or `PANICKED`), keeping its flag bits (an
/// abort of its frame's), with Release: the owner may read the slot, and release the
/// record, once it sees the new state.
pub(super) fn finish_state(state: &AtomicU32, to: u32) {
    debug_assert_eq!(state.load(Ordering::Relaxed) & STATE_MASK, STOLEN);
    state.fetch_add(to - STOLEN, Ordering::Release);
}

/// Marks a record published and pushes it onto the worker's deque.
#[inline]
fn publish(deque: &Worker<JobRef>, j: JobRef) {
    // SAFETY: the record is live and private to this worker (I2) until the push below,
    // which publishes it with Release semantics.
    unsafe { (*j.0.as_ptr()).state.store(PUBLISHED, Ordering::Relaxed) };
    deque.push(j);
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.release_deferred();
    }
}
