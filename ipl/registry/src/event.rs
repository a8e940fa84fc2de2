//! Registry events and the upcall interface [`RegistryEventHandler`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::identifier::IbisIdentifier;

/// The per-pool sequence number of an event.
///
/// Every event a pool emits gets the next number of that pool's single
/// counter, and a member receives its events in increasing sequence order.
/// Membership events (`Joined`, `Left`, `Died`) are therefore totally ordered:
/// any two members observe the membership changes they both witness in the
/// same order, with the same sequence numbers. A joining member's catch-up
/// `Joined` events carry the numbers of the original joins.
pub type Seq = u64;

/// Something that happened in a pool, as delivered to one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A member joined the pool (a new member also gets one per existing member,
    /// in join order, followed by its own).
    Joined(IbisIdentifier),
    /// A member left the pool gracefully.
    Left(IbisIdentifier),
    /// A member was declared dead (it vanished, crashed and failed a liveness
    /// probe, or somebody called `assume_dead` on it).
    Died(IbisIdentifier),
    /// `winner` won the election `election`.
    Elected {
        /// Name of the election.
        election: String,
        /// The (only) winner.
        winner: IbisIdentifier,
    },
    /// The winner of `election` left or died; the election can be won again.
    Unelected {
        /// Name of the election.
        election: String,
    },
    /// `source` sent `signal` to this member.
    Signal {
        /// The (application-defined) signal text.
        signal: String,
        /// The member that sent it.
        source: IbisIdentifier,
    },
    /// A closed-world pool reached its configured size; no one else can join.
    PoolClosed,
    /// `by` terminated the pool.
    Terminated {
        /// The member that called terminate.
        by: IbisIdentifier,
    },
}

impl Event {
    /// True for `Joined`, `Left` and `Died`, the totally ordered membership events.
    pub fn is_membership(&self) -> bool {
        matches!(self, Event::Joined(_) | Event::Left(_) | Event::Died(_))
    }

    /// Delivers this event to the matching method of `handler`.
    pub fn dispatch<H: RegistryEventHandler + ?Sized>(&self, handler: &mut H) {
        match self {
            Event::Joined(m) => handler.joined(m),
            Event::Left(m) => handler.left(m),
            Event::Died(m) => handler.died(m),
            Event::Elected { election, winner } => handler.elected(election, winner),
            Event::Unelected { election } => handler.unelected(election),
            Event::Signal { signal, source } => handler.got_signal(signal, source),
            Event::PoolClosed => handler.pool_closed(),
            Event::Terminated { by } => handler.terminated(by),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Joined(m) => write!(f, "{m} joined"),
            Event::Left(m) => write!(f, "{m} left"),
            Event::Died(m) => write!(f, "{m} died"),
            Event::Elected { election, winner } => {
                write!(f, "{winner} won election {election:?}")
            }
            Event::Unelected { election } => write!(f, "election {election:?} lost its winner"),
            Event::Signal { signal, source } => write!(f, "signal {signal:?} from {source}"),
            Event::PoolClosed => write!(f, "pool closed"),
            Event::Terminated { by } => write!(f, "pool terminated by {by}"),
        }
    }
}

/// Upcall interface for registry events.
///
/// Install one with `Registry::set_event_handler`. Its methods are called in
/// event order from one dedicated thread named `"ipl-registry-events"`, never
/// two at once. All methods default to doing nothing. A method should not block
/// for long: it delays all later events.
pub trait RegistryEventHandler: Send + 'static {
    /// `member` joined the pool.
    fn joined(&mut self, member: &IbisIdentifier) {
        let _ = member;
    }
    /// `member` left the pool gracefully.
    fn left(&mut self, member: &IbisIdentifier) {
        let _ = member;
    }
    /// `member` was declared dead.
    fn died(&mut self, member: &IbisIdentifier) {
        let _ = member;
    }
    /// `source` sent `signal` to this member.
    fn got_signal(&mut self, signal: &str, source: &IbisIdentifier) {
        let _ = (signal, source);
    }
    /// `winner` won `election`.
    fn elected(&mut self, election: &str, winner: &IbisIdentifier) {
        let _ = (election, winner);
    }
    /// The winner of `election` is gone.
    fn unelected(&mut self, election: &str) {
        let _ = election;
    }
    /// The closed-world pool reached its size.
    fn pool_closed(&mut self) {}
    /// `by` terminated the pool.
    fn terminated(&mut self, by: &IbisIdentifier) {
        let _ = by;
    }
}
