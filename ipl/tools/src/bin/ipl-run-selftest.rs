//! `ipl-run-selftest`: a tiny pool member for testing `ipl-run`.
//!
//! Joins the pool described by the environment, waits until it is closed,
//! prints one line `member=<id> cluster=<cluster> pool=<pool> size=<N>
//! joins=<joins> rank=<rank>` and leaves. With `IPL_SELFTEST_FAIL_RANK=<r>`
//! the process of rank `r` exits with status 1 at once.
//!
//! With `IPL_SELFTEST_CRASH_RANK=<r>` (a crash test) the process of rank `r`, once
//! the pool is closed, prints `pid=<its pid> rank=<r>` and waits to be killed from
//! outside (exit 1 if nobody kills it within the bound); every other process waits
//! until `member-<r>` is gone from the pool (the registry reports its death) and
//! only then prints its line, with ` survived=member-<r>` at the end, and leaves.
//! Every wait is bounded.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use ipl_registry::Registry;
use ipl_tools::launcher::PoolEnv;

const TIMEOUT: Duration = Duration::from_secs(30);

/// `IPL_SELFTEST_CRASH_RANK`, if set.
fn crash_rank() -> Result<Option<usize>, String> {
    match std::env::var("IPL_SELFTEST_CRASH_RANK") {
        Err(_) => Ok(None),
        Ok(r) => r
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("IPL_SELFTEST_CRASH_RANK={r:?} is not a rank")),
    }
}

/// The doomed process: waits (bounded) for a kill from outside.
fn await_kill(me: &Registry, rank: usize) -> Result<(), String> {
    println!("pid={} rank={rank}", std::process::id());
    let until = Instant::now() + TIMEOUT;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        me.next_event(Some(left)).map_err(|e| e.to_string())?;
    }
    Err(format!("rank {rank} was not killed within {TIMEOUT:?}"))
}

/// A survivor: waits (bounded) until `name` is no longer a member.
fn await_death(me: &Registry, name: &str) -> Result<(), String> {
    let until = Instant::now() + TIMEOUT;
    loop {
        let members = me.members().map_err(|e| e.to_string())?;
        if !members.iter().any(|m| m.name() == name) {
            return Ok(());
        }
        let left = until
            .checked_duration_since(Instant::now())
            .ok_or_else(|| format!("{name} still a member after {TIMEOUT:?}"))?;
        // A death is an event: wake on it, or look again later.
        me.next_event(Some(left.min(Duration::from_secs(1))))
            .map_err(|e| e.to_string())?;
    }
}

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
    let mut survived = String::new();
    if let Some(doomed) = crash_rank()? {
        if env.rank == Some(doomed) {
            return await_kill(&me, doomed);
        }
        let name = format!("member-{doomed}");
        await_death(&me, &name)?;
        survived = format!(" survived={name}");
    }
    let status = me.pool_status().map_err(|e| e.to_string())?;
    let id = me.identifier();
    println!(
        "member={} cluster={} pool={} size={} joins={} rank={}{survived}",
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
