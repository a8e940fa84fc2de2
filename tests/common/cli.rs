//! The command-line contract every ibis-rs program keeps, checked on the built binary:
//! `--help` prints a usage and exits 0; an unknown option is a clear error on stderr and
//! exit status 2 (clap's usage error), never a panic or a backtrace. Shared by the
//! `cli` tests of every package with binaries (`#[path]`-included).

// Each including test uses only part of it (`check`, or `run` alone).
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a program may take to answer `--help` or reject an argument (it does
/// nothing else), generous for a loaded machine.
pub const BOUND: Duration = Duration::from_secs(60);

/// Runs `bin args`, killing it if it has not exited within [`BOUND`].
pub fn run(bin: &str, args: &[&str]) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < BOUND => {
                // Bounded poll of a child process; nothing to be notified by.
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{bin} {args:?} did not exit within {BOUND:?}");
            }
        }
    }
    child.wait_with_output().expect("collect the output")
}

/// Checks the contract for one program.
pub fn check(bin: &str) {
    let help = run(bin, &["--help"]);
    let out = String::from_utf8_lossy(&help.stdout);
    assert_eq!(help.status.code(), Some(0), "{bin} --help: {help:?}");
    assert!(
        out.contains("Usage:"),
        "{bin} --help prints no usage: {out}"
    );

    let bad = run(bin, &["--no-such-option-xyz"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{bin} with a bad option: {bad:?}"
    );
    assert!(
        err.contains("error") && err.contains("--no-such-option-xyz"),
        "{bin}: the error does not name the bad option: {err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{bin} panicked on a bad option: {err}"
    );
}
