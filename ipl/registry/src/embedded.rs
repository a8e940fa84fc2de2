//! [`EmbeddedRegistry`]: the in-process registry driver.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use std::task::{Poll, Waker};
use std::time::Instant;

use crate::backend::RegistryBackend;
use crate::core::{JoinRequest, MaybeDead, PoolConfig, PoolStatus, RegistryCore};
use crate::error::{RegistryError, Result};
use crate::event::{Event, Seq};
use crate::handle::Registry;
use crate::identifier::{IbisIdentifier, MemberId};

/// An in-process registry for any number of pools.
///
/// Cheap to clone (all clones share one registry). It wraps a
/// [`RegistryCore`] in one mutex, with a condition variable for blocking
/// waiters and a list of [`Waker`]s for async ones.
///
/// Liveness: a member is alive while its [`Registry`] handle exists and has
/// not been [crashed](Registry::crash). Dropping a handle without leaving
/// declares the member dead at once; a crashed member stays in the pool until
/// somebody calls `maybe_dead` on it (the probe then fails) or `assume_dead`.
/// Pools live as long as the registry.
#[derive(Clone, Default)]
pub struct EmbeddedRegistry {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    core: RegistryCore,
    version: u64,
    wakers: Vec<Waker>,
    crashed: BTreeSet<(String, MemberId)>,
}

impl std::fmt::Debug for EmbeddedRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.state.lock();
        f.debug_struct("EmbeddedRegistry")
            .field(
                "pools",
                &st.core.pools().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field("version", &st.version)
            .finish()
    }
}

impl EmbeddedRegistry {
    /// A new, empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins `pool` (creating it with `config` if needed) and returns the
    /// member's handle.
    pub fn join(&self, pool: &str, config: PoolConfig, request: JoinRequest) -> Result<Registry> {
        Registry::join(Arc::new(self.clone()), pool, config, request)
    }

    /// Runs `f` on the core under the lock (read-only), e.g. for inspection in tests.
    pub fn with_core<R>(&self, f: impl FnOnce(&RegistryCore) -> R) -> R {
        f(&self.inner.state.lock().core)
    }

    /// Runs a mutating operation and wakes all waiters.
    fn mutate<R>(&self, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        let mut st = self.inner.state.lock();
        let r = f(&mut st);
        st.version += 1;
        let wakers = std::mem::take(&mut st.wakers);
        drop(st);
        self.inner.changed.notify_all();
        for w in wakers {
            w.wake();
        }
        r
    }

    fn check_member(core: &RegistryCore, me: &IbisIdentifier) -> Result<()> {
        core.member_pool(me).map(|_| ())
    }
}

impl State {
    fn declare_dead(&mut self, who: &IbisIdentifier) -> Result<()> {
        self.crashed.remove(&(who.pool().to_owned(), who.id()));
        match self.core.died(who) {
            Ok(_) | Err(RegistryError::UnknownMember { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl RegistryBackend for EmbeddedRegistry {
    fn join(&self, pool: &str, config: PoolConfig, request: JoinRequest) -> Result<IbisIdentifier> {
        self.mutate(|st| st.core.join(pool, config, request))
    }

    fn leave(&self, me: &IbisIdentifier) -> Result<()> {
        self.mutate(|st| st.core.leave(me).map(|_| ()))
    }

    fn abandon(&self, me: &IbisIdentifier) {
        let r = self.mutate(|st| st.declare_dead(me));
        if let Err(e) = r {
            tracing::debug!(member = %me, error = %e, "abandon of a vanished member failed");
        }
    }

    fn crash(&self, me: &IbisIdentifier) {
        tracing::debug!(member = %me, "simulated crash");
        let _ = self.mutate(|st| {
            st.crashed.insert((me.pool().to_owned(), me.id()));
            Ok(())
        });
    }

    fn elect(&self, me: &IbisIdentifier, election: &str) -> Result<IbisIdentifier> {
        self.mutate(|st| st.core.elect(election, me))
    }

    fn election_result(
        &self,
        me: &IbisIdentifier,
        election: &str,
    ) -> Result<Option<IbisIdentifier>> {
        let st = self.inner.state.lock();
        Ok(st.core.member_pool(me)?.election_result(election))
    }

    fn signal(&self, me: &IbisIdentifier, signal: &str, targets: &[IbisIdentifier]) -> Result<()> {
        self.mutate(|st| st.core.signal(me, signal, targets))
    }

    fn terminate(&self, me: &IbisIdentifier) -> Result<()> {
        self.mutate(|st| st.core.terminate(me))
    }

    fn maybe_dead(&self, me: &IbisIdentifier, suspect: &IbisIdentifier) -> Result<()> {
        self.mutate(|st| {
            Self::check_member(&st.core, me)?;
            st.core.check_suspect(me, suspect)?;
            match st.core.maybe_dead(suspect)? {
                MaybeDead::NotAMember => Ok(()),
                MaybeDead::ProbeNeeded(id) => {
                    // The in-process probe: a member is alive unless crashed.
                    if st.crashed.contains(&(suspect.pool().to_owned(), id)) {
                        tracing::debug!(suspect = %suspect, "liveness probe failed");
                        st.declare_dead(suspect)
                    } else {
                        tracing::trace!(suspect = %suspect, "liveness probe succeeded");
                        Ok(())
                    }
                }
            }
        })
    }

    fn assume_dead(&self, me: &IbisIdentifier, suspect: &IbisIdentifier) -> Result<()> {
        self.mutate(|st| {
            Self::check_member(&st.core, me)?;
            st.core.check_suspect(me, suspect)?;
            st.declare_dead(suspect)
        })
    }

    fn take_events(&self, me: &IbisIdentifier) -> Result<Vec<(Seq, Event)>> {
        // Taking events changes nothing others can observe: no version bump.
        self.inner.state.lock().core.take_events(me)
    }

    fn members(&self, me: &IbisIdentifier) -> Result<Vec<IbisIdentifier>> {
        Ok(self.inner.state.lock().core.member_pool(me)?.members())
    }

    fn is_gone(&self, me: &IbisIdentifier, who: &IbisIdentifier) -> Result<bool> {
        Ok(self
            .inner
            .state
            .lock()
            .core
            .member_pool(me)?
            .has_departed(who))
    }

    fn pool_status(&self, me: &IbisIdentifier) -> Result<PoolStatus> {
        Ok(self.inner.state.lock().core.member_pool(me)?.status())
    }

    fn version(&self) -> u64 {
        self.inner.state.lock().version
    }

    fn wait_for_change(&self, seen: u64, deadline: Option<Instant>) -> Result<u64> {
        let mut st = self.inner.state.lock();
        match deadline {
            None => self
                .inner
                .changed
                .wait_while(&mut st, |st| st.version == seen),
            Some(d) => {
                self.inner
                    .changed
                    .wait_while_until(&mut st, |st| st.version == seen, d);
            }
        }
        Ok(st.version)
    }

    fn poll_change(&self, seen: u64, waker: &Waker) -> Poll<Result<u64>> {
        let mut st = self.inner.state.lock();
        if st.version != seen {
            return Poll::Ready(Ok(st.version));
        }
        if !st.wakers.iter().any(|w| w.will_wake(waker)) {
            st.wakers.push(waker.clone());
        }
        Poll::Pending
    }
}
