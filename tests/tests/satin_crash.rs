//! Satin pools that lose members (issue 21), with real processes on 127.0.0.1:
//!
//! - one or two of four members (not the master) killed with SIGKILL at random moments
//!   of nqueens, knapsack and fib, each at least ten times with different moments: the
//!   master reports the right answer every time, the survivors end by themselves, and
//!   over the runs jobs stolen from the dead were kept as orphans and reused by the
//!   redo of their owners' jobs;
//! - the master killed at random moments (five mid-run runs each): a new master is
//!   elected, restarts the root and reports the right answer, reusing saved results;
//! - all four killed at once in the middle of a run that checkpoints, then started
//!   again on the same directory: the right answer, with fewer spawns than a run from
//!   scratch and results restored and reused.
//!
//! The programs, the random moments (10 % to 90 % of a crash-free run's time; the seed
//! is printed, `SATIN_CRASH_SEED=N` repeats a sequence) and the runs are in
//! tests/common/satin_crash_runs.rs, shared with tests/satin_crash_hosts.rs (the same
//! crashes on namespace hosts). The inputs are small (about a second of work on four
//! members) so that the whole file stays within a few minutes.

use std::time::{Duration, Instant};

#[path = "../common/satin_pool.rs"]
mod satin_pool;
use satin_pool::{Place, Pool};

#[path = "../common/satin_crash_runs.rs"]
mod satin_crash_runs;
use satin_crash_runs::{
    crash_runs, figures, formed, master_crash_runs, App, Hurt, FIB, KNAPSACK, NQUEENS,
};

/// Runs whose crash came mid-run, per test of members' crashes.
const RUNS: usize = 10;

/// Runs whose master crash came mid-run, per test of master crashes.
const MASTER_RUNS: usize = 5;

/// The members' crashes of `app`: the right answer every time (orphans and reuse
/// depend on the moments: printed here, asserted by `a_redone_jobs_orphan_is_reused`).
fn members_crash(app: &App, kills: usize) {
    let (orphans, reused) = crash_runs(Place::Loopback, app, kills, RUNS, Hurt::Kill);
    eprintln!(
        "{:?}, {kills} killed, {RUNS} runs: orphans kept {orphans}, results reused {reused}",
        app.args
    );
}

/// The first member other than the master steals a job, gives one of its sub-jobs to
/// a thief and dies at once (`SATIN_TEST_DIE_AFTER_GIVING=1`): the thief keeps that
/// sub-job as an orphan, finishes it and announces it; the owner of the job the dead
/// member stole redoes it and fetches the orphan's result instead of recomputing it.
/// A run in which nobody stole from it, or in which the thief was that owner itself
/// (its redo does not wait for its own orphans), is tried again (at most 5 runs).
#[test]
fn a_redone_jobs_orphan_is_reused() {
    let app = &NQUEENS;
    for _attempt in 0..5 {
        let (mut pool, start, _, _) = formed(
            Place::Loopback,
            app,
            &[
                ("SATIN_TEST_DIE_AFTER_GIVING", "1"),
                (
                    "RUST_LOG",
                    "warn,satin_core::recovery=trace,satin::dist=debug",
                ),
            ],
        );
        pool.assert_result(start, app.result);
        eprintln!("a member died after giving a job: {}", figures(&pool));
        if pool.report_number("jobs_redone") == 0.0 {
            // Nobody stole from it before the run ended: no death; again.
            continue;
        }
        let kv = pool.report().unwrap_or_default();
        if pool.report_number("results_reused") == 0.0
            && pool.report_number("own_orphan_lookups") >= 1.0
        {
            // The thief of the sub-job was the owner of the dead member's job: the
            // orphan ran where its parent is redone, maybe below it on the same
            // stack, so the redo computed it again instead of waiting. Again.
            eprintln!("the orphan ran on the member that redid its parent: again");
            continue;
        }
        // The sub-job was still running when its owner died (an orphan, kept) or had
        // just finished (its result, kept for the dead owner, announced): either way
        // the redo fetched it.
        let kept = pool.report_number("orphans_kept") + pool.report_number("results_announced");
        assert!(kept >= 1.0, "{kv:?}\n{}", pool.logs());
        assert!(
            pool.report_number("results_reused") >= 1.0,
            "{kv:?}\n{}",
            pool.logs()
        );
        return;
    }
    panic!("in 5 runs the member never gave a job away to a member other than its victim");
}

#[test]
fn nqueens_survives_one_crash() {
    members_crash(&NQUEENS, 1);
}

#[test]
fn nqueens_survives_two_crashes() {
    members_crash(&NQUEENS, 2);
}

#[test]
fn knapsack_survives_one_crash() {
    members_crash(&KNAPSACK, 1);
}

#[test]
fn knapsack_survives_two_crashes() {
    members_crash(&KNAPSACK, 2);
}

#[test]
fn fib_survives_one_crash() {
    members_crash(&FIB, 1);
}

#[test]
fn fib_survives_two_crashes() {
    members_crash(&FIB, 2);
}

#[test]
fn nqueens_survives_the_master_crashing() {
    let reused = master_crash_runs(Place::Loopback, &NQUEENS, MASTER_RUNS);
    assert!(reused > 0.0, "no saved result reused in {MASTER_RUNS} runs");
}

#[test]
fn knapsack_survives_the_master_crashing() {
    let reused = master_crash_runs(Place::Loopback, &KNAPSACK, MASTER_RUNS);
    assert!(reused > 0.0, "no saved result reused in {MASTER_RUNS} runs");
}

#[test]
fn fib_survives_the_master_crashing() {
    let reused = master_crash_runs(Place::Loopback, &FIB, MASTER_RUNS);
    assert!(reused > 0.0, "no saved result reused in {MASTER_RUNS} runs");
}

/// The master dies at the very end (`SATIN_TEST_MASTER_DIES_AT_END=1`): its root job
/// returned and every member reported, but it dies before it tells them to exit and
/// before it writes the result. The members, which had stopped stealing, go on: a new
/// master restarts the root, reusing the results the members computed for the old
/// one, and reports the right answer; all survivors end by themselves.
#[test]
fn a_master_dying_after_the_root_returned_is_replaced() {
    let app = &FIB;
    let (mut pool, start, _, master) = formed(
        Place::Loopback,
        app,
        &[("SATIN_TEST_MASTER_DIES_AT_END", "1")],
    );
    pool.assert_result(start, app.result);
    let logs = pool.logs();
    let kv = pool.report().unwrap_or_default();
    eprintln!("the master died at the end: {}", figures(&pool));
    assert_ne!(
        kv.get("master"),
        Some(&format!("member-{master}")),
        "{kv:?}\n{logs}"
    );
    assert_eq!(
        kv.get("restarted").map(String::as_str),
        Some("true"),
        "{kv:?}\n{logs}"
    );
    for (rank, end) in pool.ends.iter().enumerate() {
        let end = end.expect("assert_result waited for every process");
        if rank == master {
            assert_eq!(end.code(), Some(86), "the hook did not fire:\n{logs}");
        } else {
            assert!(end.success(), "survivor {rank} failed:\n{logs}");
        }
    }
    // The old master's children were stolen (four members, fib 39): their results,
    // kept by the thieves, are looked up by the restarted root.
    assert!(
        pool.report_number("results_reused") >= 1.0,
        "{kv:?}\n{logs}"
    );
}

/// The members exit only once the master is done with the result (its `PoolRun`
/// dropped, after `satin-app` printed it and wrote its report): the master killed as
/// soon as any other member ended finds its report written. Before, the members
/// exited at the master's `Exit`, sent before its `Pool::run` returned (it still
/// waited for the members to disconnect and left the registry), and nobody wrote the
/// result: 3 of 3 runs failed.
#[test]
fn the_members_exit_only_after_the_master_wrote_its_result() {
    let app = &KNAPSACK;
    let (mut pool, start, _, master) = formed(Place::Loopback, app, &[]);
    let others: Vec<usize> = (0..4).filter(|r| *r != master).collect();
    let until = Instant::now() + Duration::from_secs(60);
    while !others.iter().any(|&r| pool.ended(r)) {
        assert!(Instant::now() < until, "nobody ended:\n{}", pool.logs());
        // Bounded poll of the children: nothing to be notified by.
        std::thread::sleep(Duration::from_millis(1));
    }
    pool.kill(master);
    pool.assert_result(start, app.result);
}

/// A run killed whole resumes from its checkpoints (see
/// [`satin_crash_runs::killed_whole_resumes_from_checkpoints`]).
#[test]
fn a_run_killed_whole_resumes_from_its_checkpoints() {
    satin_crash_runs::killed_whole_resumes_from_checkpoints(Place::Loopback);
}

/// A checkpoint file of another program (or another build, or other arguments) in
/// the directory: a result for the same job key that is wrong for this program
/// (Fib{24,10} -> 46369; fib(24) = 46368). The run skips it (its fingerprint is not
/// this program's), gives the right answer, restores nothing and leaves the file.
#[test]
fn a_checkpoint_of_another_program_is_not_restored() {
    let dir = satin_pool::scratch("foreign-ckpt");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let job = ibis_apps::fib::Fib {
        n: 24,
        threshold: 10,
    };
    let (name, bytes) = satin::to_wire(&job).unwrap();
    let key = satin::satin_core::JobKey::of(name, &bytes);
    let wrong = postcard::to_allocvec(&(46368u64 + 1)).unwrap();
    let other = satin::satin_core::checkpoint::Fingerprint([7; 32]);
    let foreign = dir.join(format!("{}-member-7.ckpt", other.short()));
    std::fs::write(
        &foreign,
        satin::satin_core::checkpoint::encode(&other, [(key, wrong.as_slice())]),
    )
    .unwrap();
    let dir_s = dir.to_string_lossy().into_owned();
    let start = Instant::now();
    let mut pool = Pool::start(
        2,
        &["fib", "25", "--threshold", "10"],
        &[("SATIN_CHECKPOINT_DIR", dir_s.as_str())],
    );
    // fib(25) = 75025; with the foreign result: 75026.
    pool.assert_result(start, "75025");
    let kv = pool.report().unwrap_or_default();
    assert_eq!(pool.report_number("restored"), 0.0, "{kv:?}");
    assert!(foreign.exists(), "another program's file is left alone");
    let _ = std::fs::remove_dir_all(&dir);
}
