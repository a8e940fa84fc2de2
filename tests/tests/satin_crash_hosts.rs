//! Satin pools that lose members (issue 21) across hosts: four network-namespace hosts
//! (tests/common/hosts.rs), one `satin-app` member on each, the registry server on a
//! fifth host of its own (so that cutting a member's host never cuts the registry).
//! For nqueens and fib, at random moments of a run (10 % to 90 % of a crash-free run
//! measured in the same test; the seed is printed, `SATIN_CRASH_SEED=N` repeats a
//! sequence):
//!
//! - one member other than the master killed with SIGKILL: the master reports the
//!   right answer and the survivors end by themselves with success;
//! - the master killed: a new master is elected, restarts the root and reports the
//!   right answer with `restarted = true`;
//! - the network of a member other than the master cut (its port on the bridge down,
//!   its process running): the registry's heartbeats report it dead, the pool goes on
//!   and the master reports the right answer; the cut-off member notices that it lost
//!   its registry and ends by itself with an error.
//!
//! The repetitions with many moments are in tests/satin_crash.rs on 127.0.0.1; here a
//! few runs per case keep the file within about two minutes. Making hosts needs root
//! and `ip`: without them every test says so and passes, unless
//! `IBIS_REQUIRE_LAUNCHERS=1` (then it fails).

use std::time::Duration;

use ipl_registry::net::Heartbeat;

#[path = "../common/satin_pool.rs"]
mod satin_pool;
use satin_pool::Place;

#[path = "../common/satin_crash_runs.rs"]
mod satin_crash_runs;
use satin_crash_runs::{crash_runs, master_crash_runs, App, Hurt, FIB, NQUEENS};

/// Runs whose fault came mid-run, per test.
const RUNS: usize = 3;

/// Four hosts and the registry's, with heartbeats that notice a cut host within
/// seconds; `None` (the test passes) where this machine cannot make hosts, unless
/// [`satin_pool::hosts::REQUIRE`] asks for them.
fn on_hosts() -> Option<Place> {
    let beat = Heartbeat::new(Duration::from_millis(250), Duration::from_millis(2500))
        .expect("heartbeat settings");
    satin_pool::on_hosts(beat)
}

fn a_member_killed(app: &App) {
    let Some(place) = on_hosts() else { return };
    crash_runs(place, app, 1, RUNS, Hurt::Kill);
}

fn the_master_killed(app: &App) {
    let Some(place) = on_hosts() else { return };
    master_crash_runs(place, app, RUNS);
}

fn a_member_cut_off(app: &App) {
    let Some(place) = on_hosts() else { return };
    crash_runs(place, app, 1, RUNS, Hurt::Cut);
}

#[test]
fn nqueens_survives_a_member_killed_on_its_host() {
    a_member_killed(&NQUEENS);
}

#[test]
fn fib_survives_a_member_killed_on_its_host() {
    a_member_killed(&FIB);
}

#[test]
fn nqueens_survives_the_master_killed_on_its_host() {
    the_master_killed(&NQUEENS);
}

#[test]
fn fib_survives_the_master_killed_on_its_host() {
    the_master_killed(&FIB);
}

#[test]
fn nqueens_survives_a_member_host_cut_off() {
    a_member_cut_off(&NQUEENS);
}

#[test]
fn fib_survives_a_member_host_cut_off() {
    a_member_cut_off(&FIB);
}
