//! The best value found so far in a branch and bound (`tsp`'s tour length, `setcover`'s
//! cost), shared by the jobs of a run: within a process by an atomic minimum
//! ([`SharedBound`]), and between the processes of a pool by a Satin shared object
//! ([`RunBounds`]) that every process's bound is lowered through while they search.
//! Each run has its own bound ([`new_run_id`]); jobs name it.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The runs whose bounds a process keeps. A run whose bound was dropped gets a fresh
/// one: it prunes less, never wrongly (its jobs still carry their bounds).
pub const RUNS_KEPT: usize = 64;

/// The best known value (a tour length, a cover cost), shared by the jobs that
/// search for a smaller one.
pub trait Bound: Sync {
    /// The best known value (`u64::MAX` if none).
    fn read(&self) -> u64;
    /// A solution of value `length` was found: lowers the bound; whether it did.
    fn offer(&self, length: u64) -> bool;
}

/// A bound shared by the threads of one process: an atomic minimum.
#[derive(Debug)]
pub struct SharedBound(AtomicU64);

impl SharedBound {
    /// A bound of `length`.
    pub fn new(length: u64) -> Self {
        SharedBound(AtomicU64::new(length))
    }
}

impl Bound for SharedBound {
    fn read(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn offer(&self, length: u64) -> bool {
        self.0.fetch_min(length, Ordering::Relaxed) > length
    }
}

/// The best values of the latest runs (at most [`RUNS_KEPT`], oldest first): a
/// Satin shared object, so that a shorter tour found by any process lowers the bound
/// of every process of the pool while they search (journal, section 3.1: the
/// branch-and-bound bound). Each process reads its own copy's atomics at every
/// pruning decision; a write is `(run, length)`, applied as a minimum, so writes
/// commute and a lost or repeated one only prunes less.
#[derive(Debug, Default)]
pub struct RunBounds {
    runs: Mutex<Vec<(u64, Arc<SharedBound>)>>,
}

impl RunBounds {
    /// The bound of run `run` in this copy, lowered to `known` (made if missing).
    pub fn get(&self, run: u64, known: u64) -> Arc<SharedBound> {
        let mut runs = self.runs.lock();
        let b = match runs.iter().find(|(id, _)| *id == run) {
            Some((_, b)) => b.clone(),
            None => {
                if runs.len() >= RUNS_KEPT {
                    runs.remove(0);
                }
                let b = Arc::new(SharedBound::new(known));
                runs.push((run, b.clone()));
                b
            }
        };
        b.offer(known);
        b
    }
}

impl Serialize for RunBounds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(u64, u64)> = self
            .runs
            .lock()
            .iter()
            .map(|(r, b)| (*r, b.read()))
            .collect();
        v.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RunBounds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<(u64, u64)>::deserialize(d)?;
        let b = RunBounds::default();
        for (run, len) in v.into_iter().rev().take(RUNS_KEPT).rev() {
            b.get(run, len);
        }
        Ok(b)
    }
}

impl satin::Replicated for RunBounds {
    /// `(run, value)`: a solution of that value was found in run `run`.
    type Op = (u64, u64);
    /// Whether it lowered this copy's bound.
    type Output = bool;
    fn apply(&mut self, &(run, length): &(u64, u64)) -> bool {
        let b = self.get(run, u64::MAX);
        b.offer(length)
    }
}

/// The name of the runs' bounds shared object.
pub const BOUNDS_NAME: &str = "ibis_apps::bounds";

/// This process's copy of the runs' bounds (made on first use).
fn run_bounds() -> &'static satin::Shared<RunBounds> {
    static B: OnceLock<satin::Shared<RunBounds>> = OnceLock::new();
    B.get_or_init(|| {
        satin::Shared::new(BOUNDS_NAME, RunBounds::default())
            .or_else(|_| satin::Shared::lookup(BOUNDS_NAME))
            .expect("the runs' bounds are made once per process, under a name of their own")
    })
}

/// The bound a job prunes with: this process's atomic for its run, whose lowering is
/// also written to the shared object (and so sent to the other processes).
pub struct PoolBound {
    run: u64,
    local: Arc<SharedBound>,
}

impl Bound for PoolBound {
    fn read(&self) -> u64 {
        self.local.read()
    }
    fn offer(&self, length: u64) -> bool {
        let lowered = self.local.offer(length);
        if lowered {
            run_bounds().write((self.run, length));
        }
        lowered
    }
}

/// This process's bound of run `run`, lowered to `known`.
pub fn run_bound(run: u64, known: u64) -> PoolBound {
    PoolBound {
        run,
        local: run_bounds().read(|b| b.get(run, known)),
    }
}

/// A run's identity: different for every root job of every process.
pub fn new_run_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut h = Sha1::new();
    h.update(nanos.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(NEXT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

/// Makes this process's copy of the runs' bounds now (every process of a pool does,
/// before the run, so that writes of the others find it).
pub fn prepare() {
    let _ = run_bounds();
}
