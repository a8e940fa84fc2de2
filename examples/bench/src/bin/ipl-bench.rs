//! IPL micro-benchmark: round-trip latency and streaming throughput of a transport,
//! against the raw limit measured in the same run with the same placement.
//!
//! ```text
//! ipl-bench list
//! ipl-bench latency    --transport tcp    --sizes 1,1024,65536     [--iters N] [--repeat R] [--pin os|split|same]
//! ipl-bench throughput --transport tcp    --sizes 65536,1048576    [--mbytes M] [--repeat R]
//! ipl-bench latency    --transport inproc --sizes 1,1024
//! ipl-bench selfloop   --transport shm    --sizes 8   (the IPL's own cost, one thread)
//! ipl-bench latency    --require reliable,fifo,network   (choose by properties)
//! ```
//!
//! Network transports are measured between two processes on this host: this process
//! and a child copy of it, joined in one pool through a registry server started here,
//! over 127.0.0.1. Both processes are placed by the OS on the machine's cores; receivers
//! block (after the IPL's short poll, `IPL_SPIN_US`). The raw baseline runs between the
//! same two processes with the same message sizes and placement, and depends on the
//! transport: for shm a spinning shared-memory ping-pong and stream
//! (`ibis_bench::raw_shm`; and the transport's own rings with nothing above them,
//! `ibis_bench::bare_ring`), for quic a plain quinn ping-pong and stream
//! (`ibis_bench::raw_quic`), for every other transport a plain TCP socket
//! (TCP_NODELAY, `ibis_bench::raw_tcp`) measured twice: spinning on a non-blocking
//! socket, as MPI's receivers poll (`raw.*`, the strongest), and with blocking reads
//! (`raw_blocking.*`, as the IPL's receivers that sleep). The in-process transport is
//! measured between two threads against a thread-to-thread channel ping-pong.
//!
//! Output: a table, then lines `name value unit`:
//! `ipl.latency.<t>.<size>B.rtt_us`, `raw.latency.<t>.<size>B.rtt_us`,
//! `ratio.latency.<t>.<size>B`, and likewise `ipl.throughput.<t>.<size>B.MBps`,
//! `raw.throughput.<t>.<size>B.MBps`, `ratio.throughput.<t>.<size>B`; for a TCP
//! baseline also `raw_blocking.<kind>.<t>.<size>B.<unit>` and
//! `ratio.blocking.<kind>.<t>.<size>B` (IPL / raw blocking); for shm latency
//! also the protocol floor `floor.latency.shm.<size>B.rtt_us`,
//! `ratio.floor.latency.shm.<size>B` (rings alone / raw) and
//! `ratio.ipl_over_floor.latency.shm.<size>B`; `selfloop` prints
//! `ipl.selfloop.<t>.<size>B.us` and `ipl.selfloop.<t>.<size>B.mean_us`.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ibis_bench::bare_ring::BareRing;
use ibis_bench::pair::{connect_pair, PairPool};
use ibis_bench::placement::Placement;
use ibis_bench::raw_quic;
use ibis_bench::raw_shm::RawShm;
use ibis_bench::raw_tcp::{RawTcp, Wait};
use ibis_bench::{at_least_one, median, ping_pong_capabilities, report, stats, us, Figure};
use ipl::{
    EmbeddedRegistry, Ibis, PortCapabilities as P, PortType, ReceivePort, SendPort,
    TransportCapabilities as T,
};

const WAIT: Duration = Duration::from_secs(60);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Round-trip latency and streaming throughput of an IPL transport, against the raw
/// limit measured in the same run with the same placement.
#[derive(Parser, Debug)]
#[command(name = "ipl-bench", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Lists every transport plugin (linked in, or found on the search path), loaded or
    /// refused, with its capabilities or the reason.
    List,
    /// Round trips of a transport between two processes (two threads for inproc),
    /// against its raw baseline.
    Latency(Opts),
    /// Streams of messages between two processes, against the raw baseline.
    Throughput(Opts),
    /// The IPL's own cost: one thread sends to its own receive port and receives.
    Selfloop(Opts),
    /// The re-executed peer process of `latency` and `throughput` (internal): RAW
    /// names the raw baseline the measuring process set up.
    #[command(name = "__peer", hide = true)]
    Peer {
        raw: String,
        #[command(subcommand)]
        cmd: PeerCmd,
    },
}

/// What the peer process runs (with the measuring process's options).
#[derive(Subcommand, Debug)]
enum PeerCmd {
    Latency(Opts),
    Throughput(Opts),
}

#[derive(clap::Args, Clone, Debug)]
struct Opts {
    /// The transport to measure (tcp, shm, quic, inproc, ...); without it, the best
    /// available one that has the --require properties.
    #[arg(long, value_name = "NAME")]
    transport: Option<String>,
    /// Port capabilities and transport properties to require (e.g. reliable,fifo,network).
    #[arg(long, value_name = "CAP,CAP", value_delimiter = ',')]
    require: Vec<String>,
    /// Message sizes in bytes [default: 1,1024,65536; throughput: 65536,1048576].
    #[arg(long, value_name = "N,N", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Round trips per size and repetition (a quarter, at least 100, from 64 KiB up).
    #[arg(long, value_name = "N", default_value_t = 5_000)]
    iters: usize,
    /// MiB streamed per size and repetition (throughput).
    #[arg(long, value_name = "M", default_value_t = 256)]
    mbytes: usize,
    /// Repetitions; raw and IPL alternate, each figure is the median.
    #[arg(long, value_name = "R", default_value_t = 5, value_parser = at_least_one)]
    repeat: usize,
    /// Round trips per timed sample of `selfloop` (1: a sample per message).
    #[arg(long, value_name = "B", default_value_t = 1, value_parser = at_least_one)]
    batch: usize,
    /// Where the two processes run: left to the OS, one per CPU, or both on CPU 0.
    #[arg(long, value_enum, default_value_t = Placement::Os)]
    pin: Placement,
    /// The address of this process that the peer reaches it on: its registry server and
    /// the raw TCP baseline listen there.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    address: std::net::IpAddr,
    /// Start the peer on another host: in network namespace NAME (`ip netns exec`;
    /// needs root). Run this process in another one, with `--address` its address there.
    #[arg(long, value_name = "NAME")]
    peer_netns: Option<String>,
}

/// One run's settings.
#[derive(Clone, Debug)]
struct Args {
    /// `latency`, `throughput` or `selfloop`.
    cmd: &'static str,
    transport: Option<String>,
    require: Vec<String>,
    sizes: Vec<usize>,
    iters: usize,
    mbytes: usize,
    repeat: usize,
    /// Round trips per timed sample of `selfloop` (1: a sample per message).
    batch: usize,
    /// Where the two processes run.
    pin: Placement,
    /// Where the peer reaches this process.
    address: std::net::IpAddr,
    /// The peer's network namespace, if it runs on another host.
    peer_netns: Option<String>,
}

impl Args {
    fn new(cmd: &'static str, o: Opts) -> Args {
        let sizes = if !o.sizes.is_empty() {
            o.sizes
        } else if cmd == "throughput" {
            vec![65536, 1 << 20]
        } else {
            vec![1, 1024, 65536]
        };
        Args {
            cmd,
            transport: o.transport,
            require: o.require.iter().map(|s| s.trim().to_string()).collect(),
            sizes,
            iters: o.iters,
            mbytes: o.mbytes,
            repeat: o.repeat,
            batch: o.batch,
            pin: o.pin,
            address: o.address,
            peer_netns: o.peer_netns,
        }
    }
}

/// The peer's command line after `__peer RAW`: this run's command and options.
fn to_argv(a: &Args) -> Vec<String> {
    let mut v = vec![a.cmd.to_string()];
    if let Some(t) = &a.transport {
        v.extend(["--transport".into(), t.clone()]);
    }
    if !a.require.is_empty() {
        v.extend(["--require".into(), a.require.join(",")]);
    }
    let sizes: Vec<String> = a.sizes.iter().map(|s| s.to_string()).collect();
    v.extend(["--sizes".into(), sizes.join(",")]);
    v.extend(["--iters".into(), a.iters.to_string()]);
    v.extend(["--mbytes".into(), a.mbytes.to_string()]);
    v.extend(["--repeat".into(), a.repeat.to_string()]);
    v.extend(["--pin".into(), a.pin.name().to_string()]);
    v.extend(["--address".into(), a.address.to_string()]);
    v
}

fn main() {
    ipl_tools::init_tracing("warn");
    let result = match Cli::parse().cmd {
        Cmd::List => list(),
        Cmd::Latency(o) => measure(&Args::new("latency", o)),
        Cmd::Throughput(o) => measure(&Args::new("throughput", o)),
        Cmd::Selfloop(o) => selfloop(&Args::new("selfloop", o)),
        Cmd::Peer { raw, cmd } => {
            let a = match cmd {
                PeerCmd::Latency(o) => Args::new("latency", o),
                PeerCmd::Throughput(o) => Args::new("throughput", o),
            };
            peer(&raw, &a)
        }
    };
    ibis_bench::exit_on_error("ipl-bench", result);
}

// ---- the raw baselines -------------------------------------------------------------

/// One side of the raw baseline that a transport is compared with.
enum Raw {
    /// A plain TCP socket (tcp and every transport without a baseline of its own).
    Tcp(RawTcp),
    /// A spinning shared-memory ping-pong and stream (shm), and the transport's own
    /// rings with nothing above them (the protocol floor).
    Shm(RawShm, Box<BareRing>),
    /// The measuring side of a plain quinn connection (quic).
    QuicClient(raw_quic::RawClient),
    /// The echoing side of a plain quinn connection (quic).
    QuicServer(raw_quic::RawServer),
}

/// The baseline that goes with a transport.
fn raw_kind(transport: &str) -> &'static str {
    match transport {
        "shm" => "shm",
        "quic" => "quic",
        _ => "tcp",
    }
}

fn raw_description(kind: &str) -> &'static str {
    match kind {
        "shm" => {
            "raw = spinning shared-memory ping-pong / stream, one copy per message; \
             rings alone = the transport's own rings (slot headers, credits, \
             reclamation) spinning, with no endpoint, plugin boundary or IPL"
        }
        "quic" => "raw = plain quinn ping-pong / stream (TLS 1.3), one tokio thread per side",
        _ => {
            "raw = plain TCP socket, TCP_NODELAY, spinning on a non-blocking socket; \
             raw blocking = the same socket with blocking reads"
        }
    }
}

impl Raw {
    /// The measuring side: median (tcp) or mean round trip in us.
    fn latency(&mut self, size: usize, iters: usize) -> Res<f64> {
        Ok(match self {
            Raw::Tcp(s) => {
                s.set_wait(Wait::Spin)?;
                raw_latency(s, size, iters)?
            }
            Raw::Shm(r, _) => r.latency(size, iters)?,
            Raw::QuicClient(c) => c.latency(size, iters)?,
            Raw::QuicServer(_) => return Err("the echoing side cannot measure".into()),
        })
    }

    /// The measuring side: MB/s of a stream of `count` messages.
    fn throughput(&mut self, size: usize, count: usize) -> Res<f64> {
        Ok(match self {
            Raw::Tcp(s) => {
                s.set_wait(Wait::Spin)?;
                raw_throughput(s, size, count)?
            }
            Raw::Shm(r, _) => r.stream(size, count)?,
            Raw::QuicClient(c) => c.throughput(size, count)?,
            Raw::QuicServer(_) => return Err("the echoing side cannot measure".into()),
        })
    }

    /// The peer's half of [`Raw::latency`].
    fn echo(&mut self, size: usize, iters: usize) -> Res<()> {
        match self {
            Raw::Tcp(s) => {
                s.set_wait(Wait::Spin)?;
                tcp_echo(s, size, iters)?;
            }
            Raw::Shm(r, _) => r.echo(size, iters)?,
            Raw::QuicServer(q) => q.echo(size, iters)?,
            Raw::QuicClient(_) => return Err("the measuring side cannot echo".into()),
        }
        Ok(())
    }

    /// The peer's half of [`Raw::throughput`].
    fn sink(&mut self, size: usize, count: usize) -> Res<()> {
        match self {
            Raw::Tcp(s) => {
                s.set_wait(Wait::Spin)?;
                tcp_sink(s, size, count)?;
            }
            Raw::Shm(r, _) => r.sink(size, count)?,
            Raw::QuicServer(q) => q.sink(size, count)?,
            Raw::QuicClient(_) => return Err("the measuring side cannot sink".into()),
        }
        Ok(())
    }

    /// The measuring side of the blocking baseline, where the transport has one (tcp):
    /// the median round trip in us.
    fn blocking_latency(&mut self, size: usize, iters: usize) -> Res<Option<f64>> {
        match self {
            Raw::Tcp(s) => {
                s.set_wait(Wait::Block)?;
                Ok(Some(raw_latency(s, size, iters)?))
            }
            _ => Ok(None),
        }
    }

    /// The peer's half of [`Raw::blocking_latency`].
    fn blocking_echo(&mut self, size: usize, iters: usize) -> Res<()> {
        if let Raw::Tcp(s) = self {
            s.set_wait(Wait::Block)?;
            tcp_echo(s, size, iters)?;
        }
        Ok(())
    }

    /// The measuring side of the blocking stream (tcp): MB/s.
    fn blocking_throughput(&mut self, size: usize, count: usize) -> Res<Option<f64>> {
        match self {
            Raw::Tcp(s) => {
                s.set_wait(Wait::Block)?;
                Ok(Some(raw_throughput(s, size, count)?))
            }
            _ => Ok(None),
        }
    }

    /// The peer's half of [`Raw::blocking_throughput`].
    fn blocking_sink(&mut self, size: usize, count: usize) -> Res<()> {
        if let Raw::Tcp(s) = self {
            s.set_wait(Wait::Block)?;
            tcp_sink(s, size, count)?;
        }
        Ok(())
    }

    /// The measuring side of the protocol floor, where the transport has one (shm) and
    /// a message of `size` bytes fits it: the mean round trip in us.
    fn floor_latency(&mut self, size: usize, iters: usize) -> Res<Option<f64>> {
        match self {
            Raw::Shm(_, ring) if size <= ring.max_message() => Ok(Some(ring.latency(size, iters)?)),
            _ => Ok(None),
        }
    }

    /// The peer's half of [`Raw::floor_latency`].
    fn floor_echo(&mut self, size: usize, iters: usize) -> Res<()> {
        match self {
            Raw::Shm(_, ring) if size <= ring.max_message() => Ok(ring.echo(size, iters)?),
            _ => Ok(()),
        }
    }
}

/// The measuring side's set-up before the peer starts: the argument that tells the peer
/// where the baseline is, and what to finish once the peer runs.
enum RawSetup {
    Tcp(TcpListener),
    Shm(RawShm, Box<BareRing>),
    /// The peer serves and prints `RAW <addr>` on its standard output.
    Quic,
}

impl RawSetup {
    fn new(kind: &str, a: &Args) -> Res<(RawSetup, String)> {
        Ok(match kind {
            "shm" => {
                let max = a.sizes.iter().copied().max().unwrap_or(1).max(8);
                let (r, name) = RawShm::create(max)?;
                // The floor only for the sizes a latency run uses (a ring of 4x the
                // largest message); throughput runs leave it out.
                let floor_max = if a.cmd == "latency" && max <= 4 << 20 {
                    max
                } else {
                    8
                };
                let (ring, ring_name) = BareRing::create(floor_max)?;
                (
                    RawSetup::Shm(r, Box::new(ring)),
                    format!("shm:{name},{ring_name}"),
                )
            }
            "quic" => (RawSetup::Quic, "quic".into()),
            _ => {
                let l = TcpListener::bind((a.address, 0))?;
                let port = l.local_addr()?.port();
                (RawSetup::Tcp(l), format!("tcp:{port}"))
            }
        })
    }

    fn finish(self, peer_raw_addr: &mpsc::Receiver<String>) -> Res<Raw> {
        Ok(match self {
            RawSetup::Tcp(l) => {
                let (sock, _) = l.accept()?;
                Raw::Tcp(RawTcp::new(sock, WAIT)?)
            }
            RawSetup::Shm(r, ring) => {
                r.wait_peer()?;
                ring.wait_peer()?;
                Raw::Shm(r, ring)
            }
            RawSetup::Quic => {
                let addr = peer_raw_addr
                    .recv_timeout(WAIT)
                    .map_err(|_| "the peer did not report its quinn address")?;
                Raw::QuicClient(raw_quic::RawClient::connect(addr.parse()?)?)
            }
        })
    }
}

/// The peer's side of the baseline named by the measurer.
fn raw_peer(spec: &str, a: &Args) -> Res<Raw> {
    Ok(match spec.split_once(':') {
        Some(("tcp", port)) => {
            let s = TcpStream::connect((a.address, port.parse::<u16>()?))?;
            Raw::Tcp(RawTcp::new(s, WAIT)?)
        }
        Some(("shm", names)) => {
            let (raw, ring) = names
                .split_once(',')
                .ok_or("the shm baseline names two segments")?;
            Raw::Shm(RawShm::open(raw)?, Box::new(BareRing::open(ring)?))
        }
        None if spec == "quic" => {
            let (addr, server) = raw_quic::serve("127.0.0.1:0".parse()?)?;
            println!("RAW {addr}");
            std::io::stdout().flush()?;
            Raw::QuicServer(server)
        }
        _ => return Err(format!("unknown raw baseline {spec:?}").into()),
    })
}

/// `ipl-bench list`: every plugin, linked in or found on the search path, loaded or
/// refused, with its capabilities or the reason.
fn list() -> Res<()> {
    println!(
        "{:<10} {:<9} {:>8}  {:<52} origin",
        "transport", "version", "priority", "capabilities"
    );
    for p in ipl::static_plugins() {
        print_plugin(&p);
    }
    let found = ipl_transport_abi::loader::discover_default();
    for p in &found.loaded {
        print_plugin(p);
    }
    for (path, why) in &found.refused {
        println!("refused    {}: {why}", path.display());
    }
    Ok(())
}

fn print_plugin(p: &ipl::Plugin) {
    let avail = match p.availability() {
        Ok(()) => String::new(),
        Err(r) => format!("  UNAVAILABLE: {r}"),
    };
    println!(
        "{:<10} {:<9} {:>8}  {:<52} {}{avail}",
        p.name(),
        p.version(),
        p.priority(),
        p.capabilities().to_string(),
        p.origin()
    );
}

fn port_type(a: &Args) -> Res<PortType> {
    let mut caps = ping_pong_capabilities(P::SERIALIZATION_BYTE);
    for r in &a.require {
        match T::NAMED.iter().find(|(_, n)| n == r) {
            // Transport properties beyond the port type's vocabulary (network,
            // zero_copy, ...) select the transport by name below.
            Some(_) => {}
            None => {
                if let Some(c) = ipl::PortCapabilities::from_name(r) {
                    caps |= c;
                } else {
                    return Err(format!("unknown capability {r:?}").into());
                }
            }
        }
    }
    Ok(PortType::new(caps)?)
}

/// The transport to measure: by name, or the best plugin with the required
/// transport properties.
fn pick_transport(a: &Args) -> Res<String> {
    if let Some(t) = &a.transport {
        return Ok(t.clone());
    }
    let mut want = T::RELIABLE | T::FIFO;
    for r in &a.require {
        if let Some((c, _)) = T::NAMED.iter().find(|(_, n)| n == r) {
            want |= *c;
        }
    }
    ipl::default_plugins()
        .into_iter()
        .filter(|p| p.availability().is_ok() && p.capabilities().contains(want))
        .max_by_key(|p| p.priority())
        .map(|p| p.name().to_string())
        .ok_or_else(|| format!("no available transport provides {want}").into())
}

fn measure(a: &Args) -> Res<()> {
    let transport = pick_transport(a)?;
    let mut a = a.clone();
    a.transport = Some(transport.clone());
    if transport == "inproc" {
        return inproc(&a);
    }
    // Before any thread starts: they (and the child, until it re-pins) inherit it.
    a.pin.apply(true)?;
    // A registry server for a pool of two: us and a child copy of us.
    let pp = PairPool::start_at("ipl-bench", a.address)?;
    let kind = raw_kind(&transport);
    let (setup, spec) = RawSetup::new(kind, &a)?;
    let mut argv = vec!["__peer".to_string(), spec];
    argv.extend(to_argv(&a));
    let mut child = pp
        .peer_command_in(a.peer_netns.as_deref(), &argv)?
        .stdout(Stdio::piped())
        .spawn()?;
    let child_out = child.stdout.take().ok_or("no child stdout")?;
    let (addr_tx, addr_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(child_out).lines().map_while(Result::ok) {
            match line.strip_prefix("RAW ") {
                Some(addr) => {
                    let _ = addr_tx.send(addr.to_string());
                }
                None => eprintln!("[peer] {line}"),
            }
        }
    });
    let t = port_type(&a)?;
    let ibis = pp
        .member0(Ibis::builder(), WAIT)?
        .capabilities(ipl::IbisCapabilities::CLOSED_WORLD | ipl::IbisCapabilities::ELECTIONS)
        .prefer_transport(transport.as_str())
        .port_type(t)
        .build()?;
    let (rp, mut sp) = connect_pair(&ibis, &t, WAIT)?;
    // The baseline connects only now: a quinn handshake completes when the peer serves
    // its first call, which it does after joining the pool.
    let mut raw = setup.finish(&addr_rx)?;
    // Repetitions alternate raw and IPL phases for every size, so that both see the
    // same machine state; each figure is the median over the repetitions, and each
    // ratio the median of the per-repetition ratios.
    let n = a.sizes.len();
    let mut raw_v = vec![Vec::new(); n];
    let mut ipl_v = vec![Vec::new(); n];
    let mut ratio_v = vec![Vec::new(); n];
    // The protocol floor (shm latency): its round trips and its ratios to raw.
    let mut floor_v = vec![Vec::new(); n];
    let mut floor_ratio_v = vec![Vec::new(); n];
    // The blocking baseline (tcp): its figures and the IPL's ratios to it.
    let mut blocking_v = vec![Vec::new(); n];
    for _ in 0..a.repeat {
        for (i, &size) in a.sizes.iter().enumerate() {
            let (r, x) = if a.cmd == "latency" {
                let r = raw.latency(size, iters_for(&a, size))?;
                if let Some(f) = raw.floor_latency(size, iters_for(&a, size))? {
                    floor_v[i].push(f);
                    floor_ratio_v[i].push(f / r.max(1e-9));
                }
                if let Some(b) = raw.blocking_latency(size, iters_for(&a, size))? {
                    blocking_v[i].push(b);
                }
                let x = us(stats(&mut ipl_latency(
                    &rp,
                    &mut sp,
                    size,
                    iters_for(&a, size),
                    BATCH,
                )?)
                .median);
                (r, x)
            } else {
                let r = raw.throughput(size, count_for(&a, size))?;
                if let Some(b) = raw.blocking_throughput(size, count_for(&a, size))? {
                    blocking_v[i].push(b);
                }
                let x = ipl_throughput(&rp, &mut sp, size, count_for(&a, size))?;
                (r, x)
            };
            raw_v[i].push(r);
            ipl_v[i].push(x);
            ratio_v[i].push(x / r.max(1e-9));
        }
    }
    let mut figures = Vec::new();
    for (i, &size) in a.sizes.iter().enumerate() {
        let tn = &transport;
        let (raw_m, ipl_m, ratio_m) = (median(&raw_v[i]), median(&ipl_v[i]), median(&ratio_v[i]));
        let spread = |v: &[f64]| {
            let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            format!("{lo:.2}..{hi:.2}")
        };
        let (kind, unit, what_ipl, what_raw) = if a.cmd == "latency" {
            (
                "latency",
                "us",
                format!("IPL {tn} {size} B round trip"),
                format!("raw {kind} {size} B round trip"),
            )
        } else {
            (
                "throughput",
                "MB/s",
                format!("IPL {tn} stream of {size} B messages"),
                format!("raw {kind} stream of {size} B messages"),
            )
        };
        let suffix = if a.cmd == "latency" { "rtt_us" } else { "MBps" };
        figures.push(Figure {
            name: format!("ipl.{kind}.{tn}.{size}B.{suffix}"),
            value: ipl_m,
            unit,
            what: format!("{what_ipl} (range {})", spread(&ipl_v[i])),
        });
        figures.push(Figure {
            name: format!("raw.{kind}.{tn}.{size}B.{suffix}"),
            value: raw_m,
            unit,
            what: format!("{what_raw} (range {})", spread(&raw_v[i])),
        });
        figures.push(Figure {
            name: format!("ratio.{kind}.{tn}.{size}B"),
            value: ratio_m,
            unit: "x",
            what: format!("IPL / raw, {size} B (range {})", spread(&ratio_v[i])),
        });
        if !blocking_v[i].is_empty() {
            let b = median(&blocking_v[i]);
            figures.push(Figure {
                name: format!("raw_blocking.{kind}.{tn}.{size}B.{suffix}"),
                value: b,
                unit,
                what: format!(
                    "raw {kind} blocking, {size} B (range {})",
                    spread(&blocking_v[i])
                ),
            });
            figures.push(Figure {
                name: format!("ratio.blocking.{kind}.{tn}.{size}B"),
                value: ipl_m / b.max(1e-9),
                unit: "x",
                what: format!("IPL / raw blocking, {size} B (of the medians)"),
            });
        }
        if !floor_v[i].is_empty() {
            let floor_m = median(&floor_v[i]);
            figures.push(Figure {
                name: format!("floor.{kind}.{tn}.{size}B.{suffix}"),
                value: floor_m,
                unit,
                what: format!(
                    "{tn} rings alone, {size} B round trip (range {})",
                    spread(&floor_v[i])
                ),
            });
            figures.push(Figure {
                name: format!("ratio.floor.{kind}.{tn}.{size}B"),
                value: median(&floor_ratio_v[i]),
                unit: "x",
                what: format!(
                    "rings alone / raw, {size} B (range {})",
                    spread(&floor_ratio_v[i])
                ),
            });
            figures.push(Figure {
                name: format!("ratio.ipl_over_floor.{kind}.{tn}.{size}B"),
                value: ipl_m / floor_m.max(1e-9),
                unit: "x",
                what: format!("IPL / rings alone, {size} B (of the medians)"),
            });
        }
    }
    if let Raw::Tcp(sock) = &mut raw {
        sock.write_all(&u32::MAX.to_le_bytes())?;
    }
    sp.close();
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("peer process failed: {status}").into());
    }
    rp.close(Some(Duration::from_secs(1)));
    ibis.end()?;
    pp.server.shutdown();
    report(
        &format!(
            "ipl-bench {}: transport {transport}, two processes {}, \
             {}; blocking receivers (IPL: polls up to {} us, yielding, then \
             sleeps); {}; median of {} alternating repetitions",
            a.cmd,
            match &a.peer_netns {
                Some(ns) => format!("on two hosts (this one at {}, the peer in {ns})", a.address),
                None => format!("on this host over {}", a.address),
            },
            a.pin.describe(),
            std::env::var("IPL_SPIN_US").unwrap_or_else(|_| "50".into()),
            raw_description(kind),
            a.repeat
        ),
        &figures,
    );
    Ok(())
}

fn iters_for(a: &Args, size: usize) -> usize {
    if size >= 1 << 16 {
        (a.iters / 4).max(100)
    } else {
        a.iters
    }
}

fn count_for(a: &Args, size: usize) -> usize {
    (a.mbytes << 20) / size.max(1)
}

/// Round trips timed in batches of this many: a clock reading costs about 30 ns on this
/// VM, a third of a raw shared-memory round trip; the shared-memory baseline reads the
/// clock once per run.
const BATCH: usize = 50;

/// Runs `round_trip` `iters / 10 + 10` times to warm up, then `iters` times timed in
/// batches of `batch` ([`BATCH`] for the comparisons): one sample per batch, its mean
/// round trip (so the median of the samples ignores the batches that a preemption hit,
/// and no round trip pays for a clock reading of its own).
fn batched(
    iters: usize,
    batch: usize,
    mut round_trip: impl FnMut() -> Res<()>,
) -> Res<Vec<Duration>> {
    for _ in 0..iters / 10 + 10 {
        round_trip()?;
    }
    let batch = batch.max(1);
    let mut samples = Vec::with_capacity(iters.div_ceil(batch));
    let mut left = iters;
    while left > 0 {
        let n = left.min(batch);
        left -= n;
        let t0 = Instant::now();
        for _ in 0..n {
            round_trip()?;
        }
        samples.push(t0.elapsed() / n as u32);
    }
    Ok(samples)
}

/// IPL round trips of `size` bytes from `sp` back to `rp`, timed by [`batched`].
fn ipl_latency(
    rp: &ReceivePort,
    sp: &mut SendPort,
    size: usize,
    iters: usize,
    batch: usize,
) -> Res<Vec<Duration>> {
    let payload = vec![7u8; size];
    batched(iters, batch, || {
        let mut w = sp.new_message()?;
        w.write_bytes_borrowed(&payload)?;
        w.finish()?;
        let mut m = rp.receive_timeout(WAIT)?;
        std::hint::black_box(m.read_bytes_ref(size)?);
        m.finish();
        Ok(())
    })
}

fn ipl_throughput(rp: &ReceivePort, sp: &mut SendPort, size: usize, count: usize) -> Res<f64> {
    let payload = vec![7u8; size];
    let t0 = Instant::now();
    for _ in 0..count {
        let mut w = sp.new_message()?;
        w.write_bytes_borrowed(&payload)?;
        w.finish()?;
    }
    let m = rp.receive_timeout(WAIT)?; // the peer's acknowledgement of the last one
    m.finish();
    Ok((size * count) as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

fn raw_latency(s: &mut RawTcp, size: usize, iters: usize) -> Res<f64> {
    let mut frame = (size as u32).to_le_bytes().to_vec();
    frame.extend(std::iter::repeat_n(7u8, size));
    let mut back = vec![0u8; 4 + size];
    let mut samples = batched(iters, BATCH, || {
        s.write_all(&frame)?;
        s.read_exact(&mut back)?;
        Ok(())
    })?;
    Ok(us(stats(&mut samples).median))
}

fn raw_throughput(s: &mut RawTcp, size: usize, count: usize) -> Res<f64> {
    let payload = vec![7u8; size];
    let t0 = Instant::now();
    for _ in 0..count {
        s.write_all(&(size as u32).to_le_bytes())?;
        s.write_all(&payload)?;
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack)?;
    Ok((size * count) as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

/// The peer's half of [`raw_latency`]: echoes each frame back in place.
fn tcp_echo(s: &mut RawTcp, size: usize, iters: usize) -> Res<()> {
    let n = iters + iters / 10 + 10; // with the measurer's warm-up
    let mut buf = vec![0u8; 4 + size];
    for _ in 0..n {
        s.read_exact(&mut buf)?;
        s.write_all(&buf)?;
    }
    Ok(())
}

/// The peer's half of [`raw_throughput`]: reads every message, then acknowledges.
fn tcp_sink(s: &mut RawTcp, size: usize, count: usize) -> Res<()> {
    let (mut hdr, mut buf) = ([0u8; 4], vec![0u8; size]);
    for _ in 0..count {
        s.read_exact(&mut hdr)?;
        s.read_exact(&mut buf)?;
    }
    s.write_all(&[1])?;
    Ok(())
}

/// The child: echoes the raw phase, then the IPL phase, following the same schedule.
fn peer(raw_spec: &str, a: &Args) -> Res<()> {
    a.pin.apply(false)?;
    let mut raw = raw_peer(raw_spec, a)?;
    let t = port_type(a)?;
    let ibis = Ibis::builder()
        .capabilities(ipl::IbisCapabilities::ELECTIONS)
        .from_env()?
        .prefer_transport(a.transport.clone().unwrap_or_default())
        .port_type(t)
        .build()?;
    let (rp, mut sp) = connect_pair(&ibis, &t, WAIT)?;
    for _ in 0..a.repeat {
        for &size in &a.sizes {
            // The raw phase of this size...
            if a.cmd == "latency" {
                raw.echo(size, iters_for(a, size))?;
                raw.floor_echo(size, iters_for(a, size))?;
                raw.blocking_echo(size, iters_for(a, size))?;
            } else {
                raw.sink(size, count_for(a, size))?;
                raw.blocking_sink(size, count_for(a, size))?;
            }
            // ...then the IPL phase.
            if a.cmd == "latency" {
                let n = iters_for(a, size) + iters_for(a, size) / 10 + 10;
                for _ in 0..n {
                    // Echo in place: the received buffer goes straight back out (as the
                    // raw peer echoes its read buffer).
                    let mut m = rp.receive_timeout(WAIT)?;
                    let body = m.read_bytes_ref(size)?;
                    let mut w = sp.new_message()?;
                    w.write_bytes_borrowed(body)?;
                    w.finish()?;
                }
            } else {
                for _ in 0..count_for(a, size) {
                    // Read in place: the transport's buffer is the only copy (as the raw
                    // reader's buffer is).
                    let mut m = rp.receive_timeout(WAIT)?;
                    std::hint::black_box(m.read_bytes_ref(size)?);
                }
                let mut w = sp.new_message()?;
                w.write_bytes(&[1])?;
                w.finish()?;
            }
        }
    }
    if let Raw::Tcp(s) = &mut raw {
        let mut hdr = [0u8; 4];
        s.read_exact(&mut hdr)?; // the measuring side is done
    }
    while rp.receive_timeout(Duration::from_millis(100)).is_ok() {}
    sp.close();
    ibis.end()?;
    println!("peer done");
    Ok(())
}

// ---- the IPL's own cost: one thread sends to itself -----------------------------------

/// One thread sends a message to a receive port of its own instance over the transport
/// and receives it, so that no other thread and no other CPU is involved: the figure is
/// the software cost of one send plus one receive (IPL and transport), without the hop
/// between cores that a round trip pays twice.
fn selfloop(a: &Args) -> Res<()> {
    let transport = pick_transport(a)?;
    let t = port_type(a)?;
    let reg = EmbeddedRegistry::new();
    let ibis = Ibis::builder()
        .pool("selfloop")
        .registry(&reg)
        .secret(ipl_auth::PoolSecret::generate()?)
        .prefer_transport(transport.as_str())
        .port_type(t)
        .build()?;
    let rp = ibis.create_receive_port(&t, "in")?;
    rp.enable_connections();
    let mut sp = ibis.create_send_port(&t, "out")?;
    sp.connect(rp.identifier(), WAIT)?;
    let mut figures = Vec::new();
    for &size in &a.sizes {
        // A sample per message (by default): the median is the software cost of a send
        // plus a receive (with one clock reading pair, ~60 ns here); the mean also counts the
        // messages a sender holds back waiting for a receiver that is not polling (see
        // the README: one thread cannot be its own polling receiver).
        let (mut per, mut means) = (Vec::new(), Vec::new());
        for _ in 0..a.repeat {
            let s = stats(&mut ipl_latency(
                &rp,
                &mut sp,
                size,
                iters_for(a, size),
                a.batch,
            )?);
            per.push(us(s.median));
            means.push(us(s.mean));
        }
        figures.push(Figure {
            name: format!("ipl.selfloop.{transport}.{size}B.us"),
            value: median(&per),
            unit: "us",
            what: format!("IPL {transport} {size} B send + receive in one thread (median)"),
        });
        figures.push(Figure {
            name: format!("ipl.selfloop.{transport}.{size}B.mean_us"),
            value: median(&means),
            unit: "us",
            what: format!("IPL {transport} {size} B send + receive in one thread (mean)"),
        });
    }
    drop(sp);
    rp.close(Some(Duration::from_secs(1)));
    ibis.end()?;
    report(
        &format!(
            "ipl-bench selfloop: transport {transport}, one thread sends to its own receive \
             port; median of {} repetitions",
            a.repeat
        ),
        &figures,
    );
    Ok(())
}

// ---- the in-process transport: two threads ------------------------------------------

fn inproc(a: &Args) -> Res<()> {
    let t = port_type(a)?;
    let mut figures = Vec::new();
    for &size in &a.sizes {
        let n = iters_for(a, size);
        let ipl_s = stats(&mut inproc_pingpong(&t, size, n)?);
        let raw_s = stats(&mut raw_thread_pingpong(size, n));
        figures.push(Figure {
            name: format!("ipl.latency.inproc.{size}B.rtt_us"),
            value: us(ipl_s.median),
            unit: "us",
            what: format!(
                "IPL inproc {size} B round trip (median; min {:.2})",
                us(ipl_s.min)
            ),
        });
        figures.push(Figure {
            name: format!("raw.latency.inproc.{size}B.rtt_us"),
            value: us(raw_s.median),
            unit: "us",
            what: format!(
                "raw thread channel ping-pong {size} B (median; min {:.2})",
                us(raw_s.min)
            ),
        });
        figures.push(Figure {
            name: format!("ratio.latency.inproc.{size}B"),
            value: us(ipl_s.median) / us(raw_s.median).max(1e-9),
            unit: "x",
            what: format!("IPL / raw, {size} B"),
        });
    }
    report(
        "ipl-bench latency: transport inproc, two threads placed by the OS; blocking receivers \
         (IPL: poll IPL_SPIN_US first); raw = std mpsc channels, one copy per message",
        &figures,
    );
    Ok(())
}

fn inproc_pingpong(t: &PortType, size: usize, iters: usize) -> Res<Vec<Duration>> {
    let reg = EmbeddedRegistry::new();
    let a = Ibis::builder()
        .pool("bench")
        .registry(&reg)
        .prefer_transport("inproc")
        .port_type(*t)
        .build()?;
    let b = Ibis::builder()
        .pool("bench")
        .registry(&reg)
        .prefer_transport("inproc")
        .port_type(*t)
        .build()?;
    let a_in = a.create_receive_port(t, "in")?;
    a_in.enable_connections();
    let b_in = b.create_receive_port(t, "in")?;
    b_in.enable_connections();
    let mut a_out = a.create_send_port(t, "out")?;
    a_out.connect(b_in.identifier(), WAIT)?;
    let mut b_out = b.create_send_port(t, "out")?;
    b_out.connect(a_in.identifier(), WAIT)?;
    let total = iters + iters / 10 + 10;
    let server = std::thread::spawn(move || -> ipl::Result<()> {
        let mut buf = vec![0u8; size];
        for _ in 0..total {
            let mut m = b_in.receive_timeout(WAIT)?;
            m.read_bytes(&mut buf)?;
            m.finish();
            let mut w = b_out.new_message()?;
            w.write_bytes(&buf)?;
            w.finish()?;
        }
        Ok(())
    });
    let samples = ipl_latency(&a_in, &mut a_out, size, iters, BATCH)?;
    server.join().map_err(|_| "server thread panicked")??;
    Ok(samples)
}

fn raw_thread_pingpong(size: usize, iters: usize) -> Vec<Duration> {
    let (to_b, b_rx) = mpsc::channel::<Vec<u8>>();
    let (to_a, a_rx) = mpsc::channel::<Vec<u8>>();
    let total = iters + iters / 10 + 10;
    let server = std::thread::spawn(move || {
        for _ in 0..total {
            let Ok(v) = b_rx.recv() else { return };
            if to_a.send(v.as_slice().to_vec()).is_err() {
                return;
            }
        }
    });
    let payload = vec![7u8; size];
    let samples = batched(iters, BATCH, || {
        to_b.send(payload.clone())?;
        std::hint::black_box(a_rx.recv()?);
        Ok(())
    })
    .unwrap_or_default();
    let _ = server.join();
    samples
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_peer_parses_what_the_measuring_side_passes() {
        let cli = Cli::try_parse_from([
            "ipl-bench",
            "latency",
            "--transport",
            "shm",
            "--sizes",
            "8,1024",
            "--repeat",
            "2",
            "--pin",
            "split",
            "--require",
            "reliable, fifo",
        ])
        .unwrap();
        let Cmd::Latency(o) = cli.cmd else {
            panic!("not latency: {cli:?}")
        };
        let a = Args::new("latency", o);
        let argv = ["ipl-bench", "__peer", "tcp:1234"]
            .into_iter()
            .map(String::from)
            .chain(to_argv(&a));
        let Cmd::Peer { raw, cmd } = Cli::try_parse_from(argv).unwrap().cmd else {
            panic!("not the peer")
        };
        let PeerCmd::Latency(o) = cmd else {
            panic!("not latency")
        };
        let p = Args::new("latency", o);
        assert_eq!(raw, "tcp:1234");
        assert_eq!(p.transport.as_deref(), Some("shm"));
        assert_eq!(p.sizes, [8, 1024]);
        assert_eq!(p.require, ["reliable", "fifo"]);
        assert_eq!((p.iters, p.mbytes, p.repeat), (a.iters, a.mbytes, 2));
        assert_eq!(p.pin, Placement::Split);
    }

    #[test]
    fn defaults_follow_the_command_and_bad_values_are_errors() {
        let Cmd::Throughput(o) = Cli::try_parse_from(["ipl-bench", "throughput"])
            .unwrap()
            .cmd
        else {
            panic!("not throughput")
        };
        let a = Args::new("throughput", o);
        assert_eq!(a.sizes, [65536, 1 << 20]);
        assert_eq!((a.iters, a.mbytes, a.repeat, a.batch), (5_000, 256, 5, 1));
        assert_eq!(a.pin, Placement::Os);
        for bad in [
            &["ipl-bench", "latency", "--repeat", "0"][..],
            &["ipl-bench", "latency", "--sizes", "1,x"],
            &["ipl-bench", "latency", "--pin", "both"],
            &["ipl-bench", "latency", "--bogus"],
            &["ipl-bench", "nothing"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
