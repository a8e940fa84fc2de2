//! What a quic peer sends after the TLS handshake (which rustls and quinn-proto check,
//! ALPN included): its hello (a stream header naming its endpoint id on a
//! unidirectional stream), then per channel a stream header and length-prefixed
//! messages, in pieces of whatever size the network delivers. The first two input bytes
//! choose the piece size and the receiver's `max_message`; the rest is the stream.
//! Whatever the split, the hello and the messages come out the same, no message exceeds
//! `max_message`, and nothing is allocated by an announced length.
#![no_main]

use ipl_transport_quic::wire::{parse_datagram, Decoder, StreamHeader, WireError};
use libfuzzer_sys::fuzz_target;

/// Messages, then how the stream ended: an error, a goodbye, or still open (and whether
/// at a message boundary).
type Decoded = (Vec<Vec<u8>>, Result<bool, WireError>, bool);

fn decode(stream: &[u8], piece: usize, max: u32) -> Decoded {
    let mut d = Decoder::new(max);
    let mut out = Vec::new();
    for p in stream.chunks(piece) {
        match d.push(p, &mut Vec::new, &mut |m| out.push(m)) {
            Ok(false) => {}
            end => return (out, end, false),
        }
    }
    let boundary = d.at_boundary();
    (out, Ok(false), boundary)
}

fuzz_target!(|data: &[u8]| {
    let Some((&[piece, max], stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let piece = usize::from(piece) + 1;
    let max = u32::from(max) * 97;

    // The hello, gathered as its stream's bytes arrive: nothing until the header is
    // whole, then the same header whatever came after it.
    let mut got = Vec::new();
    let mut hello = None;
    for p in stream.chunks(piece) {
        got.extend_from_slice(p);
        if let Some(h) = StreamHeader::parse_prefix(&got) {
            hello = Some(h);
            break;
        }
    }
    assert_eq!(hello, StreamHeader::parse_prefix(stream));

    // A channel's stream: the header, then messages, split anyhow.
    let body = stream
        .get(ipl_transport_quic::wire::STREAM_HEADER_LEN..)
        .unwrap_or(&[]);
    let whole = decode(body, body.len().max(1), max);
    let pieces = decode(body, piece, max);
    assert_eq!(whole, pieces);
    assert!(whole.0.iter().all(|m| m.len() <= max as usize));

    // The same bytes as a datagram of an unreliable channel.
    if let Ok((_, msg)) = parse_datagram(stream) {
        assert_eq!(msg.len() + 8, stream.len());
    }
});
