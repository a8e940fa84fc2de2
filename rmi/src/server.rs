//! The server half of a runtime: one receive port with an upcall per exported object
//! (its skeleton), the worker pool, and the reply send ports (one per client member).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ipl::{Ibis, IbisIdentifier, PortType, ReadMessage, ReceivePort, SendPort};
use parking_lot::Mutex;

use crate::client::REPLY_PORT;
use crate::error::RmiError;
use crate::reference::RemoteInterface;
use crate::skeleton::{Body, ErrorOutcome, Invocation, Outcome, Skeleton};
use crate::wire::{interface_hash, RequestHeader};
use crate::workers::Workers;

/// The longest a server waits to connect back to a client's reply port.
const REPLY_CONNECT: Duration = Duration::from_secs(2);

/// How an exported object's calls are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Calls of methods not marked `#[nonblocking]` run on the worker pool, concurrently.
    Pool,
    /// Every call runs in the port's receiving thread, one at a time.
    Serial,
}

/// What the upcalls of every skeleton share.
pub(crate) struct ServerCore {
    ibis: Arc<Ibis>,
    port_type: PortType,
    connect_timeout: Duration,
    /// The reply port per client, looked up for every reply (FxHash: the key is a
    /// short pool name and a member number, hashed on every call).
    replies: Mutex<rustc_hash::FxHashMap<IbisIdentifier, Arc<Mutex<SendPort>>>>,
    connecting: Mutex<()>,
    ended: AtomicBool,
    next_port: AtomicU64,
    pub(crate) workers: Workers,
}

impl ServerCore {
    pub(crate) fn new(
        ibis: Arc<Ibis>,
        port_type: PortType,
        connect_timeout: Duration,
        threads: usize,
    ) -> Self {
        ServerCore {
            ibis,
            port_type,
            connect_timeout,
            replies: Mutex::new(rustc_hash::FxHashMap::default()),
            connecting: Mutex::new(()),
            ended: AtomicBool::new(false),
            next_port: AtomicU64::new(0),
            workers: Workers::new(threads),
        }
    }

    /// The send port to `client`'s reply port, connected on first use.
    fn reply_port(&self, client: &IbisIdentifier) -> Result<Arc<Mutex<SendPort>>, RmiError> {
        if let Some(p) = self.replies.lock().get(client) {
            return Ok(Arc::clone(p));
        }
        if self.ended.load(Ordering::SeqCst) {
            return Err(RmiError::Ended);
        }
        // One connect at a time, so that two first calls of a client do not open two
        // reply connections.
        let _connecting = self.connecting.lock();
        if let Some(p) = self.replies.lock().get(client) {
            return Ok(Arc::clone(p));
        }
        let n = self.next_port.fetch_add(1, Ordering::Relaxed);
        let mut sp = self
            .ibis
            .create_send_port(&self.port_type, &format!("ibis-rmi/reply/{n}"))?;
        // The client's reply port existed when it sent the request; if it is gone now,
        // the client ended, and waiting long for it only holds this thread.
        sp.connect_to(client, REPLY_PORT, self.connect_timeout.min(REPLY_CONNECT))?;
        let p = Arc::new(Mutex::new(sp));
        self.replies.lock().insert(client.clone(), Arc::clone(&p));
        Ok(p)
    }

    /// Sends the reply of call `call` to `client`.
    fn reply(&self, client: &IbisIdentifier, call: u64, outcome: &dyn Outcome) {
        let r = self.reply_port(client).and_then(|port| {
            let mut sp = port.lock();
            let written = sp.new_message().and_then(|mut m| {
                outcome.write(call, &mut m)?;
                m.finish()
            });
            match written {
                // The result could not be serialized: say so instead.
                Err(ipl::IplError::Serialization(e)) => {
                    let err = ErrorOutcome(RmiError::Serialize(e.to_string()));
                    sp.new_message()
                        .and_then(|mut m| {
                            err.write(call, &mut m)?;
                            m.finish()
                        })
                        .map_err(RmiError::from)
                }
                other => other.map_err(RmiError::from),
            }
        });
        if let Err(e) = r {
            tracing::debug!(client = %client, call, error = %e, "reply not delivered");
            if matches!(e, RmiError::ConnectionLost(_) | RmiError::Ended) {
                // Reconnect on the next call, should the client still be there.
                self.replies.lock().remove(client);
            }
        }
    }

    /// Ends the server half: stops the workers and closes the reply ports.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        self.workers.end();
        let ports: Vec<_> = self.replies.lock().drain().map(|(_, p)| p).collect();
        for p in ports {
            p.lock().close();
        }
    }

    /// Creates the receive port `name` serving `skel`. Calls run as `mode` says; in
    /// [`Mode::Pool`] the skeleton is shared with the workers.
    pub(crate) fn export<S: Skeleton + Sync>(
        self: &Arc<Self>,
        skel: S,
        name: &str,
        mode: Mode,
    ) -> Result<ReceivePort, RmiError> {
        let skel = Arc::new(skel);
        let core = Arc::clone(self);
        let hash = interface_hash(<S::Interface as RemoteInterface>::NAME);
        let upcall = move |mut m: ReadMessage| {
            let serial = mode == Mode::Serial;
            let Some((h, inv)) = decode(&*skel, hash, &mut m, serial) else {
                return;
            };
            match inv {
                // Calls that run here are answered before the message is finished: the
                // caller's identity is borrowed from it, not copied, and arrays are read
                // from it in place.
                Err(e) => core.refuse(&h, &m.origin().ibis, e),
                Ok(inv) if serial || inv.nonblocking || inv.needs_request() => {
                    core.run(&*skel, inv, &h, Request::InPlace(&mut m))
                }
                Ok(inv) => {
                    let origin = m.origin().ibis.clone();
                    m.finish();
                    let (c, s) = (Arc::clone(&core), Arc::clone(&skel));
                    core.workers
                        .execute(move || c.run(&*s, inv, &h, Request::Finished(origin)));
                }
            }
        };
        self.open(name, upcall)
    }

    /// Creates the receive port `name` serving `skel` (which need not be `Sync`): every
    /// call runs in the port's receiving thread, one at a time.
    pub(crate) fn export_serial<S: Skeleton>(
        self: &Arc<Self>,
        skel: S,
        name: &str,
    ) -> Result<ReceivePort, RmiError> {
        let core = Arc::clone(self);
        let hash = interface_hash(<S::Interface as RemoteInterface>::NAME);
        let upcall = move |mut m: ReadMessage| {
            let Some((h, inv)) = decode(&skel, hash, &mut m, true) else {
                return;
            };
            match inv {
                Err(e) => core.refuse(&h, &m.origin().ibis, e),
                Ok(inv) => core.run(&skel, inv, &h, Request::InPlace(&mut m)),
            }
        };
        self.open(name, upcall)
    }

    fn open(
        &self,
        name: &str,
        upcall: impl FnMut(ReadMessage) + Send + 'static,
    ) -> Result<ReceivePort, RmiError> {
        let port = self
            .ibis
            .receive_port(&self.port_type, name)
            .message_upcall(upcall)
            .create()?;
        port.enable_connections();
        port.enable_message_upcalls()?;
        Ok(port)
    }

    fn refuse(&self, h: &RequestHeader, origin: &IbisIdentifier, e: RmiError) {
        if h.oneway() {
            tracing::warn!(from = %origin, method = h.method, error = %e, "one-way request refused");
        } else {
            self.reply(origin, h.call, &ErrorOutcome(e));
        }
    }

    /// Runs a call (catching a panic of the method) and replies.
    fn run<S>(&self, skel: &S, inv: Invocation<S>, h: &RequestHeader, mut request: Request<'_>) {
        let call = || match (inv.body, &mut request) {
            (Body::Decoded(run), _) => Ok(run(skel)),
            (Body::InPlace(run), Request::InPlace(m)) => run(skel, m),
            (Body::InPlace(_), Request::Finished(_)) => Err(RmiError::Malformed(
                "a call that reads its request ran after the request was finished".into(),
            )),
        };
        let outcome: Box<dyn Outcome> = match catch_unwind(AssertUnwindSafe(call)) {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => Box::new(ErrorOutcome(e)),
            Err(p) => {
                let what = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-string panic".into());
                tracing::warn!(method = h.method, panic = %what, "remote method panicked");
                Box::new(ErrorOutcome(RmiError::Panicked(what)))
            }
        };
        let origin = match &request {
            Request::InPlace(m) => &m.origin().ibis,
            Request::Finished(o) => o,
        };
        if h.oneway() {
            if let Some(e) = outcome.error() {
                tracing::warn!(from = %origin, method = h.method, error = %e, "one-way call failed");
            }
        } else {
            self.reply(origin, h.call, &*outcome);
        }
    }
}

/// Where a running call's request is.
enum Request<'a> {
    /// Not finished yet: the call may read from it, and the reply goes to its origin.
    InPlace(&'a mut ReadMessage),
    /// Finished; the caller it came from.
    Finished(IbisIdentifier),
}

pub(crate) type Decoded<S> = (RequestHeader, Result<Invocation<S>, RmiError>);

/// Reads a request: its header (a request without one is dropped: there is nobody to
/// answer) and its arguments.
/// `in_place`: every call runs before the request is finished (see [`Skeleton::decode`]).
pub(crate) fn decode<S: Skeleton>(
    skel: &S,
    hash: u32,
    m: &mut ReadMessage,
    in_place: bool,
) -> Option<Decoded<S>> {
    let h = match RequestHeader::read(m) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(from = %m.origin(), error = %e, "malformed request dropped");
            return None;
        }
    };
    let inv = if h.interface != hash {
        Err(RmiError::WrongInterface {
            expected: format!("interface #{:08x}", h.interface),
            found: <S::Interface as RemoteInterface>::NAME.to_string(),
        })
    } else if !h.oneway() && h.call == 0 {
        Err(RmiError::Malformed("call id 0 on a two-way call".into()))
    } else {
        skel.decode(h.method, m, in_place)
    };
    Some((h, inv))
}
