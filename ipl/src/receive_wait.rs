//! The receive wait's policy, as functions of what a receive knows: how long a waiting
//! receive polls before it sleeps (its budget, learned from the waits it sees), and
//! where it sleeps. The receive port's loop (`PortShared::next`) does the I/O: it polls
//! the transports, parks in one, or sleeps on its condition variable, as these say.
//!
//! - **Poll, then sleep.** A receive polls (receiver-driven progress where the
//!   transports offer it, else it only looks at its queue) for its budget, then
//!   sleeps. Polling costs a CPU; sleeping costs a wake-up (11-12 µs on this machine's
//!   VM, far more than a shared-memory round trip).
//! - **The budget** starts at the configured one (`IPL_SPIN_US`, `IbisBuilder::spin`)
//!   and is learned ([`next_budget`]) from the waits of a receive that awaited a reply,
//!   or that moved its messages out of its transports itself (receiver-driven
//!   progress: shm, tcp). Only a stream over a transport whose own threads deliver is
//!   not learned from: its receiver leaves them the CPU sooner.
//! - **Where to sleep** ([`sleep_in`]): a thread that waits for a reply parks in its
//!   transport, so that the sender's wake-up reaches it directly; one that only receives
//!   (a stream) sleeps on the port, so that the transport's thread delivers batches
//!   while it sleeps and the sender is not woken against it for every message.

use std::time::{Duration, Instant};

/// The longest poll a port learns from the waits it sees; a message that comes later
/// than this halves the budget instead.
pub(crate) const LEARN_LIMIT: Duration = Duration::from_micros(200);

/// The smallest budget a port halves down to (while polling is on).
pub(crate) const MIN_BUDGET: Duration = Duration::from_micros(1);

/// How long a receiver that polls its transports runs between two yields of its CPU.
/// Where it shares that CPU with its peer (both processes on one CPU, or more busy
/// threads than CPUs), the peer runs only when the poller yields, and the round trip
/// grows with this interval (shm, both processes on CPU 0, medians of alternating runs:
/// 38 us at 5 us, 53 us at 10 us; a yield every 256 polls, which made it depend on how
/// long a poll takes, 63 us). A shorter one costs where the round trip is a few of them:
/// QUIC on two CPUs, 22.8 us with the 256 polls, 31.5 us at 5 us, 21.7 us at 10 us.
pub(crate) const YIELD_EVERY: Duration = Duration::from_micros(10);

/// What one receive saw, for the budget of the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// A message came (not a timeout).
    pub(crate) got: bool,
    /// How long the receive waited for it (or until it gave up).
    pub(crate) waited: Duration,
    /// The thread had sent something since its last receive: it waited for a reply.
    pub(crate) awaited_reply: bool,
    /// The receive polled its transports itself (receiver-driven progress): its
    /// polling is what moves its messages, not a transport thread's.
    pub(crate) drove_progress: bool,
}

/// The next receive's poll budget, from the configured one (`max`; zero: polling is
/// off, and stays off), the current one, and what this receive saw:
/// - a message within `max`: back to `max`;
/// - a reply, or a message the receive polled its transports for itself, within
///   [`LEARN_LIMIT`]: about two of this wait (at least `max`), so that a transport
///   whose round trip is longer than the configured budget (QUIC: 70-90 µs here) is
///   still caught while polling, and a stream whose messages come a little further
///   apart than the budget (1 MiB messages over shm: 50-100 µs here) is taken by its
///   receiver instead of costing it a wake-up and a hand-off from the transport's
///   thread each;
/// - anything later, or nothing, or a message of a stream that a transport thread
///   delivers: half the current budget (at least [`MIN_BUDGET`]), so that a port whose
///   messages come far apart (an idle server) soon stops taking the CPU that senders
///   and transport threads need.
pub(crate) fn next_budget(max: Duration, current: Duration, seen: Seen) -> Duration {
    if max.is_zero() {
        Duration::ZERO
    } else if seen.got && seen.waited <= max {
        max
    } else if seen.got && (seen.awaited_reply || seen.drove_progress) && seen.waited <= LEARN_LIMIT
    {
        (seen.waited * 2).clamp(max, LEARN_LIMIT)
    } else {
        (current / 2).max(MIN_BUDGET)
    }
}

/// Whether a message taken by the receive's first look (no clock read, so no wait to
/// learn from) can change the budget: only when the budget is below the configured
/// one, which [`next_budget`] then restores. The receive port skips the update
/// otherwise (the common case of a busy port).
pub(crate) fn first_look_changes_budget(max: Duration, current: Duration) -> bool {
    current != max
}

/// Where a receive that found nothing sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SleepIn {
    /// Parked in the one polled transport that the port's connections use
    /// (`TransportInstance::wait`): the sender's wake-up wakes this thread itself.
    Transport,
    /// On the port's condition variable: the transports' threads deliver meanwhile.
    Port,
}

/// Where a receive sleeps: in its transport when it waits for a reply and the port's
/// connections use exactly one transport with receiver-driven progress (which wakes
/// it for its data and for an interrupt); else on the port. A 1 MiB stream over shm,
/// alternating runs: 23.5-28.5 GB/s with the receiver parked in the transport,
/// 32.5-39.4 GB/s sleeping on the port.
pub(crate) fn sleep_in(awaited_reply: bool, polled_transports: usize) -> SleepIn {
    if awaited_reply && polled_transports == 1 {
        SleepIn::Transport
    } else {
        SleepIn::Port
    }
}

/// How long a receive waited: from the first clock reading (`start`; none: it did not
/// wait) to now if it slept, else to the poll loop's last reading.
pub(crate) fn waited(slept: bool, start: Option<Instant>, last: Option<Instant>) -> Duration {
    match (slept, start, last) {
        (true, Some(s), _) => s.elapsed(),
        (false, Some(s), Some(n)) => n - s,
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn seen(got: bool, waited_us: u64, awaited_reply: bool) -> Seen {
        Seen {
            got,
            waited: US * waited_us as u32,
            awaited_reply,
            drove_progress: false,
        }
    }

    /// A receive of a stream (no reply awaited) that polled its transports itself.
    fn driven(got: bool, waited_us: u64) -> Seen {
        Seen {
            drove_progress: true,
            ..seen(got, waited_us, false)
        }
    }

    #[test]
    fn a_message_within_the_configured_budget_restores_it() {
        let max = US * 50;
        assert_eq!(next_budget(max, US, seen(true, 0, false)), max);
        assert_eq!(next_budget(max, US * 3, seen(true, 50, true)), max);
    }

    #[test]
    fn a_reply_a_little_late_is_learned_as_two_waits_within_the_limit() {
        let max = US * 50;
        // QUIC's 80 us round trip: the next receive polls for 160 us.
        assert_eq!(next_budget(max, max, seen(true, 80, true)), US * 160);
        // Never past the limit, never below the configured budget.
        assert_eq!(next_budget(max, max, seen(true, 150, true)), LEARN_LIMIT);
        assert_eq!(next_budget(max, max, seen(true, 200, true)), LEARN_LIMIT);
        let big = US * 150;
        assert_eq!(
            next_budget(big, big, seen(true, 160, true)),
            LEARN_LIMIT.max(big)
        );
    }

    #[test]
    fn a_stream_that_drives_its_transports_learns_as_a_reply_does() {
        let max = US * 50;
        // 1 MiB messages over shm, 80 us apart: taken while polling next time.
        assert_eq!(next_budget(max, max, driven(true, 80)), US * 160);
        assert_eq!(next_budget(max, US * 160, driven(true, 80)), US * 160);
        assert_eq!(next_budget(max, max, driven(true, 150)), LEARN_LIMIT);
        // Within the configured budget: back to it; later than the limit, or a
        // timeout: halved, as for a reply.
        assert_eq!(next_budget(max, LEARN_LIMIT, driven(true, 20)), max);
        assert_eq!(next_budget(max, US * 160, driven(true, 300)), US * 80);
        assert_eq!(next_budget(max, US * 160, driven(false, 160)), US * 80);
        // The same stream delivered by a transport thread learns nothing.
        assert_eq!(next_budget(max, max, seen(true, 80, false)), US * 25);
    }

    #[test]
    fn late_messages_streams_and_timeouts_halve_the_budget_down_to_the_floor() {
        let max = US * 50;
        // Not a reply (a stream): nothing learned.
        assert_eq!(next_budget(max, max, seen(true, 80, false)), US * 25);
        // Later than the limit.
        assert_eq!(next_budget(max, US * 160, seen(true, 300, true)), US * 80);
        // A timeout.
        assert_eq!(next_budget(max, US * 8, seen(false, 10, true)), US * 4);
        // Halving stops at the floor.
        let mut b = max;
        for _ in 0..20 {
            b = next_budget(max, b, seen(false, 1000, false));
        }
        assert_eq!(b, MIN_BUDGET);
    }

    #[test]
    fn a_first_look_changes_the_budget_exactly_when_next_budget_does() {
        let max = US * 50;
        for current in [MIN_BUDGET, US * 3, US * 25, max, US * 160, LEARN_LIMIT] {
            for s in [seen(true, 0, false), seen(true, 0, true), driven(true, 0)] {
                let next = next_budget(max, current, s);
                assert_eq!(
                    first_look_changes_budget(max, current),
                    next != current,
                    "{current:?}, {s:?}"
                );
            }
        }
    }

    #[test]
    fn polling_switched_off_stays_off() {
        for s in [
            seen(true, 0, true),
            seen(true, 80, true),
            seen(false, 5, false),
            driven(true, 80),
        ] {
            assert_eq!(
                next_budget(Duration::ZERO, Duration::ZERO, s),
                Duration::ZERO
            );
        }
    }

    #[test]
    fn only_a_reply_on_one_polled_transport_parks_in_it() {
        assert_eq!(sleep_in(true, 1), SleepIn::Transport);
        assert_eq!(sleep_in(false, 1), SleepIn::Port);
        assert_eq!(sleep_in(true, 0), SleepIn::Port);
        assert_eq!(sleep_in(true, 2), SleepIn::Port);
    }

    #[test]
    fn the_wait_counts_from_the_first_reading() {
        assert_eq!(waited(false, None, None), Duration::ZERO);
        let s = Instant::now();
        assert_eq!(waited(false, Some(s), Some(s + US * 7)), US * 7);
        assert!(waited(true, Some(s), None) <= s.elapsed());
    }
}
