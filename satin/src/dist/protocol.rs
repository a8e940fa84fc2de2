//! The messages members of a Satin pool exchange.
//!
//! Every message on a member's `satin` receive port is one [`Header`] written as an
//! object, followed by `payload` raw bytes (a serialized job or result) when the
//! header announces them; the bytes are written and read without copying them into
//! the object encoding.

use satin_core::JobKey;
use serde::{Deserialize, Serialize};

use super::stats::MemberStats;

/// The header of every message: the sender's node number and what it says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Header {
    /// The sender (its `satin_core::NodeId`).
    pub from: u32,
    /// The message.
    pub msg: Msg,
}

/// One message of the Satin protocol.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Msg {
    /// "Give me work": the thief's request id and whether it waits for the answer.
    StealRequest {
        /// The thief's `satin_core::StealId`, echoed in the reply.
        id: u64,
        /// Whether the thief blocks for the reply (informational).
        synchronous: bool,
    },
    /// The answer to a steal request; the job's bytes follow as payload.
    StealReply {
        /// The request's id.
        id: u64,
        /// The stolen job, or `None` when the victim had nothing (remote-capable).
        job: Option<WireJob>,
    },
    /// The result of a stolen job, sent back to its owner; `Ok` bytes follow as
    /// payload.
    Result {
        /// The owner's id of the job (from [`WireJob::job`]).
        job: u64,
        /// `Ok(length of the serialized output)` or `Err(message)`.
        outcome: Result<u64, String>,
    },
    /// Owner to thief: the job it stole (the owner's id, from [`WireJob::job`]) was
    /// aborted by its spawner: stop it, its result is not wanted.
    Abort {
        /// The owner's id of the job.
        job: u64,
    },
    /// Master to all: the root job returned; stop stealing and send statistics.
    Done,
    /// Member to master: this member's statistics, in answer to `Done`.
    Stats(Box<MemberStats>),
    /// Master to all: everybody reported; leave the pool.
    Exit,
    /// Crash recovery: the sender holds the results of these keys, or still
    /// computes them (`true`: pending, an orphan). Sent when a member dies (the
    /// results kept for it, the orphans it left: the sender's whole account of the
    /// death, sent even when empty), when an orphan finishes, and for results
    /// restored from a checkpoint.
    Have {
        /// `(key, pending)` pairs.
        entries: Vec<(JobKey, bool)>,
        /// `Some(node)`: this is the sender's account of `node`'s death or leave.
        death: Option<u32>,
    },
    /// Crash recovery: "send me the result of `key`" (to a member that announced
    /// it), answered by [`Msg::Fetched`] with the same `id`; a pending key is
    /// answered when its job finishes.
    Fetch {
        /// The asker's id of the fetch.
        id: u64,
        /// The job's key.
        key: JobKey,
    },
    /// The answer to a [`Msg::Fetch`]: `Some(length)` of the result bytes that
    /// follow as payload, or `None` when the holder has no result for the key.
    Fetched {
        /// The fetch's id.
        id: u64,
        /// The result's length, if found.
        len: Option<u64>,
    },
    /// A graceful leave's hand-over: the leaver's saved results, for the receiver to
    /// keep and announce as its own. The results' bytes follow as payload, one after
    /// the other, each as long as its entry says.
    HandOver {
        /// `(key, length of its result)` pairs, in payload order.
        entries: Vec<(JobKey, u64)>,
    },
    /// A graceful leave (malleability, see `driver::leave`).
    Leave(LeaveMsg),
    /// Member to master, once per monitoring period when adaptivity is on
    /// (`driver::adapt`): the member's measurements. The master takes the node from
    /// the header and the cluster from its own table; `speed` is the member's raw
    /// benchmark speed (work units per second), made relative by the master.
    Sample(satin_core::adapt::Sample),
    /// A write to a shared object (see [`crate::shared`]), to every other member:
    /// the serialized operation follows as payload.
    SharedWrite {
        /// The object's name.
        object: String,
        /// Length of the serialized operation (the payload).
        len: u64,
    },
    /// A guard of a job stolen from the receiver does not hold: "send me your copies
    /// of the shared objects", answered by one [`Msg::SharedState`] per object.
    SharedFetch,
    /// A copy of a shared object (the answer to [`Msg::SharedFetch`]): its
    /// serialized state follows as payload.
    SharedState {
        /// The object's name.
        object: String,
        /// Length of the serialized state (the payload).
        len: u64,
    },
}

/// The messages of a graceful leave, in the order they are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum LeaveMsg {
    /// Leaver to all: "I am leaving": steal no more from me, but send me the results
    /// of the jobs you stole from me; answered by `Ack`.
    Leaving,
    /// Answer to `Leaving`: every steal reply this member sent the leaver before it is
    /// ahead of it on the (FIFO) link.
    Ack,
    /// Leaver to all, its last message: everything it owed was sent; forget it (no job
    /// of it is redone, it has none).
    Done,
    /// Leaver to all: it stops leaving (the master died and it became the new one):
    /// steal from it again.
    Stays,
}

/// A stolen job on the wire (its serialized parameters follow as payload).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WireJob {
    /// The owner's identifier of the job, echoed in the result.
    pub job: u64,
    /// The registered name of the job type.
    pub name: String,
    /// Length of the serialized job (the payload).
    pub len: u64,
    /// The job belongs to a redone subtree (it was spawned in redo mode after a
    /// crash): the thief runs it in redo mode too, looking up saved results.
    pub redone: bool,
}
