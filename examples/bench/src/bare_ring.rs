//! The protocol floor: the transport's own rings between two processes, with nothing
//! above them.
//!
//! A [`BareRing`] drives the same [`RingTx`] and [`RingRx`] code the transport uses
//! (slot headers, credits, in-order reclamation, bounds checks) over a segment of the
//! same layout, but without an endpoint, channel table, plugin boundary or IPL, and
//! without the wake-up handshake: both sides spin, as the raw ping-pong of
//! [`raw_shm`](crate::raw_shm) does. A benchmark that runs it beside the raw
//! ping-pong and the IPL splits the IPL's ratio to raw into what the ring protocol
//! costs and what the layers above it cost.
//!
//! One side creates the segment (a file in `/dev/shm`, unlinked once the peer opened
//! it), the other opens it by name; ring 0 carries the creator's messages, ring 1 the
//! opener's. [`latency`](BareRing::latency) runs against [`echo`](BareRing::echo):
//! each message is copied into a slot (the transport's one copy on send), read out of
//! the peer's slot and released after the answer went out (as the IPL's echoing peer
//! does). Every spin gives up after [`PATIENCE`] with a `TimedOut` error.
//!
//! ```
//! use ibis_bench::bare_ring::BareRing;
//! # fn main() -> std::io::Result<()> {
//! let (mut a, name) = BareRing::create(64)?;
//! let peer = std::thread::spawn(move || -> std::io::Result<()> {
//!     let mut b = BareRing::open(&name)?;
//!     b.echo(8, 100)
//! });
//! a.wait_peer()?;
//! let rtt_us = a.latency(8, 100)?;
//! peer.join().unwrap()?;
//! assert!(rtt_us > 0.0);
//! # Ok(()) }
//! ```

use std::io;
use std::sync::Arc;
use std::time::Instant;

use ipl_transport_shm::bench_internals::{
    check_segment, segment_header, segment_size, Cursor, Kind, Region, RingPlace, RingRx, RingTx,
    DATA_OFFSET, HEADER_LEN, MIN_CAPACITY, SEGMENT_HEADER,
};

use crate::segment::{invalid_data as bad, other as oob, Segment};
use crate::spin::Spin;
pub use crate::spin::PATIENCE;

/// Where the opener says it opened the segment (inside the segment header, after the
/// magic and capacity words).
const OPENED: usize = 16;
const _: () = assert!(OPENED + 8 <= SEGMENT_HEADER);
/// The prefix of segment names.
pub const PREFIX: &str = "/dev/shm/ipl-ring-";
/// The largest ring capacity a bare ring uses (messages up to a quarter of it).
const MAX_CAP: usize = 64 << 20;

/// One end of a bare ring pair between two processes.
pub struct BareRing {
    tx: RingTx,
    rx: RingRx,
    segment: Segment,
    /// The last message received (copied out of its slot).
    buf: Vec<u8>,
}

impl std::fmt::Debug for BareRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BareRing")
            .field("segment", &self.segment)
            .finish()
    }
}

/// The ring capacity for messages of up to `max` bytes: a power of two that gives a
/// slot of `max` bytes (a slot may take a quarter of the ring).
fn capacity_for(max: usize) -> io::Result<usize> {
    let cap = (4 * (max + HEADER_LEN))
        .next_power_of_two()
        .max(MIN_CAPACITY);
    if cap > MAX_CAP {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a bare ring carries messages of at most {} bytes",
                MAX_CAP / 4 - 2 * HEADER_LEN
            ),
        ));
    }
    Ok(cap)
}

impl BareRing {
    /// Creates a segment for messages of up to `max_message` bytes; returns it and the
    /// name to pass to [`open`](Self::open) in the other process.
    pub fn create(max_message: usize) -> io::Result<(BareRing, String)> {
        let cap = capacity_for(max_message.max(1))?;
        let (segment, name) = Segment::create(PREFIX, segment_size(cap), |region| {
            region.write(0, &segment_header(cap as u64)).map_err(oob)
        })?;
        Ok((BareRing::on(segment, cap, 0)?, name))
    }

    /// Opens the segment named `name` (made by [`create`](Self::create) in another
    /// process) and tells the creator.
    pub fn open(name: &str) -> io::Result<BareRing> {
        let segment = Segment::open(PREFIX, name, DATA_OFFSET, "bare ring")?;
        let region = segment.region();
        let mut h = [0u8; 16];
        region.read(0, &mut h).map_err(oob)?;
        let cap = u64::from_le_bytes(h[8..].try_into().unwrap_or_default());
        let cap = check_segment(&h, cap, region.size() as u64).map_err(bad)?;
        let ring = BareRing::on(segment, cap, 1)?;
        ring.segment.mark_opened(OPENED)?;
        Ok(ring)
    }

    /// The end that sends on ring `out` and receives on the other.
    fn on(segment: Segment, cap: usize, out: usize) -> io::Result<BareRing> {
        let region: &Arc<Region> = segment.region();
        let tx = RingTx::new(Arc::clone(region), RingPlace::in_segment(out, cap)).map_err(oob)?;
        let rx = RingRx::new(
            Arc::clone(region),
            RingPlace::in_segment(1 - out, cap),
            // Both sides spin: nobody waits for a wake-up.
            Box::new(|| {}),
        )
        .map_err(oob)?;
        Ok(BareRing {
            tx,
            rx,
            segment,
            buf: Vec::new(),
        })
    }

    /// Creator: waits until the peer opened the segment, then unlinks its file (the
    /// mappings live on; nothing is left in `/dev/shm`).
    pub fn wait_peer(&self) -> io::Result<()> {
        self.segment
            .wait_peer(OPENED, "bare ring: the peer did not open the segment")
    }

    /// The largest message this pair carries.
    pub fn max_message(&self) -> usize {
        self.tx.max_slot_payload() as usize
    }

    /// Sends `msg` as one slot, spinning while the peer has not released space.
    pub fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        let len = u32::try_from(msg.len())
            .ok()
            .filter(|&l| l <= self.tx.max_slot_payload())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} bytes exceed the bare ring's {}",
                        msg.len(),
                        self.max_message()
                    ),
                )
            })?;
        let slices = [msg];
        let mut spin = Spin::new();
        loop {
            let mut cur = Cursor::new(&slices);
            match self.tx.try_write(Kind::Data, 0, &mut cur, len) {
                Ok(true) => return Ok(()),
                Ok(false) => spin.turn("bare ring: the peer released no space")?,
                Err(e) => return Err(bad(format!("bare ring: {e}"))),
            }
        }
    }

    /// Waits for the next message, copies it out and returns its slot's release
    /// ticket (release it with [`release`](Self::release)); the bytes are in
    /// [`received`](Self::received).
    fn take(&mut self) -> io::Result<u64> {
        let mut spin = Spin::new();
        loop {
            match self.rx.poll(|_, _| false) {
                Ok(Some(t)) => match (t.completion.kind, t.seq) {
                    (Kind::Data, Some(seq)) => {
                        self.buf.clear();
                        let copied = self.rx.copy_payload(&t.completion, &mut self.buf);
                        if let Err(e) = copied {
                            self.release(seq);
                            return Err(oob(e));
                        }
                        return Ok(seq);
                    }
                    (Kind::Pad, _) => {}
                    (kind, seq) => {
                        if let Some(seq) = seq {
                            self.release(seq);
                        }
                        return Err(bad(format!("bare ring: unexpected {kind:?} slot")));
                    }
                },
                Ok(None) => spin.turn("bare ring: the peer sent nothing")?,
                Err(e) => return Err(bad(format!("bare ring: {e}"))),
            }
        }
    }

    /// Gives a taken slot back to the ring (the credit the peer's sender sees).
    fn release(&self, seq: u64) {
        self.rx.shared().release(seq);
    }

    /// The last message received.
    pub fn received(&self) -> &[u8] {
        &self.buf
    }

    /// Sends `msg` and waits for the peer's answer (see [`received`](Self::received)).
    pub fn round_trip(&mut self, msg: &[u8]) -> io::Result<&[u8]> {
        self.send(msg)?;
        let seq = self.take()?;
        self.release(seq);
        Ok(&self.buf)
    }

    /// Warm-up round trips run before the `iters` timed ones (the peer's
    /// [`echo`](Self::echo) answers both).
    pub fn warm_up(iters: usize) -> usize {
        iters / 10 + 10
    }

    /// Round trips of `size`-byte messages against a peer running
    /// [`echo`](Self::echo); returns the mean round trip in µs of the `iters` after the
    /// [`warm_up`](Self::warm_up).
    pub fn latency(&mut self, size: usize, iters: usize) -> io::Result<f64> {
        let msg = vec![7u8; size];
        for _ in 0..Self::warm_up(iters) {
            self.round_trip(&msg)?;
        }
        let t0 = Instant::now();
        for _ in 0..iters {
            let n = self.round_trip(&msg)?.len();
            if n != size {
                return Err(bad(format!("bare ring: {n} bytes came back, sent {size}")));
            }
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6 / iters.max(1) as f64)
    }

    /// The other half of [`latency`](Self::latency): sends each message back, then
    /// releases its slot.
    pub fn echo(&mut self, size: usize, iters: usize) -> io::Result<()> {
        let mut out = Vec::with_capacity(size);
        for _ in 0..iters + Self::warm_up(iters) {
            let seq = self.take()?;
            out.clear();
            out.extend_from_slice(&self.buf);
            let sent = self.send(&out);
            self.release(seq);
            sent?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_go_both_ways_intact_and_the_file_is_gone_once_opened() {
        let (mut a, name) = BareRing::create(3000).unwrap();
        assert!(a.max_message() >= 3000);
        let peer_name = name.clone();
        let peer = std::thread::spawn(move || -> io::Result<Vec<Vec<u8>>> {
            let mut b = BareRing::open(&peer_name)?;
            let mut seen = Vec::new();
            for _ in 0..100 {
                let seq = b.take()?;
                seen.push(b.received().to_vec());
                let mut answer = b.received().to_vec();
                answer.reverse();
                b.send(&answer)?;
                b.release(seq);
            }
            Ok(seen)
        });
        a.wait_peer().unwrap();
        assert!(!std::path::Path::new(&name).exists(), "unlinked after open");
        let mut sent = Vec::new();
        // Sizes that wrap the 64 KiB ring twice (slots of up to 3 KiB), with padding.
        for i in 0..100usize {
            let msg: Vec<u8> = (0..(i * 61) % 3000 + 1).map(|j| (i + j) as u8).collect();
            let back = a.round_trip(&msg).unwrap().to_vec();
            let mut want = msg.clone();
            want.reverse();
            assert_eq!(back, want, "message {i}");
            sent.push(msg);
        }
        assert_eq!(peer.join().unwrap().unwrap(), sent);
    }

    #[test]
    fn latency_against_echo_counts_the_same_round_trips() {
        let (mut a, name) = BareRing::create(8).unwrap();
        let peer = std::thread::spawn(move || BareRing::open(&name)?.echo(8, 200));
        a.wait_peer().unwrap();
        assert!(a.latency(8, 200).unwrap() > 0.0);
        peer.join().unwrap().unwrap();
    }

    #[test]
    fn open_refuses_what_is_not_a_bare_ring() {
        let e = BareRing::open("/dev/shm/something-else").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // A file with the right name but no segment in it.
        let path = format!("{PREFIX}test-{}", std::process::id());
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let e = BareRing::open(&path).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("magic"), "{e}");
    }

    #[test]
    fn oversized_messages_are_refused() {
        assert!(BareRing::create(MAX_CAP).is_err());
        let (mut a, _name) = BareRing::create(100).unwrap();
        let too_big = vec![0u8; a.max_message() + 1];
        assert_eq!(
            a.send(&too_big).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
