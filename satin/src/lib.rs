//! Satin: divide-and-conquer parallelism with `spawn`/`sync`, work stealing, and
//! serialization on demand (van Nieuwpoort, Kielmann and Bal, Euro-Par 2000).
//!
//! A job is ordinary Rust: a value implementing [`Job`]. Inside a job, children are
//! spawned in a [`Frame`]; their results can only be read from the [`Synced`] value
//! that [`Frame::sync`] returns, with the [`Spawned`] ticket each spawn gave:
//!
//! ```
//! use satin::{Ctx, Job, Satin};
//!
//! struct Fib(u32);
//! impl Job for Fib {
//!     type Output = u64;
//!     fn run(self, ctx: &mut Ctx) -> u64 {
//!         if self.0 < 2 {
//!             return self.0 as u64;
//!         }
//!         let mut f = ctx.frame();
//!         let a = f.spawn(Fib(self.0 - 1));
//!         let b = f.spawn(Fib(self.0 - 2));
//!         let r = f.sync();
//!         r.get(a) + r.get(b)
//!     }
//! }
//!
//! let satin = Satin::builder().workers(2).build().unwrap();
//! assert_eq!(satin.run(Fib(20)), 6765);
//! ```
//!
//! Semantics:
//! - With one worker a program computes exactly its sequential result; the children of
//!   a frame run at its sync, newest first (the LIFO end of the job queue, as in Satin).
//! - Dropping a frame without `sync` is an implicit sync (results are dropped).
//! - A spawn never copies or serializes the job (invocation records hold it in place);
//!   only a job stolen by another process is serialized, and only types registered with
//!   `#[satin::job]` can be ([`Job::REMOTE`]).
//! - The newest child of a frame is held back until the next spawn or the sync (it is
//!   the first one the sync would run anyway); call [`Frame::publish`] to make it
//!   stealable before long sequential work.
//! - A panic in a job unwinds to the parent (aborting its children still running on
//!   other workers and waiting for them to stop) and is propagated by [`Satin::run`] on the caller's thread, or
//!   returned as [`SatinError::JobPanicked`] by [`Satin::try_run`]; the pool keeps
//!   working.

//!
//! - Children that may fail return `Result<T, E>` and are spawned in a [`CatchFrame`],
//!   whose sync runs an inlet for each error in the spawner's frame; an inlet may
//!   spawn more children or [abort](Inlet::abort) the outstanding ones, on every worker
//!   and process (see the README's "Inlets and abort").
//!
//! Configuration: every setting is a [`SatinBuilder`] option; the `SATIN_*`
//! environment variables are one layer under the builder's settings, read in one
//! place ([`env`](mod@env)).
//!
//! Applications (fib, nqueens, ...) are not part of this crate: they live in the
//! `ibis-apps` crate of the examples.

// Only the scheduling kernel (`kernel`) holds unsafe code; its safety argument is in
// its module root.
#![deny(unsafe_code)]

extern crate self as satin;

mod error;
#[allow(unsafe_code)]
mod kernel;
mod runtime;
mod stats;
mod wire;

pub mod dist;
pub mod env;
pub mod shared;

pub use dist::{launched, DistConfig, MemberStats, Pool, PoolRun, PoolStats};
pub use error::SatinError;
pub use kernel::{
    AbortHandle, CatchFrame, Caught, Ctx, Frame, Inlet, Spawned, StolenJob, Synced, INLINE_BYTES,
    MAX_REDO_DEPTH, MAX_WORKERS,
};
pub use runtime::{
    ExternalStealer, ResultLookup, Satin, SatinBuilder, DEFAULT_INLINE_DEPTH, DEFAULT_REDO_DEPTH,
};
/// The inter-node scheduler core the distributed layer drives.
pub use satin_core;
pub use shared::{Replicated, Shared};
pub use stats::{NetCounters, NetStats, Stats, WorkerStats};
pub use wire::{to_wire, ErasedJob, JobRegistration, JobRegistry, Remote};

/// Marks an `impl Job for T` as remote-capable: `T` and its `Output` must implement
/// serde's `Serialize` and `DeserializeOwned`; the type is registered by name
/// (`module_path::T`, or `#[satin::job(name = "...")]`) so another process can rebuild
/// it.
pub use satin_macros::job;

/// A divide-and-conquer job (a Satin method invocation with its parameters).
pub trait Job: Send + Sized + 'static {
    /// The result type.
    type Output: Send + 'static;

    /// Runs the job. Spawn children through `ctx.frame()`.
    fn run(self, ctx: &mut Ctx) -> Self::Output;

    /// The wire operations if the type may be stolen by another process; written by
    /// `#[satin::job]`, `None` otherwise.
    const REMOTE: Option<Remote<Self>> = None;

    /// The job's *guard* (Satin's `guard_<method>`): whether the [`Shared`] objects it
    /// reads are in a state it may run on, typically that the writes its spawner made
    /// before spawning it have arrived (`self.bodies.read(|b| b.iteration) ==
    /// self.iteration`). Evaluated only for a job that came from another process,
    /// before it runs; while it is false the worker waits for writes and fetches the
    /// sender's copies (see the [`shared`] module). Jobs that stay in their process
    /// are not guarded. The default holds always.
    fn guard(&self) -> bool {
        true
    }
}

#[doc(hidden)]
pub mod __private {
    pub use inventory;
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
