//! The bytes on a connection: the handshake preamble and the frame header.
//!
//! Exposed so that tools and tests can speak the protocol by hand; the transport itself
//! is the only user that matters.

/// The first bytes a dialing endpoint sends, before the auth `Hello`: protocol name and
/// version. An accepting endpoint drops a connection that does not start with them.
pub const MAGIC: [u8; 8] = *b"IPLTCP\x00\x01";

/// The auth context prefix; the full context is `ipl-tcp/<pool>`.
pub const AUTH_CONTEXT_PREFIX: &str = "ipl-tcp/";

/// Size of a frame header: `u32` LE payload length, `u64` LE channel id, `u8` kind.
pub const HEADER_LEN: usize = 13;

/// A peer opened a channel (empty payload). The id carries [`OPENED_BY_SENDER`].
pub const KIND_OPEN: u8 = 1;
/// One message on a channel; the payload is the message.
pub const KIND_DATA: u8 = 2;
/// The sender closed the channel in an orderly way (empty payload).
pub const KIND_CLOSE: u8 = 3;

/// Bit 63 of a wire channel id: set when the sender of the frame is the side that opened
/// the channel. Each side numbers the channels it opens with ids below 2^63, so the two
/// directions of a connection never collide.
pub use ipl_transport_kit::channels::OPENED_BY_SENDER;

/// Encodes a frame header.
pub fn header(len: u32, channel: u64, kind: u8) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4..12].copy_from_slice(&channel.to_le_bytes());
    h[12] = kind;
    h
}

/// Decodes a frame header into (payload length, wire channel id, kind).
pub fn parse_header(h: &[u8; HEADER_LEN]) -> (u32, u64, u8) {
    let mut len = [0u8; 4];
    len.copy_from_slice(&h[..4]);
    let mut ch = [0u8; 8];
    ch.copy_from_slice(&h[4..12]);
    (u32::from_le_bytes(len), u64::from_le_bytes(ch), h[12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = header(0xdead_beef, OPENED_BY_SENDER | 7, KIND_DATA);
        assert_eq!(
            parse_header(&h),
            (0xdead_beef, OPENED_BY_SENDER | 7, KIND_DATA)
        );
        assert_eq!(&h[..4], &0xdead_beef_u32.to_le_bytes());
    }
}
