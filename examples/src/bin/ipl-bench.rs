//! IPL micro-benchmark: round-trip latency of the in-process transport, against a raw
//! thread-to-thread ping-pong in the same run (the raw limit for in-process messaging).
//!
//! Usage: `ipl-bench latency [--sizes 1,1024,65536] [--iters N]`
//!
//! Two threads (client and server, placed by the OS on this machine's cores) ping-pong
//! a message of each size. Two receive strategies are measured for both the IPL and the
//! raw baseline: `block` (the receiver sleeps in a blocking receive and is woken) and
//! `spin` (the receiver polls). Output: a table, then lines
//! `ipl.latency.inproc.<size>B.<mode>.rtt_us`, `raw.latency.inproc.<size>B.<mode>.rtt_us`
//! and `ratio.latency.inproc.<size>B.<mode>`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use ibis_examples::{report, stats, us, Figure};
use ipl::{EmbeddedRegistry, Ibis, PortCapabilities as P, PortType};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Block,
    Spin,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Block => "block",
            Mode::Spin => "spin",
        }
    }
}

fn port_type() -> ipl::Result<PortType> {
    PortType::new(
        P::CONNECTION_ONE_TO_ONE
            | P::RECEIVE_EXPLICIT
            | P::RECEIVE_POLL
            | P::SERIALIZATION_BYTE
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
}

fn receive(port: &ipl::ReceivePort, mode: Mode) -> ipl::Result<ipl::ReadMessage> {
    match mode {
        Mode::Block => port.receive(),
        Mode::Spin => loop {
            if let Some(m) = port.poll()? {
                return Ok(m);
            }
            std::hint::spin_loop();
        },
    }
}

/// IPL round trips over the in-process transport; returns per-iteration samples.
fn ipl_pingpong(size: usize, iters: usize, mode: Mode) -> ipl::Result<Vec<Duration>> {
    let t = port_type()?;
    let reg = EmbeddedRegistry::new();
    let a = Ibis::builder()
        .pool("bench")
        .registry(&reg)
        .port_type(t)
        .build()?;
    let b = Ibis::builder()
        .pool("bench")
        .registry(&reg)
        .port_type(t)
        .build()?;
    let a_in = a.create_receive_port(&t, "in")?;
    a_in.enable_connections();
    let b_in = b.create_receive_port(&t, "in")?;
    b_in.enable_connections();
    let mut a_out = a.create_send_port(&t, "out")?;
    a_out.connect(b_in.identifier(), Duration::from_secs(5))?;
    let mut b_out = b.create_send_port(&t, "out")?;
    b_out.connect(a_in.identifier(), Duration::from_secs(5))?;
    let warm = iters / 10 + 10;
    let total = warm + iters;
    let server = std::thread::spawn(move || -> ipl::Result<()> {
        let mut buf = vec![0u8; size];
        for _ in 0..total {
            let mut m = receive(&b_in, mode)?;
            m.read_bytes(&mut buf)?;
            m.finish();
            let mut w = b_out.new_message()?;
            w.write_bytes(&buf)?;
            w.finish()?;
        }
        Ok(())
    });
    let payload = vec![7u8; size];
    let mut back = vec![0u8; size];
    let mut samples = Vec::with_capacity(iters);
    for i in 0..total {
        let t0 = Instant::now();
        let mut w = a_out.new_message()?;
        w.write_bytes(&payload)?;
        w.finish()?;
        let mut m = receive(&a_in, mode)?;
        m.read_bytes(&mut back)?;
        m.finish();
        if i >= warm {
            samples.push(t0.elapsed());
        }
    }
    server
        .join()
        .map_err(|_| ipl::IplError::Protocol("server thread panicked".into()))??;
    Ok(samples)
}

fn raw_recv(rx: &mpsc::Receiver<Vec<u8>>, mode: Mode) -> Option<Vec<u8>> {
    match mode {
        Mode::Block => rx.recv().ok(),
        Mode::Spin => loop {
            match rx.try_recv() {
                Ok(v) => return Some(v),
                Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
                Err(mpsc::TryRecvError::Disconnected) => return None,
            }
        },
    }
}

/// The raw limit: a thread-to-thread ping-pong over std channels with one copy of the
/// payload per message (as the in-process transport does).
fn raw_pingpong(size: usize, iters: usize, mode: Mode) -> Vec<Duration> {
    let (to_b, b_rx) = mpsc::channel::<Vec<u8>>();
    let (to_a, a_rx) = mpsc::channel::<Vec<u8>>();
    let warm = iters / 10 + 10;
    let total = warm + iters;
    let server = std::thread::spawn(move || {
        for _ in 0..total {
            let Some(v) = raw_recv(&b_rx, mode) else {
                return;
            };
            if to_a.send(v.as_slice().to_vec()).is_err() {
                return;
            }
        }
    });
    let payload = vec![7u8; size];
    let mut samples = Vec::with_capacity(iters);
    for i in 0..total {
        let t0 = Instant::now();
        if to_b.send(payload.clone()).is_err() {
            break;
        }
        let Some(v) = raw_recv(&a_rx, mode) else {
            break;
        };
        std::hint::black_box(&v);
        if i >= warm {
            samples.push(t0.elapsed());
        }
    }
    let _ = server.join();
    samples
}

fn parse_list(s: &str) -> Vec<usize> {
    s.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

fn main() -> ipl::Result<()> {
    ibis_examples::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut sizes = vec![1, 1024, 65536];
    let mut iters = 20_000usize;
    let mut cmd = "latency".to_string();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--sizes" if i + 1 < args.len() => {
                sizes = parse_list(&args[i + 1]);
                i += 1;
            }
            "--iters" if i + 1 < args.len() => {
                iters = args[i + 1].parse().unwrap_or(iters);
                i += 1;
            }
            "--transport" if i + 1 < args.len() => {
                if args[i + 1] != "inproc" {
                    eprintln!("only the inproc transport exists in this build");
                    std::process::exit(2);
                }
                i += 1;
            }
            "latency" => cmd = "latency".into(),
            other => {
                eprintln!("usage: ipl-bench latency [--transport inproc] [--sizes 1,1024] [--iters N]\nunknown argument {other}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let _ = cmd;
    let mut figures = Vec::new();
    for &size in &sizes {
        for mode in [Mode::Block, Mode::Spin] {
            let n = if size > 16384 { iters / 4 } else { iters }.max(100);
            let ipl_s = stats(&mut ipl_pingpong(size, n, mode)?);
            let raw_s = stats(&mut raw_pingpong(size, n, mode));
            let m = mode.name();
            figures.push(Figure {
                name: format!("ipl.latency.inproc.{size}B.{m}.rtt_us"),
                value: us(ipl_s.median),
                unit: "us",
                what: format!(
                    "IPL inproc {size} B round trip, {m} (median; min {:.2})",
                    us(ipl_s.min)
                ),
            });
            figures.push(Figure {
                name: format!("raw.latency.inproc.{size}B.{m}.rtt_us"),
                value: us(raw_s.median),
                unit: "us",
                what: format!(
                    "raw thread ping-pong {size} B, {m} (median; min {:.2})",
                    us(raw_s.min)
                ),
            });
            figures.push(Figure {
                name: format!("ratio.latency.inproc.{size}B.{m}"),
                value: us(ipl_s.median) / us(raw_s.median).max(1e-9),
                unit: "x",
                what: format!("IPL / raw, {size} B, {m}"),
            });
        }
    }
    report(
        "ipl-bench latency: in-process transport, 2 threads placed by the OS",
        &figures,
    );
    Ok(())
}
