//! The problems of a process by key: a branch and bound's instance is registered in
//! every process of a pool under a digest of its data before the run, and its jobs
//! name that key instead of carrying the data (`tsp`, `setcover`).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// A process-wide table of problems of type `P` by key.
pub struct Problems<P> {
    by_key: LazyLock<Mutex<HashMap<u64, Arc<P>>>>,
}

impl<P> Problems<P> {
    /// An empty table (for a `static`).
    pub const fn new() -> Self {
        Problems {
            by_key: LazyLock::new(|| Mutex::new(HashMap::new())),
        }
    }

    /// Registers `problem` under `key` unless a problem has that key already; returns
    /// the registered one.
    pub fn register(&self, key: u64, problem: P) -> Arc<P> {
        self.by_key
            .lock()
            .entry(key)
            .or_insert_with(|| Arc::new(problem))
            .clone()
    }

    /// The problem registered under `key`.
    pub fn get(&self, key: u64) -> Option<Arc<P>> {
        self.by_key.lock().get(&key).cloned()
    }
}

impl<P> Default for Problems<P> {
    fn default() -> Self {
        Self::new()
    }
}
