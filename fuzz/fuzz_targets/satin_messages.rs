//! Satin's messages on whatever a member of the pool sends: the header and payload of a
//! message on a member's `satin` port (steal requests and replies, results, the end of
//! the run, statistics), as the receive upcall decodes it; and the payloads, a stolen
//! job rebuilt by its registered name and a result decoded into the job's output type.
//! Nothing panics, and no payload is longer than the message that carried it.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use satin::{Ctx, Job, JobRegistry};
use serde::{Deserialize, Serialize};

/// A job type with the shapes user jobs have: numbers, a vector, a string, options.
#[derive(Serialize, Deserialize)]
struct Work {
    depth: u32,
    data: Vec<u64>,
    label: String,
    children: Vec<Option<(i16, f64)>>,
}

#[satin::job]
impl Job for Work {
    type Output = Vec<(String, u64)>;
    fn run(self, _ctx: &mut Ctx) -> Self::Output {
        Vec::new()
    }
}

fn registry() -> &'static JobRegistry {
    static R: OnceLock<JobRegistry> = OnceLock::new();
    R.get_or_init(JobRegistry::from_inventory)
}

fuzz_target!(|data: &[u8]| {
    let port = satin::dist::port_type().expect("satin's port type");
    let mut m = ipl::ReadMessage::detached(port, data.to_vec());
    if let Some((_, payload)) = satin::dist::fuzzing::read_message(&mut m) {
        assert!(payload <= data.len());
    }
    let remote = <Work as Job>::REMOTE.expect("remote-capable");
    let _ = registry().from_wire(remote.name(), data);
    let _ = remote.decode_output(data);
});
