//! The IPL's frame decoder (data headers and control messages: connect, accept,
//! reject, credits, disconnect) on whatever a peer sends.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = ipl::protocol::decode(data);
    // A data header read by the fast path agrees with the full decoder.
    if let Some(seq) = ipl::protocol::data_seq(data) {
        assert!(matches!(decoded, Ok(ipl::protocol::Frame::Data { seq: s }) if s == seq));
    }
    // A control message that decodes encodes back to something that decodes alike.
    if let Ok(ipl::protocol::Frame::Control(c)) = decoded {
        let again = ipl::protocol::encode_control(&c);
        assert!(matches!(
            ipl::protocol::decode(&again),
            Ok(ipl::protocol::Frame::Control(_))
        ));
    }
});
