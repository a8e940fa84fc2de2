//! Strangers that never finish a handshake, as a transport's tests play them: a slow
//! loris that trickles bytes, and a check that the endpoint closed a connection. The
//! caller sets the stream's read timeout: it is the gap between two bytes, and how long
//! [`peer_closed`] waits.

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// Whether the endpoint closed `s` (end of stream or reset) within the stream's read
/// timeout; `false` if nothing came. Data from the endpoint panics: a stranger was
/// answered.
pub fn peer_closed(s: &mut impl Read) -> bool {
    let mut b = [0u8; 128];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(n) => panic!("the endpoint answered a stranger ({n} bytes)"),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(_) => true,
    }
}

/// Sends `bytes` one at a time, waiting for the stream's read timeout (the gap) after
/// each, until the endpoint closes the connection. Returns how long that took, or
/// `None` if every byte went out and the connection is still open.
pub fn trickle(s: &mut (impl Read + Write), bytes: &[u8]) -> Option<Duration> {
    let start = Instant::now();
    for &b in bytes {
        if s.write_all(&[b]).is_err() || peer_closed(s) {
            return Some(start.elapsed());
        }
    }
    None
}
