//! Inlets (thesis 8.2): children that may fail with an error value, and the code of
//! their spawner that handles each error in the spawner's own frame.
//!
//! A [`CatchFrame`] is a frame whose children return `Result<T, E>`. Its sync runs
//! the inlet, a closure of the spawner, for every child that returned `Err(e)`, as soon
//! as the sync sees it: after running an own child, or when a stolen one (on another
//! worker or process: the error travels back as the child's result) is done. Inlets
//! run on the spawner's thread between the sync's other steps, so never concurrently
//! with each other or with the spawner's code, and they may spawn more children into
//! the frame or abort it ([`Inlet::abort`]). An inlet that returns `Err(x)` aborts
//! every outstanding child and makes the sync return `Err(x)`: the spawner passes the
//! error up with `?` (Satin's rethrow from an inlet).
//!
//! The frame's records carry a second vtable of their job type
//! ([`CatchVTableOf`](super::record::CatchVTableOf)) whose `take_err` moves an error
//! out of a done slot; a catching spawn never runs its child inline (its error would
//! have no inlet to go to).

use super::abort::abort_children;
use super::ctx::Ctx;
use super::frame::{abandon, wait_step, Brand, Frame, Synced};
use super::record::{
    base_state, slot, CatchVTableOf, JobRef, Record, Slot, ABORT_BIT, DONE, PANICKED, PUBLISHED,
    SEEN_BIT, STOLEN,
};
use crate::Job;
use std::marker::PhantomData;
use std::panic;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;

/// A frame whose children may fail with an error of type `E` (their output is
/// `Result<T, E>`), handled by an inlet at [`CatchFrame::sync`].
///
/// ```
/// use satin::{Ctx, Job, Satin};
///
/// /// Fails with its number when it is odd.
/// struct Probe(u32);
/// impl Job for Probe {
///     type Output = Result<u32, u32>;
///     fn run(self, _: &mut Ctx) -> Result<u32, u32> {
///         if self.0 % 2 == 1 { Err(self.0) } else { Ok(self.0) }
///     }
/// }
///
/// /// Sums the even numbers below `n`; gives up once two odd ones failed.
/// struct Sum(u32);
/// impl Job for Sum {
///     type Output = (u32, u32);
///     fn run(self, ctx: &mut Ctx) -> (u32, u32) {
///         let mut f = ctx.catch_frame::<u32>();
///         let tickets: Vec<_> = (0..self.0).map(|i| f.spawn(Probe(i))).collect();
///         let mut failed = 0;
///         let r = f.sync(|inlet, _odd| -> Result<(), ()> {
///             failed += 1;
///             if failed == 2 {
///                 inlet.abort();
///             }
///             Ok(())
///         });
///         let r = r.unwrap();
///         let sum = tickets.into_iter().filter_map(|t| r.get_ok(t)).sum();
///         (sum, failed)
///     }
/// }
///
/// let satin = Satin::builder().workers(1).build().unwrap();
/// // One worker runs the children newest first: 9 fails, 8 is summed, 7 fails and
/// // the abort drops 0..=6.
/// assert_eq!(satin.run(Sum(10)), (8, 2));
/// ```
pub struct CatchFrame<'a, E> {
    frame: Frame<'a>,
    _err: PhantomData<fn(E) -> E>,
}

/// A ticket for the result of a child of a [`CatchFrame`]: [`Synced::get_ok`] gives
/// its value if it succeeded, `None` if it failed (its error went to the inlet) or was
/// aborted.
#[must_use = "a spawned result can only be read with its ticket"]
pub struct Caught<'a, J: Job> {
    rec: NonNull<Record>,
    _brand: Brand<'a, J>,
}

impl<J: Job> std::fmt::Debug for Caught<'_, J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Caught")
    }
}

/// The spawner's frame as an inlet sees it: spawn more children, abort them all.
pub struct Inlet<'f, 'a, E> {
    frame: &'f mut Frame<'a>,
    _err: PhantomData<fn(E) -> E>,
}

impl Ctx {
    /// Opens a frame whose children may fail with an `E` (see [`CatchFrame`]).
    #[inline]
    pub fn catch_frame<E: Send + 'static>(&mut self) -> CatchFrame<'_, E> {
        CatchFrame {
            frame: self.frame(),
            _err: PhantomData,
        }
    }
}

/// Queues a child of a catching frame (never inline).
#[inline]
fn spawn_caught<'a, T, E, J>(frame: &mut Frame<'a>, job: J) -> Caught<'a, J>
where
    J: Job<Output = Result<T, E>>,
    T: Send + 'static,
    E: Send + 'static,
{
    Caught {
        rec: frame.spawn_record(job, &CatchVTableOf::<T, E, J>::VT),
        _brand: PhantomData,
    }
}

impl<'a, E: Send + 'static> CatchFrame<'a, E> {
    /// Spawns a child that may fail with an `E`.
    #[inline]
    pub fn spawn<T: Send + 'static, J: Job<Output = Result<T, E>>>(
        &mut self,
        job: J,
    ) -> Caught<'a, J> {
        spawn_caught(&mut self.frame, job)
    }

    /// Makes the spawned children stealable at once (see [`Frame::publish`]).
    #[inline]
    pub fn publish(&mut self) {
        self.frame.publish();
    }

    /// The context, for sequential calls or nested frames.
    #[inline]
    pub fn ctx(&mut self) -> &mut Ctx {
        self.frame.ctx()
    }

    /// Aborts every child spawned so far (see [`Inlet::abort`]).
    pub fn abort(&mut self) {
        abort_children(self.frame.ctx, self.frame.id, self.frame.head);
    }

    /// Waits for every child, calling `inlet` in this frame for each child that
    /// failed, as soon as its error is seen. An inlet may spawn more children (the sync
    /// waits for them too) or abort the outstanding ones; if it returns `Err(x)`,
    /// every outstanding child is aborted and the sync returns `Err(x)` (once no other
    /// thread holds them).
    ///
    /// # Panics
    /// Resumes the panic of a child that panicked (after aborting the others).
    pub fn sync<X>(
        self,
        mut inlet: impl FnMut(&mut Inlet<'_, 'a, E>, E) -> Result<(), X>,
    ) -> Result<Synced<'a>, X> {
        let CatchFrame { mut frame, .. } = self;
        frame.ctx.stats.syncs += 1;
        // If a child run here or the inlet panics, the unwinding passes through the
        // frame's Drop, which aborts the children and waits for them.
        let res = catch_loop(&mut frame, &mut inlet);
        let head = std::mem::replace(&mut frame.head, ptr::null_mut());
        let id = frame.id;
        match res {
            Ok(()) => {
                if !head.is_null() {
                    frame.ctx.defer(head, frame.tail, frame.drops);
                }
                Ok(Synced {
                    id,
                    _brand: PhantomData,
                })
            }
            Err(x) => {
                if !head.is_null() {
                    abandon(frame.ctx, id, head);
                }
                Err(x)
            }
        }
    }
}

impl<'a, E: Send + 'static> Inlet<'_, 'a, E> {
    /// Spawns another child into the frame; the running sync waits for it too.
    #[inline]
    pub fn spawn<T: Send + 'static, J: Job<Output = Result<T, E>>>(
        &mut self,
        job: J,
    ) -> Caught<'a, J> {
        spawn_caught(self.frame, job)
    }

    /// Aborts every outstanding child of the frame: the ones queued here are dropped,
    /// the ones running elsewhere (other workers, other processes) are told to stop at
    /// their next safe point, with everything they spawned. Once this returns, no
    /// result of an aborted child is assigned ([`Synced::get_ok`] gives `None`) and no
    /// inlet runs for one. Children spawned after the abort run as usual.
    pub fn abort(&mut self) {
        abort_children(self.frame.ctx, self.frame.id, self.frame.head);
    }

    /// The context, for sequential calls or nested frames.
    #[inline]
    pub fn ctx(&mut self) -> &mut Ctx {
        self.frame.ctx()
    }
}

impl<'a> Synced<'a> {
    /// The value of a child of a [`CatchFrame`]: `Some` if it succeeded, `None` if it
    /// failed (the inlet had its error) or was aborted.
    ///
    /// # Panics
    /// If the ticket belongs to another frame (as [`Synced::get`]).
    pub fn get_ok<T, E, J: Job<Output = Result<T, E>>>(&self, ticket: Caught<'a, J>) -> Option<T> {
        let r = ticket.rec;
        // SAFETY: the ticket's record is live: it belongs to a frame of this worker
        // (tickets are !Send) whose records are released only once no Synced or ticket
        // of it can be used (I3); `frame_id` is immutable and the state atomic.
        let rec = unsafe { r.as_ref() };
        assert_eq!(
            rec.frame_id, self.id,
            "satin: ticket used with the results of another frame"
        );
        if rec.state.load(Ordering::Acquire) & ABORT_BIT != 0 {
            return None;
        }
        // SAFETY: the record belongs to this synced frame, so the owner holds the slot
        // (I2), and the ticket's `J` is the record's type (I5).
        let s = unsafe { slot::<J>(r) };
        // SAFETY: we hold the initialized slot; its value is moved out and `Empty` left
        // in its place, so nothing is dropped twice.
        match unsafe { ptr::replace(s, Slot::Empty) } {
            Slot::Done(Ok(v)) => Some(v),
            _ => None,
        }
    }
}

/// The error of a child of a catching frame that has run, if it failed.
///
/// # Safety
/// `r` is a live record of a catching frame of error type `E` (made by
/// [`spawn_caught`]), and this thread holds its slot (I2).
unsafe fn take_err<E>(r: NonNull<Record>) -> Option<E> {
    // SAFETY: live (the caller's contract); the vtable is immutable.
    let take = unsafe { r.as_ref() }.vtable.take_err?;
    let mut out: Option<E> = None;
    // SAFETY: the caller holds the slot; the record was made by `spawn_caught` for a
    // job of output `Result<_, E>`, so `take` writes an `Option<E>` (I5).
    unsafe { take(r, (&raw mut out).cast()) };
    out
}

/// What a look at the frame's stolen children found.
enum Look<E> {
    /// A child failed: its error.
    Failed(E),
    /// Some children are still away.
    Pending,
    /// Every child is done and looked at.
    Done,
}

/// Looks at the frame's children that ran elsewhere, each once: the first error found,
/// whether some are still away, or a panic (resumed).
fn look<E>(ctx: &mut Ctx, head: *mut Record) -> Look<E> {
    let mut pending = false;
    let mut p = head;
    while let Some(r) = NonNull::new(p) {
        // SAFETY: our own live records (I1, I3); the state is atomic and `next`
        // immutable until the list is released.
        let rec = unsafe { r.as_ref() };
        p = rec.next;
        let s = rec.state.load(Ordering::Acquire);
        if s & SEEN_BIT != 0 {
            continue;
        }
        let aborted = s & ABORT_BIT != 0;
        match base_state(s) {
            // Still in another thread's hands, aborted or not: the frame's records
            // live until it lets go of them.
            PUBLISHED | STOLEN => pending = true,
            // Aborted and done: no result, no inlet, no failure.
            PANICKED if aborted => {
                rec.state.fetch_or(SEEN_BIT, Ordering::Relaxed);
                drop(ctx.shared.take_panic(r.as_ptr() as usize));
            }
            _ if aborted => {}
            DONE => {
                // Done elsewhere (Acquire observed): the slot is ours again (I2).
                rec.state.fetch_or(SEEN_BIT, Ordering::Relaxed);
                // SAFETY: a record of this catching frame whose slot we hold.
                if let Some(e) = unsafe { take_err::<E>(r) } {
                    return Look::Failed(e);
                }
            }
            PANICKED => {
                rec.state.fetch_or(SEEN_BIT, Ordering::Relaxed);
                let payload = ctx.shared.take_panic(r.as_ptr() as usize);
                panic::resume_unwind(payload.unwrap_or_else(|| {
                    Box::new(crate::SatinError::Remote("a stolen child failed".into()))
                }));
            }
            // Ran here (its error, if any, went to the inlet then).
            _ => {}
        }
    }
    if pending {
        Look::Pending
    } else {
        Look::Done
    }
}

/// The sync of a catching frame: runs own children newest first and looks at the
/// stolen ones, calling the inlet for every error, until all are done.
fn catch_loop<'a, E, X>(
    frame: &mut Frame<'a>,
    inlet: &mut impl FnMut(&mut Inlet<'_, 'a, E>, E) -> Result<(), X>,
) -> Result<(), X> {
    let mut idle = 0u32;
    loop {
        if frame.head.is_null() {
            return Ok(()); // nothing spawned
        }
        while let Some(j) = frame.ctx.pop_own(frame.id) {
            if !run_own(frame.ctx, j) {
                continue; // the result lookup took it: it is away now
            }
            frame.outstanding -= 1;
            // SAFETY: a record of this catching frame that ran here: we hold its slot.
            if let Some(e) = unsafe { take_err::<E>(j.0) } {
                call(frame, inlet, e)?;
            }
        }
        match look::<E>(frame.ctx, frame.head) {
            Look::Failed(e) => {
                call(frame, inlet, e)?;
                idle = 0;
            }
            Look::Done => {
                frame.ctx.set_hungry(false);
                return Ok(());
            }
            Look::Pending => wait_step(frame.ctx, frame.id, true, &mut idle),
        }
    }
}

/// Runs an own child popped by the sync; `false` if the result lookup took it.
fn run_own(ctx: &mut Ctx, j: JobRef) -> bool {
    if ctx.redo {
        ctx.run_local_redo(j)
    } else {
        ctx.run_local(j);
        true
    }
}

fn call<'a, E, X>(
    frame: &mut Frame<'a>,
    inlet: &mut impl FnMut(&mut Inlet<'_, 'a, E>, E) -> Result<(), X>,
    e: E,
) -> Result<(), X> {
    frame.ctx.stats.inlets += 1;
    inlet(
        &mut Inlet {
            frame,
            _err: PhantomData,
        },
        e,
    )
}
