//! The port protocol's decisions, with no I/O: which connects a receive port accepts,
//! defers or rejects, when it returns credits and how many, what a connection's end
//! takes with it ([`Admission`]); and how a sender spends the credits of its
//! receiver's window ([`take_credit`]). The ports drive these under their locks and do
//! the sending, waking and upcalls themselves; the tests here drive them directly, with
//! every ordering of events that the transports may deliver.
//!
//! The protocol on a channel, sender first:
//! - `Connect` (sender, receive port name, port type) → `Accept` or `Reject(reason)`;
//!   a connect that arrives while the port hands out a message (its *outstanding*
//!   message) is answered when that message is finished, so that a receive never
//!   sees a connection appear in the middle of one;
//! - data messages, each costing its length plus a header's worth
//!   ([`protocol::cost`](crate::protocol::cost)) of the receiver's **window**; the
//!   receiver returns what finished messages cost in `Credit` batches of half the
//!   window, so that a sender blocks when the receiver falls a window behind, and
//!   never otherwise;
//! - `Disconnect`, or the channel closing or being lost, ends the connection in
//!   whatever state it is (connected, or its connect deferred).

use std::hash::Hash;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::protocol::{Control, RejectReason};

/// A receive port's connections and the protocol state around them. `K` names a
/// connection (its channel), `O` is what the port keeps of its sender.
#[derive(Debug)]
pub(crate) struct Admission<K, O> {
    /// Accepted connections, each with the bytes of its messages finished since its
    /// credits were last returned.
    connections: FxHashMap<K, (O, u64)>,
    /// Connects that arrived while a message was outstanding: accepted at its finish.
    pending: Vec<(K, O)>,
    /// A message is handed out and not finished yet.
    outstanding: bool,
    enabled: bool,
    closed: bool,
    /// The flow-control window of each connection, in bytes.
    window: u64,
    /// The port type allows many senders.
    many_senders: bool,
    /// The connection whose outstanding flag and finished bytes are lent to the
    /// port's lane (see [`lend`](Self::lend)).
    lent: Option<K>,
}

/// Senders by connection.
pub(crate) type Senders<K, O> = Vec<(K, O)>;

/// What [`Admission::admit`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// Connected now: answer `Accept`.
    Accepted,
    /// Connected when the outstanding message is finished (answer then).
    Deferred,
    /// Refused: answer `Reject`.
    Rejected(RejectReason),
}

/// What finishing a message leads to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Finished<K, O> {
    /// Credits to return to the message's sender now.
    pub(crate) credit: Option<u64>,
    /// Deferred connects accepted now: answer each `Accept`.
    pub(crate) accepted: Vec<(K, O)>,
}

impl<K: Copy + Eq + Hash, O: Clone> Admission<K, O> {
    /// A closed-to-connections port (see [`enable`](Self::enable)) whose connections
    /// each get `window` bytes.
    pub(crate) fn new(window: u64, many_senders: bool) -> Self {
        Admission {
            connections: FxHashMap::default(),
            pending: Vec::new(),
            outstanding: false,
            enabled: false,
            closed: false,
            window,
            many_senders,
            lent: None,
        }
    }

    /// Lends the common path to connection `key` (the port's lane, see `crate::lane`),
    /// if the port is in the state where only a data message of that connection can
    /// change it: open, `key` its only connection, no deferred connect and no message
    /// outstanding. Returns the bytes finished and not yet returned as credits, which
    /// the lane keeps from now on (the connection's count here is zero until
    /// [`restore`](Self::restore)). The other operations are made only while nothing is
    /// lent.
    pub(crate) fn lend(&mut self, key: K) -> Option<u64> {
        if self.lent.is_some()
            || self.closed
            || self.outstanding
            || !self.pending.is_empty()
            || self.connections.len() != 1
        {
            return None;
        }
        let (_, n) = self.connections.get_mut(&key)?;
        self.lent = Some(key);
        Some(std::mem::take(n))
    }

    /// Takes the lent common path back: whether the lane handed out a message that is
    /// not finished yet, and the bytes it finished since it was lent, not returned yet.
    pub(crate) fn restore(&mut self, outstanding: bool, owed: u64) {
        let Some(key) = self.lent.take() else {
            return;
        };
        self.outstanding = outstanding;
        if let Some((_, n)) = self.connections.get_mut(&key) {
            *n = n.saturating_add(owed);
        }
    }

    /// Whether the common path is lent (see [`lend`](Self::lend)).
    pub(crate) fn is_lent(&self) -> bool {
        self.lent.is_some()
    }

    /// Lets connects in (true) or turns them away as `NotEnabled` (false).
    pub(crate) fn enable(&mut self, on: bool) {
        self.enabled = on;
    }

    /// The port closes: every later connect is rejected as `Closed`.
    pub(crate) fn close(&mut self) {
        debug_assert!(self.lent.is_none(), "the common path is lent");
        self.closed = true;
        self.enabled = false;
    }

    /// Whether the port closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Why a connect would be refused now, before the port's connection upcall is
    /// asked; None: ask it, then [`admit`](Self::admit).
    pub(crate) fn check(&self) -> Option<RejectReason> {
        if self.closed {
            Some(RejectReason::Closed)
        } else if !self.enabled {
            Some(RejectReason::NotEnabled)
        } else if self.senders() > 0 && !self.many_senders {
            Some(RejectReason::OnlyOneSender)
        } else {
            None
        }
    }

    /// Admits a connect that passed [`check`](Self::check) (and the upcall): now, or
    /// deferred while a message is outstanding; refused if the port closed meanwhile.
    /// A channel that is already connected (or deferred) is not entered twice.
    pub(crate) fn admit(&mut self, key: K, origin: O) -> Admitted {
        debug_assert!(self.lent.is_none(), "the common path is lent");
        if self.closed {
            return Admitted::Rejected(RejectReason::Closed);
        }
        if self.connections.contains_key(&key) || self.pending.iter().any(|(k, _)| *k == key) {
            return Admitted::Rejected(RejectReason::OnlyOneSender);
        }
        if self.outstanding {
            self.pending.push((key, origin));
            Admitted::Deferred
        } else {
            self.connections.insert(key, (origin, 0));
            Admitted::Accepted
        }
    }

    /// A message is handed out.
    pub(crate) fn hand_out(&mut self) {
        debug_assert!(self.lent.is_none(), "the common path is lent");
        self.outstanding = true;
    }

    /// Whether a message is handed out and not finished.
    pub(crate) fn outstanding(&self) -> bool {
        debug_assert!(self.lent.is_none(), "the common path is lent");
        self.outstanding
    }

    /// The outstanding message, from `key` and costing `cost`, was finished: the
    /// credits to return (a batch once half the window is finished, for a connection
    /// still open), and the deferred connects accepted now.
    pub(crate) fn finished(&mut self, key: K, cost: u64) -> Finished<K, O> {
        debug_assert!(self.lent.is_none(), "the common path is lent");
        self.outstanding = false;
        let half = self.window / 2;
        // One lookup: a message is finished for every message received.
        let credit = self.connections.get_mut(&key).and_then(|(_, n)| {
            *n = n.saturating_add(cost);
            (*n >= half).then(|| std::mem::take(n))
        });
        let accepted = std::mem::take(&mut self.pending);
        for (k, o) in &accepted {
            self.connections.insert(*k, (o.clone(), 0));
        }
        Finished { credit, accepted }
    }

    /// Connection `key` ended (Disconnect, closed or lost), connected or deferred: its
    /// sender, if it was one of this port's. Credits it had not been returned are not.
    pub(crate) fn ended(&mut self, key: K) -> Option<O> {
        debug_assert!(self.lent.is_none(), "the common path is lent");
        self.connections.remove(&key).map(|(o, _)| o).or_else(|| {
            let i = self.pending.iter().position(|(k, _)| *k == key)?;
            Some(self.pending.remove(i).1)
        })
    }

    /// The sender of connection `key`, if it is connected.
    pub(crate) fn connection(&self, key: &K) -> Option<&O> {
        self.connections.get(key).map(|(o, _)| o)
    }

    /// The connected senders.
    pub(crate) fn connections(&self) -> impl Iterator<Item = (&K, &O)> {
        self.connections.iter().map(|(k, (o, _))| (k, o))
    }

    /// The connected channels.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.connections.keys()
    }

    /// Whether nobody is connected or deferred.
    pub(crate) fn is_empty(&self) -> bool {
        self.senders() == 0
    }

    /// Connected and deferred senders.
    pub(crate) fn senders(&self) -> usize {
        self.connections.len() + self.pending.len()
    }

    /// Takes every connection and every deferred connect out (the port closes them):
    /// (connected, deferred).
    pub(crate) fn drain(&mut self) -> (Senders<K, O>, Senders<K, O>) {
        debug_assert!(self.lent.is_none(), "the common path is lent");
        (
            self.connections.drain().map(|(k, (o, _))| (k, o)).collect(),
            std::mem::take(&mut self.pending),
        )
    }
}

/// A sender's credits after spending `cost` of them, if the receiver's window (of
/// `window` bytes, `credits` of it left) lets the message go now: when `cost` fits, or
/// when nothing is in flight (a message larger than the window goes alone). None: wait
/// for credits.
pub(crate) fn take_credit(credits: u64, window: u64, cost: u64) -> Option<u64> {
    (credits >= cost || credits >= window).then(|| credits.saturating_sub(cost))
}

/// The first pause of a sender whose connect was turned away for now.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(1);
/// The longest pause between two connects (the pause doubles up to it).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_millis(50);

/// What a connecting sender does after its `Connect` was answered (or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnectStep {
    /// Accepted: the connection is open.
    Connected,
    /// Turned away for now (no such port yet, not enabled yet): send `Connect` again
    /// after this pause, then pause twice as long (up to [`MAX_BACKOFF`]) next time.
    Retry { after: Duration, next: Duration },
    /// Refused for good, or the channel was lost: the connect fails with this reason.
    Failed(String),
    /// A reply that is not one: a protocol error.
    Unexpected(String),
    /// The deadline passes before an answer (or before a retry could be answered); the
    /// last refusal, if any, for the error.
    TimedOut,
}

/// The sender's side of the connect handshake: what to do with `reply` (Ok: the
/// receiver's answer; Err(Some(why)): the channel was lost; Err(None): no answer by
/// the deadline), at `now`, with `deadline` and the current pause `backoff`.
pub(crate) fn after_reply(
    reply: Result<&Control, Option<&str>>,
    now: Instant,
    deadline: Instant,
    backoff: Duration,
) -> ConnectStep {
    match reply {
        Ok(Control::Accept { .. }) => ConnectStep::Connected,
        Ok(Control::Reject(r)) if r.is_retryable() => {
            if now + backoff >= deadline {
                ConnectStep::TimedOut
            } else {
                ConnectStep::Retry {
                    after: backoff,
                    next: (backoff * 2).min(MAX_BACKOFF),
                }
            }
        }
        Ok(Control::Reject(r)) => ConnectStep::Failed(r.to_string()),
        Ok(other) => ConnectStep::Unexpected(format!("unexpected reply {other:?}")),
        Err(Some(lost)) => ConnectStep::Failed(lost.to_string()),
        Err(None) => ConnectStep::TimedOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_connect_turned_away_retries_with_a_doubling_pause_until_the_deadline() {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_millis(100);
        let not_yet = Control::Reject(RejectReason::NoSuchPort);
        let mut backoff = FIRST_BACKOFF;
        let mut now = t0;
        let mut pauses = Vec::new();
        loop {
            match after_reply(Ok(&not_yet), now, deadline, backoff) {
                ConnectStep::Retry { after, next } => {
                    pauses.push(after.as_millis());
                    now += after;
                    backoff = next;
                }
                ConnectStep::TimedOut => break,
                other => panic!("{other:?}"),
            }
        }
        // 1 + 2 + 4 + 8 + 16 + 32 = 63 ms; the next 50 ms pause would pass the deadline.
        assert_eq!(pauses, vec![1, 2, 4, 8, 16, 32]);
        assert_eq!(
            after_reply(Ok(&not_yet), t0, t0 + Duration::from_secs(9), MAX_BACKOFF),
            ConnectStep::Retry {
                after: MAX_BACKOFF,
                next: MAX_BACKOFF
            }
        );
    }

    #[test]
    fn every_answer_of_a_connect_has_one_step() {
        let t0 = Instant::now();
        let d = t0 + Duration::from_secs(1);
        let b = FIRST_BACKOFF;
        let accept = Control::Accept {
            receiver: crate::identifiers::ReceivePortIdentifier {
                ibis: ipl_registry::IbisIdentifier::new(
                    ipl_registry::MemberId(1),
                    "p",
                    "c",
                    "m",
                    Vec::new(),
                ),
                name: "in".into(),
            },
        };
        assert_eq!(after_reply(Ok(&accept), t0, d, b), ConnectStep::Connected);
        for r in [
            RejectReason::OnlyOneSender,
            RejectReason::Refused,
            RejectReason::Closed,
        ] {
            let step = after_reply(Ok(&Control::Reject(r.clone())), t0, d, b);
            assert_eq!(step, ConnectStep::Failed(r.to_string()));
        }
        assert!(matches!(
            after_reply(Ok(&Control::Credit { bytes: 5 }), t0, d, b),
            ConnectStep::Unexpected(_)
        ));
        assert_eq!(
            after_reply(Err(Some("lost")), t0, d, b),
            ConnectStep::Failed("lost".into())
        );
        assert_eq!(after_reply(Err(None), t0, d, b), ConnectStep::TimedOut);
        // Turned away at the deadline: no retry.
        let late = Control::Reject(RejectReason::NotEnabled);
        assert_eq!(after_reply(Ok(&late), d, d, b), ConnectStep::TimedOut);
    }

    type A = Admission<u32, &'static str>;

    fn open(window: u64, many: bool) -> A {
        let mut a = A::new(window, many);
        a.enable(true);
        a
    }

    #[test]
    fn connects_are_refused_until_enabled_and_after_close() {
        let mut a = A::new(100, true);
        assert_eq!(a.check(), Some(RejectReason::NotEnabled));
        a.enable(true);
        assert_eq!(a.check(), None);
        assert_eq!(a.admit(1, "s1"), Admitted::Accepted);
        a.close();
        assert_eq!(a.check(), Some(RejectReason::Closed));
        // A connect that passed the check before the close is still refused.
        assert_eq!(a.admit(2, "s2"), Admitted::Rejected(RejectReason::Closed));
        // Enabling again does not reopen a closed port.
        a.enable(true);
        assert_eq!(a.check(), Some(RejectReason::Closed));
    }

    #[test]
    fn one_to_one_takes_a_single_sender_connected_or_deferred() {
        let mut a = open(100, false);
        a.hand_out();
        assert_eq!(a.admit(1, "s1"), Admitted::Deferred);
        assert_eq!(a.check(), Some(RejectReason::OnlyOneSender));
        // The deferred one ends before it is accepted: the port is free again.
        assert_eq!(a.ended(1), Some("s1"));
        assert_eq!(a.check(), None);
    }

    #[test]
    fn a_connect_during_a_message_is_accepted_at_its_finish() {
        let mut a = open(100, true);
        assert_eq!(a.admit(1, "s1"), Admitted::Accepted);
        a.hand_out();
        assert_eq!(a.admit(2, "s2"), Admitted::Deferred);
        assert!(
            a.connection(&2).is_none(),
            "not connected before the finish"
        );
        let f = a.finished(1, 10);
        assert_eq!(f.accepted, vec![(2, "s2")]);
        assert_eq!(a.connection(&2), Some(&"s2"));
        assert_eq!(a.senders(), 2);
        // The same channel is not entered twice.
        assert_eq!(
            a.admit(2, "again"),
            Admitted::Rejected(RejectReason::OnlyOneSender)
        );
    }

    #[test]
    fn credits_come_back_in_batches_of_half_the_window() {
        let mut a = open(100, true);
        a.admit(1, "s1");
        let mut returned = Vec::new();
        for _ in 0..10 {
            a.hand_out();
            returned.push(a.finished(1, 20).credit);
        }
        // 20, 40 (a batch of 60 at the third), ...
        assert_eq!(
            returned,
            vec![
                None,
                None,
                Some(60),
                None,
                None,
                Some(60),
                None,
                None,
                Some(60),
                None
            ]
        );
        // One message larger than the window is returned at once.
        a.hand_out();
        assert_eq!(a.finished(1, 500).credit, Some(520));
    }

    #[test]
    fn a_message_finished_after_its_connection_ended_returns_nothing() {
        let mut a = open(100, true);
        a.admit(1, "s1");
        a.hand_out();
        a.finished(1, 40);
        a.hand_out();
        assert_eq!(a.ended(1), Some("s1"));
        // The message handed out before the end is finished after it.
        let f = a.finished(1, 40);
        assert_eq!(f.credit, None);
        assert!(!a.outstanding());
        // A new connection on a new channel starts from nothing.
        a.admit(2, "s2");
        a.hand_out();
        assert_eq!(a.finished(2, 40).credit, None);
    }

    #[test]
    fn an_end_in_every_state_leaves_nothing_behind() {
        // Connected, connected with credits owed, deferred, unknown, twice.
        let mut a = open(100, true);
        a.admit(1, "s1");
        a.admit(2, "s2");
        a.hand_out();
        a.finished(2, 30);
        a.hand_out();
        a.admit(3, "s3");
        assert_eq!(a.ended(1), Some("s1"));
        assert_eq!(a.ended(2), Some("s2"));
        assert_eq!(a.ended(3), Some("s3"));
        assert_eq!(a.ended(4), None);
        assert_eq!(a.ended(2), None);
        assert!(a.is_empty());
        let f = a.finished(2, 30);
        assert_eq!(
            f,
            Finished {
                credit: None,
                accepted: vec![]
            }
        );
    }

    #[test]
    fn a_sender_spends_what_fits_or_goes_alone_when_the_window_is_all_free() {
        assert_eq!(take_credit(100, 100, 30), Some(70));
        assert_eq!(take_credit(70, 100, 70), Some(0));
        assert_eq!(take_credit(0, 100, 1), None, "window exhausted: wait");
        assert_eq!(take_credit(50, 100, 60), None);
        // Larger than the window: only when nothing is in flight.
        assert_eq!(take_credit(100, 100, 250), Some(0));
        assert_eq!(take_credit(99, 100, 250), None);
    }

    /// What the transports may deliver to a receive port, in any order.
    #[derive(Debug, Clone)]
    enum Event {
        Connect(u32),
        Receive,
        Finish(u64),
        End(u32),
        Enable(bool),
        /// The port lends its common path, if it can (see `crate::lane`).
        Lend,
        Close,
    }

    fn event() -> impl Strategy<Value = Event> {
        // A close is for good: rare, so that most sequences run long before it.
        prop_oneof![
            10 => (0u32..4).prop_map(Event::Connect),
            10 => Just(Event::Receive),
            10 => (1u64..80).prop_map(Event::Finish),
            10 => (0u32..4).prop_map(Event::End),
            10 => any::<bool>().prop_map(Event::Enable),
            10 => Just(Event::Lend),
            1 => Just(Event::Close),
        ]
    }

    proptest! {
        /// Under any order of connects, messages, finishes and ends: a channel is
        /// connected or deferred, never both; nothing is deferred without an
        /// outstanding message; deferred connects are accepted at the finish; credits
        /// go only to open connections and never exceed what their finished messages
        /// cost, and what is owed is returned once half the window is reached. With the
        /// common path lent to a lane between the events (receives and finishes then
        /// go through the lane, anything else takes it back first), the same holds.
        #[test]
        fn the_receivers_protocol_state_stays_consistent(
            many in any::<bool>(),
            events in proptest::collection::vec(event(), 0..60),
        ) {
            const WINDOW: u64 = 200;
            let mut a: Admission<u32, u32> = Admission::new(WINDOW, many);
            // What each open connection's finished messages cost, and was returned.
            let mut cost: FxHashMap<u32, (u64, u64)> = FxHashMap::default();
            let mut from: Option<u32> = None;
            let lane = crate::lane::Lane::default();
            let mut lent: Option<u32> = None;
            for e in events {
                let on_lane = lent.is_some() && matches!(e, Event::Receive | Event::Finish(_));
                if !on_lane {
                    if let Some((out, owed)) = lane.revoke() {
                        a.restore(out, owed);
                    }
                    lent = None;
                    prop_assert!(!a.is_lent());
                }
                match e {
                    Event::Close => a.close(),
                    Event::Lend => {
                        let first = a.keys().next().copied();
                        let lend = first.and_then(|k| a.lend(k));
                        if a.is_closed() {
                            prop_assert_eq!(lend, None, "a closed port lends nothing");
                        }
                        if let Some(owed) = lend {
                            prop_assert!(owed < WINDOW / 2);
                            prop_assert!(!a.outstanding && a.pending.is_empty());
                            prop_assert_eq!(a.keys().count(), 1);
                            lane.lend(owed);
                            lent = first;
                        }
                    }
                    Event::Receive if on_lane => {
                        if lane.try_hand_out() {
                            prop_assert!(from.is_none());
                            from = lent;
                        }
                    }
                    Event::Finish(c) if on_lane => {
                        if let crate::lane::Finish::Done(credit) = lane.finish(c, WINDOW / 2) {
                            let k = from.take().unwrap();
                            let (done, back) = cost.get_mut(&k).unwrap();
                            *done += c;
                            if let Some(n) = credit {
                                *back += n;
                                prop_assert_eq!(*back, *done, "a batch returns all owed");
                                prop_assert!(n >= WINDOW / 2);
                            } else {
                                prop_assert!(*done - *back < WINDOW / 2);
                            }
                        } else {
                            prop_assert!(from.is_none(), "a lane message finished the locked way");
                        }
                    }
                    Event::Connect(k) => {
                        if a.check().is_none() {
                            match a.admit(k, k) {
                                Admitted::Accepted => { cost.insert(k, (0, 0)); }
                                Admitted::Deferred => prop_assert!(a.outstanding()),
                                Admitted::Rejected(_) => {}
                            }
                        }
                    }
                    Event::Receive => {
                        if !a.outstanding() {
                            let first = a.keys().next().copied();
                            if let Some(k) = first {
                                a.hand_out();
                                from = Some(k);
                            }
                        }
                    }
                    Event::Finish(c) => {
                        if a.outstanding() {
                            let k = from.take().unwrap();
                            let was_open = a.connection(&k).is_some();
                            let f = a.finished(k, c);
                            match cost.get_mut(&k).filter(|_| was_open) {
                                Some((done, back)) => {
                                    *done += c;
                                    if let Some(n) = f.credit {
                                        *back += n;
                                        prop_assert_eq!(*back, *done, "a batch returns all owed");
                                        prop_assert!(n >= WINDOW / 2);
                                    } else {
                                        prop_assert!(*done - *back < WINDOW / 2);
                                    }
                                }
                                None => prop_assert_eq!(f.credit, None),
                            }
                            for (nk, _) in &f.accepted {
                                prop_assert!(a.connection(nk).is_some());
                                cost.insert(*nk, (0, 0));
                            }
                        }
                    }
                    Event::End(k) => {
                        let was = a.connection(&k).is_some()
                            || a.pending.iter().any(|(x, _)| *x == k);
                        let gone = a.ended(k);
                        prop_assert_eq!(gone.is_some(), was);
                        prop_assert!(a.connection(&k).is_none());
                        cost.remove(&k);
                    }
                    Event::Enable(on) => a.enable(on),
                }
                if !a.outstanding {
                    prop_assert!(a.pending.is_empty(), "deferred without a message");
                }
                for (k, _) in &a.pending {
                    prop_assert!(a.connection(k).is_none(), "connected and deferred");
                }
                if !many {
                    prop_assert!(a.senders() <= 1);
                }
            }
        }
    }
}
