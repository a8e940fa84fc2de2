//! Satin pools that lose members (issue 21): one or two of four members killed with
//! SIGKILL at random moments of nqueens, knapsack and fib, each at least ten times with
//! different moments. The master must report the right answer every time, and the
//! survivors end by themselves.
//!
//! A moment is drawn between 10 % and 90 % of the run time a crash-free run of the same
//! program took in the same test; a run counts only if the victims were killed while
//! the master still ran (else it is run again, at most twice as many runs). The seed is
//! printed; `SATIN_CRASH_SEED=N` repeats a sequence.

use std::time::{Duration, Instant};

#[path = "../common/satin_pool.rs"]
mod satin_pool;
use satin_pool::Pool;

/// Runs whose crash came mid-run, per test.
const RUNS: usize = 10;

/// The bound on the pool forming (all four joined, a master elected).
const FORMING: Duration = Duration::from_secs(30);

/// A program and its right answer.
struct App {
    args: &'static [&'static str],
    result: &'static str,
}

const NQUEENS: App = App {
    args: &["nqueens", "14"],
    result: "365596",
};
const KNAPSACK: App = App {
    args: &["knapsack", "29"],
    result: "1343",
};
const FIB: App = App {
    args: &["fib", "40"],
    result: "102334155",
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
fn formed(app: &App) -> (Pool, Instant, Instant, usize) {
    let start = Instant::now();
    let pool = Pool::start(4, app.args, &[]);
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
/// master's end).
fn crash_free(app: &App) -> Duration {
    let (mut pool, start, running, _) = formed(app);
    pool.assert_result(start, app.result);
    running.elapsed()
}

/// `kills` members other than the master killed at random moments, until `RUNS` runs
/// had their crash mid-run; every run must give the right answer.
fn crash_runs(app: &App, kills: usize) {
    let mut rng = Rng::from_env();
    let duration = crash_free(app);
    let mut mid_run = 0;
    for _attempt in 0..2 * RUNS {
        let (mut pool, start, running, master) = formed(app);
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
            // The fault's moment: wait for it, watching the master.
            while running.elapsed() < at && !pool.ended(master) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let master_ran = !pool.ended(master);
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
        if all_mid_run {
            mid_run += 1;
            if mid_run == RUNS {
                return;
            }
        }
    }
    panic!(
        "only {mid_run} of {} runs had their crash mid-run (a crash-free run takes \
         {duration:?})",
        2 * RUNS
    );
}

#[test]
fn nqueens_survives_one_crash() {
    crash_runs(&NQUEENS, 1);
}

#[test]
fn nqueens_survives_two_crashes() {
    crash_runs(&NQUEENS, 2);
}

#[test]
fn knapsack_survives_one_crash() {
    crash_runs(&KNAPSACK, 1);
}

#[test]
fn knapsack_survives_two_crashes() {
    crash_runs(&KNAPSACK, 2);
}

#[test]
fn fib_survives_one_crash() {
    crash_runs(&FIB, 1);
}

#[test]
fn fib_survives_two_crashes() {
    crash_runs(&FIB, 2);
}
