//! Satin pools that lose members (issue 21) across hosts: four network-namespace hosts
//! (tests/common/hosts.rs), one `satin-app` member on each, the registry server on a
//! fifth host of its own (so that cutting a member's host never cuts the registry).
//! For nqueens, knapsack and fib, at random moments of a run (10 % to 90 % of a
//! crash-free run measured in the same test; the seed is printed, `SATIN_CRASH_SEED=N`
//! repeats a sequence):
//!
//! - one, and two, of the four members (never the master) killed with SIGKILL, ten
//!   runs each with the crash mid-run: the master reports the right answer and the
//!   survivors end by themselves with success;
//! - the master killed (five runs each): a new master is elected, restarts the root
//!   and reports the right answer with `restarted = true`;
//! - all four killed once a checkpoint exists, then started again: the run resumes;
//! - the network of a member other than the master cut (its port on the bridge down,
//!   its process running): the registry's heartbeats report it dead, the pool goes on
//!   and the master reports the right answer; the cut-off member notices that it lost
//!   its registry and ends by itself with an error.
//!
//! tests/satin_crash.rs runs the same kills on 127.0.0.1 (where hosts cannot be
//! made), and the cases that do not depend on the network (orphan reuse, the master
//! dying at the very end, checkpoints). Making hosts needs root
//! and `ip`: without them every test says so and passes, unless
//! `IBIS_REQUIRE_LAUNCHERS=1` (then it fails).

use std::time::Duration;

use ipl_registry::net::Heartbeat;

#[path = "../common/satin_pool.rs"]
mod satin_pool;
use satin_pool::Place;

#[path = "../common/satin_crash_runs.rs"]
mod satin_crash_runs;
use satin_crash_runs::{crash_runs, master_crash_runs, App, Hurt, FIB, KNAPSACK, NQUEENS};

/// Runs whose members' crash came mid-run, per test.
const RUNS: usize = 10;

/// Runs whose master crash came mid-run, per test.
const MASTER_RUNS: usize = 5;

/// Runs whose host cut came mid-run, per test (each takes the heartbeat timeout).
const CUT_RUNS: usize = 3;

/// Four hosts and the registry's, with heartbeats that notice a cut host within
/// seconds; `None` (the test passes) where this machine cannot make hosts, unless
/// [`satin_pool::hosts::REQUIRE`] asks for them.
fn on_hosts() -> Option<Place> {
    let beat = Heartbeat::new(Duration::from_millis(250), Duration::from_millis(2500))
        .expect("heartbeat settings");
    satin_pool::on_hosts(beat)
}

fn members_killed(app: &App, kills: usize) {
    let Some(place) = on_hosts() else { return };
    let (orphans, reused) = crash_runs(place, app, kills, RUNS, Hurt::Kill);
    eprintln!(
        "{:?} on hosts, {kills} killed, {RUNS} runs: orphans kept {orphans}, results reused {reused}",
        app.args
    );
}

fn the_master_killed(app: &App) {
    let Some(place) = on_hosts() else { return };
    master_crash_runs(place, app, MASTER_RUNS);
}

fn a_member_cut_off(app: &App) {
    let Some(place) = on_hosts() else { return };
    crash_runs(place, app, 1, CUT_RUNS, Hurt::Cut);
}

#[test]
fn nqueens_survives_a_member_killed_on_its_host() {
    members_killed(&NQUEENS, 1);
}

#[test]
fn nqueens_survives_two_members_killed_on_their_hosts() {
    members_killed(&NQUEENS, 2);
}

#[test]
fn knapsack_survives_a_member_killed_on_its_host() {
    members_killed(&KNAPSACK, 1);
}

#[test]
fn knapsack_survives_two_members_killed_on_their_hosts() {
    members_killed(&KNAPSACK, 2);
}

#[test]
fn fib_survives_a_member_killed_on_its_host() {
    members_killed(&FIB, 1);
}

#[test]
fn fib_survives_two_members_killed_on_their_hosts() {
    members_killed(&FIB, 2);
}

#[test]
fn nqueens_survives_the_master_killed_on_its_host() {
    the_master_killed(&NQUEENS);
}

#[test]
fn knapsack_survives_the_master_killed_on_its_host() {
    the_master_killed(&KNAPSACK);
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

/// All four members killed mid-run once a checkpoint exists, then the run started again
/// on the same directory: it resumes (see
/// [`satin_crash_runs::killed_whole_resumes_from_checkpoints`]).
#[test]
fn a_run_killed_whole_on_its_hosts_resumes_from_its_checkpoints() {
    let Some(place) = on_hosts() else { return };
    satin_crash_runs::killed_whole_resumes_from_checkpoints(place);
}
