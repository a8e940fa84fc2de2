//! The server side of `ipl-run --malleable`'s control socket
//! ([`ipl::launcher::control`] has the protocol and the client).
//!
//! [`ControlServer::start`] makes a directory private to the user (mode 0700) in the
//! temporary directory, listens on the Unix socket `control` in it, and hands every
//! well-formed request to the supervisor (the loop of [`launch`](crate::launcher::launch))
//! as a [`Pending`] on a channel; the supervisor answers it, and the connection's
//! thread writes the answer. Malformed requests are answered `error REASON` right here
//! and never reach the supervisor.
//!
//! Bounds: at most [`MAX_CONNECTIONS`] connections at once (one more is answered
//! `error busy` and closed), a request line of at most
//! [`MAX_REQUEST`] bytes (a longer one is answered
//! with an error and the connection closed), every read and write within
//! [`IO_TIMEOUT`], and an answer from the supervisor within [`ANSWER_TIMEOUT`]. The
//! directory and the socket are removed by [`ControlServer::shutdown`] (or on drop).

use std::io::{self, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ipl::launcher::control::{Reply, Request, MAX_REQUEST};

use crate::launcher::read_line_capped;

/// The most control connections served at once.
pub const MAX_CONNECTIONS: usize = 4;
/// How long a connection may stay silent, or take to accept an answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection waits for the supervisor's answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// A well-formed request waiting for the supervisor's answer.
#[derive(Debug)]
pub struct Pending {
    /// The request.
    pub request: Request,
    /// Where the answer goes (the connection's thread waits for it).
    pub reply: SyncSender<Reply>,
}

impl Pending {
    /// Answers the request (the connection may be gone: then nobody reads it).
    pub fn answer(self, reply: Reply) {
        let _ = self.reply.send(reply);
    }
}

/// The control socket, listening.
#[derive(Debug)]
pub struct ControlServer {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Listens on a fresh socket; returns it with the channel the requests come on.
    pub fn start() -> io::Result<(ControlServer, Receiver<Pending>)> {
        let dir = tempfile::Builder::new()
            .prefix("ipl-run-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        let path = dir.path().join("control");
        let listener = UnixListener::bind(&path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot listen on the control socket {}: {e}",
                    path.display()
                ),
            )
        })?;
        let (to_supervisor, requests) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let stop = stop.clone();
            thread::Builder::new()
                .name("ipl-run-control".into())
                .spawn(move || accept_loop(listener, to_supervisor, stop))?
        };
        tracing::debug!(path = %path.display(), "control socket listening");
        Ok((
            ControlServer {
                dir: Some(dir),
                path,
                stop,
                accept: Some(accept),
            },
            requests,
        ))
    }

    /// The socket's path (for `IPL_RUN_CONTROL`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting, waits for the accepting thread (within [`ACCEPT_POLL`]) and
    /// removes the socket and its directory. Connections still open end within [`IO_TIMEOUT`]; their requests are
    /// answered `error` (the supervisor is gone).
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            // It sees the flag within one ACCEPT_POLL.
            let _ = t.join();
        }
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                tracing::warn!(error = %e, "cannot remove the control socket's directory");
            }
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Counts a connection while its thread runs.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How often the accepting thread looks for a connection and for the stop flag (a
/// blocking accept could not be woken if the socket file were removed from under it).
const ACCEPT_POLL: Duration = Duration::from_millis(20);

fn accept_loop(listener: UnixListener, to_supervisor: Sender<Pending>, stop: Arc<AtomicBool>) {
    let active = Arc::new(AtomicUsize::new(0));
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!(error = %e, "control socket: cannot poll for connections");
        return;
    }
    while !stop.load(Ordering::SeqCst) {
        let conn = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(ACCEPT_POLL);
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "control accept failed");
                thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        // Blocking, with timeouts, whatever the listener's mode.
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
        let _ = conn.set_read_timeout(Some(IO_TIMEOUT));
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            let busy = Reply::Refused(format!(
                "busy: at most {MAX_CONNECTIONS} control connections at once"
            ));
            let _ = (&conn).write_all(busy.to_line().as_bytes());
            continue;
        }
        let slot = Slot(active.clone());
        let to_supervisor = to_supervisor.clone();
        let stop = stop.clone();
        let spawned = thread::Builder::new()
            .name("ipl-run-control-conn".into())
            .spawn(move || {
                let _slot = slot;
                serve(conn, &to_supervisor, &stop);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot serve a control connection");
        }
    }
}

/// Serves one connection: a request line, its answer, until the peer closes, stays
/// silent for [`IO_TIMEOUT`], or sends a line that is too long.
fn serve(conn: UnixStream, to_supervisor: &Sender<Pending>, stop: &AtomicBool) {
    let mut reader = BufReader::new(&conn);
    let mut line = Vec::with_capacity(MAX_REQUEST + 1);
    loop {
        match read_line_capped(&mut reader, &mut line, MAX_REQUEST + 1) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let too_long = line.len() > MAX_REQUEST;
        let reply = if too_long {
            Reply::Refused(format!("request longer than {MAX_REQUEST} bytes"))
        } else if stop.load(Ordering::SeqCst) {
            Reply::Refused("ipl-run is ending".into())
        } else {
            match Request::parse(&line) {
                Err(e) => Reply::Refused(e.to_string()),
                Ok(request) => ask(to_supervisor, request),
            }
        };
        if let Reply::Refused(reason) = &reply {
            tracing::debug!(%reason, "control request refused");
        }
        if (&conn).write_all(reply.to_line().as_bytes()).is_err() || too_long {
            return;
        }
    }
}

/// Hands `request` to the supervisor and waits for its answer.
fn ask(to_supervisor: &Sender<Pending>, request: Request) -> Reply {
    let (reply, answer) = mpsc::sync_channel(1);
    if to_supervisor.send(Pending { request, reply }).is_err() {
        return Reply::Refused("ipl-run is ending".into());
    }
    match answer.recv_timeout(ANSWER_TIMEOUT) {
        Ok(r) => r,
        Err(RecvTimeoutError::Timeout) => {
            Reply::Refused(format!("ipl-run did not answer within {ANSWER_TIMEOUT:?}"))
        }
        Err(RecvTimeoutError::Disconnected) => Reply::Refused("ipl-run is ending".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Read};

    fn answer_of(conn: &UnixStream) -> String {
        let mut line = String::new();
        // A connection turned away may be closed before the request is read.
        let _ = BufReader::new(conn).read_line(&mut line);
        line
    }

    /// The supervisor's side, in a thread: answers `list` with an empty list until
    /// the channel closes.
    fn supervisor(requests: Receiver<Pending>) -> JoinHandle<usize> {
        thread::spawn(move || {
            let mut served = 0;
            while let Ok(p) = requests.recv() {
                served += 1;
                p.answer(Reply::Listed(vec![]));
            }
            served
        })
    }

    #[test]
    fn malformed_requests_are_answered_here_and_the_socket_is_removed() {
        let (server, requests) = ControlServer::start().unwrap();
        let path = server.path().to_owned();
        let mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "the directory is private");
        let sup = supervisor(requests);
        let conn = UnixStream::connect(&path).unwrap();
        for (line, want) in [
            ("list\n", "ok\n"),
            (
                "bogus\n",
                "error unknown request \"bogus\" (add, remove, list)\n",
            ),
            ("add 0\n", "error count 0 is not in 1..=1024\n"),
            ("list\n", "ok\n"),
        ] {
            (&conn).write_all(line.as_bytes()).unwrap();
            assert_eq!(answer_of(&conn), want, "{line:?}");
        }
        // Too long: answered, then closed.
        (&conn).write_all(&vec![b'x'; MAX_REQUEST + 10]).unwrap();
        let mut rest = String::new();
        (&conn).read_to_string(&mut rest).unwrap();
        assert_eq!(
            rest,
            format!("error request longer than {MAX_REQUEST} bytes\n")
        );
        server.shutdown();
        assert!(!path.exists(), "socket removed");
        assert!(!path.parent().unwrap().exists(), "directory removed");
        assert_eq!(sup.join().unwrap(), 2, "only the well-formed requests");
    }

    #[test]
    fn at_most_max_connections_are_served_at_once() {
        let (server, requests) = ControlServer::start().unwrap();
        let sup = supervisor(requests);
        let conns: Vec<UnixStream> = (0..MAX_CONNECTIONS)
            .map(|_| {
                let c = UnixStream::connect(server.path()).unwrap();
                // Served: its thread answers.
                (&c).write_all(b"list\n").unwrap();
                assert_eq!(answer_of(&c), "ok\n");
                c
            })
            .collect();
        let extra = UnixStream::connect(server.path()).unwrap();
        let mut busy = String::new();
        (&extra).read_to_string(&mut busy).unwrap();
        assert!(busy.starts_with("error busy"), "{busy:?}");
        // One closes: its place is free again (its thread ends when it sees the end).
        drop(conns);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let c = UnixStream::connect(server.path()).unwrap();
            let _ = (&c).write_all(b"list\n");
            if answer_of(&c) == "ok\n" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "a place frees up");
            // The closed connections' threads end by themselves; poll for that.
            thread::sleep(Duration::from_millis(10));
        }
        server.shutdown();
        sup.join().unwrap();
    }
}
