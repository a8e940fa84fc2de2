//! Shared helpers: an event log the tests wait on, and endpoints made through the
//! plugin ABI (as the IPL makes them).

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_transport_abi::{
    ChannelClosed, Plugin, ReceivedBuffer, TransportEvents, TransportInstance,
};

/// Bound on every wait: only a guard against hangs, never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Default, Debug)]
pub struct Events {
    pub opened: Vec<u64>,
    pub messages: Vec<(u64, Vec<u8>)>,
    /// Buffers kept unreleased (when the log keeps them).
    pub kept: Vec<(u64, ReceivedBuffer)>,
    pub closed: Vec<(u64, ChannelClosed)>,
}

#[derive(Default)]
pub struct Log {
    events: Mutex<Events>,
    changed: Condvar,
    /// Keep received buffers instead of releasing them at once.
    pub keep: AtomicBool,
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

    pub fn until(&self, what: &str, done: impl Fn(&Events) -> bool) {
        drop(self.wait(what, done));
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
        let keep = self.keep.load(Ordering::SeqCst);
        self.update(|e| {
            e.messages.push((ch, v));
            if keep {
                e.kept.push((ch, buf));
            }
        });
    }
    fn channel_closed(&self, ch: u64, why: ChannelClosed) {
        self.update(|e| e.closed.push((ch, why)));
    }
}

pub fn plugin() -> Plugin {
    Plugin::from_static(&ipl_transport_shm::PLUGIN).unwrap()
}

pub fn config(secret: &PoolSecret) -> String {
    format!("secret={}\npool=test", secret.to_hex())
}

/// A fresh endpoint with its own log.
pub fn endpoint(cfg: &str) -> (TransportInstance, Arc<Log>) {
    let log = Log::new();
    let t = plugin().create(cfg, log.clone()).unwrap();
    (t, log)
}

pub fn connect(from: &TransportInstance, to: &TransportInstance) -> u64 {
    from.connect(&to.local_address().unwrap(), PATIENCE)
        .unwrap()
}

/// Payload pattern for integrity checks.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The name of the mapping `p` points into, from `/proc/self/maps`.
pub fn mapping_of(p: *const u8) -> Option<String> {
    let p = p as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    for line in maps.lines() {
        let mut it = line.split_whitespace();
        let range = it.next()?;
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        if (a..b).contains(&p) {
            return Some(it.nth(4).unwrap_or("").to_string());
        }
    }
    None
}

/// Entries in /dev/shm (to check that nothing is left behind).
pub fn dev_shm_entries() -> usize {
    std::fs::read_dir("/dev/shm")
        .map(|d| d.count())
        .unwrap_or(0)
}
