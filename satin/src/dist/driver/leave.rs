//! Graceful leave (malleability): a member that is asked to leave (SIGTERM in a
//! malleable pool, or [`crate::dist::LeaveHandle::request`]) goes without anybody
//! redoing any of its work.
//!
//! The leaver L:
//! 1. stops stealing and answers steal requests with "no job" (phase `Leaving`), and
//!    sends [`LeaveMsg::Leaving`] to every member;
//! 2. finishes the jobs it runs for others (their results go home as usual, including
//!    jobs that arrive in steal replies sent before the others heard `Leaving`), and
//!    with them gets back the results of the jobs others stole from it;
//! 3. waits until every member answered `Leaving` with [`LeaveMsg::Ack`] (steal
//!    replies to L are ahead of it on the FIFO link), all of this bounded by
//!    [`crate::dist::DistConfig::end_timeout`];
//! 4. hands over its saved results ([`Driver::hand_over_saved_results`]), sends its
//!    statistics to the master and [`LeaveMsg::Done`] to every member, and ends: the
//!    pool handle then leaves the registry (`Left`, not `Died`) and `Pool::run` returns
//!    without a result.
//!
//! A member M that gets `Leaving` from L removes L from its victims and answers
//! `Ack`; it keeps L's port for the results it owes L. At `Done` M forgets L: as L
//! owes nothing, nothing is redone. The registry's `Left` for L, and the orderly close
//! of L's link (reported on another thread than L's messages), may come before `Done`:
//! M then waits for `Done`, at most `end_timeout`, before forgetting L. If L crashes
//! while leaving (a lost link, `Died`), it is handled as any crash.
//!
//! If the bound passes first, L leaves anyway and warns; the others then redo what it
//! had not finished (a correct result, some work lost).
//!
//! If the master dies while L leaves, L does not stand for master while others may:
//! it reads the election's result for up to two seconds (`LEAVER_DEFERS`); if nobody
//! else took over by then (or no other member is left), L stands, and if it wins it
//! stops leaving, tells the others ([`LeaveMsg::Stays`]: they steal from it again)
//! and restarts the root as any new master.
//!
//! The master cannot leave gracefully (it runs the root job): a request to leave is
//! warned about and ignored (a second SIGTERM ends the process).

use super::super::protocol::LeaveMsg;
use super::*;
use std::collections::HashSet;

/// State of graceful leaves, this member's and the others'.
pub(crate) struct Leave {
    /// Set to ask this member to leave.
    requested: Arc<AtomicBool>,
    /// When this member started leaving, and the deadline.
    started: Option<(Instant, Instant)>,
    /// Members that answered this member's `Leaving`.
    acks: HashSet<u32>,
    /// The master was asked to leave and said it cannot.
    refused: bool,
    /// Other members that are leaving: the time the registry said they left, if it did.
    others: HashMap<u32, Option<Instant>>,
}

impl Leave {
    pub(crate) fn new(requested: Arc<AtomicBool>) -> Leave {
        Leave {
            requested,
            started: None,
            acks: HashSet::new(),
            refused: false,
            others: HashMap::new(),
        }
    }
}

impl Driver {
    /// Called once per round of the event loop: starts and ends this member's leave,
    /// and forgets leavers whose `Done` did not come in time.
    pub(super) fn leave_tick(&mut self) {
        self.expire_held();
        if !self.leave.others.is_empty() {
            let bound = self.config.end_timeout;
            let late: Vec<u32> = self
                .leave
                .others
                .iter()
                .filter(|(_, left)| left.is_some_and(|t| t.elapsed() >= bound))
                .map(|(n, _)| *n)
                .collect();
            for n in late {
                self.leave.others.remove(&n);
                let _ = self.gone(n);
            }
        }
        if self.leave.started.is_none() {
            if self.leave.requested.load(Ordering::Relaxed) {
                self.start_leaving();
            }
            return;
        }
        let running = self.remote_jobs_started - self.remote_jobs_executed;
        let waiting = (0..self.alive.len() as u32)
            .filter(|n| *n != self.me && self.alive[*n as usize] && !self.leave.acks.contains(n))
            .count();
        let done = running == 0 && self.given.is_empty() && self.incoming.is_empty();
        let Some((t0, deadline)) = self.leave.started else {
            return;
        };
        if done && waiting == 0 {
            tracing::info!(
                seconds = t0.elapsed().as_secs_f64(),
                "left the run gracefully: nothing of this member is redone"
            );
        } else if Instant::now() >= deadline {
            tracing::warn!(
                running,
                stolen_from_here = self.given.len(),
                unanswered = waiting,
                "leaving before everything was finished: the others redo those jobs"
            );
        } else {
            return;
        }
        self.hand_over_saved_results();
        if self.alive.get(self.master as usize) == Some(&true) {
            let stats = Box::new(self.member_stats());
            self.send(self.master, Msg::Stats(stats), &[]);
        }
        self.tell_all(LeaveMsg::Done);
        self.exit = true;
    }

    /// The hand-over of a graceful leave ([J] 4.4): the saved results of this member
    /// (results of stolen jobs it computed) go to a random survivor, which announces
    /// them as its own.
    /// `Recovery::leave` chooses the survivor; its `HandOver` action is sent as one
    /// `Msg::HandOver` (the results' bytes as payload) before `Done`, on the same FIFO
    /// link, so the survivor has them when it forgets this member.
    fn hand_over_saved_results(&mut self) {
        if self.save {
            self.saved.with(|r| r.leave());
            self.recovery_actions();
        }
    }

    fn start_leaving(&mut self) {
        if self.is_master() {
            if !self.leave.refused {
                self.leave.refused = true;
                tracing::warn!(
                    "asked to leave, but the master cannot leave gracefully (it runs the \
                     root job): going on (a second SIGTERM ends it)"
                );
            }
            return;
        }
        if self.phase != Phase::Running {
            return; // the run ends anyway
        }
        tracing::info!("leaving the run gracefully: finishing the jobs running here");
        self.phase = Phase::Leaving;
        let now = Instant::now();
        self.leave.started = Some((now, now + self.config.end_timeout));
        self.tell_all(LeaveMsg::Leaving);
    }

    /// This member stops leaving (it became the master): it runs on, serving steal
    /// requests again, and tells the others ([`LeaveMsg::Stays`]), so they steal from
    /// it again.
    pub(super) fn cancel_leave(&mut self) {
        self.leave.started = None;
        self.leave.acks.clear();
        if self.phase == Phase::Leaving {
            self.phase = Phase::Running;
            self.fail_unsent_steals();
        }
        self.tell_all(LeaveMsg::Stays);
    }

    fn tell_all(&mut self, m: LeaveMsg) {
        for n in 0..self.alive.len() as u32 {
            if n != self.me && self.alive[n as usize] {
                self.send(n, Msg::Leave(m), &[]);
            }
        }
    }

    /// A member joined while this one leaves: it must answer `Leaving` too.
    pub(super) fn joined_while_leaving(&mut self, n: u32) {
        if self.leave.started.is_some() {
            self.send(n, Msg::Leave(LeaveMsg::Leaving), &[]);
        }
    }

    /// A leave message from node `from`.
    pub(super) fn leave_message(&mut self, from: u32, m: LeaveMsg) {
        if !self.alive.get(from as usize).copied().unwrap_or(false) {
            return;
        }
        match m {
            LeaveMsg::Leaving => {
                self.leave.others.insert(from, None);
                let now = self.now();
                // No more steal requests to it; its port stays for the results owed.
                self.node.handle(Event::NodeLeft {
                    node: NodeId(from),
                    now,
                });
                self.send(from, Msg::Leave(LeaveMsg::Ack), &[]);
            }
            LeaveMsg::Ack => {
                self.leave.acks.insert(from);
            }
            LeaveMsg::Stays => {
                if self.leave.others.remove(&from).is_some() {
                    let now = self.now();
                    let cluster = self.topology.cluster_of(NodeId(from));
                    if let Some(cluster) = cluster {
                        self.node.handle(Event::NodeJoined {
                            node: NodeId(from),
                            cluster,
                            now,
                        });
                    }
                }
            }
            LeaveMsg::Done => {
                self.leave.others.remove(&from);
                tracing::debug!(member = %self.who(from), "a member left gracefully");
                let _ = self.gone_as(from, true);
            }
        }
    }

    /// The connection from node `n` was closed: `true` if it is leaving gracefully (its
    /// `Done` may still be queued behind the close: it is awaited as after the
    /// registry's `Left`).
    pub(super) fn leaver_closed(&mut self, n: u32) -> bool {
        match self.leave.others.get_mut(&n) {
            Some(left) => {
                left.get_or_insert_with(Instant::now);
                true
            }
            None => false,
        }
    }

    /// The registry says `member` left: `true` if it is leaving gracefully and its
    /// last messages are awaited (at most `end_timeout`) before it is forgotten.
    pub(super) fn left_gracefully(&mut self, member: u64) -> bool {
        let Some(n) = self.members.iter().position(|m| m.0 == member) else {
            return false;
        };
        self.leaver_closed(n as u32)
    }
}
