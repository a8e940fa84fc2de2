//! Configuring and starting a Satin instance. A setting is taken from the builder if
//! it was set there, else from the environment layer ([`crate::env`]), else its
//! default.

use super::shared::Shared;
use super::worker::worker_main;
use super::Satin;
use crate::dist::DistConfig;
use crate::error::SatinError;
use crate::kernel::{Ctx, MAX_WORKERS};
use crate::wire::JobRegistry;
use crate::Job;
use satin_core::Policy;
use std::time::Duration;

/// The default of [`SatinBuilder::inline_depth`].
pub const DEFAULT_INLINE_DEPTH: usize = 4;

/// The default of [`SatinBuilder::redo_depth`]: 12 levels below a redone job.
///
/// Saved results are only ever results of jobs that crossed processes (stolen jobs
/// and orphans), and thieves take their victims' oldest, i.e. shallowest, jobs, so
/// those results sit a few levels below the redone job: the splits of a binary
/// divide-and-conquer tree among the pool happen in its top `log2(workers)` levels
/// plus a few for later steals, and 12 levels hold 4096 subtrees. A bound of 12 keeps
/// the cost of a redo to at most 2^13 - 2 = 8190 lookups below a binary redone job
/// (satin-bench's `satin.redo.*` figures), where an unbounded redo of a fine-grained
/// program offers every call (millions of lookups). A saved result deeper than the
/// bound is recomputed: the bound costs reuse, never correctness.
pub const DEFAULT_REDO_DEPTH: usize = 12;

/// Every setting of a Satin instance, resolved: the defaults, with the environment
/// layer and the builder's settings applied on top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    /// See [`SatinBuilder::inline_depth`].
    pub(crate) inline_depth: usize,
    /// See [`SatinBuilder::redo_depth`].
    pub(crate) redo_depth: usize,
    /// See [`SatinBuilder::guard_patience`].
    pub(crate) guard_patience: Duration,
    /// The settings of the distributed layer.
    pub(crate) dist: DistConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            inline_depth: DEFAULT_INLINE_DEPTH,
            redo_depth: DEFAULT_REDO_DEPTH,
            guard_patience: crate::shared::GuardPolicy::default().patience,
            dist: DistConfig::default(),
        }
    }
}

/// Configures and starts a [`Satin`] instance.
///
/// Settings that the environment may also give (`SATIN_INLINE_DEPTH`,
/// `SATIN_REDO_DEPTH`, `SATIN_POLICY`, `SATIN_STEAL_BACKOFF_US`, see [`crate::env`]) are taken from the builder when set
/// here, else from the environment, else from their defaults;
/// [`SatinBuilder::use_env`]`(false)` ignores the environment.
#[derive(Debug)]
pub struct SatinBuilder {
    workers: Option<usize>,
    inline_depth: Option<usize>,
    redo_depth: Option<usize>,
    policy: Option<Policy>,
    steal_backoff: Option<Duration>,
    guard_patience: Option<Duration>,
    join_timeout: Option<Duration>,
    end_timeout: Option<Duration>,
    save_results: Option<bool>,
    checkpoint_dir: Option<std::path::PathBuf>,
    checkpoint_interval: Option<Duration>,
    adaptive: Option<bool>,
    adapt_period: Option<Duration>,
    registry: Option<JobRegistry>,
    use_env: bool,
}

impl Default for SatinBuilder {
    fn default() -> Self {
        SatinBuilder {
            workers: None,
            inline_depth: None,
            redo_depth: None,
            policy: None,
            steal_backoff: None,
            guard_patience: None,
            join_timeout: None,
            end_timeout: None,
            save_results: None,
            checkpoint_dir: None,
            checkpoint_interval: None,
            adaptive: None,
            adapt_period: None,
            registry: None,
            use_env: true,
        }
    }
}

impl SatinBuilder {
    /// Number of worker threads (default: `std::thread::available_parallelism`), at
    /// most [`MAX_WORKERS`](crate::MAX_WORKERS) (more is a [`SatinError::Config`] when
    /// the instance is built).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n.max(1));
        self
    }

    /// Adaptive inlining: once a worker holds `depth` spawned jobs that have not
    /// started, further spawns run at once as plain calls (their tickets carry the
    /// result) instead of being queued. The queued jobs are the oldest and largest, the
    /// ones thieves take, so this keeps the parallelism and drops the cost of jobs too
    /// deep to be stolen. `usize::MAX` queues every spawn. Default:
    /// [`DEFAULT_INLINE_DEPTH`] (environment: `SATIN_INLINE_DEPTH`).
    pub fn inline_depth(mut self, depth: usize) -> Self {
        self.inline_depth = Some(depth);
        self
    }

    /// Bounds redo mode by depth (fault tolerance, see
    /// [`ResultLookup`](crate::ResultLookup)): the jobs spawned in a redone subtree
    /// down to `depth` levels below the redone job (its children are at depth 1) are
    /// marked, get records and are offered to the result lookup before they run;
    /// deeper jobs run in normal mode (adaptive inlining on, no offers), so a saved
    /// result deeper than that is recomputed. The redone job is a root restarted by a
    /// new master, a job given back to be redone, or a redone job that came from
    /// another process (whose depth starts at 0 again there). `0` offers nothing;
    /// [`MAX_REDO_DEPTH`](crate::MAX_REDO_DEPTH) or more (`usize::MAX`) means no bound.
    /// Default: [`DEFAULT_REDO_DEPTH`], which says why (environment:
    /// `SATIN_REDO_DEPTH`).
    pub fn redo_depth(mut self, depth: usize) -> Self {
        self.redo_depth = Some(depth);
        self
    }

    /// The load-balancing policy between the processes of a pool (default: CRS;
    /// environment: `SATIN_POLICY`). Used by
    /// [`SatinBuilder::build_distributed`](crate::SatinBuilder::build_distributed).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The pause after an unsuccessful synchronous steal from another process before
    /// the next one (default: none; environment: `SATIN_STEAL_BACKOFF_US`).
    pub fn steal_backoff(mut self, pause: Duration) -> Self {
        self.steal_backoff = Some(pause);
        self
    }

    /// How long a job that came from another process waits for its
    /// [`Job::guard`](crate::Job::guard) to hold (pushed writes, then fetches of the
    /// sender's copies) before it fails with [`SatinError::GuardTimeout`] (default
    /// 30 s; environment: `SATIN_GUARD_PATIENCE_MS`).
    pub fn guard_patience(mut self, patience: Duration) -> Self {
        self.guard_patience = Some(patience);
        self
    }

    /// The bound of every wait of joining a pool (see [`DistConfig::join_timeout`]).
    pub fn join_timeout(mut self, timeout: Duration) -> Self {
        self.join_timeout = Some(timeout);
        self
    }

    /// The bound of every wait of the end of a pool's run (see
    /// [`DistConfig::end_timeout`]).
    pub fn end_timeout(mut self, timeout: Duration) -> Self {
        self.end_timeout = Some(timeout);
        self
    }

    /// Whether a pool's members keep the results of the jobs they computed for
    /// others, announce them when a member dies and look them up while redoing lost
    /// work (default `true`; environment: `SATIN_SAVE_RESULTS=0|1`). With `false` a
    /// crash's lost work is recomputed from scratch: for comparing the two.
    pub fn save_results(mut self, on: bool) -> Self {
        self.save_results = Some(on);
        self
    }

    /// A directory where every member of a pool checkpoints its saved results
    /// (`<fingerprint>-<member name>.ckpt`, written atomically every
    /// [`SatinBuilder::checkpoint_interval`]) and where the master of a later run
    /// finds them, so that a run killed whole resumes with the work it had done
    /// (environment: `SATIN_CHECKPOINT_DIR`; default none). A successful run removes
    /// the files. Needs [`SatinBuilder::save_results`].
    ///
    /// Checkpoints are reused only by the same executable run with the same
    /// arguments and the same `SATIN_CHECKPOINT_TAG` (the fingerprint in every file):
    /// a job's result must depend only on its serialized parameters and the
    /// program's arguments.
    pub fn checkpoint_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.checkpoint_dir = Some(dir.into());
        self
    }

    /// How often a member writes its checkpoint, when its saved results changed
    /// (default 10 s; environment: `SATIN_CHECKPOINT_INTERVAL_MS`).
    pub fn checkpoint_interval(mut self, every: Duration) -> Self {
        self.checkpoint_interval = Some(every);
        self
    }

    /// Whether a pool adapts its size to its efficiency (default `false`;
    /// environment: `SATIN_ADAPT=0|1`): every member measures its idle and
    /// communication time per period and the master asks `ipl-run --malleable` for
    /// more members or removes the least efficient ones (see "Adaptivity" in
    /// [`crate::dist`]).
    pub fn adaptive(mut self, on: bool) -> Self {
        self.adaptive = Some(on);
        self
    }

    /// The monitoring period of [`SatinBuilder::adaptive`] (default 2 s;
    /// environment: `SATIN_ADAPT_PERIOD_MS`).
    pub fn adapt_period(mut self, every: Duration) -> Self {
        self.adapt_period = Some(every);
        self
    }

    /// Whether the environment layer applies (default `true`); with `false` only the
    /// builder's settings and the defaults count.
    pub fn use_env(mut self, yes: bool) -> Self {
        self.use_env = yes;
        self
    }

    /// Registers a remote-capable job type explicitly (besides the `#[satin::job]`
    /// types, which are found automatically).
    pub fn job<J: Job>(mut self) -> Self {
        self.registry
            .get_or_insert_with(JobRegistry::from_inventory)
            .add::<J>();
        self
    }

    /// The resolved settings: the defaults, then the environment layer, then what was
    /// set on this builder.
    fn config(&self) -> Result<Config, SatinError> {
        let mut c = Config::default();
        if self.use_env {
            crate::env::apply(&mut c)?;
        }
        if let Some(d) = self.inline_depth {
            c.inline_depth = d;
        }
        if let Some(d) = self.redo_depth {
            c.redo_depth = d;
        }
        if let Some(p) = self.policy {
            c.dist.policy = p;
        }
        if let Some(b) = self.steal_backoff {
            c.dist.steal_backoff = b;
        }
        if let Some(p) = self.guard_patience {
            c.guard_patience = p;
        }
        if let Some(t) = self.join_timeout {
            c.dist.join_timeout = t;
        }
        if let Some(t) = self.end_timeout {
            c.dist.end_timeout = t;
        }
        if let Some(on) = self.save_results {
            c.dist.save_results = on;
        }
        if let Some(d) = &self.checkpoint_dir {
            c.dist.checkpoint_dir = Some(d.clone());
        }
        if let Some(t) = self.checkpoint_interval {
            c.dist.checkpoint_interval = t;
        }
        if let Some(on) = self.adaptive {
            c.dist.adapt.on = on;
        }
        if let Some(t) = self.adapt_period {
            c.dist.adapt.period = t;
        }
        Ok(c)
    }

    /// Starts the worker threads.
    pub fn build(self) -> Result<Satin, SatinError> {
        self.start().map(|(satin, _)| satin)
    }

    /// Starts the worker threads; also returns the settings of the distributed layer.
    pub(crate) fn start(self) -> Result<(Satin, DistConfig), SatinError> {
        let config = self.config()?;
        let n = self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        if n > MAX_WORKERS {
            return Err(SatinError::Config(format!(
                "{n} workers: at most {MAX_WORKERS} (worker indices fill 16 bits of a job record)"
            )));
        }
        let registry = self.registry.unwrap_or_else(JobRegistry::from_inventory);
        let (shared, deques) = Shared::new(
            n,
            registry,
            config.inline_depth,
            config.redo_depth,
            config.guard_patience,
        );
        let mut handles = Vec::with_capacity(n);
        for (i, d) in deques.into_iter().enumerate() {
            let sh = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("satin-worker-{i}"))
                .spawn(move || worker_main(Ctx::new(i, d, sh)));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let s = Satin { shared, handles };
                    drop(s);
                    return Err(SatinError::Spawn(e.to_string()));
                }
            }
        }
        let _ = shared
            .threads
            .set(handles.iter().map(|h| h.thread().clone()).collect());
        Ok((Satin { shared, handles }, config.dist))
    }
}
