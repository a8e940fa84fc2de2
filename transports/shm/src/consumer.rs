//! The receiving side of a ring as a pure state machine: it turns the slot headers the
//! producer publishes into completions ("message on channel c at offset o, length l"),
//! checking every value the peer wrote.

use crate::layout::{ring_offset, slot_size, HeaderError, Kind, SlotHeader, HEADER_LEN};

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
    /// A slot reaches into ring space that was not granted (beyond the reclaimed tail
    /// plus the capacity, less the header the producer must keep free).
    #[error("slot at position {pos} of {slot} bytes is beyond the credits (tail {tail}, capacity {cap})")]
    Credits {
        /// Where.
        pos: u64,
        /// The slot's size.
        slot: u64,
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
    /// A slot's length crosses the end of the ring (or padding does not end there).
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

    /// The offset in the data area of the next slot's header.
    pub fn next_offset(&self) -> usize {
        ring_offset(self.read, self.cap) as usize
    }

    /// Decodes the header of the next slot (read from [`next_offset`](Self::next_offset)
    /// once, into local memory; its first word read last with acquire ordering) and
    /// consumes the slot; `tail` is what this side has reclaimed. `Ok(None)` when the
    /// header is still zero: nothing was published there yet.
    pub fn take(
        &mut self,
        raw: &[u8; HEADER_LEN],
        tail: u64,
    ) -> Result<Option<Completion>, RingError> {
        if raw[..8] == [0; 8] {
            return Ok(None);
        }
        let pos = self.read;
        let h = SlotHeader::decode(raw).map_err(|err| RingError::Header { pos, err })?;
        let off = ring_offset(pos, self.cap);
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
        if off + slot > self.cap {
            return Err(RingError::Overrun {
                pos,
                len: h.len,
                kind: h.kind,
            });
        }
        // The producer writes only into granted space, and keeps the header after each
        // slot free for zeroing.
        if tail > pos || pos - tail + slot + HEADER_LEN as u64 > self.cap {
            return Err(RingError::Credits {
                pos,
                slot,
                tail,
                cap: self.cap,
            });
        }
        self.read = pos + slot;
        Ok(Some(Completion {
            kind: h.kind,
            channel: h.channel,
            pos,
            offset: off as usize + HEADER_LEN,
            len: h.len as usize,
            slot,
        }))
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
        assert_eq!(
            c.take(&[0; HEADER_LEN], 0),
            Ok(None),
            "a zero header: nothing yet"
        );
        assert_eq!(c.read(), 0);
        let a = c.take(&hdr(20, Kind::Data, 7), 0).unwrap().unwrap();
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
        assert_eq!(c.next_offset(), 48);
    }

    #[test]
    fn padding_wraps_to_the_start() {
        let mut c = Consumer::new(CAP);
        c.read = CAP - 64;
        let tail = CAP - 64;
        let pad = c.take(&hdr(48, Kind::Pad, 0), tail).unwrap().unwrap();
        assert_eq!(pad.slot, 64);
        assert_eq!(c.next_offset(), 0);
        let d = c.take(&hdr(1, Kind::Data, 1), tail).unwrap().unwrap();
        assert_eq!((d.pos, d.offset, d.len), (CAP, 16, 1));
    }

    #[test]
    fn malformed_slots_are_rejected() {
        let c0 = Consumer::new(CAP);
        // A slot beyond the credits: into held space, or onto the header the producer
        // must keep free.
        let mut c = c0.clone();
        c.read = CAP - 64;
        assert!(matches!(
            c.take(&hdr(48, Kind::Data, 1), 0),
            Err(RingError::Credits { .. })
        ));
        assert_eq!(c.read(), CAP - 64, "nothing consumed on error");
        let mut c = c0.clone();
        c.read = CAP - 64;
        assert!(c.take(&hdr(48, Kind::Data, 1), 16).unwrap().is_some());
        // A tail ahead of what was read.
        assert!(matches!(
            c0.clone().take(&hdr(1, Kind::Data, 1), 64),
            Err(RingError::Credits { .. })
        ));
        // A huge length.
        assert!(matches!(
            c0.clone().take(&hdr(u32::MAX, Kind::Data, 1), 0),
            Err(RingError::Overrun { .. })
        ));
        // Padding that does not end at the end of the area.
        assert!(matches!(
            c0.clone().take(&hdr(32, Kind::Pad, 0), 0),
            Err(RingError::Overrun { .. })
        ));
        // A slot that crosses the end.
        let mut c = c0.clone();
        c.read = CAP - 32;
        assert!(matches!(
            c.take(&hdr(64, Kind::Data, 1), CAP - 32),
            Err(RingError::Overrun { .. })
        ));
        // Garbage kinds and reserved bytes.
        let mut h = [0u8; 16];
        h[0] = 1;
        assert!(matches!(
            c0.clone().take(&h, 0),
            Err(RingError::Header { .. })
        ));
        let mut h = hdr(0, Kind::Open, 1);
        h[7] = 9;
        assert!(matches!(
            c0.clone().take(&h, 0),
            Err(RingError::Header { .. })
        ));
    }
}
