//! Connection set-up over the endpoint's Unix socket: the pool-secret handshake of
//! [`ipl_auth`] in both directions, then the connecting side passes the shared segment
//! (a sealed memfd) with `SCM_RIGHTS` and both map it.
//!
//! ```text
//! C → A  MAGIC (8) ‖ Hello (32)
//! A → C  Challenge (64)
//! C → A  Finish (32) ‖ C's id (8) ‖ wanted id (8) ‖ ring capacity (8)   + memfd
//! A → C  A's id (8) ‖ status (1: 1 = mapped, 0 = not the wanted endpoint)
//! ```
//!
//! The connecting side sends the segment only after the accepting side has proven it
//! knows the secret; the accepting side checks the proof, the capacity, the seals and
//! the size of the segment before mapping it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipl_auth::{AuthError, Initiator, PoolSecret, Responder, CHALLENGE_LEN, FINISH_LEN, HELLO_LEN};
use ipl_transport_abi::TransportError;
use ipl_transport_kit::admission::{self, DeadlineIo};

use crate::layout::{check_segment, segment_header, segment_size, valid_capacity};
use crate::region::Region;
use crate::sys;

/// The first bytes a connecting endpoint sends: protocol name and version.
pub const MAGIC: [u8; 8] = *b"IPLSHM\x00\x01";

/// Default `shm.handshake_timeout_ms`: how long an accepted connection has to complete
/// the handshake, in all (a deadline for the whole handshake, not for each read).
pub const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);

/// Size of the connecting side's last message.
pub const THIRD_LEN: usize = FINISH_LEN + 24;
/// Size of the accepting side's answer.
pub const REPLY_LEN: usize = 9;

/// The connecting side's last message, as the accepting side reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Third {
    /// The auth `Finish` (the connecting side's proof).
    pub finish: [u8; FINISH_LEN],
    /// The connecting endpoint's id.
    pub peer_id: u64,
    /// The endpoint it wants (a stale address names another one).
    pub wanted: u64,
    /// The capacity of each ring of the segment that comes with the message.
    pub cap: u64,
}

impl Third {
    /// The message's bytes.
    pub fn encode(&self) -> [u8; THIRD_LEN] {
        let mut m = [0u8; THIRD_LEN];
        m[..FINISH_LEN].copy_from_slice(&self.finish);
        m[FINISH_LEN..FINISH_LEN + 8].copy_from_slice(&self.peer_id.to_le_bytes());
        m[FINISH_LEN + 8..FINISH_LEN + 16].copy_from_slice(&self.wanted.to_le_bytes());
        m[FINISH_LEN + 16..].copy_from_slice(&self.cap.to_le_bytes());
        m
    }

    /// Splits the message into its parts (any bytes are some message; the caller checks
    /// the proof and the capacity).
    pub fn parse(m: &[u8; THIRD_LEN]) -> Self {
        let mut finish = [0u8; FINISH_LEN];
        finish.copy_from_slice(&m[..FINISH_LEN]);
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&m[FINISH_LEN + 8 * i..FINISH_LEN + 8 * i + 8]);
            u64::from_le_bytes(b)
        };
        Third {
            finish,
            peer_id: word(0),
            wanted: word(1),
            cap: word(2),
        }
    }
}

/// The accepting side's answer: its id, and whether it mapped the segment (it does not
/// when the connecting side wanted another endpoint).
pub fn encode_reply(my_id: u64, mapped: bool) -> [u8; REPLY_LEN] {
    let mut reply = [0u8; REPLY_LEN];
    reply[..8].copy_from_slice(&my_id.to_le_bytes());
    reply[8] = u8::from(mapped);
    reply
}

/// Reads the accepting side's answer: `(its id, mapped)`; a status byte other than 1
/// is "not mapped".
pub fn parse_reply(reply: &[u8; REPLY_LEN]) -> (u64, bool) {
    let mut id = [0u8; 8];
    id.copy_from_slice(&reply[..8]);
    (u64::from_le_bytes(id), reply[8] == 1)
}

/// The accepting side's check of the ring capacity the connecting side announced: a
/// valid capacity no larger than this endpoint's own.
pub fn check_capacity(cap: u64, max_cap: usize) -> Result<usize, String> {
    match usize::try_from(cap) {
        Ok(c) if valid_capacity(cap) && c <= max_cap => Ok(c),
        _ => Err(format!("ring capacity {cap} refused (at most {max_cap})")),
    }
}

/// A connection that completed the handshake.
#[derive(Debug)]
pub struct Established {
    /// The socket (kept for wake-ups and to notice the peer's death).
    pub sock: UnixStream,
    /// The mapped segment.
    pub region: Arc<Region>,
    /// Capacity of each ring.
    pub cap: usize,
    /// The peer endpoint's id.
    pub peer_id: u64,
}

fn refused_secret() -> TransportError {
    TransportError::Refused("shm peer does not know this pool's secret (handshake refused)".into())
}

fn io_err(what: &str, e: std::io::Error) -> TransportError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            TransportError::Timeout(format!("shm {what}: {e}"))
        }
        _ => TransportError::Refused(format!("shm {what}: {e}")),
    }
}

/// The connecting side, on a connected socket.
pub fn initiate(
    mut sock: UnixStream,
    secret: &PoolSecret,
    context: &[u8],
    my_id: u64,
    wanted: u64,
    cap: usize,
    deadline: Instant,
) -> Result<Established, TransportError> {
    let timeout = |sock: &UnixStream| -> Result<(), TransportError> {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| TransportError::Timeout("shm handshake".into()))?;
        sock.set_read_timeout(Some(left))
            .and_then(|_| sock.set_write_timeout(Some(left)))
            .map_err(|e| TransportError::Other(format!("shm socket option: {e}")))
    };
    timeout(&sock)?;
    let (init, hello) = Initiator::start(secret, context)
        .map_err(|e| TransportError::Other(format!("shm handshake: {e}")))?;
    let mut first = [0u8; MAGIC.len() + HELLO_LEN];
    first[..MAGIC.len()].copy_from_slice(&MAGIC);
    first[MAGIC.len()..].copy_from_slice(&hello);
    sock.write_all(&first).map_err(|e| io_err("handshake", e))?;
    let mut challenge = [0u8; CHALLENGE_LEN];
    timeout(&sock)?;
    sock.read_exact(&mut challenge)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => TransportError::Refused(
                "shm peer closed the connection during the handshake".into(),
            ),
            _ => io_err("handshake", e),
        })?;
    let finish = init.on_challenge(&challenge).map_err(|e| match e {
        AuthError::BadProof => refused_secret(),
        e => TransportError::Refused(format!("shm handshake: {e}")),
    })?;
    // The peer proved it knows the secret: create and pass the segment.
    let size = segment_size(cap);
    let fd = sys::memfd("ipl-shm", size)
        .map_err(|e| TransportError::Unavailable(format!("shm: cannot create a segment: {e}")))?;
    let region = Region::map(&fd, size)
        .map_err(|e| TransportError::Unavailable(format!("shm: cannot map a segment: {e}")))?;
    region
        .write(0, &segment_header(cap as u64))
        .map_err(|e| TransportError::Other(format!("shm segment: {e}")))?;
    let third = Third {
        finish,
        peer_id: my_id,
        wanted,
        cap: cap as u64,
    }
    .encode();
    timeout(&sock)?;
    sys::send_with_fd(&sock, &third, &fd).map_err(|e| io_err("handshake", e))?;
    drop(fd);
    let mut reply = [0u8; REPLY_LEN];
    timeout(&sock)?;
    match sock.read_exact(&mut reply) {
        Ok(()) => {}
        // The responder hangs up when our proof is wrong.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(refused_secret()),
        Err(e) => return Err(io_err("handshake", e)),
    }
    let (peer_id, mapped) = parse_reply(&reply);
    if peer_id != wanted || !mapped {
        return Err(TransportError::Refused(format!(
            "no shm endpoint {wanted:016x} any more (found {peer_id:016x})"
        )));
    }
    sock.set_read_timeout(None)
        .and_then(|_| sock.set_write_timeout(None))
        .map_err(|e| TransportError::Other(format!("shm socket option: {e}")))?;
    Ok(Established {
        sock,
        region: Arc::new(region),
        cap,
        peer_id,
    })
}

/// The accepting side, on an accepted socket, all of it before `deadline`: every read
/// and write may use only the time left, so a peer that trickles its bytes is dropped
/// at the deadline. `Err` carries a description for the log; the caller drops the
/// connection.
pub fn respond(
    sock: UnixStream,
    secret: &PoolSecret,
    context: &[u8],
    my_id: u64,
    max_cap: usize,
    deadline: Instant,
) -> Result<Established, String> {
    let set_timeouts = |left: Duration| {
        sock.set_read_timeout(Some(left))?;
        sock.set_write_timeout(Some(left))
    };
    let arm = || admission::left(deadline).and_then(set_timeouts);
    let mut io = DeadlineIo::new(&sock, deadline, set_timeouts);
    let mut first = [0u8; MAGIC.len() + HELLO_LEN];
    io.read_exact(&mut first)
        .map_err(|e| format!("handshake: {e}"))?;
    if first[..MAGIC.len()] != MAGIC {
        return Err("not an IPL shm endpoint (bad preamble)".into());
    }
    let (resp, challenge) = Responder::on_hello(secret, context, &first[MAGIC.len()..])
        .map_err(|e| format!("handshake: {e}"))?;
    io.write_all(&challenge)
        .map_err(|e| format!("handshake: {e}"))?;
    let mut third = [0u8; THIRD_LEN];
    let fd = match sys::recv_with_fd(&sock, &mut third, arm) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err("it does not know this pool's secret (hung up)".into())
        }
        Err(e) => return Err(format!("handshake: {e}")),
    };
    let Third {
        finish,
        peer_id,
        wanted,
        cap,
    } = Third::parse(&third);
    if resp.on_finish(&finish).is_err() {
        return Err("it does not know this pool's secret".into());
    }
    if wanted != my_id {
        let _ = io.write_all(&encode_reply(my_id, false));
        return Err(format!(
            "peer wanted endpoint {wanted:016x}, a stale address"
        ));
    }
    let fd = fd.ok_or("no shared segment came with the handshake")?;
    let ring = check_capacity(cap, max_cap)?;
    let size = sys::sealed_size(&fd).map_err(|e| format!("shared segment: {e}"))?;
    // Map only a segment of exactly the expected size, sealed so that it cannot shrink
    // later: no access can then fault.
    if size != segment_size(ring) as u64 {
        return Err(format!(
            "shared segment of {size} bytes, expected {}",
            segment_size(ring)
        ));
    }
    let mut h = [0u8; 16];
    let region = Region::map(&fd, segment_size(ring))
        .map_err(|e| format!("cannot map the shared segment: {e}"))?;
    region
        .read(0, &mut h)
        .map_err(|e| format!("shared segment: {e}"))?;
    let cap = check_segment(&h, cap, size).map_err(|e| format!("shared segment: {e}"))?;
    io.write_all(&encode_reply(my_id, true))
        .map_err(|e| format!("handshake: {e}"))?;
    sock.set_read_timeout(None)
        .and_then(|_| sock.set_write_timeout(None))
        .map_err(|e| format!("socket option: {e}"))?;
    Ok(Established {
        sock,
        region: Arc::new(region),
        cap,
        peer_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let t = Third {
            finish: [3; FINISH_LEN],
            peer_id: 0x0102_0304_0506_0708,
            wanted: u64::MAX - 1,
            cap: 1 << 16,
        };
        let m = t.encode();
        assert_eq!(&m[FINISH_LEN + 16..], &(1u64 << 16).to_le_bytes());
        assert_eq!(Third::parse(&m), t);
        assert_eq!(parse_reply(&encode_reply(42, true)), (42, true));
        assert_eq!(parse_reply(&encode_reply(42, false)), (42, false));
        let mut r = encode_reply(7, true);
        r[8] = 2;
        assert_eq!(parse_reply(&r), (7, false), "only 1 means mapped");
    }

    #[test]
    fn capacities_are_checked_against_our_own() {
        assert_eq!(check_capacity(1 << 16, 1 << 20), Ok(1 << 16));
        assert!(check_capacity(1 << 21, 1 << 20).is_err(), "above ours");
        assert!(
            check_capacity((1 << 16) + 16, 1 << 20).is_err(),
            "not a power of two"
        );
        assert!(
            check_capacity(1 << 15, 1 << 20).is_err(),
            "below the minimum"
        );
        assert!(check_capacity(u64::MAX, usize::MAX).is_err());
    }
}
