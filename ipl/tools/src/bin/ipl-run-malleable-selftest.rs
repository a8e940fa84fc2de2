//! `ipl-run-malleable-selftest`: a tiny member of an `ipl-run --malleable` pool, for the
//! tests of the control socket.
//!
//! Every process joins the pool the environment describes as every program does
//! (`IbisBuilder::from_env`, which makes it an open world with the `MALLEABLE`
//! capability), reads its rank and the initial size from `ipl::config::launcher()`,
//! and prints `joined rank=<r> initial=<N> malleable=<bool> name=<member name>`. Rank 0 then drives: it waits for the
//! N initial members, asks `add 1` (prints `added=<ranks>`), waits until the new member
//! is in the registry (prints `members=<sorted names>`), prints `list=<live ranks>`,
//! removes every other rank with `remove` (waiting until each has left the registry,
//! printing `left=<name>`), waits until `list` shows only itself (`live=0`) and leaves.
//! Every other rank waits for SIGTERM, prints `sigterm: leaving`, leaves and exits 0
//! (exit 1 if no SIGTERM comes within the bound). Every wait is bounded.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipl::launcher::control::Control;
use ipl::{Ibis, IbisCapabilities as I};
use ipl_registry::{IbisIdentifier, Registry};

/// Every wait ends within this.
const BOUND: Duration = Duration::from_secs(60);

/// Waits (bounded) until the members' names satisfy `done`.
fn wait_for(
    reg: &Registry,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Result<Vec<String>, String> {
    let until = Instant::now() + BOUND;
    loop {
        let mut names: Vec<String> = reg
            .members()
            .map_err(|e| e.to_string())?
            .iter()
            .map(IbisIdentifier::name)
            .map(str::to_owned)
            .collect();
        names.sort();
        if done(&names) {
            return Ok(names);
        }
        let left = until
            .checked_duration_since(Instant::now())
            .ok_or_else(|| format!("{what}: not within {BOUND:?} (members {names:?})"))?;
        // Every change of membership is an event: wake on it, or look again later.
        reg.next_event(Some(left.min(Duration::from_secs(1))))
            .map_err(|e| e.to_string())?;
    }
}

fn drive(initial: usize, reg: &Registry) -> Result<(), String> {
    let control = Control::from_env()
        .map_err(|e| e.to_string())?
        .ok_or("IPL_RUN_CONTROL is not set")?;
    wait_for(reg, "the initial members", |m| m.len() >= initial)?;
    let added = control.add(1, None).map_err(|e| format!("add: {e}"))?;
    println!(
        "added={}",
        added
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let names: Vec<String> = added.iter().map(|r| format!("member-{r}")).collect();
    let members = wait_for(reg, "the added member", |m| {
        names.iter().all(|n| m.contains(n))
    })?;
    println!("members={}", members.join(","));
    let list = control.list().map_err(|e| format!("list: {e}"))?;
    let ranks: Vec<u32> = list.iter().map(|p| p.rank).collect();
    println!(
        "list={}",
        ranks
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    for p in list.iter().filter(|p| p.rank != 0) {
        control
            .remove(p.rank)
            .map_err(|e| format!("remove {}: {e}", p.rank))?;
        let name = format!("member-{}", p.rank);
        wait_for(reg, "a removed member to leave", |m| !m.contains(&name))?;
        println!("left={name}");
    }
    // The removed processes end after leaving: wait until ipl-run saw them end.
    let until = Instant::now() + BOUND;
    loop {
        let live = control.list().map_err(|e| format!("list: {e}"))?;
        if live.iter().all(|p| p.rank == 0) {
            println!("live=0");
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(format!("still running: {live:?}"));
        }
        // Bounded poll of ipl-run's view; there is nothing to be woken by.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run() -> Result<(), String> {
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())
        .map_err(|e| e.to_string())?;
    let launched = ipl::config::launcher()
        .map_err(|e| e.to_string())?
        .ok_or("not started by a launcher")?;
    let rank = launched.rank.ok_or("IPL_RANK is not set")?;
    let ibis = Ibis::builder()
        .capabilities(I::MEMBERSHIP)
        .from_env()
        .and_then(|b| b.build())
        .map_err(|e| format!("cannot join: {e}"))?;
    println!(
        "joined rank={rank} initial={} malleable={} name={} closed={}",
        launched.size,
        launched.malleable,
        ibis.identifier().name(),
        ibis.registry()
            .pool_status()
            .map_err(|e| e.to_string())?
            .config
            .size
            .is_some(),
    );
    if rank == 0 {
        drive(launched.size, ibis.registry())?;
    } else {
        let until = Instant::now() + BOUND;
        while !term.load(Ordering::SeqCst) {
            if Instant::now() >= until {
                return Err(format!("rank {rank} was never removed"));
            }
            // Bounded poll of the signal flag.
            std::thread::sleep(Duration::from_millis(10));
        }
        println!("sigterm: leaving");
    }
    ibis.end().map_err(|e| format!("cannot leave: {e}"))
}

/// A tiny member of an `ipl-run --malleable` pool: rank 0 adds a process and removes
/// the others through the control socket; the others wait for their SIGTERM.
#[derive(clap::Parser, Debug)]
#[command(name = "ipl-run-malleable-selftest", version)]
struct Args {}

fn main() {
    let _args = <Args as clap::Parser>::parse();
    if let Err(e) = run() {
        eprintln!("ipl-run-malleable-selftest: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
    }
}
