//! Heartbeats: how both ends of a registry connection notice a peer that
//! vanished without closing the connection (a cut link, a frozen host, a
//! stopped process).
//!
//! Each end sends a heartbeat every [`Heartbeat::interval`] and answers the
//! other's at once; *any* frame received counts as a sign of life. An end that
//! received nothing for longer than [`Heartbeat::timeout`] gives the peer up:
//!
//! * the server closes the connection and declares its members dead (the
//!   other members get `Died`), between `timeout` and `timeout + interval`
//!   after the last frame it received;
//! * the client fails every pending and later call with
//!   [`RegistryError::HeartbeatTimeout`] within the same bound.
//!
//! The server chooses the values ([`RegistryServer::with_heartbeat`](super::RegistryServer::with_heartbeat),
//! `ipl-server --heartbeat-interval-ms/--heartbeat-timeout-ms`) and tells each
//! client in the handshake's `Welcome`, so one setting governs a whole
//! deployment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{RegistryError, Result};

/// Default interval between heartbeats.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);

/// Default silence after which a peer is given up.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// The heartbeat interval and timeout of a registry connection.
///
/// ```
/// use std::time::Duration;
/// use ipl_registry::net::Heartbeat;
///
/// let hb = Heartbeat::new(Duration::from_millis(100), Duration::from_millis(500)).unwrap();
/// assert_eq!(hb.timeout(), Duration::from_millis(500));
/// // The timeout must exceed the interval.
/// assert!(Heartbeat::new(Duration::from_secs(1), Duration::from_secs(1)).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    interval: Duration,
    timeout: Duration,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self {
            interval: DEFAULT_HEARTBEAT_INTERVAL,
            timeout: DEFAULT_HEARTBEAT_TIMEOUT,
        }
    }
}

impl Heartbeat {
    /// Heartbeats every `interval`; a peer silent for longer than `timeout`
    /// is given up. Both are whole milliseconds (finer parts are dropped);
    /// the interval must be at least 1 ms and the timeout longer than the
    /// interval, or this fails with [`RegistryError::InvalidConfig`].
    pub fn new(interval: Duration, timeout: Duration) -> Result<Self> {
        Self::from_millis(millis(interval), millis(timeout))
    }

    /// [`new`](Self::new) from milliseconds (the wire form).
    pub fn from_millis(interval_ms: u64, timeout_ms: u64) -> Result<Self> {
        if interval_ms == 0 {
            return Err(RegistryError::InvalidConfig(
                "the heartbeat interval must be at least 1 ms".into(),
            ));
        }
        if timeout_ms <= interval_ms {
            return Err(RegistryError::InvalidConfig(format!(
                "the heartbeat timeout ({timeout_ms} ms) must be longer than the interval ({interval_ms} ms)"
            )));
        }
        Ok(Self {
            interval: Duration::from_millis(interval_ms),
            timeout: Duration::from_millis(timeout_ms),
        })
    }

    /// Time between two heartbeats.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Silence after which the peer is given up.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The interval in milliseconds.
    pub fn interval_ms(&self) -> u64 {
        millis(self.interval)
    }

    /// The timeout in milliseconds.
    pub fn timeout_ms(&self) -> u64 {
        millis(self.timeout)
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// When a connection last received a frame (shared between its reader, which
/// [`touch`](Self::touch)es it, and the heartbeat thread, which reads it).
#[derive(Debug)]
pub(crate) struct LastHeard {
    base: Instant,
    /// Milliseconds since `base` at the last frame.
    at_ms: AtomicU64,
}

impl LastHeard {
    pub(crate) fn now() -> Self {
        Self {
            base: Instant::now(),
            at_ms: AtomicU64::new(0),
        }
    }

    /// Records that a frame arrived.
    pub(crate) fn touch(&self) {
        self.at_ms
            .fetch_max(millis(self.base.elapsed()), Ordering::Relaxed);
    }

    /// How long nothing arrived.
    pub(crate) fn silence(&self) -> Duration {
        let at = Duration::from_millis(self.at_ms.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_refused() {
        assert!(matches!(
            Heartbeat::from_millis(0, 10),
            Err(RegistryError::InvalidConfig(_))
        ));
        assert!(matches!(
            Heartbeat::from_millis(10, 10),
            Err(RegistryError::InvalidConfig(_))
        ));
        let hb = Heartbeat::from_millis(10, 11).unwrap();
        assert_eq!(hb.interval_ms(), 10);
        assert_eq!(hb.timeout_ms(), 11);
        assert!(Heartbeat::default().timeout() > Heartbeat::default().interval());
    }

    #[test]
    fn touching_resets_the_silence() {
        let heard = LastHeard::now();
        heard.touch();
        assert!(heard.silence() < Duration::from_secs(60));
    }
}
