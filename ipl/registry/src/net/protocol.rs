//! The registry wire protocol (sans-IO): message types and framing.
//!
//! # Framing
//!
//! Every message is one *frame*: a `u32` little-endian body length followed by
//! the body, a [postcard](https://docs.rs/postcard) encoding of one message.
//! The length is checked against a maximum *before* anything is allocated
//! ([`MAX_FRAME`] after authentication, [`MAX_HANDSHAKE_FRAME`] before), so a
//! peer announcing a huge frame costs nothing but a closed connection.
//!
//! # Connection
//!
//! 1. client → server [`Hello`] (protocol version + the `ipl_auth` nonce);
//! 2. server → client [`Challenge`] (the responder's nonce and proof);
//! 3. client → server [`Finish`] (the initiator's proof);
//! 4. server → client [`Welcome`]: `Ok(`[`Liveness`]`)` (the heartbeat
//!    interval and timeout both ends use), or `Err(reason)` followed by a
//!    close.
//!
//! The handshake uses the single context [`AUTH_CONTEXT`]: a server has one
//! pool secret, shared by all pools it serves. A client that does not know it
//! fails at step 2 (the server's proof does not verify) and the server fails
//! at step 3, so neither side reveals anything to a stranger.
//!
//! After that the client sends [`ClientMsg`]s (requests with ids, pongs and
//! heartbeats) and the server sends [`ServerMsg`]s (responses with the
//! request's id, pushed events, removals, liveness pings and heartbeats) in
//! any interleaving. Each end answers the other's `Heartbeat` with a
//! `HeartbeatAck` at once (see [`heartbeat`](super::heartbeat)). Everything
//! the server pushes to a member because of a request is sent *before* that
//! request's response on the same connection.

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::core::{JoinRequest, PoolConfig, PoolStatus};
use crate::error::RegistryError;
use crate::event::{Event, Seq};
use crate::identifier::{IbisIdentifier, MemberId};

/// Version of this protocol, sent in [`Hello`]. A server refuses any other
/// version with a reason (version 2 added heartbeats; version 3 made the
/// [`Challenge`] refusal the enum [`Refusal`] instead of a string).
pub const PROTOCOL_VERSION: u32 = 3;

/// The `ipl_auth` context of the registry handshake.
pub const AUTH_CONTEXT: &[u8] = b"ipl-registry";

/// The largest frame body accepted after authentication (16 MiB).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// The largest frame body accepted during the handshake.
pub const MAX_HANDSHAKE_FRAME: usize = 4096;

/// Size of the frame header (the body length).
pub const HEADER_LEN: usize = 4;

/// Malformed input or a failed transfer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The peer announced a frame larger than allowed.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Announced body length.
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// The body is not a valid encoding of the expected message.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A message could not be encoded.
    #[error("could not encode message: {0}")]
    Encode(String),
    /// The peer closed the connection at a frame boundary.
    #[error("connection closed")]
    Closed,
    /// An I/O error (including a connection closed in the middle of a frame).
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// Whether this is a timeout of a socket with a read timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// Encodes `msg` as one complete frame (header + body).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; HEADER_LEN];
    out = postcard::to_extend(msg, out).map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = out.len() - HEADER_LEN;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME,
        });
    }
    let len = u32::try_from(len).map_err(|_| FrameError::TooLarge {
        len,
        max: MAX_FRAME,
    })?;
    out[..HEADER_LEN].copy_from_slice(&len.to_le_bytes());
    Ok(out)
}

/// Decodes a frame body; the whole body must be consumed.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    let (msg, rest) =
        postcard::take_from_bytes(body).map_err(|e| FrameError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(FrameError::Malformed(format!(
            "{} trailing bytes after the message",
            rest.len()
        )));
    }
    Ok(msg)
}

/// Checks a frame header against `max` and returns the body length.
pub fn body_len(header: [u8; HEADER_LEN], max: usize) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(len)
}

/// Reads one frame body (at most `max` bytes) from `r`.
///
/// End of stream before the first header byte is [`FrameError::Closed`].
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = body_len(header, max)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// Reads and decodes one message (body at most `max` bytes).
pub fn read_msg<T: DeserializeOwned>(r: &mut impl Read, max: usize) -> Result<T, FrameError> {
    decode(&read_frame(r, max)?)
}

/// Encodes and writes one message.
pub fn write_msg<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), FrameError> {
    w.write_all(&encode(msg)?)?;
    w.flush()?;
    Ok(())
}

/// Handshake step 1, client → server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The client's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The `ipl_auth` `Hello` (the initiator's nonce).
    pub nonce: [u8; ipl_auth::HELLO_LEN],
}

/// Handshake step 2, server → client: the `ipl_auth` challenge, or a refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    /// The responder's nonce and proof (`ipl_auth::CHALLENGE_LEN` bytes).
    pub challenge: Result<Vec<u8>, Refusal>,
}

/// Why the server will not run the handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// The server is at its bound of connections in the handshake: sent at once,
    /// before the client's hello is read, then the connection is closed. The client
    /// may retry.
    Busy {
        /// The connections in the handshake when this one came.
        in_progress: u32,
    },
    /// Anything else (e.g. an unsupported protocol version).
    Other(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Busy { in_progress } => {
                write!(f, "busy: {in_progress} handshakes in progress")
            }
            Refusal::Other(reason) => f.write_str(reason),
        }
    }
}

/// Handshake step 3, client → server: the initiator's proof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finish {
    /// The `ipl_auth` `Finish` message.
    pub proof: [u8; ipl_auth::FINISH_LEN],
}

/// Handshake step 4, server → client: accepted, or refused with a reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// `Ok` with the connection's heartbeat settings if the client proved the
    /// secret.
    pub result: Result<Liveness, String>,
}

/// The heartbeat settings of a connection, chosen by the server (see
/// [`Heartbeat`](super::Heartbeat), which validates them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Liveness {
    /// Milliseconds between heartbeats.
    pub interval_ms: u64,
    /// Milliseconds of silence after which the peer is given up.
    pub timeout_ms: u64,
}

/// A registry operation. Operations that act on behalf of a member name it;
/// the server only accepts members that joined over the same connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Join `pool` (created with `config` if new). Reply: [`Reply::Joined`].
    Join {
        /// Pool name.
        pool: String,
        /// Pool configuration.
        config: PoolConfig,
        /// The new member's description.
        request: JoinRequest,
    },
    /// `member` leaves gracefully. Reply: [`Reply::Done`].
    Leave {
        /// The member.
        member: IbisIdentifier,
    },
    /// `member`'s handle was dropped without leaving: declare it dead.
    /// Reply: [`Reply::Done`].
    Abandon {
        /// The member.
        member: IbisIdentifier,
    },
    /// Strict election. Reply: [`Reply::Winner`].
    Elect {
        /// The candidate.
        member: IbisIdentifier,
        /// Election name.
        election: String,
    },
    /// Current winner of an election. Reply: [`Reply::MaybeWinner`].
    ElectionResult {
        /// The asking member.
        member: IbisIdentifier,
        /// Election name.
        election: String,
    },
    /// Send a signal. Reply: [`Reply::Done`].
    Signal {
        /// The sender.
        member: IbisIdentifier,
        /// The signal text.
        signal: String,
        /// The receivers.
        targets: Vec<IbisIdentifier>,
    },
    /// Terminate the pool. Reply: [`Reply::Done`].
    Terminate {
        /// The terminating member.
        member: IbisIdentifier,
    },
    /// `member` suspects `suspect`: the server probes it. Reply: [`Reply::Done`]
    /// once the probe is decided.
    MaybeDead {
        /// The asking member.
        member: IbisIdentifier,
        /// The suspect.
        suspect: IbisIdentifier,
    },
    /// `member` declares `suspect` dead. Reply: [`Reply::Done`].
    AssumeDead {
        /// The asking member.
        member: IbisIdentifier,
        /// The suspect.
        suspect: IbisIdentifier,
    },
    /// The pool's current members. Reply: [`Reply::Members`].
    Members {
        /// The asking member.
        member: IbisIdentifier,
    },
    /// The pool's status. Reply: [`Reply::Status`].
    PoolStatus {
        /// The asking member.
        member: IbisIdentifier,
    },
}

/// The successful outcome of a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The new member's identity.
    Joined(IbisIdentifier),
    /// Done, nothing to return.
    Done,
    /// The election's winner.
    Winner(IbisIdentifier),
    /// The election's winner, if any.
    MaybeWinner(Option<IbisIdentifier>),
    /// Members in join order.
    Members(Vec<IbisIdentifier>),
    /// A pool status.
    Status(PoolStatus),
}

/// A message from a client to the server (after the handshake).
// Messages live only between decoding and handling: no point boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientMsg {
    /// A request; the response carries the same `id`.
    Request {
        /// Client-chosen id, echoed in the response.
        id: u64,
        /// The operation.
        op: Request,
    },
    /// Answer to [`ServerMsg::Ping`]: the member is alive.
    Pong {
        /// The ping's nonce.
        nonce: u64,
    },
    /// The client is alive; the server answers [`ServerMsg::HeartbeatAck`].
    Heartbeat {
        /// Echoed in the ack.
        seq: u64,
    },
    /// Answer to [`ServerMsg::Heartbeat`].
    HeartbeatAck {
        /// The heartbeat's `seq`.
        seq: u64,
    },
}

/// A message from the server to a client (after the handshake).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerMsg {
    /// The outcome of request `id`.
    Response {
        /// The request's id.
        id: u64,
        /// Its outcome.
        result: Result<Reply, RegistryError>,
    },
    /// New events of one member (in sequence order) and its pool's status
    /// after them.
    Events {
        /// Pool of the member.
        pool: String,
        /// The member the events are for.
        member: MemberId,
        /// The events, taken from the core's queue.
        events: Vec<(Seq, Event)>,
        /// The pool's status.
        status: PoolStatus,
    },
    /// The member is no longer in the pool (it left, or was declared dead).
    Gone {
        /// Pool of the member.
        pool: String,
        /// The member.
        member: MemberId,
    },
    /// Liveness probe of a member: answer with [`ClientMsg::Pong`] if it is
    /// alive.
    Ping {
        /// Echo this in the pong.
        nonce: u64,
        /// Pool of the probed member.
        pool: String,
        /// The probed member.
        member: MemberId,
    },
    /// The server is alive; the client answers [`ClientMsg::HeartbeatAck`].
    Heartbeat {
        /// Echoed in the ack.
        seq: u64,
    },
    /// Answer to [`ClientMsg::Heartbeat`].
    HeartbeatAck {
        /// The heartbeat's `seq`.
        seq: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let msg = ClientMsg::Request {
            id: 7,
            op: Request::Join {
                pool: "p".into(),
                config: PoolConfig::closed_world(3),
                request: JoinRequest::new("c").with_name("n"),
            },
        };
        let frame = encode(&msg).unwrap();
        let mut r = &frame[..];
        assert_eq!(read_msg::<ClientMsg>(&mut r, MAX_FRAME).unwrap(), msg);
        assert!(matches!(
            read_msg::<ClientMsg>(&mut r, MAX_FRAME),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn heartbeats_round_trip_and_unknown_variants_are_malformed() {
        for msg in [
            ClientMsg::Heartbeat { seq: 3 },
            ClientMsg::HeartbeatAck { seq: 4 },
        ] {
            assert_eq!(
                decode::<ClientMsg>(&encode(&msg).unwrap()[HEADER_LEN..]).unwrap(),
                msg
            );
        }
        for msg in [
            ServerMsg::Heartbeat { seq: 5 },
            ServerMsg::HeartbeatAck { seq: 6 },
        ] {
            assert_eq!(
                decode::<ServerMsg>(&encode(&msg).unwrap()[HEADER_LEN..]).unwrap(),
                msg
            );
        }
        // A variant index no version of the protocol defines.
        assert!(matches!(
            decode::<ClientMsg>(&[200, 1]),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(
            decode::<ServerMsg>(&[200, 1]),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn oversized_length_is_refused_before_allocation() {
        let mut r = &u32::MAX.to_le_bytes()[..];
        assert!(matches!(
            read_frame(&mut r, MAX_FRAME),
            Err(FrameError::TooLarge { .. })
        ));
        let mut r = &((MAX_HANDSHAKE_FRAME + 1) as u32).to_le_bytes()[..];
        assert!(matches!(
            read_frame(&mut r, MAX_HANDSHAKE_FRAME),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn garbage_is_a_typed_error() {
        let mut frame = 3u32.to_le_bytes().to_vec();
        frame.extend([0xff, 0xff, 0xff]);
        let mut r = &frame[..];
        assert!(matches!(
            read_msg::<ClientMsg>(&mut r, MAX_FRAME),
            Err(FrameError::Malformed(_))
        ));
        // Truncated body.
        let mut r = &[10u8, 0, 0, 0, 1, 2][..];
        assert!(matches!(
            read_frame(&mut r, MAX_FRAME),
            Err(FrameError::Io(_))
        ));
        // Trailing bytes.
        let mut body = postcard::to_allocvec(&ClientMsg::Pong { nonce: 1 }).unwrap();
        body.push(0);
        assert!(matches!(
            decode::<ClientMsg>(&body),
            Err(FrameError::Malformed(_))
        ));
    }
}
