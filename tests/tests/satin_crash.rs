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
//! A moment is drawn between 10 % and 90 % of the run time a crash-free run of the same
//! program took in the same test; a run counts only if the victims were killed while
//! the master still ran (else it is run again, at most twice as many runs). The seed is
//! printed; `SATIN_CRASH_SEED=N` repeats a sequence. The inputs are small (about a
//! second of work on four members) so that the whole file stays within a few minutes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "../common/satin_pool.rs"]
mod satin_pool;
use satin_pool::Pool;

/// Runs whose crash came mid-run, per test of members' crashes.
const RUNS: usize = 10;

/// Runs whose master crash came mid-run, per test of master crashes.
const MASTER_RUNS: usize = 5;

/// The bound on the pool forming (all four joined, a master elected).
const FORMING: Duration = Duration::from_secs(30);

/// A program and its right answer.
struct App {
    args: &'static [&'static str],
    result: &'static str,
}

const NQUEENS: App = App {
    args: &["nqueens", "13"],
    result: "73712",
};
const KNAPSACK: App = App {
    args: &["knapsack", "27"],
    result: "1235",
};
/// With a threshold: in redo mode every spawn is a record and is looked up (a key per
/// spawn), which makes the redo of fib's every-call-spawns version (tens of millions of
/// spawns) take a minute in a debug build.
const FIB: App = App {
    args: &["fib", "39", "--threshold", "16"],
    result: "63245986",
};

/// SplitMix64: the test's moments and victims, repeatable from the printed seed.
struct Rng(u64);

impl Rng {
    fn from_env() -> Rng {
        let seed = std::env::var("SATIN_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("SATIN_CRASH_SEED={seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Starts four members and waits until they formed the pool; returns the pool, the
/// moment it formed and the master's rank.
fn formed(app: &App, env: &[(&str, &str)]) -> (Pool, Instant, Instant, usize) {
    formed_reporting_to(app, env, satin_pool::scratch("report"))
}

/// [`formed`] with the report file given (the same arguments in every run).
fn formed_reporting_to(
    app: &App,
    env: &[(&str, &str)],
    report: PathBuf,
) -> (Pool, Instant, Instant, usize) {
    let start = Instant::now();
    let pool = Pool::start_reporting_to(4, app.args, env, report);
    let master = pool
        .master_rank(FORMING)
        .unwrap_or_else(|| panic!("no master was elected:\n{}", pool.logs()));
    let until = Instant::now() + FORMING;
    while pool.members() < 4 {
        assert!(
            Instant::now() < until,
            "the pool did not form:\n{}",
            pool.logs()
        );
        // Bounded poll of the registry's state; nothing to be notified by.
        std::thread::sleep(Duration::from_millis(10));
    }
    (pool, start, Instant::now(), master)
}

/// How long `app` runs on four members without a crash (from the pool forming to the
/// master's end), and the jobs it spawned.
fn crash_free(app: &App) -> (Duration, f64) {
    let (mut pool, start, running, _) = formed(app, &[]);
    pool.assert_result(start, app.result);
    let took = running.elapsed();
    let spawns = pool.report_number("spawns");
    eprintln!("{:?}: crash-free run {took:?}, {spawns} spawns", app.args);
    (took, spawns)
}

/// Waits until `running + at`, or until the master `master` ended (a deliberate
/// random fault moment, watched in small steps).
fn until_moment(pool: &mut Pool, running: Instant, at: Duration, master: usize) {
    while running.elapsed() < at && !pool.ended(master) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The crash-recovery figures of a run's report, for the test's output.
fn figures(pool: &Pool) -> String {
    [
        "jobs_redone",
        "orphans_kept",
        "results_announced",
        "lookups",
        "results_reused",
        "restored",
        "spawns",
        "recovery_ms",
        "restart_ms",
        "seconds",
    ]
    .iter()
    .map(|k| format!("{k}={}", pool.report_number(k)))
    .collect::<Vec<_>>()
    .join(" ")
}

/// `kills` members other than the master killed at random moments, until `RUNS` runs
/// had their crash mid-run; every run must give the right answer. Returns the sums of
/// `orphans_kept` and `results_reused` over the mid-run runs.
fn crash_runs(app: &App, kills: usize) -> (f64, f64) {
    let mut rng = Rng::from_env();
    let (mut duration, _) = crash_free(app);
    let mut mid_run = 0;
    let (mut orphans, mut reused) = (0.0, 0.0);
    for _attempt in 0..3 * RUNS {
        let (mut pool, start, running, master) = formed(app, &[]);
        let mut victims: Vec<usize> = (0..4).filter(|r| *r != master).collect();
        while victims.len() > kills {
            let i = (rng.next() % victims.len() as u64) as usize;
            victims.remove(i);
        }
        let mut moments: Vec<(Duration, usize)> = victims
            .iter()
            .map(|&v| (duration.mul_f64(0.1 + 0.8 * rng.unit()), v))
            .collect();
        moments.sort();
        let mut all_mid_run = true;
        for (at, victim) in moments {
            until_moment(&mut pool, running, at, master);
            let master_ran = !pool.ended(master);
            if !master_ran {
                // The machine got faster than the crash-free run measured: draw the
                // next moments from this shorter run.
                duration = duration.min(running.elapsed());
            }
            let killed = pool.kill(victim);
            all_mid_run &= master_ran && killed;
        }
        pool.assert_result(start, app.result);
        for (rank, end) in pool.ends.iter().enumerate() {
            if !victims.contains(&rank) {
                assert!(
                    end.is_some_and(|s| s.success()),
                    "survivor {rank} failed (victims {victims:?}):\n{}",
                    pool.logs()
                );
            }
        }
        eprintln!("victims {victims:?}: {}", figures(&pool));
        if all_mid_run {
            orphans += pool.report_number("orphans_kept");
            reused += pool.report_number("results_reused");
            mid_run += 1;
            if mid_run == RUNS {
                return (orphans, reused);
            }
        }
    }
    panic!(
        "only {mid_run} of {} runs had their crash mid-run (a crash-free run takes \
         {duration:?})",
        3 * RUNS
    );
}

/// The members' crashes of `app`: the right answer every time (orphans and reuse
/// depend on the moments: printed here, asserted by `a_redone_jobs_orphan_is_reused`).
fn members_crash(app: &App, kills: usize) {
    let (orphans, reused) = crash_runs(app, kills);
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

/// The master killed at random moments, until `MASTER_RUNS` runs had the crash
/// mid-run: a new master restarts the root, reports the right answer (the report is
/// its own), and the survivors end by themselves. Returns the results reused over the
/// runs.
fn master_crash_runs(app: &App) -> f64 {
    let mut rng = Rng::from_env();
    let (mut duration, _) = crash_free(app);
    let mut mid_run = 0;
    let mut reused = 0.0;
    for _attempt in 0..3 * MASTER_RUNS {
        let (mut pool, start, running, master) = formed(app, &[]);
        let at = duration.mul_f64(0.1 + 0.8 * rng.unit());
        until_moment(&mut pool, running, at, master);
        let master_ran = !pool.ended(master);
        if !master_ran {
            // Faster than the crash-free run measured: later moments from this run.
            duration = duration.min(running.elapsed());
        }
        let killed = pool.kill(master);
        pool.assert_result(start, app.result);
        let kv = pool.report().unwrap_or_default();
        let by = kv.get("master").cloned().unwrap_or_default();
        eprintln!(
            "master {master} killed at {at:?}: report by {by}: {}",
            figures(&pool)
        );
        for (rank, end) in pool.ends.iter().enumerate() {
            if rank != master {
                assert!(
                    end.is_some_and(|s| s.success()),
                    "survivor {rank} failed (master {master} killed):\n{}",
                    pool.logs()
                );
            }
        }
        // A report by the killed master means it was killed after it was done.
        if master_ran && killed && by != format!("member-{master}") {
            assert_eq!(
                kv.get("restarted").map(String::as_str),
                Some("true"),
                "{kv:?}\n{}",
                pool.logs()
            );
            reused += pool.report_number("results_reused");
            mid_run += 1;
            if mid_run == MASTER_RUNS {
                return reused;
            }
        }
    }
    panic!(
        "only {mid_run} of {} runs had their master crash mid-run (a crash-free run \
         takes {duration:?})",
        3 * MASTER_RUNS
    );
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
    let reused = master_crash_runs(&NQUEENS);
    assert!(reused > 0.0, "no saved result reused in {MASTER_RUNS} runs");
}

#[test]
fn knapsack_survives_the_master_crashing() {
    let reused = master_crash_runs(&KNAPSACK);
    assert!(reused > 0.0, "no saved result reused in {MASTER_RUNS} runs");
}

#[test]
fn fib_survives_the_master_crashing() {
    let reused = master_crash_runs(&FIB);
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
    let (mut pool, start, _, master) = formed(app, &[("SATIN_TEST_MASTER_DIES_AT_END", "1")]);
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

/// Checkpoint files (`*.ckpt`) in `dir`.
fn checkpoints(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "ckpt"))
                .collect()
        })
        .unwrap_or_default()
}

/// A run that checkpoints every 50 ms is killed whole (all four members) in its
/// second half, once a checkpoint exists; started again on the same directory it
/// restores and reuses the saved results: the right answer with fewer spawns than a
/// run from scratch, and its files are removed at its end. Both runs have the same
/// arguments (report file included): a checkpoint is reused only by the same
/// program with the same arguments.
#[test]
fn a_run_killed_whole_resumes_from_its_checkpoints() {
    let app = &FIB;
    let mut rng = Rng::from_env();
    let (duration, scratch_spawns) = crash_free(app);
    let dir = satin_pool::scratch("checkpoints");
    let dir_s = dir.to_string_lossy().into_owned();
    let env = [
        ("SATIN_CHECKPOINT_DIR", dir_s.as_str()),
        ("SATIN_CHECKPOINT_INTERVAL_MS", "50"),
    ];
    let report = satin_pool::scratch("checkpoints-report");
    for _attempt in 0..5 {
        let _ = std::fs::remove_dir_all(&dir);
        let (mut pool, _, running, master) = formed_reporting_to(app, &env, report.clone());
        let at = duration.mul_f64(0.5 + 0.4 * rng.unit());
        until_moment(&mut pool, running, at, master);
        // A checkpoint must exist before the kill (bounded: the master's end).
        while checkpoints(&dir).is_empty() && !pool.ended(master) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Every one killed (not short-circuiting): whether all still ran.
        let killed: Vec<bool> = (0..4).map(|r| pool.kill(r)).collect();
        let mid_run = killed.iter().all(|k| *k);
        let saved = checkpoints(&dir);
        drop(pool);
        if !mid_run || saved.is_empty() {
            continue;
        }
        let (mut again, start, _, _) = formed_reporting_to(app, &env, report.clone());
        again.assert_result(start, app.result);
        eprintln!(
            "resumed from {} checkpoint files: {} (from scratch: {scratch_spawns} spawns)",
            saved.len(),
            figures(&again)
        );
        let kv = again.report().unwrap_or_default();
        assert!(again.report_number("restored") > 0.0, "{kv:?}");
        assert!(again.report_number("results_reused") > 0.0, "{kv:?}");
        assert!(
            again.report_number("spawns") < scratch_spawns,
            "no fewer spawns than from scratch ({scratch_spawns}): {kv:?}"
        );
        assert!(
            checkpoints(&dir).is_empty(),
            "a successful run removes its checkpoints: {:?}",
            checkpoints(&dir)
        );
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let _ = std::fs::remove_dir_all(&dir);
    panic!("no run of 5 was killed mid-run after writing a checkpoint");
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
