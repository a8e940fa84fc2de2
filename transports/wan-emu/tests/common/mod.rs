//! Shared helpers: an event log that tests wait on, and wan-emu over inproc.
#![allow(dead_code)]

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ipl_transport_abi::{
    ChannelClosed, Plugin, ReceivedBuffer, TransportEvents, TransportInstance,
};
use ipl_transport_inproc::InProcTransport;
use ipl_transport_wan_emu::WanEmu;

/// Bound on every wait: a guard against hangs, never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A latency no test waits for: a message on such a link is still held when a test ends.
pub const FOREVER_MS: u32 = 3_600_000;

ipl_transport_abi::declare_plugin!(
    /// wan-emu over the in-process transport.
    pub static WAN_INPROC = WanEmu<InProcTransport>;
);

#[derive(Default, Debug)]
pub struct Events {
    pub opened: Vec<u64>,
    pub messages: Vec<(u64, Vec<u8>)>,
    pub closed: Vec<(u64, ChannelClosed)>,
}

#[derive(Default)]
pub struct Log {
    events: Mutex<Events>,
    changed: Condvar,
}

impl Log {
    pub fn new() -> Arc<Self> {
        Arc::new(Log::default())
    }

    pub fn events(&self) -> MutexGuard<'_, Events> {
        self.events.lock().unwrap()
    }

    /// Waits until `done` holds (panics after [`PATIENCE`], naming `what`).
    pub fn wait(&self, what: &str, done: impl Fn(&Events) -> bool) -> MutexGuard<'_, Events> {
        let end = Instant::now() + PATIENCE;
        let mut g = self.events.lock().unwrap();
        while !done(&g) {
            let left = end
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("timed out waiting for {what}: {g:?}"));
            g = self.changed.wait_timeout(g, left).unwrap().0;
        }
        g
    }

    fn update(&self, f: impl FnOnce(&mut Events)) {
        f(&mut self.events.lock().unwrap());
        self.changed.notify_all();
    }
}

impl TransportEvents for Log {
    fn channel_opened(&self, ch: u64) {
        self.update(|e| e.opened.push(ch));
    }
    fn message(&self, ch: u64, buf: ReceivedBuffer) {
        let v = buf.to_vec();
        self.update(|e| e.messages.push((ch, v)));
    }
    fn channel_closed(&self, ch: u64, why: ChannelClosed) {
        self.update(|e| e.closed.push((ch, why)));
    }
}

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
