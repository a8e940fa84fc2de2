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
//! use ipl_transport_shm::baseline::RawShm;
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
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::region::Region;

/// How long any spin waits for the peer before giving up.
pub const PATIENCE: Duration = Duration::from_secs(30);

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

/// One end of a raw shared-memory channel between two processes.
#[derive(Debug)]
pub struct RawShm {
    region: Region,
    max: usize,
    /// The file to unlink once the peer opened it (creator only).
    path: Option<PathBuf>,
}

fn segment_len(max: usize) -> usize {
    DATA + (2 + SLOTS) * max.div_ceil(64) * 64
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

impl RawShm {
    /// Creates a segment for messages of up to `max_message` bytes; returns it and the
    /// name to pass to [`open`](Self::open) in the other process.
    pub fn create(max_message: usize) -> io::Result<(RawShm, String)> {
        let max = max_message.max(1).div_ceil(64) * 64;
        let (path, file) = new_segment_file("/dev/shm/ipl-raw-")?;
        let size = segment_len(max);
        let setup = || -> io::Result<Region> {
            file.set_len(size as u64)?;
            let region = Region::map(&OwnedFd::from(file.try_clone()?), size)?;
            let oob = |e| io::Error::other(format!("{e}"));
            region
                .atomic(MAX_AT)
                .map_err(oob)?
                .store(max as u64, Ordering::Relaxed);
            region
                .atomic(0)
                .map_err(oob)?
                .store(MAGIC, Ordering::Release);
            Ok(region)
        };
        let region = setup().inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
        let name = path.to_string_lossy().into_owned();
        Ok((
            RawShm {
                region,
                max,
                path: Some(path),
            },
            name,
        ))
    }

    /// Opens the segment named `name` (made by [`create`](Self::create) in another
    /// process) and tells the creator.
    pub fn open(name: &str) -> io::Result<RawShm> {
        if !name.starts_with("/dev/shm/ipl-raw-") {
            return Err(bad("not a raw shm segment name"));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name)?;
        let size = file.metadata()?.len() as usize;
        if size < DATA {
            return Err(bad("raw shm segment too small"));
        }
        let region = Region::map(&OwnedFd::from(file), size)?;
        let oob = |e| io::Error::other(format!("{e}"));
        if region.atomic(0).map_err(oob)?.load(Ordering::Acquire) != MAGIC {
            return Err(bad("not a raw shm segment"));
        }
        let max = region.atomic(MAX_AT).map_err(oob)?.load(Ordering::Relaxed) as usize;
        if max == 0 || segment_len(max) != size {
            return Err(bad("raw shm segment of the wrong size"));
        }
        region
            .atomic(OPENED)
            .map_err(oob)?
            .store(1, Ordering::Release);
        Ok(RawShm {
            region,
            max,
            path: None,
        })
    }

    /// Creator: waits until the peer opened the segment, then unlinks its file (the
    /// mappings live on; nothing is left in `/dev/shm`).
    pub fn wait_peer(&self) -> io::Result<()> {
        let r = spin_until(self.word(OPENED), |v| v == 1);
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
        r
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        self.region
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
        self.region
            .write(off, data)
            .map_err(|e| io::Error::other(e.to_string()))
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
            spin_until(pong, |v| v == base + i)?;
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
            spin_until(ping, |v| v == base + i)?;
            self.region
                .read(DATA, &mut buf)
                .map_err(|e| io::Error::other(e.to_string()))?;
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
            spin_until(tail, |t| base + i - t < SLOTS as u64)?;
            let slot = ((base + i) % SLOTS as u64) as usize;
            self.write(DATA + (2 + slot) * self.max, &msg)?;
            head.store(base + i + 1, Ordering::Release);
        }
        spin_until(tail, |t| t == base + count as u64)?;
        Ok((size * count) as f64 / t0.elapsed().as_secs_f64() / 1e6)
    }

    /// The other half of [`stream`](Self::stream): acknowledges each message.
    pub fn sink(&self, size: usize, count: usize) -> io::Result<()> {
        self.check(size)?;
        let (head, tail) = (self.word(HEAD), self.word(TAIL));
        let base = tail.load(Ordering::Relaxed);
        for i in 1..=count as u64 {
            spin_until(head, |h| h >= base + i)?;
            tail.store(base + i, Ordering::Release);
        }
        Ok(())
    }
}

impl Drop for RawShm {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A new file for a benchmark segment, named `prefix` and 16 random hex digits, readable
/// and writable by this user only; it must not exist yet.
pub(crate) fn new_segment_file(prefix: &str) -> io::Result<(PathBuf, std::fs::File)> {
    let mut r = [0u8; 8];
    getrandom::getrandom(&mut r).map_err(|e| io::Error::other(e.to_string()))?;
    let path = PathBuf::from(format!("{prefix}{:016x}", u64::from_le_bytes(r)));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    Ok((path, file))
}

/// Spins until `ok(word)`; a `TimedOut` error after [`PATIENCE`].
fn spin_until(word: &AtomicU64, ok: impl Fn(u64) -> bool) -> io::Result<()> {
    let mut n = 0u32;
    let mut start = None;
    loop {
        if ok(word.load(Ordering::Acquire)) {
            return Ok(());
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(4096) {
            let s = *start.get_or_insert_with(Instant::now);
            if s.elapsed() > PATIENCE {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "raw shm peer did not answer",
                ));
            }
            if n.is_multiple_of(1 << 16) {
                // Let a peer on the same CPU run.
                std::thread::yield_now();
            }
        }
        std::hint::spin_loop();
    }
}
