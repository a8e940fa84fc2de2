//! A waiting receive asks the registry whether its senders are gone: only a departure
//! the registry reported counts (not a member missing from a stale member list), and a
//! loop of short receives asks as well as one long receive.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use common::{ibis, pool, simple, LONG};
use ipl::{EmbeddedRegistry, Event, IbisIdentifier, IplError};
use ipl_registry::{JoinRequest, MemberId, PoolConfig, PoolStatus, RegistryBackend, Result, Seq};

/// The embedded registry as a member's client sees it, with a member list that misses
/// `unlisted` (their `Joined` not processed yet) and `gone` reported departed.
struct Skewed {
    inner: EmbeddedRegistry,
    unlisted: HashSet<MemberId>,
    gone: HashSet<MemberId>,
}

impl RegistryBackend for Skewed {
    fn join(&self, pool: &str, config: PoolConfig, request: JoinRequest) -> Result<IbisIdentifier> {
        RegistryBackend::join(&self.inner, pool, config, request)
    }
    fn leave(&self, me: &IbisIdentifier) -> Result<()> {
        self.inner.leave(me)
    }
    fn abandon(&self, me: &IbisIdentifier) {
        self.inner.abandon(me)
    }
    fn crash(&self, me: &IbisIdentifier) {
        self.inner.crash(me)
    }
    fn elect(&self, me: &IbisIdentifier, e: &str) -> Result<IbisIdentifier> {
        self.inner.elect(me, e)
    }
    fn election_result(&self, me: &IbisIdentifier, e: &str) -> Result<Option<IbisIdentifier>> {
        self.inner.election_result(me, e)
    }
    fn signal(&self, me: &IbisIdentifier, s: &str, t: &[IbisIdentifier]) -> Result<()> {
        self.inner.signal(me, s, t)
    }
    fn terminate(&self, me: &IbisIdentifier) -> Result<()> {
        self.inner.terminate(me)
    }
    fn maybe_dead(&self, me: &IbisIdentifier, s: &IbisIdentifier) -> Result<()> {
        self.inner.maybe_dead(me, s)
    }
    fn assume_dead(&self, me: &IbisIdentifier, s: &IbisIdentifier) -> Result<()> {
        self.inner.assume_dead(me, s)
    }
    fn take_events(&self, me: &IbisIdentifier) -> Result<Vec<(Seq, Event)>> {
        self.inner.take_events(me)
    }
    fn members(&self, me: &IbisIdentifier) -> Result<Vec<IbisIdentifier>> {
        let mut m = self.inner.members(me)?;
        m.retain(|i| !self.unlisted.contains(&i.id()) && !self.gone.contains(&i.id()));
        Ok(m)
    }
    fn is_gone(&self, me: &IbisIdentifier, who: &IbisIdentifier) -> Result<bool> {
        Ok(self.gone.contains(&who.id()) || self.inner.is_gone(me, who)?)
    }
    fn pool_status(&self, me: &IbisIdentifier) -> Result<PoolStatus> {
        self.inner.pool_status(me)
    }
    fn version(&self) -> u64 {
        self.inner.version()
    }
    fn wait_for_change(&self, seen: u64, deadline: Option<Instant>) -> Result<u64> {
        self.inner.wait_for_change(seen, deadline)
    }
    fn poll_change(&self, seen: u64, waker: &Waker) -> Poll<Result<u64>> {
        self.inner.poll_change(seen, waker)
    }
}

/// A sender member on `reg`, then a receiver member whose registry view is skewed about
/// the sender as `skew` says; the sender's port connected to the receiver's.
fn pair(
    prefix: &str,
    skew: impl FnOnce(MemberId) -> (HashSet<MemberId>, HashSet<MemberId>),
) -> (ipl::Ibis, ipl::Ibis, ipl::ReceivePort, ipl::SendPort) {
    let reg = EmbeddedRegistry::new();
    let p = pool(prefix);
    let t = simple();
    let sender = ibis(&reg, &p, &[t]);
    let (unlisted, gone) = skew(sender.identifier().id());
    let receiver = ipl::Ibis::builder()
        .pool(&p)
        .registry_backend(Arc::new(Skewed {
            inner: reg,
            unlisted,
            gone,
        }))
        .port_type(t)
        .build()
        .expect("receiver builds");
    let (rp, sp) = common::connect(&sender, &receiver, t, "in", "out");
    (sender, receiver, rp, sp)
}

#[test]
fn a_sender_missing_from_the_member_list_is_not_cut_off() {
    let (_s, _r, rp, _sp) = pair("notlisted", |id| ([id].into(), HashSet::new()));
    // Longer than the check interval (a second): the receive asks the registry at
    // least once while it waits.
    let wait = Duration::from_millis(2500);
    match rp.receive_timeout(wait) {
        Err(IplError::Timeout(_)) => {}
        other => panic!("the live sender's connection must stay: {:?}", other.err()),
    }
    assert_eq!(rp.connected_to().len(), 1);
}

#[test]
fn a_loop_of_short_receives_notices_a_gone_sender() {
    let (_s, _r, rp, _sp) = pair("shortloop", |id| (HashSet::new(), [id].into()));
    let deadline = Instant::now() + 2 * LONG;
    loop {
        assert!(
            Instant::now() < deadline,
            "short receives never ended the connection of a gone sender"
        );
        match rp.receive_timeout(Duration::from_millis(10)) {
            Err(IplError::Timeout(_)) => continue,
            Err(IplError::ConnectionLost { .. }) => break,
            other => panic!("unexpected: {:?}", other.map(|_| "a message")),
        }
    }
    assert!(rp.connected_to().is_empty());
}
