//! The shm transport's handshake on what a stranger sends over the endpoint's Unix
//! socket, on both sides: preamble and `Hello`, the last message (proof, ids, ring
//! capacity) and the segment header it announces; a `Challenge` and the answer. No
//! proof made without the pool's secret passes, and every message reads back as written.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ipl_transport_shm::fuzzing::handshake(data);
});
