//! Validation of the WAN emulator: round trip and throughput between two clusters over
//! wan-emu (on TCP), against what the configured link predicts, and against the same IPL
//! stack over plain TCP measured in the same run.
//!
//! ```text
//! cargo build --release -p ipl-plugin-wan-emu -p ibis-bench --bin wan-bench
//! target/release/wan-bench [--latency-ms 5] [--bandwidth-mbit 100]
//!                          [--sizes 1,64,1024,...,1048576] [--iters 20] [--stream-ms 1000]
//! ```
//!
//! Two IPL members in one process, in clusters `A` and `B`, use the wan-emu plugin (found
//! at run time like any plugin, so it must be built) with the link `A>B` and `B>A` set to
//! the given one-way latency `L` and bandwidth `B`. For each size `s`:
//! - **round trip**: `A` sends `s` bytes, `B` answers with `s` bytes; the model predicts
//!   `2 * (L + s/B)`. The figure is the median of `--iters` round trips.
//! - **throughput** (sizes of at least 1 KiB, where the link and not the per-message cost
//!   of the stack is the bottleneck): `A` streams messages of `s` bytes for about
//!   `--stream-ms`; `B` times the arrivals from the first to the last, so the link's
//!   latency drops out; the model predicts `B`.
//!
//! The same measurements over plain TCP (no emulation, same IPL stack) show what the real
//! stack adds: back to back (`tcp.rtt`, the raw limit) and after a pause as long as the
//! emulated round trip (`tcp.rtt_paced`), since a round trip of milliseconds finds every
//! thread of the stack asleep, and waking them costs more than a hot ping-pong. Output: a table, then lines `name value unit`: `wan.rtt.<s>B.us`,
//! `wan.rtt_expected.<s>B.us`, `wan.error.<s>B.pct`, `tcp.rtt.<s>B.us`,
//! `tcp.rtt_paced.<s>B.us`, and
//! `wan.throughput.<s>B.MBps`, `wan.throughput_expected.<s>B.MBps`,
//! `wan.throughput_error.<s>B.pct`, `tcp.throughput.<s>B.MBps`.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use clap::Parser;
use ibis_bench::{at_least_one, ping_pong_capabilities, report, stats, us, Figure};
use ipl::{EmbeddedRegistry, Ibis, PortCapabilities as P, PortType, ReceivePort, SendPort};
use ipl_auth::PoolSecret;

const WAIT: Duration = Duration::from_secs(120);

const PING: u32 = 0;
const STREAM: u32 = 1;
const STREAM_LAST: u32 = 2;
const QUIT: u32 = 3;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Validation of the WAN emulator: round trip and throughput between two clusters over
/// wan-emu (on TCP), against what the configured link predicts and against plain TCP.
#[derive(Parser, Debug, Clone)]
#[command(name = "wan-bench", version)]
struct Args {
    /// One-way latency of the emulated link, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5.0, value_parser = non_negative)]
    latency_ms: f64,
    /// Bandwidth of the emulated link, in Mbit/s.
    #[arg(long, value_name = "MBIT", default_value_t = 100.0, value_parser = positive)]
    bandwidth_mbit: f64,
    /// Message sizes in bytes.
    #[arg(
        long,
        value_name = "N,N",
        value_delimiter = ',',
        default_value = "1,64,1024,16384,65536,262144,1048576"
    )]
    sizes: Vec<usize>,
    /// Round trips per size (half from 256 KiB up).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = at_least_one)]
    iters: usize,
    /// About how long each stream lasts, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    stream_ms: u64,
}

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        Ok(_) => Err("must be a finite number of at least 0".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        Ok(_) => Err("must be a finite number above 0".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn main() {
    ipl_tools::init_tracing("warn");
    let a = Args::parse();
    ibis_bench::exit_on_error("wan-bench", run(&a));
}

fn port_type() -> Res<PortType> {
    Ok(PortType::new(ping_pong_capabilities(
        P::SERIALIZATION_DATA,
    ))?)
}

/// Two members (clusters A and B) over `transport`, connected both ways.
struct Pair {
    a: Ibis,
    b: Ibis,
    to_b: SendPort,
    at_a: ReceivePort,
    echo: std::thread::JoinHandle<Res<()>>,
}

fn pair(transport: &str, config: &str, secret: &PoolSecret) -> Res<Pair> {
    let t = port_type()?;
    let reg = EmbeddedRegistry::new();
    let pool = format!("wan-bench-{transport}-{}", std::process::id());
    let member = |cluster: &str| -> Res<Ibis> {
        Ok(Ibis::builder()
            .pool(pool.as_str())
            .cluster(cluster)
            .registry(&reg)
            .secret(secret.clone())
            .port_type(t)
            .prefer_transport(transport)
            .transport_config(config)
            .build()?)
    };
    let a = member("A")?;
    let b = member("B")?;
    let used = a.transport_for(&t)?;
    if used != transport {
        return Err(format!("asked for {transport}, negotiated {used}").into());
    }
    let at_a = a.create_receive_port(&t, "at-a")?;
    at_a.enable_connections();
    let at_b = b.create_receive_port(&t, "at-b")?;
    at_b.enable_connections();
    let mut to_b = a.create_send_port(&t, "to-b")?;
    to_b.connect(at_b.identifier(), WAIT)?;
    let mut to_a = b.create_send_port(&t, "to-a")?;
    to_a.connect(at_a.identifier(), WAIT)?;
    let echo = std::thread::spawn(move || echo(at_b, to_a));
    Ok(Pair {
        a,
        b,
        to_b,
        at_a,
        echo,
    })
}

/// B's side: answers pings with a message of the same size, times streams.
fn echo(rp: ReceivePort, mut sp: SendPort) -> Res<()> {
    let mut first: Option<Instant> = None;
    loop {
        let mut m = rp.receive_timeout(WAIT)?;
        let now = Instant::now();
        let kind = m.read_u32()?;
        let len = m.read_u32()? as usize;
        std::hint::black_box(m.read_bytes_ref(len)?);
        m.finish();
        match kind {
            PING => {
                let payload = vec![1u8; len];
                let mut w = sp.new_message()?;
                w.write_u32(PING)?;
                w.write_u32(len as u32)?;
                w.write_bytes_borrowed(&payload)?;
                w.finish()?;
            }
            STREAM => {
                first.get_or_insert(now);
            }
            STREAM_LAST => {
                let span = first.take().map_or(Duration::ZERO, |f| now - f);
                let mut w = sp.new_message()?;
                w.write_u32(STREAM_LAST)?;
                w.write_u32(0)?;
                w.write_u64(span.as_nanos() as u64)?;
                w.finish()?;
            }
            _ => return Ok(()),
        }
    }
}

fn send(sp: &mut SendPort, kind: u32, payload: &[u8]) -> Res<()> {
    let mut w = sp.new_message()?;
    w.write_u32(kind)?;
    w.write_u32(payload.len() as u32)?;
    w.write_bytes_borrowed(payload)?;
    w.finish()?;
    Ok(())
}

impl Pair {
    /// Median round trip of `iters` ping-pongs of `size` bytes (after a warm-up), each
    /// after a pause of `pause` (so that the threads involved have gone to sleep, as
    /// they have when every round trip takes milliseconds).
    fn rtt(&mut self, size: usize, iters: usize, pause: Duration) -> Res<Duration> {
        let payload = vec![7u8; size];
        let mut samples = Vec::with_capacity(iters);
        for i in 0..iters + 2 {
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
            let t0 = Instant::now();
            send(&mut self.to_b, PING, &payload)?;
            let mut m = self.at_a.receive_timeout(WAIT)?;
            let _ = m.read_u32()?;
            let len = m.read_u32()? as usize;
            std::hint::black_box(m.read_bytes_ref(len)?);
            m.finish();
            if i >= 2 {
                samples.push(t0.elapsed());
            }
        }
        Ok(stats(&mut samples).median)
    }

    /// Bytes per second of a stream of `count` messages of `size` bytes, timed at the
    /// receiver from the first arrival to the last.
    fn throughput(&mut self, size: usize, count: usize) -> Res<f64> {
        let payload = vec![7u8; size];
        let count = count.max(3);
        for i in 0..count {
            let kind = if i + 1 == count { STREAM_LAST } else { STREAM };
            send(&mut self.to_b, kind, &payload)?;
        }
        let mut m = self.at_a.receive_timeout(WAIT)?;
        let _ = (m.read_u32()?, m.read_u32()?);
        let span = Duration::from_nanos(m.read_u64()?);
        m.finish();
        // Between the first and the last arrival, count - 1 messages crossed the link.
        Ok(((count - 1) * size) as f64 / span.as_secs_f64().max(1e-9))
    }

    fn end(mut self) -> Res<()> {
        send(&mut self.to_b, QUIT, &[])?;
        self.echo.join().map_err(|_| "echo thread panicked")??;
        drop(self.to_b);
        drop(self.at_a);
        self.a.end()?;
        self.b.end()?;
        Ok(())
    }
}

fn run(a: &Args) -> Res<()> {
    let plugins = ipl::default_plugins();
    if !plugins.iter().any(|p| p.name() == "wan-emu") {
        return Err("the wan-emu plugin was not found: build it first \
                    (cargo build --release -p ipl-plugin-wan-emu) or set IPL_PLUGIN_PATH"
            .into());
    }
    let secret = PoolSecret::generate()?;
    let link = format!(
        "latency_ms={} bandwidth_mbit={}",
        a.latency_ms, a.bandwidth_mbit
    );
    let config = format!("wan.link=A>B {link}\nwan.link=B>A {link}\n");
    let latency = Duration::from_secs_f64(a.latency_ms / 1e3);
    let bps = a.bandwidth_mbit * 1e6 / 8.0;
    let tx = |s: usize| Duration::from_secs_f64(s as f64 / bps);

    let mut wan = pair("wan-emu", &config, &secret)?;
    let mut tcp = pair("tcp", "", &secret)?;
    let mut figures = Vec::new();
    let mut worst: f64 = 0.0;
    println!(
        "# wan-bench: wan-emu over tcp, clusters A<->B, L = {} ms one way, B = {} Mbit/s, \
         one process, 127.0.0.1",
        a.latency_ms, a.bandwidth_mbit
    );
    println!(
        "{:>9}  {:>12} {:>12} {:>8} {:>10} {:>10}   {:>10} {:>10} {:>8} {:>10}",
        "size",
        "rtt exp us",
        "rtt meas us",
        "err %",
        "tcp rtt us",
        "paced us",
        "thr exp MB/s",
        "meas MB/s",
        "err %",
        "tcp MB/s"
    );
    for &s in &a.sizes {
        let iters = if s >= 256 << 10 {
            a.iters.div_ceil(2)
        } else {
            a.iters
        };
        let expect = 2 * (latency + tx(s));
        let measured = wan.rtt(s, iters, Duration::ZERO)?;
        let raw = tcp.rtt(s, iters, Duration::ZERO)?;
        let paced = tcp.rtt(s, iters, expect)?;
        let err = (us(measured) - us(expect)) / us(expect) * 100.0;
        worst = worst.max(err.abs());
        // A figure of this size: `<key>.<s>B.<unit>`.
        let at = |key: &str, value: f64, unit: &'static str, what: String| {
            let suffix = match unit {
                "%" => "pct",
                "MB/s" => "MBps",
                u => u,
            };
            Figure::new(format!("{key}.{s}B.{suffix}"), value, unit, what)
        };
        figures.extend([
            at(
                "wan.rtt",
                us(measured),
                "us",
                format!("wan-emu {s} B round trip (median of {iters})"),
            ),
            at(
                "wan.rtt_expected",
                us(expect),
                "us",
                format!("configured {s} B round trip 2*(L + s/B)"),
            ),
            at(
                "wan.error",
                err,
                "%",
                format!("wan-emu {s} B round trip error vs configuration"),
            ),
            at(
                "tcp.rtt",
                us(raw),
                "us",
                format!("plain tcp {s} B round trip, same stack (raw limit)"),
            ),
            at(
                "tcp.rtt_paced",
                us(paced),
                "us",
                format!("plain tcp {s} B round trip after a pause as long as the wan one"),
            ),
        ]);
        let (mut texp, mut tmeas, mut terr, mut traw) = (f64::NAN, f64::NAN, f64::NAN, f64::NAN);
        if s >= 1024 {
            let count = ((bps * a.stream_ms as f64 / 1e3) / s as f64).ceil() as usize;
            let count = count.clamp(16, 100_000);
            texp = bps / 1e6;
            tmeas = wan.throughput(s, count)? / 1e6;
            traw = tcp.throughput(s, count)? / 1e6;
            terr = (tmeas - texp) / texp * 100.0;
            worst = worst.max(terr.abs());
            figures.extend([
                at(
                    "wan.throughput",
                    tmeas,
                    "MB/s",
                    format!("wan-emu stream of {count} x {s} B"),
                ),
                at(
                    "wan.throughput_expected",
                    texp,
                    "MB/s",
                    "configured bandwidth B".into(),
                ),
                at(
                    "wan.throughput_error",
                    terr,
                    "%",
                    format!("wan-emu {s} B stream error vs configuration"),
                ),
                at(
                    "tcp.throughput",
                    traw,
                    "MB/s",
                    format!("plain tcp stream of {count} x {s} B (raw limit)"),
                ),
            ]);
        }
        println!(
            "{:>9}  {:>12.1} {:>12.1} {:>8.2} {:>10.1} {:>10.1}   {:>10.2} {:>10.2} {:>8.2} {:>10.1}",
            s,
            us(expect),
            us(measured),
            err,
            us(raw),
            us(paced),
            texp,
            tmeas,
            terr,
            traw
        );
    }
    println!();
    figures.push(Figure::new(
        "wan.error.worst.pct",
        worst,
        "%",
        "largest |error| over all sizes (goal: below 5)",
    ));
    report("wan-bench figures", &figures);
    wan.end()?;
    tcp.end()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed_and_checks_the_link() {
        Args::command().debug_assert();
        let a = Args::try_parse_from(["wan-bench"]).unwrap();
        assert_eq!((a.latency_ms, a.bandwidth_mbit, a.iters), (5.0, 100.0, 20));
        assert_eq!(a.sizes.len(), 7);
        for bad in [
            &["wan-bench", "--latency-ms", "-1"][..],
            &["wan-bench", "--bandwidth-mbit", "0"],
            &["wan-bench", "--iters", "0"],
        ] {
            assert!(Args::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
