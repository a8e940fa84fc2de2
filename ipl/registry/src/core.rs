//! The sans-IO registry core.
//!
//! [`PoolState`] is the complete state machine of one pool and [`RegistryCore`]
//! a set of pools keyed by name. Both are pure: no threads, clocks or I/O, and
//! fully deterministic (the same calls give the same ids, events and sequence
//! numbers). Drivers (the in-process [`EmbeddedRegistry`](crate::EmbeddedRegistry)
//! today, a network server later) own a core, feed it operations, deliver the
//! queued events with [`PoolState::take_events`], and do whatever the core
//! cannot, such as liveness probes (see [`MaybeDead`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::error::{RegistryError, Result};
use crate::event::{Event, Seq};
use crate::identifier::{IbisIdentifier, MemberId, TransportAddress};

/// Configuration of a pool, fixed by its first member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PoolConfig {
    /// `Some(n)`: closed world. The pool closes (and emits
    /// [`Event::PoolClosed`]) once `n` members have joined; later joins fail
    /// with [`RegistryError::PoolClosed`]. `None`: open world, never closes.
    pub size: Option<usize>,
}

impl PoolConfig {
    /// An open-world pool: members may join at any time.
    pub fn open_world() -> Self {
        Self { size: None }
    }

    /// A closed-world pool of exactly `size` members.
    pub fn closed_world(size: usize) -> Self {
        Self { size: Some(size) }
    }

    fn validate(&self) -> Result<()> {
        if self.size == Some(0) {
            return Err(RegistryError::InvalidConfig(
                "a closed-world pool needs a size of at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// What a new member tells the registry about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JoinRequest {
    /// The member's cluster (location) name.
    pub cluster: String,
    /// A human-readable label; `None` gives `"member-<id>"`.
    pub name: Option<String>,
    /// Transport endpoints others may connect to.
    pub addresses: Vec<TransportAddress>,
}

impl JoinRequest {
    /// A request for a member in `cluster`, without name or addresses.
    pub fn new(cluster: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            name: None,
            addresses: Vec::new(),
        }
    }

    /// Sets the human-readable name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a transport address.
    pub fn with_address(
        mut self,
        transport: impl Into<String>,
        address: impl Into<Vec<u8>>,
    ) -> Self {
        self.addresses
            .push(TransportAddress::new(transport, address));
        self
    }
}

/// What the driver must do after [`PoolState::maybe_dead`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MaybeDead {
    /// The suspect is a member: probe its liveness and call
    /// [`PoolState::died`] if the probe fails; otherwise nothing changes.
    ProbeNeeded(MemberId),
    /// The suspect is not (or no longer) a member; nothing to do.
    NotAMember,
}

#[derive(Debug, Clone)]
struct Member {
    ident: IbisIdentifier,
    join_seq: Seq,
    events: VecDeque<(Seq, Event)>,
}

/// The state of one pool (sans-IO).
#[derive(Debug, Clone)]
pub struct PoolState {
    name: String,
    config: PoolConfig,
    /// Current members, keyed (and so ordered) by id = join order.
    members: BTreeMap<MemberId, Member>,
    next_id: u64,
    next_seq: Seq,
    joins: usize,
    closed: bool,
    terminated_by: Option<IbisIdentifier>,
    elections: BTreeMap<String, IbisIdentifier>,
    touched: BTreeSet<MemberId>,
}

impl PoolState {
    /// Creates an empty pool.
    pub fn new(name: impl Into<String>, config: PoolConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            name: name.into(),
            config,
            members: BTreeMap::new(),
            next_id: 0,
            next_seq: 0,
            joins: 0,
            closed: false,
            terminated_by: None,
            elections: BTreeMap::new(),
            touched: BTreeSet::new(),
        })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pool's configuration.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    fn unknown(&self, member: MemberId) -> RegistryError {
        RegistryError::UnknownMember {
            pool: self.name.clone(),
            member,
        }
    }

    fn next_seq(&mut self) -> Seq {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    fn push(&mut self, to: MemberId, seq: Seq, event: Event) {
        if let Some(m) = self.members.get_mut(&to) {
            m.events.push_back((seq, event));
            self.touched.insert(to);
        }
    }

    fn broadcast(&mut self, event: Event) -> Seq {
        let seq = self.next_seq();
        let ids: Vec<MemberId> = self.members.keys().copied().collect();
        for id in ids {
            self.push(id, seq, event.clone());
        }
        seq
    }

    /// Adds a member. Its event queue starts with `Joined` of every current
    /// member in join order, then its own `Joined`; all existing members get
    /// the new `Joined`. If this join fills a closed-world pool, `PoolClosed`
    /// goes to everyone.
    pub fn join(&mut self, request: JoinRequest) -> Result<IbisIdentifier> {
        if self.terminated_by.is_some() {
            return Err(RegistryError::PoolTerminated(self.name.clone()));
        }
        if self.closed {
            return Err(RegistryError::PoolClosed(self.name.clone()));
        }
        let id = MemberId(self.next_id);
        self.next_id += 1;
        self.joins += 1;
        let name = request.name.unwrap_or_else(|| format!("member-{}", id.0));
        let ident = IbisIdentifier::new(
            id,
            self.name.clone(),
            request.cluster,
            name,
            request.addresses,
        );
        let catch_up: VecDeque<(Seq, Event)> = self
            .members
            .values()
            .map(|m| (m.join_seq, Event::Joined(m.ident.clone())))
            .collect();
        let seq = self.next_seq();
        for m in self.members.values_mut() {
            m.events.push_back((seq, Event::Joined(ident.clone())));
        }
        self.touched.extend(self.members.keys().copied());
        let mut events = catch_up;
        events.push_back((seq, Event::Joined(ident.clone())));
        self.members.insert(
            id,
            Member {
                ident: ident.clone(),
                join_seq: seq,
                events,
            },
        );
        self.touched.insert(id);
        tracing::debug!(pool = %self.name, member = %ident, "member joined");
        if self.config.size.is_some_and(|n| self.joins >= n) {
            self.closed = true;
            self.broadcast(Event::PoolClosed);
            tracing::debug!(pool = %self.name, "pool closed");
        }
        Ok(ident)
    }

    fn remove(&mut self, id: MemberId, died: bool) -> Result<IbisIdentifier> {
        let member = self.members.remove(&id).ok_or_else(|| self.unknown(id))?;
        self.touched.remove(&id);
        let ident = member.ident;
        if died {
            tracing::debug!(pool = %self.name, member = %ident, "member died");
            self.broadcast(Event::Died(ident.clone()));
        } else {
            tracing::debug!(pool = %self.name, member = %ident, "member left");
            self.broadcast(Event::Left(ident.clone()));
        }
        let lost: Vec<String> = self
            .elections
            .iter()
            .filter(|(_, w)| **w == ident)
            .map(|(e, _)| e.clone())
            .collect();
        for election in lost {
            self.elections.remove(&election);
            self.broadcast(Event::Unelected { election });
        }
        Ok(ident)
    }

    /// Removes a member that leaves gracefully: `Left` to all remaining members,
    /// and `Unelected` for every election it had won.
    pub fn leave(&mut self, id: MemberId) -> Result<IbisIdentifier> {
        self.remove(id, false)
    }

    /// Removes a member declared dead: `Died` to all remaining members, and
    /// `Unelected` for every election it had won.
    pub fn died(&mut self, id: MemberId) -> Result<IbisIdentifier> {
        self.remove(id, true)
    }

    /// Same as [`died`](Self::died): somebody asserts the member is dead.
    pub fn assume_dead(&mut self, id: MemberId) -> Result<IbisIdentifier> {
        self.died(id)
    }

    /// Somebody suspects `suspect` is dead. The core cannot probe, so it says
    /// what the driver should do.
    pub fn maybe_dead(&self, suspect: MemberId) -> MaybeDead {
        if self.members.contains_key(&suspect) {
            MaybeDead::ProbeNeeded(suspect)
        } else {
            MaybeDead::NotAMember
        }
    }

    /// Strict election: the first candidate wins; everyone who asks later gets
    /// the same winner (until the winner leaves or dies). A new winner is
    /// announced to all members with `Elected`.
    pub fn elect(&mut self, election: &str, candidate: MemberId) -> Result<IbisIdentifier> {
        let cand = self
            .members
            .get(&candidate)
            .ok_or_else(|| self.unknown(candidate))?
            .ident
            .clone();
        if let Some(w) = self.elections.get(election) {
            return Ok(w.clone());
        }
        self.elections.insert(election.to_owned(), cand.clone());
        tracing::debug!(pool = %self.name, election, winner = %cand, "election won");
        self.broadcast(Event::Elected {
            election: election.to_owned(),
            winner: cand.clone(),
        });
        Ok(cand)
    }

    /// The current winner of `election`, if any.
    pub fn election_result(&self, election: &str) -> Option<IbisIdentifier> {
        self.elections.get(election).cloned()
    }

    /// Sends `signal` from `from` to each of `targets` (duplicates are sent
    /// once). All targets must be members, or nothing is sent.
    pub fn signal(&mut self, from: MemberId, signal: &str, targets: &[MemberId]) -> Result<()> {
        let source = self
            .members
            .get(&from)
            .ok_or_else(|| self.unknown(from))?
            .ident
            .clone();
        if let Some(missing) = targets.iter().find(|t| !self.members.contains_key(t)) {
            return Err(self.unknown(*missing));
        }
        let mut seen = BTreeSet::new();
        let seq = self.next_seq();
        for t in targets {
            if seen.insert(*t) {
                self.push(
                    *t,
                    seq,
                    Event::Signal {
                        signal: signal.to_owned(),
                        source: source.clone(),
                    },
                );
            }
        }
        Ok(())
    }

    /// Terminates the pool: `Terminated` to all members, later joins refused.
    /// Terminating an already terminated pool does nothing.
    pub fn terminate(&mut self, by: MemberId) -> Result<()> {
        let by = self
            .members
            .get(&by)
            .ok_or_else(|| self.unknown(by))?
            .ident
            .clone();
        if self.terminated_by.is_some() {
            return Ok(());
        }
        tracing::debug!(pool = %self.name, by = %by, "pool terminated");
        self.terminated_by = Some(by.clone());
        self.broadcast(Event::Terminated { by });
        Ok(())
    }

    /// Removes and returns the queued events of `member`, in sequence order.
    pub fn take_events(&mut self, member: MemberId) -> Result<Vec<(Seq, Event)>> {
        let unknown = self.unknown(member);
        let m = self.members.get_mut(&member).ok_or(unknown)?;
        self.touched.remove(&member);
        Ok(m.events.drain(..).collect())
    }

    /// Whether `member` has queued events (false for non-members).
    pub fn has_events(&self, member: MemberId) -> bool {
        self.members
            .get(&member)
            .is_some_and(|m| !m.events.is_empty())
    }

    /// The members that got new events since the last call (for drivers that
    /// push events, e.g. a network server), in id order.
    pub fn drain_touched(&mut self) -> Vec<MemberId> {
        std::mem::take(&mut self.touched).into_iter().collect()
    }

    /// Whether `id` is a current member.
    pub fn contains(&self, id: MemberId) -> bool {
        self.members.contains_key(&id)
    }

    /// The identifier of a current member.
    pub fn member(&self, id: MemberId) -> Option<&IbisIdentifier> {
        self.members.get(&id).map(|m| &m.ident)
    }

    /// The current members in join order.
    pub fn members(&self) -> Vec<IbisIdentifier> {
        self.members.values().map(|m| m.ident.clone()).collect()
    }

    /// Whether `who` was a member of this pool and is no longer (it left or was
    /// declared dead). Ids are never reused within a pool, so a member not yet
    /// joined, or of another pool, has not departed.
    pub fn has_departed(&self, who: &IbisIdentifier) -> bool {
        if who.pool() != self.name || who.id().0 >= self.next_id {
            return false;
        }
        self.members.get(&who.id()).is_none_or(|m| m.ident != *who)
    }

    /// The number of current members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// How many members have ever joined.
    pub fn joins(&self) -> usize {
        self.joins
    }

    /// Whether the closed-world pool has reached its size.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Whether the pool was terminated.
    pub fn is_terminated(&self) -> bool {
        self.terminated_by.is_some()
    }

    /// Who terminated the pool, if anybody.
    pub fn terminated_by(&self) -> Option<&IbisIdentifier> {
        self.terminated_by.as_ref()
    }

    /// A snapshot of the pool's status.
    pub fn status(&self) -> PoolStatus {
        PoolStatus {
            config: self.config,
            size: self.members.len(),
            joins: self.joins,
            closed: self.closed,
            terminated: self.terminated_by.is_some(),
        }
    }
}

/// A snapshot of a pool's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatus {
    /// The pool's configuration.
    pub config: PoolConfig,
    /// Number of current members.
    pub size: usize,
    /// Number of members that ever joined.
    pub joins: usize,
    /// Whether the closed-world pool reached its size.
    pub closed: bool,
    /// Whether the pool was terminated.
    pub terminated: bool,
}

/// Many pools keyed by name (sans-IO). Operations taking an
/// [`IbisIdentifier`] route to its pool.
#[derive(Debug, Clone, Default)]
pub struct RegistryCore {
    pools: BTreeMap<String, PoolState>,
}

impl RegistryCore {
    /// An empty core.
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins `pool`, creating it with `config` if it does not exist. Joining an
    /// existing pool with a different size fails with
    /// [`RegistryError::ConfigMismatch`].
    pub fn join(
        &mut self,
        pool: &str,
        config: PoolConfig,
        request: JoinRequest,
    ) -> Result<IbisIdentifier> {
        if let Some(p) = self.pools.get_mut(pool) {
            if p.config() != config {
                return Err(RegistryError::ConfigMismatch {
                    pool: pool.to_owned(),
                    existing: p.config().size,
                    requested: config.size,
                });
            }
            return p.join(request);
        }
        let mut p = PoolState::new(pool, config)?;
        let ident = p.join(request)?;
        self.pools.insert(pool.to_owned(), p);
        Ok(ident)
    }

    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Result<&PoolState> {
        self.pools
            .get(name)
            .ok_or_else(|| RegistryError::UnknownPool(name.to_owned()))
    }

    /// The pool named `name`, mutably.
    pub fn pool_mut(&mut self, name: &str) -> Result<&mut PoolState> {
        self.pools
            .get_mut(name)
            .ok_or_else(|| RegistryError::UnknownPool(name.to_owned()))
    }

    /// Iterates over all pools in name order.
    pub fn pools(&self) -> impl Iterator<Item = &PoolState> {
        self.pools.values()
    }

    /// Forgets a pool (e.g. a server collecting finished pools). Returns it.
    pub fn remove_pool(&mut self, name: &str) -> Option<PoolState> {
        self.pools.remove(name)
    }

    /// The pool of `member`, checking that `member` is a current member of it.
    pub fn member_pool(&self, member: &IbisIdentifier) -> Result<&PoolState> {
        let p = self.pool(member.pool())?;
        if p.contains(member.id()) {
            Ok(p)
        } else {
            Err(p.unknown(member.id()))
        }
    }

    /// Checks that `member` may suspect `suspect` (for `maybe_dead` and
    /// `assume_dead`): `member` is a current member, and `suspect` is of the
    /// same pool. A suspect in another pool is an
    /// [`UnknownMember`](RegistryError::UnknownMember) of the member's pool:
    /// nobody can declare members of another pool dead.
    pub fn check_suspect(&self, member: &IbisIdentifier, suspect: &IbisIdentifier) -> Result<()> {
        self.member_pool(member)?;
        if member.pool() == suspect.pool() {
            Ok(())
        } else {
            Err(RegistryError::UnknownMember {
                pool: member.pool().to_owned(),
                member: suspect.id(),
            })
        }
    }

    /// See [`PoolState::leave`].
    pub fn leave(&mut self, member: &IbisIdentifier) -> Result<IbisIdentifier> {
        self.pool_mut(member.pool())?.leave(member.id())
    }

    /// See [`PoolState::died`].
    pub fn died(&mut self, member: &IbisIdentifier) -> Result<IbisIdentifier> {
        self.pool_mut(member.pool())?.died(member.id())
    }

    /// See [`PoolState::assume_dead`].
    pub fn assume_dead(&mut self, member: &IbisIdentifier) -> Result<IbisIdentifier> {
        self.died(member)
    }

    /// See [`PoolState::maybe_dead`].
    pub fn maybe_dead(&self, suspect: &IbisIdentifier) -> Result<MaybeDead> {
        Ok(self.pool(suspect.pool())?.maybe_dead(suspect.id()))
    }

    /// See [`PoolState::elect`].
    pub fn elect(&mut self, election: &str, candidate: &IbisIdentifier) -> Result<IbisIdentifier> {
        self.pool_mut(candidate.pool())?
            .elect(election, candidate.id())
    }

    /// See [`PoolState::election_result`].
    pub fn election_result(&self, pool: &str, election: &str) -> Result<Option<IbisIdentifier>> {
        Ok(self.pool(pool)?.election_result(election))
    }

    /// See [`PoolState::signal`]. Targets from another pool are unknown members.
    pub fn signal(
        &mut self,
        from: &IbisIdentifier,
        signal: &str,
        targets: &[IbisIdentifier],
    ) -> Result<()> {
        let p = self.pool_mut(from.pool())?;
        if let Some(t) = targets.iter().find(|t| t.pool() != from.pool()) {
            return Err(RegistryError::UnknownMember {
                pool: from.pool().to_owned(),
                member: t.id(),
            });
        }
        let ids: Vec<MemberId> = targets.iter().map(IbisIdentifier::id).collect();
        p.signal(from.id(), signal, &ids)
    }

    /// See [`PoolState::terminate`].
    pub fn terminate(&mut self, by: &IbisIdentifier) -> Result<()> {
        self.pool_mut(by.pool())?.terminate(by.id())
    }

    /// See [`PoolState::take_events`].
    pub fn take_events(&mut self, member: &IbisIdentifier) -> Result<Vec<(Seq, Event)>> {
        self.pool_mut(member.pool())?.take_events(member.id())
    }

    /// See [`PoolState::has_events`].
    pub fn has_events(&self, member: &IbisIdentifier) -> bool {
        self.pools
            .get(member.pool())
            .is_some_and(|p| p.has_events(member.id()))
    }
}
