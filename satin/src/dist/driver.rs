//! The driver thread of one member: owns the `satin_core::Node`, feeds it events
//! (messages, local idleness, timers) and carries out its actions; and feeds the
//! member's crash-recovery bookkeeping (`satin_core::recovery::Recovery`, shared with
//! the workers' lookups in [`super::saved`]) and carries out its actions.

use super::checkpoint::Checkpoints;
use super::protocol::{Header, Msg, WireJob};
use super::saved;
use super::stats::{MemberStats, PoolStats};
use super::{Control, DistConfig, MASTER_ELECTION};
use crate::error::SatinError;
use crate::{AbortHandle, ExternalStealer, Satin, StolenJob};
use ipl::{Ibis, IbisIdentifier, ReadMessage, SendPort};
use satin_core::recovery::{Action as RecoveryAction, Announcement, FetchId};
use satin_core::{Action, Config, Event, JobKey, JobRef, Node, NodeId, StealId, TimerId, Topology};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

mod adapt;
mod leave;
mod membership;

pub(crate) use membership::{Change, MAX_NODE};

/// How often the driver looks at the local runtime when nothing wakes it.
const POLL: Duration = Duration::from_micros(500);

/// How often the driver checks that this member still has its registry.
const REGISTRY_CHECK: Duration = Duration::from_millis(200);

/// How long a member that lost its link to the master waits for the registry to
/// report the master dead (then a new master is elected) before it gives up: the
/// registry server's probe of a suspect takes up to its probe timeout
/// (`ipl_registry::DEFAULT_PROBE_TIMEOUT`, 5 s) before it declares it dead, so this
/// waits that long plus a margin for the `Died` event to arrive.
const MASTER_CONFIRM: Duration = Duration::from_secs(8);

/// How long a member waits before it asks the registry again for a master it cannot
/// use yet (a member that joined and that this member is not connected to yet).
const ELECTION_PAUSE: Duration = Duration::from_millis(250);

/// A member that leaves gracefully does not stand for master while others may:
/// it asks for the result this many times ([`ELECTION_PAUSE`] apart), then stands
/// itself (and stays, as the master, if it wins).
const LEAVER_DEFERS: u32 = 8;

/// How long a member that had `Done` waits for the `Exit` of a master reported dead
/// before it goes on without it (see `Driver::reopen`).
const REOPEN_GRACE: Duration = Duration::from_millis(200);

/// How often the recovery bookkeeping is told the time (`Recovery::tick`: accounts
/// of a death awaited longer than their patience are given up).
const TICK_EVERY: Duration = Duration::from_millis(50);

/// Elections that name a member this one already knows dead are asked again at
/// most this many times (the registry clears a dead winner's election before it
/// reports the death, so this is only a guard).
const ELECTION_RETRIES: u32 = 20;

/// Fault-injection hook for tests: after `N` messages sent, `master:N` makes the master
/// drop its connection to the first non-master node, `master-exit:N` the same just
/// before it sends that node its `Exit` (the run is over, the `Exit` is lost), and
/// `members:N` the first non-master node its connection to the second one just before
/// it sends a job result over it (the result is lost): an orderly disconnect of the
/// send port, without telling anybody, as a reset link would end it. Ignored when
/// malformed.
pub(crate) const DROP_LINK_ENV: &str = "SATIN_TEST_DROP_LINK";

/// Test hook: with `SATIN_TEST_DROP_SHARED_WRITES=1` this member sends none of its
/// writes to shared objects (they stay local), so that the other members' guards
/// must fetch its copies (tests/tests/satin_pool.rs).
pub(crate) const DROP_SHARED_WRITES_ENV: &str = "SATIN_TEST_DROP_SHARED_WRITES";

/// Fault-injection hook for tests: `N` makes the first non-master node end its process
/// at once (exit status 86, without leaving the pool: the others see it die) right
/// after it gave its `N`-th job to a thief. The job it gave then runs on as an orphan,
/// and the jobs it had stolen are redone by their owners. Ignored when malformed.
pub(crate) const DIE_AFTER_GIVING_ENV: &str = "SATIN_TEST_DIE_AFTER_GIVING";

/// Fault-injection hook for tests: `1` makes the first master end its process at once
/// (exit status 86, without leaving the pool) when every member has reported its
/// statistics, just before it would tell them to exit: the root job returned, but the
/// result is lost with the master. The survivors elect a new master, which restarts the
/// root. A master elected later ignores it. Ignored unless `1`.
pub(crate) const MASTER_DIES_AT_END_ENV: &str = "SATIN_TEST_MASTER_DIES_AT_END";

/// The hook of [`DIE_AFTER_GIVING_ENV`] for node `me`.
fn die_after_giving_hook(me: u32, master: u32, nodes: u32) -> Option<u64> {
    let n = std::env::var(DIE_AFTER_GIVING_ENV)
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    let first = (0..nodes).find(|x| *x != master)?;
    (first == me).then_some(n)
}

/// A member as the user knows it, from its entry in [`DriverInit::members`]: its IPL
/// name and cluster, `member-2 (cluster h1)`.
fn member_label(member: Option<&(u64, String, String)>) -> String {
    match member {
        Some((_, name, cluster)) => format!("{name} (cluster {cluster})"),
        None => "an unknown member".into(),
    }
}

/// Which message the hook of [`DROP_LINK_ENV`] drops the link before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DropBefore {
    Any,
    Result,
    Exit,
}

impl DropBefore {
    fn matches(self, msg: &Msg) -> bool {
        match self {
            DropBefore::Any => true,
            DropBefore::Result => matches!(msg, Msg::Result { .. }),
            DropBefore::Exit => matches!(msg, Msg::Exit),
        }
    }
}

/// The hook of [`DROP_LINK_ENV`] for node `me`: (peer, after this many sends, before
/// which message).
fn drop_link_hook(me: u32, master: u32, nodes: u32) -> Option<(u32, u64, DropBefore)> {
    let v = std::env::var(DROP_LINK_ENV).ok()?;
    let (which, n) = v.split_once(':')?;
    let n = n.trim().parse::<u64>().ok()?;
    let mut others = (0..nodes).filter(|x| *x != master);
    let (from, to, results) = match which.trim() {
        "members" => (others.next()?, others.next()?, DropBefore::Result),
        "master" => (master, others.next()?, DropBefore::Any),
        "master-exit" => (master, others.next()?, DropBefore::Exit),
        _ => return None,
    };
    (from == me).then_some((to, n, results))
}

/// What wakes the driver.
pub(crate) enum Input {
    /// A message from another member (decoded by the receive upcall).
    Net {
        from: u32,
        msg: Msg,
        payload: Vec<u8>,
    },
    /// A worker ran out of work.
    Kick,
    /// A frame aborted children: the ones given to other members are called back.
    Aborted,
    /// A job stolen from `to` finished here (`run`: its handle among the stolen jobs
    /// running here); send its result home.
    Finished {
        to: u32,
        job: u64,
        run: u64,
        outcome: Result<Vec<u8>, String>,
        /// It stopped because its owner aborted it (no result goes home).
        aborted: bool,
    },
    /// A worker's lookup of a saved result queued something for the driver to do.
    Recovery,
    /// A write to a shared object made here: broadcast it (see [`crate::shared`]).
    SharedWrite { object: String, op: Vec<u8> },
    /// The guard of a job stolen from `from` does not hold: ask it for its copies
    /// of the shared objects.
    SharedFetch { from: u32 },
    /// The master's root job returned.
    RootDone,
    /// A member (by IPL member id) died (`died`) or left.
    Gone { member: u64, died: bool },
    /// The connection from a member (by IPL member id) to this one ended: closed
    /// (`lost == false`) or lost.
    LinkLost { member: u64, lost: bool },
    /// The pool handle was dropped: stop now.
    Shutdown,
    /// A member joined or left gracefully (malleability, see `membership`).
    Membership(Change),
    /// A request to `ipl-run` for adaptivity ended (see `adapt`).
    Adapt(adapt::Outcome),
}

/// Decodes one message of the `satin` port (header, then payload bytes), and checks
/// its sender: node numbers are IPL member ids, so the header's `from` must be the
/// member id of the send port the message came from (the connection's origin, which
/// the IPL knows from the connection, not from the message). A message whose header
/// names another member is dropped: no member can speak for another (end the run as
/// the master, return a result of a job it was not given).
pub(crate) fn read_message(m: &mut ReadMessage) -> Option<Input> {
    let origin = m.origin().ibis.id().get();
    let (h, payload) = decode_message(m)?;
    if u64::from(h.from) != origin {
        tracing::warn!(
            origin,
            claimed = h.from,
            "a message claims another sender than its connection's: dropped"
        );
        return None;
    }
    Some(Input::Net {
        from: h.from,
        msg: h.msg,
        payload,
    })
}

/// Decodes one message of the `satin` port: the header, then the payload it
/// announces (bounded by the message's own length).
pub(crate) fn decode_message(m: &mut ReadMessage) -> Option<(Header, Vec<u8>)> {
    let h: Header = m.read_object().ok()?;
    let len = match &h.msg {
        Msg::StealReply { job: Some(j), .. } => j.len,
        Msg::Result { outcome: Ok(n), .. } => *n,
        Msg::Fetched { len: Some(n), .. } => *n,
        Msg::SharedWrite { len, .. } | Msg::SharedState { len, .. } => *len,
        Msg::HandOver { entries } => entries
            .iter()
            .try_fold(0u64, |sum, (_, n)| sum.checked_add(*n))?,
        _ => 0,
    };
    let payload = if len > 0 {
        m.read_bytes_ref(usize::try_from(len).ok()?).ok()?.to_vec()
    } else {
        Vec::new()
    };
    Some((h, payload))
}

/// Everything the driver needs, assembled by `Pool::join`.
pub(crate) struct DriverInit {
    pub me: u32,
    pub master: u32,
    /// Per node: IPL member id, IPL name (`member-R`, R the launcher's rank), cluster
    /// name.
    pub members: Vec<(u64, String, String)>,
    pub topology: Topology,
    pub config: DistConfig,
    pub seed: u64,
    pub ports: Vec<Option<SendPort>>,
    /// Per node: its IPL identifier (for reports to the registry); `None` for a node
    /// number (IPL member id) that is not a member.
    pub idents: Vec<Option<IbisIdentifier>>,
    /// The IPL instance (its registry: liveness reports, and noticing its loss).
    pub ibis: Arc<Ibis>,
    pub satin: Arc<Satin>,
    pub rx: mpsc::Receiver<Input>,
    pub tx: mpsc::Sender<Input>,
    pub kick: Arc<AtomicBool>,
    /// The crash-recovery bookkeeping, shared with the workers' lookups.
    pub saved: Arc<saved::Shared>,
    /// Checkpoint files of the saved results, if configured.
    pub checkpoints: Option<Checkpoints>,
    /// Tells `Pool::run` to restart the root job (this member became the master).
    pub control: mpsc::Sender<Control>,
    /// Nodes this member could not connect to while the pool formed.
    pub unreachable: Vec<u32>,
    /// Set to make this member leave gracefully (SIGTERM, `Pool::leave_handle`).
    pub leave: Arc<AtomicBool>,
}

/// The traffic of the shared objects (see [`crate::shared`]), for the statistics.
#[derive(Default, Debug, Clone, Copy)]
struct SharedCounts {
    /// Writes made here (each broadcast to every other member).
    writes: u64,
    /// Write messages sent.
    updates_sent: u64,
    /// Writes of others applied here.
    received: u64,
    /// Copies sent to members whose guards asked for them.
    states_sent: u64,
    /// Payload bytes of the write and copy messages sent.
    bytes: u64,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Phase {
    /// Stealing and serving.
    Running,
    /// The root job returned (master) or `Done` arrived (member): no more stealing.
    Ending,
    /// This member leaves gracefully (see `leave`): no more stealing, but the run goes
    /// on (a master that dies meanwhile is replaced, and the leave carries on).
    Leaving,
}

/// An end-of-run message (`Done`, or `Exit`) from a member that is not the master
/// this member knows: the new master's, come before the registry's word that the
/// old one died. Held (one per sender: `Exit` supersedes `Done`) until the sender is
/// elected, dropped when it departs.
#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Debug)]
enum HeldEnd {
    Done,
    Exit,
}

pub(crate) struct Driver {
    me: u32,
    master: u32,
    members: Vec<(u64, String, String)>,
    node: Node,
    topology: Topology,
    config: DistConfig,
    ports: Vec<Option<SendPort>>,
    idents: Vec<Option<IbisIdentifier>>,
    ibis: Arc<Ibis>,
    /// Nodes whose link broke during a send, handled in the loop.
    broken: Vec<u32>,
    registry_checked: Instant,
    /// The test hook of [`DROP_LINK_ENV`]: (node, after this many sends, before which
    /// message).
    drop_link: Option<(u32, u64, DropBefore)>,
    sent: u64,
    alive: Vec<bool>,
    satin: Arc<Satin>,
    stealer: ExternalStealer,
    rx: mpsc::Receiver<Input>,
    tx: mpsc::Sender<Input>,
    kick: Arc<AtomicBool>,
    start: Instant,
    phase: Phase,
    deadline: Option<Instant>,
    /// Jobs stolen from here by other members, until their results return.
    given: HashMap<u64, (u32, StolenJob)>,
    /// Jobs that arrived in steal replies, until the node enqueues them.
    incoming: HashMap<u64, (u32, WireJob, Vec<u8>)>,
    /// The abort flags of the jobs stolen from other members that run here, by
    /// (owner, owner's job id), until they finish.
    abortable: HashMap<(u32, u64), AbortHandle>,
    next_ref: u64,
    timers: BinaryHeap<Reverse<(u64, u64)>>,
    reports: HashMap<u32, MemberStats>,
    exit: bool,
    requests_served: u64,
    jobs_given: u64,
    remote_jobs_executed: u64,
    /// What this member's shared objects sent and received.
    shared: SharedCounts,
    /// The test hook of [`DROP_SHARED_WRITES_ENV`].
    drop_shared_writes: bool,
    /// Crash recovery: the bookkeeping (shared with the lookups) and whether results
    /// are saved at all (off: only master elections).
    saved: Arc<saved::Shared>,
    save: bool,
    /// Stolen jobs running here, by handle: (owner, owner's job id, error if it
    /// failed), until their result went home or they ended as orphans.
    running: HashMap<u64, (u32, u64, Option<String>)>,
    next_run: u64,
    checkpoints: Option<Checkpoints>,
    control: mpsc::Sender<Control>,
    /// The link to the master broke: the registry must confirm its death by then.
    master_suspect: Option<Instant>,
    /// When the master's death was noticed (until the root restarts somewhere).
    master_died_at: Option<Instant>,
    elections_left: u32,
    /// Elections this member, leaving, left to the others (see [`LEAVER_DEFERS`]).
    leaver_defers: u32,
    /// Ask the registry for the master again then (its winner could not be used yet).
    elect_again: Option<Instant>,
    /// End-of-run messages from members that are not (yet) the master, by sender.
    held_end: HashMap<u32, HeldEnd>,
    /// A failure found while carrying out recovery actions (an election failed).
    failure: Option<SatinError>,
    recovery_nanos: u64,
    restart_nanos: u64,
    /// The test hook of [`DIE_AFTER_GIVING_ENV`]: exit after giving this many jobs.
    die_after_giving: Option<u64>,
    /// The test hook of [`MASTER_DIES_AT_END_ENV`] (only on the first master).
    master_dies_at_end: bool,
    /// The master handed the run's statistics to `Pool::run` (see `deliver`).
    delivered: bool,
    /// The master died while the run ended: go on then, unless its `Exit` came.
    reopen_at: Option<Instant>,
    /// When the recovery bookkeeping is told the time next (see [`TICK_EVERY`]).
    next_tick: Instant,
    /// Steal requests the node asked for while the run was ending (not sent): failed
    /// for the node if the run goes on (the master died before its end).
    unsent_steals: Vec<(NodeId, StealId)>,
    /// Threads reporting suspects to the registry (joined at the end: they hold the
    /// IPL instance, which `Pool::finish` must own alone to leave).
    reporters: Vec<std::thread::JoinHandle<()>>,
    /// Jobs stolen from other members started here (minus `remote_jobs_executed`:
    /// running).
    remote_jobs_started: u64,
    /// Members joining the running pool.
    joins: membership::Joins,
    /// Graceful leaves, of this member and of others.
    leave: leave::Leave,
    /// Self-adaptivity: measurements, and the coordinator on the master.
    adapt: adapt::Adapt,
}

impl Driver {
    pub(crate) fn new(init: DriverInit) -> Result<Driver, SatinError> {
        let cfg = Config {
            retry_backoff_ns: init.config.steal_backoff.as_nanos() as u64,
        };
        let node = Node::try_new(
            NodeId(init.me),
            init.topology.clone(),
            init.config.policy,
            init.seed,
            cfg,
        )
        .map_err(|e| SatinError::Pool(e.to_string()))?;
        let n = init.members.len();
        let save = init.config.save_results;
        let alive = init.idents.iter().map(Option::is_some).collect();
        let adapt = adapt::Adapt::new(&init.config);
        Ok(Driver {
            save,
            me: init.me,
            master: init.master,
            members: init.members,
            node,
            topology: init.topology,
            config: init.config,
            ports: init.ports,
            idents: init.idents,
            ibis: init.ibis,
            broken: init.unreachable,
            registry_checked: Instant::now(),
            drop_link: drop_link_hook(init.me, init.master, n as u32),
            sent: 0,
            alive,
            stealer: init.satin.external_stealer(),
            satin: init.satin,
            rx: init.rx,
            tx: init.tx,
            kick: init.kick,
            start: Instant::now(),
            phase: Phase::Running,
            deadline: None,
            given: HashMap::new(),
            incoming: HashMap::new(),
            abortable: HashMap::new(),
            next_ref: 1,
            timers: BinaryHeap::new(),
            reports: HashMap::new(),
            exit: false,
            requests_served: 0,
            jobs_given: 0,
            remote_jobs_executed: 0,
            shared: SharedCounts::default(),
            drop_shared_writes: std::env::var(DROP_SHARED_WRITES_ENV).is_ok_and(|v| v == "1"),
            saved: init.saved,
            running: HashMap::new(),
            next_run: 1,
            checkpoints: init.checkpoints,
            control: init.control,
            master_suspect: None,
            master_died_at: None,
            elections_left: ELECTION_RETRIES,
            leaver_defers: 0,
            elect_again: None,
            held_end: HashMap::new(),
            failure: None,
            recovery_nanos: 0,
            restart_nanos: 0,
            reporters: Vec::new(),
            die_after_giving: die_after_giving_hook(init.me, init.master, n as u32),
            master_dies_at_end: init.me == init.master
                && std::env::var(MASTER_DIES_AT_END_ENV).is_ok_and(|v| v.trim() == "1"),
            unsent_steals: Vec::new(),
            delivered: false,
            reopen_at: None,
            next_tick: Instant::now(),
            remote_jobs_started: 0,
            joins: membership::Joins::default(),
            leave: leave::Leave::new(init.leave),
            adapt,
        })
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn is_master(&self) -> bool {
        self.me == self.master
    }

    /// The event loop; returns the pool's statistics on the master.
    pub(crate) fn run(mut self) -> Result<(), SatinError> {
        let mut outcome = Ok(());
        loop {
            let now = self.now();
            while let Some(&Reverse((at, id))) = self.timers.peek() {
                if at > now {
                    break;
                }
                self.timers.pop();
                self.node.handle(Event::Timer {
                    id: TimerId(id),
                    now,
                });
            }
            self.sync_idle();
            self.actions();
            self.recovery_actions();
            self.checkpoint();
            if let Err(e) = self.faults() {
                outcome = Err(e);
                break;
            }
            self.leave_tick();
            self.adapt_tick();
            if self.exit {
                break;
            }
            if let Some(d) = self.deadline {
                if Instant::now() >= d {
                    if !self.is_master() {
                        // It sent its statistics at `Done`: its part is done. The
                        // master's user may hold the pool longer (`PoolRun`).
                        tracing::warn!(
                            "the master did not end the run within the end timeout after \
                             its Done: leaving"
                        );
                    }
                    break;
                }
            }
            if self.reopen_at.is_some_and(|t| Instant::now() >= t) {
                self.reopen_at = None;
                if !self.exit && self.phase == Phase::Ending {
                    self.reopen();
                    self.elect_master();
                    self.recovery_actions();
                }
            }
            if self.is_master()
                && self.phase == Phase::Ending
                && !self.delivered
                && self.all_reported()
            {
                // The run is over: its result and statistics go to the user; the
                // members exit once the user is done with them (`PoolRun` dropped).
                self.deliver();
            }
            let mut wait = POLL;
            if let Some(&Reverse((at, _))) = self.timers.peek() {
                wait = wait.min(Duration::from_nanos(at.saturating_sub(self.now())));
            }
            match self.rx.recv_timeout(wait) {
                Ok(i) => {
                    if let Err(e) = self.input(i) {
                        outcome = Err(e);
                        break;
                    }
                    // Take whatever else is queued before looking at idleness again.
                    while let Ok(i) = self.rx.try_recv() {
                        if let Err(e) = self.input(i) {
                            outcome = Err(e);
                            break;
                        }
                    }
                    if outcome.is_err() {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        if self.is_master() && self.phase == Phase::Ending {
            if !self.delivered {
                // The end bound passed first: with the members that reported.
                self.deliver();
            }
            for to in 0..self.ports.len() as u32 {
                if to != self.me {
                    self.send(to, Msg::Exit, &[]);
                }
            }
        }
        // Jobs still away can no longer come back.
        for (_, (_, job)) in self.given.drain() {
            job.fail(SatinError::Remote("the pool ended".into()));
        }
        self.saved.release_lookups();
        for p in self.ports.iter_mut().flatten() {
            p.close();
        }
        if let Some(c) = &mut self.checkpoints {
            c.finish(outcome.is_ok());
        }
        // Bounded by the registry's probe timeout.
        for r in self.reporters.drain(..) {
            let _ = r.join();
        }
        outcome
    }

    /// Reacts to broken links and to the loss of the registry.
    fn faults(&mut self) -> Result<(), SatinError> {
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        while let Some(n) = self.broken.pop() {
            self.link_lost(n, true)?;
        }
        if self.elect_again.is_some_and(|t| Instant::now() >= t) {
            self.elect_again = None;
            self.elect_master();
            self.recovery_actions();
            if let Some(e) = self.failure.take() {
                return Err(e);
            }
        }
        if let Some(d) = self.master_suspect {
            if Instant::now() >= d && self.alive[self.master as usize] {
                if self.phase == Phase::Ending {
                    // The run is over (the master sent Done): this member's part is
                    // done, but the user should know its link broke.
                    tracing::warn!(
                        "lost the connection to the master, {}, at the end of the run: \
                         leaving",
                        self.who(self.master)
                    );
                    self.exit = true;
                    return Ok(());
                }
                return Err(SatinError::Pool(format!(
                    "lost the connection to the master, {}, during the run, and the \
                     registry does not report it dead; the master finishes without this \
                     member",
                    self.who(self.master)
                )));
            }
        }
        if self.registry_checked.elapsed() >= REGISTRY_CHECK {
            self.registry_checked = Instant::now();
            if let Err(e) = self.ibis.registry().pool_status() {
                if self.is_master() {
                    // The master carries on alone: the others stop (they lost the
                    // registry too, or see this member declared dead), their work is
                    // redone here, and the result is not lost.
                    if self.members.len() > 1 && self.alive.iter().filter(|a| **a).count() > 1 {
                        tracing::warn!(error = %e, "lost the registry: the master finishes the run alone");
                        for n in 0..self.members.len() as u32 {
                            self.gone(n)?;
                        }
                    }
                } else if self.phase == Phase::Running {
                    return Err(SatinError::Pool(format!(
                        "{} lost its registry ({e}): it stops, the others redo its work",
                        self.who(self.me)
                    )));
                }
            }
        }
        Ok(())
    }

    /// The link to node `n` ended (`lost`: not in an orderly way). While the run goes
    /// on, the peer is treated as failed: the registry is asked to check it
    /// (`maybe_dead`: if it is really dead everybody hears `Died`), and this member
    /// stops using it at once, redoing the jobs it stole from here (the results it
    /// owes could never arrive). Losing the master while running is an error.
    fn link_lost(&mut self, n: u32, lost: bool) -> Result<(), SatinError> {
        if n == self.me || !self.alive.get(n as usize).copied().unwrap_or(false) {
            return Ok(());
        }
        if self.phase != Phase::Running && !lost {
            // Members close their ports when the run ends (and leave).
            return Ok(());
        }
        if !lost && self.leaver_closed(n) {
            return Ok(()); // a graceful leave: its last messages may still be queued
        }
        tracing::warn!(
            member = %self.who(n),
            lost,
            "the connection to a member ended during the run: treating it as failed"
        );
        if let Some(Some(id)) = self.idents.get(n as usize).cloned() {
            // On a thread of its own: the registry may probe the suspect for seconds,
            // and this thread must go on serving (and hear the verdict, `Died`).
            let ibis = self.ibis.clone();
            let spawned = std::thread::Builder::new()
                .name("satin-suspect".into())
                .spawn(move || {
                    if let Err(e) = ibis.registry().maybe_dead(&id) {
                        tracing::debug!(error = %e, "could not report the member to the registry");
                    }
                });
            match spawned {
                Ok(h) => self.reporters.push(h),
                Err(e) => {
                    tracing::debug!(error = %e, "could not report the member to the registry")
                }
            }
        }
        if n == self.master {
            // The master may have crashed: if the registry confirms it (`Died`), a new
            // master is elected; if not within a bound, this member gives up (or, once
            // it has sent its statistics, ends: the master ends the run without it).
            if let Some(p) = self.ports.get_mut(n as usize) {
                *p = None;
            }
            self.master_suspect
                .get_or_insert_with(|| Instant::now() + MASTER_CONFIRM);
            return Ok(());
        }
        self.gone(n)
    }

    /// Node `n` as the user knows it: its IPL name (`member-R`, R the rank its launcher
    /// gave it) and its cluster, e.g. `member-2 (cluster h1)`.
    fn who(&self, n: u32) -> String {
        member_label(self.members.get(n as usize))
    }

    fn all_reported(&self) -> bool {
        (0..self.members.len() as u32)
            .all(|n| n == self.me || !self.alive[n as usize] || self.reports.contains_key(&n))
    }

    /// Tells the node whether the local runtime starves.
    fn sync_idle(&mut self) {
        if self.phase != Phase::Running {
            return;
        }
        let starving = self.satin.is_starving();
        if starving && !self.node.is_idle() {
            let now = self.now();
            self.node.handle(Event::Idle { now });
        } else if !starving && self.node.is_idle() {
            let now = self.now();
            self.node.handle(Event::Busy { now });
        }
    }

    fn input(&mut self, input: Input) -> Result<(), SatinError> {
        match input {
            Input::Kick => self.kick.store(false, Ordering::Release),
            Input::Aborted => self.call_back_aborted(),
            Input::Net { from, msg, payload } => self.message(from, msg, payload),
            Input::Recovery => {}
            Input::SharedWrite { object, op } => self.shared_write(&object, &op),
            Input::SharedFetch { from } => {
                self.send(from, Msg::SharedFetch, &[]);
            }
            Input::Finished {
                to,
                job,
                run,
                outcome,
                aborted,
            } => {
                self.remote_jobs_executed += 1;
                self.abortable.remove(&(to, job));
                if aborted {
                    // The owner finished it already: nothing goes home.
                    if self.save {
                        self.saved.with(|r| r.stolen_job_failed(JobRef(run)));
                        self.running.remove(&run);
                        self.recovery_actions();
                    }
                    let now = self.now();
                    self.node.handle(Event::ResultReturned {
                        job: JobRef(job),
                        to: NodeId(to),
                        now,
                    });
                    return Ok(());
                }
                if self.save {
                    match outcome {
                        Ok(bytes) => self
                            .saved
                            .with(|r| r.stolen_job_finished(JobRef(run), bytes)),
                        Err(e) => {
                            if let Some(r) = self.running.get_mut(&run) {
                                r.2 = Some(e);
                            }
                            self.saved.with(|r| r.stolen_job_failed(JobRef(run)));
                        }
                    }
                    self.recovery_actions();
                    self.running.remove(&run);
                    return Ok(());
                }
                let (outcome, payload) = match outcome {
                    Ok(b) => (Ok(b.len() as u64), b),
                    Err(e) => (Err(e), Vec::new()),
                };
                self.send(to, Msg::Result { job, outcome }, &payload);
                let now = self.now();
                self.node.handle(Event::ResultReturned {
                    job: JobRef(job),
                    to: NodeId(to),
                    now,
                });
            }
            Input::RootDone => {
                self.phase = Phase::Ending;
                self.deadline = Some(Instant::now() + self.config.end_timeout);
                for to in 0..self.ports.len() as u32 {
                    if to != self.me {
                        self.send(to, Msg::Done, &[]);
                    }
                }
            }
            Input::Gone { member, died } => self.departed(member, died)?,
            Input::LinkLost { member, lost } => {
                if let Some(n) = self.members.iter().position(|m| m.0 == member) {
                    self.link_lost(n as u32, lost)?;
                }
            }
            Input::Shutdown => self.exit = true,
            Input::Membership(change) => self.membership(change)?,
            Input::Adapt(outcome) => self.adapt_outcome(outcome),
        }
        Ok(())
    }

    /// The registry says a member left (`died == false`) or died: forget it as a
    /// joiner, and treat it as gone. A master that left ended its run (only a dead
    /// master is replaced): a member still running stops with an error.
    fn departed(&mut self, member: u64, died: bool) -> Result<(), SatinError> {
        self.forget_joining(member);
        if let Some(n) = self.members.iter().position(|m| m.0 == member) {
            let n = n as u32;
            if n == self.master && !died && self.phase != Phase::Running {
                // The master left (leaving is the last thing it does): the run is
                // over, there is nothing to hand over. It leaves once its members
                // disconnected after its `Exit`, or after it waited for them in vain:
                // an `Exit` that never came here (the registry's word can also come
                // before this member saw its link break) means the link to it broke,
                // and the user should know.
                if self.master_suspect.is_some() || (self.phase == Phase::Ending && !self.exit) {
                    tracing::warn!(
                        "lost the connection to the master, {}, at the end of the run: \
                         it left without its Exit reaching this member; leaving",
                        self.who(n)
                    );
                }
                self.exit = true;
                return Ok(());
            }
            if n == self.master && !died && self.phase == Phase::Running && !self.exit {
                // A master leaves only once its run is over: there is nothing
                // to take over (only a dead master is replaced).
                self.alive[n as usize] = false;
                return Err(SatinError::Pool(if self.master_suspect.is_some() {
                    format!(
                        "lost the connection to the master, {}, during the run; \
                         the master finished without this member",
                        self.who(n)
                    )
                } else {
                    "the master left the pool".into()
                }));
            }
            self.gone(n)?;
        }
        Ok(())
    }

    /// Node `n` died or left (the registry says so, or its link broke): it is no
    /// longer a victim, the jobs it stole from here are redone, the results kept for
    /// it and the orphans it left are announced (with `save_results`), and if it was
    /// the master a new one is elected.
    fn gone(&mut self, n: u32) -> Result<(), SatinError> {
        self.gone_as(n, false)
    }

    /// [`Driver::gone`]; `graceful`: node `n` ended its graceful leave (it owes
    /// nothing: the results kept for it are not announced).
    pub(super) fn gone_as(&mut self, n: u32, graceful: bool) -> Result<(), SatinError> {
        if n == self.me || !self.alive[n as usize] {
            return Ok(());
        }
        let t0 = Instant::now();
        self.alive[n as usize] = false;
        self.held_end.remove(&n);
        self.adapt_gone(n);
        if let Some(p) = self.ports.get_mut(n as usize) {
            *p = None;
        }
        let now = self.now();
        self.node.handle(Event::NodeLeft {
            node: NodeId(n),
            now,
        });
        if n == self.master && !self.exit {
            self.master_suspect = None;
            if self.phase == Phase::Ending {
                // The master died after `Done`: if its `Exit` does not follow within
                // a moment (it may be on its way: the registry's word and the
                // master's messages come on different threads), its result may be
                // lost with it (the user gets it before the `Exit`s). Then the run
                // goes on: a new master restarts the root, cheaply (the saved
                // results are looked up). The election waits for that moment.
                self.reopen_at = Some(Instant::now() + REOPEN_GRACE);
            }
            self.leaver_defers = 0;
            // Running, or leaving: a leaver carries its leave on (the jobs it runs for
            // others, its hand-over and its statistics go to the new master).
            tracing::warn!(master = %self.who(n), "the master is gone: electing a new one");
            self.master_died_at = Some(t0);
        }
        if !self.save {
            let lost: Vec<u64> = self
                .given
                .iter()
                .filter(|(_, (thief, _))| *thief == n)
                .map(|(k, _)| *k)
                .collect();
            for k in lost {
                if let Some((_, job)) = self.given.remove(&k) {
                    // Its result can never come: redo the job here.
                    tracing::debug!(
                        node = n,
                        job = k,
                        "redoing a job stolen by a member that is gone"
                    );
                    job.give_back();
                }
            }
        }
        if graceful {
            self.saved.with(|r| r.node_left_gracefully(NodeId(n), now));
        } else {
            self.saved.with(|r| r.node_died(NodeId(n), now));
        }
        self.recovery_actions();
        self.recovery_nanos += t0.elapsed().as_nanos() as u64;
        match self.failure.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The master died after its `Done` and before its `Exit` (this member had stopped
    /// stealing and sent its statistics): the run goes on until a new master ends it.
    /// The steal requests the node asked for meanwhile fail, so it steals again.
    fn reopen(&mut self) {
        tracing::warn!(
            "the master died at the end of the run, before its result was safe: going on"
        );
        self.phase = Phase::Running;
        self.deadline = None;
        self.fail_unsent_steals();
    }

    /// The steal requests the node asked for while this member did not steal (the
    /// run ending, or a leave) fail, so the node steals again.
    fn fail_unsent_steals(&mut self) {
        let now = self.now();
        for (from, id) in std::mem::take(&mut self.unsent_steals) {
            self.node.handle(Event::StealReply {
                from,
                id,
                job: None,
                now,
            });
        }
    }

    /// Carries out the crash-recovery bookkeeping's actions (and redoes here the jobs
    /// whose lookups waited too long).
    fn recovery_actions(&mut self) {
        if self.save {
            // The accounts' patience is 500 ms: a tick every 50 ms is enough, and
            // keeps the lock off the driver's per-message path.
            if Instant::now() >= self.next_tick {
                self.next_tick = Instant::now() + TICK_EVERY;
                let now = self.now();
                self.saved.with(|r| r.tick(now));
            }
            for job in self.saved.impatient(Instant::now()) {
                tracing::debug!("a lookup waited too long: redoing its job here");
                job.give_back_redo();
            }
        }
        loop {
            let todo = self.saved.drain();
            if todo.is_empty() {
                return;
            }
            for (action, job) in todo {
                self.recovery_action(action, job);
            }
        }
    }

    fn recovery_action(&mut self, action: RecoveryAction, job: Option<StolenJob>) {
        match action {
            RecoveryAction::SendResult { handle, bytes, .. } => {
                if let Some(&(owner, job, _)) = self.running.get(&handle.0) {
                    let msg = Msg::Result {
                        job,
                        outcome: Ok(bytes.len() as u64),
                    };
                    self.send(owner, msg, &bytes);
                    let now = self.now();
                    self.node.handle(Event::ResultReturned {
                        job: JobRef(job),
                        to: NodeId(owner),
                        now,
                    });
                }
            }
            RecoveryAction::SendFailure { handle, .. } => {
                if let Some((owner, job, error)) = self.running.get(&handle.0).cloned() {
                    let error = error.unwrap_or_else(|| "the job failed".into());
                    self.send(
                        owner,
                        Msg::Result {
                            job,
                            outcome: Err(error),
                        },
                        &[],
                    );
                    let now = self.now();
                    self.node.handle(Event::ResultReturned {
                        job: JobRef(job),
                        to: NodeId(owner),
                        now,
                    });
                }
            }
            RecoveryAction::Redo { handle } => {
                if let Some(job) = job {
                    tracing::debug!(handle = handle.0, "redoing a job (a lookup found nothing)");
                    job.give_back_redo();
                } else if let Some((_, job)) = self.given.remove(&handle.0) {
                    tracing::debug!(
                        job = handle.0,
                        "redoing a job stolen by a member that is gone"
                    );
                    job.give_back_redo();
                }
            }
            RecoveryAction::Complete { bytes, .. } => {
                if let Some(job) = job {
                    let t0 = Instant::now();
                    saved::complete_or_redo(job, &bytes);
                    self.add_deser(t0);
                }
            }
            RecoveryAction::Announce { to, entries, death } => {
                if !self.save {
                    return; // nobody looks anything up
                }
                let entries: Vec<(JobKey, bool)> =
                    entries.iter().map(|a| (a.key, a.pending)).collect();
                for n in to {
                    let msg = Msg::Have {
                        entries: entries.clone(),
                        death: death.map(|d| d.0),
                    };
                    self.send(n.0, msg, &[]);
                }
            }
            RecoveryAction::Fetch { to, id, key } => {
                if !self.send(to.0, Msg::Fetch { id: id.0, key }, &[]) {
                    // Unreachable: answered "not found" (the job is redone here).
                    self.saved.with(|r| r.fetched(to, id, None));
                }
            }
            RecoveryAction::SendFetched { to, id, bytes } => {
                let len = bytes.as_ref().map(|b| b.len() as u64);
                let payload = bytes.unwrap_or_default();
                self.send(to.0, Msg::Fetched { id: id.0, len }, &payload);
            }
            RecoveryAction::HandOver { to, entries } => {
                tracing::debug!(member = %self.who(to.0), results = entries.len(), "handing over the saved results");
                let mut payload = Vec::with_capacity(entries.iter().map(|(_, b)| b.len()).sum());
                let mut lens = Vec::with_capacity(entries.len());
                for (key, bytes) in &entries {
                    lens.push((*key, bytes.len() as u64));
                    payload.extend_from_slice(bytes);
                }
                self.send(to.0, Msg::HandOver { entries: lens }, &payload);
            }
            RecoveryAction::ElectMaster => self.elect_master(),
            RecoveryAction::RestartRoot => {
                if let Some(t0) = self.master_died_at.take() {
                    self.restart_nanos += t0.elapsed().as_nanos() as u64;
                }
                tracing::warn!("this member is the new master: restarting the root job");
                if self.control.send(Control::RestartRoot).is_err() {
                    self.failure = Some(SatinError::Pool(
                        "the new master cannot restart the root job (the pool handle is gone)"
                            .into(),
                    ));
                }
            }
        }
    }

    /// Asks the registry for the master (the old one died) and tells the bookkeeping.
    fn elect_master(&mut self) {
        if self.exit || self.phase == Phase::Ending {
            return;
        }
        self.elect_again = None;
        let others = (0..self.alive.len()).any(|n| n as u32 != self.me && self.alive[n]);
        let winner = if self.phase == Phase::Leaving && others && self.leaver_defers < LEAVER_DEFERS
        {
            // A leaver lets the members that stay take over: it only reads the
            // result (a winner not known alive yet, or none: asked again later).
            // Bounded by `LEAVER_DEFERS`, not by the elections left.
            self.leaver_defers += 1;
            match self
                .ibis
                .registry()
                .get_election_result(MASTER_ELECTION, Some(Duration::ZERO))
            {
                Ok(Some(w))
                    if self
                        .members
                        .iter()
                        .position(|m| m.0 == w.id().get())
                        .is_some_and(|n| n as u32 != self.me && self.alive[n]) =>
                {
                    Ok(w)
                }
                Ok(_) => {
                    self.elect_again = Some(Instant::now() + ELECTION_PAUSE);
                    return;
                }
                Err(e) => Err(e),
            }
        } else {
            if self.elections_left == 0 {
                self.failure = Some(SatinError::Pool(
                    "no live master could be elected after the master died".into(),
                ));
                return;
            }
            self.elections_left -= 1;
            self.ibis.registry().elect(MASTER_ELECTION)
        };
        let winner = match winner {
            Ok(w) => w,
            Err(e) => {
                self.failure = Some(SatinError::Pool(format!(
                    "electing a new master after the master died: {e}"
                )));
                return;
            }
        };
        let id = winner.id().get();
        let known = self.members.iter().position(|m| m.0 == id);
        let Some(n) = known.filter(|n| self.was_member(*n as u32)) else {
            if id < MAX_NODE && !self.joins.has_departed(id) {
                // A member that joined and that this member is not connected to yet:
                // asked again a little later (bounded by the retries), while the
                // connection completes.
                tracing::debug!(master = %winner, "the new master is not connected yet");
                self.elect_again = Some(Instant::now() + ELECTION_PAUSE);
                return;
            }
            self.failure = Some(SatinError::Pool(format!(
                "the new master, {winner}, is not a member of this run"
            )));
            return;
        };
        let n = n as u32;
        if n != self.me && !self.alive[n as usize] {
            // A winner already gone: the bookkeeping asks again (bounded).
            std::thread::sleep(Duration::from_millis(20));
        } else {
            self.master = n;
            tracing::info!(master = %self.who(n), "new master elected");
            if n == self.me && self.phase == Phase::Leaving {
                // Nobody that stays took over: this member does, and stays.
                tracing::warn!("no member that stays took over as master: this member stops leaving and becomes the master");
                self.cancel_leave();
            }
        }
        self.saved.with(|r| r.master_elected(NodeId(n)));
        if n == self.master {
            if let Some(held) = self.held_end.remove(&n) {
                // The new master's end of the run came before the old one's death.
                self.end_message(n, held);
            }
        }
    }

    /// `Done` or `Exit` from node `from`: acted on if it is the master, held if it may
    /// become the master (the registry has not yet said that the old one died).
    fn end_message(&mut self, from: u32, m: HeldEnd) {
        if from != self.master {
            // Also while ending: the old master may die before its `Exit` (see
            // `reopen`), and its successor's `Done` may come before the news.
            if self.alive.get(from as usize) == Some(&true) && self.phase != Phase::Leaving {
                let held = self.held_end.entry(from).or_insert(m);
                *held = (*held).max(m);
            }
            return;
        }
        match m {
            HeldEnd::Done => {
                // Only the current master ends the run (a `Done` of a master that
                // died and was replaced meanwhile is stale).
                if self.phase == Phase::Running {
                    self.phase = Phase::Ending;
                    self.deadline = Some(Instant::now() + self.config.end_timeout);
                    let stats = Box::new(self.member_stats());
                    self.send(self.master, Msg::Stats(stats), &[]);
                }
            }
            HeldEnd::Exit => self.exit = true,
        }
    }

    /// The master's run is over (every member reported, or the end bound passed):
    /// the statistics go to `Pool::run`, which hands the result to the user. The
    /// members are told to exit only when the user is done with it (the driver then
    /// gets `Shutdown`): a master that dies before that is replaced, and the root
    /// restarted, as after any master crash.
    fn deliver(&mut self) {
        if self.master_dies_at_end {
            tracing::warn!("test hook: the master dies before the end of the run");
            std::process::exit(86);
        }
        self.delivered = true;
        // The user decides how long the pool stays (until it drops the `PoolRun`).
        self.deadline = None;
        let mut members: Vec<MemberStats> = self.reports.drain().map(|(_, m)| m).collect();
        members.push(self.member_stats());
        let missing = (0..self.members.len() as u32)
            .filter(|n| !members.iter().any(|m| m.node == *n) && self.was_member(*n))
            .map(|n| self.who(n))
            .collect();
        let stats = PoolStats::from_members(members, missing);
        if self.control.send(Control::Ended(Box::new(stats))).is_err() {
            self.exit = true; // nobody to hand it to: end now
        }
    }

    /// Writes a checkpoint of the saved results when one is due.
    fn checkpoint(&mut self) {
        if self.phase != Phase::Running {
            return;
        }
        let Some(c) = &mut self.checkpoints else {
            return;
        };
        let stored = self.saved.results_stored();
        if c.due(stored) {
            let (bytes, stored) = self.saved.checkpoint();
            c.write(bytes, stored);
        }
    }

    fn message(&mut self, from: u32, msg: Msg, payload: Vec<u8>) {
        let Some((msg, payload)) = self.hold_early(from, msg, payload) else {
            return; // from a member that joins: handled once connected to it
        };
        if from as usize >= self.members.len() || from == self.me {
            return;
        }
        let now = self.now();
        match msg {
            Msg::StealRequest { id, synchronous } => {
                if self.phase == Phase::Running {
                    self.node.handle(Event::StealRequest {
                        from: NodeId(from),
                        id: StealId(id),
                        synchronous,
                        now,
                    });
                } else {
                    self.requests_served += 1;
                    self.send(from, Msg::StealReply { id, job: None }, &[]);
                }
            }
            Msg::StealReply { id, job } => {
                let job = job.map(|wire| {
                    let key = self.next_ref;
                    self.next_ref += 1;
                    self.incoming.insert(key, (from, wire, payload));
                    JobRef(key)
                });
                self.node.handle(Event::StealReply {
                    from: NodeId(from),
                    id: StealId(id),
                    job,
                    now,
                });
                self.actions();
                // A job the node did not take (a stale reply) still must run.
                let left: Vec<u64> = self.incoming.keys().copied().collect();
                for key in left {
                    self.enqueue(key);
                }
            }
            Msg::Result { job, outcome } => {
                // Only the thief the job was given to returns its result.
                if self.given.get(&job).map(|(thief, _)| *thief) != Some(from) {
                    tracing::debug!(
                        member = %self.who(from),
                        job,
                        "a result of a job not given to its sender: dropped"
                    );
                    return;
                }
                if self.save {
                    self.saved.with(|r| r.result_received(JobRef(job)));
                }
                if let Some((_, stolen)) = self.given.remove(&job) {
                    match outcome {
                        Ok(_) => {
                            let t0 = Instant::now();
                            let _ = stolen.complete_from_wire(&payload);
                            self.add_deser(t0);
                        }
                        Err(e) => stolen.fail(SatinError::Remote(e)),
                    }
                }
            }
            Msg::Abort { job } => {
                // A job that finished already is not here: the abort is dropped (its
                // owner drops the result). One submitted but not started is not run.
                if let Some(h) = self.abortable.get(&(from, job)) {
                    h.abort();
                }
            }
            Msg::SharedWrite { object, .. } => {
                match crate::shared::apply_remote(&object, &payload) {
                    Ok(true) => self.shared.received += 1,
                    Ok(false) => tracing::debug!(
                        object,
                        "a write to a shared object this member does not have: skipped"
                    ),
                    Err(e) => {
                        tracing::warn!(member = %self.who(from), error = %e, "a write to a shared object dropped")
                    }
                }
            }
            Msg::SharedFetch => {
                for (object, state) in crate::shared::snapshots() {
                    let len = state.len() as u64;
                    self.shared.states_sent += 1;
                    self.shared.bytes += len;
                    self.send(from, Msg::SharedState { object, len }, &state);
                }
            }
            Msg::SharedState { object, .. } => {
                if let Err(e) = crate::shared::restore(&object, &payload) {
                    tracing::warn!(member = %self.who(from), error = %e, "a copy of a shared object dropped");
                }
            }
            Msg::Done => self.end_message(from, HeldEnd::Done),
            Msg::Stats(s) => {
                self.reports.insert(from, *s);
            }
            Msg::Exit => self.end_message(from, HeldEnd::Exit),
            Msg::Have { entries, death } => {
                if self.save {
                    let entries: Vec<Announcement> = entries
                        .into_iter()
                        .map(|(key, pending)| Announcement { key, pending })
                        .collect();
                    self.saved.with(|r| {
                        r.announce_received(NodeId(from), &entries);
                        if let Some(d) = death {
                            r.account_received(NodeId(from), NodeId(d));
                        }
                    });
                }
            }
            Msg::Fetch { id, key } => {
                if self.save {
                    self.saved
                        .with(|r| r.fetch_requested(NodeId(from), FetchId(id), key));
                } else {
                    self.send(from, Msg::Fetched { id, len: None }, &[]);
                }
            }
            Msg::Fetched { id, len } => {
                if self.save {
                    let bytes = len.map(|_| payload);
                    self.saved
                        .with(|r| r.fetched(NodeId(from), FetchId(id), bytes));
                }
            }
            Msg::HandOver { entries } => {
                if self.save {
                    let mut results = Vec::with_capacity(entries.len());
                    let mut at = 0usize;
                    for (key, len) in entries {
                        // The lengths summed to the payload's length when it was read.
                        let Some(end) = usize::try_from(len).ok().and_then(|l| at.checked_add(l))
                        else {
                            break;
                        };
                        let Some(bytes) = payload.get(at..end) else {
                            break;
                        };
                        results.push((key, bytes.to_vec()));
                        at = end;
                    }
                    self.saved
                        .with(|r| r.handover_received(NodeId(from), results));
                    self.recovery_actions();
                }
            }
            Msg::Leave(m) => self.leave_message(from, m),
            Msg::Sample(s) => self.adapt_sample(from, s),
        }
        self.recovery_actions();
    }

    fn add_deser(&self, t0: Instant) {
        self.satin
            .net_counters()
            .deserialize_nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
    }

    fn add_ser(&self, t0: Instant) {
        self.satin
            .net_counters()
            .serialize_nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
    }

    /// Carries out the node's actions.
    fn actions(&mut self) {
        while let Some(a) = self.node.poll_action() {
            match a {
                Action::SendStealRequest {
                    to,
                    id,
                    synchronous,
                } => {
                    if self.phase != Phase::Running {
                        // The run is ending: steal no more (the node keeps waiting,
                        // until the run goes on after all: see `reopen`).
                        self.unsent_steals.push((to, id));
                        continue;
                    }
                    let msg = Msg::StealRequest {
                        id: id.0,
                        synchronous,
                    };
                    if self.send(to.0, msg, &[]) {
                        self.satin
                            .net_counters()
                            .remote_steal_attempts
                            .fetch_add(1, Relaxed);
                    } else if self.node.topology().contains(to) {
                        // Unreachable victim: drop it from the victims (this also
                        // abandons the request), so the node moves on. Jobs it stole
                        // fail when the registry reports it gone.
                        let now = self.now();
                        self.node.handle(Event::NodeLeft { node: to, now });
                    }
                }
                Action::ServeSteal { to, id, .. } => self.serve(to.0, id.0),
                Action::EnqueueStolen { job, .. } => {
                    self.satin
                        .net_counters()
                        .remote_steal_successes
                        .fetch_add(1, Relaxed);
                    self.enqueue(job.0);
                }
                Action::SetTimer { id, at } => self.timers.push(Reverse((at, id.0))),
            }
        }
    }

    /// Answers a thief with the oldest local job, if it may leave the process.
    fn serve(&mut self, to: u32, id: u64) {
        self.requests_served += 1;
        let mut job = None;
        let mut payload = Vec::new();
        if self.phase == Phase::Running {
            if let Some(stolen) = self.stealer.steal() {
                let t0 = Instant::now();
                let wire = stolen.to_wire();
                self.add_ser(t0);
                match wire {
                    None => stolen.give_back(),
                    Some((name, bytes)) => {
                        let key = self.save.then(|| JobKey::of(name, &bytes));
                        // A job of a redone subtree is looked up before it leaves: its
                        // result may be saved (the kernel offers only the jobs its own
                        // workers run).
                        let stolen = match key {
                            Some(key) if stolen.is_redone() && self.saved.active() => {
                                match self.saved.lookup(key, stolen) {
                                    Ok(()) => {
                                        self.recovery_actions();
                                        None
                                    }
                                    Err(back) => Some(back),
                                }
                            }
                            _ => Some(stolen),
                        };
                        if let Some(stolen) = stolen {
                            let handle = self.saved.next_handle();
                            job = Some(WireJob {
                                job: handle,
                                name: name.to_string(),
                                len: bytes.len() as u64,
                                redone: stolen.is_redone(),
                            });
                            self.given.insert(handle, (to, stolen));
                            if let Some(key) = key {
                                let now = self.now();
                                self.saved
                                    .with(|r| r.job_given(JobRef(handle), NodeId(to), key, now));
                                self.recovery_actions();
                                if !self.given.contains_key(&handle) {
                                    // The thief is gone already: the job is redone here.
                                    job = None;
                                }
                            }
                            if job.is_some() {
                                payload = bytes;
                            }
                        }
                    }
                }
            }
        }
        let handle = job.as_ref().map(|j| j.job);
        if self.send(to, Msg::StealReply { id, job }, &payload) {
            if handle.is_some() {
                self.jobs_given += 1;
                if self.die_after_giving.is_some_and(|n| self.jobs_given >= n) {
                    tracing::warn!(given = self.jobs_given, "test hook: this member dies now");
                    std::process::exit(86);
                }
            }
        } else if let Some(h) = handle {
            if let Some((_, stolen)) = self.given.remove(&h) {
                if self.save {
                    self.saved.with(|r| r.result_received(JobRef(h)));
                }
                stolen.give_back();
            }
        }
    }

    /// Calls back the jobs given to other members that their spawners aborted: each
    /// thief is told to stop, and the job is finished here without a result.
    fn call_back_aborted(&mut self) {
        let aborted: Vec<u64> = self
            .given
            .iter()
            .filter(|(_, (_, stolen))| stolen.is_aborted())
            .map(|(&h, _)| h)
            .collect();
        for h in aborted {
            let Some((thief, stolen)) = self.given.remove(&h) else {
                continue;
            };
            if self.save {
                self.saved.with(|r| r.result_received(JobRef(h)));
            }
            self.send(thief, Msg::Abort { job: h }, &[]);
            if let Err(stolen) = stolen.finish_aborted() {
                // Not reachable: only aborted jobs were picked. Kept rather than lost.
                self.given.insert(h, (thief, stolen));
            }
        }
    }

    /// Starts a job that came in a steal reply; its result goes home when done.
    fn enqueue(&mut self, key: u64) {
        let Some((owner, wire, payload)) = self.incoming.remove(&key) else {
            return;
        };
        // Counted as executed when its result (or error) goes home.
        self.remote_jobs_started += 1;
        if self.remote_jobs_started == 1 {
            tracing::debug!(owner = %self.who(owner), "running a job stolen from another member");
        }
        let run = self.next_run;
        self.next_run += 1;
        if self.save {
            self.running.insert(run, (owner, wire.job, None));
            let key = JobKey::of(&wire.name, &payload);
            self.saved
                .with(|r| r.stolen_job_started(JobRef(run), NodeId(owner), key));
            self.recovery_actions();
        }
        let t0 = Instant::now();
        let job = self.satin.from_wire(&wire.name, &payload);
        self.add_deser(t0);
        match job {
            Ok(job) => {
                let tx = self.tx.clone();
                let id = wire.job;
                let abort = AbortHandle::new();
                self.abortable.insert((owner, id), abort.clone());
                // The guard's fetch asks the owner: it ran the job's spawner, so its
                // copies are consistent for the job (journal, section 4.2).
                let fetch_tx = self.tx.clone();
                let fetch: Box<dyn Fn() + Send> = Box::new(move || {
                    let _ = fetch_tx.send(Input::SharedFetch { from: owner });
                });
                self.satin
                    .execute_wire_job_from(job, wire.redone, abort, Some(fetch), move |r| {
                        let aborted = r == Err(SatinError::Aborted);
                        let _ = tx.send(Input::Finished {
                            to: owner,
                            job: id,
                            run,
                            outcome: r.map_err(|e| e.to_string()),
                            aborted,
                        });
                    });
            }
            Err(e) => {
                let _ = self.tx.send(Input::Finished {
                    to: owner,
                    job: wire.job,
                    run,
                    outcome: Err(e.to_string()),
                    aborted: false,
                });
            }
        }
    }

    /// A write to a shared object made here goes to every other live member (best
    /// effort: one that joins later, or is unreachable, misses it; guards repair).
    fn shared_write(&mut self, object: &str, op: &[u8]) {
        self.shared.writes += 1;
        if self.drop_shared_writes {
            if self.shared.writes == 1 {
                tracing::warn!("test hook: writes to shared objects are not sent");
            }
            return;
        }
        let len = op.len() as u64;
        for to in 0..self.ports.len() as u32 {
            if to == self.me || !self.alive.get(to as usize).copied().unwrap_or(false) {
                continue;
            }
            let msg = Msg::SharedWrite {
                object: object.to_string(),
                len,
            };
            if self.send(to, msg, op) {
                self.shared.updates_sent += 1;
                self.shared.bytes += len;
            }
        }
    }

    /// Sends one message; counts it; `false` if the member is unreachable.
    fn send(&mut self, to: u32, msg: Msg, payload: &[u8]) -> bool {
        let intra = self.topology.same_cluster(NodeId(self.me), NodeId(to));
        let header = Header { from: self.me, msg };
        let Some(Some(port)) = self.ports.get_mut(to as usize) else {
            return false;
        };
        if let Some((peer, after, before)) = self.drop_link {
            self.sent += 1;
            if peer == to && self.sent >= after && before.matches(&header.msg) {
                // The message goes nowhere: it is lost with the link.
                self.drop_link = None;
                tracing::warn!(node = to, "test hook: dropping the link");
                for t in port.connected_to() {
                    let _ = port.disconnect(&t);
                }
            }
        }
        let r = (|| {
            let mut m = port.new_message()?;
            m.write_object(&header)?;
            if !payload.is_empty() {
                m.write_bytes(payload)?;
            }
            m.finish()
        })();
        match r {
            Ok(bytes) => {
                let net = self.satin.net_counters();
                if intra {
                    net.intra_messages.fetch_add(1, Relaxed);
                    net.intra_bytes.fetch_add(bytes as u64, Relaxed);
                } else {
                    net.inter_messages.fetch_add(1, Relaxed);
                    net.inter_bytes.fetch_add(bytes as u64, Relaxed);
                }
                true
            }
            Err(e) => {
                tracing::debug!(node = to, error = %e, "send failed");
                if let Some(p) = self.ports.get_mut(to as usize) {
                    *p = None;
                }
                self.broken.push(to);
                false
            }
        }
    }

    /// This member's statistics now.
    fn member_stats(&self) -> MemberStats {
        let local = self.satin.stats();
        let core = self.node.stats_at(self.now());
        let net = local.net;
        let rec = self.saved.stats();
        let (_, name, cluster) = self
            .members
            .get(self.me as usize)
            .cloned()
            .unwrap_or_default();
        MemberStats {
            node: self.me,
            name,
            cluster,
            workers: local.workers.len() as u64,
            spawns: local.total.spawns,
            syncs: local.total.syncs,
            aborts: local.total.aborts,
            aborted: local.total.aborted,
            inlets: local.total.inlets,
            local_steal_attempts: local.total.steal_attempts,
            local_steal_successes: local.total.steal_successes,
            local_steal_nanos: local.total.steal_nanos,
            intra_steal_attempts: core.intra.steal_attempts,
            intra_steal_successes: core.intra.steal_successes,
            inter_steal_attempts: core.inter.steal_attempts,
            inter_steal_successes: core.inter.steal_successes,
            requests_served: self.requests_served,
            jobs_given: self.jobs_given,
            remote_jobs_executed: self.remote_jobs_executed,
            intra_messages: net.intra_messages,
            intra_bytes: net.intra_bytes,
            inter_messages: net.inter_messages,
            inter_bytes: net.inter_bytes,
            sync_steal_nanos: core.sync_steal_ns,
            async_steal_nanos: core.async_steal_ns,
            idle_nanos: core.idle_ns,
            serialize_nanos: net.serialize_nanos,
            deserialize_nanos: net.deserialize_nanos,
            jobs_redone: rec.jobs_redone,
            work_lost_nanos: rec.work_lost_ns,
            orphans_kept: rec.orphans_kept,
            results_announced: rec.results_announced + rec.orphan_results_announced,
            announce_messages: rec.announce_messages,
            lookups: rec.lookups,
            results_reused: rec.hits_local + rec.hits_remote,
            lookup_misses: rec.misses,
            lookups_awaited: rec.lookups_awaited,
            own_orphan_lookups: rec.lookups_own_orphan,
            fetches_failed: rec.fetches_failed,
            bytes_fetched: rec.bytes_fetched,
            results_stored: rec.results_stored,
            restored: rec.restored,
            elections: rec.elections,
            recovery_nanos: self.recovery_nanos,
            restart_nanos: self.restart_nanos,
            redo_jobs: local.total.redo_jobs,
            adapt_added: self.adapt.added,
            adapt_removed: self.adapt.removed,
            shared_writes: self.shared.writes,
            shared_updates_sent: self.shared.updates_sent,
            shared_updates_received: self.shared.received,
            shared_states_sent: self.shared.states_sent,
            shared_bytes: self.shared.bytes,
            guard_waits: net.guard_waits,
            guard_fetches: net.guard_fetches,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_named_by_its_ipl_name_not_its_node_number() {
        let m = (7, "member-2".to_string(), "h1".to_string());
        assert_eq!(member_label(Some(&m)), "member-2 (cluster h1)");
        assert_eq!(member_label(None), "an unknown member");
    }
}
