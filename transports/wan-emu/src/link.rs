//! One direction of a wide-area link and its delay model, without I/O or a clock.

use std::time::Duration;

/// The emulated properties of one direction of a wide-area link (from one cluster to
/// another): one-way latency and bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Link {
    /// One-way latency, added to every message after it has left the link.
    pub latency: Duration,
    /// Bandwidth in bytes per second; `None` is unlimited (no transmission time).
    pub bytes_per_sec: Option<u64>,
}

impl Link {
    /// A link without delay: zero latency, unlimited bandwidth.
    pub const IDEAL: Link = Link {
        latency: Duration::ZERO,
        bytes_per_sec: None,
    };

    /// A link of `latency_ms` milliseconds one way and `mbit` megabits (10^6 bits) per
    /// second. Non-finite or negative numbers are clamped: a latency to zero, a bandwidth
    /// to unlimited (config parsing rejects them with an error instead).
    pub fn from_ms_mbit(latency_ms: f64, mbit: f64) -> Link {
        let latency = if latency_ms.is_finite() && latency_ms > 0.0 {
            Duration::from_secs_f64(latency_ms / 1e3)
        } else {
            Duration::ZERO
        };
        let bytes_per_sec =
            (mbit.is_finite() && mbit > 0.0).then(|| ((mbit * 1e6 / 8.0).round() as u64).max(1));
        Link {
            latency,
            bytes_per_sec,
        }
    }

    /// How long `size` bytes occupy the link: `size / bandwidth` (zero when unlimited).
    pub fn transmit_time(&self, size: u64) -> Duration {
        match self.bytes_per_sec {
            None | Some(0) => Duration::ZERO,
            Some(bps) => {
                let nanos = u128::from(size) * 1_000_000_000 / u128::from(bps);
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            }
        }
    }

    /// Whether the link delays nothing.
    pub fn is_ideal(&self) -> bool {
        self.latency.is_zero() && self.bytes_per_sec.is_none()
    }
}

/// The state of one emulated link: a FIFO pipe that carries one message at a time.
///
/// A message of `s` bytes offered at `now` waits until the link is free, occupies it for
/// `s / B`, and arrives `L` later:
/// `arrival = max(now, free) + s/B + L`, and the link is then free at `max(now, free) + s/B`.
/// Times are durations since any fixed origin the caller chooses; the model has no clock,
/// so it is deterministic and testable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkModel {
    free_at: Duration,
}

impl LinkModel {
    /// An idle link.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers a message of `size` bytes at time `now` to a link with properties `link`;
    /// returns when it arrives at the other end.
    pub fn admit(&mut self, now: Duration, size: u64, link: &Link) -> Duration {
        let start = now.max(self.free_at);
        self.free_at = start.saturating_add(link.transmit_time(size));
        self.free_at.saturating_add(link.latency)
    }

    /// When the link has finished transmitting everything admitted so far.
    pub fn free_at(&self) -> Duration {
        self.free_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn l10_100() -> Link {
        // 10 ms, 100 Mbit/s = 12.5 MB/s: 12_500 bytes take 1 ms.
        Link::from_ms_mbit(10.0, 100.0)
    }

    #[test]
    fn units() {
        let l = l10_100();
        assert_eq!(l.latency, 10 * MS);
        assert_eq!(l.bytes_per_sec, Some(12_500_000));
        assert_eq!(l.transmit_time(12_500), MS);
        assert_eq!(l.transmit_time(0), Duration::ZERO);
        assert_eq!(Link::IDEAL.transmit_time(1 << 30), Duration::ZERO);
        assert!(Link::from_ms_mbit(0.0, 0.0).is_ideal());
        assert!(Link::from_ms_mbit(f64::NAN, f64::INFINITY).is_ideal());
        assert!(!l.is_ideal());
    }

    #[test]
    fn idle_link_adds_transmission_and_latency() {
        let mut m = LinkModel::new();
        let t0 = 100 * MS;
        assert_eq!(m.admit(t0, 12_500, &l10_100()), t0 + MS + 10 * MS);
        assert_eq!(m.free_at(), t0 + MS);
    }

    #[test]
    fn busy_link_queues_messages_back_to_back() {
        let mut m = LinkModel::new();
        let l = l10_100();
        let t0 = 5 * MS;
        // Three 1 ms messages offered at once leave one after the other.
        let a: Vec<Duration> = (0..3).map(|_| m.admit(t0, 12_500, &l)).collect();
        assert_eq!(a, vec![t0 + 11 * MS, t0 + 12 * MS, t0 + 13 * MS]);
        // A message offered after the link drained does not wait.
        let later = t0 + 50 * MS;
        assert_eq!(m.admit(later, 0, &l), later + 10 * MS);
        // One offered while the link is still busy waits for it.
        let mut m = LinkModel::new();
        m.admit(t0, 125_000, &l); // busy for 10 ms
        assert_eq!(
            m.admit(t0 + 4 * MS, 12_500, &l),
            t0 + 10 * MS + MS + 10 * MS
        );
    }

    #[test]
    fn long_stream_runs_at_the_bandwidth() {
        let mut m = LinkModel::new();
        let l = l10_100();
        let mut last = Duration::ZERO;
        for _ in 0..1000 {
            last = m.admit(Duration::ZERO, 1 << 20, &l);
        }
        // 1000 MiB at 12.5 MB/s, plus one latency.
        let expect = l.transmit_time(1000 << 20) + l.latency;
        let diff = last.abs_diff(expect);
        assert!(diff < Duration::from_micros(1), "{last:?} vs {expect:?}");
    }
}
