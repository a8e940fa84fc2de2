//! Self-adaptivity of Satin pools (issue 21): under `ipl-run --malleable` with
//! `SATIN_ADAPT=1` the master's coordinator grows a pool whose members are all busy
//! and removes the least efficient member of a pool that is mostly idle. The answer
//! is right every time.
//!
//! Each test runs the pool through `ipl-run`'s library (`ipl_tools::launcher::launch`,
//! what the binary runs, control socket included) and reads the master's report
//! (`satin-app --report`): `adapt_added`, `adapt_removed`, `executed_by` (the jobs
//! stolen from others each member ran) and the result; which process was removed on
//! request comes from the launcher's outcome. The members' output (with the
//! coordinator's decisions at info level) goes to this process's output.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use ipl_tools::launcher::{launch, LaunchConfig, LaunchOutcome, ProcessEnd};

#[path = "../common/satin_pool.rs"]
mod satin_pool;
use satin_pool::scratch;

const APP: &str = env!("CARGO_BIN_EXE_satin-app");

/// A short monitoring period, so that a run of seconds has several.
const PERIOD_MS: &str = "300";

/// Runs `satin-app ARGS --workers 1 --report FILE` on a malleable pool of `n`
/// processes with adaptivity on and `env`; returns the outcome and the report.
fn run(n: usize, args: &[&str], env: &[(&str, &str)]) -> (LaunchOutcome, HashMap<String, String>) {
    let report = scratch("adapt-report");
    let mut argv: Vec<OsString> = args.iter().map(OsString::from).collect();
    argv.extend(["--workers".into(), "1".into(), "--report".into()]);
    argv.push(report.clone().into());
    let mut cfg = LaunchConfig::new(n, APP, argv);
    cfg.malleable = true;
    cfg.keep_going = true;
    cfg.max_processes = 8;
    // Every run ends within this (a hang fails the test).
    cfg.timeout = Some(Duration::from_secs(240));
    cfg.grace = Duration::from_secs(20);
    let mut vars = vec![
        ("IPL_TRANSPORT", "tcp"),
        ("RUST_LOG", "warn,satin::dist::driver::adapt=info"),
        ("SATIN_ADAPT", "1"),
        ("SATIN_ADAPT_PERIOD_MS", PERIOD_MS),
    ];
    vars.extend_from_slice(env);
    cfg.env = vars
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    let o = launch(&cfg).expect("launch the pool");
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    let kv = text
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (o, kv)
}

/// The jobs stolen from others each member ran, by IPL name (`executed_by`).
fn executed_by(kv: &HashMap<String, String>) -> HashMap<String, u64> {
    kv.get("executed_by")
        .map(String::as_str)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|e| e.split_once(':'))
        .filter_map(|(name, n)| Some((name.to_string(), n.parse().ok()?)))
        .collect()
}

fn count(kv: &HashMap<String, String>, key: &str) -> u64 {
    kv.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in the report: {kv:?}"))
}

/// Two members, one worker each, on `nqueens 14` (seconds of work in a debug build):
/// both are busy (efficiency well above 50 %), so the coordinator asks `ipl-run` for
/// a member (at most 3: one), which joins and runs stolen jobs.
///
/// Without adaptivity (checked with `SATIN_ADAPT=0`) no third process starts and
/// `adapt_added` is 0: the test fails.
#[test]
fn a_busy_pool_grows_and_the_new_member_takes_work() {
    let (o, kv) = run(2, &["nqueens", "14"], &[("SATIN_ADAPT_MAX_SIZE", "3")]);
    assert!(!o.timed_out, "timed out: {o:?} {kv:?}");
    assert_eq!(o.exit_code(), 0, "{o:?} {kv:?}");
    assert_eq!(
        kv.get("result").map(String::as_str),
        Some("365596"),
        "{kv:?}"
    );
    assert!(count(&kv, "adapt_added") >= 1, "{kv:?}");
    assert_eq!(o.ends.len(), 3, "a third process was started: {o:?}");
    let ran = executed_by(&kv);
    assert!(
        ran.get("member-2").is_some_and(|n| *n > 0),
        "the added member-2 ran stolen jobs: {kv:?}"
    );
}

/// Three members on `nqueens 14`, one of them slowed 20 times (the test hook
/// `SATIN_TEST_SLOWDOWN`: after each stolen job it runs, its worker sleeps 19 times
/// the job's time, counted as idle, and its benchmark is 20 times slower). The others
/// finish the rest of the work and then starve, waiting for its jobs: the efficiency
/// falls below 30 % and the coordinator removes the least efficient member (at
/// least 2 stay: one goes), the slowed one, which leaves gracefully (exit status 0)
/// and finishes its jobs first: the answer is right.
///
/// Without adaptivity (checked with `SATIN_ADAPT=0`) nobody is removed: the test
/// fails.
#[test]
fn the_least_efficient_member_of_a_starving_pool_is_removed() {
    // The starving phase needs the slowed member to hold stolen jobs while the others
    // run dry, which depends on when it steals: a run in which that phase was too
    // short for a decision removes nobody and is tried again (at most 3 runs); a run
    // that removes anybody else fails at once.
    for attempt in 1..=3 {
        if starving_pool_run(attempt) {
            return;
        }
    }
    panic!("in 3 runs the starving pool never removed its slowed member");
}

/// One run of [`the_least_efficient_member_of_a_starving_pool_is_removed`]: whether
/// the slowed member was removed (and only it).
fn starving_pool_run(attempt: usize) -> bool {
    let mark: PathBuf = scratch("slowed");
    let mark_s = mark.to_string_lossy().into_owned();
    let (o, kv) = run(
        3,
        &["nqueens", "14"],
        &[
            ("SATIN_ADAPT_MIN_SIZE", "2"),
            ("SATIN_ADAPT_MAX_SIZE", "3"),
            ("SATIN_TEST_SLOWDOWN", "20"),
            ("SATIN_TEST_SLOWDOWN_MARK", &mark_s),
        ],
    );
    let slowed = std::fs::read_to_string(&mark).unwrap_or_default();
    let _ = std::fs::remove_file(&mark);
    assert!(!o.timed_out, "timed out: {o:?} {kv:?}");
    assert_eq!(o.exit_code(), 0, "{o:?} {kv:?}");
    assert_eq!(
        kv.get("result").map(String::as_str),
        Some("365596"),
        "{kv:?}"
    );
    let slowed: usize = slowed
        .strip_prefix("member-")
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("the slowed member wrote {slowed:?}"));
    assert_ne!(
        kv.get("master").map(String::as_str),
        Some(format!("member-{slowed}").as_str()),
        "the master is never slowed"
    );
    let removed: Vec<usize> = o
        .ends
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, ProcessEnd::Removed(_)))
        .map(|(rank, _)| rank)
        .collect();
    if removed.is_empty() {
        eprintln!("run {attempt}: nobody was removed (the starving phase was too short): {kv:?}");
        assert_eq!(count(&kv, "adapt_removed"), 0, "{kv:?}");
        return false;
    }
    assert_eq!(
        removed,
        vec![slowed],
        "only the slowed member is removed: {o:?} {kv:?}"
    );
    assert!(
        matches!(o.ends[slowed], ProcessEnd::Removed(s) if s.success()),
        "it left gracefully: {o:?}"
    );
    assert_eq!(count(&kv, "adapt_removed"), 1, "{kv:?}");
    assert_eq!(count(&kv, "adapt_added"), 0, "{kv:?}");
    assert_eq!(
        count(&kv, "jobs_redone"),
        0,
        "nothing of it was redone: {kv:?}"
    );
    true
}
