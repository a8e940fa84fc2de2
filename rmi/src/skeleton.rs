//! The server side of an interface as the generated code sees it: [`Skeleton`] decodes a
//! request into an [`Invocation`], which runs the method and yields an [`Outcome`] that
//! writes the reply.

use std::fmt::Debug;

use ipl::{ReadMessage, WriteMessage};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::RmiError;
use crate::reference::RemoteInterface;
use crate::stub::RemoteResult;
use crate::wire::{write_reply_header, Status};

/// A generated skeleton (`<Trait>Skeleton<T>`): decodes requests for an object `T`.
pub trait Skeleton: Sized + Send + 'static {
    /// The interface (`dyn Trait`).
    type Interface: RemoteInterface + ?Sized;

    /// Reads the arguments of method `method` from the request and returns the call,
    /// ready to run; unknown methods and undecodable arguments are errors. `in_place`:
    /// the server runs every call in the receiving thread before it finishes the
    /// request (a serial export), so a call may also read its primitive arrays from the
    /// request when it runs ([`Invocation::in_place`]), as `#[nonblocking]` methods
    /// always may.
    fn decode(
        &self,
        method: u16,
        request: &mut ReadMessage,
        in_place: bool,
    ) -> Result<Invocation<Self>, RmiError>;
}

type Run<S> = Box<dyn FnOnce(&S) -> Box<dyn Outcome> + Send>;
type RunInPlace<S> =
    Box<dyn FnOnce(&S, &mut ReadMessage) -> Result<Box<dyn Outcome>, RmiError> + Send>;

/// A decoded call: the method with its arguments, waiting to run on the object.
pub struct Invocation<S> {
    pub(crate) nonblocking: bool,
    pub(crate) body: Body<S>,
}

/// What runs a call.
pub(crate) enum Body<S> {
    /// The arguments are all decoded: the call may run after the request is finished.
    Decoded(Run<S>),
    /// The call reads the rest of its arguments (primitive arrays, borrowed from the
    /// request's buffer without a copy) when it runs: before the request is finished.
    InPlace(RunInPlace<S>),
}

impl<S> Invocation<S> {
    /// A call. `nonblocking` calls (methods marked `#[nonblocking]`) run in the port's
    /// receiving thread, with no thread switch; the others on a worker.
    pub fn new(
        nonblocking: bool,
        run: impl FnOnce(&S) -> Box<dyn Outcome> + Send + 'static,
    ) -> Self {
        Invocation {
            nonblocking,
            body: Body::Decoded(Box::new(run)),
        }
    }

    /// A call that runs in the receiving thread and reads the rest of its arguments
    /// from the request then: primitive arrays in place, the way the IPL hands them
    /// out (Manta's point: an array crosses without a copy on either side). Its reading
    /// may fail (a malformed request), which is answered as such.
    pub fn in_place(
        nonblocking: bool,
        run: impl FnOnce(&S, &mut ReadMessage) -> Result<Box<dyn Outcome>, RmiError> + Send + 'static,
    ) -> Self {
        Invocation {
            nonblocking,
            body: Body::InPlace(Box::new(run)),
        }
    }

    /// Whether the call must run before its request is finished.
    pub(crate) fn needs_request(&self) -> bool {
        matches!(self.body, Body::InPlace(_))
    }
}

/// What a method call produced, able to write itself as the reply's status and value.
pub trait Outcome: Send {
    /// Writes the reply (header included).
    fn write(&self, call: u64, m: &mut WriteMessage<'_, '_>) -> ipl::Result<()>;
    /// The error, if the call failed, for logging one-way calls.
    fn error(&self) -> Option<String>;
}

struct ResultOutcome<T, E>(Result<T, E>);

impl<T: Serialize + Send, E: Serialize + Debug + Send> Outcome for ResultOutcome<T, E> {
    fn write(&self, call: u64, m: &mut WriteMessage<'_, '_>) -> ipl::Result<()> {
        match &self.0 {
            Ok(v) => {
                write_reply_header(m, call, Status::Ok)?;
                m.write_object(v)
            }
            Err(e) => {
                write_reply_header(m, call, Status::AppError)?;
                m.write_object(e)
            }
        }
    }

    fn error(&self) -> Option<String> {
        self.0.as_ref().err().map(|e| format!("{e:?}"))
    }
}

/// A failure of the server's runtime (not of the method).
pub(crate) struct ErrorOutcome(pub(crate) RmiError);

impl Outcome for ErrorOutcome {
    fn write(&self, call: u64, m: &mut WriteMessage<'_, '_>) -> ipl::Result<()> {
        write_reply_header(m, call, Status::RmiError)?;
        m.write_object(&self.0)
    }

    fn error(&self) -> Option<String> {
        Some(self.0.to_string())
    }
}

struct UnitOutcome;

impl Outcome for UnitOutcome {
    fn write(&self, call: u64, m: &mut WriteMessage<'_, '_>) -> ipl::Result<()> {
        write_reply_header(m, call, Status::Ok)?;
        m.write_object(&())
    }

    fn error(&self) -> Option<String> {
        None
    }
}

/// The outcome of a method returning `Result<T, E>` (or an alias).
pub fn outcome<R>(r: R) -> Box<dyn Outcome>
where
    R: RemoteResult,
    R::Ok: Serialize + Send + 'static,
    R::Err: Serialize + Debug + Send + 'static,
{
    Box::new(ResultOutcome(r.into_result()))
}

/// The outcome of a one-way method returning `()`.
pub fn unit_outcome(_: ()) -> Box<dyn Outcome> {
    Box::new(UnitOutcome)
}

/// Consumes a primitive array argument of a request, to be read in place with
/// [`array_at`] once every argument is consumed.
pub fn read_array_span<T: ipl::Primitive>(
    m: &mut ReadMessage,
) -> Result<ipl::ArraySpan<T>, RmiError> {
    m.read_array_span()
        .map_err(|e| RmiError::Malformed(format!("array argument: {e}")))
}

/// A primitive array argument consumed with [`read_array_span`], borrowed from the
/// request's buffer when it is aligned there (always for bytes), else copied once.
pub fn array_at<'m, T: ipl::Primitive>(
    m: &'m ReadMessage,
    span: &ipl::ArraySpan<T>,
) -> Result<std::borrow::Cow<'m, [T]>, RmiError> {
    m.array_at(span)
        .map_err(|e| RmiError::Malformed(format!("array argument: {e}")))
}

/// Reads a primitive array argument from a request.
pub fn read_array<T: ipl::Primitive>(m: &mut ReadMessage) -> Result<Vec<T>, RmiError> {
    m.read_array_vec()
        .map_err(|e| RmiError::Malformed(format!("array argument: {e}")))
}

/// Reads a method's serde arguments (a tuple) from a request.
pub fn read_args<T: DeserializeOwned>(m: &mut ReadMessage) -> Result<T, RmiError> {
    m.read_object()
        .map_err(|e| RmiError::Malformed(format!("arguments: {e}")))
}
