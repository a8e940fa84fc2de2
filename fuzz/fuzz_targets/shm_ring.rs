//! The shm transport's rings as a hostile peer writes them: the peer can write any byte
//! of the shared segment at any time (headers, lengths, indices, flags), between our
//! reads; we take slots, copy payloads, hold and release slots in any order, and send
//! on the other ring by the credits its tail grants. Nothing panics, reads outside the
//! ring, allocates by a length the peer wrote, or holds more than the ring: the trust
//! model of `transports/shm/src/region.rs`, checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ipl_transport_shm::fuzzing::hostile_ring(data);
});
