//! The bytes on a QUIC connection, sans I/O: the header that opens each channel's stream,
//! the length-prefixed framing of messages on a stream, and the datagram header.
//!
//! Exposed so that tests and tools can speak the protocol by hand.

/// ALPN protocol name negotiated in the TLS handshake; a peer speaking anything else is
/// refused by TLS.
pub const ALPN: &[u8] = b"ipl-quic/1";

/// First bytes of every channel stream.
pub const MAGIC: [u8; 4] = *b"IPLQ";
/// The stream protocol version.
pub const VERSION: u8 = 1;
/// Size of the stream header: magic, version, flags (`u8`), the opening endpoint's id
/// (`u64` LE).
pub const STREAM_HEADER_LEN: usize = 14;
/// Stream header flag: the channel carries its messages as datagrams when they fit.
pub const FLAG_UNRELIABLE: u8 = 1;
/// Size of a message's length prefix on a stream (`u32` LE).
pub const LEN_PREFIX: usize = 4;
/// A length prefix that is no length: the sending endpoint is shutting down (the channel
/// is lost, as when the connection breaks, but only after every message before it).
/// `max_message` is therefore at most `u32::MAX - 1`.
pub const GOODBYE: u32 = u32::MAX;
/// Size of a datagram's header: the channel's QUIC stream id (`u64` LE).
pub const DATAGRAM_HEADER_LEN: usize = 8;

/// Initial reservation for a message body; it grows only as its bytes arrive, so a peer
/// that announces a huge message and sends little costs little memory.
const INITIAL_BODY: usize = 64 << 10;

/// A malformed stream or datagram.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The stream does not start with [`MAGIC`].
    #[error("not an IPL quic channel (bad stream magic)")]
    BadMagic,
    /// The stream speaks another protocol version.
    #[error("stream protocol version {0}, this endpoint speaks {VERSION}")]
    BadVersion(u8),
    /// Unknown flag bits in the stream header.
    #[error("unknown stream header flags {0:#04x}")]
    BadFlags(u8),
    /// A message longer than the receiver accepts.
    #[error("message of {len} bytes exceeds max_message ({max})")]
    TooLarge {
        /// The announced length.
        len: u32,
        /// The receiver's limit.
        max: u32,
    },
    /// A datagram too short to hold its header.
    #[error("datagram of {0} bytes has no channel header")]
    ShortDatagram(usize),
}

/// The header that opens a channel's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamHeader {
    /// The id of the endpoint that opened the channel (pairs the connection with it).
    pub opener: u64,
    /// Whether the channel's messages travel as datagrams.
    pub unreliable: bool,
}

impl StreamHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; STREAM_HEADER_LEN] {
        let mut h = [0u8; STREAM_HEADER_LEN];
        h[..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[5] = if self.unreliable { FLAG_UNRELIABLE } else { 0 };
        h[6..].copy_from_slice(&self.opener.to_le_bytes());
        h
    }

    /// Parses and checks a header.
    pub fn parse(h: &[u8; STREAM_HEADER_LEN]) -> Result<Self, WireError> {
        if h[..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if h[4] != VERSION {
            return Err(WireError::BadVersion(h[4]));
        }
        if h[5] & !FLAG_UNRELIABLE != 0 {
            return Err(WireError::BadFlags(h[5]));
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&h[6..]);
        Ok(StreamHeader {
            opener: u64::from_le_bytes(id),
            unreliable: h[5] & FLAG_UNRELIABLE != 0,
        })
    }
}

impl StreamHeader {
    /// Parses the header at the start of the bytes a stream brought so far (the hello
    /// stream, a channel's stream): `None` while fewer than [`STREAM_HEADER_LEN`] bytes
    /// came; what follows the header is not looked at.
    pub fn parse_prefix(buf: &[u8]) -> Option<Result<Self, WireError>> {
        buf.first_chunk::<STREAM_HEADER_LEN>().map(Self::parse)
    }
}

/// The length prefix of a message of `len` bytes.
pub fn len_prefix(len: u32) -> [u8; LEN_PREFIX] {
    len.to_le_bytes()
}

/// A datagram carrying one message of the channel whose stream is `stream_id`.
pub fn encode_datagram(stream_id: u64, slices: &[&[u8]]) -> Vec<u8> {
    let total: usize = slices.iter().map(|s| s.len()).sum();
    let mut d = Vec::with_capacity(DATAGRAM_HEADER_LEN + total);
    d.extend_from_slice(&stream_id.to_le_bytes());
    for s in slices {
        d.extend_from_slice(s);
    }
    d
}

/// Splits a datagram into its channel's stream id and the message.
pub fn parse_datagram(d: &[u8]) -> Result<(u64, &[u8]), WireError> {
    if d.len() < DATAGRAM_HEADER_LEN {
        return Err(WireError::ShortDatagram(d.len()));
    }
    let (h, body) = d.split_at(DATAGRAM_HEADER_LEN);
    let mut id = [0u8; 8];
    id.copy_from_slice(h);
    Ok((u64::from_le_bytes(id), body))
}

/// Turns the bytes of a stream (after its header), in pieces of any size, into messages.
#[derive(Debug)]
pub struct Decoder {
    max: u32,
    prefix: [u8; LEN_PREFIX],
    prefix_len: usize,
    body: Option<(usize, Vec<u8>)>,
}

impl Decoder {
    /// A decoder that refuses messages longer than `max` bytes.
    pub fn new(max: u32) -> Self {
        Decoder {
            max,
            prefix: [0; LEN_PREFIX],
            prefix_len: 0,
            body: None,
        }
    }

    /// Whether the bytes pushed so far end exactly at a message boundary.
    pub fn at_boundary(&self) -> bool {
        self.prefix_len == 0 && self.body.is_none()
    }

    /// Feeds the next bytes of the stream. Each completed message is passed to `out` in
    /// a vector obtained from `fresh` (a recycled buffer, whose contents are discarded).
    /// Returns `true` when the stream said [`GOODBYE`] (what follows is ignored). An
    /// error leaves the decoder unusable: the stream is malformed.
    pub fn push(
        &mut self,
        mut data: &[u8],
        fresh: &mut impl FnMut() -> Vec<u8>,
        out: &mut impl FnMut(Vec<u8>),
    ) -> Result<bool, WireError> {
        while !data.is_empty() {
            if let Some((len, buf)) = &mut self.body {
                let n = (*len - buf.len()).min(data.len());
                buf.extend_from_slice(&data[..n]);
                data = &data[n..];
                if buf.len() == *len {
                    if let Some((_, buf)) = self.body.take() {
                        out(buf);
                    }
                }
                continue;
            }
            let n = (LEN_PREFIX - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
            self.prefix_len += n;
            data = &data[n..];
            if self.prefix_len < LEN_PREFIX {
                continue;
            }
            self.prefix_len = 0;
            let len = u32::from_le_bytes(self.prefix);
            if len == GOODBYE {
                return Ok(true);
            }
            if len > self.max {
                return Err(WireError::TooLarge { len, max: self.max });
            }
            let mut buf = fresh();
            buf.clear();
            if len == 0 {
                out(buf);
                continue;
            }
            let len = len as usize;
            buf.reserve(len.min(INITIAL_BODY.max(data.len())));
            self.body = Some((len, buf));
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(msg: &[u8]) -> Vec<u8> {
        let mut f = len_prefix(msg.len() as u32).to_vec();
        f.extend_from_slice(msg);
        f
    }

    fn decode_in_pieces(stream: &[u8], piece: usize, max: u32) -> Result<Vec<Vec<u8>>, WireError> {
        let mut d = Decoder::new(max);
        let mut out = Vec::new();
        for p in stream.chunks(piece) {
            d.push(p, &mut Vec::new, &mut |m| out.push(m))?;
        }
        assert!(d.at_boundary());
        Ok(out)
    }

    #[test]
    fn messages_survive_any_split() {
        let msgs: Vec<Vec<u8>> = vec![
            vec![],
            vec![7],
            (0..1000u32).map(|i| i as u8).collect(),
            vec![],
            (0..200_000u32).map(|i| (i * 7) as u8).collect(),
        ];
        let stream: Vec<u8> = msgs.iter().flat_map(|m| frame(m)).collect();
        for piece in [1, 2, 3, 5, 1000, 65536, stream.len()] {
            assert_eq!(decode_in_pieces(&stream, piece, 1 << 20).unwrap(), msgs);
        }
    }

    #[test]
    fn goodbye_ends_the_stream_after_the_messages_before_it() {
        let mut stream = frame(b"one");
        stream.extend_from_slice(&len_prefix(GOODBYE));
        stream.extend_from_slice(b"ignored");
        let mut d = Decoder::new(100);
        let mut got = Vec::new();
        let bye = d
            .push(&stream, &mut Vec::new, &mut |m| got.push(m))
            .unwrap();
        assert!(bye);
        assert_eq!(got, vec![b"one".to_vec()]);
    }

    #[test]
    fn oversized_length_is_an_error_before_any_allocation() {
        let mut d = Decoder::new(100);
        let mut fresh_calls = 0;
        let e = d
            .push(
                &(u32::MAX - 1).to_le_bytes(),
                &mut || {
                    fresh_calls += 1;
                    Vec::new()
                },
                &mut |_| panic!("no message"),
            )
            .unwrap_err();
        assert_eq!(
            e,
            WireError::TooLarge {
                len: u32::MAX - 1,
                max: 100
            }
        );
        assert_eq!(fresh_calls, 0);
        // A message at the limit passes.
        assert_eq!(
            decode_in_pieces(&frame(&[1; 100]), 7, 100).unwrap(),
            vec![vec![1; 100]]
        );
    }

    #[test]
    fn a_partial_message_is_not_at_a_boundary() {
        let mut d = Decoder::new(1000);
        let f = frame(&[1, 2, 3]);
        d.push(&f[..2], &mut Vec::new, &mut |_| panic!()).unwrap();
        assert!(!d.at_boundary());
        d.push(&f[2..5], &mut Vec::new, &mut |_| panic!()).unwrap();
        assert!(!d.at_boundary());
        let mut got = None;
        d.push(&f[5..], &mut Vec::new, &mut |m| got = Some(m))
            .unwrap();
        assert_eq!(got.unwrap(), vec![1, 2, 3]);
        assert!(d.at_boundary());
    }

    #[test]
    fn a_huge_announced_length_reserves_little() {
        let mut d = Decoder::new(u32::MAX - 1);
        d.push(&frame(&[])[..0], &mut Vec::new, &mut |_| {})
            .unwrap();
        d.push(
            &(1u32 << 31).to_le_bytes(),
            &mut Vec::new,
            &mut |_| panic!(),
        )
        .unwrap();
        d.push(&[9; 10], &mut Vec::new, &mut |_| panic!()).unwrap();
        let cap = d.body.as_ref().map(|(_, b)| b.capacity()).unwrap();
        assert!(cap <= INITIAL_BODY, "reserved {cap}");
    }

    #[test]
    fn stream_headers_and_datagrams() {
        let h = StreamHeader {
            opener: 0xfeed_beef,
            unreliable: true,
        };
        assert_eq!(StreamHeader::parse(&h.encode()).unwrap(), h);
        let mut longer = h.encode().to_vec();
        assert_eq!(
            StreamHeader::parse_prefix(&longer[..STREAM_HEADER_LEN - 1]),
            None
        );
        longer.extend_from_slice(b"next");
        assert_eq!(StreamHeader::parse_prefix(&longer), Some(Ok(h)));
        let mut bad = h.encode();
        bad[0] = b'X';
        assert_eq!(StreamHeader::parse(&bad), Err(WireError::BadMagic));
        let mut bad = h.encode();
        bad[4] = 9;
        assert_eq!(StreamHeader::parse(&bad), Err(WireError::BadVersion(9)));
        let mut bad = h.encode();
        bad[5] = 0x82;
        assert_eq!(StreamHeader::parse(&bad), Err(WireError::BadFlags(0x82)));
        let d = encode_datagram(42, &[b"ab", b"", b"c"]);
        assert_eq!(parse_datagram(&d).unwrap(), (42, &b"abc"[..]));
        assert_eq!(parse_datagram(&d[..7]), Err(WireError::ShortDatagram(7)));
    }
}
