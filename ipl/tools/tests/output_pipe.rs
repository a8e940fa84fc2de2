//! `ipl-run` and `ipl-server` when nobody reads their output (`| head -1`, a closed
//! pipe) or a process writes a line without end: no panic, no unbounded buffer.

use std::io::{PipeReader, PipeWriter};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const RUN: &str = env!("CARGO_BIN_EXE_ipl-run");
const SERVER: &str = env!("CARGO_BIN_EXE_ipl-server");

/// Generous for a loaded machine; the programs here end at once.
const BOUND: Duration = Duration::from_secs(60);

/// A pipe whose reading end is already closed: every write to it fails (EPIPE).
fn closed_pipe() -> PipeWriter {
    let (r, w): (PipeReader, PipeWriter) = std::io::pipe().expect("pipe");
    drop(r);
    w
}

/// Waits for `child` at most [`BOUND`] (killing it after).
fn wait(mut child: Child, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {BOUND:?}");
        }
        // Bounded poll of a child process; nothing to be notified by.
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn ipl_server_exits_quietly_when_nobody_reads_its_banner() {
    let child = Command::new(SERVER)
        .args(["--bind", "127.0.0.1:0"])
        .env_remove("IPL_POOL_SECRET")
        .env_remove("IPL_POOL_SECRET_FILE")
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ipl-server");
    let status = wait(child, "ipl-server with a closed stdout");
    // Before: `println!` panicked (exit status 101).
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn ipl_run_does_not_panic_when_stdout_and_stderr_are_closed() {
    let child = Command::new(RUN)
        .args([
            "-n",
            "2",
            "--grace",
            "1",
            "--",
            "sh",
            "-c",
            "echo hello; exit 3",
        ])
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(closed_pipe())
        .spawn()
        .expect("start ipl-run");
    let status = wait(child, "ipl-run with closed outputs");
    // The processes failed (status 1); before, reporting that panicked (101).
    assert_eq!(status.code(), Some(1), "{status}");
}

#[test]
fn ipl_run_passes_a_line_without_end_on_in_bounded_pieces() {
    let total = 200_000;
    let out = Command::new(RUN)
        .args([
            "-n",
            "1",
            "--",
            "sh",
            "-c",
            &format!("head -c {total} /dev/zero | tr '\\0' x"),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run ipl-run");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 4, "{} lines", lines.len());
    for l in &lines {
        let body = l.strip_prefix("[0] ").expect("every piece has the prefix");
        assert!(
            body.len() <= ipl_tools::launcher::MAX_LINE,
            "a line of {} bytes",
            body.len()
        );
    }
    let xs: usize = lines.iter().map(|l| l.len() - "[0] ".len()).sum();
    assert_eq!(xs, total, "nothing lost");
}
