//! RMI micro-benchmark (thesis 3.5 and table 7.5): null-call latency, throughput of
//! 100 KB arrays of bytes, ints and doubles, and a 1023-node binary tree as argument,
//! against the IPL round trip on the same transport measured in the same run.
//!
//! ```text
//! rmi-bench [--transport tcp|inproc] [--iters N] [--repeat R]
//! ```
//!
//! tcp: this process (client) and a child copy of it (server), one pool through a
//! registry server started here, over 127.0.0.1. inproc: two Ibis instances in this
//! process. The IPL baseline is an empty message and an empty reply between an explicit
//! receive port and an echo thread on the server (for arrays: the array, zero-copy, and
//! an empty reply). RMI calls: `null` runs in the skeleton's receiving thread
//! (`#[nonblocking]`), `null_pooled` on a worker; arguments are serde values, and the
//! arrays IPL arrays (sent without a copy, and read in place by a `#[nonblocking]`
//! method).
//!
//! Output: a table, then `name value unit` lines: `rmi.null.<t>.rtt_us`,
//! `rmi.null_pooled.<t>.rtt_us`, `ipl.null.<t>.rtt_us`, `ratio.rmi_vs_ipl.<t>`,
//! `rmi.array.<type>.<t>.MBps`, `ipl.array.bytes.<t>.MBps`,
//! `ratio.rmi_vs_ipl.array.<t>` (RMI bytes / IPL bytes), `rmi.tree.<t>.us`.

#![forbid(unsafe_code)]

use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ibis_bench::pair::PairPool;
use ibis_bench::{at_least_one, median, report, stats, us, Figure};
use ibis_rmi::{remote, Rmi, RmiError};
use ipl::{Ibis, IbisIdentifier, IplError, ReadMessage, ReceivePort, SendPort};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(60);
const ARRAY_BYTES: usize = 100 * 1024;

/// A tree node of four ints (thesis: "a 1023-node binary tree of 4-int nodes").
#[derive(Serialize, Deserialize, Clone)]
struct Node {
    v: [i32; 4],
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

fn tree(depth: u32) -> Option<Box<Node>> {
    (depth > 0).then(|| {
        Box::new(Node {
            v: [depth as i32; 4],
            left: tree(depth - 1),
            right: tree(depth - 1),
        })
    })
}

#[remote]
trait BenchService {
    #[nonblocking]
    fn null(&self) -> Result<(), RmiError>;
    fn null_pooled(&self) -> Result<(), RmiError>;
    #[nonblocking]
    fn bytes(&self, a: &[u8]) -> Result<(), RmiError>;
    #[nonblocking]
    fn ints(&self, a: &[i32]) -> Result<(), RmiError>;
    #[nonblocking]
    fn doubles(&self, a: &[f64]) -> Result<(), RmiError>;
    #[nonblocking]
    fn tree(&self, t: &Node) -> Result<(), RmiError>;
    #[oneway]
    fn quit(&self);
}

struct Server(Mutex<Option<mpsc::Sender<()>>>);

impl BenchService for Server {
    fn null(&self) -> Result<(), RmiError> {
        Ok(())
    }
    fn null_pooled(&self) -> Result<(), RmiError> {
        Ok(())
    }
    fn bytes(&self, a: &[u8]) -> Result<(), RmiError> {
        std::hint::black_box(a);
        Ok(())
    }
    fn ints(&self, a: &[i32]) -> Result<(), RmiError> {
        std::hint::black_box(a);
        Ok(())
    }
    fn doubles(&self, a: &[f64]) -> Result<(), RmiError> {
        std::hint::black_box(a);
        Ok(())
    }
    fn tree(&self, t: &Node) -> Result<(), RmiError> {
        std::hint::black_box(t);
        Ok(())
    }
    fn quit(&self) {
        if let Some(tx) = self.0.lock().take() {
            let _ = tx.send(());
        }
    }
}

/// RMI null-call latency, array throughput and a tree argument, against the IPL round
/// trip on the same transport measured in the same run.
#[derive(Parser, Debug)]
#[command(name = "rmi-bench", version)]
struct Cli {
    #[command(flatten)]
    args: Args,
    #[command(subcommand)]
    server: Option<ServerCmd>,
}

/// The re-executed server process (internal).
#[derive(Subcommand, Debug)]
enum ServerCmd {
    #[command(name = "__server", hide = true)]
    Server(Args),
}

#[derive(clap::Args, Debug)]
struct Args {
    /// The transport: tcp (two processes) or inproc (one process); any other transport
    /// name is measured between two processes like tcp.
    #[arg(long, value_name = "NAME", default_value = "tcp")]
    transport: String,
    /// Null calls per repetition (arrays and the tree: a fifth, at least 50).
    #[arg(long, value_name = "N", default_value_t = 5000)]
    iters: usize,
    /// Repetitions; each figure is the median.
    #[arg(long, value_name = "R", default_value_t = 3, value_parser = at_least_one)]
    repeat: usize,
}

fn main() {
    ipl_tools::init_tracing("warn");
    let cli = Cli::parse();
    let r = match cli.server {
        Some(ServerCmd::Server(a)) => server_process(&a),
        None => client(&cli.args),
    };
    ibis_bench::exit_on_error("rmi-bench", r);
}

/// The server side: the benchmark object (bound as "bench") and the IPL echo thread.
fn serve(rmi: &Rmi) -> Res<mpsc::Receiver<()>> {
    let (tx, rx) = mpsc::channel();
    let r = rmi.export(BenchServiceSkeleton::new(Server(Mutex::new(Some(tx)))))?;
    rmi.bind("bench", &r)?;
    // The IPL baseline: an echo thread on a port of the same type, replying empty.
    let ibis = rmi.ibis();
    let t = ibis_rmi::port_type()?;
    let rp = ibis.create_receive_port(&t, "bench-echo")?;
    rp.enable_connections();
    let mut sp = ibis.create_send_port(&t, "bench-echo-reply")?;
    // It answers one client at a time (the one that sent the message) and outlives
    // a client that dies: only the port's closing ends it.
    std::thread::spawn(move || {
        let mut client: Option<IbisIdentifier> = None;
        loop {
            let mut m = match rp.receive() {
                Ok(m) => m,
                Err(IplError::ConnectionLost { .. }) => continue,
                Err(_) => return,
            };
            let origin = m.origin().ibis.clone();
            if client.as_ref() != Some(&origin) {
                for r in sp.connected_to() {
                    let _ = sp.disconnect(&r);
                }
                client = sp
                    .connect_to(&origin, "bench-echo-back", WAIT)
                    .is_ok()
                    .then_some(origin);
            }
            if m.remaining() > 0 {
                let _ = m
                    .read_array_ref::<u8>()
                    .map(|a| std::hint::black_box(a.len()));
            }
            m.finish();
            if client.is_some() && sp.new_message().and_then(|w| w.finish()).is_err() {
                // The client is gone; the next one gets a fresh connection.
                client = None;
            }
        }
    });
    Ok(rx)
}

fn server_process(a: &Args) -> Res<()> {
    let ibis = ibis_rmi::ibis_builder()?
        .from_env()?
        .prefer_transport(a.transport.as_str())
        .build()?;
    let rmi = Rmi::start(ibis)?;
    let quit = serve(&rmi)?;
    let _ = quit.recv_timeout(Duration::from_secs(600));
    rmi.end();
    Ok(())
}

/// The client's side of the IPL baseline.
struct Echo {
    sp: SendPort,
    back: ReceivePort,
}

impl Echo {
    fn new(rmi: &Rmi, server: &ipl::IbisIdentifier) -> Res<Self> {
        let t = ibis_rmi::port_type()?;
        let back = rmi.ibis().create_receive_port(&t, "bench-echo-back")?;
        back.enable_connections();
        let mut sp = rmi.ibis().create_send_port(&t, "bench-echo-send")?;
        sp.connect_to(server, "bench-echo", WAIT)?;
        Ok(Echo { sp, back })
    }

    fn round_trip(&mut self, payload: Option<&[u8]>) -> Res<()> {
        let mut w = self.sp.new_message()?;
        if let Some(p) = payload {
            w.write_array(p)?;
        }
        w.finish()?;
        let m: ReadMessage = self.back.receive_timeout(WAIT)?;
        m.finish();
        Ok(())
    }
}

fn time_calls(n: usize, mut f: impl FnMut() -> Res<()>) -> Res<Vec<Duration>> {
    for _ in 0..n / 10 + 10 {
        f()?;
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        f()?;
        v.push(t0.elapsed());
    }
    Ok(v)
}

fn client(a: &Args) -> Res<()> {
    let t = &a.transport;
    // Two members: this one, and the server (a child process, or an instance here).
    let mut child = None;
    let mut _registry_server = None;
    let mut local_server = None;
    let rmi = if t == "inproc" {
        let reg = ipl::EmbeddedRegistry::new();
        let b = || -> Res<Ibis> {
            Ok(ibis_rmi::ibis_builder()?
                .pool("rmi-bench")
                .registry(&reg)
                .prefer_transport("inproc")
                .build()?)
        };
        let server = Rmi::start(b()?)?;
        let quit = serve(&server)?;
        local_server = Some((server, quit));
        Rmi::start(b()?)?
    } else {
        let pp = PairPool::start("rmi-bench")?;
        let c = pp
            .peer_command(["__server", "--transport", t.as_str()])?
            .stdout(Stdio::inherit())
            .spawn()?;
        child = Some(c);
        let ibis = pp
            .member0(ibis_rmi::ibis_builder()?, WAIT)?
            .capabilities(ibis_rmi::CAPABILITIES | ipl::IbisCapabilities::CLOSED_WORLD)
            .prefer_transport(t.as_str())
            .build()?;
        _registry_server = Some(pp);
        Rmi::start(ibis)?
    };
    // The server binds "bench" once it is up.
    let deadline = Instant::now() + WAIT;
    let bench = loop {
        match rmi.lookup::<dyn BenchService>("bench") {
            Ok(s) => break s,
            Err(RmiError::NotBound(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e.into()),
        }
    };
    let server_id = ibis_rmi::Stub::remote_ref(&bench).member().clone();
    let mut echo = Echo::new(&rmi, &server_id)?;

    let n = a.iters;
    let bytes = vec![7u8; ARRAY_BYTES];
    let ints = vec![7i32; ARRAY_BYTES / 4];
    let doubles = vec![7.0f64; ARRAY_BYTES / 8];
    let tr = tree(10).ok_or("empty tree")?;
    let arrays_n = (n / 5).max(50);
    let tree_n = (n / 5).max(50);
    let mbps = |v: &[Duration]| {
        let total: Duration = v.iter().sum();
        (ARRAY_BYTES * v.len()) as f64 / total.as_secs_f64() / 1e6
    };
    let (mut ipl_null, mut rmi_null, mut rmi_pooled, mut ratio) = (vec![], vec![], vec![], vec![]);
    let (mut ipl_arr, mut rb, mut ri, mut rd, mut rt) = (vec![], vec![], vec![], vec![], vec![]);
    let mut arr_ratio = vec![];
    for _ in 0..a.repeat {
        let i = us(stats(&mut time_calls(n, || echo.round_trip(None))?).median);
        let r = us(stats(&mut time_calls(n, || Ok(bench.null()?))?).median);
        let p = us(stats(&mut time_calls(n, || Ok(bench.null_pooled()?))?).median);
        ipl_null.push(i);
        rmi_null.push(r);
        rmi_pooled.push(p);
        ratio.push(r / i.max(1e-9));
        ipl_arr.push(mbps(&time_calls(arrays_n, || {
            echo.round_trip(Some(&bytes))
        })?));
        rb.push(mbps(&time_calls(arrays_n, || Ok(bench.bytes(&bytes)?))?));
        if let (Some(r), Some(i)) = (rb.last(), ipl_arr.last()) {
            arr_ratio.push(r / i.max(1e-9));
        }
        ri.push(mbps(&time_calls(arrays_n, || Ok(bench.ints(&ints)?))?));
        rd.push(mbps(&time_calls(
            arrays_n,
            || Ok(bench.doubles(&doubles)?),
        )?));
        rt.push(us(
            stats(&mut time_calls(tree_n, || Ok(bench.tree(&tr)?))?).median
        ));
    }
    let figures = vec![
        Figure::new(
            format!("ipl.null.{t}.rtt_us"),
            median(&ipl_null),
            "us",
            format!("IPL empty message round trip, {t}"),
        ),
        Figure::new(
            format!("rmi.null.{t}.rtt_us"),
            median(&rmi_null),
            "us",
            format!("RMI null call (served in the receiving thread), {t}"),
        ),
        Figure::new(
            format!("rmi.null_pooled.{t}.rtt_us"),
            median(&rmi_pooled),
            "us",
            format!("RMI null call (served on a worker thread), {t}"),
        ),
        Figure::new(
            format!("ratio.rmi_vs_ipl.{t}"),
            median(&ratio),
            "x",
            format!("RMI null call / IPL round trip, {t}"),
        ),
        Figure::new(
            format!("ipl.array.bytes.{t}.MBps"),
            median(&ipl_arr),
            "MB/s",
            format!("IPL 100 KB byte array + empty reply, {t}"),
        ),
        Figure::new(
            format!("rmi.array.bytes.{t}.MBps"),
            median(&rb),
            "MB/s",
            format!("RMI call with a 100 KB byte array, {t}"),
        ),
        Figure::new(
            format!("ratio.rmi_vs_ipl.array.{t}"),
            median(&arr_ratio),
            "x",
            format!("RMI byte array / IPL byte array throughput, {t}"),
        ),
        Figure::new(
            format!("rmi.array.ints.{t}.MBps"),
            median(&ri),
            "MB/s",
            format!("RMI call with a 100 KB int array, {t}"),
        ),
        Figure::new(
            format!("rmi.array.doubles.{t}.MBps"),
            median(&rd),
            "MB/s",
            format!("RMI call with a 100 KB double array, {t}"),
        ),
        Figure::new(
            format!("rmi.tree.{t}.us"),
            median(&rt),
            "us",
            format!("RMI call with a 1023-node tree (4 ints/node), {t}"),
        ),
    ];
    bench.quit();
    drop(echo);
    rmi.end();
    if let Some((server, quit)) = local_server {
        let _ = quit.recv_timeout(WAIT);
        server.end();
    }
    if let Some(mut c) = child {
        let status = c.wait()?;
        if !status.success() {
            return Err(format!("server process failed: {status}").into());
        }
    }
    report(
        &format!(
            "rmi-bench: transport {t}, {}; median of {} repetitions of {n} null calls \
             ({arrays_n} array calls, {tree_n} tree calls); payload {ARRAY_BYTES} B arrays",
            if t == "inproc" {
                "two Ibis instances in one process"
            } else {
                "two processes on this host over 127.0.0.1"
            },
            a.repeat
        ),
        &figures,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed_and_the_server_parses_its_arguments() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["rmi-bench", "__server", "--transport", "inproc"]).unwrap();
        let Some(ServerCmd::Server(a)) = cli.server else {
            panic!("not the server")
        };
        assert_eq!(a.transport, "inproc");
        let a = Cli::try_parse_from(["rmi-bench"]).unwrap().args;
        assert_eq!((a.transport.as_str(), a.iters, a.repeat), ("tcp", 5000, 3));
        assert!(Cli::try_parse_from(["rmi-bench", "--iters", "x"]).is_err());
    }
}
