//! The shm transport against the raw shared-memory limit, between two processes on
//! this host (this process and a re-executed copy of it).
//!
//! ```text
//! cargo build --release -p ibis-bench --bin shm-bench && ./target/release/shm-bench [--iters N] [--count C] [--repeat R] [--modes spin,spin_block,block]
//! ```
//!
//! Measures, in the same run:
//! - raw: [`RawShm`](ibis_bench::raw_shm::RawShm), a spinning ping-pong of 8 B and a
//!   stream of 1 MiB messages (one copy into shared memory per message);
//! - IPL over the shm transport, once per receiver wait mode (`shm.wait=`): an 8 B
//!   round trip (send port → receive port and back, receivers blocking in
//!   `receive_timeout`, which polls the transport first) and a stream of 1 MiB
//!   messages (read in place, acknowledged at the end).
//!
//! Each figure is the median over `--repeat` runs of the mean over `--iters` round
//! trips (or `--count` messages). Output: a table, then `name value unit` lines.

#![forbid(unsafe_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::builder::PossibleValuesParser;
use clap::{Parser, Subcommand};
use ibis_bench::pair::{connect_pair, PairPool};
use ibis_bench::raw_shm::RawShm;
use ibis_bench::{at_least_one, median, ping_pong_capabilities};
use ipl::{Ibis, PortCapabilities as P, PortType};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(60);
const SMALL: usize = 8;
const BIG: usize = 1 << 20;

/// The shm transport against the raw shared-memory limit, between two processes on
/// this host: 8 B round trips and streams of 1 MiB messages, per receiver wait mode.
#[derive(Parser, Debug)]
#[command(name = "shm-bench", version)]
struct Cli {
    #[command(flatten)]
    args: Args,
    #[command(subcommand)]
    peer: Option<PeerCmd>,
}

/// The re-executed peer processes (internal).
#[derive(Subcommand, Debug)]
enum PeerCmd {
    /// The raw baseline's peer, on the segment NAME.
    #[command(name = "__raw", hide = true)]
    Raw {
        name: String,
        #[command(flatten)]
        args: Args,
    },
    /// The IPL's peer, with the receiver wait mode MODE.
    #[command(name = "__ipl", hide = true)]
    Ipl {
        mode: String,
        #[command(flatten)]
        args: Args,
    },
}

#[derive(clap::Args, Clone, Debug)]
struct Args {
    /// 8 B round trips per run.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    iters: usize,
    /// 1 MiB messages per run.
    #[arg(long, value_name = "C", default_value_t = 2_000)]
    count: usize,
    /// Runs; each figure is the median.
    #[arg(long, value_name = "R", default_value_t = 3, value_parser = at_least_one)]
    repeat: usize,
    /// The receiver wait modes (`shm.wait=`) to measure the IPL with.
    #[arg(
        long,
        value_name = "MODE,MODE",
        value_delimiter = ',',
        default_value = "spin,spin_block,block",
        value_parser = PossibleValuesParser::new(["spin", "spin_block", "block"])
    )]
    modes: Vec<String>,
}

/// The peer's options: this run's.
fn argv(a: &Args) -> Vec<String> {
    vec![
        "--iters".into(),
        a.iters.to_string(),
        "--count".into(),
        a.count.to_string(),
        "--repeat".into(),
        a.repeat.to_string(),
        "--modes".into(),
        a.modes.join(","),
    ]
}

fn main() {
    ipl_tools::init_tracing("warn");
    let cli = Cli::parse();
    let r = match &cli.peer {
        Some(PeerCmd::Raw { name, args }) => raw_peer(name, args),
        Some(PeerCmd::Ipl { mode, args }) => ipl_peer(mode, args),
        None => measure(&cli.args),
    };
    ibis_bench::exit_on_error("shm-bench", r);
}

fn port_type() -> Res<PortType> {
    Ok(PortType::new(ping_pong_capabilities(
        P::SERIALIZATION_BYTE,
    ))?)
}

fn shm_plugin() -> Res<ipl::Plugin> {
    Ok(ipl::Plugin::from_static(&ipl_transport_shm::PLUGIN)?)
}

fn measure(a: &Args) -> Res<()> {
    // ---- raw ----
    let (raw, name) = RawShm::create(BIG)?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("__raw")
        .arg(&name)
        .args(argv(a))
        .spawn()?;
    raw.wait_peer()?;
    let mut raw_rtt = Vec::new();
    let mut raw_bw = Vec::new();
    for _ in 0..a.repeat {
        raw_rtt.push(raw.latency(SMALL, a.iters)?);
        raw_bw.push(raw.stream(BIG, a.count)?);
    }
    if !child.wait()?.success() {
        return Err("raw peer failed".into());
    }
    let (raw_rtt, raw_bw) = (median(&raw_rtt), median(&raw_bw));

    // ---- IPL over shm, per wait mode ----
    let mut rows = Vec::new();
    for mode in &a.modes {
        let (rtt, bw) = ipl_run(a, mode)?;
        rows.push((mode.clone(), rtt, bw));
    }

    println!(
        "shm-bench: two processes on this host (placed by the OS on a shared, noisy machine);"
    );
    println!(
        "median of {} runs; {} round trips of {SMALL} B, {} messages of {BIG} B per run",
        a.repeat, a.iters, a.count
    );
    println!();
    println!(
        "{:<34} {:>14} {:>14} {:>8}",
        "what", "8 B rtt (us)", "1 MiB (MB/s)", ""
    );
    println!(
        "{:<34} {:>14.3} {:>14.0}",
        "raw shm (spinning ping-pong)", raw_rtt, raw_bw
    );
    for (mode, rtt, bw) in &rows {
        println!(
            "{:<34} {:>14.3} {:>14.0}   rtt x{:.2}, bw x{:.2}",
            format!("IPL shm, shm.wait={mode}"),
            rtt,
            bw,
            rtt / raw_rtt,
            bw / raw_bw
        );
    }
    println!();
    println!("raw.shm.{SMALL}B.rtt_us {raw_rtt:.3} us");
    println!("raw.shm.{BIG}B.MBps {raw_bw:.0} MB/s");
    for (mode, rtt, bw) in &rows {
        println!("ipl.shm.{mode}.{SMALL}B.rtt_us {rtt:.3} us");
        println!("ratio.latency.shm.{mode}.{SMALL}B {:.2} x", rtt / raw_rtt);
        println!("ipl.shm.{mode}.{BIG}B.MBps {bw:.0} MB/s");
        println!("ratio.throughput.shm.{mode}.{BIG}B {:.2} x", bw / raw_bw);
    }
    Ok(())
}

fn raw_peer(name: &str, a: &Args) -> Res<()> {
    let raw = RawShm::open(name)?;
    for _ in 0..a.repeat {
        raw.echo(SMALL, a.iters)?;
        raw.sink(BIG, a.count)?;
    }
    Ok(())
}

/// One pool of two (a registry server here, the peer a child process) for `mode`.
fn ipl_run(a: &Args, mode: &str) -> Res<(f64, f64)> {
    let pp = PairPool::start(&format!("shm-bench-{mode}"))?;
    let mut child = pp
        .peer_command(
            ["__ipl".to_string(), mode.to_string()]
                .into_iter()
                .chain(argv(a)),
        )?
        .stdout(Stdio::inherit())
        .spawn()?;
    let t = port_type()?;
    let ibis = pp
        .member0(Ibis::builder(), WAIT)?
        .capabilities(ipl::IbisCapabilities::CLOSED_WORLD | ipl::IbisCapabilities::ELECTIONS)
        .plugin(shm_plugin()?)
        .prefer_transport("shm")
        .transport_config(format!("shm.wait={mode}"))
        .port_type(t)
        .build()?;
    let used = ibis.transport_for(&t)?;
    if used != "shm" {
        return Err(format!("asked for shm, negotiated {used}").into());
    }
    let (rp, mut sp) = connect_pair(&ibis, &t, WAIT)?;
    let small = vec![7u8; SMALL];
    let big = vec![7u8; BIG];
    let mut rtts = Vec::new();
    let mut bws = Vec::new();
    for _ in 0..a.repeat {
        let warm = a.iters / 10 + 10;
        let mut t0 = Instant::now();
        for i in 0..warm + a.iters {
            if i == warm {
                t0 = Instant::now();
            }
            let mut w = sp.new_message()?;
            w.write_bytes_borrowed(&small)?;
            w.finish()?;
            let mut m = rp.receive_timeout(WAIT)?;
            std::hint::black_box(m.read_bytes_ref(SMALL)?);
            m.finish();
        }
        rtts.push(t0.elapsed().as_secs_f64() * 1e6 / a.iters as f64);
        let t0 = Instant::now();
        for _ in 0..a.count {
            let mut w = sp.new_message()?;
            w.write_bytes_borrowed(&big)?;
            w.finish()?;
        }
        let m = rp.receive_timeout(WAIT)?;
        m.finish();
        bws.push((BIG * a.count) as f64 / t0.elapsed().as_secs_f64() / 1e6);
    }
    sp.close();
    if !child.wait()?.success() {
        return Err(format!("ipl peer ({mode}) failed").into());
    }
    rp.close(Some(Duration::from_secs(1)));
    ibis.end()?;
    pp.server.shutdown();
    Ok((median(&rtts), median(&bws)))
}

fn ipl_peer(mode: &str, a: &Args) -> Res<()> {
    let t = port_type()?;
    let ibis = Ibis::builder()
        .capabilities(ipl::IbisCapabilities::ELECTIONS)
        .from_env()?
        .plugin(shm_plugin()?)
        .prefer_transport("shm")
        .transport_config(format!("shm.wait={mode}"))
        .port_type(t)
        .build()?;
    let (rp, mut sp) = connect_pair(&ibis, &t, WAIT)?;
    for _ in 0..a.repeat {
        for _ in 0..a.iters / 10 + 10 + a.iters {
            let mut m = rp.receive_timeout(WAIT)?;
            let body = m.read_bytes_ref(SMALL)?;
            let mut w = sp.new_message()?;
            w.write_bytes_borrowed(body)?;
            w.finish()?;
        }
        for _ in 0..a.count {
            let mut m = rp.receive_timeout(WAIT)?;
            std::hint::black_box(m.read_bytes_ref(BIG)?);
        }
        let mut w = sp.new_message()?;
        w.write_bytes(&[1])?;
        w.finish()?;
    }
    while rp.receive_timeout(Duration::from_millis(100)).is_ok() {}
    sp.close();
    ibis.end()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed_and_the_peers_parse_their_arguments() {
        Cli::command().debug_assert();
        let a = Cli::try_parse_from(["shm-bench", "--iters", "10", "--modes", "spin,block"])
            .unwrap()
            .args;
        assert_eq!((a.iters, a.count, a.repeat), (10, 2_000, 3));
        let argv = ["shm-bench", "__ipl", "block"]
            .into_iter()
            .map(String::from)
            .chain(argv(&a));
        let Some(PeerCmd::Ipl { mode, args }) = Cli::try_parse_from(argv).unwrap().peer else {
            panic!("not the ipl peer")
        };
        assert_eq!(mode, "block");
        assert_eq!(args.modes, ["spin", "block"]);
        assert_eq!(args.iters, 10);
        assert!(Cli::try_parse_from(["shm-bench", "--modes", "doze"]).is_err());
    }
}
