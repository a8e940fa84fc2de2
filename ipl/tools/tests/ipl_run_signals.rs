//! The processes of a local pool end with `ipl-run`: SIGTERM to `ipl-run` is passed
//! on to them, and when `ipl-run` is killed by SIGKILL the kernel kills them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

const RUN: &str = env!("CARGO_BIN_EXE_ipl-run");

/// Generous for a loaded machine: starting two shells, or ending processes after
/// ipl-run's 5 s SIGTERM grace.
const BOUND: Duration = Duration::from_secs(30);

/// A fresh directory for the pid files, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ipl-run-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `f` until it gives a value or [`BOUND`] passes.
fn within<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < BOUND, "{what}: not within {BOUND:?}");
        // Bounded poll of other processes' state; nothing to be notified by.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still runs (a zombie, dead but not yet reaped, does not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // `pid (comm) S ...`: the state follows the last ')'.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
    }
}

/// Starts `ipl-run -n 2` with processes that write their pid to `dir` and sleep, and
/// returns it with the two pids once both are written.
fn start_pool(dir: &Path) -> (Child, Vec<i32>) {
    let script = format!("echo $$ > {}/pid.$IPL_RANK; exec sleep 600", dir.display());
    let child = Command::new(RUN)
        .args(["-n", "2", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ipl-run");
    let pids = within("both processes start", || {
        (0..2)
            .map(|i| {
                std::fs::read_to_string(dir.join(format!("pid.{i}")))
                    .ok()?
                    .trim()
                    .parse::<i32>()
                    .ok()
            })
            .collect::<Option<Vec<i32>>>()
    });
    for &p in &pids {
        assert!(alive(p), "process {p} runs");
    }
    (child, pids)
}

/// Kills every process of `pids` still alive (cleanup if the test failed).
fn cleanup(pids: &[i32]) {
    for &p in pids {
        if alive(p) {
            if let Some(pid) = Pid::from_raw(p) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }
}

fn run(sig: Signal, tag: &str) -> Option<i32> {
    let dir = TempDir::new(tag);
    let (mut ipl_run, pids) = start_pool(&dir.0);
    kill_process(Pid::from_child(&ipl_run), sig).expect("signal ipl-run");
    let status = within("ipl-run ends", || ipl_run.try_wait().unwrap());
    let gone = {
        let start = Instant::now();
        loop {
            if pids.iter().all(|&p| !alive(p)) {
                break true;
            }
            if start.elapsed() > BOUND {
                break false;
            }
            // Bounded poll of other processes' state.
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    cleanup(&pids);
    assert!(gone, "the processes {pids:?} outlived ipl-run ({sig:?})");
    status.code()
}

#[test]
fn sigterm_to_ipl_run_stops_its_processes() {
    let code = run(Signal::TERM, "term");
    assert_eq!(code, Some(143), "ipl-run's status after SIGTERM");
}

#[test]
fn sigkill_of_ipl_run_kills_its_processes() {
    run(Signal::KILL, "kill");
}
