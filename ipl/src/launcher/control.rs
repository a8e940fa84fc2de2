//! The control channel of a malleable pool: a member asks `ipl-run --malleable` to start
//! more processes of the program or to stop one, so that the pool grows and shrinks
//! while it runs (Satin's adaptivity uses it).
//!
//! `ipl-run` listens on a Unix socket in a directory private to the user and passes its
//! path to every process in `IPL_RUN_CONTROL` ([`ENV_CONTROL`]); without `--malleable`
//! the variable is not set and [`Control::from_env`] gives `None`.
//!
//! # Protocol
//!
//! One request per line (ASCII, at most [`MAX_REQUEST`] bytes with its `\n`), one answer
//! line each (at most [`MAX_ANSWER`] bytes); a connection may carry several.
//!
//! | Request | Answer | Effect |
//! |---|---|---|
//! | `add K [CLUSTER]` | `ok RANK...` | starts K (1 to [`MAX_ADD`]) more processes with the next ranks, same command and environment, in CLUSTER (letters, digits, `.`, `_`, `-`; at most [`MAX_CLUSTER_NAME`] bytes), else in `ipl-run`'s clusters in turn |
//! | `remove RANK` | `ok` | sends process RANK SIGTERM: it is expected to leave the pool and exit 0 |
//! | `list` | `ok RANK:CLUSTER:PID:STATE...` | the processes still running; STATE is `running`, or `leaving` after a `remove` |
//!
//! Anything else, or a request `ipl-run` cannot carry out (more processes than
//! `--max-processes`, a rank that is not running), is answered `error REASON` and
//! changes nothing. [`Request`] and [`Reply`] are the two sides' parsers and printers,
//! without any I/O; [`Control`] is the client.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The variable holding the path of `ipl-run`'s control socket.
pub const ENV_CONTROL: &str = "IPL_RUN_CONTROL";
/// The longest request line, in bytes, with its newline.
pub const MAX_REQUEST: usize = 256;
/// The longest answer line, in bytes, with its newline.
pub const MAX_ANSWER: usize = 256 * 1024;
/// The longest cluster name in a request.
pub const MAX_CLUSTER_NAME: usize = 64;
/// The most processes one `add` may ask for.
pub const MAX_ADD: u32 = 1024;
/// The longest reason of an `error` answer, in bytes (a longer one is cut).
pub const MAX_REASON: usize = 1024;
/// How long a [`Control`] call may take unless [`Control::with_timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest socket path (`sun_path` holds 108 bytes with the terminating zero).
const MAX_PATH: usize = 107;

/// A request of a member to `ipl-run`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Start `count` more processes, in `cluster` if given.
    Add {
        /// How many, 1 to [`MAX_ADD`].
        count: u32,
        /// Their cluster; `None`: `ipl-run`'s clusters in turn.
        cluster: Option<String>,
    },
    /// Stop the process of this rank (SIGTERM).
    Remove {
        /// Its rank.
        rank: u32,
    },
    /// The processes still running.
    List,
}

/// One running process, as `list` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    /// Its rank (`IPL_RANK`).
    pub rank: u32,
    /// Its cluster (`IPL_CLUSTER`).
    pub cluster: String,
    /// Its process id.
    pub pid: u32,
    /// Whether it was sent SIGTERM by a `remove` and is leaving.
    pub leaving: bool,
}

/// `ipl-run`'s answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// To `add`: the ranks of the processes started.
    Added(Vec<u32>),
    /// To `remove`: SIGTERM was sent.
    Removed,
    /// To `list`: the processes still running.
    Listed(Vec<Process>),
    /// To anything: `error REASON`, nothing changed.
    Refused(String),
}

/// A request or answer line that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Nothing but white space.
    #[error("empty line")]
    Empty,
    /// Longer than the limit.
    #[error("line longer than {max} bytes")]
    TooLong {
        /// The limit.
        max: usize,
    },
    /// Not ASCII text, or with control characters.
    #[error("not a line of ASCII text")]
    NotText,
    /// A first word that is no request (or answer).
    #[error("unknown request {0:?} (add, remove, list)")]
    Unknown(String),
    /// A required word is missing.
    #[error("{0} is missing")]
    Missing(&'static str),
    /// More words than the request takes.
    #[error("unexpected {0:?}")]
    Extra(String),
    /// Not a decimal number that fits.
    #[error("{what} {value:?} is not a number")]
    BadNumber {
        /// What it should be.
        what: &'static str,
        /// The word.
        value: String,
    },
    /// An `add` count outside `1..=MAX_ADD`.
    #[error("count {0} is not in 1..={MAX_ADD}")]
    BadCount(u32),
    /// A cluster name with other characters, empty, or too long.
    #[error("cluster name {0:?} is not 1 to {MAX_CLUSTER_NAME} letters, digits, '.', '_' or '-'")]
    BadCluster(String),
    /// A `list` entry that is not `RANK:CLUSTER:PID:STATE`.
    #[error("process entry {0:?} is not RANK:CLUSTER:PID:running|leaving")]
    BadEntry(String),
    /// An `add` answered with no rank.
    #[error("no rank in the answer to add")]
    NoRank,
}

/// The text of a line: without its `\n` (and a `\r` before it), within `max` bytes, ASCII
/// without control characters.
fn text(line: &[u8], max: usize) -> Result<&str, ProtocolError> {
    if line.len() > max {
        return Err(ProtocolError::TooLong { max });
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if !line
        .iter()
        .all(|b| b.is_ascii() && (*b == b' ' || !b.is_ascii_control()))
    {
        return Err(ProtocolError::NotText);
    }
    // Only ASCII bytes are left.
    std::str::from_utf8(line).map_err(|_| ProtocolError::NotText)
}

/// A word, cut for an error message.
fn word(w: &str) -> String {
    w.chars().take(32).collect()
}

fn number(what: &'static str, w: Option<&str>) -> Result<u32, ProtocolError> {
    let w = w.ok_or(ProtocolError::Missing(what))?;
    // Digits only: no sign, no blank.
    if w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ProtocolError::BadNumber {
            what,
            value: word(w),
        });
    }
    w.parse().map_err(|_| ProtocolError::BadNumber {
        what,
        value: word(w),
    })
}

/// Whether `name` may name a cluster in a request: 1 to [`MAX_CLUSTER_NAME`] letters,
/// digits, `.`, `_` or `-`.
pub fn check_cluster(name: &str) -> Result<(), ProtocolError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_CLUSTER_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ProtocolError::BadCluster(word(name)))
    }
}

fn no_more<'a>(mut words: impl Iterator<Item = &'a str>) -> Result<(), ProtocolError> {
    match words.next() {
        Some(w) => Err(ProtocolError::Extra(word(w))),
        None => Ok(()),
    }
}

impl Request {
    /// Reads one request line (with or without its newline).
    pub fn parse(line: &[u8]) -> Result<Request, ProtocolError> {
        let line = text(line, MAX_REQUEST)?;
        let mut words = line.split(' ').filter(|w| !w.is_empty());
        let request = match words.next().ok_or(ProtocolError::Empty)? {
            "add" => {
                let count = number("count", words.next())?;
                if !(1..=MAX_ADD).contains(&count) {
                    return Err(ProtocolError::BadCount(count));
                }
                let cluster = match words.next() {
                    Some(c) => {
                        check_cluster(c)?;
                        Some(c.to_owned())
                    }
                    None => None,
                };
                Request::Add { count, cluster }
            }
            "remove" => Request::Remove {
                rank: number("rank", words.next())?,
            },
            "list" => Request::List,
            other => return Err(ProtocolError::Unknown(word(other))),
        };
        no_more(words)?;
        Ok(request)
    }

    /// The request as a line, with its newline. It parses back with
    /// [`parse`](Self::parse) if it is valid (a count in `1..=MAX_ADD`, a cluster
    /// name [`check_cluster`] accepts).
    pub fn to_line(&self) -> String {
        match self {
            Request::Add {
                count,
                cluster: Some(c),
            } => format!("add {count} {c}\n"),
            Request::Add {
                count,
                cluster: None,
            } => format!("add {count}\n"),
            Request::Remove { rank } => format!("remove {rank}\n"),
            Request::List => "list\n".to_owned(),
        }
    }
}

impl Process {
    fn parse(entry: &str) -> Result<Process, ProtocolError> {
        let bad = || ProtocolError::BadEntry(word(entry));
        let parts: Vec<&str> = entry.splitn(5, ':').collect();
        let [rank, cluster, pid, state] = parts[..] else {
            return Err(bad());
        };
        check_cluster(cluster).map_err(|_| bad())?;
        let leaving = match state {
            "running" => false,
            "leaving" => true,
            _ => return Err(bad()),
        };
        Ok(Process {
            rank: number("rank", Some(rank)).map_err(|_| bad())?,
            cluster: cluster.to_owned(),
            pid: number("pid", Some(pid)).map_err(|_| bad())?,
            leaving,
        })
    }
}

impl Reply {
    /// Reads the answer line to `request`.
    pub fn parse(request: &Request, line: &[u8]) -> Result<Reply, ProtocolError> {
        let line = text(line, MAX_ANSWER)?;
        let (first, rest) = line.split_once(' ').unwrap_or((line, ""));
        match first {
            "error" => return Ok(Reply::Refused(rest.trim().to_owned())),
            "ok" => {}
            "" => return Err(ProtocolError::Empty),
            other => return Err(ProtocolError::Unknown(word(other))),
        }
        let words = rest.split(' ').filter(|w| !w.is_empty());
        match request {
            Request::Add { .. } => {
                let ranks = words
                    .map(|w| number("rank", Some(w)))
                    .collect::<Result<Vec<u32>, _>>()?;
                if ranks.is_empty() {
                    return Err(ProtocolError::NoRank);
                }
                Ok(Reply::Added(ranks))
            }
            Request::Remove { .. } => {
                no_more(words)?;
                Ok(Reply::Removed)
            }
            Request::List => Ok(Reply::Listed(
                words.map(Process::parse).collect::<Result<_, _>>()?,
            )),
        }
    }

    /// The answer as a line, with its newline. A [`Refused`](Reply::Refused) reason's
    /// control characters become blanks and it is cut to [`MAX_REASON`] bytes, so that
    /// it stays one line.
    pub fn to_line(&self) -> String {
        match self {
            Reply::Added(ranks) => {
                let mut s = "ok".to_owned();
                for r in ranks {
                    s.push_str(&format!(" {r}"));
                }
                s + "\n"
            }
            Reply::Removed => "ok\n".to_owned(),
            Reply::Listed(ps) => {
                let mut s = "ok".to_owned();
                for p in ps {
                    let state = if p.leaving { "leaving" } else { "running" };
                    s.push_str(&format!(" {}:{}:{}:{state}", p.rank, p.cluster, p.pid));
                }
                s + "\n"
            }
            Reply::Refused(reason) => {
                let clean: String = reason
                    .chars()
                    .map(|c| {
                        if c.is_ascii() && !c.is_ascii_control() {
                            c
                        } else {
                            ' '
                        }
                    })
                    .collect();
                let mut clean = clean.trim().to_owned();
                // ASCII only: any byte is a character boundary.
                clean.truncate(MAX_REASON);
                if clean.is_empty() {
                    return "error\n".to_owned();
                }
                format!("error {clean}\n")
            }
        }
    }
}

/// What went wrong talking to `ipl-run`.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// `IPL_RUN_CONTROL` cannot be a socket's path.
    #[error("{ENV_CONTROL}={path:?}: {reason}")]
    BadPath {
        /// The value.
        path: String,
        /// Why not.
        reason: &'static str,
    },
    /// The request is not one `ipl-run` would accept (it was not sent).
    #[error("invalid request: {0}")]
    Request(ProtocolError),
    /// The socket cannot be reached (`ipl-run` ended, or the path is wrong).
    #[error("cannot reach ipl-run's control socket {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Sending the request or reading the answer failed.
    #[error("talking to ipl-run at {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// No answer within the timeout.
    #[error("ipl-run at {path} did not answer within {after:?}")]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// The timeout.
        after: Duration,
    },
    /// `ipl-run` closed the connection without answering.
    #[error("ipl-run at {0} closed the connection without answering")]
    Closed(PathBuf),
    /// `ipl-run` answered `error REASON` and changed nothing.
    #[error("ipl-run refused: {0}")]
    Refused(String),
    /// `ipl-run`'s answer is not one.
    #[error("ipl-run's answer is malformed: {0}")]
    Answer(ProtocolError),
}

/// A client of `ipl-run`'s control socket. Each call opens a connection, sends one
/// request and reads its answer, all within the timeout.
#[derive(Clone, Debug)]
pub struct Control {
    path: PathBuf,
    timeout: Duration,
}

impl Control {
    /// The client of the socket at `path`, with [`DEFAULT_TIMEOUT`].
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The client of the socket `IPL_RUN_CONTROL` names; `Ok(None)` when it is not set
    /// (the process is not in a pool of `ipl-run --malleable`).
    pub fn from_env() -> Result<Option<Control>, ControlError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) reading the variable through `get`. An empty value
    /// is unset; a relative path, or one too long for a Unix socket, is
    /// [`BadPath`](ControlError::BadPath).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Control>, ControlError> {
        let Some(path) = get(ENV_CONTROL).filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        let reason = if !Path::new(&path).is_absolute() {
            Some("not an absolute path")
        } else if path.len() > MAX_PATH {
            Some("longer than a Unix socket's path may be")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(ControlError::BadPath { path, reason }),
            None => Ok(Some(Control::new(path))),
        }
    }

    /// The same client with another bound on each call.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts `count` more processes, in `cluster` if given (else `ipl-run`'s clusters
    /// in turn); returns their ranks. They join the pool by themselves, some time later.
    pub fn add(&self, count: u32, cluster: Option<&str>) -> Result<Vec<u32>, ControlError> {
        let request = Request::Add {
            count,
            cluster: cluster.map(str::to_owned),
        };
        match self.request(&request)? {
            Reply::Added(ranks) => Ok(ranks),
            other => Err(unexpected(other)),
        }
    }

    /// Sends the process of `rank` SIGTERM: it is expected to leave the pool and exit 0.
    pub fn remove(&self, rank: u32) -> Result<(), ControlError> {
        match self.request(&Request::Remove { rank })? {
            Reply::Removed => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The processes still running.
    pub fn list(&self) -> Result<Vec<Process>, ControlError> {
        match self.request(&Request::List)? {
            Reply::Listed(ps) => Ok(ps),
            other => Err(unexpected(other)),
        }
    }

    /// Sends `request` and returns the answer; `error REASON` is
    /// [`Refused`](ControlError::Refused).
    pub fn request(&self, request: &Request) -> Result<Reply, ControlError> {
        let line = request.to_line();
        // Never send what ipl-run would refuse as malformed.
        Request::parse(line.as_bytes()).map_err(ControlError::Request)?;
        let deadline = Instant::now() + self.timeout;
        let mut stream = self.connect(deadline)?;
        let io = |source: io::Error| self.io_error(source);
        stream
            .set_write_timeout(Some(self.remaining(deadline)?))
            .map_err(io)?;
        stream.write_all(line.as_bytes()).map_err(io)?;
        let mut answer = Vec::with_capacity(64);
        let mut buf = [0u8; 4096];
        while !answer.contains(&b'\n') {
            if answer.len() > MAX_ANSWER {
                return Err(ControlError::Answer(ProtocolError::TooLong {
                    max: MAX_ANSWER,
                }));
            }
            stream
                .set_read_timeout(Some(self.remaining(deadline)?))
                .map_err(io)?;
            match stream.read(&mut buf) {
                Ok(0) => return Err(ControlError::Closed(self.path.clone())),
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        let end = answer
            .iter()
            .position(|&b| b == b'\n')
            .map_or(answer.len(), |i| i + 1);
        match Reply::parse(request, &answer[..end]) {
            Ok(Reply::Refused(reason)) => Err(ControlError::Refused(reason)),
            Ok(reply) => Ok(reply),
            Err(e) => Err(ControlError::Answer(e)),
        }
    }

    fn remaining(&self, deadline: Instant) -> Result<Duration, ControlError> {
        match deadline.checked_duration_since(Instant::now()) {
            Some(d) if !d.is_zero() => Ok(d),
            _ => Err(self.timeout_error()),
        }
    }

    fn timeout_error(&self) -> ControlError {
        ControlError::Timeout {
            path: self.path.clone(),
            after: self.timeout,
        }
    }

    fn io_error(&self, source: io::Error) -> ControlError {
        match source.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => self.timeout_error(),
            _ => ControlError::Io {
                path: self.path.clone(),
                source,
            },
        }
    }

    /// Connects before `deadline`. A Unix socket's `connect` waits without bound while
    /// the server's backlog is full, so it is made non-blocking and retried.
    fn connect(&self, deadline: Instant) -> Result<UnixStream, ControlError> {
        use rustix::net::{socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let failed = |source: io::Error| ControlError::Connect {
            path: self.path.clone(),
            source,
        };
        let addr = SocketAddrUnix::new(self.path.as_path()).map_err(|e| failed(e.into()))?;
        let fd = socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| failed(e.into()))?;
        loop {
            match rustix::net::connect(&fd, &addr) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => {}
                // The backlog is full: try again shortly, within the deadline.
                Err(rustix::io::Errno::AGAIN) => {
                    self.remaining(deadline)?;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(failed(e.into())),
            }
        }
        let stream = UnixStream::from(fd);
        stream.set_nonblocking(false).map_err(failed)?;
        Ok(stream)
    }
}

fn unexpected(reply: Reply) -> ControlError {
    ControlError::Answer(ProtocolError::Unknown(format!("{reply:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(count: u32, cluster: Option<&str>) -> Request {
        Request::Add {
            count,
            cluster: cluster.map(str::to_owned),
        }
    }

    #[test]
    fn requests_round_trip() {
        for r in [
            add(1, None),
            add(MAX_ADD, Some("cluster-1")),
            add(3, Some(&"a".repeat(MAX_CLUSTER_NAME))),
            add(2, Some("das4.vu_fs0-x")),
            Request::Remove { rank: 0 },
            Request::Remove { rank: u32::MAX },
            Request::List,
        ] {
            let line = r.to_line();
            assert!(
                line.ends_with('\n') && line.len() <= MAX_REQUEST,
                "{line:?}"
            );
            assert_eq!(Request::parse(line.as_bytes()), Ok(r.clone()), "{line:?}");
            // Without the newline, with CRLF, with extra blanks: the same request.
            let bare = line.trim_end();
            assert_eq!(Request::parse(bare.as_bytes()), Ok(r.clone()));
            assert_eq!(
                Request::parse(format!("{bare}\r\n").as_bytes()),
                Ok(r.clone())
            );
            let spaced = format!("  {}  \n", bare.replace(' ', "   "));
            assert_eq!(Request::parse(spaced.as_bytes()), Ok(r.clone()));
        }
    }

    #[test]
    fn hostile_requests_are_errors() {
        use ProtocolError::*;
        let long = format!("add 1 {}\n", "c".repeat(MAX_REQUEST));
        let cases: &[(&[u8], ProtocolError)] = &[
            (b"", Empty),
            (b"   \n", Empty),
            (b"\n", Empty),
            (long.as_bytes(), TooLong { max: MAX_REQUEST }),
            (b"add 1\0\n", NotText),
            (b"add\t1\n", NotText),
            (b"list\n\n", NotText),
            ("add 1 clu\u{e9}ster\n".as_bytes(), NotText),
            (b"\xff\xfe\n", NotText),
            (b"ADD 1\n", Unknown("ADD".into())),
            (b"kill 3\n", Unknown("kill".into())),
            (b"add\n", Missing("count")),
            (b"remove\n", Missing("rank")),
            (b"add 0\n", BadCount(0)),
            (b"add 1025\n", BadCount(1025)),
            (
                b"add -1\n",
                BadNumber {
                    what: "count",
                    value: "-1".into(),
                },
            ),
            (
                b"add +1\n",
                BadNumber {
                    what: "count",
                    value: "+1".into(),
                },
            ),
            (
                b"add 99999999999999999999\n",
                BadNumber {
                    what: "count",
                    value: "99999999999999999999".into(),
                },
            ),
            (
                b"remove 4294967296\n",
                BadNumber {
                    what: "rank",
                    value: "4294967296".into(),
                },
            ),
            (
                b"remove x\n",
                BadNumber {
                    what: "rank",
                    value: "x".into(),
                },
            ),
            (b"add 1 a:b\n", BadCluster("a:b".into())),
            (b"add 1 ../x\n", BadCluster("../x".into())),
            (b"add 1 a b\n", Extra("b".into())),
            (b"remove 1 2\n", Extra("2".into())),
            (b"list all\n", Extra("all".into())),
        ];
        for (line, want) in cases {
            assert_eq!(
                Request::parse(line).as_ref(),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
        let too_long = "c".repeat(MAX_CLUSTER_NAME + 1);
        assert!(matches!(
            Request::parse(format!("add 1 {too_long}").as_bytes()),
            Err(BadCluster(_))
        ));
        // A hostile word is cut in the error message.
        let e = Request::parse(format!("{}\n", "z".repeat(200)).as_bytes()).unwrap_err();
        assert!(e.to_string().len() < 100, "{e}");
    }

    #[test]
    fn answers_round_trip() {
        let ps = vec![
            Process {
                rank: 0,
                cluster: "cluster-0".into(),
                pid: 4242,
                leaving: false,
            },
            Process {
                rank: 7,
                cluster: "c.1".into(),
                pid: u32::MAX,
                leaving: true,
            },
        ];
        let cases = [
            (add(2, None), Reply::Added(vec![2, 3])),
            (Request::Remove { rank: 1 }, Reply::Removed),
            (Request::List, Reply::Listed(ps)),
            (Request::List, Reply::Listed(vec![])),
            (Request::List, Reply::Refused("ipl-run is ending".into())),
            (add(1, None), Reply::Refused("at most 64 processes".into())),
        ];
        for (request, reply) in cases {
            let line = reply.to_line();
            assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
            assert_eq!(
                Reply::parse(&request, line.as_bytes()),
                Ok(reply),
                "{line:?}"
            );
        }
    }

    #[test]
    fn a_refusal_stays_one_line_of_bounded_length() {
        let reason = format!("bad\nthing\r\x1b[31m\u{e9}{}", "x".repeat(5000));
        let line = Reply::Refused(reason).to_line();
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        assert!(
            line.len() <= MAX_REASON + "error \n".len(),
            "{}",
            line.len()
        );
        let Ok(Reply::Refused(back)) = Reply::parse(&Request::List, line.as_bytes()) else {
            panic!("{line:?}")
        };
        assert!(back.starts_with("bad thing  [31m "), "{back:?}");
        assert_eq!(Reply::Refused(String::new()).to_line(), "error\n");
        assert_eq!(
            Reply::parse(&Request::List, b"error\n"),
            Ok(Reply::Refused(String::new()))
        );
    }

    #[test]
    fn hostile_answers_are_errors() {
        use ProtocolError::*;
        let remove = Request::Remove { rank: 1 };
        let huge = vec![b'1'; MAX_ANSWER + 1];
        let cases: &[(&Request, &[u8], ProtocolError)] = &[
            (&Request::List, b"", Empty),
            (&Request::List, b"yes\n", Unknown("yes".into())),
            (&Request::List, b"ok 1:c:2\n", BadEntry("1:c:2".into())),
            (
                &Request::List,
                b"ok 1:c:2:dead\n",
                BadEntry("1:c:2:dead".into()),
            ),
            (
                &Request::List,
                b"ok 1:c:2:running:x\n",
                BadEntry("1:c:2:running:x".into()),
            ),
            (
                &Request::List,
                b"ok x:c:2:running\n",
                BadEntry("x:c:2:running".into()),
            ),
            (
                &Request::List,
                b"ok 1:a/b:2:running\n",
                BadEntry("1:a/b:2:running".into()),
            ),
            (
                &Request::List,
                b"ok 1::2:running\n",
                BadEntry("1::2:running".into()),
            ),
            (&Request::List, &huge, TooLong { max: MAX_ANSWER }),
            (&Request::List, b"ok \x07\n", NotText),
            (&remove, b"ok 3\n", Extra("3".into())),
            (
                &Request::Add {
                    count: 1,
                    cluster: None,
                },
                b"ok\n",
                NoRank,
            ),
            (
                &Request::Add {
                    count: 1,
                    cluster: None,
                },
                b"ok 1 two\n",
                BadNumber {
                    what: "rank",
                    value: "two".into(),
                },
            ),
        ];
        for (request, line, want) in cases {
            assert_eq!(
                Reply::parse(request, line).as_ref(),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(&line[..line.len().min(40)])
            );
        }
    }

    #[test]
    fn the_socket_path_comes_from_the_environment() {
        assert!(Control::from_lookup(|_| None).unwrap().is_none());
        assert!(Control::from_lookup(|_| Some(String::new()))
            .unwrap()
            .is_none());
        let c = Control::from_lookup(|k| (k == ENV_CONTROL).then(|| "/tmp/x/control".into()))
            .unwrap()
            .unwrap();
        assert_eq!(c.path(), Path::new("/tmp/x/control"));
        for bad in ["relative/control", &format!("/{}", "d".repeat(MAX_PATH))] {
            let e = Control::from_lookup(|_| Some(bad.to_owned())).unwrap_err();
            assert!(matches!(e, ControlError::BadPath { .. }), "{e:?}");
            assert!(e.to_string().contains(ENV_CONTROL), "{e}");
        }
    }

    #[test]
    fn an_invalid_request_is_not_sent() {
        // No socket at this path: the request fails before any connection.
        let c = Control::new("/nonexistent/ipl-run/control");
        for (count, cluster) in [(0, None), (MAX_ADD + 1, None), (1, Some("a b"))] {
            let e = c.add(count, cluster).unwrap_err();
            assert!(matches!(e, ControlError::Request(_)), "{e:?}");
        }
        let e = c.list().unwrap_err();
        assert!(matches!(e, ControlError::Connect { .. }), "{e:?}");
    }

    /// A server in a thread that answers each request line with `answer(line)`, or
    /// stays silent when it gives `None`.
    fn server(
        answer: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + 'static,
    ) -> (PathBuf, std::thread::JoinHandle<()>) {
        use std::io::BufRead;
        let dir = std::env::temp_dir().join(format!(
            "ipl-control-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("control");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut r = io::BufReader::new(&s);
            let mut line = Vec::new();
            r.read_until(b'\n', &mut line).unwrap();
            match answer(&line) {
                Some(a) => (&s).write_all(&a).unwrap(),
                // Keep the connection open until the client gives up.
                None => {
                    let mut rest = Vec::new();
                    let _ = r.read_to_end(&mut rest);
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
        });
        (path, t)
    }

    #[test]
    fn the_client_sends_one_line_and_reads_the_answer() {
        let (path, t) = server(|line| {
            assert_eq!(line, b"add 2 c1\n");
            Some(b"ok 5 6\n".to_vec())
        });
        assert_eq!(Control::new(&path).add(2, Some("c1")).unwrap(), vec![5, 6]);
        t.join().unwrap();

        let (path, t) = server(|_| Some(b"error no process of rank 9\n".to_vec()));
        let e = Control::new(&path).remove(9).unwrap_err();
        assert!(
            matches!(&e, ControlError::Refused(r) if r == "no process of rank 9"),
            "{e:?}"
        );
        t.join().unwrap();

        let (path, t) = server(|_| Some(b"ok 1:c:2\n".to_vec()));
        let e = Control::new(&path).list().unwrap_err();
        assert!(matches!(e, ControlError::Answer(_)), "{e:?}");
        t.join().unwrap();

        let (path, t) = server(|_| Some(Vec::new()));
        let e = Control::new(&path).list().unwrap_err();
        assert!(matches!(e, ControlError::Closed(_)), "{e:?}");
        t.join().unwrap();
    }

    #[test]
    fn a_silent_server_is_a_timeout() {
        let (path, t) = server(|_| None);
        let c = Control::new(&path).with_timeout(Duration::from_millis(200));
        let e = c.list().unwrap_err();
        assert!(matches!(e, ControlError::Timeout { .. }), "{e:?}");
        drop(c);
        t.join().unwrap();
    }
}
