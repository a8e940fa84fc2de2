//! Accounts after a death: which survivors have not yet said what they hold.
//!
//! When member D dies, every survivor announces, in one message, the results it
//! kept for D and the orphans D left (rule 2), and it sends that message even when
//! it is empty: it is the survivor's whole *account* of D's death. A lookup that
//! finds nothing while some survivor's account of a recent death is still on its
//! way waits for it (the account may name the result) instead of recomputing the
//! job at once: the redo of D's jobs starts at the moment the announcements are
//! sent, so without the wait it races them and loses. An account is open until
//! every survivor's message came, the survivor died too, or it waited longer than
//! [`Config::account_patience_ns`](super::Config::account_patience_ns).

use std::collections::{BTreeMap, BTreeSet};

use crate::topology::NodeId;

/// One death's account: who still owes its message, since when.
#[derive(Debug, Clone)]
struct Open {
    since: u64,
    owing: BTreeSet<NodeId>,
}

/// The open accounts of one member.
#[derive(Debug, Clone, Default)]
pub(super) struct Accounts {
    open: BTreeMap<NodeId, Open>,
    /// Accounts of a death this member has not heard of yet (`dead` -> senders):
    /// another survivor learned it first. Only for deaths of members this one
    /// believes alive, from members alive: at most members² entries.
    early: BTreeMap<NodeId, BTreeSet<NodeId>>,
}

impl Accounts {
    /// `dead` died (or left) at `now`; the members in `survivors` (alive, not this
    /// one) owe their account of it, and `dead` no longer owes any.
    pub(super) fn died(&mut self, dead: NodeId, survivors: &BTreeSet<NodeId>, now: u64) {
        self.member_gone(dead);
        let came = self.early.remove(&dead).unwrap_or_default();
        let owing: BTreeSet<NodeId> = survivors.difference(&came).copied().collect();
        if !owing.is_empty() {
            self.open.insert(dead, Open { since: now, owing });
        }
    }

    /// Member `n` is gone: it owes nothing and its early accounts are void.
    fn member_gone(&mut self, n: NodeId) {
        self.open.retain(|_, a| {
            a.owing.remove(&n);
            !a.owing.is_empty()
        });
        self.early.retain(|_, from| {
            from.remove(&n);
            !from.is_empty()
        });
    }

    /// `from`'s account of `dead` arrived. `dead_known`: whether this member
    /// has heard of the death (else it is kept for then).
    pub(super) fn received(&mut self, from: NodeId, dead: NodeId, dead_known: bool) {
        if !dead_known {
            self.early.entry(dead).or_default().insert(from);
            return;
        }
        if let Some(a) = self.open.get_mut(&dead) {
            a.owing.remove(&from);
            if a.owing.is_empty() {
                self.open.remove(&dead);
            }
        }
    }

    /// Closes the accounts opened at least `patience` before `now`; whether any.
    pub(super) fn expire(&mut self, now: u64, patience: u64) -> bool {
        let before = self.open.len();
        self.open
            .retain(|_, a| now.saturating_sub(a.since) < patience);
        self.open.len() != before
    }

    /// Whether some survivor's account is still awaited.
    pub(super) fn is_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// Members that died or left and whose accounts are still awaited.
    pub(super) fn awaited(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ns: &[u32]) -> BTreeSet<NodeId> {
        ns.iter().map(|&n| NodeId(n)).collect()
    }

    #[test]
    fn an_account_closes_when_every_survivor_sent_its_message() {
        let mut a = Accounts::default();
        a.died(NodeId(1), &set(&[2, 3]), 10);
        assert!(a.is_open());
        a.received(NodeId(2), NodeId(1), true);
        assert!(a.is_open());
        a.received(NodeId(2), NodeId(1), true);
        assert!(a.is_open(), "a duplicate does not count twice");
        a.received(NodeId(3), NodeId(1), true);
        assert!(!a.is_open());
    }

    #[test]
    fn a_survivor_that_dies_owes_nothing_and_early_messages_count() {
        let mut a = Accounts::default();
        a.received(NodeId(3), NodeId(1), false);
        a.died(NodeId(1), &set(&[2, 3]), 10);
        assert_eq!(a.awaited(), 1);
        a.died(NodeId(2), &set(&[3]), 20);
        assert!(a.is_open(), "3 owes its account of 2");
        a.received(NodeId(3), NodeId(2), true);
        assert!(!a.is_open());
    }

    #[test]
    fn accounts_expire_after_the_patience() {
        let mut a = Accounts::default();
        a.died(NodeId(1), &set(&[2]), 100);
        assert!(!a.expire(149, 50));
        assert!(a.expire(150, 50));
        assert!(!a.is_open());
        a.died(NodeId(4), &BTreeSet::new(), 200);
        assert!(!a.is_open(), "nobody left to owe anything");
    }
}
