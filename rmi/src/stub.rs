//! The client side of a call: [`StubCore`] (what every generated stub wraps), blocking,
//! async ([`PendingCall`]) and one-way calls, and decoding of replies.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ipl::{MessageReader, WriteMessage};
use parking_lot::MutexGuard;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::calls::Reply;
use crate::client::{Client, StubPort};
use crate::error::RmiError;
use crate::reference::RawRef;
use crate::wire::{self, RequestHeader, Status};

/// The return type of a remote method: `Result<T, E>` (or an alias of it).
///
/// `E` must implement `From<RmiError>`, so that a call that fails in transit (timeout,
/// lost connection, malformed reply) is reported in the method's own error type.
pub trait RemoteResult: Sized + 'static {
    /// The success value.
    type Ok;
    /// The error value.
    type Err;
    /// Builds the result.
    fn from_result(r: Result<Self::Ok, Self::Err>) -> Self;
    /// Takes the result apart.
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
}

impl<T: 'static, E: 'static> RemoteResult for Result<T, E> {
    type Ok = T;
    type Err = E;
    fn from_result(r: Result<T, E>) -> Self {
        r
    }
    fn into_result(self) -> Result<T, E> {
        self
    }
}

fn object<T: DeserializeOwned>(r: &mut Reply) -> Result<T, RmiError> {
    let bad = |e: String| RmiError::Malformed(format!("reply value: {e}"));
    match r {
        Reply::Message(m) => m.read_object().map_err(|e| bad(e.to_string())),
        Reply::Bytes(_, b) => MessageReader::new(&b[..])
            .read_object()
            .map_err(|e| bad(e.to_string())),
    }
}

/// Turns a reply into the method's result type.
pub(crate) fn decode<R>(mut reply: Reply) -> R
where
    R: RemoteResult,
    R::Ok: DeserializeOwned,
    R::Err: DeserializeOwned + From<RmiError>,
{
    let status = match &mut reply {
        Reply::Message(m) => m
            .read_u8()
            .map_err(|e| RmiError::Malformed(format!("reply status: {e}")))
            .and_then(Status::from_u8),
        Reply::Bytes(s, _) => Ok(*s),
    };
    let r = match status {
        Ok(Status::Ok) => object::<R::Ok>(&mut reply).map_err(R::Err::from),
        Ok(Status::AppError) => Err(object::<R::Err>(&mut reply).unwrap_or_else(R::Err::from)),
        Ok(Status::RmiError) => Err(R::Err::from(
            object::<RmiError>(&mut reply).unwrap_or_else(|e| e),
        )),
        Err(e) => Err(R::Err::from(e)),
    };
    R::from_result(r)
}

/// Writes a call's arguments into the request: the generated stubs pass a closure that
/// writes the serde arguments as one tuple, then each primitive array argument as an IPL
/// array (borrowed until the request is sent: no copy, no per-element encoding).
pub trait WriteArgs<'x> {
    /// Writes the arguments.
    fn write_args(self, m: &mut WriteMessage<'_, 'x>) -> ipl::Result<()>;
}

impl<'x, F: FnOnce(&mut WriteMessage<'_, 'x>) -> ipl::Result<()>> WriteArgs<'x> for F {
    fn write_args(self, m: &mut WriteMessage<'_, 'x>) -> ipl::Result<()> {
        self(m)
    }
}

/// Gives a closure the signature [`WriteArgs`] needs (used by the generated stubs).
pub fn args<'x, F: FnOnce(&mut WriteMessage<'_, 'x>) -> ipl::Result<()>>(f: F) -> F {
    f
}

/// Arguments that are one serde value (a tuple), for hand-written calls.
#[derive(Debug)]
pub struct Args<'v, A: ?Sized>(pub &'v A);

impl<'x, A: Serialize + ?Sized> WriteArgs<'x> for Args<'_, A> {
    fn write_args(self, m: &mut WriteMessage<'_, 'x>) -> ipl::Result<()> {
        m.write_object(self.0)
    }
}

fn fail<R>(e: RmiError) -> R
where
    R: RemoteResult,
    R::Err: From<RmiError>,
{
    R::from_result(Err(R::Err::from(e)))
}

/// The connection of a stub to its object; generated stubs wrap one.
#[derive(Clone)]
pub struct StubCore {
    client: Arc<Client>,
    port: Arc<StubPort>,
    target: RawRef,
    member: Arc<ipl::IbisIdentifier>,
    hash: u32,
    timeout: Duration,
}

impl std::fmt::Debug for StubCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StubCore")
            .field("target", &self.target)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl StubCore {
    pub(crate) fn new(client: Arc<Client>, port: Arc<StubPort>, target: RawRef) -> Self {
        let hash = wire::interface_hash(&target.interface);
        let timeout = client.timeout;
        StubCore {
            client,
            port,
            member: Arc::new(target.member.clone()),
            target,
            hash,
            timeout,
        }
    }

    /// The object this stub calls.
    pub fn target(&self) -> &RawRef {
        &self.target
    }

    /// The timeout of this stub's calls.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same connection with another call timeout.
    pub fn with_timeout(&self, t: Duration) -> Self {
        StubCore {
            timeout: t,
            ..self.clone()
        }
    }

    fn send<'x, W: WriteArgs<'x>>(
        &self,
        call: u64,
        method: u16,
        flags: u8,
        args: W,
    ) -> Result<(), RmiError> {
        let mut sp: MutexGuard<'_, ipl::SendPort> = self.port.send.lock();
        let mut m: WriteMessage<'_, 'x> = sp.new_message()?;
        RequestHeader {
            call,
            interface: self.hash,
            method,
            flags,
        }
        .write(&mut m)?;
        args.write_args(&mut m)?;
        m.finish()?;
        Ok(())
    }

    fn start<'x, W: WriteArgs<'x>>(
        &self,
        method: u16,
        args: W,
        asynchronous: bool,
    ) -> Result<u64, RmiError> {
        let id = self.client.next_call();
        self.client
            .table
            .register(id, &self.member, self.port.id, self.timeout, asynchronous)?;
        if let Err(e) = self.send(id, method, 0, args) {
            self.client.table.cancel(id);
            return Err(e);
        }
        Ok(id)
    }

    /// A blocking call: sends the request and waits for the reply (or the timeout).
    pub fn call<'x, R, W>(&self, method: u16, args: W) -> R
    where
        W: WriteArgs<'x>,
        R: RemoteResult,
        R::Ok: DeserializeOwned,
        R::Err: DeserializeOwned + From<RmiError>,
    {
        let id = match self.start(method, args, false) {
            Ok(id) => id,
            Err(e) => return fail(e),
        };
        match self.client.table.wait(&self.client.replies, id) {
            Ok(reply) => decode(reply),
            Err(e) => fail(e),
        }
    }

    /// An async call: the request is sent now; the returned future resolves to the
    /// reply (or the timeout).
    pub fn call_async<'x, R, W>(&self, method: u16, args: W) -> PendingCall<R>
    where
        W: WriteArgs<'x>,
        R: RemoteResult,
    {
        let state = match self.start(method, args, true) {
            Ok(id) => {
                self.client.ensure_pump();
                PendingState::Waiting {
                    client: Arc::clone(&self.client),
                    id,
                }
            }
            Err(e) => PendingState::Failed(Some(e)),
        };
        PendingCall {
            state,
            _result: PhantomData,
        }
    }

    /// A one-way call: sends the request; no reply. Only local failures (the request
    /// could not be sent) are reported.
    pub fn oneway<'x, R, W>(&self, method: u16, args: W) -> R
    where
        W: WriteArgs<'x>,
        R: RemoteResult<Ok = ()>,
        R::Err: From<RmiError>,
    {
        match self.send(0, method, wire::FLAG_ONEWAY, args) {
            Ok(()) => R::from_result(Ok(())),
            Err(e) => fail(e),
        }
    }

    /// A one-way call of a method returning `()`: a failure to send is only logged.
    pub fn oneway_unit<'x, W: WriteArgs<'x>>(&self, method: u16, args: W) {
        if let Err(e) = self.send(0, method, wire::FLAG_ONEWAY, args) {
            tracing::warn!(target = %self.target, method, error = %e, "one-way call not sent");
        }
    }
}

enum PendingState {
    Failed(Option<RmiError>),
    Waiting { client: Arc<Client>, id: u64 },
    Done,
}

/// An async call in flight: a future of the method's result. The request was sent when
/// the call was made; dropping the future forgets the reply (the call still runs).
#[must_use = "the reply is lost unless the call is awaited or waited for"]
pub struct PendingCall<R> {
    state: PendingState,
    _result: PhantomData<fn() -> R>,
}

impl<R> std::fmt::Debug for PendingCall<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match &self.state {
            PendingState::Failed(_) => "failed",
            PendingState::Waiting { .. } => "waiting",
            PendingState::Done => "done",
        };
        f.debug_struct("PendingCall").field("state", &s).finish()
    }
}

impl<R> PendingCall<R>
where
    R: RemoteResult,
    R::Ok: DeserializeOwned,
    R::Err: DeserializeOwned + From<RmiError>,
{
    /// Blocks until the reply arrives (or the call times out).
    pub fn wait(mut self) -> R {
        match std::mem::replace(&mut self.state, PendingState::Done) {
            PendingState::Failed(e) => fail(e.unwrap_or(RmiError::Ended)),
            PendingState::Waiting { client, id } => match client.table.wait(&client.replies, id) {
                Ok(reply) => decode(reply),
                Err(e) => fail(e),
            },
            PendingState::Done => fail(RmiError::Ended),
        }
    }
}

impl<R> Future for PendingCall<R>
where
    R: RemoteResult,
    R::Ok: DeserializeOwned,
    R::Err: DeserializeOwned + From<RmiError>,
{
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let this = self.get_mut();
        let out = match &mut this.state {
            PendingState::Failed(e) => fail(e.take().unwrap_or(RmiError::Ended)),
            PendingState::Waiting { client, id } => match client.table.poll(*id, cx.waker()) {
                None => return Poll::Pending,
                Some(Ok(reply)) => decode(reply),
                Some(Err(e)) => fail(e),
            },
            PendingState::Done => fail(RmiError::Ended),
        };
        this.state = PendingState::Done;
        Poll::Ready(out)
    }
}

impl<R> Drop for PendingCall<R> {
    fn drop(&mut self) {
        if let PendingState::Waiting { client, id } = &self.state {
            client.table.cancel(*id);
        }
    }
}
