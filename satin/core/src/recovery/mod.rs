//! Crash recovery bookkeeping: [`Recovery`], one per member, sans-IO.
//!
//! Satin's fault tolerance (the 2006 fault-tolerance paper's recovery procedure and
//! the journal version's orphan saving, graceful leave and checkpoints) needs every member to remember a few things about
//! the jobs that crossed processes, and to follow the same rules when a member dies,
//! leaves or joins. [`Recovery`] holds that state and applies those rules. Like
//! [`Node`](crate::Node) it owns no threads, sockets, clocks or jobs: the driver
//! (the real runtime's driver thread, or the simulator) calls one method per thing
//! that happened and then drains the [`Action`]s with [`Recovery::poll_action`].
//! Given the same seed and the same calls it emits the same actions.
//!
//! It knows members ([`NodeId`]), job identities ([`JobKey`], a digest of a job's
//! type and parameters), the driver's handles for jobs ([`JobRef`], opaque numbers
//! the driver chooses) and result bytes. It never sees a job.
//!
//! # What it keeps
//!
//! * **given**: jobs this member gave to thieves (handle -> thief, key, time);
//! * **running**: jobs stolen from others running here (handle -> owner, key,
//!   whether the owner died: an *orphan*);
//! * **store**: the serialized results this member computed for stolen jobs and
//!   orphans, bounded by [`Config::store_budget`] bytes (result bytes plus
//!   [`STORE_ENTRY_OVERHEAD`] per entry), oldest evicted first;
//! * **directory**: which other member holds (or still computes) which key,
//!   learned from announcements, bounded by [`Config::directory_capacity`] keys;
//! * **lookups**: jobs handed over to a lookup, waiting for a fetched result, and
//!   fetch requests of others waiting for one of our orphans (at most
//!   [`Config::max_waiting_fetches`]);
//! * the master's id, the live members, and [`RecoveryStats`].
//!
//! # Events and actions
//!
//! | the driver sees | it calls | the core may emit |
//! |---|---|---|
//! | it gave a job to a thief | [`job_given`](Recovery::job_given) | [`Action::Redo`] if the thief is dead already |
//! | the thief's result arrived | [`result_received`](Recovery::result_received) | — |
//! | it started a stolen job | [`stolen_job_started`](Recovery::stolen_job_started) | [`Action::Announce`] (pending) if the owner is dead |
//! | a stolen job finished | [`stolen_job_finished`](Recovery::stolen_job_finished) | [`Action::SendResult`]; for an orphan [`Action::SendFetched`], [`Action::Complete`], [`Action::Announce`] (done) |
//! | a stolen job failed | [`stolen_job_failed`](Recovery::stolen_job_failed) | [`Action::SendFailure`]; for an orphan [`Action::SendFetched`] (none), [`Action::Redo`] |
//! | a member died or left without hand-over | [`node_died`](Recovery::node_died) | [`Action::Redo`], [`Action::Announce`] (the account), [`Action::ElectMaster`] |
//! | the registry elected a master | [`master_elected`](Recovery::master_elected) | [`Action::RestartRoot`] if it is this member |
//! | a member joined | [`node_joined`](Recovery::node_joined) | [`Action::Announce`] of what this member holds, to the joiner |
//! | an announcement arrived | [`announce_received`](Recovery::announce_received) | [`Action::Fetch`] for lookups awaiting accounts |
//! | it was an account of a death | [`account_received`](Recovery::account_received) | [`Action::Redo`] of lookups once no account is awaited |
//! | time passed | [`tick`](Recovery::tick) | [`Action::Redo`] of lookups whose accounts waited too long |
//! | a worker in redo mode asks for a job's result | [`lookup`](Recovery::lookup) (returns a [`Lookup`]) | [`Action::Fetch`] |
//! | a fetch answer arrived | [`fetched`](Recovery::fetched) | [`Action::Complete`] or [`Action::Redo`] |
//! | a fetch request arrived | [`fetch_requested`](Recovery::fetch_requested) | [`Action::SendFetched`] now, or when our orphan finishes |
//! | this member leaves gracefully | [`leave`](Recovery::leave) | [`Action::HandOver`], [`Action::SendFetched`] (none) |
//! | results handed over arrived | [`handover_received`](Recovery::handover_received) | [`Action::Announce`] (done) |
//! | it read a checkpoint | [`restore`](Recovery::restore) | [`Action::Announce`] (done) |
//!
//! [`checkpoint_entries`](Recovery::checkpoint_entries) lists the store for a
//! checkpoint file ([`crate::checkpoint`] encodes it).
//!
//! # The rules
//!
//! 1. **Normal run**: a given job is forgotten when its result arrives. A stolen
//!    job's result is sent home ([`Action::SendResult`]) and kept in the store; it
//!    is not announced (no broadcast while nothing fails).
//! 2. **A member D dies** (idempotent): jobs given to D are redone here
//!    ([`Action::Redo`]); the keys of results kept for D, and of the jobs stolen
//!    from D still running here (now orphans, *pending*), are announced in one
//!    [`Action::Announce`] to every live member, sent even when empty: this
//!    member's *account* of D's death (`death: Some(D)`); D's directory entries are
//!    dropped; lookups waiting for D are redone; D's fetch requests are forgotten.
//!    If D was the master: [`Action::ElectMaster`].
//! 3. **An orphan finishes**: its result is stored, fetch requests waiting for it
//!    are answered, and it is announced done.
//! 4. **Announcements** update the directory: entries from members not alive are
//!    ignored, a done entry replaces a pending one, and this member's own store
//!    wins at lookup time.
//! 5. **Lookups**: own store ([`Lookup::Local`]), then own running orphans (wait,
//!    [`Lookup::Remote`] with `holder` = this member), then the directory
//!    ([`Lookup::Remote`] and an [`Action::Fetch`]), else, while some survivor's
//!    account of a death is awaited, [`Lookup::Awaiting`] (fetched as soon as an
//!    announcement names the key, redone when every account came, the survivors
//!    that owe one died, or [`Config::account_patience_ns`] passed), else
//!    [`Lookup::Miss`]. The wait matters: a redo starts the moment the death is
//!    known, while the survivors' announcements are still on their way, and
//!    would otherwise recompute what they name. A handed-over lookup ends exactly
//!    once, in [`Action::Complete`] or [`Action::Redo`].
//! 6. **Fetch requests** are answered at once from the store, queued while the key
//!    is one of our pending orphans, and answered "not found" otherwise (never
//!    queued for an unknown key).
//! 7. **Graceful leave**: the store goes to one live member chosen with the seeded
//!    generator ([`Action::HandOver`]); the receiver stores and announces it.
//!    **Joins**: the joiner is told, by every member, the keys that member has
//!    announced (its announced results and pending orphans), so it knows the
//!    directory without any broadcast; a member that holds nothing announced
//!    sends nothing.
//! 8. **Checkpoints**: [`checkpoint_entries`](Recovery::checkpoint_entries) and
//!    [`restore`](Recovery::restore) (restored results are announced like
//!    hand-overs, so every member can fetch them).
//!
//! **Eviction.** A result evicted from the store after it was announced is not
//! un-announced: a fetch of it is answered "not found", the asker forgets that
//! directory entry and runs the job itself. Eviction only costs reuse.
//!
//! **Handles.** Given jobs and handed-over lookups share one handle space (both
//! end in [`Action::Redo`], and the driver may keep them in one map); a handle is
//! free again once its job ended. Stolen jobs running here have their own space
//! ([`Action::SendResult`] names them). [`Recovery`] is `Send`: the real driver
//! keeps it behind a lock, since workers call [`lookup`](Recovery::lookup).
//!
//! **Robustness.** No call panics. Unknown handles and fetch ids, duplicate
//! events, and messages from members not alive are ignored and counted in
//! [`RecoveryStats::ignored`]. No action is addressed to a member that is not
//! alive (as far as this core was told) or to this member.
//!
//! # Example
//!
//! ```
//! use satin_core::recovery::{Action, Announcement, Lookup, Recovery};
//! use satin_core::{JobKey, JobRef, NodeId};
//!
//! // Member 1 of {0, 1, 2}; 0 is the master.
//! let members = [NodeId(0), NodeId(1), NodeId(2)];
//! let mut r = Recovery::new(NodeId(1), members, NodeId(0), 7);
//! let key = JobKey::of("fib", &[30]);
//!
//! // Member 1 stole a job from 0, computed it and returned the result.
//! r.stolen_job_started(JobRef(5), NodeId(0), key);
//! r.stolen_job_finished(JobRef(5), b"832040".to_vec());
//! assert_eq!(
//!     r.poll_action(),
//!     Some(Action::SendResult { to: NodeId(0), handle: JobRef(5), bytes: b"832040".to_vec() })
//! );
//!
//! // It gave another job to 2.
//! r.job_given(JobRef(9), NodeId(2), JobKey::of("fib", &[29]), 1_000);
//!
//! // The master dies: its result is announced (0's redo will look it up), and a
//! // new master must be elected.
//! r.node_died(NodeId(0), 5_000);
//! assert_eq!(
//!     r.poll_action(),
//!     Some(Action::Announce {
//!         to: vec![NodeId(2)],
//!         entries: vec![Announcement { key, pending: false }],
//!         death: Some(NodeId(0)),
//!     })
//! );
//! assert_eq!(r.poll_action(), Some(Action::ElectMaster));
//! r.master_elected(NodeId(1));
//! assert_eq!(r.poll_action(), Some(Action::RestartRoot));
//!
//! // Then 2 dies: the job given to it is redone here (2 was the last other
//! // member: nobody to send an account to).
//! r.node_died(NodeId(2), 9_000);
//! assert_eq!(r.poll_action(), Some(Action::Redo { handle: JobRef(9) }));
//! assert_eq!(r.stats().work_lost_ns, 8_000);
//!
//! // The restarted root's subtree finds the saved result locally.
//! assert_eq!(r.lookup(JobRef(11), key), Lookup::Local(b"832040".to_vec()));
//! ```

mod accounts;
mod directory;
mod stats;
mod store;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use tracing::{debug, trace};

use crate::key::JobKey;
use crate::node::JobRef;
use crate::rng::SplitMix64;
use crate::topology::NodeId;

use accounts::Accounts;
use directory::Directory;
pub use stats::RecoveryStats;
pub use store::ENTRY_OVERHEAD as STORE_ENTRY_OVERHEAD;
use store::{Inserted, Store};

/// Bounds of a [`Recovery`]'s memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Bytes the store keeps at most (default 256 MiB): result bytes plus
    /// [`STORE_ENTRY_OVERHEAD`] per result, so many tiny results are bounded too.
    /// The oldest results are evicted first.
    pub store_budget: usize,
    /// Keys the directory knows at most (default 1 Mi); announcements of further
    /// keys are dropped (their jobs are recomputed if needed).
    pub directory_capacity: usize,
    /// Fetch requests of other members waiting for our pending orphans, at most
    /// (default 64 Ki); further ones are answered "not found" at once.
    pub max_waiting_fetches: usize,
    /// How long lookups wait, at most, for the survivors' accounts of a death
    /// before they give up on them (default 500 ms, in the driver's clock: the
    /// `now` arguments). See [`Lookup::Awaiting`].
    pub account_patience_ns: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            store_budget: 256 << 20,
            directory_capacity: 1 << 20,
            max_waiting_fetches: 1 << 16,
            account_patience_ns: 500_000_000,
        }
    }
}

/// Identifies one fetch: chosen by the member that asks ([`Action::Fetch`]),
/// echoed by the holder ([`Action::SendFetched`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FetchId(pub u64);

/// One announced key: the sender holds its result, or computes it if `pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Announcement {
    /// The job's key.
    pub key: JobKey,
    /// `true` while the sender is still computing it (an orphan); a later
    /// announcement with `false` says it is done.
    pub pending: bool,
}

/// What a [`Recovery`] wants the driver to do, taken with
/// [`Recovery::poll_action`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Send the result `bytes` of the stolen job `handle` (our handle, from
    /// [`Recovery::stolen_job_started`]) to its owner `to`.
    SendResult {
        /// The owner.
        to: NodeId,
        /// The job's handle on this member.
        handle: JobRef,
        /// The serialized result.
        bytes: Vec<u8>,
    },
    /// Tell the owner `to` that the stolen job `handle` failed (the driver
    /// attaches its error).
    SendFailure {
        /// The owner.
        to: NodeId,
        /// The job's handle on this member.
        handle: JobRef,
    },
    /// Give the job `handle` back to the local pool, marked redone (a given
    /// job whose thief died, or a handed-over lookup that found nothing). Its
    /// handle is free again.
    Redo {
        /// The job: a given job or a handed-over lookup.
        handle: JobRef,
    },
    /// Complete the handed-over lookup `handle` with the result `bytes`. Its
    /// handle is free again.
    Complete {
        /// The lookup's handle.
        handle: JobRef,
        /// The serialized result of the job's key.
        bytes: Vec<u8>,
    },
    /// Send one message with `entries` to each member of `to` (this member holds
    /// them or computes them).
    Announce {
        /// The addressees: live members, never this one.
        to: Vec<NodeId>,
        /// The keys announced (empty only in an account, see `death`).
        entries: Vec<Announcement>,
        /// `Some(d)`: this is this member's whole account of `d`'s death (or
        /// leave), sent even when `entries` is empty; the receiver passes it to
        /// [`Recovery::account_received`].
        death: Option<NodeId>,
    },
    /// Ask `to` for the result of `key`; the answer comes back through
    /// [`Recovery::fetched`] with the same `id`.
    Fetch {
        /// The holder.
        to: NodeId,
        /// The fetch's id, to echo.
        id: FetchId,
        /// The key wanted.
        key: JobKey,
    },
    /// Answer the fetch `id` of `to`: the result, or `None` if this member does
    /// not have it.
    SendFetched {
        /// The member that asked.
        to: NodeId,
        /// Its fetch id.
        id: FetchId,
        /// The result, or `None`.
        bytes: Option<Vec<u8>>,
    },
    /// Send these results to `to` before leaving (it stores and announces them).
    HandOver {
        /// The member chosen to take them.
        to: NodeId,
        /// The results, oldest first.
        entries: Vec<(JobKey, Vec<u8>)>,
    },
    /// The master died: ask the registry for the new one and call
    /// [`Recovery::master_elected`] with it.
    ElectMaster,
    /// This member became the master after the old one died: run the root job
    /// again, in redo mode, so its subtree looks up every saved result.
    RestartRoot,
}

/// The answer of [`Recovery::lookup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Nothing known: run the job here.
    Miss,
    /// This member's store has the result: complete the job with it now.
    Local(Vec<u8>),
    /// The result is (or will be) at `holder`: the driver keeps the job; it
    /// ends exactly once in [`Action::Complete`] or [`Action::Redo`]. If
    /// `holder` is another member an [`Action::Fetch`] was queued; if it is this
    /// member, the job waits for one of its own running orphans.
    Remote {
        /// Where the result is.
        holder: NodeId,
    },
    /// Nothing known yet, but a member died recently and some survivors have not
    /// sent their account of it (what they kept for it, the orphans it left): the
    /// driver keeps the job, as for [`Lookup::Remote`]; it ends exactly once in
    /// [`Action::Complete`] or [`Action::Redo`] (or is fetched, if an account names
    /// its key), when the accounts came or waited
    /// [`Config::account_patience_ns`] ([`Recovery::tick`]).
    Awaiting,
}

/// A job given to a thief.
#[derive(Debug, Clone, Copy)]
struct Given {
    thief: NodeId,
    key: JobKey,
    sent_at: u64,
}

/// A stolen job running here.
#[derive(Debug, Clone, Copy)]
struct Running {
    owner: NodeId,
    key: JobKey,
    /// The owner died: the result is kept and announced instead of sent.
    orphan: bool,
}

/// A lookup handed over, waiting for a result.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    key: JobKey,
    /// Where the result comes from (this member: one of its orphans), or `None`
    /// while it waits for the survivors' accounts ([`Lookup::Awaiting`]).
    holder: Option<NodeId>,
    /// The fetch sent to `holder` (none when waiting for an own orphan).
    fetch: Option<FetchId>,
}

/// The crash-recovery bookkeeping of one member. See the [module](self) docs.
#[derive(Debug, Clone)]
pub struct Recovery {
    me: NodeId,
    master: Option<NodeId>,
    /// The other members alive (never `me`).
    live: BTreeSet<NodeId>,
    rng: SplitMix64,
    config: Config,

    given: BTreeMap<JobRef, Given>,
    running: BTreeMap<JobRef, Running>,
    store: Store,
    directory: Directory,
    lookups: BTreeMap<JobRef, Waiting>,
    fetch_ids: BTreeMap<FetchId, JobRef>,
    next_fetch: u64,
    /// Fetch requests of others waiting for our pending orphans.
    requests: BTreeMap<JobKey, Vec<(NodeId, FetchId)>>,
    requests_waiting: usize,
    /// Deaths whose survivors' accounts are awaited.
    accounts: Accounts,

    actions: VecDeque<Action>,
    stats: RecoveryStats,
}

impl Recovery {
    /// The bookkeeping of member `me` in a run of `members` (`me` may or may not
    /// be among them) whose master is `master`, with the default [`Config`]. The
    /// seed determines the member chosen for a hand-over.
    pub fn new(
        me: NodeId,
        members: impl IntoIterator<Item = NodeId>,
        master: NodeId,
        seed: u64,
    ) -> Self {
        Self::with_config(me, members, master, seed, Config::default())
    }

    /// Like [`Recovery::new`] with explicit bounds.
    pub fn with_config(
        me: NodeId,
        members: impl IntoIterator<Item = NodeId>,
        master: NodeId,
        seed: u64,
        config: Config,
    ) -> Self {
        Self {
            me,
            master: Some(master),
            live: members.into_iter().filter(|&n| n != me).collect(),
            rng: SplitMix64::new(seed),
            config,
            given: BTreeMap::new(),
            running: BTreeMap::new(),
            store: Store::new(config.store_budget),
            directory: Directory::new(config.directory_capacity),
            lookups: BTreeMap::new(),
            fetch_ids: BTreeMap::new(),
            next_fetch: 0,
            requests: BTreeMap::new(),
            requests_waiting: 0,
            accounts: Accounts::default(),
            actions: VecDeque::new(),
            stats: RecoveryStats::default(),
        }
    }

    // ------------------------------------------------------------ queries

    /// This member.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The master, or `None` while an election is pending.
    pub fn master(&self) -> Option<NodeId> {
        self.master
    }

    /// Whether `n` is another member this core believes alive.
    pub fn is_live(&self, n: NodeId) -> bool {
        self.live.contains(&n)
    }

    /// The other members alive, in id order.
    pub fn live(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.live.iter().copied()
    }

    /// Whether a lookup can hit: something is stored, known in the directory, or
    /// an own orphan is running. When `false` a worker need not even compute a
    /// job's key.
    pub fn active(&self) -> bool {
        !self.store.is_empty()
            || !self.directory.is_empty()
            || self.accounts.is_open()
            || self.running.values().any(|r| r.orphan)
    }

    /// Deaths (or leaves) whose survivors' accounts are still awaited.
    pub fn accounts_awaited(&self) -> usize {
        self.accounts.awaited()
    }

    /// Statistics so far.
    pub fn stats(&self) -> &RecoveryStats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Results in the store.
    pub fn store_len(&self) -> usize {
        self.store.len()
    }

    /// Bytes charged to the store's budget: result bytes plus
    /// [`STORE_ENTRY_OVERHEAD`] per result (at most [`Config::store_budget`]).
    pub fn store_bytes(&self) -> usize {
        self.store.bytes()
    }

    /// Keys the directory knows.
    pub fn directory_len(&self) -> usize {
        self.directory.len()
    }

    /// Given jobs whose result has not arrived.
    pub fn given_len(&self) -> usize {
        self.given.len()
    }

    /// Stolen jobs running here.
    pub fn running_len(&self) -> usize {
        self.running.len()
    }

    /// Handed-over lookups not ended yet.
    pub fn lookups_waiting(&self) -> usize {
        self.lookups.len()
    }

    /// The next thing to do, if any. Drain after every call.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    // ------------------------------------------------------------ normal run

    /// This member gave job `handle` (its key `key`) to `thief` at `now`. If
    /// `thief` is not alive the job is redone at once. Handles of given jobs and
    /// of handed-over lookups share one space: a handle still in use is ignored.
    pub fn job_given(&mut self, handle: JobRef, thief: NodeId, key: JobKey, now: u64) {
        if self.handle_in_use(handle) {
            self.ignore("job_given: handle in use");
            return;
        }
        if !self.live.contains(&thief) {
            debug!(%thief, job = %key, "job given to a member not alive: redo");
            self.stats.jobs_redone += 1;
            self.push(Action::Redo { handle });
            return;
        }
        self.given.insert(
            handle,
            Given {
                thief,
                key,
                sent_at: now,
            },
        );
    }

    /// The result of the given job `handle` arrived: forget it. Returns whether
    /// the job was known (a result arriving after its thief was declared dead,
    /// and the job redone, returns `false`).
    pub fn result_received(&mut self, handle: JobRef) -> bool {
        if self.given.remove(&handle).is_some() {
            true
        } else {
            self.ignore("result_received: unknown handle");
            false
        }
    }

    /// This member started the job `handle` (its key `key`) stolen from
    /// `owner`. If `owner` is not alive the job is an orphan at once and is
    /// announced pending.
    pub fn stolen_job_started(&mut self, handle: JobRef, owner: NodeId, key: JobKey) {
        if self.running.contains_key(&handle) || owner == self.me {
            self.ignore("stolen_job_started: handle in use or own job");
            return;
        }
        let orphan = !self.live.contains(&owner);
        self.running.insert(handle, Running { owner, key, orphan });
        if orphan {
            self.stats.orphans_kept += 1;
            self.announce(vec![Announcement { key, pending: true }]);
        }
    }

    /// The stolen job `handle` finished with the result `bytes`. The result goes
    /// home ([`Action::SendResult`]) and into the store; for an orphan it
    /// answers the fetches waiting for it and is announced done.
    pub fn stolen_job_finished(&mut self, handle: JobRef, bytes: Vec<u8>) {
        let Some(r) = self.running.remove(&handle) else {
            self.ignore("stolen_job_finished: unknown handle");
            return;
        };
        if !r.orphan {
            self.push(Action::SendResult {
                to: r.owner,
                handle,
                bytes: bytes.clone(),
            });
            self.store_result(r.key, bytes, Some(r.owner), false);
            return;
        }
        for (to, id) in self.take_requests(&r.key) {
            self.stats.fetches_answered += 1;
            self.stats.bytes_served += bytes.len() as u64;
            self.push(Action::SendFetched {
                to,
                id,
                bytes: Some(bytes.clone()),
            });
        }
        for h in self.local_waiters(&r.key) {
            self.lookups.remove(&h);
            self.stats.hits_local += 1;
            self.push(Action::Complete {
                handle: h,
                bytes: bytes.clone(),
            });
        }
        if self.store_result(r.key, bytes, None, true) {
            self.stats.orphan_results_announced += 1;
            self.announce(vec![Announcement {
                key: r.key,
                pending: false,
            }]);
        }
    }

    /// The stolen job `handle` failed. Its owner is told
    /// ([`Action::SendFailure`]); for an orphan, the fetches and lookups waiting
    /// for it get "not found" and redo it (unless another orphan with the same
    /// key still runs here).
    pub fn stolen_job_failed(&mut self, handle: JobRef) {
        let Some(r) = self.running.remove(&handle) else {
            self.ignore("stolen_job_failed: unknown handle");
            return;
        };
        if !r.orphan {
            self.push(Action::SendFailure {
                to: r.owner,
                handle,
            });
            return;
        }
        if self.orphan_running(&r.key) {
            return;
        }
        for (to, id) in self.take_requests(&r.key) {
            self.stats.fetches_not_found += 1;
            self.push(Action::SendFetched {
                to,
                id,
                bytes: None,
            });
        }
        for h in self.local_waiters(&r.key) {
            self.lookups.remove(&h);
            self.stats.fetches_failed += 1;
            self.push(Action::Redo { handle: h });
        }
    }

    // ------------------------------------------------------------ membership

    /// Member `dead` crashed, or left without handing over. Idempotent: a
    /// member not alive is ignored. `now` measures the work lost.
    pub fn node_died(&mut self, dead: NodeId, now: u64) {
        self.node_gone(dead, now, false);
    }

    /// Member `gone` left gracefully: it handed its saved results over and owes
    /// nothing, so the results kept for it are not announced (nobody redoes its
    /// jobs: no lookup needs them). Anything it left unfinished after all (a leave
    /// cut short by its bound) is handled as after a death: jobs it stole are redone
    /// here, its jobs running here become orphans.
    pub fn node_left_gracefully(&mut self, gone: NodeId, now: u64) {
        self.node_gone(gone, now, true);
    }

    fn node_gone(&mut self, dead: NodeId, now: u64, graceful: bool) {
        if !self.live.remove(&dead) {
            self.ignore("node_died: not alive");
            // A master the driver never listed as a member still gets replaced.
            if dead != self.me && self.master == Some(dead) {
                self.elect();
            }
            return;
        }
        debug!(me = %self.me, %dead, "recovery: member died");
        // 1. Jobs it stole from us are redone here.
        let lost: Vec<(JobRef, Given)> = self
            .given
            .iter()
            .filter(|(_, g)| g.thief == dead)
            .map(|(h, g)| (*h, *g))
            .collect();
        for (handle, g) in lost {
            self.given.remove(&handle);
            self.stats.jobs_redone += 1;
            self.stats.work_lost_ns += now.saturating_sub(g.sent_at);
            trace!(handle = handle.0, job = %g.key, "redo");
            self.push(Action::Redo { handle });
        }
        // 2. Lookups waiting for it are redone here.
        let stuck: Vec<JobRef> = self
            .lookups
            .iter()
            .filter(|(_, w)| w.holder == Some(dead))
            .map(|(h, _)| *h)
            .collect();
        for handle in stuck {
            if let Some(w) = self.lookups.remove(&handle) {
                if let Some(id) = w.fetch {
                    self.fetch_ids.remove(&id);
                }
            }
            self.stats.fetches_failed += 1;
            self.push(Action::Redo { handle });
        }
        // 3. Its fetch requests and directory entries are forgotten.
        let mut dropped = 0;
        self.requests.retain(|_, waiting| {
            let before = waiting.len();
            waiting.retain(|(from, _)| *from != dead);
            dropped += before - waiting.len();
            !waiting.is_empty()
        });
        self.requests_waiting -= dropped;
        self.directory.forget_holder(dead);
        // 4. Results kept for it (unless it left gracefully: nobody redoes its
        //    jobs), and its jobs running here (orphans now), are announced in one
        //    message to each survivor.
        let kept = if graceful {
            self.store.owner_left(dead);
            Vec::new()
        } else {
            self.store.owner_died(dead)
        };
        let mut entries: Vec<Announcement> = kept
            .into_iter()
            .map(|key| Announcement {
                key,
                pending: false,
            })
            .collect();
        self.stats.results_announced += entries.len() as u64;
        for r in self.running.values_mut() {
            if r.owner == dead && !r.orphan {
                r.orphan = true;
                self.stats.orphans_kept += 1;
                entries.push(Announcement {
                    key: r.key,
                    pending: true,
                });
            }
        }
        // 5. This is this member's whole account of the death, sent even when empty;
        //    the others' accounts are awaited by lookups that find nothing.
        self.account(entries, dead);
        let survivors = self.live.clone();
        self.accounts.died(dead, &survivors, now);
        self.resolve_awaiting();
        // 0. The master is elected again.
        if self.master == Some(dead) {
            self.elect();
        }
    }

    fn elect(&mut self) {
        self.master = None;
        self.stats.elections += 1;
        self.push(Action::ElectMaster);
    }

    /// The registry elected `master`. If that is this member and it was not the
    /// master before: [`Action::RestartRoot`]. An elected member not alive is
    /// ignored (and, while no master is known, the election asked for again).
    pub fn master_elected(&mut self, master: NodeId) {
        if self.master == Some(master) {
            return;
        }
        if master != self.me && !self.live.contains(&master) {
            self.ignore("master_elected: not alive");
            if self.master.is_none() {
                self.stats.elections += 1;
                self.push(Action::ElectMaster);
            }
            return;
        }
        self.master = Some(master);
        if master == self.me {
            debug!(me = %self.me, "recovery: this member is the new master");
            self.push(Action::RestartRoot);
        }
    }

    /// Member `n` joined. It is told the keys this member has announced (its
    /// announced results and pending orphans), if any, so it learns the
    /// directory from the members that hold results.
    pub fn node_joined(&mut self, n: NodeId) {
        if n == self.me || !self.live.insert(n) {
            return;
        }
        let mut entries: Vec<Announcement> = self
            .store
            .announced_keys()
            .map(|key| Announcement {
                key,
                pending: false,
            })
            .collect();
        entries.extend(
            self.running
                .values()
                .filter(|r| r.orphan)
                .map(|r| Announcement {
                    key: r.key,
                    pending: true,
                }),
        );
        if !entries.is_empty() {
            self.stats.announce_messages += 1;
            self.push(Action::Announce {
                to: vec![n],
                entries,
                death: None,
            });
        }
    }

    /// An announcement from `from` arrived: it holds (or computes) `entries`.
    pub fn announce_received(&mut self, from: NodeId, entries: &[Announcement]) {
        if from == self.me || !self.live.contains(&from) {
            self.ignore("announce_received: sender not alive");
            return;
        }
        for a in entries {
            if !self.directory.learn(a.key, from, a.pending) {
                self.ignore("announce_received: directory full");
            }
        }
        if !entries.is_empty() {
            self.resolve_awaiting();
        }
    }

    /// `from` sent its whole account of `dead`'s death (the announcement that
    /// came with it was passed to [`announce_received`](Recovery::announce_received)
    /// first). An account of a death this member has not heard of yet counts when
    /// it does.
    pub fn account_received(&mut self, from: NodeId, dead: NodeId) {
        if from == self.me || !self.live.contains(&from) || dead == self.me || dead == from {
            self.ignore("account_received: sender not alive");
            return;
        }
        let known = !self.live.contains(&dead);
        self.accounts.received(from, dead, known);
        self.resolve_awaiting();
    }

    /// Time passed: accounts awaited longer than
    /// [`Config::account_patience_ns`] are given up, and the lookups that waited
    /// for them end (in a fetch, if an account named the key, or a redo).
    pub fn tick(&mut self, now: u64) {
        if self.accounts.expire(now, self.config.account_patience_ns) {
            self.resolve_awaiting();
        }
    }

    // ------------------------------------------------------------ lookups

    /// A worker in redo mode is about to run the job `handle` with key `key`.
    /// See [`Lookup`]. A handle still in use (given or looked up) gives
    /// [`Lookup::Miss`].
    pub fn lookup(&mut self, handle: JobRef, key: JobKey) -> Lookup {
        self.stats.lookups += 1;
        if self.handle_in_use(handle) {
            self.ignore("lookup: handle in use");
            self.stats.misses += 1;
            return Lookup::Miss;
        }
        if let Some(e) = self.store.get(&key) {
            self.stats.hits_local += 1;
            return Lookup::Local(e.bytes.to_vec());
        }
        if self.orphan_running(&key) {
            self.stats.lookups_own_orphan += 1;
            self.lookups.insert(
                handle,
                Waiting {
                    key,
                    holder: Some(self.me),
                    fetch: None,
                },
            );
            return Lookup::Remote { holder: self.me };
        }
        if let Some(holder) = self.fetch_from_directory(handle, key) {
            return Lookup::Remote { holder };
        }
        if self.accounts.is_open() {
            self.stats.lookups_awaited += 1;
            self.lookups.insert(
                handle,
                Waiting {
                    key,
                    holder: None,
                    fetch: None,
                },
            );
            return Lookup::Awaiting;
        }
        self.stats.misses += 1;
        Lookup::Miss
    }

    /// If the directory knows who holds `key`: the lookup `handle` waits for a
    /// fetch from there ([`Action::Fetch`]); returns the holder.
    fn fetch_from_directory(&mut self, handle: JobRef, key: JobKey) -> Option<NodeId> {
        let loc = self.directory.get(&key)?;
        let id = FetchId(self.next_fetch);
        self.next_fetch += 1;
        self.fetch_ids.insert(id, handle);
        self.lookups.insert(
            handle,
            Waiting {
                key,
                holder: Some(loc.holder),
                fetch: Some(id),
            },
        );
        self.push(Action::Fetch {
            to: loc.holder,
            id,
            key,
        });
        Some(loc.holder)
    }

    /// Lookups waiting for accounts whose key is now known are fetched (or
    /// completed from the store); once no account is awaited, the rest are
    /// redone (misses).
    fn resolve_awaiting(&mut self) {
        let awaiting: Vec<(JobRef, JobKey)> = self
            .lookups
            .iter()
            .filter(|(_, w)| w.holder.is_none())
            .map(|(h, w)| (*h, w.key))
            .collect();
        let open = self.accounts.is_open();
        for (handle, key) in awaiting {
            if let Some(e) = self.store.get(&key) {
                let bytes = e.bytes.to_vec();
                self.lookups.remove(&handle);
                self.stats.hits_local += 1;
                self.push(Action::Complete { handle, bytes });
            } else if self.directory.get(&key).is_some() {
                self.lookups.remove(&handle);
                self.fetch_from_directory(handle, key);
            } else if !open {
                // (A job of an own orphan's key is redone: the orphan may be on
                // the stack of the worker that waits for it.)
                self.lookups.remove(&handle);
                self.stats.misses += 1;
                self.push(Action::Redo { handle });
            }
        }
    }

    /// The answer to our fetch `id` arrived from `from`: the result, or `None`
    /// if it had none. Completes or redoes the lookup.
    pub fn fetched(&mut self, from: NodeId, id: FetchId, bytes: Option<Vec<u8>>) {
        let Some(&handle) = self.fetch_ids.get(&id) else {
            self.ignore("fetched: unknown fetch id");
            return;
        };
        let Some(w) = self.lookups.get(&handle).copied() else {
            self.fetch_ids.remove(&id);
            self.ignore("fetched: lookup gone");
            return;
        };
        if w.holder != Some(from) {
            self.ignore("fetched: from another member than asked");
            return;
        }
        self.fetch_ids.remove(&id);
        self.lookups.remove(&handle);
        match bytes {
            Some(bytes) => {
                self.stats.hits_remote += 1;
                self.stats.bytes_fetched += bytes.len() as u64;
                self.push(Action::Complete { handle, bytes });
            }
            None => {
                self.stats.fetches_failed += 1;
                self.directory.forget(&w.key, from);
                self.push(Action::Redo { handle });
            }
        }
    }

    /// The stored result of `key` did not decode as its job's output when a lookup
    /// found it (the driver runs the job instead): it is dropped, so that no later
    /// lookup or fetch uses it again. Whether there was one.
    pub fn discard(&mut self, key: JobKey) -> bool {
        let had = self.store.remove(&key);
        if had {
            self.stats.discarded += 1;
        }
        had
    }

    /// Member `from` asks for the result of `key` (its fetch `id`). Answered at
    /// once from the store, queued while `key` is one of our pending orphans,
    /// "not found" otherwise.
    pub fn fetch_requested(&mut self, from: NodeId, id: FetchId, key: JobKey) {
        if from == self.me || !self.live.contains(&from) {
            self.ignore("fetch_requested: sender not alive");
            return;
        }
        if let Some(e) = self.store.get(&key) {
            let bytes = e.bytes.to_vec();
            self.stats.fetches_answered += 1;
            self.stats.bytes_served += bytes.len() as u64;
            self.push(Action::SendFetched {
                to: from,
                id,
                bytes: Some(bytes),
            });
        } else if self.orphan_running(&key)
            && self.requests_waiting < self.config.max_waiting_fetches
        {
            self.requests.entry(key).or_default().push((from, id));
            self.requests_waiting += 1;
        } else {
            self.stats.fetches_not_found += 1;
            self.push(Action::SendFetched {
                to: from,
                id,
                bytes: None,
            });
        }
    }

    // ------------------------------------------------------------ leave, checkpoints

    /// This member leaves gracefully: its stored results go to one live member
    /// chosen with the seeded generator ([`Action::HandOver`]), and fetch
    /// requests waiting for its orphans are answered "not found". With no other
    /// member alive the store is kept (for a checkpoint).
    pub fn leave(&mut self) {
        let waiting: Vec<(NodeId, FetchId)> = std::mem::take(&mut self.requests)
            .into_values()
            .flatten()
            .collect();
        self.requests_waiting = 0;
        for (to, id) in waiting {
            self.stats.fetches_not_found += 1;
            self.push(Action::SendFetched {
                to,
                id,
                bytes: None,
            });
        }
        if self.store.is_empty() || self.live.is_empty() {
            return;
        }
        let i = self.rng.index(self.live.len());
        let Some(&to) = self.live.iter().nth(i) else {
            return;
        };
        let entries = self.store.take_all();
        self.stats.handed_over += entries.len() as u64;
        debug!(me = %self.me, %to, results = entries.len(), "recovery: handing over");
        self.push(Action::HandOver { to, entries });
    }

    /// Results handed over by `from` (which is leaving) arrived: they are stored
    /// as this member's own and announced to every live member.
    pub fn handover_received(&mut self, from: NodeId, entries: Vec<(JobKey, Vec<u8>)>) {
        trace!(%from, results = entries.len(), "recovery: hand-over received");
        let n = entries.len() as u64;
        let announced = self.store_announced(entries);
        self.stats.handovers_received += n;
        self.stats.results_announced += announced.len() as u64;
        self.announce(announced);
    }

    /// The store's results as `(key, bytes)`, oldest first, for a checkpoint
    /// (see [`crate::checkpoint::encode`]).
    pub fn checkpoint_entries(&self) -> impl Iterator<Item = (JobKey, &[u8])> + '_ {
        self.store.iter()
    }

    /// The store's results as `(key, shared bytes)`, oldest first, for a
    /// checkpoint written elsewhere: costs a reference count per result, no copy
    /// (cheap under a lock; encode it after the lock is released).
    pub fn checkpoint_snapshot(&self) -> Vec<(JobKey, std::sync::Arc<[u8]>)> {
        self.store.snapshot()
    }

    /// Puts results read from a checkpoint into the store, so lookups find them,
    /// and announces them to every live member.
    pub fn restore(&mut self, entries: impl IntoIterator<Item = (JobKey, Vec<u8>)>) {
        let entries: Vec<(JobKey, Vec<u8>)> = entries.into_iter().collect();
        let n = entries.len() as u64;
        let announced = self.store_announced(entries);
        self.stats.restored += n;
        self.stats.results_announced += announced.len() as u64;
        self.announce(announced);
    }

    // ------------------------------------------------------------ helpers

    fn push(&mut self, action: Action) {
        trace!(me = %self.me, ?action, "recovery action");
        self.actions.push_back(action);
    }

    fn ignore(&mut self, why: &'static str) {
        trace!(me = %self.me, why, "recovery: event ignored");
        self.stats.ignored += 1;
    }

    fn handle_in_use(&self, handle: JobRef) -> bool {
        self.given.contains_key(&handle) || self.lookups.contains_key(&handle)
    }

    fn orphan_running(&self, key: &JobKey) -> bool {
        self.running.values().any(|r| r.orphan && r.key == *key)
    }

    /// Lookups waiting for an own orphan with `key`.
    fn local_waiters(&self, key: &JobKey) -> Vec<JobRef> {
        self.lookups
            .iter()
            .filter(|(_, w)| w.holder == Some(self.me) && w.key == *key)
            .map(|(h, _)| *h)
            .collect()
    }

    /// Fetch requests waiting for `key`, removed.
    fn take_requests(&mut self, key: &JobKey) -> Vec<(NodeId, FetchId)> {
        let waiting = self.requests.remove(key).unwrap_or_default();
        self.requests_waiting -= waiting.len();
        waiting
    }

    /// Stores one result; `false` if it is too large to keep.
    fn store_result(
        &mut self,
        key: JobKey,
        bytes: Vec<u8>,
        returned_to: Option<NodeId>,
        announced: bool,
    ) -> bool {
        match self.store.insert(key, bytes, returned_to, announced) {
            Inserted::Stored { evicted } => {
                self.stats.results_stored += 1;
                self.stats.evictions += evicted;
                true
            }
            Inserted::TooLarge => {
                self.stats.too_large += 1;
                false
            }
        }
    }

    /// Stores results as announced ones; returns the announcements of those kept.
    fn store_announced(&mut self, entries: Vec<(JobKey, Vec<u8>)>) -> Vec<Announcement> {
        let mut announced = Vec::new();
        for (key, bytes) in entries {
            if self.store_result(key, bytes, None, true) {
                announced.push(Announcement {
                    key,
                    pending: false,
                });
            }
        }
        // A result evicted again by a later one of the same batch is not announced.
        announced.retain(|a| self.store.get(&a.key).is_some());
        announced.sort();
        announced.dedup();
        announced
    }

    /// One announcement message to every live member, if there is anything to
    /// say and anyone to say it to.
    fn announce(&mut self, entries: Vec<Announcement>) {
        if !entries.is_empty() {
            self.announce_to_all(entries, None);
        }
    }

    /// This member's account of `dead`'s death, with `entries`, to every live
    /// member: sent even when empty.
    fn account(&mut self, entries: Vec<Announcement>, dead: NodeId) {
        self.announce_to_all(entries, Some(dead));
    }

    fn announce_to_all(&mut self, entries: Vec<Announcement>, death: Option<NodeId>) {
        if self.live.is_empty() {
            return;
        }
        let to: Vec<NodeId> = self.live.iter().copied().collect();
        self.stats.announce_messages += to.len() as u64;
        self.push(Action::Announce { to, entries, death });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u8) -> JobKey {
        JobKey([i; 16])
    }

    fn drain(r: &mut Recovery) -> Vec<Action> {
        std::iter::from_fn(|| r.poll_action()).collect()
    }

    /// Member 1 of {0, 1, 2, 3}, master 0, holding the result of a job stolen from 2.
    fn holding_a_result_for_2() -> Recovery {
        let mut r = Recovery::new(NodeId(1), (0..4).map(NodeId), NodeId(0), 7);
        r.stolen_job_started(JobRef(1), NodeId(2), key(1));
        r.stolen_job_finished(JobRef(1), vec![1, 2, 3]);
        drain(&mut r);
        r
    }

    #[test]
    fn a_graceful_leave_announces_nothing_of_the_results_kept_for_the_leaver() {
        let mut r = holding_a_result_for_2();
        r.node_left_gracefully(NodeId(2), 10);
        assert_eq!(
            drain(&mut r),
            vec![Action::Announce {
                to: vec![NodeId(0), NodeId(3)],
                entries: vec![],
                death: Some(NodeId(2)),
            }],
            "nothing to announce or redo: only the (empty) account of the leave"
        );
        assert!(!r.is_live(NodeId(2)));
        assert_eq!(r.stats().results_announced, 0);
        assert_eq!(r.store_len(), 1, "kept: a lookup may still use it");
        // A death of the same member later changes nothing.
        r.node_died(NodeId(2), 20);
        assert!(drain(&mut r).is_empty());
    }

    #[test]
    fn a_death_announces_the_results_kept_for_the_dead_member() {
        let mut r = holding_a_result_for_2();
        r.node_died(NodeId(2), 10);
        assert!(matches!(
            drain(&mut r).as_slice(),
            [Action::Announce { .. }]
        ));
        assert_eq!(r.stats().results_announced, 1);
    }

    #[test]
    fn handed_over_and_restored_results_count_as_announced() {
        let mut r = Recovery::new(NodeId(1), (0..4).map(NodeId), NodeId(0), 7);
        r.handover_received(NodeId(2), vec![(key(1), vec![1]), (key(2), vec![2])]);
        r.restore(vec![(key(3), vec![3])]);
        assert_eq!(r.stats().results_announced, 3);
    }
}
