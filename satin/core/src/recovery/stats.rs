//! [`RecoveryStats`]: what crash recovery did on one member.

use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

/// Counters of one member's [`Recovery`](super::Recovery). Times are in
/// nanoseconds of the driver's clock (the `now` arguments).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryStats {
    /// Jobs given to a thief that died, given back to be redone here
    /// ([`Action::Redo`](super::Action::Redo) of a given job).
    pub jobs_redone: u64,
    /// For every job redone, the time from giving it to the thief until the
    /// thief's death was reported: the work lost, as the owner sees it (an upper
    /// bound: the thief may have spent part of it waiting).
    pub work_lost_ns: u64,
    /// Stolen jobs running here whose owner died: kept running, announced
    /// pending, and their result kept.
    pub orphans_kept: u64,
    /// Orphans that finished and were announced done.
    pub orphan_results_announced: u64,
    /// Stored results announced: because the owner they were returned to died,
    /// or received in a hand-over, or restored from a checkpoint.
    pub results_announced: u64,
    /// Announcement messages (one per addressee of each
    /// [`Action::Announce`](super::Action::Announce)).
    pub announce_messages: u64,
    /// Lookups made ([`Recovery::lookup`](super::Recovery::lookup)).
    pub lookups: u64,
    /// Lookups answered from this member's store (or by waiting for one of its
    /// own orphans).
    pub hits_local: u64,
    /// Lookups completed with a result fetched from another member.
    pub hits_remote: u64,
    /// Lookups that found nothing (the job runs here), at once or after
    /// waiting for the survivors' accounts of a death.
    pub misses: u64,
    /// Lookups that found nothing at first and waited for the survivors'
    /// accounts of a death ([`Lookup::Awaiting`](super::Lookup::Awaiting)).
    pub lookups_awaited: u64,
    /// Lookups of a key one of this member's own orphans computes
    /// ([`Lookup::Remote`](super::Lookup::Remote) with `holder` = this member).
    pub lookups_own_orphan: u64,
    /// Lookups handed over whose fetch failed (the holder had nothing or died)
    /// and whose job was given back to be redone here.
    pub fetches_failed: u64,
    /// Fetch requests of other members answered with a result.
    pub fetches_answered: u64,
    /// Fetch requests of other members answered "not found".
    pub fetches_not_found: u64,
    /// Result bytes received in answers to this member's fetches.
    pub bytes_fetched: u64,
    /// Result bytes sent in answers to other members' fetches.
    pub bytes_served: u64,
    /// Results put in the store (stolen jobs, orphans, hand-overs, restores).
    pub results_stored: u64,
    /// Results evicted from the store to stay within its byte budget.
    pub evictions: u64,
    /// Results not stored because one alone exceeds the store's budget.
    pub too_large: u64,
    /// Stored results dropped because they did not decode as their job's output
    /// ([`Recovery::discard`](super::Recovery::discard)).
    pub discarded: u64,
    /// Results handed over to another member when this one left.
    pub handed_over: u64,
    /// Results received from a member that left gracefully.
    pub handovers_received: u64,
    /// Results put in the store from a checkpoint.
    pub restored: u64,
    /// Master elections asked for ([`Action::ElectMaster`](super::Action::ElectMaster)).
    pub elections: u64,
    /// Events ignored: unknown or duplicate handles and fetch ids, messages
    /// from members not alive, announcements beyond the directory's capacity,
    /// fetch requests beyond the waiting limit.
    pub ignored: u64,
}

impl AddAssign<&RecoveryStats> for RecoveryStats {
    fn add_assign(&mut self, o: &RecoveryStats) {
        self.jobs_redone += o.jobs_redone;
        self.work_lost_ns += o.work_lost_ns;
        self.orphans_kept += o.orphans_kept;
        self.orphan_results_announced += o.orphan_results_announced;
        self.results_announced += o.results_announced;
        self.announce_messages += o.announce_messages;
        self.lookups += o.lookups;
        self.hits_local += o.hits_local;
        self.hits_remote += o.hits_remote;
        self.misses += o.misses;
        self.lookups_awaited += o.lookups_awaited;
        self.lookups_own_orphan += o.lookups_own_orphan;
        self.discarded += o.discarded;
        self.fetches_failed += o.fetches_failed;
        self.fetches_answered += o.fetches_answered;
        self.fetches_not_found += o.fetches_not_found;
        self.bytes_fetched += o.bytes_fetched;
        self.bytes_served += o.bytes_served;
        self.results_stored += o.results_stored;
        self.evictions += o.evictions;
        self.too_large += o.too_large;
        self.handed_over += o.handed_over;
        self.handovers_received += o.handovers_received;
        self.restored += o.restored;
        self.elections += o.elections;
        self.ignored += o.ignored;
    }
}
