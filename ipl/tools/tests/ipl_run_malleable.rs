//! `ipl-run --malleable`: a pool that grows and shrinks on its members' requests through
//! the control socket (`IPL_RUN_CONTROL`), end to end with real processes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ipl::launcher::control::{Control, ControlError, MAX_REQUEST};

const RUN: &str = env!("CARGO_BIN_EXE_ipl-run");
const MEMBER: &str = env!("CARGO_BIN_EXE_ipl-run-malleable-selftest");

/// Every wait of a test ends within this (a loaded machine included).
const BOUND: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("ipl-run-malleable-{tag}-{}", std::process::id()));
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
        // Bounded poll of another process's state; nothing to be notified by.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for `child` to end; kills it if it does not.
fn wait(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            panic!("ipl-run did not end within {BOUND:?}");
        }
        // Bounded poll of the child.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `key=value` lines of process `rank`'s output (`[rank] key=value`).
fn lines_of(stdout: &str, rank: usize) -> Vec<String> {
    let prefix = format!("[{rank}] ");
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
        .collect()
}

fn value(lines: &[String], key: &str) -> Option<String> {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
}

#[test]
fn a_member_adds_a_process_that_joins_and_removes_the_others() {
    let out: Output = Command::new(RUN)
        .args(["--malleable", "-n", "2", "--timeout", "120", "--", MEMBER])
        .env_remove("IPL_POOL_SIZE")
        .output()
        .expect("run ipl-run");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "ipl-run: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let driver = lines_of(&stdout, 0);
    assert_eq!(value(&driver, "added").as_deref(), Some("2"), "{stdout}");
    assert_eq!(
        value(&driver, "members").as_deref(),
        Some("member-0,member-1,member-2"),
        "three members in one pool: {stdout}"
    );
    assert_eq!(value(&driver, "list").as_deref(), Some("0,1,2"), "{stdout}");
    for rank in [1, 2] {
        assert!(
            driver.contains(&format!("left=member-{rank}")),
            "member {rank} left the registry: {stdout}"
        );
        let own = lines_of(&stdout, rank);
        assert!(
            own.contains(&format!(
                "joined rank={rank} initial=2 malleable=true name=member-{rank} closed=false"
            )),
            "{stdout}"
        );
        assert!(
            own.contains(&"sigterm: leaving".to_owned()),
            "process {rank} got SIGTERM and left: {stdout}"
        );
        assert!(
            stderr.contains(&format!(
                "[ipl-run] stopping process {rank} on request (SIGTERM)"
            )),
            "{stderr}"
        );
    }
    assert!(
        stderr.contains("[ipl-run] started process 2 in cluster-0 on request"),
        "{stderr}"
    );
    assert_eq!(value(&driver, "live").as_deref(), Some("0"), "{stdout}");
}

/// Starts `ipl-run --malleable` with `extra` options over processes that write their
/// environment's control path and pid to `dir` and then sleep, and returns it with the
/// control socket's path once process 0 has written it.
fn start_sleepers(dir: &Path, extra: &[&str]) -> (Child, PathBuf) {
    start_script(dir, extra, "")
}

/// [`start_sleepers`] whose shell runs `prelude` first.
fn start_script(dir: &Path, extra: &[&str], prelude: &str) -> (Child, PathBuf) {
    let script = format!(
        "{prelude} echo \"$IPL_RUN_CONTROL\" > {d}/control.$IPL_RANK.tmp && \
         mv {d}/control.$IPL_RANK.tmp {d}/control.$IPL_RANK; exec sleep 600",
        d = dir.display()
    );
    let child = Command::new(RUN)
        .args(["--malleable", "--timeout", "120"])
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ipl-run");
    let control = within("process 0 writes the control path", || {
        let p = std::fs::read_to_string(dir.join("control.0")).ok()?;
        Some(PathBuf::from(p.trim()))
    });
    (child, control)
}

/// Sends `line` on `conn` and reads one answer line.
fn ask(conn: &UnixStream, line: &[u8]) -> String {
    (&*conn).write_all(line).unwrap();
    let mut answer = String::new();
    BufReader::new(conn).read_line(&mut answer).unwrap();
    answer
}

#[test]
fn malformed_control_lines_are_answered_with_errors_and_change_nothing() {
    let dir = TempDir::new("malformed");
    let (mut ipl_run, path) = start_sleepers(&dir.0, &["-n", "1"]);
    assert!(path.is_absolute(), "{path:?}");
    let conn = UnixStream::connect(&path).expect("connect to the control socket");
    conn.set_read_timeout(Some(BOUND)).unwrap();
    let before = ask(&conn, b"list\n");
    assert!(before.starts_with("ok 0:cluster-0:"), "{before:?}");
    for bad in [
        &b"grow 3\n"[..],
        b"add\n",
        b"add 0\n",
        b"add -1\n",
        b"add 1 no/such:cluster\n",
        b"add 1 c extra\n",
        b"remove\n",
        b"remove 7\n",
        b"remove 99999999999\n",
        b"list now\n",
        b"\x00\x01\xff\n",
        b"\n",
    ] {
        let answer = ask(&conn, bad);
        assert!(
            answer.starts_with("error ") && answer.ends_with('\n'),
            "{:?} -> {answer:?}",
            text(bad)
        );
    }
    assert_eq!(ask(&conn, b"list\n"), before, "nothing changed");
    // A line longer than the limit: answered, and the connection closed.
    let mut long = vec![b'a'; MAX_REQUEST * 4];
    long.push(b'\n');
    let _ = (&conn).write_all(&long);
    let mut rest = String::new();
    let _ = (&conn).read_to_string(&mut rest);
    assert!(rest.starts_with("error request longer than"), "{rest:?}");
    // The client's view of a refusal, then the end: the only process is removed.
    let control = Control::new(&path);
    let e = control.remove(5).unwrap_err();
    assert!(
        matches!(&e, ControlError::Refused(r) if r.contains("rank 5")),
        "{e:?}"
    );
    control.remove(0).expect("remove 0");
    let status = wait(&mut ipl_run);
    let mut stderr = String::new();
    let _ = ipl_run.stderr.take().unwrap().read_to_string(&mut stderr);
    assert!(
        status.success(),
        "a removed process that ends by the SIGTERM is a success: {status}\n{stderr}"
    );
    assert!(!path.exists(), "the socket is removed when ipl-run ends");
}

#[test]
fn max_processes_is_enforced() {
    let dir = TempDir::new("max");
    let (mut ipl_run, path) = start_sleepers(&dir.0, &["-n", "2", "--max-processes", "3"]);
    let control = Control::new(&path);
    let e = control.add(2, None).unwrap_err();
    assert!(
        matches!(&e, ControlError::Refused(r) if r.contains("--max-processes")),
        "{e:?}"
    );
    assert_eq!(control.list().unwrap().len(), 2, "nothing started");
    assert_eq!(control.add(1, Some("far-away")).unwrap(), vec![2]);
    let e = control.add(1, None).unwrap_err();
    assert!(matches!(e, ControlError::Refused(_)), "{e:?}");
    let list = control.list().unwrap();
    let clusters: BTreeMap<u32, String> =
        list.iter().map(|p| (p.rank, p.cluster.clone())).collect();
    assert_eq!(
        clusters,
        BTreeMap::from([
            (0, "cluster-0".to_owned()),
            (1, "cluster-0".to_owned()),
            (2, "far-away".to_owned())
        ])
    );
    // The added process has the contract of the others, with its own rank.
    let added = within("process 2 writes the control path", || {
        std::fs::read_to_string(dir.0.join("control.2")).ok()
    });
    assert_eq!(PathBuf::from(added.trim()), path);
    // A removed process frees its place (once it ended).
    control.remove(1).unwrap();
    within("process 1 ends", || {
        let l = control.list().ok()?;
        l.iter().all(|p| p.rank != 1).then_some(())
    });
    assert_eq!(control.add(1, None).unwrap(), vec![3]);
    for rank in [0, 2, 3] {
        control.remove(rank).unwrap();
    }
    let status = wait(&mut ipl_run);
    assert!(status.success(), "{status}");
}

#[test]
fn a_removed_process_that_does_not_leave_is_killed_and_fails_the_run() {
    let dir = TempDir::new("stubborn");
    // SIGTERM ignored (kept across the exec): only the kill after the grace ends it.
    let (mut ipl_run, path) = start_script(
        &dir.0,
        &["-n", "1", "--remove-grace", "0.2"],
        "trap '' TERM;",
    );
    Control::new(&path).remove(0).unwrap();
    let status = wait(&mut ipl_run);
    let mut stderr = String::new();
    let _ = ipl_run.stderr.take().unwrap().read_to_string(&mut stderr);
    assert_eq!(status.code(), Some(1), "{status}\n{stderr}");
    assert!(
        stderr.contains("process 0 did not leave within 200ms of its removal"),
        "{stderr}"
    );
}

#[test]
fn a_process_that_fails_unexpectedly_still_fails_the_run() {
    let dir = TempDir::new("fail");
    let (mut ipl_run, path) = start_sleepers(&dir.0, &["-n", "2", "--grace", "60"]);
    let control = Control::new(&path);
    let pid = control.list().unwrap()[1].pid;
    // Not a removal: a kill from outside, as a crash.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    within("process 1 ends", || {
        let l = control.list().ok()?;
        (l.len() == 1).then_some(())
    });
    // A malleable pool whose member failed does not grow any more.
    let e = control.add(1, None).unwrap_err();
    assert!(matches!(e, ControlError::Refused(_)), "{e:?}");
    control.remove(0).unwrap();
    let status = wait(&mut ipl_run);
    assert_eq!(status.code(), Some(1), "{status}");
}

#[test]
fn a_pool_that_is_not_malleable_has_no_control_socket() {
    let out = Command::new(RUN)
        .args([
            "-n",
            "1",
            "--",
            "sh",
            "-c",
            "echo control=${IPL_RUN_CONTROL-unset} malleable=${IPL_POOL_MALLEABLE-unset} \
             size=${IPL_POOL_SIZE-unset}",
        ])
        // Even when ipl-run itself runs inside a malleable pool.
        .env("IPL_RUN_CONTROL", "/tmp/some/other/control")
        .env("IPL_POOL_MALLEABLE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "[0] control=unset malleable=unset size=1"
    );
}
