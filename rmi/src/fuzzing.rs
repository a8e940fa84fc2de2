//! The decoders RMI runs on what a peer sends, for the cargo-fuzz targets in `fuzz/`
//! (feature `fuzzing`; not part of the API): a server's reading of a request, and a
//! client's reading of a reply, both ways it happens.

use ipl::ReadMessage;
use serde::de::DeserializeOwned;

use crate::calls::{reply_bytes, Reply};
use crate::error::RmiError;
use crate::reference::RemoteInterface;
use crate::skeleton::Skeleton;
use crate::stub::RemoteResult;
use crate::wire::{interface_hash, RequestHeader};

/// Reads a request for the object behind `skel` as its receive port does: the header,
/// the interface and call-id checks, then the skeleton's decoding of the method and its
/// arguments. Runs nothing. `None` when the request is dropped (no header); otherwise
/// the header and whether the call would run (and where: `Ok(nonblocking)`) or be
/// refused with an error reply.
pub fn decode_request<S: Skeleton>(
    skel: &S,
    m: &mut ReadMessage,
) -> Option<(RequestHeader, Result<bool, RmiError>)> {
    let hash = interface_hash(<S::Interface as RemoteInterface>::NAME);
    let (h, inv) = crate::server::decode(skel, hash, m, false)?;
    Some((h, inv.map(|i| i.nonblocking)))
}

/// Reads a reply as a client does, into the method's result type `R`: its call id,
/// then either in place by the caller that waits for it (`in_place`), or by another
/// thread that keeps the status and the value's bytes for the caller. `None` when the
/// reply is dropped (no call id).
pub fn decode_reply<R>(mut m: ReadMessage, in_place: bool) -> Option<R>
where
    R: RemoteResult,
    R::Ok: DeserializeOwned,
    R::Err: DeserializeOwned + From<RmiError>,
{
    m.read_u64().ok()?;
    let reply = if in_place {
        Reply::Message(m)
    } else {
        match reply_bytes(&mut m) {
            Ok(r) => r,
            Err(e) => return Some(R::from_result(Err(R::Err::from(e)))),
        }
    };
    Some(crate::stub::decode(reply))
}
