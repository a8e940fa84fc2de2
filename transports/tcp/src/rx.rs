//! A connection's receive side as a state machine: the bytes read so far and the frame
//! being assembled, turned into whole frames by whoever holds it: the connection's
//! reader thread, or a receiver that polls the transport itself (see the endpoint's
//! receiver-driven progress). It does no I/O: [`FrameReader::fill`] is handed the read
//! to use, and [`FrameReader::next`] takes frames out of what was read. Driven
//! directly by its tests.
//!
//! A frame is a [`HEADER_LEN`]-byte header (payload length, wire channel id, kind) and
//! its payload. Small frames are cut out of a staging buffer; a large payload is read
//! straight into its own vector once its header is in, growing only as its bytes
//! arrive (at most doubling what has been received, from [`READ_CHUNK`] on), so a peer
//! that announces a huge message and sends little costs little memory. Headers are
//! checked before anything is allocated for them: a data payload larger than
//! `max_message`, an OPEN or CLOSE with a payload, or an unknown kind is a protocol
//! error.

use std::io;

use crate::net::READ_CHUNK;
use crate::wire::{self, HEADER_LEN, KIND_CLOSE, KIND_DATA, KIND_OPEN};

/// One whole frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub kind: u8,
    pub wire_id: u64,
    /// The payload (empty for OPEN and CLOSE).
    pub data: Vec<u8>,
}

/// What one [`FrameReader::fill`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// This many bytes were read.
    Read(usize),
    /// Nothing to read now (a non-blocking read).
    Empty,
    /// The peer closed the stream.
    Eof,
}

/// A payload being read straight into its vector.
#[derive(Debug)]
struct Partial {
    kind: u8,
    wire_id: u64,
    len: usize,
    data: Vec<u8>,
    have: usize,
}

/// A connection's receive state.
#[derive(Debug)]
pub(crate) struct FrameReader {
    /// Staging buffer: bytes `lo..hi` are read and not yet taken.
    buf: Box<[u8]>,
    lo: usize,
    hi: usize,
    /// The frame whose payload is being read, once its header was taken.
    partial: Option<Partial>,
    max_message: u32,
    /// Bytes read from the stream so far (wrapping).
    received: u64,
}

/// A payload at least this much short is read straight into its vector instead of
/// through the staging buffer.
const DIRECT: usize = READ_CHUNK / 4;

impl FrameReader {
    /// An empty reader for data payloads of at most `max_message` bytes.
    pub(crate) fn new(max_message: u32) -> FrameReader {
        FrameReader {
            buf: vec![0u8; READ_CHUNK].into_boxed_slice(),
            lo: 0,
            hi: 0,
            partial: None,
            max_message,
            received: 0,
        }
    }

    /// Whether the stream is between frames (no byte of a next frame read yet): an
    /// end of stream here is a clean close.
    pub(crate) fn between_frames(&self) -> bool {
        self.partial.is_none() && self.lo == self.hi
    }

    /// Bytes read from the stream so far (wrapping): a reader compares two readings to
    /// learn whether bytes arrived in between.
    pub(crate) fn received(&self) -> u64 {
        self.received
    }

    /// Payload bytes of the frame being assembled that are not read yet (0 between
    /// frames, and before a header is whole).
    pub(crate) fn missing(&self) -> usize {
        self.partial
            .as_ref()
            .map_or(0, |p| (p.len - p.have).saturating_sub(self.hi - self.lo))
    }

    /// Whether [`next`](Self::next) can make progress without another read: a header,
    /// or the rest of the payload being assembled, is already buffered. Frames read
    /// with the socket's data do not show as the socket's readiness.
    pub(crate) fn has_buffered_frame(&self) -> bool {
        let buffered = self.hi - self.lo;
        match &self.partial {
            Some(p) => buffered > 0 && buffered >= p.len - p.have,
            None => buffered >= HEADER_LEN,
        }
    }

    /// The next whole frame from what was read, if there is one. `fresh` gives the
    /// vector a data payload is read into (a recycled one: its contents are
    /// overwritten). `Err` is a protocol error, after which the stream is unusable.
    pub(crate) fn next(
        &mut self,
        fresh: impl FnOnce() -> Vec<u8>,
    ) -> Result<Option<Frame>, String> {
        if self.partial.is_none() {
            if self.hi - self.lo < HEADER_LEN {
                return Ok(None);
            }
            let mut h = [0u8; HEADER_LEN];
            h.copy_from_slice(&self.buf[self.lo..self.lo + HEADER_LEN]);
            let (len, wire_id, kind) = wire::parse_header(&h);
            match kind {
                KIND_DATA if len > self.max_message => {
                    return Err(format!(
                        "message of {len} bytes exceeds max_message ({})",
                        self.max_message
                    ))
                }
                KIND_DATA => {}
                KIND_OPEN | KIND_CLOSE if len != 0 => {
                    return Err(format!(
                        "{} with a {len}-byte payload (id {wire_id:#x})",
                        if kind == KIND_OPEN { "OPEN" } else { "CLOSE" }
                    ))
                }
                KIND_OPEN | KIND_CLOSE => {}
                other => return Err(format!("unknown frame kind {other}")),
            }
            self.lo += HEADER_LEN;
            let data = if kind == KIND_DATA {
                fresh()
            } else {
                Vec::new()
            };
            self.partial = Some(Partial {
                kind,
                wire_id,
                len: len as usize,
                data,
                have: 0,
            });
        }
        let Some(p) = self.partial.as_mut() else {
            return Ok(None);
        };
        // What the staging buffer holds of the payload.
        let n = (p.len - p.have).min(self.hi - self.lo);
        if n > 0 {
            if p.data.len() < p.have + n {
                p.data.resize(p.have + n, 0);
            }
            p.data[p.have..p.have + n].copy_from_slice(&self.buf[self.lo..self.lo + n]);
            p.have += n;
            self.lo += n;
        }
        if self.lo == self.hi {
            (self.lo, self.hi) = (0, 0);
        }
        if p.have < p.len {
            return Ok(None);
        }
        let Some(mut p) = self.partial.take() else {
            return Ok(None);
        };
        p.data.truncate(p.len);
        Ok(Some(Frame {
            kind: p.kind,
            wire_id: p.wire_id,
            data: p.data,
        }))
    }

    /// Reads once with `read` (a non-blocking read returns `WouldBlock`): into the
    /// payload being assembled when much of it is missing, else into the staging
    /// buffer. Call [`next`](Self::next) until it gives `None` before each fill.
    pub(crate) fn fill(
        &mut self,
        mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<Fill> {
        let direct =
            matches!(&self.partial, Some(p) if p.len - p.have >= DIRECT) && self.lo == self.hi;
        if !direct && self.lo > 0 {
            self.buf.copy_within(self.lo..self.hi, 0);
            (self.lo, self.hi) = (0, self.hi - self.lo);
        }
        if !direct && self.hi == self.buf.len() {
            // Full: `next` was not called first; nothing read.
            return Ok(Fill::Read(0));
        }
        loop {
            let got = match self.partial.as_mut() {
                Some(p) if direct => {
                    let step = (p.len - p.have).min(p.have.max(READ_CHUNK));
                    if p.data.len() < p.have + step {
                        p.data.resize(p.have + step, 0);
                    }
                    let r = read(&mut p.data[p.have..p.have + step]);
                    if let Ok(n) = r {
                        p.have += n;
                    }
                    r
                }
                _ => {
                    let r = read(&mut self.buf[self.hi..]);
                    if let Ok(n) = r {
                        self.hi += n;
                    }
                    r
                }
            };
            return match got {
                Ok(0) => Ok(Fill::Eof),
                Ok(n) => {
                    self.received = self.received.wrapping_add(n as u64);
                    Ok(Fill::Read(n))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Fill::Empty),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{header, OPENED_BY_SENDER};

    fn frame(kind: u8, id: u64, data: &[u8]) -> Vec<u8> {
        let mut v = header(data.len() as u32, id, kind).to_vec();
        v.extend_from_slice(data);
        v
    }

    /// Feeds `stream` in reads of the given sizes (cycled; a 0 is a "would block"),
    /// collecting frames; returns them and whether the end came between frames.
    fn drive(stream: &[u8], sizes: &[usize], max: u32) -> Result<(Vec<Frame>, bool), String> {
        let mut r = FrameReader::new(max);
        let mut at = 0;
        let mut out = Vec::new();
        let mut k = 0;
        loop {
            while let Some(f) = r.next(Vec::new)? {
                out.push(f);
            }
            let size = sizes[k % sizes.len()];
            k += 1;
            let fill = r
                .fill(|b| {
                    if size == 0 {
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    let n = size.min(b.len()).min(stream.len() - at);
                    b[..n].copy_from_slice(&stream[at..at + n]);
                    at += n;
                    Ok(n)
                })
                .map_err(|e| e.to_string())?;
            if fill == Fill::Eof {
                return Ok((out, r.between_frames()));
            }
            assert!(k < 10_000_000, "no progress");
        }
    }

    fn sample() -> (Vec<u8>, Vec<Frame>) {
        let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let parts = [
            (KIND_OPEN, OPENED_BY_SENDER | 3, vec![]),
            (KIND_DATA, OPENED_BY_SENDER | 3, b"hello".to_vec()),
            (KIND_DATA, 9, vec![]),
            (KIND_DATA, 9, big),
            (KIND_DATA, 9, vec![1; READ_CHUNK + 13]),
            (KIND_CLOSE, 9, vec![]),
        ];
        let mut stream = Vec::new();
        let mut frames = Vec::new();
        for (kind, id, data) in parts {
            stream.extend(frame(kind, id, &data));
            frames.push(Frame {
                kind,
                wire_id: id,
                data,
            });
        }
        (stream, frames)
    }

    #[test]
    fn frames_come_out_whole_whatever_the_reads_cut() {
        let (stream, frames) = sample();
        for sizes in [
            &[1usize][..],
            &[13],
            &[7, 0, 3],
            &[HEADER_LEN + 4, 0],
            &[READ_CHUNK],
            &[usize::MAX],
            &[5, 100_000, 0, 1, 65_536],
        ] {
            let (got, clean) = drive(&stream, sizes, 1 << 30).unwrap();
            assert_eq!(got, frames, "reads {sizes:?}");
            assert!(clean, "reads {sizes:?}");
        }
    }

    #[test]
    fn a_buffered_frame_is_known_without_reading_again() {
        let mut r = FrameReader::new(1 << 20);
        let two = [frame(KIND_DATA, 1, b"ab"), frame(KIND_DATA, 1, b"cd")].concat();
        // Both frames and half a header come in one read.
        let mut input = two.clone();
        input.extend(&header(5, 1, KIND_DATA)[..6]);
        assert!(!r.has_buffered_frame());
        r.fill(|b| {
            b[..input.len()].copy_from_slice(&input);
            Ok(input.len())
        })
        .unwrap();
        assert!(r.has_buffered_frame());
        assert_eq!(r.next(Vec::new).unwrap().unwrap().data, b"ab");
        assert!(
            r.has_buffered_frame(),
            "the second frame waits in the buffer"
        );
        assert_eq!(r.next(Vec::new).unwrap().unwrap().data, b"cd");
        // Half a header: the socket must bring the rest.
        assert!(!r.has_buffered_frame());
        assert_eq!(r.next(Vec::new).unwrap(), None);
    }

    #[test]
    fn an_end_inside_a_frame_is_not_clean() {
        let (stream, _) = sample();
        // The first frame is a bare header (OPEN): cuts inside it, in the second one's
        // header and payload, and in the last one.
        for cut in [
            1,
            HEADER_LEN - 1,
            HEADER_LEN + 2,
            2 * HEADER_LEN + 3,
            stream.len() - 1,
        ] {
            let (_, clean) = drive(&stream[..cut], &[7, 1000], 1 << 30).unwrap();
            assert!(!clean, "cut at {cut}");
        }
        let (got, clean) = drive(&[], &[10], 1 << 30).unwrap();
        assert!(got.is_empty() && clean);
    }

    #[test]
    fn bad_headers_are_protocol_errors_before_any_allocation() {
        let mut big = header(u32::MAX, 1, KIND_DATA).to_vec();
        big.extend([0; 8]);
        let e = drive(&big, &[64], 1 << 20).unwrap_err();
        assert!(e.contains("exceeds max_message"), "{e}");
        let e = drive(&frame(KIND_OPEN, OPENED_BY_SENDER, b"x"), &[64], 1 << 20).unwrap_err();
        assert!(e.contains("OPEN with a 1-byte payload"), "{e}");
        let e = drive(&frame(KIND_CLOSE, 2, b"xy"), &[64], 1 << 20).unwrap_err();
        assert!(e.contains("CLOSE with a 2-byte payload"), "{e}");
        let e = drive(&frame(77, 2, b""), &[64], 1 << 20).unwrap_err();
        assert!(e.contains("unknown frame kind 77"), "{e}");
        // At the limit is fine.
        let (got, _) = drive(&frame(KIND_DATA, 2, &[5; 100]), &[64], 100).unwrap();
        assert_eq!(got[0].data, vec![5; 100]);
    }

    #[test]
    fn missing_and_received_follow_the_frame_being_assembled() {
        let mut r = FrameReader::new(1 << 20);
        assert_eq!((r.missing(), r.received()), (0, 0));
        let f = frame(KIND_DATA, 3, &vec![4u8; 200_000]);
        let mut at = 0;
        // The header and 100 bytes: 199,900 missing once the header is taken.
        // Feeds `n` bytes, in as many reads as the reader offers room for.
        let mut feed = |r: &mut FrameReader, mut n: usize| {
            while n > 0 {
                r.fill(|b| {
                    let k = n.min(b.len());
                    b[..k].copy_from_slice(&f[at..at + k]);
                    at += k;
                    n -= k;
                    Ok(k)
                })
                .unwrap();
            }
        };
        feed(&mut r, HEADER_LEN + 100);
        assert_eq!(r.received(), (HEADER_LEN + 100) as u64);
        assert_eq!(r.missing(), 0, "the header is not taken yet");
        assert_eq!(r.next(Vec::new).unwrap(), None);
        assert_eq!(r.missing(), 199_900);
        feed(&mut r, 150_000);
        assert_eq!(r.missing(), 49_900);
        assert_eq!(r.received(), (HEADER_LEN + 150_100) as u64);
        feed(&mut r, 49_900);
        assert_eq!(r.missing(), 0);
        let got = r.next(Vec::new).unwrap().expect("whole");
        assert_eq!(got.data.len(), 200_000);
        assert!(r.between_frames());
    }

    #[test]
    fn a_huge_announced_payload_grows_only_with_its_bytes() {
        let mut r = FrameReader::new(u32::MAX);
        let mut s = header(1 << 30, 1, KIND_DATA).to_vec();
        s.extend([9u8; 1000]);
        let mut fed = false;
        r.fill(|b| {
            let n = s.len().min(b.len());
            b[..n].copy_from_slice(&s[..n]);
            fed = true;
            Ok(n)
        })
        .unwrap();
        assert!(fed);
        assert_eq!(r.next(Vec::new).unwrap(), None);
        // The next read goes straight into the payload, at most READ_CHUNK of it.
        let mut offered = 0;
        r.fill(|b| {
            offered = b.len();
            Err(io::ErrorKind::WouldBlock.into())
        })
        .unwrap();
        assert!(offered <= READ_CHUNK, "{offered}");
        let cap = r.partial.as_ref().map(|p| p.data.len()).unwrap();
        assert!(cap <= 1000 + READ_CHUNK, "{cap}");
    }
}
