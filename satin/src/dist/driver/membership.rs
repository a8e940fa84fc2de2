//! Members that join a running pool (malleability).
//!
//! **Node numbers are IPL member ids.** The registry gives every member of a pool a
//! number in join order, from 0, never reused (`IbisIdentifier::id`); a member's
//! `satin_core::NodeId` is that number, on every member, so a newcomer needs no
//! agreement with the others about its number, and the numbers of the others do not
//! change when members leave. The driver's per-node tables are indexed by it; a number
//! that is not (or no longer) a member is a hole (not alive, no port, no identifier).
//! In a closed world nobody joins late, and the numbers are 0..n, the members' indices
//! in join order.
//!
//! A member that joins later: every member gets the registry's `Joined` event
//! ([`Change::Joined`], in the registry's order), connects a send port to the
//! newcomer's `satin` port on a short-lived thread (a newcomer still setting up must
//! not stop this member's stealing and serving), and when that is done
//! ([`Change::Connected`]) adds it to its tables and to the load balancer
//! (`Event::NodeJoined`). Messages the newcomer sends before that (it starts stealing
//! at once) wait, a bounded number, and are handled once the port is there. A member
//! that departs before it is connected to is forgotten (its port dropped).

use super::*;
use satin_core::ClusterId;
use std::collections::HashSet;

/// Highest node number (IPL member id) the driver accepts: its tables have one entry
/// per number up to the highest member.
pub(crate) const MAX_NODE: u64 = 1 << 16;

/// Messages held from members being connected to, at most (all of them together).
const MAX_HELD: usize = 4096;
/// Messages held from one member being connected to, at most. A member that joins
/// sends only a few before it gets answers (a steal request waits for its reply).
const MAX_HELD_PER_SENDER: usize = 64;
/// Payload bytes held, at most: all together, and from one member.
const MAX_HELD_BYTES: usize = 16 << 20;
const MAX_HELD_BYTES_PER_SENDER: usize = 1 << 20;
/// Steal requests that could not be held, remembered (their ids) per member to be
/// answered "no job" once connected, at most.
const MAX_UNANSWERED_PER_SENDER: usize = 64;

/// A change of membership, from the registry's event thread or a connecting thread.
pub(crate) enum Change {
    /// The registry says this member joined (also sent for every member present when
    /// this one joined: those are known and ignored).
    Joined(IbisIdentifier),
    /// The send port to a member that joined is connected (or could not be).
    Connected {
        ident: IbisIdentifier,
        port: Result<SendPort, String>,
    },
    /// The registry says this member (IPL member id) left gracefully.
    Left(u64),
}

/// Joins in progress.
#[derive(Default)]
pub(crate) struct Joins {
    /// Members (IPL member id) a send port is being connected to.
    connecting: HashSet<u64>,
    /// Members that departed: a late `Connected` for them is dropped.
    departed: HashSet<u64>,
    /// Messages from members this member has no port to yet, by sender, in order.
    held: HashMap<u64, Held>,
    held_count: usize,
    held_bytes: usize,
}

/// What one member that joins sent before this member connected to it.
pub(crate) struct Held {
    /// When the first of them came: dropped after the join timeout if the member
    /// never turns out to be a member this member connects to.
    since: Instant,
    messages: Vec<(Msg, Vec<u8>)>,
    bytes: usize,
    /// Ids of steal requests that could not be held (answered "no job" once
    /// connected, so the thief is not left waiting).
    unanswered: Vec<u64>,
}

impl Joins {
    /// Removes what member `id` sent before it was connected to.
    fn take_held(&mut self, id: u64) -> Option<Held> {
        let h = self.held.remove(&id)?;
        self.held_count -= h.messages.len();
        self.held_bytes -= h.bytes;
        Some(h)
    }

    /// Whether member `id` departed before this member connected to it.
    pub(super) fn has_departed(&self, id: u64) -> bool {
        self.departed.contains(&id)
    }
}

impl Driver {
    /// Whether node `n` is (or was) a member this member knew, not a hole.
    pub(super) fn was_member(&self, n: u32) -> bool {
        self.idents.get(n as usize).is_some_and(Option::is_some)
    }

    /// Reacts to a change of membership.
    pub(super) fn membership(&mut self, change: Change) -> Result<(), SatinError> {
        match change {
            Change::Joined(ident) => self.joined(ident),
            Change::Connected { ident, port } => self.connected(ident, port),
            Change::Left(member) => {
                self.forget_joining(member);
                if self.left_gracefully(member) {
                    return Ok(()); // its last messages may still be on the way
                }
                self.departed(member, false)?;
            }
        }
        Ok(())
    }

    /// A member departed: stop connecting to it, drop what it sent.
    pub(super) fn forget_joining(&mut self, member: u64) {
        self.joins.departed.insert(member);
        self.joins.connecting.remove(&member);
        self.joins.take_held(member);
    }

    /// Drops what members sent that did not turn out to be members this member
    /// connects to within the join timeout.
    pub(super) fn expire_held(&mut self) {
        if self.joins.held.is_empty() {
            return;
        }
        let bound = self.config.join_timeout;
        let stale: Vec<u64> = self
            .joins
            .held
            .iter()
            .filter(|(id, h)| !self.joins.connecting.contains(id) && h.since.elapsed() >= bound)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            tracing::debug!(node = id, "messages of a member that never joined: dropped");
            self.joins.take_held(id);
        }
    }

    fn joined(&mut self, ident: IbisIdentifier) {
        let id = ident.id().get();
        if id >= MAX_NODE {
            tracing::warn!(member = %ident, "a member joined with too high a number: not used");
            return;
        }
        if id == u64::from(self.me)
            || self.was_member(id as u32)
            || self.joins.departed.contains(&id)
            || self.joins.connecting.contains(&id)
        {
            return;
        }
        if self.phase == Phase::Ending && !self.is_master() {
            // The run ends here: no new victims or thieves. (A member that leaves
            // still connects: the newcomer must hear `Leaving` and get its answers.)
            return;
        }
        let t = match super::super::port_type() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot connect to a member that joined");
                return;
            }
        };
        self.joins.connecting.insert(id);
        let ibis = self.ibis.clone();
        let tx = self.tx.clone();
        let timeout = self.config.join_timeout;
        let spawned = std::thread::Builder::new()
            .name("satin-connect".into())
            .spawn(move || {
                let port = (|| {
                    let mut sp = ibis.create_send_port(&t, &format!("satin-to-{id}"))?;
                    sp.connect_to(&ident, super::super::PORT_NAME, timeout)?;
                    Ok::<_, ipl::IplError>(sp)
                })()
                .map_err(|e| e.to_string());
                let _ = tx.send(Input::Membership(Change::Connected { ident, port }));
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot connect to a member that joined");
            self.joins.connecting.remove(&id);
        }
    }

    fn connected(&mut self, ident: IbisIdentifier, port: Result<SendPort, String>) {
        let id = ident.id().get();
        if !self.joins.connecting.remove(&id) {
            return; // departed meanwhile: the port is dropped
        }
        let held = self.joins.take_held(id);
        let port = match port {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(member = %ident, error = %e,
                    "could not connect to a member that joined: not using it");
                self.joins.departed.insert(id);
                return;
            }
        };
        let n = id as usize;
        while self.members.len() <= n {
            let k = self.members.len() as u64;
            self.members.push((k, String::new(), String::new()));
            self.ports.push(None);
            self.alive.push(false);
            self.idents.push(None);
        }
        let cluster = self.cluster_number(ident.cluster());
        self.members[n] = (id, ident.name().to_string(), ident.cluster().to_string());
        self.ports[n] = Some(port);
        self.alive[n] = true;
        self.idents[n] = Some(ident);
        self.topology.insert(NodeId(n as u32), cluster);
        tracing::info!(member = %self.who(n as u32), "a member joined the run");
        self.adapt_joined(n as u32);
        let now = self.now();
        self.node.handle(Event::NodeJoined {
            node: NodeId(n as u32),
            cluster,
            now,
        });
        if self.is_master() && self.phase == Phase::Ending {
            // Joined after the root returned: it ends with the others.
            self.send(n as u32, Msg::Done, &[]);
        }
        if self.save {
            // The newcomer learns what this member holds (announced results, pending
            // orphans), so it can look them up too.
            self.saved.with(|r| r.node_joined(NodeId(n as u32)));
            self.recovery_actions();
        }
        self.joined_while_leaving(n as u32);
        if let Some(held) = held {
            for id in held.unanswered {
                self.requests_served += 1;
                self.send(n as u32, Msg::StealReply { id, job: None }, &[]);
            }
            for (msg, payload) in held.messages {
                self.message(n as u32, msg, payload);
            }
        }
    }

    /// This member's number of the cluster called `name` (cluster numbers are local
    /// to a member: only node numbers cross the wire).
    fn cluster_number(&self, name: &str) -> ClusterId {
        let mut highest = None;
        for (node, c) in self.topology.nodes() {
            if self
                .members
                .get(node.0 as usize)
                .is_some_and(|m| m.2 == name)
            {
                return c;
            }
            highest = highest.max(Some(c.0));
        }
        ClusterId(highest.map_or(0, |h| h + 1))
    }

    /// A message from a member this member has no port to yet (it joined, and sent
    /// before this member connected to it) is held (`None`) until the port is there;
    /// anything else is handed back to be handled now.
    pub(super) fn hold_early(
        &mut self,
        from: u32,
        msg: Msg,
        payload: Vec<u8>,
    ) -> Option<(Msg, Vec<u8>)> {
        let id = u64::from(from);
        if from == self.me
            || self.was_member(from)
            || id >= MAX_NODE
            || self.joins.departed.contains(&id)
        {
            return Some((msg, payload));
        }
        // Joining: being connected to, or its `Joined` event has not arrived yet (a
        // number above every member this member knows). Anything else (a hole: a
        // number that never was a member here) is dropped.
        if !self.joins.connecting.contains(&id) && (from as usize) < self.members.len() {
            return None;
        }
        let j = &mut self.joins;
        let h = j.held.entry(id).or_insert_with(|| Held {
            since: Instant::now(),
            messages: Vec::new(),
            bytes: 0,
            unanswered: Vec::new(),
        });
        if j.held_count >= MAX_HELD
            || h.messages.len() >= MAX_HELD_PER_SENDER
            || j.held_bytes.saturating_add(payload.len()) > MAX_HELD_BYTES
            || h.bytes.saturating_add(payload.len()) > MAX_HELD_BYTES_PER_SENDER
        {
            if let Msg::StealRequest { id: steal, .. } = msg {
                if h.unanswered.len() < MAX_UNANSWERED_PER_SENDER {
                    // Answered "no job" once connected: the thief must not wait
                    // forever for it.
                    h.unanswered.push(steal);
                    return None;
                }
            }
            tracing::warn!(
                node = from,
                "too many messages from a joining member: dropped"
            );
            return None;
        }
        j.held_count += 1;
        j.held_bytes += payload.len();
        h.bytes += payload.len();
        h.messages.push((msg, payload));
        None
    }
}
