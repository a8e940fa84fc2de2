//! `ipl-server` as a process: the secret from a private file, a refused file, heartbeat
//! options handed to the members.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ipl_auth::PoolSecret;
use ipl_registry::{JoinRequest, NetRegistry, PoolConfig};

const T: Duration = Duration::from_secs(10);

/// A fresh directory under the temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("ipl-server-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn secret_file(dir: &TempDir, secret: &PoolSecret, mode: u32) -> PathBuf {
    let p = dir.0.join("secret");
    std::fs::write(&p, format!("{}\n", secret.to_hex())).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn server(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ipl-server"));
    c.args(args)
        .env_remove("IPL_POOL_SECRET")
        .env_remove("IPL_POOL_SECRET_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[test]
fn serves_with_the_secret_of_a_private_file_and_its_heartbeat() {
    let dir = TempDir::new("ok");
    let secret = PoolSecret::generate().unwrap();
    let file = secret_file(&dir, &secret, 0o600);
    let (server, addr, _) = started(
        &[
            "--secret-file",
            file.to_str().unwrap(),
            "--heartbeat-interval-ms",
            "200",
            "--heartbeat-timeout-ms",
            "1000",
        ],
        None,
    );
    let client = NetRegistry::connect(addr.as_str(), &secret, T).unwrap();
    assert_eq!(client.heartbeat().interval(), Duration::from_millis(200));
    assert_eq!(client.heartbeat().timeout(), Duration::from_millis(1000));
    let m = client
        .join("p", PoolConfig::closed_world(1), JoinRequest::new("c"))
        .unwrap();
    m.wait_until_pool_closed(Some(T)).unwrap();
    m.leave().unwrap();
    drop(server);
}

#[test]
fn refuses_a_secret_file_others_can_read_and_bad_heartbeats() {
    let dir = TempDir::new("open");
    let secret = PoolSecret::generate().unwrap();
    let file = secret_file(&dir, &secret, 0o644);
    let out = server(&[
        "--bind",
        "127.0.0.1:0",
        "--secret-file",
        file.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(file.to_str().unwrap()) && err.contains("chmod 600"),
        "{err}"
    );

    // Also through the environment.
    let out = server(&["--bind", "127.0.0.1:0"])
        .env("IPL_POOL_SECRET_FILE", &file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("group or others"));

    let out = server(&[
        "--bind",
        "127.0.0.1:0",
        "--heartbeat-interval-ms",
        "500",
        "--heartbeat-timeout-ms",
        "500",
    ])
    .output()
    .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("heartbeat timeout"));
}

/// Starts `ipl-server ARGS` on a free port (with `secret` in `IPL_POOL_SECRET`, if
/// given) and returns it with the address of its first line and its second line (the
/// handshake bounds). The lines are read on a thread, to bound the wait.
fn started(args: &[&str], secret: Option<&PoolSecret>) -> (Server, String, String) {
    let mut all = vec!["--bind", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let mut command = server(&all);
    if let Some(secret) = secret {
        command.env("IPL_POOL_SECRET", secret.to_hex());
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send((lines.next(), lines.next()));
        for _ in lines {}
    });
    let (first, second) = rx.recv_timeout(T).unwrap();
    let first = first.unwrap().unwrap();
    let addr = first.rsplit(' ').next().unwrap().to_owned();
    (server, addr, second.unwrap().unwrap())
}

/// `--max-handshakes 1`: while one stranger holds the only handshake slot (for up to
/// the ten minutes of `--handshake-timeout-ms`), the next connection is turned away at
/// once; once the stranger is gone a member joins.
#[test]
fn the_handshake_bound_and_deadline_are_options() {
    let secret = PoolSecret::generate().unwrap();
    let (_server, addr, bounds) = started(
        &["--max-handshakes", "1", "--handshake-timeout-ms", "600000"],
        Some(&secret),
    );
    assert!(
        bounds.contains("at most 1 connections") && bounds.contains("600000 ms"),
        "{bounds}"
    );
    let holder = std::net::TcpStream::connect(&addr).unwrap();
    let mut turned_away = std::net::TcpStream::connect(&addr).unwrap();
    turned_away.set_read_timeout(Some(T)).unwrap();
    let mut rest = Vec::new();
    // Closed at once (after at most a short refusal), long before the deadline.
    std::io::Read::read_to_end(&mut turned_away, &mut rest)
        .expect("the connection beyond the bound is closed at once");
    drop(holder);
    let deadline = std::time::Instant::now() + T;
    let client = loop {
        match NetRegistry::connect(addr.as_str(), &secret, T) {
            Ok(c) => break c,
            Err(e) if std::time::Instant::now() < deadline => {
                // The server frees the slot when it sees the stranger's close.
                let _ = e;
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("no member joins after the stranger left: {e}"),
        }
    };
    let m = client
        .join("p", PoolConfig::closed_world(1), JoinRequest::new("c"))
        .unwrap();
    m.leave().unwrap();
}

/// A member process stopped with SIGSTOP (its connection stays open, nothing answers)
/// is reported Died to the others within the heartbeat bound.
#[test]
fn a_stopped_member_process_is_reported_died() {
    use ipl_registry::net::Heartbeat;
    use ipl_registry::{Event, RegistryServer};
    use rustix::process::{kill_process, Pid, Signal};

    let secret = PoolSecret::generate().unwrap();
    let hb = Heartbeat::new(Duration::from_millis(100), Duration::from_millis(600)).unwrap();
    let srv = RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .with_heartbeat(hb)
        .run_in_background()
        .unwrap();
    let cfg = PoolConfig::closed_world(3);
    let a = NetRegistry::connect(srv.local_addr(), &secret, T)
        .unwrap()
        .join("p", cfg, JoinRequest::new("c"))
        .unwrap();
    // The child joins and waits for a third member that never comes.
    let child = Command::new(env!("CARGO_BIN_EXE_ipl-run-selftest"))
        .env("IPL_REGISTRY", srv.local_addr().to_string())
        .env("IPL_POOL", "p")
        .env("IPL_POOL_SIZE", "3")
        .env("IPL_POOL_SECRET", secret.to_hex())
        .env_remove("IPL_POOL_SECRET_FILE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = Pid::from_child(&child);
    let child = Server(child);
    let joined = loop {
        match a.next_event(Some(T)).unwrap() {
            Some(Event::Joined(m)) if m != *a.identifier() => break m,
            Some(_) => {}
            None => panic!("the child did not join within {T:?}"),
        }
    };
    kill_process(pid, Signal::STOP).unwrap();
    let bound = hb.timeout() + hb.interval() + Duration::from_secs(3);
    let died = loop {
        match a.next_event(Some(bound)).unwrap() {
            Some(Event::Died(m)) => break m,
            Some(_) => {}
            None => panic!("the stopped member was not reported within {bound:?}"),
        }
    };
    assert_eq!(died, joined);
    assert_eq!(a.members().unwrap(), vec![a.identifier().clone()]);
    drop(child); // SIGKILL works on a stopped process.
    a.leave().unwrap();
}
