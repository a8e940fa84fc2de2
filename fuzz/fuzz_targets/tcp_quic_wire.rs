//! The frame headers and the receive side (frames out of reads of any size) of the tcp
//! transport, and the stream headers and datagrams of the quic transport, on whatever
//! a peer sends.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.get(..ipl_transport_tcp::wire::HEADER_LEN) {
        let h: &[u8; ipl_transport_tcp::wire::HEADER_LEN] = h.try_into().expect("length");
        let _ = ipl_transport_tcp::wire::parse_header(h);
    }
    if let Some(h) = data.get(..ipl_transport_quic::wire::STREAM_HEADER_LEN) {
        let h: &[u8; ipl_transport_quic::wire::STREAM_HEADER_LEN] = h.try_into().expect("length");
        let _ = ipl_transport_quic::wire::StreamHeader::parse(h);
    }
    let _ = ipl_transport_quic::wire::parse_datagram(data);
    let _ = ipl_transport_tcp::fuzzing::frames(data);
});
