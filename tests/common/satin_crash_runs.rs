//! The crash runs of Satin pools (issue 21) shared by tests/satin_crash.rs (on
//! 127.0.0.1) and tests/satin_crash_hosts.rs (on namespace hosts): the programs and
//! their right answers, the seeded random moments, and runs of four members whose
//! members or master are killed (or cut off) at those moments.
//!
//! A moment is drawn between 10 % and 90 % of the run time a crash-free run of the same
//! program took in the same test; a run counts only if its victims were hurt mid-run,
//! while the master still ran and before they reported their statistics at the end
//! (else it is run again, at most three times as many runs). The seed
//! is printed; `SATIN_CRASH_SEED=N` repeats a sequence. A test file using this module
//! declares `mod satin_pool` (tests/common/satin_pool.rs) at its root.

// Each test file uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::satin_pool::{self, Place, Pool};

/// The bound on the pool forming (all four joined, a master elected).
pub const FORMING: Duration = Duration::from_secs(30);

/// A program and its right answer.
pub struct App {
    pub args: &'static [&'static str],
    pub result: &'static str,
}

pub const NQUEENS: App = App {
    args: &["nqueens", "13"],
    result: "73712",
};
pub const KNAPSACK: App = App {
    args: &["knapsack", "27"],
    result: "1235",
};
/// With a threshold: in redo mode every spawn is a record and is looked up (a key per
/// spawn), which makes the redo of fib's every-call-spawns version (tens of millions of
/// spawns) take a minute in a debug build.
pub const FIB: App = App {
    args: &["fib", "39", "--threshold", "16"],
    result: "63245986",
};

/// SplitMix64: the test's moments and victims, repeatable from the printed seed.
pub struct Rng(u64);

impl Rng {
    /// The seed `SATIN_CRASH_SEED`, else the clock's; printed after `what` (tests run
    /// in parallel: the name tells which test drew from it).
    pub fn from_env(what: &str) -> Rng {
        let seed = std::env::var("SATIN_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{what}: SATIN_CRASH_SEED={seed}");
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Starts four members at `place` and waits until they formed the pool; returns the
/// pool, the moment it was started, the moment it formed and the master's rank.
pub fn formed(place: Place, app: &App, env: &[(&str, &str)]) -> (Pool, Instant, Instant, usize) {
    formed_reporting_to(place, app, env, satin_pool::scratch("report"))
}

/// [`formed`] with the report file given (the same arguments in every run).
pub fn formed_reporting_to(
    place: Place,
    app: &App,
    env: &[(&str, &str)],
    report: PathBuf,
) -> (Pool, Instant, Instant, usize) {
    let start = Instant::now();
    let pool = Pool::start_at(place, 4, app.args, env, report);
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

/// How long `app` runs on four members at `place` without a crash (from the pool
/// forming to the master's end), and the jobs it spawned.
pub fn crash_free(place: Place, app: &App) -> (Duration, f64) {
    let (mut pool, start, running, _) = formed(place, app, &[]);
    pool.assert_result(start, app.result);
    let took = running.elapsed();
    let spawns = pool.report_number("spawns");
    eprintln!("{:?}: crash-free run {took:?}, {spawns} spawns", app.args);
    (took, spawns)
}

/// Waits until `running + at`, or until the master `master` ended (a deliberate
/// random fault moment, watched in small steps).
pub fn until_moment(pool: &mut Pool, running: Instant, at: Duration, master: usize) {
    while running.elapsed() < at && !pool.ended(master) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The crash-recovery figures of a run's report, for the test's output.
pub fn figures(pool: &Pool) -> String {
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

/// Whether member `rank` is among the members whose statistics the master's report
/// counts (`executed_by = member-0:N member-1:M ...`): it reported at the end of the
/// run, and so was not dead to the pool.
pub fn reported_at_end(pool: &Pool, rank: usize) -> bool {
    let kv = pool.report().unwrap_or_default();
    let me = format!("member-{rank}");
    kv.get("executed_by").is_some_and(|by| {
        by.split_whitespace()
            .any(|m| m.split_once(':').is_some_and(|(name, _)| name == me))
    })
}

/// How the victims of [`crash_runs`] are hurt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hurt {
    /// SIGKILL, as a crashing machine.
    Kill,
    /// Their host's network cut ([`Place::Hosts`] only): each goes on running until it
    /// notices, then must end by itself with an error.
    Cut,
}

/// `kills` members other than the master hurt at random moments, until `runs` runs had
/// it happen mid-run (the master still running, the victims not among the members
/// that reported at the end); every run must give the right answer, the survivors must
/// end by themselves with success, and a member cut off mid-run with an error. Returns the sums of `orphans_kept` and `results_reused`
/// over the mid-run runs.
pub fn crash_runs(place: Place, app: &App, kills: usize, runs: usize, hurt: Hurt) -> (f64, f64) {
    let mut rng = Rng::from_env(&format!("{:?} {kills} {hurt:?} on {place:?}", app.args));
    let (mut duration, _) = crash_free(place, app);
    let mut mid_run = 0;
    let (mut orphans, mut reused) = (0.0, 0.0);
    for _attempt in 0..3 * runs {
        let (mut pool, start, running, master) = formed(place, app, &[]);
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
            let hurt_running = match hurt {
                Hurt::Kill => pool.kill(victim),
                Hurt::Cut => pool.cut(victim),
            };
            all_mid_run &= master_ran && hurt_running;
        }
        pool.assert_result(start, app.result);
        // A victim whose statistics reached the master was hurt after its part of the
        // run was done (the master was still ending): not a crash mid-run.
        let reported: Vec<usize> = victims
            .iter()
            .copied()
            .filter(|&v| reported_at_end(&pool, v))
            .collect();
        all_mid_run &= reported.is_empty();
        for (rank, end) in pool.ends.iter().enumerate() {
            if !victims.contains(&rank) {
                assert!(
                    end.is_some_and(|s| s.success()),
                    "survivor {rank} failed (victims {victims:?}):\n{}",
                    pool.logs()
                );
            } else if hurt == Hurt::Cut && all_mid_run {
                // Cut off mid-run: nobody can tell it that the run ended.
                assert!(
                    end.is_some_and(|s| !s.success()),
                    "cut-off member {rank} did not end with an error:\n{}",
                    pool.logs()
                );
            }
        }
        eprintln!(
            "{hurt:?} {victims:?} (reported at the end: {reported:?}): {}",
            figures(&pool)
        );
        if all_mid_run {
            orphans += pool.report_number("orphans_kept");
            reused += pool.report_number("results_reused");
            mid_run += 1;
            if mid_run == runs {
                return (orphans, reused);
            }
        }
    }
    panic!(
        "only {mid_run} of {} runs had their crash mid-run (a crash-free run takes \
         {duration:?})",
        3 * runs
    );
}

/// The master killed at random moments, until `runs` runs had the crash mid-run: a new
/// master restarts the root, reports the right answer (the report is its own, with
/// `restarted = true`), and the survivors end by themselves. Returns the results reused
/// over the runs.
pub fn master_crash_runs(place: Place, app: &App, runs: usize) -> f64 {
    let mut rng = Rng::from_env(&format!("{:?} master killed on {place:?}", app.args));
    let (mut duration, _) = crash_free(place, app);
    let mut mid_run = 0;
    let mut reused = 0.0;
    for _attempt in 0..3 * runs {
        let (mut pool, start, running, master) = formed(place, app, &[]);
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
            if mid_run == runs {
                return reused;
            }
        }
    }
    panic!(
        "only {mid_run} of {} runs had their master crash mid-run (a crash-free run \
         takes {duration:?})",
        3 * runs
    );
}

/// Checkpoint files (`*.ckpt`) in `dir`.
pub fn checkpoints(dir: &Path) -> Vec<PathBuf> {
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
pub fn killed_whole_resumes_from_checkpoints(place: Place) {
    let app = &FIB;
    let mut rng = Rng::from_env(&format!("checkpoints on {place:?}"));
    let (duration, scratch_spawns) = crash_free(place, app);
    let dir = satin_pool::scratch("checkpoints");
    let dir_s = dir.to_string_lossy().into_owned();
    let env = [
        ("SATIN_CHECKPOINT_DIR", dir_s.as_str()),
        ("SATIN_CHECKPOINT_INTERVAL_MS", "50"),
    ];
    let report = satin_pool::scratch("checkpoints-report");
    for _attempt in 0..5 {
        let _ = std::fs::remove_dir_all(&dir);
        let (mut pool, _, running, master) = formed_reporting_to(place, app, &env, report.clone());
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
        let (mut again, start, _, _) = formed_reporting_to(place, app, &env, report.clone());
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
