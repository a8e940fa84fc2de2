//! One member of a pool started by a cluster's launcher (`ipl-run --launcher 'srun
//! ...' -- launch-member`): joins the pool the environment describes, as every program
//! does (`IbisBuilder::from_env`), waits until it is closed and reports what it learnt:
//! one line `launcher=<kind> rank=<r> size=<pool size> joins=<joins> cluster=<cluster>
//! name=<member name> pool=<pool>`, written to `$LAUNCH_MEMBER_DIR/member-<rank>.txt`
//! (the launcher's output is not the test's to parse), or to stdout without that
//! variable. Exits 1 with the error otherwise.

#![forbid(unsafe_code)]

use std::time::Duration;

use ipl::{Ibis, IbisCapabilities as I};

const WAIT: Duration = Duration::from_secs(60);

/// The directory the report goes to.
const DIR: &str = "LAUNCH_MEMBER_DIR";

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let launched = ipl::config::launcher()?;
    let ibis = Ibis::builder()
        .capabilities(I::MEMBERSHIP)
        .from_env()?
        .build()?;
    let reg = ibis.registry();
    reg.wait_until_pool_closed(Some(WAIT))?;
    let status = reg.pool_status()?;
    let id = ibis.identifier().clone();
    let rank = launched.as_ref().and_then(|l| l.rank);
    let line = format!(
        "launcher={} rank={} size={} joins={} cluster={} name={} pool={}\n",
        launched.as_ref().map_or("none", |l| l.kind.name()),
        rank.map_or_else(|| "-".to_owned(), |r| r.to_string()),
        status.config.size.unwrap_or(0),
        status.joins,
        id.cluster(),
        id.name(),
        id.pool(),
    );
    match std::env::var_os(DIR) {
        Some(dir) => {
            let file = std::path::Path::new(&dir).join(format!(
                "member-{}.txt",
                rank.map_or_else(|| std::process::id().to_string(), |r| r.to_string())
            ));
            std::fs::write(file, line)?;
        }
        None => print!("{line}"),
    }
    ibis.end()?;
    Ok(())
}

/// One member of a pool started by a cluster's launcher: joins, waits for the pool to
/// close, reports its rank, size and cluster.
#[derive(clap::Parser, Debug)]
#[command(name = "launch-member")]
struct Args {}

fn main() {
    ipl_tools::init_tracing("warn");
    let _args = <Args as clap::Parser>::parse();
    if let Err(e) = run() {
        eprintln!("launch-member: {e}");
        std::process::exit(1);
    }
}
