//! 1-byte round trip of the QUIC transport against plain quinn, both measured in this
//! run, in one process on 127.0.0.1 (two endpoints, each with its own runtime).
//!
//! - `raw`: [`ipl_transport_quic::baseline`], a quinn ping-pong with each side's loop
//!   inside its runtime's `block_on` (the raw limit).
//! - `transport`: two transport endpoints used through the plugin ABI as the IPL uses
//!   them; both sides answer from their message callback (the transport's own cost).
//! - `transport blocking`: the same, but side A's answers come from a host thread that
//!   waits for each message (callback -> channel -> thread -> `send`), as a blocking
//!   IPL receive does; it adds two thread wake-ups per round trip.
//! - `design`: plain quinn with the client's writes made by a host thread, either
//!   directly on the stream (what `send` does) or handed to a writer task over a channel.
//!
//! Usage: `cargo run --release -p ipl-transport-quic --example quic-bench [iterations]`.
//! Prints a table, then `name value unit` lines.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_transport_abi::{
    ChannelClosed, Plugin, ReceivedBuffer, TransportEvents, TransportInstance,
};
use ipl_transport_quic::baseline;

const PATIENCE: Duration = Duration::from_secs(60);

fn raw_latency(iters: usize) -> f64 {
    let (addr, server) = baseline::serve("127.0.0.1:0".parse().unwrap()).unwrap();
    let warm = iters / 10 + 1;
    let t = thread::spawn(move || {
        server.echo(1, warm).unwrap();
        server.echo(1, iters).unwrap();
    });
    let client = baseline::RawClient::connect(addr).unwrap();
    client.latency(1, warm).unwrap();
    let us = client.latency(1, iters).unwrap();
    t.join().unwrap();
    us
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
        if let Some(tx) = &*self.to_thread.lock().unwrap() {
            let _ = tx.send(ch);
            return;
        }
        let mut left = self.left.lock().unwrap();
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

fn pair() -> Pair {
    let plugin = Plugin::from_static(&ipl_transport_quic::PLUGIN).unwrap();
    let secret = PoolSecret::generate().unwrap();
    let cfg = format!("secret={}\npool=bench", secret.to_hex());
    let echo = Arc::new(Echo(OnceLock::new()));
    let b = Arc::new(plugin.create(&cfg, echo.clone()).unwrap());
    let _ = echo.0.set(Arc::downgrade(&b));
    let pinger = Arc::new(Pinger {
        me: OnceLock::new(),
        left: Mutex::new(0),
        done: Condvar::new(),
        to_thread: Mutex::new(None),
    });
    let a = Arc::new(plugin.create(&cfg, pinger.clone()).unwrap());
    let _ = pinger.me.set(Arc::downgrade(&a));
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    Pair {
        a,
        _b: b,
        pinger,
        ch,
    }
}

fn callback_rounds(p: &Pair, n: usize) -> f64 {
    *p.pinger.left.lock().unwrap() = n;
    let start = Instant::now();
    p.a.send(p.ch, &[&[1]]).unwrap();
    let mut left = p.pinger.left.lock().unwrap();
    while *left > 0 {
        let (g, t) = p.pinger.done.wait_timeout(left, PATIENCE).unwrap();
        assert!(!t.timed_out(), "callback ping-pong stalled");
        left = g;
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn transport_latency(iters: usize) -> (f64, f64) {
    let p = pair();
    callback_rounds(&p, iters / 10 + 1);
    let callback = callback_rounds(&p, iters);
    let (tx, rx) = mpsc::channel();
    *p.pinger.to_thread.lock().unwrap() = Some(tx);
    let mut blocking = 0.0;
    for (round, n) in [iters / 10 + 1, iters].into_iter().enumerate() {
        let start = Instant::now();
        for _ in 0..n {
            p.a.send(p.ch, &[&[1]]).unwrap();
            rx.recv_timeout(PATIENCE)
                .expect("blocking ping-pong stalled");
        }
        if round == 1 {
            blocking = start.elapsed().as_secs_f64() * 1e6 / n as f64;
        }
    }
    (callback, blocking)
}

/// Plain quinn, client writes from a host thread: directly (`direct`) or through a
/// writer task (`!direct`); the echo comes back to the thread over a channel.
fn design_latency(iters: usize, direct: bool) -> f64 {
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
    let (addr, server) = baseline::serve("127.0.0.1:0".parse().unwrap()).unwrap();
    let total = iters + iters / 10 + 1;
    let t = thread::spawn(move || server.echo(1, total).unwrap());
    // The client: the transport's set-up, as a client of the baseline server.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let tls = ipl_transport_quic::tls::PoolTls::new(
        &PoolSecret::from_bytes([0x5a; 32]),
        "ipl-quic-baseline",
    )
    .unwrap();
    let me = tls.identity(1).unwrap();
    let client = tls
        .client_config(&me, Arc::new(quinn::TransportConfig::default()))
        .unwrap();
    let endpoint = {
        let _g = rt.enter();
        quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap()
    };
    let conn = rt
        .block_on(async {
            endpoint
                .connect_with(client, addr, &ipl_transport_quic::tls::server_name(0xba5e))
                .unwrap()
                .await
        })
        .unwrap();
    let (send, mut recv) = rt.block_on(conn.open_bi()).unwrap();
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
                wait(s.write_all(&[1])).unwrap();
            } else {
                to_writer.send(1).unwrap();
            }
            back_rx
                .recv_timeout(PATIENCE)
                .expect("design ping-pong stalled");
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
    t.join().unwrap();
    rt.shutdown_timeout(Duration::from_secs(1));
    us
}

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let raw = raw_latency(iters);
    let (callback, blocking) = transport_latency(iters);
    let direct = design_latency(iters, true);
    let task = design_latency(iters, false);
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
}
