//! Statistics per worker and in total, printed in the style of Java Satin.

#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters a worker keeps without atomics; flushed into [`SharedStats`].
#[derive(Default, Debug, Clone, Copy)]
#[repr(C)] // the counters bumped on the spawn/sync path are not adjacent
pub(crate) struct LocalStats {
    pub steal_nanos: u64,
    /// Spawns that made a record (the others are counted in `inlined`).
    pub queued: u64,
    pub steal_attempts: u64,
    pub syncs: u64,
    pub steal_successes: u64,
    pub inlined: u64,
    pub stolen_executed: u64,
    /// Jobs run in redo mode (records, and redone roots and wire jobs).
    pub redo_jobs: u64,
    /// Frames' aborts, jobs they aborted, and inlets run (see [`WorkerStats`]).
    pub aborts: u64,
    pub aborted: u64,
    pub inlets: u64,
}

/// The flushed counters of one worker.
#[derive(Default, Debug)]
pub(crate) struct SharedStats {
    spawns: AtomicU64,
    inlined: AtomicU64,
    syncs: AtomicU64,
    steal_attempts: AtomicU64,
    steal_successes: AtomicU64,
    stolen_executed: AtomicU64,
    steal_nanos: AtomicU64,
    redo_jobs: AtomicU64,
    lookups: AtomicU64,
    lookups_handed_over: AtomicU64,
    aborts: AtomicU64,
    aborted: AtomicU64,
    inlets: AtomicU64,
}

impl SharedStats {
    pub(crate) fn add(&self, s: &LocalStats) {
        self.spawns.fetch_add(s.queued + s.inlined, Relaxed);
        self.inlined.fetch_add(s.inlined, Relaxed);
        self.syncs.fetch_add(s.syncs, Relaxed);
        self.steal_attempts.fetch_add(s.steal_attempts, Relaxed);
        self.steal_successes.fetch_add(s.steal_successes, Relaxed);
        self.stolen_executed.fetch_add(s.stolen_executed, Relaxed);
        self.steal_nanos.fetch_add(s.steal_nanos, Relaxed);
        if s.redo_jobs != 0 {
            self.redo_jobs.fetch_add(s.redo_jobs, Relaxed);
        }
        if s.aborts | s.aborted | s.inlets != 0 {
            self.aborts.fetch_add(s.aborts, Relaxed);
            self.aborted.fetch_add(s.aborted, Relaxed);
            self.inlets.fetch_add(s.inlets, Relaxed);
        }
    }

    /// Counts a job offered to the result lookup, and as taken by it, at once (not
    /// in [`LocalStats`]): the lookup may finish the job, and so the root, before
    /// the worker flushes. [`SharedStats::offer_returned`] takes the second back.
    pub(crate) fn offering(&self) {
        self.lookups.fetch_add(1, Relaxed);
        self.lookups_handed_over.fetch_add(1, Relaxed);
    }

    /// The lookup returned the job offered last (it runs here).
    pub(crate) fn offer_returned(&self) {
        self.lookups_handed_over.fetch_sub(1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> WorkerStats {
        WorkerStats {
            spawns: self.spawns.load(Relaxed),
            inlined: self.inlined.load(Relaxed),
            syncs: self.syncs.load(Relaxed),
            steal_attempts: self.steal_attempts.load(Relaxed),
            steal_successes: self.steal_successes.load(Relaxed),
            stolen_executed: self.stolen_executed.load(Relaxed),
            steal_nanos: self.steal_nanos.load(Relaxed),
            redo_jobs: self.redo_jobs.load(Relaxed),
            lookups: self.lookups.load(Relaxed),
            lookups_handed_over: self.lookups_handed_over.load(Relaxed),
            aborts: self.aborts.load(Relaxed),
            aborted: self.aborted.load(Relaxed),
            inlets: self.inlets.load(Relaxed),
        }
    }

    pub(crate) fn reset(&self) {
        for a in [
            &self.spawns,
            &self.inlined,
            &self.syncs,
            &self.steal_attempts,
            &self.steal_successes,
            &self.stolen_executed,
            &self.steal_nanos,
            &self.redo_jobs,
            &self.lookups,
            &self.lookups_handed_over,
            &self.aborts,
            &self.aborted,
            &self.inlets,
        ] {
            a.store(0, Relaxed);
        }
    }
}

/// Counters of the distributed layer (filled in by it; zero inside one process).
#[derive(Default, Debug)]
pub struct NetCounters {
    /// Messages sent to nodes of the same cluster.
    pub intra_messages: AtomicU64,
    /// Bytes sent to nodes of the same cluster.
    pub intra_bytes: AtomicU64,
    /// Messages sent to nodes of other clusters.
    pub inter_messages: AtomicU64,
    /// Bytes sent to nodes of other clusters.
    pub inter_bytes: AtomicU64,
    /// Time spent serializing jobs and results, in nanoseconds.
    pub serialize_nanos: AtomicU64,
    /// Time spent deserializing jobs and results, in nanoseconds.
    pub deserialize_nanos: AtomicU64,
    /// Remote steal attempts.
    pub remote_steal_attempts: AtomicU64,
    /// Successful remote steals.
    pub remote_steal_successes: AtomicU64,
    /// Jobs from other processes whose guard did not hold at once (they waited).
    pub guard_waits: AtomicU64,
    /// Fetches of the sender's shared objects those guards asked for.
    pub guard_fetches: AtomicU64,
}

impl NetCounters {
    fn snapshot(&self) -> NetStats {
        NetStats {
            intra_messages: self.intra_messages.load(Relaxed),
            intra_bytes: self.intra_bytes.load(Relaxed),
            inter_messages: self.inter_messages.load(Relaxed),
            inter_bytes: self.inter_bytes.load(Relaxed),
            serialize_nanos: self.serialize_nanos.load(Relaxed),
            deserialize_nanos: self.deserialize_nanos.load(Relaxed),
            remote_steal_attempts: self.remote_steal_attempts.load(Relaxed),
            remote_steal_successes: self.remote_steal_successes.load(Relaxed),
            guard_waits: self.guard_waits.load(Relaxed),
            guard_fetches: self.guard_fetches.load(Relaxed),
        }
    }

    pub(crate) fn add_guard(&self, w: crate::shared::GuardWait) {
        if w.waited {
            self.guard_waits.fetch_add(1, Relaxed);
        }
        self.guard_fetches.fetch_add(u64::from(w.fetches), Relaxed);
    }

    pub(crate) fn reset(&self) {
        for a in [
            &self.intra_messages,
            &self.intra_bytes,
            &self.inter_messages,
            &self.inter_bytes,
            &self.serialize_nanos,
            &self.deserialize_nanos,
            &self.remote_steal_attempts,
            &self.remote_steal_successes,
            &self.guard_waits,
            &self.guard_fetches,
        ] {
            a.store(0, Relaxed);
        }
    }
}

/// A snapshot of [`NetCounters`].
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetStats {
    /// Messages sent to nodes of the same cluster.
    pub intra_messages: u64,
    /// Bytes sent to nodes of the same cluster.
    pub intra_bytes: u64,
    /// Messages sent to nodes of other clusters.
    pub inter_messages: u64,
    /// Bytes sent to nodes of other clusters.
    pub inter_bytes: u64,
    /// Time spent serializing, in nanoseconds.
    pub serialize_nanos: u64,
    /// Time spent deserializing, in nanoseconds.
    pub deserialize_nanos: u64,
    /// Remote steal attempts.
    pub remote_steal_attempts: u64,
    /// Successful remote steals.
    pub remote_steal_successes: u64,
    /// Jobs from other processes whose guard did not hold at once.
    pub guard_waits: u64,
    /// Fetches of shared objects those guards asked for.
    pub guard_fetches: u64,
}

/// The counters of one worker thread.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerStats {
    /// Jobs spawned by jobs running on this worker.
    pub spawns: u64,
    /// Of those, spawns run at once as plain calls because the worker already had
    /// enough stealable work queued (see [`SatinBuilder::inline_depth`](crate::SatinBuilder::inline_depth)).
    pub inlined: u64,
    /// Syncs (explicit and implicit) executed on this worker.
    pub syncs: u64,
    /// Local steal attempts (one per victim tried).
    pub steal_attempts: u64,
    /// Successful local steals.
    pub steal_successes: u64,
    /// Jobs this worker ran that were spawned elsewhere (stolen or given back).
    pub stolen_executed: u64,
    /// Time spent stealing, in nanoseconds.
    pub steal_nanos: u64,
    /// Jobs of redone subtrees run on this worker: redone roots, wire jobs and given
    /// back jobs, and the marked jobs below them (down to
    /// [`SatinBuilder::redo_depth`](crate::SatinBuilder::redo_depth)) that ran here;
    /// see [`ResultLookup`](crate::ResultLookup).
    pub redo_jobs: u64,
    /// Jobs this worker offered to the result lookup in redo mode.
    pub lookups: u64,
    /// Of those, jobs the lookup took (to complete them with a saved result).
    pub lookups_handed_over: u64,
    /// Aborts of frames on this worker ([`Inlet::abort`](crate::Inlet::abort),
    /// [`CatchFrame::abort`](crate::CatchFrame::abort), an inlet's error, and frames
    /// unwinding with stolen children).
    pub aborts: u64,
    /// Jobs aborted by this worker: children dropped unrun, jobs told to stop (on
    /// this or another worker or process) and jobs that stopped here because they
    /// were aborted.
    pub aborted: u64,
    /// Inlets run on this worker (errors of children handled by their spawner).
    pub inlets: u64,
}

impl WorkerStats {
    fn add(&mut self, o: &WorkerStats) {
        self.spawns += o.spawns;
        self.inlined += o.inlined;
        self.syncs += o.syncs;
        self.steal_attempts += o.steal_attempts;
        self.steal_successes += o.steal_successes;
        self.stolen_executed += o.stolen_executed;
        self.steal_nanos += o.steal_nanos;
        self.redo_jobs += o.redo_jobs;
        self.lookups += o.lookups;
        self.lookups_handed_over += o.lookups_handed_over;
        self.aborts += o.aborts;
        self.aborted += o.aborted;
        self.inlets += o.inlets;
    }
}

/// Statistics of a Satin instance: per worker, total, and the network counters.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// One entry per worker thread.
    pub workers: Vec<WorkerStats>,
    /// The sum over all workers.
    pub total: WorkerStats,
    /// The distributed layer's counters.
    pub net: NetStats,
}

impl Stats {
    pub(crate) fn collect(per: &[SharedStats], net: &NetCounters) -> Stats {
        let workers: Vec<WorkerStats> = per.iter().map(|s| s.snapshot()).collect();
        let mut total = WorkerStats::default();
        for w in &workers {
            total.add(w);
        }
        Stats {
            workers,
            total,
            net: net.snapshot(),
        }
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

fn line(f: &mut fmt::Formatter<'_>, who: &str, w: &WorkerStats) -> fmt::Result {
    writeln!(
        f,
        "SATIN '{who}': SPAWN_SYNC: spawns = {} (inlined {}) syncs = {}",
        w.spawns, w.inlined, w.syncs
    )?;
    writeln!(
        f,
        "SATIN '{who}': LOCAL_STEAL: attempts = {} success = {} ({:.1} %) executed = {} time = {:.3} ms",
        w.steal_attempts,
        w.steal_successes,
        pct(w.steal_successes, w.steal_attempts),
        w.stolen_executed,
        w.steal_nanos as f64 / 1e6
    )?;
    if w.redo_jobs != 0 || w.lookups != 0 {
        writeln!(
            f,
            "SATIN '{who}': REDO: jobs = {} lookups = {} handed over = {}",
            w.redo_jobs, w.lookups, w.lookups_handed_over
        )?;
    }
    if w.aborts != 0 || w.aborted != 0 || w.inlets != 0 {
        writeln!(
            f,
            "SATIN '{who}': ABORT: aborts = {} jobs aborted = {} inlets = {}",
            w.aborts, w.aborted, w.inlets
        )?;
    }
    Ok(())
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, w) in self.workers.iter().enumerate() {
            line(f, &format!("worker {i}"), w)?;
        }
        line(f, "total", &self.total)?;
        let n = &self.net;
        writeln!(
            f,
            "SATIN 'total': REMOTE_STEAL: attempts = {} success = {}",
            n.remote_steal_attempts, n.remote_steal_successes
        )?;
        writeln!(
            f,
            "SATIN 'total': MESSAGES: intra = {} msgs, {} bytes; inter = {} msgs, {} bytes",
            n.intra_messages, n.intra_bytes, n.inter_messages, n.inter_bytes
        )?;
        writeln!(
            f,
            "SATIN 'total': SERIALIZATION: serialize = {:.3} ms deserialize = {:.3} ms",
            n.serialize_nanos as f64 / 1e6,
            n.deserialize_nanos as f64 / 1e6
        )
    }
}
