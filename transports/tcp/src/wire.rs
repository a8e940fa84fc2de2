//! The bytes on a connection: the handshake preamble and the frame header.
//!
//! Exposed so that tools and tests can speak the protocol by hand; the transport itself
//! is the only user that matters.

/// The first bytes a dialing endpoint sends, before the auth `Hello`: protocol name and
/// version. An accepting endpoint drops a connection that does not start with them.
pub const MAGIC: [u8; 8] = *b"IPLTCP\x00\x01";

/// The auth context prefix; the full context is `ipl-tcp/<pool>`.
pub const AUTH_CONTEXT_PREFIX: &str = "ipl-tcp/";

/// Size of the dialer's last handshake message: its auth `Finish`, then its endpoint id
/// and the id of the endpoint it wants (`u64` LE each).
pub const FINISH_MSG_LEN: usize = ipl_auth::FINISH_LEN + 16;

/// The dialer's last handshake message, as the accepting side reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishMsg {
    /// The auth `Finish` (the dialer's proof), checked by the responder.
    pub finish: [u8; ipl_auth::FINISH_LEN],
    /// The dialer's endpoint id.
    pub peer_id: u64,
    /// The endpoint the dialer wants (a stale address names another one).
    pub wanted: u64,
}

/// Encodes the dialer's last handshake message.
pub fn finish_msg(
    finish: &[u8; ipl_auth::FINISH_LEN],
    peer_id: u64,
    wanted: u64,
) -> [u8; FINISH_MSG_LEN] {
    let mut m = [0u8; FINISH_MSG_LEN];
    m[..ipl_auth::FINISH_LEN].copy_from_slice(finish);
    m[ipl_auth::FINISH_LEN..ipl_auth::FINISH_LEN + 8].copy_from_slice(&peer_id.to_le_bytes());
    m[ipl_auth::FINISH_LEN + 8..].copy_from_slice(&wanted.to_le_bytes());
    m
}

/// Splits the dialer's last handshake message into its parts (any bytes are some
/// message; the proof is checked by the caller).
pub fn parse_finish_msg(m: &[u8; FINISH_MSG_LEN]) -> FinishMsg {
    let mut finish = [0u8; ipl_auth::FINISH_LEN];
    finish.copy_from_slice(&m[..ipl_auth::FINISH_LEN]);
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&m[at..at + 8]);
        u64::from_le_bytes(w)
    };
    FinishMsg {
        finish,
        peer_id: word(ipl_auth::FINISH_LEN),
        wanted: word(ipl_auth::FINISH_LEN + 8),
    }
}

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

    #[test]
    fn finish_message_round_trips() {
        let m = finish_msg(&[7; ipl_auth::FINISH_LEN], 0x0102_0304_0506_0708, u64::MAX);
        assert_eq!(
            &m[ipl_auth::FINISH_LEN..ipl_auth::FINISH_LEN + 8],
            &0x0102_0304_0506_0708_u64.to_le_bytes()
        );
        assert_eq!(
            parse_finish_msg(&m),
            FinishMsg {
                finish: [7; ipl_auth::FINISH_LEN],
                peer_id: 0x0102_0304_0506_0708,
                wanted: u64::MAX
            }
        );
    }
}
