//! Admission of connections that have not authenticated yet, for everything that
//! accepts them (the registry server, the tcp and shm transports): a bound on how many handshakes run at once ([`Admission`]), one
//! deadline for each handshake as a whole ([`DeadlineIo`]), and a rate-limited warning
//! for the connections refused ([`RateLimit`]).
//!
//! A stranger can open connections and send nothing, or one byte at a time. Without
//! these bounds every such connection costs a thread and a file descriptor for as long
//! as the stranger likes; with them it costs one of at most
//! [`DEFAULT_MAX_HANDSHAKES`] slots for at most the handshake timeout, and a
//! connection beyond the bound is closed at once. Peers still get in once the
//! strangers' handshakes reach their deadline.
//!
//! ```
//! use ipl_auth::admission::Admission;
//! let a = Admission::new("tcp", 1);
//! let slot = a.admit(&"127.0.0.1:5000").unwrap();
//! assert!(a.admit(&"127.0.0.1:5001").is_none()); // closed at once, counted, logged
//! drop(slot);
//! assert!(a.admit(&"127.0.0.1:5002").is_some());
//! assert_eq!(a.refused(), 1);
//! ```

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Default bound on connections in the handshake at once.
pub const DEFAULT_MAX_HANDSHAKES: usize = 64;

/// At most one warning about refused connections per this interval.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Counts the connections in the handshake and refuses those beyond a bound.
#[derive(Debug)]
pub struct Admission {
    what: &'static str,
    limit: usize,
    shared: Arc<Counts>,
    log: Mutex<RateLimit>,
    dropped_log: Mutex<RateLimit>,
    accept_log: Mutex<RateLimit>,
}

#[derive(Debug, Default)]
struct Counts {
    pending: AtomicUsize,
    refused: AtomicU64,
}

/// One admitted connection's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot(Arc<Counts>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Admission {
    /// A bound of `limit` (at least 1) handshakes at once; `what` names the component
    /// in the log (e.g. `"tcp"`).
    pub fn new(what: &'static str, limit: usize) -> Self {
        Self {
            what,
            limit: limit.max(1),
            shared: Arc::default(),
            log: Mutex::new(RateLimit::new(REFUSAL_LOG_INTERVAL)),
            dropped_log: Mutex::new(RateLimit::new(REFUSAL_LOG_INTERVAL)),
            accept_log: Mutex::new(RateLimit::new(REFUSAL_LOG_INTERVAL)),
        }
    }

    /// A slot for a new connection from `peer`, or `None` when `limit` handshakes are
    /// running: the caller closes the connection. Refusals are counted and logged at
    /// most once per [`REFUSAL_LOG_INTERVAL`].
    pub fn admit(&self, peer: &dyn std::fmt::Display) -> Option<Slot> {
        let admitted = self
            .shared
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            return Some(Slot(Arc::clone(&self.shared)));
        }
        let total = self.shared.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(suppressed) = self.log.lock().allow(Instant::now()) {
            tracing::warn!(
                component = self.what,
                peer = %peer,
                limit = self.limit,
                refused_total = total,
                suppressed,
                "{}: too many connections in the handshake; closing new ones at once \
                 (next warning in {}s at the earliest)",
                self.what,
                REFUSAL_LOG_INTERVAL.as_secs()
            );
        }
        None
    }

    /// Logs a connection dropped during its handshake (a stranger, a wrong secret, the
    /// deadline): a warning at most once per [`REFUSAL_LOG_INTERVAL`] with the number
    /// left out since the last one, the others at debug level, so that a stream of
    /// strangers cannot flood the log.
    pub fn dropped(&self, peer: &dyn std::fmt::Display, reason: &dyn std::fmt::Display) {
        match self.dropped_log.lock().allow(Instant::now()) {
            Some(suppressed) => tracing::warn!(
                component = self.what,
                peer = %peer,
                suppressed,
                "{}: dropping a connection from {peer}: {reason} (at most one such \
                 warning per {}s; {suppressed} left out since the last)",
                self.what,
                REFUSAL_LOG_INTERVAL.as_secs()
            ),
            None => {
                tracing::debug!(peer = %peer, "{}: dropping a connection from {peer}: {reason}",self.what,)
            }
        }
    }

    /// Logs a failed `accept` (e.g. out of file descriptors), at most once per
    /// [`REFUSAL_LOG_INTERVAL`] with the number left out since the last.
    pub fn accept_failed(&self, error: &dyn std::fmt::Display) {
        if let Some(suppressed) = self.accept_log.lock().allow(Instant::now()) {
            tracing::warn!(
                suppressed,
                "{}: accept failed: {error} (at most one such warning per {}s; \
                 {suppressed} left out since the last)",
                self.what,
                REFUSAL_LOG_INTERVAL.as_secs()
            );
        }
    }

    /// Connections in the handshake now.
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Acquire)
    }

    /// Connections refused since the start.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }
}

/// "At most one line per interval", counting the lines left out.
#[derive(Debug)]
pub struct RateLimit {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    /// At most one line per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(lines left out since the last one)` if a line may be logged at `now`.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// A stream whose every read and write may only use the time left before a deadline:
/// `set_timeouts` (which sets the socket's read and write timeouts) is called with that
/// before each call, and once the deadline has passed the call fails with
/// [`io::ErrorKind::TimedOut`]. A peer that trickles bytes therefore cannot stretch a
/// handshake beyond its deadline.
///
/// ```
/// use std::io::Read;
/// use std::time::{Duration, Instant};
/// use ipl_auth::admission::DeadlineIo;
/// let mut past = DeadlineIo::new(&b"abc"[..], Instant::now(), |_| Ok(()));
/// let e = past.read(&mut [0u8; 3]).unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
/// let soon = Instant::now() + Duration::from_secs(5);
/// let mut ok = DeadlineIo::new(&b"abc"[..], soon, |left| {
///     assert!(left <= Duration::from_secs(5));
///     Ok(())
/// });
/// let mut b = [0u8; 3];
/// ok.read_exact(&mut b).unwrap();
/// assert_eq!(&b, b"abc");
/// ```
pub struct DeadlineIo<S, F> {
    io: S,
    deadline: Instant,
    set_timeouts: F,
}

impl<S, F: FnMut(Duration) -> io::Result<()>> DeadlineIo<S, F> {
    /// `io`, bounded by `deadline`; `set_timeouts(left)` sets the socket's timeouts.
    pub fn new(io: S, deadline: Instant, set_timeouts: F) -> Self {
        Self {
            io,
            deadline,
            set_timeouts,
        }
    }

    /// The time left, or a [`TimedOut`](io::ErrorKind::TimedOut) error once it is up.
    pub fn left(&self) -> io::Result<Duration> {
        left(self.deadline)
    }

    fn arm(&mut self) -> io::Result<()> {
        let left = self.left()?;
        (self.set_timeouts)(left)
    }
}

/// The time left before `deadline`, or a [`TimedOut`](io::ErrorKind::TimedOut) error
/// once it has passed.
pub fn left(deadline: Instant) -> io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "handshake deadline passed"))
}

impl<S: Read, F: FnMut(Duration) -> io::Result<()>> Read for DeadlineIo<S, F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        self.io.read(buf)
    }
}

impl<S: Write, F: FnMut(Duration) -> io::Result<()>> Write for DeadlineIo<S, F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        self.io.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.io.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_refuses_beyond_the_limit_and_slots_free_on_drop() {
        let a = Admission::new("test", 2);
        let s1 = a.admit(&"p1").unwrap();
        let s2 = a.admit(&"p2").unwrap();
        assert!(a.admit(&"p3").is_none());
        assert_eq!((a.pending(), a.refused()), (2, 1));
        drop(s1);
        let s3 = a.admit(&"p4").unwrap();
        assert!(a.admit(&"p5").is_none());
        assert_eq!((a.pending(), a.refused()), (2, 2));
        drop((s2, s3));
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn the_rate_limit_logs_once_per_interval_and_counts_the_rest() {
        let mut r = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(r.allow(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(r.allow(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(r.allow(t0 + Duration::from_secs(10)), Some(5));
        assert_eq!(r.allow(t0 + Duration::from_secs(11)), None);
        assert_eq!(r.allow(t0 + Duration::from_secs(25)), Some(1));
    }
}
