//! Shared by the test helpers of ibis-rmi and ibis-repmi (the latter includes this file
//! by path): a bound for "soon" and unique pool names.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A generous bound for anything that should happen "soon" on a loaded machine.
pub const LONG: Duration = Duration::from_secs(20);

/// A pool name unique in this process.
pub fn pool(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
