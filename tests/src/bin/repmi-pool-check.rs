//! One member of a launched pool that checks replicated objects (ibis-repmi) across
//! processes. Usage (under `ipl-run -n N -- repmi-pool-check SCENARIO`):
//!
//! - `order`: every member joins the replicated log, waits until all have joined, appends
//!   `K` entries concurrently with the others, then `Done`; once all are done, each member publishes a digest of
//!   its applied log (another ordered write) and checks that every member's digest
//!   equals its own, that the log holds all `N*K` entries and each writer's in order;
//! - `late`: like `order`, but the last member joins only after member 0 has written
//!   its entries (it waits for the registry election `late-go`), so it gets the state
//!   by transfer; it checks the snapshot already holds member 0's entries.
//!
//! Exits 0 when the checks pass, 1 with a message otherwise.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use ibis_repmi::{declare, Options, Replica, Replicated};
use ibis_tests::scenario;
use ipl::{Ibis, IbisCapabilities as I};
use serde::{Deserialize, Serialize};

const WAIT: Duration = Duration::from_secs(60);
const K: u32 = 100;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Default, Serialize, Deserialize)]
struct Log {
    entries: Vec<(u64, u32)>,
    joined: u32,
    done: u32,
    digests: BTreeMap<u64, u64>,
}

#[derive(Serialize, Deserialize)]
enum LogOp {
    Joined,
    Append(u64, u32),
    Done,
    Digest(u64, u64),
}

impl Replicated for Log {
    type Op = LogOp;
    type Output = usize;
    fn apply(&mut self, op: &LogOp) -> usize {
        match op {
            LogOp::Joined => self.joined += 1,
            LogOp::Append(m, n) => self.entries.push((*m, *n)),
            LogOp::Done => self.done += 1,
            LogOp::Digest(m, d) => {
                self.digests.insert(*m, *d);
            }
        }
        self.entries.len()
    }
}

/// FNV-1a over the applied log.
fn digest(entries: &[(u64, u32)]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (m, n) in entries {
        for b in m.to_le_bytes().into_iter().chain(n.to_le_bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn main() -> ExitCode {
    scenario::main(
        "repmi-pool-check",
        "One member of a launched pool that checks replicated objects across processes.",
        &["order", "late"],
        run,
    )
}

fn run(scenario: &str) -> Res<()> {
    let late = match scenario {
        "order" => false,
        "late" => true,
        other => return Err(format!("unknown scenario {other:?}").into()),
    };
    let ibis = declare(Ibis::builder().capabilities(I::MEMBERSHIP | I::ELECTIONS))
        .from_env()?
        .build()?;
    ibis.registry().wait_until_pool_closed(Some(WAIT))?;
    let members = ibis.registry().members()?;
    let n = members.len();
    let rank = members
        .iter()
        .position(|m| m == ibis.identifier())
        .ok_or("not in the pool")?;
    let me = ibis.identifier().id().get();
    let opts = Options::default().timeout(WAIT);
    if late && rank == n - 1 {
        ibis.registry()
            .get_election_result("late-go", Some(WAIT))?
            .ok_or("nobody said go")?;
    }
    let log = Replica::join_with(&ibis, "log", Log::default, opts)?;
    println!(
        "{} rank {rank} of {n}: joined, sequencer {} (me: {}), state covers op {}",
        ibis.identifier(),
        log.sequencer(),
        log.is_sequencer(),
        log.applied_seq()
    );
    if late && rank == n - 1 {
        let first = members[0].id().get();
        let have = log.read(|l| l.entries.iter().filter(|e| e.0 == first).count());
        if have != K as usize {
            return Err(format!("the snapshot holds {have} of member 0's {K} entries").into());
        }
    }
    // Start writing together (in `late`, without the late member), so that the writes
    // of all members interleave at the sequencer.
    log.write(LogOp::Joined)?;
    let together = if late { n - 1 } else { n };
    log.wait_for(|l| l.joined as usize >= together, WAIT)?;
    for i in 0..K {
        let len = log.write(LogOp::Append(me, i))?;
        // Read-your-writes: the entry is in the local copy when write returns.
        if log.read(|l| l.entries.get(len - 1) != Some(&(me, i))) {
            return Err(format!("entry {i} not at position {} after write", len - 1).into());
        }
    }
    if late && rank == 0 {
        ibis.registry().elect("late-go")?;
    }
    log.write(LogOp::Done)?;
    log.wait_for(|l| l.done as usize >= n, WAIT)?;
    let (d, len, order_ok) = log.read(|l| {
        let ok = members.iter().all(|m| {
            let mine: Vec<u32> = l
                .entries
                .iter()
                .filter(|e| e.0 == m.id().get())
                .map(|e| e.1)
                .collect();
            mine == (0..K).collect::<Vec<_>>()
        });
        (digest(&l.entries), l.entries.len(), ok)
    });
    if len != n * K as usize || !order_ok {
        return Err(format!(
            "log has {len} entries (expected {}), writer order ok: {order_ok}",
            n * K as usize
        )
        .into());
    }
    log.write(LogOp::Digest(me, d))?;
    log.wait_for(|l| l.digests.len() >= n, WAIT)?;
    let digests = log.read(|l| l.digests.clone());
    if digests.values().any(|x| *x != d) {
        return Err(format!("members applied different logs: digests {digests:x?}").into());
    }
    println!("all {n} members applied the same {len} entries (digest {d:016x})");
    drop(log);
    ibis.end()?;
    Ok(())
}
