//! Start-up of the examples whose members form an IPL pool (asp, tsp-repmi): under `ipl-run`
//! one member per process, otherwise several members as threads of this process on an
//! embedded registry; each learns its rank from the closed pool's join order. Also what
//! such a program needs around that: the members' common input generator and the exit.

use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use ipl::{EmbeddedRegistry, Ibis, IbisBuilder, IbisCapabilities as C};

/// The examples' error type.
pub type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// splitmix64: a small deterministic generator, so that every member builds the same
/// input from the same seed.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The builder of a member that joins replicated objects: membership and elections,
/// and the replication port types.
pub fn replicated_builder() -> IbisBuilder {
    ibis_repmi::declare(Ibis::builder().capabilities(C::MEMBERSHIP | C::ELECTIONS))
}

/// Parses a positive count from the command line (a clap `value_parser`).
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A program's exit status from its outcome: success, a failed check (its report is
/// printed already), or an error, printed as `program: error`.
pub fn exit_code(program: &str, outcome: Res<bool>) -> ExitCode {
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            crate::say!("{program}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// This member's rank (its place in the closed pool's join order) and the pool size.
pub fn rank_of(ibis: &Ibis) -> Res<(usize, usize)> {
    ibis.registry()
        .wait_until_pool_closed(Some(Duration::from_secs(120)))?;
    let members = ibis.registry().members()?;
    let rank = members
        .iter()
        .position(|m| m == ibis.identifier())
        .ok_or("this member is not in the pool")?;
    Ok((rank, members.len()))
}

/// Whether this process was started by `ipl-run` (as one member of a pool).
pub fn under_ipl_run() -> bool {
    std::env::var("IPL_POOL").is_ok_and(|v| !v.is_empty())
}

/// Runs `members` members as threads of this process, in a closed pool named after
/// `name` and this process on a fresh embedded registry. Each builds its Ibis from
/// `builder()` (with membership, elections and a closed world added) and runs
/// `body(&ibis, rank, size)`; the results come back in thread order.
pub fn in_process<T: Send>(
    name: &str,
    members: usize,
    builder: impl Fn() -> IbisBuilder + Sync,
    body: impl Fn(&Ibis, usize, usize) -> Res<T> + Sync,
) -> Res<Vec<T>> {
    let reg = EmbeddedRegistry::new();
    let pool = format!("{name}-{}", std::process::id());
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..members)
            .map(|_| {
                let (reg, pool, builder, body) = (reg.clone(), pool.clone(), &builder, &body);
                s.spawn(move || -> Res<T> {
                    let ibis = builder()
                        .pool(pool)
                        .registry(&reg)
                        .capabilities(C::MEMBERSHIP | C::ELECTIONS | C::CLOSED_WORLD)
                        .pool_size(members)
                        .build()?;
                    let (rank, size) = rank_of(&ibis)?;
                    body(&ibis, rank, size)
                })
            })
            .collect();
        let mut outs = Vec::new();
        for t in threads {
            outs.push(t.join().map_err(|_| "a member panicked")??);
        }
        Ok(outs)
    })
}
