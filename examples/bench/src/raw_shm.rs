//! The raw limit: a plain spinning shared-memory ping-pong and stream between two
//! processes, with no protocol, no checks and no IPL, for benchmarks to compare
//! against (as a plain socket is the baseline of the tcp transport).
//!
//! One side creates a segment (a file in `/dev/shm`, unlinked as soon as the peer has
//! opened it), the other opens it by name; then they run matching halves:
//! [`latency`](RawShm::latency) against [`echo`](RawShm::echo) (a message of `size`
//! bytes is copied into the segment, the peer copies it back; both spin on a sequence
//! number), and [`stream`](RawShm::stream) against [`sink`](RawShm::sink) (the sender
//! copies each message into one of four slots, the receiver acknowledges it without
//! touching the bytes — the same work as the transport's one copy on send and zero
//! on receive). Every spin gives up after [`PATIENCE`] with a `TimedOut` error, so a
//! dead peer never hangs the caller.
//!
//! ```
//! use ibis_bench::raw_shm::RawShm;
//! # fn main() -> std::io::Result<()> {
//! let (a, name) = RawShm::create(4096)?;
//! let peer = std::thread::spawn(move || -> std::io::Result<()> {
//!     let b = RawShm::open(&name)?;
//!     b.echo(8, 100)?;
//!     b.sink(4096, 100)
//! });
//! a.wait_peer()?;
//! let rtt_us = a.latency(8, 100)?;
//! let mbps = a.stream(4096, 100)?;
//! peer.join().unwrap()?;
//! assert!(rtt_us > 0.0 && mbps > 0.0);
//! # Ok(()) }
//! ```

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::segment::{invalid_data, other, Segment};
use crate::spin;
pub use crate::spin::PATIENCE;

const MAGIC: u64 = u64::from_le_bytes(*b"IPLRAW\x00\x01");
const MAX_AT: usize = 8;
const OPENED: usize = 64;
const PING: usize = 128;
const PONG: usize = 192;
const HEAD: usize = 256;
const TAIL: usize = 320;
const DATA: usize = 4096;
/// Slots of the stream.
const SLOTS: usize = 4;
/// The prefix of segment names.
pub const PREFIX: &str = "/dev/shm/ipl-raw-";
/// What a spin that waits for the peer reports when it gives up.
const NO_ANSWER: &str = "raw shm peer did not answer";

/// One end of a raw shared-memory channel between two processes.
#[derive(Debug)]
pub struct RawShm {
    segment: Segment,
    max: usize,
}

fn segment_len(max: usize) -> usize {
    DATA + (2 + SLOTS) * max.div_ceil(64) * 64
}

impl RawShm {
    /// Creates a segment for messages of up to `max_message` bytes; returns it and the
    /// name to pass to [`open`](Self::open) in the other process.
    pub fn create(max_message: usize) -> io::Result<(RawShm, String)> {
        let max = max_message.max(1).div_ceil(64) * 64;
        let (segment, name) = Segment::create(PREFIX, segment_len(max), |region| {
            region
                .atomic(MAX_AT)
                .map_err(other)?
                .store(max as u64, Ordering::Relaxed);
            region
                .atomic(0)
                .map_err(other)?
                .store(MAGIC, Ordering::Release);
            Ok(())
        })?;
        Ok((RawShm { segment, max }, name))
    }

    /// Opens the segment named `name` (made by [`create`](Self::create) in another
    /// process) and tells the creator.
    pub fn open(name: &str) -> io::Result<RawShm> {
        let segment = Segment::open(PREFIX, name, DATA, "raw shm")?;
        let region = segment.region();
        if region.atomic(0).map_err(other)?.load(Ordering::Acquire) != MAGIC {
            return Err(invalid_data("not a raw shm segment"));
        }
        let max = region
            .atomic(MAX_AT)
            .map_err(other)?
            .load(Ordering::Relaxed) as usize;
        if max == 0 || segment_len(max) != region.size() {
            return Err(invalid_data("raw shm segment of the wrong size"));
        }
        segment.mark_opened(OPENED)?;
        Ok(RawShm { segment, max })
    }

    /// Creator: waits until the peer opened the segment, then unlinks its file (the
    /// mappings live on; nothing is left in `/dev/shm`).
    pub fn wait_peer(&self) -> io::Result<()> {
        self.segment.wait_peer(OPENED, NO_ANSWER)
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        self.segment
            .region()
            .atomic(off)
            .unwrap_or_else(|_| unreachable!("control words lie in the first page"))
    }

    fn check(&self, size: usize) -> io::Result<()> {
        if size > self.max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{size} bytes exceed the segment's {} per message", self.max),
            ));
        }
        Ok(())
    }

    fn write(&self, off: usize, data: &[u8]) -> io::Result<()> {
        self.segment.region().write(off, data).map_err(other)
    }

    /// Round trips of `size`-byte messages against a peer running [`echo`](Self::echo);
    /// returns the mean round trip in µs.
    pub fn latency(&self, size: usize, iters: usize) -> io::Result<f64> {
        self.check(size)?;
        let msg = vec![7u8; size];
        let (ping, pong) = (self.word(PING), self.word(PONG));
        let base = ping.load(Ordering::Relaxed);
        let t0 = Instant::now();
        for i in 1..=iters as u64 {
            self.write(DATA, &msg)?;
            ping.store(base + i, Ordering::Release);
            spin::until(pong, |v| v == base + i, NO_ANSWER)?;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6 / iters.max(1) as f64)
    }

    /// The other half of [`latency`](Self::latency): copies each message back.
    pub fn echo(&self, size: usize, iters: usize) -> io::Result<()> {
        self.check(size)?;
        let mut buf = vec![0u8; size];
        let (ping, pong) = (self.word(PING), self.word(PONG));
        let base = pong.load(Ordering::Relaxed);
        for i in 1..=iters as u64 {
            spin::until(ping, |v| v == base + i, NO_ANSWER)?;
            self.segment.region().read(DATA, &mut buf).map_err(other)?;
            self.write(DATA + self.max, &buf)?;
            pong.store(base + i, Ordering::Release);
        }
        Ok(())
    }

    /// Streams `count` messages of `size` bytes to a peer running
    /// [`sink`](Self::sink); returns MB/s (10^6 bytes per second).
    pub fn stream(&self, size: usize, count: usize) -> io::Result<f64> {
        self.check(size)?;
        let msg = vec![7u8; size];
        let (head, tail) = (self.word(HEAD), self.word(TAIL));
        let base = head.load(Ordering::Relaxed);
        let t0 = Instant::now();
        for i in 0..count as u64 {
            spin::until(tail, |t| base + i - t < SLOTS as u64, NO_ANSWER)?;
            let slot = ((base + i) % SLOTS as u64) as usize;
            self.write(DATA + (2 + slot) * self.max, &msg)?;
            head.store(base + i + 1, Ordering::Release);
        }
        spin::until(tail, |t| t == base + count as u64, NO_ANSWER)?;
        Ok((size * count) as f64 / t0.elapsed().as_secs_f64() / 1e6)
    }

    /// The other half of [`stream`](Self::stream): acknowledges each message.
    pub fn sink(&self, size: usize, count: usize) -> io::Result<()> {
        self.check(size)?;
        let (head, tail) = (self.word(HEAD), self.word(TAIL));
        let base = tail.load(Ordering::Relaxed);
        for i in 1..=count as u64 {
            spin::until(head, |h| h >= base + i, NO_ANSWER)?;
            tail.store(base + i, Ordering::Release);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_refuses_what_is_not_a_raw_segment() {
        let e = RawShm::open("/dev/shm/something-else").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let path = format!("{PREFIX}test-{}", std::process::id());
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let e = RawShm::open(&path).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }

    #[test]
    fn oversized_messages_are_refused_and_the_file_is_gone_once_opened() {
        let (a, name) = RawShm::create(100).unwrap();
        let b = RawShm::open(&name).unwrap();
        a.wait_peer().unwrap();
        assert!(!std::path::Path::new(&name).exists());
        let e = b.echo(1000, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
