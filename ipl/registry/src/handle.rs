//! [`Registry`]: the per-member handle an Ibis instance holds.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::backend::RegistryBackend;
use crate::core::{JoinRequest, PoolConfig, PoolStatus};
use crate::error::{RegistryError, Result};
use crate::event::{Event, RegistryEventHandler, Seq};
use crate::identifier::IbisIdentifier;

/// Name of the thread that runs [`RegistryEventHandler`] upcalls.
pub const EVENT_THREAD_NAME: &str = "ipl-registry-events";

/// How often the upcall thread re-checks for shutdown if nothing changes.
const UPCALL_POLL: Duration = Duration::from_millis(200);

/// The registry handle of one pool member.
///
/// Created by [`EmbeddedRegistry::join`](crate::EmbeddedRegistry::join) or,
/// for any backend, [`Registry::join`]. Events are consumed either explicitly
/// ([`next_event`](Self::next_event) / [`next_event_async`](Self::next_event_async))
/// or by an installed [`RegistryEventHandler`], not both.
///
/// Timeouts: `None` waits without bound, `Some(Duration::ZERO)` only checks.
///
/// Ending: [`leave`](Self::leave) is the graceful way out (others see `Left`).
/// Dropping the handle without leaving means the member vanished (others see
/// `Died`). [`crash`](Self::crash) simulates a silent crash for tests.
pub struct Registry {
    shared: Arc<Shared>,
    upcall: Mutex<Option<JoinHandle<()>>>,
    /// Set once the member left or crashed: Drop must not report it again.
    gone: bool,
}

struct Shared {
    backend: Arc<dyn RegistryBackend>,
    me: IbisIdentifier,
    local: Mutex<Local>,
    stop: AtomicBool,
}

#[derive(Default)]
struct Local {
    buffer: VecDeque<(Seq, Event)>,
    handler: bool,
}

impl Shared {
    fn poll_event(&self) -> Result<Option<Event>> {
        let mut local = self.local.lock();
        if local.handler {
            return Err(RegistryError::EventHandlerInstalled);
        }
        if local.buffer.is_empty() {
            let events = self.backend.take_events(&self.me)?;
            local.buffer.extend(events);
        }
        Ok(local.buffer.pop_front().map(|(_, e)| e))
    }

    fn take_batch(&self) -> Result<Vec<(Seq, Event)>> {
        let mut local = self.local.lock();
        let mut batch: Vec<_> = local.buffer.drain(..).collect();
        batch.extend(self.backend.take_events(&self.me)?);
        Ok(batch)
    }

    /// Blocks until `check` yields a value, or the deadline passes (`Ok(None)`).
    fn wait_until<T>(
        &self,
        timeout: Option<Duration>,
        mut check: impl FnMut() -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        // A timeout too large to represent is treated as no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let seen = self.backend.version();
            if let Some(v) = check()? {
                return Ok(Some(v));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            self.backend.wait_for_change(seen, deadline)?;
        }
    }

    /// Awaits until `check` yields a value, without blocking the executor.
    async fn wait_until_async<T>(&self, mut check: impl FnMut() -> Result<Option<T>>) -> Result<T> {
        loop {
            let seen = self.backend.version();
            if let Some(v) = check()? {
                return Ok(v);
            }
            Changed {
                backend: &*self.backend,
                seen,
            }
            .await?;
        }
    }

    fn closed_check(&self) -> Result<Option<()>> {
        let st = self.backend.pool_status(&self.me)?;
        if st.config.size.is_none() {
            return Err(RegistryError::NotClosedWorld(self.me.pool().to_owned()));
        }
        Ok(st.closed.then_some(()))
    }

    fn terminated_check(&self) -> Result<Option<()>> {
        Ok(self.backend.pool_status(&self.me)?.terminated.then_some(()))
    }
}

/// Future resolving at the backend's next change after `seen`.
struct Changed<'a> {
    backend: &'a dyn RegistryBackend,
    seen: u64,
}

impl Future for Changed<'_> {
    type Output = Result<u64>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.backend.poll_change(self.seen, cx.waker())
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("member", &self.shared.me)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// Joins `pool` through `backend` (the pool is created with `config` if it
    /// does not exist yet) and returns the new member's handle.
    pub fn join(
        backend: Arc<dyn RegistryBackend>,
        pool: &str,
        config: PoolConfig,
        request: JoinRequest,
    ) -> Result<Self> {
        let me = backend.join(pool, config, request)?;
        Ok(Self {
            shared: Arc::new(Shared {
                backend,
                me,
                local: Mutex::new(Local::default()),
                stop: AtomicBool::new(false),
            }),
            upcall: Mutex::new(None),
            gone: false,
        })
    }

    /// This member's identity.
    pub fn identifier(&self) -> &IbisIdentifier {
        &self.shared.me
    }

    /// The backend this handle talks to.
    pub fn backend(&self) -> &Arc<dyn RegistryBackend> {
        &self.shared.backend
    }

    /// The current members of the pool (as the registry knows them), in join order.
    pub fn members(&self) -> Result<Vec<IbisIdentifier>> {
        self.shared.backend.members(&self.shared.me)
    }

    /// The number of current members of the pool.
    pub fn pool_size(&self) -> Result<usize> {
        Ok(self.pool_status()?.size)
    }

    /// The pool's configuration and state.
    pub fn pool_status(&self) -> Result<PoolStatus> {
        self.shared.backend.pool_status(&self.shared.me)
    }

    /// Whether the closed-world pool has reached its size.
    pub fn is_closed(&self) -> Result<bool> {
        Ok(self.pool_status()?.closed)
    }

    /// Waits until the closed-world pool is closed (its configured number of
    /// members joined). Fails with [`RegistryError::Timeout`] if `timeout`
    /// passes first, [`RegistryError::NotClosedWorld`] for open pools.
    pub fn wait_until_pool_closed(&self, timeout: Option<Duration>) -> Result<()> {
        self.shared
            .wait_until(timeout, || self.shared.closed_check())?
            .ok_or(RegistryError::Timeout)
    }

    /// Async [`wait_until_pool_closed`](Self::wait_until_pool_closed) without a
    /// timeout (wrap it in e.g. `tokio::time::timeout`).
    pub async fn wait_until_pool_closed_async(&self) -> Result<()> {
        self.shared
            .wait_until_async(|| self.shared.closed_check())
            .await
    }

    /// Strict election: this member is a candidate for `election`; returns the
    /// winner (this member if it was first).
    pub fn elect(&self, election: &str) -> Result<IbisIdentifier> {
        self.shared.backend.elect(&self.shared.me, election)
    }

    /// The winner of `election`, waiting up to `timeout` for somebody to win;
    /// `Ok(None)` if nobody won in time.
    pub fn get_election_result(
        &self,
        election: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<IbisIdentifier>> {
        self.shared.wait_until(timeout, || {
            self.shared
                .backend
                .election_result(&self.shared.me, election)
        })
    }

    /// Async: waits until somebody wins `election` and returns the winner.
    pub async fn get_election_result_async(&self, election: &str) -> Result<IbisIdentifier> {
        self.shared
            .wait_until_async(|| {
                self.shared
                    .backend
                    .election_result(&self.shared.me, election)
            })
            .await
    }

    /// Sends `signal` to each of `targets` (which must be members).
    pub fn signal(&self, signal: &str, targets: &[IbisIdentifier]) -> Result<()> {
        self.shared.backend.signal(&self.shared.me, signal, targets)
    }

    /// Terminates the pool: every member gets `Terminated`, no one can join.
    pub fn terminate(&self) -> Result<()> {
        self.shared.backend.terminate(&self.shared.me)
    }

    /// Whether the pool has been terminated.
    pub fn has_terminated(&self) -> Result<bool> {
        Ok(self.pool_status()?.terminated)
    }

    /// Waits until the pool is terminated; [`RegistryError::Timeout`] if
    /// `timeout` passes first.
    pub fn wait_until_terminated(&self, timeout: Option<Duration>) -> Result<()> {
        self.shared
            .wait_until(timeout, || self.shared.terminated_check())?
            .ok_or(RegistryError::Timeout)
    }

    /// Async [`wait_until_terminated`](Self::wait_until_terminated) without a timeout.
    pub async fn wait_until_terminated_async(&self) -> Result<()> {
        self.shared
            .wait_until_async(|| self.shared.terminated_check())
            .await
    }

    /// Tells the registry `suspect` may be dead. The registry probes it; if
    /// the probe fails, everyone gets `Died`, otherwise nothing changes.
    pub fn maybe_dead(&self, suspect: &IbisIdentifier) -> Result<()> {
        self.shared.backend.maybe_dead(&self.shared.me, suspect)
    }

    /// Declares `suspect` dead: everyone else gets `Died`.
    pub fn assume_dead(&self, suspect: &IbisIdentifier) -> Result<()> {
        self.shared.backend.assume_dead(&self.shared.me, suspect)
    }

    /// The next event, waiting up to `timeout`; `Ok(None)` on timeout.
    /// Fails with [`RegistryError::EventHandlerInstalled`] if a handler
    /// consumes the events.
    pub fn next_event(&self, timeout: Option<Duration>) -> Result<Option<Event>> {
        self.shared.wait_until(timeout, || self.shared.poll_event())
    }

    /// Async: waits for the next event.
    pub async fn next_event_async(&self) -> Result<Event> {
        self.shared
            .wait_until_async(|| self.shared.poll_event())
            .await
    }

    /// Installs `handler`: from now on all events (including any not yet
    /// taken by `next_event`) are delivered to it, in order, one at a time, on
    /// a dedicated thread named [`EVENT_THREAD_NAME`]. The thread stops when
    /// this member leaves, crashes, is dropped, or is declared dead.
    pub fn set_event_handler(&self, handler: impl RegistryEventHandler) -> Result<()> {
        let mut local = self.shared.local.lock();
        if local.handler {
            return Err(RegistryError::HandlerAlreadySet);
        }
        let shared = Arc::clone(&self.shared);
        let mut handler = handler;
        let thread = std::thread::Builder::new()
            .name(EVENT_THREAD_NAME.to_owned())
            .spawn(move || upcall_loop(&shared, &mut handler))
            .map_err(|e| RegistryError::Thread(e.to_string()))?;
        local.handler = true;
        *self.upcall.lock() = Some(thread);
        Ok(())
    }

    /// Leaves the pool gracefully: the others get `Left`, and elections this
    /// member had won are cleared (`Unelected`). Fails with
    /// [`RegistryError::UnknownMember`] if the member was already declared dead.
    pub fn leave(mut self) -> Result<()> {
        self.gone = true;
        tracing::debug!(member = %self.shared.me, "leaving");
        self.shared.backend.leave(&self.shared.me)
    }

    /// Fault-injection hook for tests: simulates a crash. The member stops
    /// responding without telling the registry, as a killed process would.
    /// It stays in the pool until somebody calls
    /// [`maybe_dead`](Self::maybe_dead) on it (the liveness probe fails and
    /// everyone gets `Died`) or [`assume_dead`](Self::assume_dead).
    pub fn crash(mut self) {
        self.gone = true;
        self.shared.backend.crash(&self.shared.me);
    }

    fn stop_upcalls(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let thread = self.upcall.lock().take();
        if let Some(t) = thread {
            if t.thread().id() == std::thread::current().id() {
                // Dropped from inside a handler: the loop exits on its own.
                return;
            }
            if t.join().is_err() {
                tracing::warn!(member = %self.shared.me, "registry event thread panicked");
            }
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if !self.gone {
            tracing::debug!(member = %self.shared.me, "handle dropped without leave: member vanished");
            self.shared.backend.abandon(&self.shared.me);
        }
        self.stop_upcalls();
    }
}

fn upcall_loop(shared: &Shared, handler: &mut dyn RegistryEventHandler) {
    while !shared.stop.load(Ordering::SeqCst) {
        let seen = shared.backend.version();
        let batch = match shared.take_batch() {
            Ok(b) => b,
            // No longer a member, or the registry is gone: nothing more
            // will come.
            Err(
                RegistryError::UnknownMember { .. }
                | RegistryError::HeartbeatTimeout { .. }
                | RegistryError::Disconnected(_),
            ) => break,
            Err(e) => {
                tracing::warn!(member = %shared.me, error = %e, "could not fetch registry events");
                Vec::new()
            }
        };
        if batch.is_empty() {
            let deadline = Instant::now().checked_add(UPCALL_POLL);
            if let Err(e) = shared.backend.wait_for_change(seen, deadline) {
                tracing::warn!(member = %shared.me, error = %e, "waiting for registry events failed");
                std::thread::sleep(UPCALL_POLL);
            }
            continue;
        }
        for (seq, event) in batch {
            tracing::trace!(member = %shared.me, seq, %event, "upcall");
            if catch_unwind(AssertUnwindSafe(|| event.dispatch(&mut *handler))).is_err() {
                tracing::error!(member = %shared.me, seq, %event, "registry event handler panicked");
            }
        }
    }
    tracing::debug!(member = %shared.me, "registry event thread stopped");
}
