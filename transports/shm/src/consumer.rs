//! The receiving side of a ring as a pure state machine: it turns the producer's
//! published head and the slot headers into completions ("message on channel c at
//! offset o, length l"), checking every value the peer wrote.

use crate::layout::{slot_size, HeaderError, Kind, SlotHeader, HEADER_LEN};

/// One arrived slot: the completion-queue entry of the RDMA-like model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// What the slot holds.
    pub kind: Kind,
    /// The channel (wire id).
    pub channel: u64,
    /// Position of the slot (its header) since the ring was created.
    pub pos: u64,
    /// Offset of the payload in the data area.
    pub offset: usize,
    /// Payload length.
    pub len: usize,
    /// Bytes the slot takes in the ring (header and padding included).
    pub slot: u64,
}

/// The peer broke the ring protocol; the connection cannot be trusted any more.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The published head is behind what was consumed or beyond the credits granted.
    #[error("producer head {head} is impossible (read {read}, tail {tail}, capacity {cap})")]
    BadHead {
        /// The head read.
        head: u64,
        /// What we consumed.
        read: u64,
        /// What we reclaimed.
        tail: u64,
        /// The ring capacity.
        cap: u64,
    },
    /// A slot header is malformed.
    #[error("malformed slot header at position {pos}: {err}")]
    Header {
        /// Where.
        pos: u64,
        /// What is wrong.
        err: HeaderError,
    },
    /// A slot's length does not fit what was published or crosses the end of the ring.
    #[error("slot at position {pos} of {len} bytes ({kind:?}) overruns the ring")]
    Overrun {
        /// Where.
        pos: u64,
        /// The length claimed.
        len: u32,
        /// The slot kind.
        kind: Kind,
    },
}

/// The consumer's state: how far it has consumed.
#[derive(Debug, Clone)]
pub struct Consumer {
    cap: u64,
    read: u64,
}

impl Consumer {
    /// A consumer of a fresh ring of `cap` bytes (a power of two).
    pub fn new(cap: u64) -> Self {
        Consumer { cap, read: 0 }
    }

    /// The position consumed so far.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// Checks a head read from the producer; `tail` is what this side has reclaimed.
    /// Returns whether a slot is waiting.
    pub fn check_head(&self, head: u64, tail: u64) -> Result<bool, RingError> {
        if head < self.read || head - tail > self.cap {
            return Err(RingError::BadHead {
                head,
                read: self.read,
                tail,
                cap: self.cap,
            });
        }
        Ok(head != self.read)
    }

    /// The offset in the data area of the next slot's header.
    pub fn next_offset(&self) -> usize {
        (self.read % self.cap) as usize
    }

    /// Decodes the header of the next slot (read from [`next_offset`](Self::next_offset)
    /// once, into local memory) against the checked `head`, and consumes the slot.
    pub fn take(&mut self, head: u64, raw: &[u8; HEADER_LEN]) -> Result<Completion, RingError> {
        let pos = self.read;
        let h = SlotHeader::decode(raw).map_err(|err| RingError::Header { pos, err })?;
        let off = pos % self.cap;
        let slot = if h.kind == Kind::Pad {
            // Padding fills exactly the rest of the data area.
            if u64::from(h.len) + HEADER_LEN as u64 != self.cap - off {
                return Err(RingError::Overrun {
                    pos,
                    len: h.len,
                    kind: h.kind,
                });
            }
            self.cap - off
        } else {
            slot_size(u64::from(h.len))
        };
        if off + slot > self.cap || slot > head - pos {
            return Err(RingError::Overrun {
                pos,
                len: h.len,
                kind: h.kind,
            });
        }
        self.read = pos + slot;
        Ok(Completion {
            kind: h.kind,
            channel: h.channel,
            pos,
            offset: off as usize + HEADER_LEN,
            len: h.len as usize,
            slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Kind;

    const CAP: u64 = 1 << 16;

    fn hdr(len: u32, kind: Kind, channel: u64) -> [u8; HEADER_LEN] {
        SlotHeader { len, kind, channel }.encode()
    }

    #[test]
    fn completions_follow_the_slots() {
        let mut c = Consumer::new(CAP);
        assert_eq!(c.check_head(0, 0), Ok(false));
        assert_eq!(c.check_head(48, 0), Ok(true));
        let a = c.take(48, &hdr(20, Kind::Data, 7)).unwrap();
        assert_eq!(
            a,
            Completion {
                kind: Kind::Data,
                channel: 7,
                pos: 0,
                offset: 16,
                len: 20,
                slot: 48
            }
        );
        assert_eq!(c.read(), 48);
        assert_eq!(c.check_head(48, 0), Ok(false));
    }

    #[test]
    fn padding_wraps_to_the_start() {
        let mut c = Consumer::new(CAP);
        c.read = CAP - 64;
        let head = CAP + 32;
        let pad = c.take(head, &hdr(48, Kind::Pad, 0)).unwrap();
        assert_eq!(pad.slot, 64);
        assert_eq!(c.next_offset(), 0);
        let d = c.take(head, &hdr(1, Kind::Data, 1)).unwrap();
        assert_eq!((d.pos, d.offset, d.len), (CAP, 16, 1));
    }

    #[test]
    fn malformed_slots_are_rejected() {
        let c0 = Consumer::new(CAP);
        // Head behind what was read, or beyond the credits.
        let mut c = c0.clone();
        c.read = 64;
        assert!(matches!(
            c.check_head(32, 0),
            Err(RingError::BadHead { .. })
        ));
        assert!(matches!(
            c0.check_head(CAP + 16, 0),
            Err(RingError::BadHead { .. })
        ));
        // A length beyond the published head.
        let mut c = c0.clone();
        assert!(matches!(
            c.take(32, &hdr(100, Kind::Data, 1)),
            Err(RingError::Overrun { .. })
        ));
        assert_eq!(c.read(), 0, "nothing consumed on error");
        // A huge length.
        assert!(matches!(
            c.take(CAP, &hdr(u32::MAX, Kind::Data, 1)),
            Err(RingError::Overrun { .. })
        ));
        // Padding that does not end at the end of the area.
        assert!(matches!(
            c.take(CAP, &hdr(32, Kind::Pad, 0)),
            Err(RingError::Overrun { .. })
        ));
        // A slot that crosses the end.
        let mut c = c0.clone();
        c.read = CAP - 32;
        assert!(matches!(
            c.take(CAP + 64, &hdr(64, Kind::Data, 1)),
            Err(RingError::Overrun { .. })
        ));
        // Garbage kinds and reserved bytes.
        assert!(matches!(
            c0.clone().take(64, &[0u8; 16]),
            Err(RingError::Header { .. })
        ));
        let mut h = hdr(0, Kind::Open, 1);
        h[7] = 9;
        assert!(matches!(
            c0.clone().take(64, &h),
            Err(RingError::Header { .. })
        ));
    }
}
