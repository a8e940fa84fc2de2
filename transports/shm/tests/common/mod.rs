//! Shared helpers: an event log the tests wait on, and endpoints made through the
//! plugin ABI (as the IPL makes them).

#![allow(dead_code)]

#[allow(unused_imports)] // each test file uses part of them
pub use ipl_transport_kit::testing::{connect, pattern, EventLog as Log, Events, PATIENCE};
use std::sync::Arc;

use ipl_auth::PoolSecret;
use ipl_transport_abi::{Plugin, TransportInstance};

pub fn plugin() -> Plugin {
    Plugin::from_static(&ipl_transport_shm::PLUGIN).unwrap()
}

pub fn config(secret: &PoolSecret) -> String {
    ipl_transport_kit::testing::config(secret, "test")
}

/// A fresh endpoint with its own log.
pub fn endpoint(cfg: &str) -> (TransportInstance, Arc<Log>) {
    ipl_transport_kit::testing::endpoint(&plugin(), cfg)
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

/// Entries in /dev/shm (to check that nothing is left behind), except the segments of
/// the benchmarks' baselines (`ibis-bench`: `raw_shm`'s `ipl-raw-*` and `bare_ring`'s
/// `ipl-ring-*`), which a benchmark or its tests running at the same time create and
/// unlink.
pub fn dev_shm_entries() -> usize {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    !n.starts_with("ipl-raw-") && !n.starts_with("ipl-ring-")
                })
                .count()
        })
        .unwrap_or(0)
}
