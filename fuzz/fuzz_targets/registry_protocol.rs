//! The registry's wire messages, both directions: what a stranger or a broken member
//! sends the server, and what a fake server sends a member.
#![no_main]

use ipl_registry::net::protocol::{decode, ClientMsg, ServerMsg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode::<ClientMsg>(data);
    let _ = decode::<ServerMsg>(data);
});
