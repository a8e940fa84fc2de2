//! One member of a pool that a fault-injection test drives line by line (see
//! `tests/tests/ipl_faults.rs`): the test writes commands to its standard input and waits
//! for the lines it prints, so that it can freeze, kill or cut the member at a known
//! protocol state. Joins the pool from the launcher's environment (`IPL_REGISTRY`,
//! `IPL_POOL`, `IPL_POOL_SIZE`, `IPL_RANK`, ...), waits until the pool is closed and
//! prints `ready <name>`. `FAULT_TRANSPORT_CONFIG` (`key=value` lines, `;`-separated) is
//! passed to the transports.
//!
//! Commands (one per line; every answer is one line starting with the word shown):
//!
//! - `listen PORT`: creates receive port `PORT` (with a connection upcall that prints
//!   `lost PORT <why>` for a lost connection) → `listening PORT`;
//! - `hold` / `release`: from now on a connect request waits in the connection upcall
//!   (printing `connect-request PORT`) until `release` (handled at once, even while
//!   another command runs);
//! - `recv PORT N`: receives N messages (blocking, without timeout), each checked for
//!   its number and contents → `got PORT I` for each, or `recv-error PORT <error>`;
//! - `slow PORT N MS`: receives N messages, pausing MS ms before each (a slow reader),
//!   checking order and contents and the port's queue → `slow-done PORT N <most queued>`
//!   or `slow-error PORT <what>`;
//! - `connections PORT` → `connections PORT K` (connections of the receive port);
//! - `close PORT` → `closed PORT <discarded>` (closes the receive port, 10 s bound);
//!   `close-wait PORT` the same without a bound (it waits for the senders to leave);
//! - `connect PORT MEMBER` → `connected PORT` or `connect-error PORT <error>`;
//! - `send PORT N SIZE`: sends N messages of SIZE payload bytes on the send port to
//!   `PORT`, printing `sending PORT I` before and `sent PORT I` after each finish, or
//!   `send-error PORT I <error>` (and stops);
//! - `disconnect PORT` → `disconnected PORT` (closes the send port);
//! - `watch MEMBER` → `died MEMBER` once the registry reports it dead (60 s bound), else
//!   `watch-error <why>`;
//! - `registry` → `registry-ok <members>` or `registry-error <error>`;
//! - `exit` → `bye`, and the process ends (leaving the pool if it can).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipl::{
    Event, Ibis, IbisCapabilities as I, PortCapabilities as P, PortType, ReceivePort, SendPort,
};
use std::sync::{Condvar, Mutex};

/// The longest any single wait of this program lasts.
const WAIT: Duration = Duration::from_secs(60);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Drives one pool member from its standard input (see the module documentation).
#[derive(clap::Parser, Debug)]
#[command(name = "ipl-fault-peer")]
struct Args {}

/// The port type of every connection: one sender per port, explicit receipt, data.
fn port_type() -> ipl::Result<PortType> {
    PortType::new(
        P::CONNECTION_ONE_TO_ONE
            | P::CONNECTION_UPCALLS
            | P::RECEIVE_EXPLICIT
            | P::RECEIVE_TIMEOUT
            | P::SERIALIZATION_DATA
            | P::COMMUNICATION_NUMBERED
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
}

/// Byte `j` of message `i`'s payload.
fn pattern(i: u64, j: usize) -> u8 {
    (j as u64).wrapping_mul(7).wrapping_add(i) as u8
}

/// Whether connect requests wait in the upcall, and the condition they wait on.
#[derive(Default)]
struct Hold {
    on: Mutex<bool>,
    cond: Condvar,
}

struct Upcall {
    port: String,
    hold: Arc<Hold>,
}

impl ipl::ReceivePortConnectUpcall for Upcall {
    fn got_connection(&self, _: &ipl::ReceivePortIdentifier, _: &ipl::SendPortIdentifier) -> bool {
        let Ok(mut on) = self.hold.on.lock() else {
            return true;
        };
        if *on {
            println!("connect-request {}", self.port);
            let deadline = Instant::now() + WAIT;
            while *on {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match self.hold.cond.wait_timeout(on, left) {
                    Ok((g, _)) => on = g,
                    Err(_) => return true,
                }
            }
        }
        true
    }

    fn lost_connection(
        &self,
        _: &ipl::ReceivePortIdentifier,
        _: &ipl::SendPortIdentifier,
        why: &ipl::Disconnect,
    ) {
        println!("lost {} {why:?}", self.port);
    }
}

fn main() {
    let _ = <Args as clap::Parser>::parse();
    ipl_tools::init_tracing("warn");
    ipl::register_static_plugin(&ipl_transport_shm::PLUGIN);
    if let Err(e) = run() {
        println!("failed: {e}");
        std::process::exit(1);
    }
}

struct Member {
    ibis: Ibis,
    t: PortType,
    hold: Arc<Hold>,
    receive: HashMap<String, (ReceivePort, u64)>,
    send: HashMap<String, (SendPort, u64)>,
}

fn run() -> Res<()> {
    let t = port_type()?;
    let mut b = Ibis::builder()
        .capabilities(I::MEMBERSHIP | I::SIGNALS)
        .from_env()?
        .port_type(t);
    if let Ok(cfg) = std::env::var("FAULT_TRANSPORT_CONFIG") {
        b = b.transport_config(cfg.replace(';', "\n"));
    }
    let ibis = b.build()?;
    ibis.registry().wait_until_pool_closed(Some(WAIT))?;
    println!("ready {}", ibis.identifier().name());
    let hold = Arc::new(Hold::default());
    // Standard input on its own thread, so that `release` works while a command blocks.
    let (tx, rx) = mpsc::channel::<String>();
    let h = Arc::clone(&hold);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line.trim() == "release" {
                if let Ok(mut on) = h.on.lock() {
                    *on = false;
                }
                h.cond.notify_all();
            } else if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut m = Member {
        ibis,
        t,
        hold,
        receive: HashMap::new(),
        send: HashMap::new(),
    };
    // Ends when the test closes standard input or says `exit`.
    while let Ok(line) = rx.recv() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"exit") {
            println!("bye");
            break;
        }
        if let Err(e) = m.command(&words) {
            println!("bad-command {line:?}: {e}");
        }
    }
    let Member {
        ibis,
        receive,
        send,
        ..
    } = m;
    drop(send);
    drop(receive);
    if let Err(e) = ibis.end() {
        tracing::debug!("leaving: {e}");
    }
    Ok(())
}

fn arg<T: std::str::FromStr>(words: &[&str], i: usize) -> Res<T> {
    words
        .get(i)
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("argument {i} missing or malformed").into())
}

impl Member {
    fn command(&mut self, w: &[&str]) -> Res<()> {
        let port: String = w.get(1).map(|s| s.to_string()).unwrap_or_default();
        match w.first().copied().unwrap_or_default() {
            "listen" => {
                let rp = self
                    .ibis
                    .receive_port(&self.t, &port)
                    .connection_upcall(Upcall {
                        port: port.clone(),
                        hold: Arc::clone(&self.hold),
                    })
                    .create()?;
                rp.enable_connections();
                self.receive.insert(port.clone(), (rp, 0));
                println!("listening {port}");
            }
            "hold" => {
                *self.hold.on.lock().map_err(|_| "poisoned")? = true;
                println!("holding");
            }
            "recv" => {
                let n: u64 = arg(w, 2)?;
                let (rp, next) = self.receive.get_mut(&port).ok_or("no such port")?;
                for _ in 0..n {
                    match rp.receive().map_err(|e| e.to_string()).and_then(|mut m| {
                        check(&mut m, *next)?;
                        Ok(m.remaining())
                    }) {
                        Ok(_) => {
                            println!("got {port} {next}");
                            *next += 1;
                        }
                        Err(e) => {
                            println!("recv-error {port} {e}");
                            break;
                        }
                    }
                }
            }
            "slow" => {
                let (n, ms): (u64, u64) = (arg(w, 2)?, arg(w, 3)?);
                let (rp, next) = self.receive.get_mut(&port).ok_or("no such port")?;
                let mut most = 0;
                let mut failed = None;
                for _ in 0..n {
                    // The reader is slow: this pause is its work, not a synchronisation.
                    std::thread::sleep(Duration::from_millis(ms));
                    most = most.max(rp.queued());
                    match rp.receive_timeout(WAIT) {
                        Ok(mut m) => {
                            if let Err(e) = check(&mut m, *next) {
                                failed = Some(e);
                                break;
                            }
                            *next += 1;
                        }
                        Err(e) => {
                            failed = Some(e.to_string());
                            break;
                        }
                    }
                }
                match failed {
                    None => println!("slow-done {port} {n} {most}"),
                    Some(e) => println!("slow-error {port} {e}"),
                }
            }
            "connections" => {
                let (rp, _) = self.receive.get(&port).ok_or("no such port")?;
                println!("connections {port} {}", rp.connected_to().len());
            }
            "close" | "close-wait" => {
                let (rp, _) = self.receive.remove(&port).ok_or("no such port")?;
                let bound = (w[0] == "close").then(|| Duration::from_secs(10));
                let discarded = rp.close(bound);
                println!("closed {port} {discarded}");
            }
            "connect" => {
                let member: String = arg(w, 2)?;
                let target = self
                    .ibis
                    .registry()
                    .members()?
                    .into_iter()
                    .find(|m| m.name() == member)
                    .ok_or_else(|| format!("no {member} in the pool"))?;
                let (sp, _) = match self.send.remove(&port) {
                    Some(s) => s,
                    None => (
                        self.ibis.create_send_port(&self.t, &format!("to-{port}"))?,
                        0,
                    ),
                };
                let mut sp = sp;
                match sp.connect_to(&target, &port, WAIT) {
                    Ok(_) => println!("connected {port}"),
                    Err(e) => println!("connect-error {port} {e}"),
                }
                self.send.insert(port, (sp, 0));
            }
            "send" => {
                let (n, size): (u64, usize) = (arg(w, 2)?, arg(w, 3)?);
                let (sp, next) = self.send.get_mut(&port).ok_or("no such port")?;
                for _ in 0..n {
                    let i = *next;
                    let data: Vec<u8> = (0..size).map(|j| pattern(i, j)).collect();
                    println!("sending {port} {i}");
                    let sent = sp.new_message().and_then(|mut m| {
                        m.write_u64(i)?;
                        m.write_bytes_borrowed(&data)?;
                        m.finish()
                    });
                    match sent {
                        Ok(_) => {
                            println!("sent {port} {i}");
                            *next += 1;
                        }
                        Err(e) => {
                            println!("send-error {port} {i} {e}");
                            break;
                        }
                    }
                }
            }
            "disconnect" => {
                let (mut sp, _) = self.send.remove(&port).ok_or("no such port")?;
                sp.close();
                println!("disconnected {port}");
            }
            "watch" => {
                let deadline = Instant::now() + WAIT;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match self.ibis.registry().next_event(Some(left)) {
                        Ok(Some(Event::Died(who))) if who.name() == port => {
                            println!("died {port}");
                            break;
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            println!("watch-error {port} not reported dead within {WAIT:?}");
                            break;
                        }
                        Err(e) => {
                            println!("watch-error {e}");
                            break;
                        }
                    }
                }
            }
            "registry" => match self.ibis.registry().members() {
                Ok(m) => println!("registry-ok {}", m.len()),
                Err(e) => println!("registry-error {e}"),
            },
            other => return Err(format!("unknown command {other:?}").into()),
        }
        Ok(())
    }
}

/// Checks that `m` is message `i` with its contents.
fn check(m: &mut ipl::ReadMessage, i: u64) -> Result<(), String> {
    let got = m.read_u64().map_err(|e| e.to_string())?;
    if got != i {
        return Err(format!("message {got} arrived where {i} was due"));
    }
    let n = m.remaining();
    let bytes = m.read_bytes_ref(n).map_err(|e| e.to_string())?;
    match bytes
        .iter()
        .enumerate()
        .find(|(j, b)| **b != pattern(i, *j))
    {
        Some((j, _)) => Err(format!("message {i}: byte {j} differs")),
        None => Ok(()),
    }
}
