//! `ipl-run-selftest`: a tiny pool member for testing `ipl-run`.
//!
//! Joins the pool described by the environment, waits until it is closed,
//! prints one line `member=<id> cluster=<cluster> pool=<pool> size=<N>
//! joins=<joins> rank=<rank>` and leaves. With `IPL_SELFTEST_FAIL_RANK=<r>`
//! the process of rank `r` exits with status 1 at once.

#![forbid(unsafe_code)]

use std::time::Duration;

use ipl_tools::launcher::PoolEnv;

const TIMEOUT: Duration = Duration::from_secs(30);

fn run() -> Result<(), String> {
    let env = PoolEnv::from_env().map_err(|e| e.to_string())?;
    if let (Ok(fail), Some(rank)) = (std::env::var("IPL_SELFTEST_FAIL_RANK"), env.rank) {
        if fail.trim().parse() == Ok(rank) {
            return Err(format!("rank {rank} fails on purpose"));
        }
    }
    let me = env.join(TIMEOUT).map_err(|e| format!("cannot join: {e}"))?;
    me.wait_until_pool_closed(Some(TIMEOUT))
        .map_err(|e| format!("pool did not close: {e}"))?;
    let status = me.pool_status().map_err(|e| e.to_string())?;
    let id = me.identifier();
    println!(
        "member={} cluster={} pool={} size={} joins={} rank={}",
        id.id().get(),
        id.cluster(),
        id.pool(),
        status.config.size.unwrap_or(0),
        status.joins,
        env.rank.map_or_else(|| "-".to_owned(), |r| r.to_string()),
    );
    me.leave().map_err(|e| format!("cannot leave: {e}"))
}

/// A tiny pool member for testing `ipl-run`: joins the pool the environment describes,
/// waits until it is closed, prints one line about itself and leaves.
#[derive(clap::Parser, Debug)]
#[command(name = "ipl-run-selftest", version)]
struct Args {}

fn main() {
    let _args = <Args as clap::Parser>::parse();
    if let Err(e) = run() {
        eprintln!("ipl-run-selftest: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::{CommandFactory, Parser};

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
        assert!(Args::try_parse_from(["ipl-run-selftest", "--bogus"]).is_err());
    }
}
