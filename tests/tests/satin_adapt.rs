//! Self-adaptivity of Satin pools (issue 21): under `ipl-run --malleable` with
//! `SATIN_ADAPT=1` the master's coordinator grows a pool whose members are all busy,
//! removes the least efficient member of a pool that is mostly idle, and removes a
//! cluster behind a slow wide-area link (the WAN emulator's). The answer is right
//! every time.
//!
//! Each test runs the pool through `ipl-run`'s library (`ipl_tools::launcher::launch`,
//! what the binary runs, control socket included) and reads the master's report
//! (`satin-app --report`): `adapt_added`, `adapt_removed`, `executed_by` (the jobs
//! stolen from others each member ran) and the result; which process was removed on
//! request comes from the launcher's outcome. The members' output (with the
//! coordinator's decisions at info level) goes to this process's output.
//!
//! The starving pool's slow member is slowed by a real CPU limit (a control group,
//! `tests/common/cpu_limit.rs`): that test needs root and cgroups, and passes with a
//! message where they are missing (fails under `IBIS_REQUIRE_LAUNCHERS=1`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ipl_tools::launcher::{
    cluster_of, launch, unique_pool_name, LaunchConfig, LaunchOutcome, ProcessEnd,
};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

#[path = "../common/cpu_limit.rs"]
mod cpu_limit;
#[path = "../common/satin_pool.rs"]
mod satin_pool;
use cpu_limit::CpuLimit;
use satin_pool::scratch;

const APP: &str = env!("CARGO_BIN_EXE_satin-app");

/// A short monitoring period, so that a run of seconds has several.
const PERIOD_MS: &str = "300";

/// Runs `satin-app ARGS --workers 1 --report FILE` on a malleable pool of `n`
/// processes with adaptivity on and `env`; returns the outcome and the report.
fn run(n: usize, args: &[&str], env: &[(&str, &str)]) -> (LaunchOutcome, HashMap<String, String>) {
    run_watched(n, 1, args, env, |_| {})
}

/// [`run`], with the `n` processes spread over `clusters` clusters (`ipl-run
/// --clusters`) and `watch` called on another thread with the pool's name while the
/// pool runs (it returns before the run ends).
fn run_watched(
    n: usize,
    clusters: usize,
    args: &[&str],
    env: &[(&str, &str)],
    watch: impl FnOnce(&str) + Send,
) -> (LaunchOutcome, HashMap<String, String>) {
    let report = scratch("adapt-report");
    let mut argv: Vec<OsString> = args.iter().map(OsString::from).collect();
    argv.extend(["--workers".into(), "1".into(), "--report".into()]);
    argv.push(report.clone().into());
    let mut cfg = LaunchConfig::new(n, APP, argv);
    let pool = unique_pool_name();
    cfg.pool = Some(pool.clone());
    cfg.malleable = true;
    cfg.clusters = clusters;
    cfg.keep_going = true;
    cfg.max_processes = 8;
    // Every run ends within this (a hang fails the test).
    cfg.timeout = Some(Duration::from_secs(240));
    cfg.grace = Duration::from_secs(20);
    // A member removed on request finishes its jobs first, which takes long under a
    // CPU limit (within the run's timeout).
    cfg.remove_grace = Duration::from_secs(180);
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
    let o = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(&pool));
        let o = launch(&cfg).expect("launch the pool");
        if let Err(panic) = watcher.join() {
            std::panic::resume_unwind(panic);
        }
        o
    });
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

/// The ranks the launcher removed (`remove RANK`), in rank order.
fn removed_ranks(o: &LaunchOutcome) -> Vec<usize> {
    o.ends
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, ProcessEnd::Removed(_)))
        .map(|(rank, _)| rank)
        .collect()
}

/// Two members, one worker each, on `nqueens 14` (seconds of work in a debug build):
/// both are busy (efficiency well above 50 %), so the coordinator asks `ipl-run` for
/// a member (at most 3: one at a time), which joins and runs stolen jobs.
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
    // Every process the launcher started, and those it removed again: on a loaded
    // machine the coordinator may also shrink the pool and grow it once more (a CI run
    // removed member-2 and added member-3), never past the maximum of 3.
    let started = o.ends.len();
    let removed = removed_ranks(&o).len();
    assert!(started >= 3, "no third process was started: {o:?}");
    assert!(
        started - removed <= 3,
        "more than 3 members at the end: {o:?}"
    );
    let ran = executed_by(&kv);
    assert!(
        (2..started).any(|r| ran.get(&format!("member-{r}")).is_some_and(|n| *n > 0)),
        "no added member ran stolen jobs: {kv:?}"
    );
}

/// How much of one CPU the slowed member gets.
const SLOWED_PERCENT: u64 = 5;

/// Three members on `nqueens 14`, one of them (not the master) confined to 5 % of one
/// CPU by a control group as soon as the master is elected. It steals jobs and runs
/// them 20 times slower; the others finish the rest of the work and then starve,
/// waiting for its jobs. Its speed (benchmark times the share of the CPU it got while
/// busy) is about 5 % of theirs, below `e_min`: when the efficiency falls below 30 %
/// the coordinator removes it (at least 2 stay: one goes), the slow member first,
/// although by `speed · (1 − overhead)` the starving ones are even less efficient. It
/// leaves gracefully (exit status 0) and finishes its jobs first: the answer is
/// right, nothing is redone. The pool's maximum size is 2, below its 3 members, so
/// that it does not grow again: once the slowed member has handed its results back,
/// the two others are busy again and, with room, would ask for a third member (the
/// journal's overloaded-processors scenario does just that; growing is the other
/// test's subject).
///
/// Without adaptivity (checked with `SATIN_ADAPT=0`) nobody is removed: the test
/// fails. Without the CPU share in the speed, or with the least efficient member
/// going first, a starving fast member goes instead (checked): the test fails.
#[test]
fn the_least_efficient_member_of_a_starving_pool_is_removed() {
    let Some(mut limit) = CpuLimit::new(SLOWED_PERCENT) else {
        return;
    };
    // The starving phase needs the slowed member to hold stolen jobs while the others
    // run dry, which depends on when it steals: a run in which that phase was too
    // short for a decision removes nobody and is tried again (at most 3 runs); a run
    // that removes anybody else fails at once.
    for attempt in 1..=3 {
        if starving_pool_run(attempt, &mut limit) {
            return;
        }
    }
    panic!(
        "in 3 runs the starving pool never removed its slowed member; the limit's cpu.stat:\n{}",
        limit.stat()
    );
}

/// One run of [`the_least_efficient_member_of_a_starving_pool_is_removed`]: whether
/// the slowed member was removed (and only it).
fn starving_pool_run(attempt: usize, limit: &mut CpuLimit) -> bool {
    let n = 3;
    let elections = elections();
    // (master, slowed) launcher ranks.
    let chosen = Mutex::new(None);
    let (o, kv) = run_watched(
        n,
        1,
        &["nqueens", "14"],
        // At most 2: the pool does not grow again after the removal (see above).
        &[("SATIN_ADAPT_MIN_SIZE", "2"), ("SATIN_ADAPT_MAX_SIZE", "2")],
        |pool| {
            let master = elections
                .winner(pool, Duration::from_secs(60))
                .unwrap_or_else(|| panic!("no master elected in {pool} within 60 s"));
            // The highest rank that is not the master.
            let slowed = (0..n).rev().find(|r| *r != master).expect("3 members");
            let pid = member_pid(pool, slowed, Duration::from_secs(10))
                .unwrap_or_else(|| panic!("no process of rank {slowed} in {pool}"));
            limit
                .confine(pid)
                .unwrap_or_else(|e| panic!("confining member-{slowed} (pid {pid}): {e}"));
            eprintln!(
                "run {attempt}: member-{slowed} (pid {pid}) confined to {SLOWED_PERCENT} % of a \
                 CPU in {}; the master is member-{master}",
                limit.path().display()
            );
            *chosen.lock().unwrap() = Some((master, slowed));
        },
    );
    let (master, slowed) = chosen.into_inner().unwrap().expect("a member was confined");
    assert!(!o.timed_out, "timed out: {o:?} {kv:?}");
    assert_eq!(o.exit_code(), 0, "{o:?} {kv:?}");
    assert_eq!(
        kv.get("result").map(String::as_str),
        Some("365596"),
        "{kv:?}"
    );
    assert_eq!(
        kv.get("master").map(String::as_str),
        Some(format!("member-{master}").as_str()),
        "the master is the one elected, never the slowed member-{slowed}"
    );
    let removed = removed_ranks(&o);
    if removed.is_empty() {
        eprintln!(
            "run {attempt}: nobody was removed (the starving phase was too short): {kv:?}\n\
             the limit's cpu.stat:\n{}",
            limit.stat()
        );
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

/// Processes and clusters of the wide-area test: `ipl-run -n 4 --clusters 2` puts
/// ranks 0 and 1 in `cluster-0`, 2 and 3 in `cluster-1` ([`cluster_of`]).
const WAN_PROCESSES: usize = 4;
const WAN_CLUSTERS: usize = 2;

/// The wide-area link between the two clusters, both ways (wan-emu's `IPL_WAN`): 100 ms
/// one way, 100 KByte/s, the journal's overloaded link.
const SLOW_LINK: &str = "link=cluster-0>cluster-1 latency_ms=100 bandwidth_kbyte=100;\
                         link=cluster-1>cluster-0 latency_ms=100 bandwidth_kbyte=100";

/// Four members in two clusters on `nqueens 14`, over the WAN emulator (`wan-emu`,
/// linked into `satin-app`) with a slow link between the clusters, and the
/// cluster-aware policy (CRS: a member steals from its own cluster synchronously and
/// from the other cluster asynchronously, and those asynchronous round trips are its
/// wide-area time). The cluster that is not the master's gets its work only across
/// the link: its members wait for wide-area steal replies most of the time, more
/// than 25 % of it (about two thirds in the first judged period; the master's
/// cluster well under a tenth), and the coordinator removes that cluster whole
/// (rule 3 of `satin_core::adapt`): both of its members leave gracefully (exit
/// status 0), nothing is redone, the master's cluster finishes the run and the
/// answer is right. The master may be in either cluster (the election decides): the
/// cluster removed is whichever it is not in. The pool's bounds (at least 2, at most
/// 2) leave room only for removals down to the master's cluster: nobody is added
/// (with room, the master's cluster, busy again, would ask for more).
///
/// Without adaptivity (checked with `SATIN_ADAPT=0`) nobody is removed: the test
/// fails. Over the same transport without the link's delay (checked with `IPL_WAN`
/// unset) nobody is removed either (wide-area shares at most 0.04): the removal is
/// the link's doing. When the master judged its first period alone (the members'
/// samples of it still on their way, so all counted as silent: efficiency 0.25 <
/// 30 %), one member was removed as inefficient before any measurement, from either
/// cluster: the test failed (checked).
#[test]
fn a_cluster_behind_a_slow_wide_area_link_is_removed() {
    // A run in which no period was judged with the other cluster's numbers in it
    // (the run ended first) removes nobody and is tried again (at most 3 runs); a run
    // that removes anybody else fails at once.
    for attempt in 1..=3 {
        if slow_link_run(attempt) {
            return;
        }
    }
    panic!("in 3 runs the cluster behind the slow link was never removed");
}

/// One run of [`a_cluster_behind_a_slow_wide_area_link_is_removed`]: whether the
/// cluster that is not the master's was removed (and only it).
fn slow_link_run(attempt: usize) -> bool {
    let started = Instant::now();
    let (o, kv) = run_watched(
        WAN_PROCESSES,
        WAN_CLUSTERS,
        &["nqueens", "14"],
        &[
            ("IPL_TRANSPORT", "wan-emu"),
            ("IPL_WAN", SLOW_LINK),
            ("SATIN_POLICY", "crs"),
            ("SATIN_ADAPT_MIN_SIZE", "2"),
            ("SATIN_ADAPT_MAX_SIZE", "2"),
        ],
        |_| {},
    );
    assert!(!o.timed_out, "timed out: {o:?} {kv:?}");
    assert_eq!(o.exit_code(), 0, "{o:?} {kv:?}");
    assert_eq!(
        kv.get("result").map(String::as_str),
        Some("365596"),
        "{kv:?}"
    );
    assert_eq!(o.ends.len(), WAN_PROCESSES, "nobody was added: {o:?}");
    assert_eq!(count(&kv, "adapt_added"), 0, "{kv:?}");
    let master: usize = kv
        .get("master")
        .and_then(|m| m.strip_prefix("member-")?.parse().ok())
        .unwrap_or_else(|| panic!("no master in the report: {kv:?}"));
    let home = cluster_of(master, WAN_PROCESSES, WAN_CLUSTERS);
    let other: Vec<usize> = (0..WAN_PROCESSES)
        .filter(|r| cluster_of(*r, WAN_PROCESSES, WAN_CLUSTERS) != home)
        .collect();
    let removed = removed_ranks(&o);
    eprintln!(
        "run {attempt}: master member-{master} (cluster-{home}), removed {removed:?}, \
         {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if removed.is_empty() {
        assert_eq!(count(&kv, "adapt_removed"), 0, "{kv:?}");
        return false;
    }
    assert_eq!(
        removed, other,
        "exactly the members of the cluster that is not the master's (cluster-{home}) are \
         removed: {o:?} {kv:?}"
    );
    for r in &other {
        assert!(
            matches!(o.ends[*r], ProcessEnd::Removed(s) if s.success()),
            "member-{r} left gracefully: {o:?}"
        );
    }
    assert_eq!(count(&kv, "adapt_removed"), 2, "{kv:?}");
    assert_eq!(
        count(&kv, "jobs_redone"),
        0,
        "nothing of theirs was redone: {kv:?}"
    );
    true
}

/// The winners of the master elections (`satin::dist::MASTER_ELECTION`) that the
/// registry servers of this process (`ipl-run`'s, in [`launch`]) saw, by pool: from
/// their `debug` event "election won" (`ipl_registry::core`, fields `pool`,
/// `election`, `winner`), caught by a tracing layer of this process.
struct Elections {
    winners: Mutex<HashMap<String, String>>,
    changed: Condvar,
}

impl Elections {
    /// The launcher rank of `pool`'s master (members are named `member-R`), waiting
    /// for the election at most `within`.
    fn winner(&self, pool: &str, within: Duration) -> Option<usize> {
        let guard = self.winners.lock().unwrap();
        let (guard, _) = self
            .changed
            .wait_timeout_while(guard, within, |w| !w.contains_key(pool))
            .unwrap();
        // `IbisIdentifier`'s display: `POOL#ID (NAME @ CLUSTER)`.
        let winner = guard.get(pool)?;
        let name = winner.split_once(" (")?.1.split_once(" @ ")?.0;
        name.strip_prefix("member-")?.parse().ok()
    }
}

/// The layer that fills [`Elections`].
struct ElectionLayer(Arc<Elections>);

impl<S: tracing::Subscriber> Layer<S> for ElectionLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        #[derive(Default)]
        struct Fields {
            pool: Option<String>,
            election: Option<String>,
            winner: Option<String>,
        }
        impl tracing::field::Visit for Fields {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                self.record_debug(field, &format_args!("{value}"));
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                let slot = match field.name() {
                    "pool" => &mut self.pool,
                    "election" => &mut self.election,
                    "winner" => &mut self.winner,
                    _ => return,
                };
                *slot = Some(format!("{value:?}"));
            }
        }
        let mut f = Fields::default();
        event.record(&mut f);
        if let (Some(pool), Some(satin::dist::MASTER_ELECTION), Some(winner)) =
            (f.pool, f.election.as_deref(), f.winner)
        {
            self.0.winners.lock().unwrap().insert(pool, winner);
            self.0.changed.notify_all();
        }
    }
}

/// This process's [`Elections`] (the layer is installed once, as the global
/// subscriber: it prints nothing).
fn elections() -> Arc<Elections> {
    static ELECTIONS: OnceLock<Arc<Elections>> = OnceLock::new();
    ELECTIONS
        .get_or_init(|| {
            let e = Arc::new(Elections {
                winners: Mutex::new(HashMap::new()),
                changed: Condvar::new(),
            });
            let filter = tracing_subscriber::filter::Targets::new()
                .with_target("ipl_registry::core", tracing::Level::DEBUG);
            let subscriber =
                tracing_subscriber::registry().with(ElectionLayer(e.clone()).with_filter(filter));
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other subscriber in this test process");
            e
        })
        .clone()
}

/// The process id of `pool`'s member of launcher rank `rank`, a child of this process
/// (`IPL_POOL` and `IPL_RANK` in its environment), waiting for it at most `within`.
fn member_pid(pool: &str, rank: usize, within: Duration) -> Option<u32> {
    let me = std::process::id();
    let want = [format!("IPL_POOL={pool}"), format!("IPL_RANK={rank}")];
    let until = Instant::now() + within;
    loop {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            // `/proc/PID/stat`: `PID (COMM) STATE PPID ...`; COMM may hold spaces.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid != Some(me) {
                continue;
            }
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
            if want.iter().all(|w| vars.contains(&w.as_bytes())) {
                return Some(pid);
            }
        }
        if Instant::now() >= until {
            return None;
        }
        // The process was started before its election: only a race with `/proc`.
        std::thread::sleep(Duration::from_millis(10));
    }
}
