//! Statistics of the members of a pool and their total, printed like Java Satin's.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What one member of a pool counted during a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStats {
    /// The member's node number (`satin_core::NodeId`: members numbered in join
    /// order, for the load balancer; not shown to users).
    pub node: u32,
    /// The member's IPL name as the user knows it (`member-R`, R the rank its launcher
    /// gave it; the driver's error messages show it with the cluster).
    pub name: String,
    /// The member's cluster.
    pub cluster: String,
    /// Worker threads of the member.
    pub workers: u64,
    /// Jobs spawned.
    pub spawns: u64,
    /// Syncs executed.
    pub syncs: u64,
    /// Frames that aborted children, jobs aborted, and inlets run (see
    /// [`WorkerStats`](crate::WorkerStats)).
    pub aborts: u64,
    /// Jobs aborted.
    pub aborted: u64,
    /// Inlets run.
    pub inlets: u64,
    /// Local (inside the process) steal attempts.
    pub local_steal_attempts: u64,
    /// Successful local steals.
    pub local_steal_successes: u64,
    /// Time the workers spent stealing locally (ns, summed over workers).
    pub local_steal_nanos: u64,
    /// Steal requests sent to members of the own cluster.
    pub intra_steal_attempts: u64,
    /// Of those, the ones that brought a job.
    pub intra_steal_successes: u64,
    /// Steal requests sent to members of other clusters.
    pub inter_steal_attempts: u64,
    /// Of those, the ones that brought a job.
    pub inter_steal_successes: u64,
    /// Steal requests of other members this member answered.
    pub requests_served: u64,
    /// Of those, the answers that carried a job.
    pub jobs_given: u64,
    /// Jobs stolen from other members that ran here.
    pub remote_jobs_executed: u64,
    /// Messages sent to members of the own cluster.
    pub intra_messages: u64,
    /// Bytes sent to members of the own cluster.
    pub intra_bytes: u64,
    /// Messages sent to members of other clusters.
    pub inter_messages: u64,
    /// Bytes sent to members of other clusters.
    pub inter_bytes: u64,
    /// Time waiting for synchronous steal replies (ns).
    pub sync_steal_nanos: u64,
    /// Round-trip time of asynchronous (wide-area) steals (ns).
    pub async_steal_nanos: u64,
    /// Time the member was idle (ns): no work at all, waiting for a steal.
    pub idle_nanos: u64,
    /// Time spent serializing jobs and protocol messages (ns).
    pub serialize_nanos: u64,
    /// Time spent deserializing jobs, results and protocol messages (ns).
    pub deserialize_nanos: u64,
    /// Jobs given to members that died, redone here (crash recovery).
    pub jobs_redone: u64,
    /// For those jobs, the time from giving them away to the thief's death (ns): the work lost, as the owner sees it (an upper bound).
    pub work_lost_nanos: u64,
    /// Stolen jobs whose owner died while they ran here: finished, kept and announced instead of thrown away.
    pub orphans_kept: u64,
    /// Saved results announced to the survivors (kept for a member that died, finished orphans, restored from a checkpoint).
    pub results_announced: u64,
    /// Announcement messages sent.
    pub announce_messages: u64,
    /// Lookups of saved results made while redoing jobs.
    pub lookups: u64,
    /// Lookups answered with a saved result (here or fetched from another member): jobs not recomputed.
    pub results_reused: u64,
    /// Lookups that found nothing (the job ran).
    pub lookup_misses: u64,
    /// Lookups that waited for the survivors' accounts of a death before they
    /// found the result or nothing.
    pub lookups_awaited: u64,
    /// Lookups of a result this member's own orphan was computing: the job ran
    /// again (the orphan may be below it on the same worker's stack).
    pub own_orphan_lookups: u64,
    /// Fetches of saved results that found nothing after all (the job was redone here).
    pub fetches_failed: u64,
    /// Result bytes fetched from other members.
    pub bytes_fetched: u64,
    /// Results put in the store of saved results (some may have been evicted since,
    /// to stay within its byte budget).
    pub results_stored: u64,
    /// Results restored from checkpoint files at the start.
    pub restored: u64,
    /// Master elections this member asked for (the master died; a winner that could
    /// not be used yet is asked for again). Every survivor asks once per death of the
    /// master: the total is the most any member asked for, not the sum.
    pub elections: u64,
    /// Time spent recovering from deaths (ns): from a death being noticed to the redone jobs being back in the queue and the saved results announced.
    pub recovery_nanos: u64,
    /// On a member that became the master: time from the old master's death being noticed to the root job's restart (ns).
    pub restart_nanos: u64,
    /// Jobs the workers ran in redo mode (the kernel's count).
    pub redo_jobs: u64,
    /// Adaptivity, on the master: members it asked `ipl-run` to start (and were
    /// started).
    pub adapt_added: u64,
    /// Adaptivity, on the master: members it asked `ipl-run` to remove.
    pub adapt_removed: u64,
    /// Writes to shared objects made by this member ([`crate::Shared::write`]).
    pub shared_writes: u64,
    /// Messages carrying those writes to other members.
    pub shared_updates_sent: u64,
    /// Writes of other members applied to this member's copies.
    pub shared_updates_received: u64,
    /// Copies of shared objects sent to members whose guards asked for them.
    pub shared_states_sent: u64,
    /// Payload bytes of the shared objects' messages sent (writes and copies; they
    /// are also part of the intra/inter bytes).
    pub shared_bytes: u64,
    /// Jobs from other members whose guard did not hold at once (they waited).
    pub guard_waits: u64,
    /// Fetches of the job's sender's copies those guards asked for.
    pub guard_fetches: u64,
}

impl MemberStats {
    /// Successful steals from other processes (intra + inter cluster).
    pub fn remote_steal_successes(&self) -> u64 {
        self.intra_steal_successes
            .saturating_add(self.inter_steal_successes)
    }

    /// Steal requests sent to other processes (intra + inter cluster).
    pub fn remote_steal_attempts(&self) -> u64 {
        self.intra_steal_attempts
            .saturating_add(self.inter_steal_attempts)
    }

    /// Adds `o` to this total. The values come from other members over the network:
    /// sums saturate instead of overflowing.
    fn add(&mut self, o: &MemberStats) {
        self.workers = self.workers.saturating_add(o.workers);
        self.spawns = self.spawns.saturating_add(o.spawns);
        self.syncs = self.syncs.saturating_add(o.syncs);
        self.aborts = self.aborts.saturating_add(o.aborts);
        self.aborted = self.aborted.saturating_add(o.aborted);
        self.inlets = self.inlets.saturating_add(o.inlets);
        self.local_steal_attempts = self
            .local_steal_attempts
            .saturating_add(o.local_steal_attempts);
        self.local_steal_successes = self
            .local_steal_successes
            .saturating_add(o.local_steal_successes);
        self.local_steal_nanos = self.local_steal_nanos.saturating_add(o.local_steal_nanos);
        self.intra_steal_attempts = self
            .intra_steal_attempts
            .saturating_add(o.intra_steal_attempts);
        self.intra_steal_successes = self
            .intra_steal_successes
            .saturating_add(o.intra_steal_successes);
        self.inter_steal_attempts = self
            .inter_steal_attempts
            .saturating_add(o.inter_steal_attempts);
        self.inter_steal_successes = self
            .inter_steal_successes
            .saturating_add(o.inter_steal_successes);
        self.requests_served = self.requests_served.saturating_add(o.requests_served);
        self.jobs_given = self.jobs_given.saturating_add(o.jobs_given);
        self.remote_jobs_executed = self
            .remote_jobs_executed
            .saturating_add(o.remote_jobs_executed);
        self.intra_messages = self.intra_messages.saturating_add(o.intra_messages);
        self.intra_bytes = self.intra_bytes.saturating_add(o.intra_bytes);
        self.inter_messages = self.inter_messages.saturating_add(o.inter_messages);
        self.inter_bytes = self.inter_bytes.saturating_add(o.inter_bytes);
        self.sync_steal_nanos = self.sync_steal_nanos.saturating_add(o.sync_steal_nanos);
        self.async_steal_nanos = self.async_steal_nanos.saturating_add(o.async_steal_nanos);
        self.idle_nanos = self.idle_nanos.saturating_add(o.idle_nanos);
        self.serialize_nanos = self.serialize_nanos.saturating_add(o.serialize_nanos);
        self.deserialize_nanos = self.deserialize_nanos.saturating_add(o.deserialize_nanos);
        self.jobs_redone = self.jobs_redone.saturating_add(o.jobs_redone);
        self.work_lost_nanos = self.work_lost_nanos.saturating_add(o.work_lost_nanos);
        self.orphans_kept = self.orphans_kept.saturating_add(o.orphans_kept);
        self.results_announced = self.results_announced.saturating_add(o.results_announced);
        self.announce_messages = self.announce_messages.saturating_add(o.announce_messages);
        self.lookups = self.lookups.saturating_add(o.lookups);
        self.results_reused = self.results_reused.saturating_add(o.results_reused);
        self.lookup_misses = self.lookup_misses.saturating_add(o.lookup_misses);
        self.lookups_awaited = self.lookups_awaited.saturating_add(o.lookups_awaited);
        self.own_orphan_lookups = self.own_orphan_lookups.saturating_add(o.own_orphan_lookups);
        self.fetches_failed = self.fetches_failed.saturating_add(o.fetches_failed);
        self.bytes_fetched = self.bytes_fetched.saturating_add(o.bytes_fetched);
        self.results_stored = self.results_stored.saturating_add(o.results_stored);
        self.restored = self.restored.saturating_add(o.restored);
        self.elections = self.elections.saturating_add(o.elections);
        self.shared_writes = self.shared_writes.saturating_add(o.shared_writes);
        self.shared_updates_sent = self
            .shared_updates_sent
            .saturating_add(o.shared_updates_sent);
        self.shared_updates_received = self
            .shared_updates_received
            .saturating_add(o.shared_updates_received);
        self.shared_states_sent = self.shared_states_sent.saturating_add(o.shared_states_sent);
        self.shared_bytes = self.shared_bytes.saturating_add(o.shared_bytes);
        self.guard_waits = self.guard_waits.saturating_add(o.guard_waits);
        self.guard_fetches = self.guard_fetches.saturating_add(o.guard_fetches);
        self.recovery_nanos = self.recovery_nanos.saturating_add(o.recovery_nanos);
        self.restart_nanos = self.restart_nanos.saturating_add(o.restart_nanos);
        self.redo_jobs = self.redo_jobs.saturating_add(o.redo_jobs);
        self.adapt_added = self.adapt_added.saturating_add(o.adapt_added);
        self.adapt_removed = self.adapt_removed.saturating_add(o.adapt_removed);
    }

    /// Whether anything of crash recovery happened (the `RECOVERY` line is printed
    /// only then).
    pub fn recovered(&self) -> bool {
        self.jobs_redone != 0
            || self.orphans_kept != 0
            || self.results_announced != 0
            || self.lookups != 0
            || self.restored != 0
            || self.elections != 0
            || self.redo_jobs != 0
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, who: &str) -> fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        writeln!(
            f,
            "SATIN '{who}': SPAWN_SYNC: spawns = {} syncs = {}",
            self.spawns, self.syncs
        )?;
        if self.aborts != 0 || self.aborted != 0 || self.inlets != 0 {
            writeln!(
                f,
                "SATIN '{who}': ABORT: aborts = {} jobs aborted = {} inlets = {}",
                self.aborts, self.aborted, self.inlets
            )?;
        }
        writeln!(
            f,
            "SATIN '{who}': LOCAL_STEAL: attempts = {} success = {} ({:.1} %) time = {:.3} ms",
            self.local_steal_attempts,
            self.local_steal_successes,
            pct(self.local_steal_successes, self.local_steal_attempts),
            ms(self.local_steal_nanos)
        )?;
        writeln!(
            f,
            "SATIN '{who}': INTRA_STEAL: attempts = {} success = {} ({:.1} %) time = {:.3} ms",
            self.intra_steal_attempts,
            self.intra_steal_successes,
            pct(self.intra_steal_successes, self.intra_steal_attempts),
            ms(self.sync_steal_nanos)
        )?;
        writeln!(
            f,
            "SATIN '{who}': INTER_STEAL: attempts = {} success = {} ({:.1} %) time = {:.3} ms",
            self.inter_steal_attempts,
            self.inter_steal_successes,
            pct(self.inter_steal_successes, self.inter_steal_attempts),
            ms(self.async_steal_nanos)
        )?;
        writeln!(
            f,
            "SATIN '{who}': REMOTE_STEAL: attempts = {} success = {} served = {} given = {} executed = {}",
            self.remote_steal_attempts(),
            self.remote_steal_successes(),
            self.requests_served,
            self.jobs_given,
            self.remote_jobs_executed
        )?;
        writeln!(
            f,
            "SATIN '{who}': MESSAGES: intra = {} msgs, {} bytes; inter = {} msgs, {} bytes",
            self.intra_messages, self.intra_bytes, self.inter_messages, self.inter_bytes
        )?;
        writeln!(
            f,
            "SATIN '{who}': TIME: idle = {:.3} ms serialize = {:.3} ms deserialize = {:.3} ms",
            ms(self.idle_nanos),
            ms(self.serialize_nanos),
            ms(self.deserialize_nanos)
        )?;
        if self.shared_writes != 0 || self.shared_updates_received != 0 || self.guard_waits != 0 {
            writeln!(
                f,
                "SATIN '{who}': SHARED_OBJECTS: writes = {} sent = {} msgs received = {} \
                 copies sent = {} bytes = {} guard waits = {} guard fetches = {}",
                self.shared_writes,
                self.shared_updates_sent,
                self.shared_updates_received,
                self.shared_states_sent,
                self.shared_bytes,
                self.guard_waits,
                self.guard_fetches
            )?;
        }
        if self.adapt_added != 0 || self.adapt_removed != 0 {
            writeln!(
                f,
                "SATIN '{who}': ADAPT: added = {} removed = {}",
                self.adapt_added, self.adapt_removed
            )?;
        }
        if self.recovered() {
            writeln!(
                f,
                "SATIN '{who}': RECOVERY: redone = {} orphans kept = {} announced = {} \
                 stored = {} restored = {} elections = {}",
                self.jobs_redone,
                self.orphans_kept,
                self.results_announced,
                self.results_stored,
                self.restored,
                self.elections
            )?;
            writeln!(
                f,
                "SATIN '{who}': REUSE: lookups = {} reused = {} misses = {} awaited accounts = {} \
                 fetch failed = {} fetched = {} bytes redo jobs = {}",
                self.lookups,
                self.results_reused,
                self.lookup_misses,
                self.lookups_awaited,
                self.fetches_failed,
                self.bytes_fetched,
                self.redo_jobs
            )?;
            writeln!(
                f,
                "SATIN '{who}': RECOVERY_TIME: work lost = {:.3} ms recovering = {:.3} ms \
                 root restart = {:.3} ms",
                ms(self.work_lost_nanos),
                ms(self.recovery_nanos),
                ms(self.restart_nanos)
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for MemberStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, &format!("{} ({})", self.name, self.cluster))
    }
}

/// The statistics of every member of a pool (gathered by the master) and their sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// One entry per member that reported, by node number.
    pub members: Vec<MemberStats>,
    /// The sum over the members.
    pub total: MemberStats,
    /// Members that did not report before the end-of-run deadline, by IPL name and
    /// cluster: `member-2 (cluster h1)`.
    pub missing: Vec<String>,
}

impl PoolStats {
    /// Sums the members' statistics (sorted by node number).
    pub fn from_members(mut members: Vec<MemberStats>, missing: Vec<String>) -> PoolStats {
        members.sort_by_key(|m| m.node);
        let mut total = MemberStats {
            name: "total".into(),
            cluster: "all".into(),
            ..MemberStats::default()
        };
        for m in &members {
            total.add(m);
        }
        // Every survivor counts each election: the pool had as many as the member
        // that saw the most.
        total.elections = members.iter().map(|m| m.elections).max().unwrap_or(0);
        PoolStats {
            members,
            total,
            missing,
        }
    }
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for m in &self.members {
            write!(f, "{m}")?;
        }
        self.total.write(f, "total")?;
        if !self.missing.is_empty() {
            writeln!(
                f,
                "SATIN 'total': MISSING: {} did not report",
                self.missing.join(", ")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_is_printed_when_something_was_recovered() {
        let m = MemberStats {
            name: "member-1".into(),
            cluster: "c0".into(),
            jobs_redone: 3,
            results_reused: 2,
            ..MemberStats::default()
        };
        let text = PoolStats::from_members(vec![m], vec![]).to_string();
        assert!(text.contains("RECOVERY: redone = 3"), "{text}");
        assert!(
            text.contains("SATIN 'total': REUSE: lookups = 0 reused = 2"),
            "{text}"
        );
    }

    #[test]
    fn adaptivity_is_printed_when_the_pool_adapted() {
        let m = MemberStats {
            name: "member-0".into(),
            cluster: "c0".into(),
            adapt_added: 2,
            adapt_removed: 1,
            ..MemberStats::default()
        };
        let text = PoolStats::from_members(vec![m], vec![]).to_string();
        assert!(
            text.contains("SATIN 'total': ADAPT: added = 2 removed = 1"),
            "{text}"
        );
    }

    /// Statistics come from other members over the network: huge values saturate
    /// the total instead of overflowing (a panic in a debug build before).
    #[test]
    fn totals_of_huge_values_saturate() {
        let m = MemberStats {
            spawns: u64::MAX,
            inter_bytes: u64::MAX - 1,
            intra_steal_successes: u64::MAX,
            inter_steal_successes: 1,
            ..MemberStats::default()
        };
        let stats = PoolStats::from_members(vec![m.clone(), m], vec![]);
        assert_eq!(stats.total.spawns, u64::MAX);
        assert_eq!(stats.total.inter_bytes, u64::MAX);
        assert_eq!(stats.total.remote_steal_successes(), u64::MAX);
    }

    /// Each survivor of a master's death counts the election: the total is the most
    /// any member counted, not the sum.
    #[test]
    fn elections_are_counted_once_in_the_total() {
        let m = |node, elections| MemberStats {
            node,
            elections,
            ..MemberStats::default()
        };
        let stats = PoolStats::from_members(vec![m(1, 1), m(2, 1), m(3, 2)], vec![]);
        assert_eq!(stats.total.elections, 2);
    }

    /// Node 0 is the first to join; launched with rank 2 it is `member-2`, the number
    /// the user sees in `ipl-run`'s `[2]` prefix. The statistics name it so.
    #[test]
    fn statistics_name_members_by_their_ipl_name() {
        let m = MemberStats {
            node: 0,
            name: "member-2".into(),
            cluster: "h1".into(),
            ..MemberStats::default()
        };
        let stats = PoolStats::from_members(vec![m], vec!["member-1 (cluster h2)".into()]);
        let text = stats.to_string();
        assert!(text.contains("SATIN 'member-2 (h1)': SPAWN"), "{text}");
        assert!(!text.contains("member 0"), "{text}");
        assert!(
            !text.contains("RECOVERY"),
            "printed only after a crash: {text}"
        );
        assert!(
            !text.contains("ADAPT"),
            "printed only when the pool adapted: {text}"
        );
        assert!(
            text.contains("MISSING: member-1 (cluster h2) did not report"),
            "{text}"
        );
    }
}
