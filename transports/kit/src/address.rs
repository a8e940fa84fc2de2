//! The `ip:port/id` endpoint address of the network transports: where the endpoint
//! listens, and its 64-bit random id as 16 lowercase hex digits (IPv6 addresses in
//! brackets: `[::1]:4000/…`), UTF-8. The id tells a restarted endpoint on the same port
//! apart from the one a stale address names.

use std::fmt;
use std::net::SocketAddr;

use ipl_transport_abi::TransportError;

/// How many bytes of a malformed address an error message shows.
const SHOWN: usize = 100;

/// A parsed `ip:port/id` endpoint address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpEndpoint {
    /// Where the endpoint listens.
    pub socket: SocketAddr,
    /// The endpoint's random id.
    pub id: u64,
}

impl fmt::Display for IpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{:016x}", self.socket, self.id)
    }
}

impl IpEndpoint {
    /// The address as bytes, as published.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_string().into_bytes()
    }

    /// Parses the address of a `transport` endpoint strictly; anything malformed is an
    /// [`InvalidArgument`](TransportError::InvalidArgument) naming the transport.
    pub fn parse(transport: &str, bytes: &[u8]) -> Result<Self, TransportError> {
        let text =
            std::str::from_utf8(bytes).map_err(|_| malformed(transport, bytes, "not UTF-8"))?;
        Self::parse_str(text).map_err(|why| malformed(transport, bytes, why))
    }

    /// Parses `ip:port/id` strictly; `Err` says what is wrong.
    pub fn parse_str(text: &str) -> Result<Self, &'static str> {
        let (sock, id) = text.rsplit_once('/').ok_or("expected ip:port/id")?;
        let socket: SocketAddr = sock.parse().map_err(|_| "bad ip:port")?;
        if socket.port() == 0 || socket.ip().is_unspecified() {
            return Err("not a reachable ip:port");
        }
        let id = parse_id(id).ok_or("id must be 16 lowercase hex digits")?;
        Ok(IpEndpoint { socket, id })
    }
}

/// An endpoint id written as 16 lowercase hex digits, or `None`.
///
/// ```
/// use ipl_transport_kit::address::parse_id;
/// assert_eq!(parse_id("00000000000000ff"), Some(255));
/// assert_eq!(parse_id("00000000000000FF"), None);
/// assert_eq!(parse_id("ff"), None);
/// ```
pub fn parse_id(text: &str) -> Option<u64> {
    if text.len() != 16 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// The error for a malformed address of `transport`: shows the start of the address
/// and `why`.
pub fn malformed(transport: &str, bytes: &[u8], why: &str) -> TransportError {
    TransportError::InvalidArgument(format!(
        "malformed {transport} address {:?}: {why}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(SHOWN)])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strictness() {
        let a = IpEndpoint {
            socket: "127.0.0.1:4000".parse().unwrap(),
            id: 0x0123_4567_89ab_cdef,
        };
        assert_eq!(a.to_bytes(), b"127.0.0.1:4000/0123456789abcdef");
        assert_eq!(IpEndpoint::parse("tcp", &a.to_bytes()).unwrap(), a);
        let v6 = IpEndpoint {
            socket: "[::1]:9".parse().unwrap(),
            id: 1,
        };
        assert_eq!(IpEndpoint::parse("tcp", &v6.to_bytes()).unwrap(), v6);
        for bad in [
            &b""[..],
            b"127.0.0.1:4000",
            b"127.0.0.1:4000/",
            b"127.0.0.1:4000/0123456789ABCDEF",
            b"127.0.0.1:4000/123",
            b"127.0.0.1:4000/0123456789abcdef0",
            b"127.0.0.1:4000/+123456789abcdef",
            b"127.0.0.1/0123456789abcdef",
            b"127.0.0.1:0/0123456789abcdef",
            b"0.0.0.0:4000/0123456789abcdef",
            b"host:4000/0123456789abcdef",
            b"\xff\xfe",
        ] {
            let e = IpEndpoint::parse("tcp", bad).unwrap_err();
            assert!(matches!(e, TransportError::InvalidArgument(_)), "{bad:?}");
            assert!(e.detail().contains("malformed tcp address"), "{e}");
        }
    }
}
