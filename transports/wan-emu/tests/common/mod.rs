//! Shared helpers: an event log that tests wait on, and wan-emu over inproc.
#![allow(dead_code)]

use std::sync::Arc;

use ipl_transport_abi::{Plugin, TransportInstance};
use ipl_transport_inproc::InProcTransport;
#[allow(unused_imports)] // each test file uses part of them
pub use ipl_transport_kit::testing::{EventLog as Log, Events, PATIENCE};
use ipl_transport_wan_emu::WanEmu;

/// A latency no test waits for: a message on such a link is still held when a test ends.
pub const FOREVER_MS: u32 = 3_600_000;

ipl_transport_abi::declare_plugin!(
    /// wan-emu over the in-process transport.
    pub static WAN_INPROC = WanEmu<InProcTransport>;
);

pub fn wan_inproc() -> Plugin {
    Plugin::from_static(&WAN_INPROC).unwrap()
}

/// A wan-emu-over-inproc endpoint in `cluster` with extra configuration lines.
pub fn endpoint(cluster: &str, extra: &str) -> (TransportInstance, Arc<Log>) {
    let log = Log::new();
    let t = wan_inproc()
        .create(&format!("{extra}\ncluster={cluster}\n"), log.clone())
        .unwrap();
    (t, log)
}

/// Cluster names unique to one test, so process-wide overrides do not leak between tests.
pub fn clusters(test: &str) -> (String, String) {
    (format!("{test}-a"), format!("{test}-b"))
}
