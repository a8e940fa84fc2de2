//! 1-byte round trip of the QUIC transport against plain quinn, both measured in this
//! run, in one process on 127.0.0.1 (two endpoints, each with its own runtime).
//!
//! - `raw`: [`ibis_bench::raw_quic`], a quinn ping-pong with each side's loop
//!   inside its runtime's `block_on` (the raw limit).
//! - `transport`: two transport endpoints used through the plugin ABI as the IPL uses
//!   them; both sides answer from their message callback (the transport's own cost).
//! - `transport blocking`: the same, but side A's answers come from a host thread that
//!   waits for each message (callback -> channel -> thread -> `send`), as a blocking
//!   IPL receive does; it adds two thread wake-ups per round trip.
//! - `design`: plain quinn with the client's writes made by a host thread, either
//!   directly on the stream (what `send` does) or handed to a writer task over a channel.
//!
//! Usage: `cargo run --release -p ibis-bench --bin quic-bench -- [ITERATIONS]`.
//! Prints a table, then `name value unit` lines.

#![forbid(unsafe_code)]

use std::sync::mpsc;
use std::sync::{Arc, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use ibis_bench::raw_quic;
use ipl_transport_abi::{
    ChannelClosed, Plugin, ReceivedBuffer, TransportEvents, TransportInstance,
};
use parking_lot::{Condvar, Mutex};

const PATIENCE: Duration = Duration::from_secs(60);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// 1-byte round trip of the QUIC transport against plain quinn, in one process on
/// 127.0.0.1.
#[derive(Parser, Debug)]
#[command(name = "quic-bench", version)]
struct Cli {
    /// Round trips per measurement (after a tenth more to warm up).
    #[arg(value_name = "ITERATIONS", default_value_t = 20_000, value_parser = ibis_bench::at_least_one)]
    iters: usize,
}

/// Waits for a thread of this benchmark and passes on its error.
fn join(t: thread::JoinHandle<std::io::Result<()>>) -> Res<()> {
    Ok(t.join().map_err(|_| "a benchmark thread panicked")??)
}

fn raw_latency(iters: usize) -> Res<f64> {
    let (addr, server) = raw_quic::serve("127.0.0.1:0".parse()?)?;
    let warm = iters / 10 + 1;
    let t = thread::spawn(move || {
        server.echo(1, warm)?;
        server.echo(1, iters)
    });
    let client = raw_quic::RawClient::connect(addr)?;
    client.latency(1, warm)?;
    let us = client.latency(1, iters)?;
    join(t)?;
    Ok(us)
}

/// Echoes every message from the callback.
struct Echo(OnceLock<Weak<TransportInstance>>);

impl TransportEvents for Echo {
    fn channel_opened(&self, _: u64) {}
    fn message(&self, ch: u64, buf: ReceivedBuffer) {
        if let Some(t) = self.0.get().and_then(Weak::upgrade) {
            let _ = t.send(ch, &[&buf]);
        }
    }
    fn channel_closed(&self, _: u64, _: ChannelClosed) {}
}

/// Side A: answers from the callback until `left` reaches zero, then signals.
struct Pinger {
    me: OnceLock<Weak<TransportInstance>>,
    left: Mutex<usize>,
    done: Condvar,
    /// When set, messages go to this channel instead (blocking mode).
    to_thread: Mutex<Option<mpsc::Sender<u64>>>,
}

impl TransportEvents for Pinger {
    fn channel_opened(&self, _: u64) {}
    fn message(&self, ch: u64, buf: ReceivedBuffer) {
        drop(buf);
        if let Some(tx) = &*self.to_thread.lock() {
            let _ = tx.send(ch);
            return;
        }
        let mut left = self.left.lock();
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.done.notify_all();
        } else if let Some(t) = self.me.get().and_then(Weak::upgrade) {
            drop(left);
            let _ = t.send(ch, &[&[1]]);
        }
    }
    fn channel_closed(&self, _: u64, _: ChannelClosed) {}
}

struct Pair {
    a: Arc<TransportInstance>,
    _b: Arc<TransportInstance>,
    pinger: Arc<Pinger>,
    ch: u64,
}

fn pair() -> Res<Pair> {
    let plugin = Plugin::from_static(&ipl_transport_quic::PLUGIN)?;
    let secret = ipl_auth::PoolSecret::generate()?;
    let cfg = format!("secret={}\npool=bench", secret.to_hex());
    let echo = Arc::new(Echo(OnceLock::new()));
    let b = Arc::new(plugin.create(&cfg, echo.clone())?);
    let _ = echo.0.set(Arc::downgrade(&b));
    let pinger = Arc::new(Pinger {
        me: OnceLock::new(),
        left: Mutex::new(0),
        done: Condvar::new(),
        to_thread: Mutex::new(None),
    });
    let a = Arc::new(plugin.create(&cfg, pinger.clone())?);
    let _ = pinger.me.set(Arc::downgrade(&a));
    let ch = a.connect(&b.local_address()?, PATIENCE)?;
    Ok(Pair {
        a,
        _b: b,
        pinger,
        ch,
    })
}

fn callback_rounds(p: &Pair, n: usize) -> Res<f64> {
    *p.pinger.left.lock() = n;
    let start = Instant::now();
    p.a.send(p.ch, &[&[1]])?;
    let mut left = p.pinger.left.lock();
    while *left > 0 {
        if p.pinger.done.wait_for(&mut left, PATIENCE).timed_out() {
            return Err("callback ping-pong stalled".into());
        }
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / n as f64)
}

fn transport_latency(iters: usize) -> Res<(f64, f64)> {
    let p = pair()?;
    callback_rounds(&p, iters / 10 + 1)?;
    let callback = callback_rounds(&p, iters)?;
    let (tx, rx) = mpsc::channel();
    *p.pinger.to_thread.lock() = Some(tx);
    let mut blocking = 0.0;
    for (round, n) in [iters / 10 + 1, iters].into_iter().enumerate() {
        let start = Instant::now();
        for _ in 0..n {
            p.a.send(p.ch, &[&[1]])?;
            rx.recv_timeout(PATIENCE)
                .map_err(|_| "blocking ping-pong stalled")?;
        }
        if round == 1 {
            blocking = start.elapsed().as_secs_f64() * 1e6 / n as f64;
        }
    }
    Ok((callback, blocking))
}

/// Plain quinn, client writes from a host thread: directly (`direct`) or through a
/// writer task (`!direct`); the echo comes back to the thread over a channel.
fn design_latency(iters: usize, direct: bool) -> Res<f64> {
    use std::future::Future;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    fn wait<F: Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            thread::park();
        }
    }
    let (addr, server) = raw_quic::serve("127.0.0.1:0".parse()?)?;
    let total = iters + iters / 10 + 1;
    let t = thread::spawn(move || server.echo(1, total));
    // The client: the transport's set-up, as a client of the baseline server.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let client = raw_quic::client_config(1, Arc::new(quinn::TransportConfig::default()))?;
    let endpoint = {
        let _g = rt.enter();
        quinn::Endpoint::client("127.0.0.1:0".parse()?)?
    };
    let server_name = ipl_transport_quic::tls::server_name(raw_quic::SERVER_ID);
    let connecting = {
        // The connection's driver task starts on this runtime.
        let _g = rt.enter();
        endpoint.connect_with(client, addr, &server_name)?
    };
    let conn = rt.block_on(connecting)?;
    let (send, mut recv) = rt.block_on(conn.open_bi())?;
    let (back_tx, back_rx) = mpsc::channel::<()>();
    rt.spawn(async move {
        let mut b = [0u8; 1];
        while recv.read_exact(&mut b).await.is_ok() {
            if back_tx.send(()).is_err() {
                break;
            }
        }
    });
    let (to_writer, mut writer_rx) = tokio::sync::mpsc::unbounded_channel::<u8>();
    let mut direct_stream = None;
    if direct {
        direct_stream = Some(send);
    } else {
        let mut send = send;
        rt.spawn(async move {
            while let Some(b) = writer_rx.recv().await {
                if send.write_all(&[b]).await.is_err() {
                    break;
                }
            }
        });
    }
    let mut us = 0.0;
    for (round, n) in [iters / 10 + 1, iters].into_iter().enumerate() {
        let start = Instant::now();
        for _ in 0..n {
            if let Some(s) = &mut direct_stream {
                wait(s.write_all(&[1]))?;
            } else {
                to_writer.send(1)?;
            }
            back_rx
                .recv_timeout(PATIENCE)
                .map_err(|_| "design ping-pong stalled")?;
        }
        if round == 1 {
            us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
        }
    }
    // Finishing the stream ends the server's echo call.
    drop(to_writer);
    if let Some(mut s) = direct_stream {
        let _ = s.finish();
    }
    join(t)?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(us)
}

fn main() {
    ipl_tools::init_tracing("warn");
    let iters = Cli::parse().iters;
    ibis_bench::exit_on_error("quic-bench", run(iters));
}

fn run(iters: usize) -> Res<()> {
    let raw = raw_latency(iters)?;
    let (callback, blocking) = transport_latency(iters)?;
    let direct = design_latency(iters, true)?;
    let task = design_latency(iters, false)?;
    let cpus = thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    println!("QUIC 1-byte round trip, 127.0.0.1, one process, {iters} iterations, {cpus} CPUs");
    println!("{:<44} {:>10} {:>8}", "what", "rtt (us)", "x raw");
    for (what, v) in [
        ("raw quinn ping-pong (baseline)", raw),
        ("transport, answers from callbacks", callback),
        ("transport, A answers from a host thread", blocking),
        ("quinn, host thread writes directly", direct),
        ("quinn, host thread -> writer task", task),
    ] {
        println!("{what:<44} {v:>10.1} {:>8.2}", v / raw);
    }
    println!();
    println!("raw.latency.quic.1B.rtt_us {raw:.2} us");
    println!("transport.latency.quic.1B.rtt_us {callback:.2} us");
    println!("transport.latency.quic.1B.ratio {:.3} x", callback / raw);
    println!("transport.latency.quic.1B.blocking_rtt_us {blocking:.2} us");
    println!(
        "transport.latency.quic.1B.blocking_ratio {:.3} x",
        blocking / raw
    );
    println!("design.quic.send_direct.1B.rtt_us {direct:.2} us");
    println!("design.quic.send_via_task.1B.rtt_us {task:.2} us");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
        assert_eq!(Cli::try_parse_from(["quic-bench"]).unwrap().iters, 20_000);
        assert_eq!(Cli::try_parse_from(["quic-bench", "5"]).unwrap().iters, 5);
        assert!(Cli::try_parse_from(["quic-bench", "many"]).is_err());
    }
}
