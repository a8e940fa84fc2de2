//! The bytes of a shared segment: where the two rings and their indices live, and the
//! format of a slot header. Pure data; no memory access.
//!
//! ```text
//! segment:  [ segment header (64 B) | ring 0 control (384 B) | ring 1 control (384 B) | pad ]
//!           [ ring 0 data (cap B) @ DATA_OFFSET ][ ring 1 data (cap B) @ DATA_OFFSET + cap ]
//! control:  tail @ +64 | rx_sleeping @ +128 | tx_waiting @ +192 | read @ +256
//!           | polled @ +320 (POLLED_SLOTS words)
//!           (u64 each, a cache line each: a word one side polls never shares a line
//!           with a word the other side writes for another purpose)
//! slot:     [ len u32 LE | kind u8 | 0 0 0 | channel u64 LE ][ payload, padded to 16 ]
//! ```
//!
//! **Publication.** A slot is published by its header's first word (`len | kind`,
//! never zero since no kind is zero), stored last; the receiver polls the header at
//! its read position, so a small message and the signal that it is there arrive in
//! one cache line. A header a receiver has not reached yet is zero: before a slot
//! (or padding) is published, the producer zeroes the header that follows it, which
//! the credits keep free (the producer always leaves [`HEADER_LEN`] bytes of the ring
//! unused for it), and a fresh ring is all zero.
//!
//! Ring 0 carries the connecting side's messages, ring 1 the accepting side's.
//! Positions (`head`, `tail`) count bytes since the ring was created and never wrap; the
//! offset in the data area is `position % cap`. Every slot starts at a multiple of
//! [`SLOT_ALIGN`] and never crosses the end of the data area: a slot that would is
//! preceded by a [`Kind::Pad`] slot that fills the rest of the area.

/// Magic number at the start of a segment: `"IPLSHM"` and layout version 4.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"IPLSHM\x00\x04");

/// Size of the segment header.
pub const SEGMENT_HEADER: usize = 64;
/// Size of one ring's control block.
pub const CONTROL_SIZE: usize = 384;
/// Where the first ring's data starts (a page boundary).
pub const DATA_OFFSET: usize = 4096;

/// Offset of the consumer's reclaimed position (the credit grant).
pub const TAIL: usize = 64;
/// Offset of the consumer's read position (how far it has taken slots; the sender
/// looks at it to decide whether a wake-up is needed). Not on the tail's line: a
/// sender that polls it would otherwise make every tail update a transfer between
/// cores.
pub const READ: usize = 256;
/// Offset of the channels the consumer's side polls for: up to [`POLLED_SLOTS`] wire
/// ids plus one (0: a free entry), written by the consumer's side when a thread
/// starts taking a channel's messages itself and cleared before it stops. A producer
/// need not wake the consumer's side for a data message of such a channel (see
/// `ring.rs`). Its own line: written rarely, read once per message.
pub const POLLED: usize = 320;
/// Entries of the polled channel table.
pub const POLLED_SLOTS: usize = 4;
/// The highest word of a control block (for bounds checks).
pub const CONTROL_LAST: usize = POLLED + 8 * (POLLED_SLOTS - 1);
const _: () = assert!(CONTROL_LAST + 8 <= CONTROL_SIZE);
const _: () = assert!(SEGMENT_HEADER + 2 * CONTROL_SIZE <= DATA_OFFSET);
/// Offset of the consumer's "I am going to sleep: wake me" flag.
pub const RX_SLEEPING: usize = 128;
/// Offset of the producer's "I wait for credits: wake me" flag.
pub const TX_WAITING: usize = 192;

/// Size of a slot header.
pub const HEADER_LEN: usize = 16;
/// Alignment (and granularity) of slots.
pub const SLOT_ALIGN: usize = 16;

/// Smallest ring capacity accepted.
pub const MIN_CAPACITY: usize = 64 << 10;
/// Largest ring capacity accepted.
pub const MAX_CAPACITY: usize = 1 << 30;

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Filler up to the end of the data area (the next slot starts at offset 0).
    Pad = 1,
    /// One whole message.
    Data = 2,
    /// The sender opened the channel.
    Open = 3,
    /// The sender closed the channel.
    Close = 4,
    /// A piece of a message too large for one slot; more pieces follow.
    Frag = 5,
    /// The last piece of a fragmented message.
    FragEnd = 6,
}

impl Kind {
    /// The kind for a byte from the ring, if it is one.
    pub fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Pad,
            2 => Kind::Data,
            3 => Kind::Open,
            4 => Kind::Close,
            5 => Kind::Frag,
            6 => Kind::FragEnd,
            _ => return None,
        })
    }
}

/// A decoded slot header. The raw bytes come from memory the peer writes, so
/// [`SlotHeader::decode`] checks what it can and the consumer checks the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotHeader {
    /// Payload length in bytes.
    pub len: u32,
    /// What the slot holds.
    pub kind: Kind,
    /// The channel (wire id) the slot belongs to.
    pub channel: u64,
}

/// Why bytes read from the ring are not a valid header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The kind byte is unknown.
    #[error("unknown slot kind {0}")]
    Kind(u8),
    /// Reserved bytes are not zero.
    #[error("reserved header bytes are not zero")]
    Reserved,
}

impl SlotHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&self.len.to_le_bytes());
        h[4] = self.kind as u8;
        h[8..].copy_from_slice(&self.channel.to_le_bytes());
        h
    }

    /// The header as the two words to store in the ring (so that its memory holds the
    /// bytes of [`encode`](Self::encode)); the first one publishes the slot.
    pub fn words(&self) -> [u64; 2] {
        let h = self.encode();
        let mut w = [[0u8; 8]; 2];
        w[0].copy_from_slice(&h[..8]);
        w[1].copy_from_slice(&h[8..]);
        w.map(u64::from_ne_bytes)
    }

    /// The bytes of a header loaded from the ring as two words (see [`words`](Self::words)).
    pub fn bytes_of_words(words: [u64; 2]) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&words[0].to_ne_bytes());
        h[8..].copy_from_slice(&words[1].to_ne_bytes());
        h
    }

    /// Decodes and checks a header.
    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<SlotHeader, HeaderError> {
        let mut len = [0u8; 4];
        len.copy_from_slice(&h[..4]);
        let kind = Kind::from_byte(h[4]).ok_or(HeaderError::Kind(h[4]))?;
        if h[5..8] != [0, 0, 0] {
            return Err(HeaderError::Reserved);
        }
        let mut ch = [0u8; 8];
        ch.copy_from_slice(&h[8..]);
        Ok(SlotHeader {
            len: u32::from_le_bytes(len),
            kind,
            channel: u64::from_le_bytes(ch),
        })
    }
}

/// The offset in a data area of `cap` bytes of position `pos`: `pos % cap` as a mask,
/// for the power-of-two capacity every ring has ([`valid_capacity`]; a 64-bit division
/// costs tens of cycles, and a message needs several offsets on each side). Whatever
/// nonzero `cap` is, the result is below it, so a wrong capacity can misplace a slot but
/// never reach outside the data area.
#[inline]
pub fn ring_offset(pos: u64, cap: u64) -> u64 {
    pos & cap.wrapping_sub(1)
}

/// The bytes a slot with a `len`-byte payload takes in the ring (header included).
pub fn slot_size(len: u64) -> u64 {
    HEADER_LEN as u64 + len.div_ceil(SLOT_ALIGN as u64) * SLOT_ALIGN as u64
}

/// Whether `cap` is an acceptable ring capacity (a power of two within bounds).
pub fn valid_capacity(cap: u64) -> bool {
    cap.is_power_of_two() && (MIN_CAPACITY as u64..=MAX_CAPACITY as u64).contains(&cap)
}

/// Size of a segment with two rings of `cap` bytes.
pub const fn segment_size(cap: usize) -> usize {
    DATA_OFFSET + 2 * cap
}

/// Offset of ring `ring`'s control block (ring 0 or 1).
pub fn control_offset(ring: usize) -> usize {
    SEGMENT_HEADER + ring * CONTROL_SIZE
}

/// Offset of ring `ring`'s data area.
pub fn data_offset(ring: usize, cap: usize) -> usize {
    DATA_OFFSET + ring * cap
}

/// Encodes the segment header: magic and ring capacity.
pub fn segment_header(cap: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
    h[8..].copy_from_slice(&cap.to_le_bytes());
    h
}

/// Checks a segment header against the capacity announced in the handshake and the
/// segment's actual size.
pub fn check_segment(h: &[u8; 16], announced_cap: u64, size: u64) -> Result<usize, String> {
    let mut m = [0u8; 8];
    m.copy_from_slice(&h[..8]);
    if u64::from_le_bytes(m) != SEGMENT_MAGIC {
        return Err("not an IPL shm segment (bad magic)".into());
    }
    m.copy_from_slice(&h[8..]);
    let cap = u64::from_le_bytes(m);
    if cap != announced_cap {
        return Err(format!(
            "segment says ring capacity {cap}, handshake said {announced_cap}"
        ));
    }
    if !valid_capacity(cap) {
        return Err(format!("ring capacity {cap} out of bounds"));
    }
    let cap = cap as usize;
    if size != segment_size(cap) as u64 {
        return Err(format!(
            "segment of {size} bytes, expected {}",
            segment_size(cap)
        ));
    }
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_offsets_are_positions_modulo_the_capacity() {
        for cap in [1u64 << 16, 1 << 23, 1 << 30] {
            for pos in [0, 1, cap - 1, cap, cap + 17, 5 * cap + 4096, u64::MAX] {
                assert_eq!(ring_offset(pos, cap), pos % cap, "pos {pos}, cap {cap}");
            }
        }
        // Not a ring capacity: still an offset inside the area.
        for pos in [0, 1, 3071, 3072, 4095, 4096, u64::MAX] {
            assert!(ring_offset(pos, 3 * 1024) < 3 * 1024, "pos {pos}");
        }
    }

    #[test]
    fn header_round_trips_and_rejects_garbage() {
        let h = SlotHeader {
            len: 0xdead_beef,
            kind: Kind::FragEnd,
            channel: 1 << 63 | 5,
        };
        assert_eq!(SlotHeader::decode(&h.encode()), Ok(h));
        assert_eq!(SlotHeader::bytes_of_words(h.words()), h.encode());
        assert_ne!(h.words()[0], 0, "a header's first word is never zero");
        let mut b = h.encode();
        b[4] = 0;
        assert_eq!(SlotHeader::decode(&b), Err(HeaderError::Kind(0)));
        b[4] = 7;
        assert_eq!(SlotHeader::decode(&b), Err(HeaderError::Kind(7)));
        let mut b = h.encode();
        b[6] = 1;
        assert_eq!(SlotHeader::decode(&b), Err(HeaderError::Reserved));
    }

    #[test]
    fn sizes_and_segments() {
        assert_eq!(slot_size(0), 16);
        assert_eq!(slot_size(1), 32);
        assert_eq!(slot_size(16), 32);
        assert_eq!(slot_size(17), 48);
        assert!(valid_capacity(1 << 16));
        assert!(!valid_capacity(1 << 15));
        assert!(!valid_capacity((1 << 16) + 16));
        assert!(!valid_capacity(1 << 31));
        let cap = 1u64 << 16;
        let size = segment_size(cap as usize) as u64;
        assert_eq!(
            check_segment(&segment_header(cap), cap, size),
            Ok(cap as usize)
        );
        assert!(check_segment(&segment_header(cap), cap * 2, size).is_err());
        assert!(check_segment(&segment_header(cap), cap, size - 1).is_err());
        assert!(check_segment(&[0; 16], cap, size).is_err());
        let big = 1u64 << 40;
        assert!(check_segment(&segment_header(big), big, segment_size(0) as u64).is_err());
    }
}
