//! Joining a malleable pool (`ipl-run --malleable`), and asking a member to leave.
//!
//! See the module documentation of [`crate::dist`], section "Malleability".

use super::{ipl_err, MASTER_ELECTION};
use crate::error::SatinError;
use ipl::{IbisIdentifier, Registry};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a member of a malleable pool looks whether the first members joined.
const MEET_POLL: Duration = Duration::from_millis(10);

/// Meets the others in a malleable pool of `initial` first members and returns the
/// master. A first member (IPL member id below `initial`: ids are given in join order)
/// waits until `initial` members joined (bounded by `timeout`) and takes part in the
/// election; a member that joins later waits only for the election's winner (it never
/// runs the root job).
pub(crate) fn meet(
    reg: &Registry,
    me: u64,
    initial: usize,
    timeout: Duration,
) -> Result<IbisIdentifier, SatinError> {
    let until = Instant::now() + timeout;
    if me < initial as u64 {
        loop {
            let joins = reg
                .pool_status()
                .map_err(ipl_err("the pool's status"))?
                .joins;
            if joins >= initial {
                break;
            }
            if Instant::now() >= until {
                return Err(SatinError::Pool(format!(
                    "only {joins} of the {initial} first members of the malleable pool \
                     joined within {timeout:?}"
                )));
            }
            // The registry has no wait for a number of joins: a bounded poll.
            std::thread::sleep(MEET_POLL);
        }
        reg.elect(MASTER_ELECTION).map_err(ipl_err("election"))
    } else {
        let left = until.saturating_duration_since(Instant::now());
        reg.get_election_result(MASTER_ELECTION, Some(left))
            .map_err(ipl_err("waiting for the master"))?
            .ok_or_else(|| {
                SatinError::Pool(format!(
                    "joined a malleable pool, but no master was elected within {timeout:?}"
                ))
            })
    }
}

/// Asks one member of a pool to leave gracefully (see [`super::Pool::leave_handle`]);
/// can be cloned and used from any thread.
#[derive(Debug, Clone)]
pub struct LeaveHandle(pub(crate) Arc<AtomicBool>);

impl LeaveHandle {
    /// Asks the member to leave: it stops stealing, finishes the jobs it runs, and
    /// leaves the pool; its [`super::Pool::run`] then returns without a result. On the
    /// master this is refused with a warning: it runs the root job.
    pub fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether leaving was asked for (by [`LeaveHandle::request`] or SIGTERM).
    pub fn requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Makes SIGTERM ask this member to leave gracefully (`flag` set), and a second
/// SIGTERM end the process at once (status 143) if the leave hangs. The
/// registration lasts as long as the process.
#[cfg(unix)]
pub(crate) fn leave_on_sigterm(flag: &Arc<AtomicBool>) -> Result<(), SatinError> {
    use signal_hook::consts::SIGTERM;
    let err = |e: std::io::Error| SatinError::Pool(format!("handling SIGTERM: {e}"));
    // The shutdown first: it looks at the flag before the second action sets it.
    signal_hook::flag::register_conditional_shutdown(SIGTERM, 143, flag.clone()).map_err(err)?;
    signal_hook::flag::register(SIGTERM, flag.clone()).map_err(err)?;
    Ok(())
}

/// SIGTERM is a Unix signal: elsewhere only [`LeaveHandle`] asks to leave.
#[cfg(not(unix))]
pub(crate) fn leave_on_sigterm(_flag: &Arc<AtomicBool>) -> Result<(), SatinError> {
    Ok(())
}
