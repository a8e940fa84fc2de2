//! Unique pool names for tests that run many pools in one process (shared by the IPL's,
//! RMI's and the replicated objects' tests, `#[path]`-included).

use std::sync::atomic::{AtomicUsize, Ordering};

/// A pool name unique in this process.
pub fn pool(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
