//! `ipl-run --launcher` end to end with stand-in launchers (`env`, and a script named
//! like Open MPI's), so that no MPI or Slurm is needed: what the tasks get, the exit
//! status, the timeout and SIGTERM. The real launchers are in the `ibis-tests` crate
//! (`tests/launchers.rs`).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ipl_tools::launcher::EXIT_TIMEOUT;

const RUN: &str = env!("CARGO_BIN_EXE_ipl-run");

/// ipl-run with `args`, none of the test's own IPL_*, SATIN_* or RUST_LOG, and three
/// of its own.
fn run(args: &[&str]) -> Output {
    let mut cmd = Command::new(RUN);
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if name.starts_with("IPL_") || name.starts_with("SATIN_") || name == "RUST_LOG" {
            cmd.env_remove(&k);
        }
    }
    cmd.args(args)
        .env("IPL_RANK", "9")
        .env("IPL_POOL_SIZE", "10")
        .env("IPL_TRANSPORT", "tcp")
        .output()
        .expect("run ipl-run")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn temp_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipl-run-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_tasks_get_the_registry_pool_and_secret_but_no_rank_or_size() {
    let out = run(&[
        "--registry-address",
        "127.0.0.1",
        "--registry-bind",
        "127.0.0.1:0",
        "--launcher",
        "env",
        "--",
        "sh",
        "-c",
        "echo reg=$IPL_REGISTRY pool=$IPL_POOL secret=${#IPL_POOL_SECRET} \
         rank=${IPL_RANK:-none} size=${IPL_POOL_SIZE:-none} transport=$IPL_TRANSPORT",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("reg=127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("pool=ipl-"), "{stdout}");
    assert!(stdout.contains("secret=64"), "{stdout}");
    // Each task's own launcher gives rank and size; ipl-run's own are not passed on.
    assert!(stdout.contains("rank=none size=none"), "{stdout}");
    assert!(stdout.contains("transport=tcp"), "{stdout}");
}

#[test]
fn the_launchers_exit_status_is_ipl_runs() {
    let out = run(&["--launcher", "env", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
}

#[test]
fn open_mpi_gets_minus_x_for_every_variable() {
    let dir = temp_dir("openmpi");
    let fake = dir.join("mpirun.openmpi");
    let args_file = dir.join("args.txt");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$@\" > {}\n", args_file.display()),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let launcher = format!("{} -n 4", fake.display());
    let out = run(&["--launcher", &launcher, "--", "fib", "30"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let args = std::fs::read_to_string(&args_file).unwrap();
    assert_eq!(
        args.trim(),
        "-x IPL_REGISTRY -x IPL_POOL -x IPL_POOL_SECRET -x IPL_TRANSPORT -n 4 fib 30"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_timeout_stops_the_launcher() {
    let t0 = Instant::now();
    let out = run(&["--timeout", "0.5", "--launcher", "env", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(EXIT_TIMEOUT));
    assert!(t0.elapsed() < Duration::from_secs(20));
}

#[test]
fn sigterm_stops_the_launcher() {
    let mut child = Command::new(RUN)
        .args([
            "--launcher",
            "env",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 30",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the task runs (its first line), so the signal meets a running launcher.
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    assert_eq!(first.trim(), "started");
    let t0 = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let until = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "ipl-run did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(128 + 15));
    assert!(t0.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_missing_launcher_is_an_error_naming_it() {
    let out = run(&["--launcher", "/nonexistent/srun -n 2", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/nonexistent/srun"));
}
