//! `ipl-run --keep-going`: a member killed with SIGKILL does not stop the others, and
//! the pool's outcome is judged as for a fault-tolerant program; without the option a
//! crash fails the run as before.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::thread;

use rustix::process::{kill_process, Pid, Signal};

const RUN: &str = env!("CARGO_BIN_EXE_ipl-run");
const SELFTEST: &str = env!("CARGO_BIN_EXE_ipl-run-selftest");

/// What a crash run printed.
struct Crash {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// `ipl-run [extra...] -n 3 --timeout 60 -- ipl-run-selftest` with rank 1 doomed: the
/// test kills it with SIGKILL as soon as it prints its pid (once the pool is closed,
/// so the others are waiting for its death). Every wait is bounded by ipl-run's
/// `--timeout` (the output ends when ipl-run does).
fn crash_run(extra: &[&str]) -> Crash {
    let mut child = Command::new(RUN)
        .args(extra)
        .args(["-n", "3", "--timeout", "60", "--", SELFTEST])
        .env("IPL_SELFTEST_CRASH_RANK", "1")
        .env_remove("IPL_SELFTEST_FAIL_RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ipl-run");
    let mut err = child.stderr.take().unwrap();
    let stderr = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    let mut killed = false;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.expect("read ipl-run's output");
        if let Some(pid) = line.strip_prefix("[1] pid=") {
            let pid: i32 = pid.split_whitespace().next().unwrap().parse().unwrap();
            assert!(!killed, "one pid line");
            kill_process(Pid::from_raw(pid).unwrap(), Signal::KILL).expect("SIGKILL rank 1");
            killed = true;
        }
        stdout.push_str(&line);
        stdout.push('\n');
    }
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(killed, "rank 1 never printed its pid\n{stdout}\n{stderr}");
    Crash {
        status,
        stdout,
        stderr,
    }
}

/// The survivors' lines: ranks 0 and 2, each having seen member-1 die.
fn assert_survivors_finished(c: &Crash) {
    for rank in [0, 2] {
        let prefix = format!("[{rank}] member=");
        let line = c
            .stdout
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no line of rank {rank}:\n{}\n{}", c.stdout, c.stderr));
        assert!(line.ends_with("survived=member-1"), "{line}");
    }
}

#[test]
fn with_keep_going_a_member_killed_by_sigkill_does_not_stop_the_pool() {
    // --grace 0: without --keep-going the survivors would be killed at once.
    let c = crash_run(&["--keep-going", "--grace", "0"]);
    assert_eq!(
        c.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        c.stdout,
        c.stderr
    );
    assert!(
        c.stderr.contains(
            "[ipl-run] process 1 failed (signal: 9 (SIGKILL)); the others keep running (--keep-going)"
        ),
        "{}",
        c.stderr
    );
    assert!(!c.stderr.contains("killing process"), "{}", c.stderr);
    assert_survivors_finished(&c);
}

#[test]
fn without_keep_going_a_member_killed_by_sigkill_fails_the_run() {
    // A long grace: the survivors finish by themselves, only the verdict differs.
    let c = crash_run(&["--grace", "30"]);
    assert_eq!(c.status.code(), Some(1), "{}", c.stderr);
    assert!(
        c.stderr.contains(
            "[ipl-run] process 1 failed (signal: 9 (SIGKILL)); the others have 30s to finish"
        ),
        "{}",
        c.stderr
    );
    assert!(
        c.stderr
            .contains("[ipl-run] process 1: signal: 9 (SIGKILL)"),
        "{}",
        c.stderr
    );
    assert_survivors_finished(&c);
}

fn sh(args: &[&str], script: &str) -> Output {
    Command::new(RUN)
        .args(args)
        .args(["--timeout", "60", "--", "sh", "-c", script])
        .output()
        .expect("run ipl-run")
}

#[test]
fn with_keep_going_an_error_exit_still_fails_the_run() {
    // Rank 1 reports an error (status 3), rank 0 finishes.
    let out = sh(&["--keep-going", "-n", "2"], "exit $((IPL_RANK * 3))");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("process 1 failed (exit status: 3); the others keep running"),
        "{stderr}"
    );
}

#[test]
fn with_keep_going_crashes_alone_need_one_process_that_finished() {
    // Rank 1 kills itself, rank 0 finishes: success.
    let out = sh(
        &["--keep-going", "-n", "2"],
        "if [ \"$IPL_RANK\" = 1 ]; then kill -9 $$; fi",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Everybody crashed: nobody finished the run.
    let out = sh(&["--keep-going", "-n", "2"], "kill -9 $$");
    assert_eq!(out.status.code(), Some(1));
}
