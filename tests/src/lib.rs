//! Multi-process tests of ibis-rs. The binary `ipl-pool-check` is one member of a pool
//! started by the launcher (`ipl_tools::launcher`); it runs a named scenario that
//! exercises one IPL capability across processes, checks the outcome itself, and exits
//! 0 on success. The tests in `tests/` launch pools of it and assert on the exit codes.

#![forbid(unsafe_code)]

/// Scenarios `ipl-pool-check` knows.
pub const SCENARIOS: &[&str] = &[
    "rpc",
    "multicast",
    "manytoone",
    "election",
    "kill",
    "transports",
    "cut",
];

pub mod scenario;
