//! The raw limit of TCP: a plain socket (TCP_NODELAY, the kernel's own buffer sizes,
//! which its autotuning grows) read and written in place, either spinning on a
//! non-blocking socket, as MPI's receivers do, or blocking in the kernel.
//!
//! Spinning is the strongest the socket allows here: on this VM a blocked reader pays a
//! wake-up per message (11-12 us), and fixed buffer sizes (1, 4 or 16 MiB) streamed no
//! faster than the autotuned ones in a trial before this module was written. Every
//! spin has a deadline, so a peer that stalls ends the run with an error instead of
//! hanging it; a peer that closes is an error at once.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How a raw TCP side waits for its socket.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// A non-blocking socket, polled in a loop.
    Spin,
    /// A blocking socket: the thread sleeps in the kernel until data arrives.
    Block,
}

/// Spins this many times between two looks at the clock.
const CLOCK_EVERY: u32 = 1024;

/// A raw TCP side: the socket and how it waits.
pub struct RawTcp {
    sock: TcpStream,
    wait: Wait,
    /// How long one read or write may wait before the run fails.
    patience: Duration,
}

impl RawTcp {
    /// A raw side on `sock` (TCP_NODELAY is set), blocking until [`RawTcp::set_wait`].
    pub fn new(sock: TcpStream, patience: Duration) -> io::Result<RawTcp> {
        sock.set_nodelay(true)?;
        sock.set_nonblocking(false)?;
        // A blocking read or write waits at most the patience too.
        sock.set_read_timeout(Some(patience))?;
        sock.set_write_timeout(Some(patience))?;
        Ok(RawTcp {
            sock,
            wait: Wait::Block,
            patience,
        })
    }

    /// How this side waits from now on (both sides switch at the same point of their
    /// schedule; bytes in flight are not touched).
    pub fn set_wait(&mut self, wait: Wait) -> io::Result<()> {
        if wait != self.wait {
            self.sock.set_nonblocking(wait == Wait::Spin)?;
            self.wait = wait;
        }
        Ok(())
    }

    /// How this side waits now.
    pub fn wait(&self) -> Wait {
        self.wait
    }

    /// Fills `buf` from the socket.
    pub fn read_exact(&mut self, mut buf: &mut [u8]) -> io::Result<()> {
        let mut since = None;
        let mut spins = 0u32;
        while !buf.is_empty() {
            match self.sock.read(buf) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    since = None;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock && self.wait == Wait::Spin => {
                    self.spun(&mut since, &mut spins, "read")?;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes all of `buf` to the socket.
    pub fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        let mut since = None;
        let mut spins = 0u32;
        while !buf.is_empty() {
            match self.sock.write(buf) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    since = None;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock && self.wait == Wait::Spin => {
                    self.spun(&mut since, &mut spins, "write")?;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One spin of a read or write that found the socket not ready; fails once the
    /// wait since the last progress exceeds the patience.
    fn spun(&self, since: &mut Option<Instant>, spins: &mut u32, what: &str) -> io::Result<()> {
        std::hint::spin_loop();
        *spins = spins.wrapping_add(1);
        if spins.is_multiple_of(CLOCK_EVERY) {
            let t0 = *since.get_or_insert_with(Instant::now);
            if t0.elapsed() > self.patience {
                return Err(io::Error::new(
                    ErrorKind::TimedOut,
                    format!("raw tcp: the peer did not {what} for {:?}", self.patience),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(patience: Duration) -> (RawTcp, RawTcp) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (
            RawTcp::new(c, patience).unwrap(),
            RawTcp::new(s, patience).unwrap(),
        )
    }

    #[test]
    fn bytes_cross_in_both_modes_and_after_a_switch() {
        let (mut a, mut b) = pair(Duration::from_secs(30));
        for wait in [Wait::Spin, Wait::Block, Wait::Spin] {
            a.set_wait(wait).unwrap();
            b.set_wait(wait).unwrap();
            assert_eq!(a.wait(), wait);
            let msg: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
            let writer = std::thread::spawn(move || {
                a.write_all(&msg).unwrap();
                a
            });
            let mut got = vec![0u8; 100_000];
            b.read_exact(&mut got).unwrap();
            a = writer.join().unwrap();
            assert!(got.iter().enumerate().all(|(i, &x)| x == i as u8));
        }
    }

    #[test]
    fn a_closed_peer_is_an_error_and_a_silent_one_ends_at_the_patience() {
        for wait in [Wait::Spin, Wait::Block] {
            let (mut a, b) = pair(Duration::from_millis(200));
            a.set_wait(wait).unwrap();
            // Silent: nothing arrives, the read fails after the patience.
            let e = a.read_exact(&mut [0u8; 4]).unwrap_err();
            assert!(
                matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock),
                "{wait:?}: {e}"
            );
            drop(b);
            let e = a.read_exact(&mut [0u8; 4]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "{wait:?}: {e}");
        }
    }
}
