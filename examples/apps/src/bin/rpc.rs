//! The RPC pattern of thesis figure 7.4 on the IPL: each client has a send port to the
//! server's request port and a receive port for replies; the server answers by upcall,
//! over a send port connected back to each client. Several clients call concurrently.
//!
//! Usage: `rpc [CLIENTS] [CALLS]` (default 4 clients, 1000 calls each; `--help`). Prints
//! what each client computed and the mean round trip.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use ibis_apps::members::exit_code;
use ipl::{EmbeddedRegistry, Ibis, PortCapabilities as P, PortType, ReadMessage, SendPort};
use parking_lot::Mutex;

/// The RPC pattern on the IPL: clients call a server that answers by upcall.
#[derive(Parser)]
#[command(name = "rpc")]
struct Args {
    /// Clients, each a member calling concurrently.
    #[arg(default_value_t = 4)]
    clients: usize,
    /// Calls per client.
    #[arg(default_value_t = 1000)]
    calls: usize,
}

const TIMEOUT: Duration = Duration::from_secs(10);

fn request_type() -> ipl::Result<PortType> {
    PortType::new(
        P::CONNECTION_MANY_TO_ONE
            | P::RECEIVE_AUTO_UPCALLS
            | P::SERIALIZATION_OBJECT
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
}

fn reply_type() -> ipl::Result<PortType> {
    PortType::new(
        P::CONNECTION_ONE_TO_ONE
            | P::RECEIVE_EXPLICIT
            | P::SERIALIZATION_OBJECT
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
}

/// The request: add two numbers.
#[derive(serde::Serialize, serde::Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

fn main() -> ExitCode {
    ipl_tools::init_tracing("warn");
    let Args { clients, calls } = Args::parse();
    exit_code("rpc", run(clients, calls).map_err(Into::into))
}

/// Runs the server and the clients; whether every client got the right answers.
fn run(clients: usize, calls: usize) -> ipl::Result<bool> {
    let (req_t, rep_t) = (request_type()?, reply_type()?);
    let registry = EmbeddedRegistry::new();
    let server = Ibis::builder()
        .pool("rpc")
        .name("server")
        .registry(&registry)
        .port_type(req_t)
        .port_type(rep_t)
        .build()?;

    // The server's reply ports, one per client, created on the first request of each.
    let server_ibis = Arc::new(server);
    let replies: Arc<Mutex<HashMap<String, SendPort>>> = Arc::default();
    let (srv, reps) = (Arc::clone(&server_ibis), Arc::clone(&replies));
    let handler = move |mut m: ReadMessage| {
        let req: Add = match m.read_object() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "bad request");
                return;
            }
        };
        let origin = m.origin().clone();
        m.finish();
        let mut reps = reps.lock();
        let key = origin.to_string();
        if !reps.contains_key(&key) {
            let port = srv
                .create_send_port(&rep_t, &format!("reply-{}", reps.len()))
                .and_then(|mut p| {
                    p.connect_to(&origin.ibis, "replies", TIMEOUT)?;
                    Ok(p)
                });
            match port {
                Ok(p) => {
                    reps.insert(key.clone(), p);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach client");
                    return;
                }
            }
        }
        if let Some(port) = reps.get_mut(&key) {
            let r = port.new_message().and_then(|mut w| {
                w.write_object(&(req.a + req.b))?;
                w.finish()
            });
            if let Err(e) = r {
                tracing::warn!(error = %e, "reply failed");
            }
        }
    };
    let requests = server_ibis
        .receive_port(&req_t, "requests")
        .message_upcall(handler)
        .create()?;
    requests.enable_connections();
    requests.enable_message_upcalls()?;
    let server_port = requests.identifier().clone();

    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let registry = registry.clone();
            let server_port = server_port.clone();
            std::thread::spawn(move || -> ipl::Result<(usize, i64, Duration)> {
                let me = Ibis::builder()
                    .pool("rpc")
                    .name(format!("client-{c}"))
                    .registry(&registry)
                    .port_type(req_t)
                    .port_type(rep_t)
                    .build()?;
                let replies = me.create_receive_port(&rep_t, "replies")?;
                replies.enable_connections();
                let mut to_server = me.create_send_port(&req_t, "calls")?;
                to_server.connect(&server_port, TIMEOUT)?;
                let t0 = Instant::now();
                let mut sum = 0i64;
                for i in 0..calls as i64 {
                    let mut w = to_server.new_message()?;
                    w.write_object(&Add { a: i, b: c as i64 })?;
                    w.finish()?;
                    let mut r = replies.receive()?;
                    sum += r.read_object::<i64>()?;
                }
                let elapsed = t0.elapsed();
                to_server.close();
                me.end()?;
                Ok((c, sum, elapsed))
            })
        })
        .collect();

    let mut ok = true;
    for t in threads {
        match t.join() {
            Ok(Ok((c, sum, elapsed))) => {
                let n = calls as i64;
                let expected = n * (n - 1) / 2 + n * c as i64;
                let per_call = elapsed.as_secs_f64() * 1e6 / calls.max(1) as f64;
                ibis_apps::out!(
                    "client {c}: sum of {calls} replies = {sum} (expected {expected}) {}, {per_call:.1} us per call",
                    if sum == expected { "ok" } else { "WRONG" }
                );
                ok &= sum == expected;
            }
            Ok(Err(e)) => {
                ibis_apps::out!("client failed: {e}");
                ok = false;
            }
            Err(_) => {
                ibis_apps::out!("client thread panicked");
                ok = false;
            }
        }
    }
    ibis_apps::out!(
        "{clients} clients x {calls} calls in {:.3} s: {}",
        started.elapsed().as_secs_f64(),
        if ok { "all correct" } else { "FAILED" }
    );
    requests.close(Some(Duration::from_secs(1)));
    drop(replies);
    Ok(ok)
}
