//! Fault injection below the IPL's ports (issue 20): a peer that dies in the middle of a
//! message, a TCP connection reset in each state of a port connection, a slow reader and
//! a frozen process. Each test starts a registry server in this process and a few
//! `ipl-fault-peer` processes on 127.0.0.1, drives them line by line and waits for the
//! lines they print. Every wait has a deadline; each test states what must happen
//! within which bound (a hang fails the test at the bound, naming what did not come).
//!
//! States are reached deterministically, not by timing: a member is frozen with
//! `SIGSTOP` so that what is sent to it stays in its socket or ring; a sender is known
//! to be blocked in the middle of a message when its thread sleeps after it printed
//! `sending` and the message is larger than everything the kernel and the ring can
//! buffer; a connect is held in the receiver's connection upcall. Resets use `ss -K` on
//! the real TCP connection between the two members (root only: those tests are skipped
//! otherwise, saying so).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_registry::net::Heartbeat;
use ipl_registry::{RegistryServer, ServerHandle};
use ipl_tools::launcher::{unique_pool_name, PoolEnv};

#[path = "../common/sockets.rs"]
mod sockets;
use sockets::{can_reset, connections, port};

/// The bound on each expected line (a reported error, a delivered message, a state):
/// generous for a loaded two-core machine; none of the waits it bounds takes more than
/// a second on an idle one, except where a test says otherwise.
const BOUND: Duration = Duration::from_secs(30);

/// A message larger than everything that can be buffered between two members: TCP's
/// socket buffers (at most 4 MiB each way, doubled by the kernel) and an shm ring
/// (8 MiB). A sender of it to a frozen member is blocked in the middle of it.
const HUGE: usize = 64 << 20;

/// The registry's heartbeats: a frozen member is declared dead after `HEARTBEAT_TIMEOUT`.
/// Some 17 tests of three processes each run at once on two cores: a member that is
/// starved (not frozen) must not miss its heartbeats for that long, and a frozen one
/// is still declared dead well within [`BOUND`].
const HEARTBEAT_INTERVAL_MS: u64 = 1_000;
const HEARTBEAT_TIMEOUT_MS: u64 = 6_000;

/// The transports' bound on a sender that makes no progress (a frozen receiver).
const SEND_TIMEOUT_MS: u64 = 3_000;

/// One `ipl-fault-peer` process: its standard input, and the lines it printed.
struct Member {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every line (stdout and stderr) so far, for failure messages.
    log: Arc<Mutex<Vec<String>>>,
    /// Lines read from `lines` but not yet matched.
    unmatched: VecDeque<String>,
}

impl Member {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn say(&mut self, cmd: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{cmd}").expect("write a command");
        stdin.flush().expect("flush a command");
    }

    /// Waits (at most `bound`) for a line starting with one of `prefixes`; returns it.
    fn expect_any(&mut self, prefixes: &[&str], bound: Duration) -> String {
        let deadline = Instant::now() + bound;
        if let Some(i) = self
            .unmatched
            .iter()
            .position(|l| prefixes.iter().any(|p| l.starts_with(p)))
        {
            return self.unmatched.remove(i).unwrap_or_default();
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if prefixes.iter().any(|p| l.starts_with(p)) => return l,
                Ok(l) => self.unmatched.push_back(l),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no line {prefixes:?} within {bound:?}; it printed:\n{}",
                    self.name,
                    self.log()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: ended without a line {prefixes:?}; it printed:\n{}",
                    self.name,
                    self.log()
                ),
            }
        }
    }

    fn expect(&mut self, prefix: &str) -> String {
        self.expect_any(&[prefix], BOUND)
    }

    fn log(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {}", self.pid());
    }

    /// Whether the thread running its commands sleeps (blocked in a system call or on a
    /// lock or condition variable).
    fn main_thread_sleeps(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{0}/task/{0}/stat", self.pid()))
            .unwrap_or_default();
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
    }

    /// Waits until the thread running its commands sleeps in a command that printed
    /// `line` (the state a test wants to cut it in).
    fn wait_blocked_after(&mut self, line: &str) {
        self.expect(line);
        let deadline = Instant::now() + BOUND;
        // Two readings in a row, so that a thread between two steps is not taken for a
        // blocked one.
        let mut sleeping = 0;
        while sleeping < 2 {
            assert!(
                Instant::now() < deadline,
                "{} never blocked after {line:?}:\n{}",
                self.name,
                self.log()
            );
            sleeping = if self.main_thread_sleeps() {
                sleeping + 1
            } else {
                0
            };
            // Bounded poll of another process's state; nothing to be notified by.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A pool of `ipl-fault-peer` processes with its registry server in this process.
struct Pool {
    server: Option<ServerHandle>,
    members: Vec<Member>,
}

impl Pool {
    /// Starts `n` members over `transport` (`member-0` .. `member-N-1`) and waits until
    /// each is `ready`.
    fn start(transport: &str, n: usize, env: &[(&str, &str)]) -> Pool {
        let secret = PoolSecret::generate().expect("a secret");
        let heartbeat = Heartbeat::from_millis(HEARTBEAT_INTERVAL_MS, HEARTBEAT_TIMEOUT_MS)
            .expect("heartbeat settings");
        let server = RegistryServer::bind("127.0.0.1:0", secret.clone())
            .expect("bind the registry")
            .with_heartbeat(heartbeat)
            .run_in_background()
            .expect("run the registry");
        let pool = unique_pool_name();
        let config = format!(
            "tcp.send_timeout_ms={SEND_TIMEOUT_MS};shm.send_timeout_ms={SEND_TIMEOUT_MS};interfaces=127.0.0.1"
        );
        let mut members = Vec::new();
        for i in 0..n {
            let mut child = Command::new(env!("CARGO_BIN_EXE_ipl-fault-peer"))
                .envs(env.iter().copied())
                .env("IPL_TRANSPORT", transport)
                .env("FAULT_TRANSPORT_CONFIG", &config)
                .env("RUST_LOG", "warn")
                .envs(PoolEnv::member(server.local_addr(), &pool, n, &secret, "c0", i).vars())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start ipl-fault-peer");
            let log = Arc::new(Mutex::new(Vec::new()));
            let (tx, lines) = mpsc::channel();
            let out = child.stdout.take().expect("stdout");
            let (l, t) = (Arc::clone(&log), tx.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Ok(mut g) = l.lock() {
                        g.push(line.clone());
                    }
                    let _ = t.send(line);
                }
            });
            let err = child.stderr.take().expect("stderr");
            let l = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    if let Ok(mut g) = l.lock() {
                        g.push(format!("stderr: {line}"));
                    }
                }
            });
            let stdin = child.stdin.take();
            members.push(Member {
                name: format!("member-{i}"),
                child,
                stdin,
                lines,
                log,
                unmatched: VecDeque::new(),
            });
        }
        let mut p = Pool {
            server: Some(server),
            members,
        };
        for m in &mut p.members {
            m.expect("ready");
        }
        p
    }

    fn m(&mut self, i: usize) -> &mut Member {
        &mut self.members[i]
    }

    /// Member `rank` listens on `port` and member `from` connects to it.
    fn connect(&mut self, from: usize, rank: usize, port: &str) {
        self.m(rank).say(&format!("listen {port}"));
        self.m(rank).expect("listening");
        self.m(from).say(&format!("connect {port} member-{rank}"));
        let l = self
            .m(from)
            .expect_any(&["connected", "connect-error"], BOUND);
        assert!(l.starts_with("connected"), "{l}");
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for m in &mut self.members {
            let _ = m.child.kill();
            let _ = m.child.wait();
        }
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

/// A member killed (SIGKILL) in the middle of sending a message larger than what can be
/// buffered, so that the receiver holds part of it: the receiver's blocking `receive`
/// ends with an error naming the lost connection within [`BOUND`] of the receiver
/// running again (before the fix it waited forever), and its connection with a third
/// member still carries messages both ways.
fn peer_killed_mid_message(transport: &str) {
    let mut pool = Pool::start(transport, 3, &[]);
    pool.connect(1, 0, "in");
    pool.connect(2, 0, "side");
    pool.connect(0, 2, "back");
    // The receiver is frozen, so the message stops in the buffers; the sender blocks in
    // its middle.
    pool.m(0).signal("STOP");
    pool.m(1).say(&format!("send in 1 {HUGE}"));
    pool.m(1).wait_blocked_after("sending in 0");
    pool.m(1).signal("KILL");
    let _ = pool.m(1).child.wait();
    pool.m(0).signal("CONT");
    pool.m(0).say("recv in 1");
    let l = pool.m(0).expect_any(&["recv-error in", "got in"], BOUND);
    assert!(
        l.starts_with("recv-error in") && l.contains("lost"),
        "the receiver got {l:?}, not an error for the lost connection"
    );
    // The other connections of the receiver are unaffected.
    pool.m(2).say("send side 1 1000");
    pool.m(2).expect("sent side 0");
    pool.m(0).say("recv side 1");
    pool.m(0).expect("got side 0");
    pool.m(0).say("send back 1 1000");
    pool.m(0).expect("sent back 0");
    pool.m(2).say("recv back 1");
    pool.m(2).expect("got back 0");
}

#[test]
fn peer_killed_mid_message_tcp() {
    peer_killed_mid_message("tcp");
}

#[test]
fn peer_killed_mid_message_shm() {
    peer_killed_mid_message("shm");
}

/// A slow reader: the receiver pauses 5 ms before each of 300 messages of 64 KiB while
/// the window is 1 MiB. The sender is throttled by the window (the receiver never has
/// more than a window's worth of messages queued: memory stays bounded), nothing is lost,
/// and every message arrives in order with its contents. Bound: [`BOUND`] after the
/// reader is done (about 1.5 s of pauses).
fn slow_reader(transport: &str) {
    const N: u64 = 300;
    const SIZE: usize = 64 << 10;
    const WINDOW: u64 = 1 << 20;
    let mut pool = Pool::start(transport, 2, &[("IPL_WINDOW_BYTES", "1048576")]);
    pool.connect(1, 0, "in");
    pool.m(1).say(&format!("send in {N} {SIZE}"));
    pool.m(0).say(&format!("slow in {N} 5"));
    let l = pool.m(0).expect_any(
        &["slow-done", "slow-error"],
        BOUND + Duration::from_millis(5 * N),
    );
    let most: u64 = l
        .strip_prefix(&format!("slow-done in {N} "))
        .unwrap_or_else(|| panic!("the slow reader failed: {l}"))
        .parse()
        .expect("a count");
    // A message costs its size plus the 8-byte number and the 16-byte header.
    let per_window = WINDOW / (SIZE as u64 + 24) + 1;
    assert!(
        most <= per_window,
        "{most} messages were queued at the receiver, more than a window's {per_window}"
    );
    let l = pool
        .m(1)
        .expect_any(&[&format!("sent in {}", N - 1), "send-error"], BOUND);
    assert!(l.starts_with("sent"), "{l}");
}

#[test]
fn slow_reader_tcp() {
    slow_reader("tcp");
}

#[test]
fn slow_reader_shm() {
    slow_reader("shm");
}

/// A frozen member (SIGSTOP, kept stopped beyond the registry's heartbeat timeout of
/// 6 s and the transports' send timeout of 3 s): the others see it `Died` and a sender
/// blocked in the middle of a message to it gets an error, each within [`BOUND`]. Then
/// `cont`: resumed, it gets a clear error from the registry (it was declared dead) and
/// for the lost connection; or killed, nothing hangs either: the survivor closes its
/// port and leaves.
fn frozen_member(transport: &str, resume: bool) {
    let mut pool = Pool::start(transport, 3, &[]);
    pool.connect(1, 2, "in");
    pool.connect(0, 1, "alive");
    pool.m(2).signal("STOP");
    pool.m(0).say("watch member-2");
    pool.m(1).say(&format!("send in 1 {HUGE}"));
    pool.m(0).expect("died member-2");
    let l = pool
        .m(1)
        .expect_any(&["send-error in 0", "sent in 0"], BOUND);
    assert!(l.starts_with("send-error"), "{l}");
    // The survivors still talk.
    pool.m(0).say("send alive 1 100");
    pool.m(1).say("recv alive 1");
    pool.m(1).expect("got alive 0");
    if resume {
        pool.m(2).signal("CONT");
        pool.m(2).say("recv in 1");
        let l = pool.m(2).expect_any(&["recv-error in", "got in"], BOUND);
        assert!(l.starts_with("recv-error"), "{l}");
        // The registry declared it dead: a call fails (soon after the resumed client
        // notices its connection is gone).
        let deadline = Instant::now() + BOUND;
        loop {
            pool.m(2).say("registry");
            if pool
                .m(2)
                .expect_any(&["registry-ok", "registry-error"], BOUND)
                .starts_with("registry-error")
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the resumed member is still in the registry"
            );
        }
        pool.m(2).say("exit");
        pool.m(2).expect("bye");
    } else {
        pool.m(2).signal("KILL");
    }
    pool.m(1).say("disconnect in");
    pool.m(1).expect("disconnected in");
    pool.m(1).say("close alive");
    pool.m(1).expect("closed alive");
    pool.m(1).say("exit");
    pool.m(1).expect("bye");
}

#[test]
fn frozen_member_resumed_tcp() {
    frozen_member("tcp", true);
}

#[test]
fn frozen_member_killed_tcp() {
    frozen_member("tcp", false);
}

#[test]
fn frozen_member_resumed_shm() {
    frozen_member("shm", true);
}

#[test]
fn frozen_member_killed_shm() {
    frozen_member("shm", false);
}

/// Resets (`ss -K`) every TCP connection between members `a` and `b`, from `a`'s end
/// (the kernel aborts that socket and sends the peer a reset). Returns how many.
fn reset_between(a: &Member, b: &Member) -> usize {
    let conns = connections(&[a.pid(), b.pid()]);
    let mut n = 0;
    for c in conns.iter().filter(|c| c.pid == a.pid()) {
        let to_b = conns.iter().any(|o| {
            o.pid == b.pid() && port(&o.local) == port(&c.peer) && port(&o.peer) == port(&c.local)
        });
        if to_b {
            assert!(sockets::reset(c), "ss -K {} {} failed", c.local, c.peer);
            n += 1;
        }
    }
    n
}

/// Member 0 listens on `in`, member 1 is the sender; tcp, `env` for both. None without
/// root (said on stderr).
fn reset_pool(env: &[(&str, &str)]) -> Option<Pool> {
    if !can_reset() {
        eprintln!("skipped: resetting TCP connections needs root and ss (ss -K)");
        return None;
    }
    Some(Pool::start("tcp", 2, env))
}

/// Resets the connection between the two members and checks that one was there.
fn reset(pool: &mut Pool) {
    let n = reset_between(&pool.members[1], &pool.members[0]);
    assert!(n > 0, "no TCP connection between the members to reset");
}

/// Reset while a connect waits for the receiver's answer (held in its connection
/// upcall): the sender's connect fails with the lost connection within [`BOUND`], not
/// at its 60 s timeout; the receiver keeps no connection; a new connect then succeeds
/// and carries a message (recovery within [`BOUND`] each).
#[test]
fn reset_during_connect() {
    let Some(mut pool) = reset_pool(&[]) else {
        return;
    };
    pool.m(0).say("listen in");
    pool.m(0).expect("listening in");
    pool.m(0).say("hold");
    pool.m(0).expect("holding");
    pool.m(1).say("connect in member-0");
    pool.m(0).expect("connect-request in");
    reset(&mut pool);
    let l = pool
        .m(1)
        .expect_any(&["connect-error in", "connected in"], BOUND);
    assert!(
        l.starts_with("connect-error") && !l.contains("timed out"),
        "the connect did not fail with the lost connection: {l}"
    );
    pool.m(0).say("release");
    wait_connections(&mut pool, 0, "in", 0);
    pool.m(1).say("connect in member-0");
    let l = pool
        .m(1)
        .expect_any(&["connect-error in", "connected in"], BOUND);
    assert!(l.starts_with("connected"), "no recovery: {l}");
    pool.m(1).say("send in 1 100");
    pool.m(1).expect("sent in 0");
    pool.m(0).say("recv in 1");
    pool.m(0).expect("got in 0");
}

/// Waits (at most [`BOUND`]) until member `rank`'s port has `n` connections.
fn wait_connections(pool: &mut Pool, rank: usize, port: &str, n: usize) {
    let deadline = Instant::now() + BOUND;
    loop {
        pool.m(rank).say(&format!("connections {port}"));
        let l = pool.m(rank).expect(&format!("connections {port}"));
        if l == format!("connections {port} {n}") {
            return;
        }
        assert!(Instant::now() < deadline, "member-{rank}: still {l}");
    }
}

/// Reset of an idle connection: the next send fails, and the receiver's receive ends
/// with the lost connection, each within [`BOUND`].
#[test]
fn reset_idle_connection() {
    let Some(mut pool) = reset_pool(&[]) else {
        return;
    };
    pool.connect(1, 0, "in");
    reset(&mut pool);
    pool.m(1).say("send in 1 100");
    let l = pool
        .m(1)
        .expect_any(&["send-error in 0", "sent in 0"], BOUND);
    assert!(l.starts_with("send-error"), "{l}");
    pool.m(0).say("recv in 1");
    let l = pool.m(0).expect_any(&["recv-error in", "got in"], BOUND);
    assert!(l.starts_with("recv-error"), "{l}");
}

/// Reset in the middle of a message (the receiver frozen, so that a 64 MiB message
/// stops in the buffers with the sender blocked in it): the sender's finish and the
/// resumed receiver's receive both end with an error within [`BOUND`].
#[test]
fn reset_mid_message() {
    let Some(mut pool) = reset_pool(&[]) else {
        return;
    };
    pool.connect(1, 0, "in");
    pool.m(0).signal("STOP");
    pool.m(1).say(&format!("send in 1 {HUGE}"));
    pool.m(1).wait_blocked_after("sending in 0");
    reset(&mut pool);
    let l = pool
        .m(1)
        .expect_any(&["send-error in 0", "sent in 0"], BOUND);
    pool.m(0).signal("CONT");
    assert!(l.starts_with("send-error"), "{l}");
    pool.m(0).say("recv in 1");
    let l = pool.m(0).expect_any(&["recv-error in", "got in"], BOUND);
    assert!(l.starts_with("recv-error"), "{l}");
}

/// Reset while the sender waits for credits (window 64 KiB, messages of 16 KiB, the
/// receiver reads nothing: the fourth message waits): that message's finish fails
/// within [`BOUND`] (before the fix it returned Ok although the message went nowhere,
/// and only the next one failed); the receiver gets the three messages that arrived,
/// then the lost-connection error.
#[test]
fn reset_while_waiting_for_credits() {
    let Some(mut pool) = reset_pool(&[("IPL_WINDOW_BYTES", "65536")]) else {
        return;
    };
    pool.connect(1, 0, "in");
    pool.m(1).say("send in 8 16384");
    pool.m(1).expect("sent in 2");
    pool.m(1).wait_blocked_after("sending in 3");
    reset(&mut pool);
    let l = pool.m(1).expect_any(&["send-error in", "sent in 3"], BOUND);
    assert!(
        l.starts_with("send-error in 3"),
        "the message waiting for credits was not reported undelivered: {l}"
    );
    pool.m(0).say("recv in 4");
    for i in 0..3 {
        pool.m(0).expect(&format!("got in {i}"));
    }
    let l = pool.m(0).expect_any(&["recv-error in", "got in"], BOUND);
    assert!(l.starts_with("recv-error"), "{l}");
}

/// Reset after the sender closed its port (the receiver frozen, so the disconnect is
/// not processed yet): the sender's close returns, the receiver's port ends the
/// connection (closed or lost) and closes, and the two connect again, each within
/// [`BOUND`].
#[test]
fn reset_during_disconnect() {
    let Some(mut pool) = reset_pool(&[]) else {
        return;
    };
    pool.connect(1, 0, "in");
    pool.m(0).signal("STOP");
    pool.m(1).say("disconnect in");
    pool.m(1).expect("disconnected in");
    reset(&mut pool);
    pool.m(0).signal("CONT");
    wait_connections(&mut pool, 0, "in", 0);
    pool.m(0).say("close in");
    pool.m(0).expect("closed in 0");
    pool.connect(1, 0, "again");
    pool.m(1).say("send again 1 100");
    pool.m(1).expect("sent again 0");
    pool.m(0).say("recv again 1");
    pool.m(0).expect("got again 0");
}

/// A frozen member whose sender waits for credits (window 64 KiB, smaller than the
/// socket buffers and the ring, so no transport timeout can fire: the messages fit in
/// them): once the registry declares it dead (heartbeat timeout 6 s), the message
/// waiting for credits fails within [`BOUND`], instead of waiting for credits that can
/// never come.
fn frozen_member_while_waiting_for_credits(transport: &str) {
    let mut pool = Pool::start(transport, 3, &[("IPL_WINDOW_BYTES", "65536")]);
    pool.connect(1, 2, "in");
    pool.m(2).signal("STOP");
    pool.m(1).say("send in 8 16384");
    pool.m(1).wait_blocked_after("sending in 3");
    pool.m(0).say("watch member-2");
    pool.m(0).expect("died member-2");
    let l = pool.m(1).expect_any(&["send-error in", "sent in 3"], BOUND);
    assert!(l.starts_with("send-error in 3"), "{l}");
    pool.m(2).signal("KILL");
}

#[test]
fn frozen_member_while_waiting_for_credits_tcp() {
    frozen_member_while_waiting_for_credits("tcp");
}

#[test]
fn frozen_member_while_waiting_for_credits_shm() {
    frozen_member_while_waiting_for_credits("shm");
}

/// A frozen sender (SIGSTOP): the receiver blocked in `receive` on its only connection
/// gets the lost-connection error within [`BOUND`] once the registry declares the
/// sender dead (heartbeat timeout 6 s), instead of waiting forever on a connection the
/// frozen process keeps open.
fn frozen_sender(transport: &str) {
    let mut pool = Pool::start(transport, 3, &[]);
    pool.connect(1, 0, "in");
    pool.m(1).signal("STOP");
    pool.m(0).say("recv in 1");
    pool.m(2).say("watch member-1");
    pool.m(2).expect("died member-1");
    let l = pool.m(0).expect_any(&["recv-error in", "got in"], BOUND);
    assert!(l.starts_with("recv-error in"), "{l}");
    pool.m(1).signal("KILL");
}

#[test]
fn frozen_sender_tcp() {
    frozen_sender("tcp");
}

#[test]
fn frozen_sender_shm() {
    frozen_sender("shm");
}

/// A receive port closed without a bound (`close(None)`: it waits for its senders to
/// leave) while its only sender is frozen: the close returns within [`BOUND`] once the
/// registry declares the sender dead.
fn close_with_frozen_sender(transport: &str) {
    let mut pool = Pool::start(transport, 3, &[]);
    pool.connect(1, 0, "in");
    pool.m(1).signal("STOP");
    pool.m(0).say("close-wait in");
    pool.m(2).say("watch member-1");
    pool.m(2).expect("died member-1");
    pool.m(0).expect("closed in");
    pool.m(1).signal("KILL");
}

#[test]
fn close_with_frozen_sender_tcp() {
    close_with_frozen_sender("tcp");
}

#[test]
fn close_with_frozen_sender_shm() {
    close_with_frozen_sender("shm");
}
