//! The sending side's decisions, without I/O or a clock: for each message, whether it goes
//! to the inner transport now or is held until a given time.

use std::collections::HashMap;
use std::time::Duration;

use crate::link::{Link, LinkModel};

/// What to do with one message (or close) on a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Hand it to the inner transport at once, undelayed.
    Now,
    /// Hold it and hand it to the inner transport at this time.
    At(Duration),
}

#[derive(Debug, Default, Clone, Copy)]
struct ChannelTrack {
    /// Release time of the last held item on the channel.
    last: Duration,
    /// Items held and not yet released.
    held: usize,
}

/// The delay decisions of one endpoint, which lives in cluster [`cluster`](Self::cluster).
///
/// One [`LinkModel`] per destination cluster models the link from this endpoint's cluster
/// to it (shared by all channels to that cluster). Messages to the own cluster, and to
/// clusters without a configured link, are not delayed. Each channel's releases never go
/// back in time, so a channel stays FIFO even when its link gets faster at run time; an
/// undelayed message waits behind held ones of its channel for the same reason.
#[derive(Debug)]
pub struct Emulation {
    cluster: String,
    links: HashMap<String, LinkModel>,
    channels: HashMap<u64, ChannelTrack>,
}

impl Emulation {
    /// The decisions of an endpoint in `cluster`.
    pub fn new(cluster: impl Into<String>) -> Self {
        Emulation {
            cluster: cluster.into(),
            links: HashMap::new(),
            channels: HashMap::new(),
        }
    }

    /// The endpoint's cluster.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Decides a message of `size` bytes sent at `now` on `channel`, whose peer is in
    /// cluster `to`; `link` is the link configured from this cluster to `to`, if any.
    pub fn on_message(
        &mut self,
        channel: u64,
        to: &str,
        link: Option<&Link>,
        now: Duration,
        size: u64,
    ) -> Delivery {
        let arrival = match link {
            Some(l) if to != self.cluster && !l.is_ideal() => {
                let model = match self.links.get_mut(to) {
                    Some(m) => m,
                    None => self.links.entry(to.to_string()).or_default(),
                };
                Some(model.admit(now, size, l))
            }
            _ => None,
        };
        self.hold(channel, now, arrival)
    }

    /// Decides an orderly close of `channel` at `now`: after everything held on it.
    pub fn on_close(&mut self, channel: u64, now: Duration) -> Delivery {
        self.hold(channel, now, None)
    }

    fn hold(&mut self, channel: u64, now: Duration, arrival: Option<Duration>) -> Delivery {
        let track = self.channels.entry(channel).or_default();
        match arrival {
            None if track.held == 0 => Delivery::Now,
            Some(at) if track.held == 0 && at <= now => Delivery::Now,
            _ => {
                let at = arrival.unwrap_or(now).max(track.last);
                track.last = at;
                track.held += 1;
                Delivery::At(at)
            }
        }
    }

    /// One held item of `channel` was handed to the inner transport.
    pub fn on_released(&mut self, channel: u64) {
        if let Some(t) = self.channels.get_mut(&channel) {
            t.held = t.held.saturating_sub(1);
        }
    }

    /// How many items of `channel` are held.
    pub fn held(&self, channel: u64) -> usize {
        self.channels.get(&channel).map_or(0, |t| t.held)
    }

    /// Forgets `channel` (closed or lost).
    pub fn forget(&mut self, channel: u64) {
        self.channels.remove(&channel);
    }

    /// The model of the link to cluster `to`, if a message was ever delayed on it.
    pub fn link_model(&self, to: &str) -> Option<&LinkModel> {
        self.links.get(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn wan() -> Link {
        Link::from_ms_mbit(10.0, 100.0) // 12_500 bytes per ms
    }

    #[test]
    fn intra_cluster_is_never_delayed() {
        let mut e = Emulation::new("A");
        // Even with a (slow) link given, a message to the own cluster goes now.
        for i in 0..10 {
            assert_eq!(
                e.on_message(1, "A", Some(&wan()), i * MS, 1 << 20),
                Delivery::Now
            );
        }
        assert_eq!(e.held(1), 0);
        assert!(e.link_model("A").is_none());
    }

    #[test]
    fn unconfigured_and_ideal_links_are_not_delayed() {
        let mut e = Emulation::new("A");
        assert_eq!(e.on_message(1, "B", None, MS, 100), Delivery::Now);
        assert_eq!(
            e.on_message(1, "B", Some(&Link::IDEAL), MS, 100),
            Delivery::Now
        );
    }

    #[test]
    fn inter_cluster_follows_the_link_model() {
        let mut e = Emulation::new("A");
        let t0 = 3 * MS;
        assert_eq!(
            e.on_message(1, "B", Some(&wan()), t0, 12_500),
            Delivery::At(t0 + 11 * MS)
        );
        // A second channel to the same cluster shares the link: it waits for the first.
        assert_eq!(
            e.on_message(2, "B", Some(&wan()), t0, 12_500),
            Delivery::At(t0 + 12 * MS)
        );
        // Another cluster has its own link.
        assert_eq!(
            e.on_message(3, "C", Some(&wan()), t0, 12_500),
            Delivery::At(t0 + 11 * MS)
        );
        assert_eq!(e.held(1), 1);
        e.on_released(1);
        assert_eq!(e.held(1), 0);
    }

    #[test]
    fn fifo_holds_when_the_link_gets_faster() {
        let mut e = Emulation::new("A");
        let slow = Link::from_ms_mbit(50.0, 0.0);
        let fast = Link::from_ms_mbit(1.0, 0.0);
        let a = e.on_message(7, "B", Some(&slow), Duration::ZERO, 10);
        let b = e.on_message(7, "B", Some(&fast), MS, 10);
        let (Delivery::At(a), Delivery::At(b)) = (a, b) else {
            panic!("both must be held: {a:?} {b:?}");
        };
        assert_eq!(a, 50 * MS);
        assert!(
            b >= a,
            "second message released before the first: {b:?} < {a:?}"
        );
        // With the link removed, a message still waits behind the held ones...
        assert_eq!(e.on_message(7, "B", None, 2 * MS, 10), Delivery::At(a));
        // ...and so does an orderly close.
        assert_eq!(e.on_close(7, 3 * MS), Delivery::At(a));
        for _ in 0..4 {
            e.on_released(7);
        }
        assert_eq!(e.held(7), 0);
        assert_eq!(e.on_message(7, "B", None, 60 * MS, 10), Delivery::Now);
        assert_eq!(e.on_close(7, 60 * MS), Delivery::Now);
    }

    #[test]
    fn releases_of_a_channel_never_go_back_in_time() {
        // Deterministic pseudo-random sizes, times and link changes.
        let mut e = Emulation::new("A");
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut now = Duration::ZERO;
        let mut last = Duration::ZERO;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now += Duration::from_micros(x % 500);
            let link = Link::from_ms_mbit((x % 20) as f64, ((x >> 8) % 200) as f64);
            match e.on_message(1, "B", Some(&link), now, (x >> 16) % 100_000) {
                Delivery::At(t) => {
                    assert!(t >= last && t >= now);
                    last = t;
                }
                Delivery::Now => {
                    assert_eq!(e.held(1), 0);
                    last = now;
                }
            }
            if x.is_multiple_of(3) {
                e.on_released(1);
            }
        }
    }
}
