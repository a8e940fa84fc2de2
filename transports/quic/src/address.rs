//! Endpoint addresses: `ip:port/id` in UTF-8, where `id` is the endpoint's 64-bit random
//! id as 16 lowercase hex digits (IPv6 addresses in brackets: `[::1]:4000/…`).
//!
//! A caller may append [`UNRELIABLE_SUFFIX`] (`?unreliable`) to an address before
//! passing it to `connect`: the channel then carries its messages as QUIC datagrams
//! (see the crate documentation). Published addresses never carry it.

use std::net::SocketAddr;

use ipl_transport_abi::TransportError;
use ipl_transport_kit::address::{malformed, IpEndpoint};

/// Appended to an address, asks `connect` for a channel whose messages travel as QUIC
/// datagrams (unreliable, unordered) whenever they fit in one.
pub const UNRELIABLE_SUFFIX: &str = "?unreliable";

/// A parsed endpoint address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// Where the endpoint listens (UDP).
    pub socket: SocketAddr,
    /// The endpoint's random id; also the name in its TLS certificate, so a stale
    /// address never reaches a newer endpoint on the same port.
    pub id: u64,
    /// Whether a channel to this address should carry its messages as datagrams.
    pub unreliable: bool,
}

impl Address {
    /// The address as bytes, with the `?unreliable` suffix when asked for.
    pub fn to_bytes(&self) -> Vec<u8> {
        let suffix = if self.unreliable {
            UNRELIABLE_SUFFIX
        } else {
            ""
        };
        let at = IpEndpoint {
            socket: self.socket,
            id: self.id,
        };
        format!("{at}{suffix}").into_bytes()
    }

    /// Parses an address strictly; anything malformed is an `InvalidArgument`.
    pub fn parse(bytes: &[u8]) -> Result<Self, TransportError> {
        let bad = |why: &str| malformed("quic", bytes, why);
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let (text, unreliable) = match text.strip_suffix(UNRELIABLE_SUFFIX) {
            Some(t) => (t, true),
            None => (text, false),
        };
        let IpEndpoint { socket, id } = IpEndpoint::parse_str(text).map_err(bad)?;
        Ok(Address {
            socket,
            id,
            unreliable,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strictness() {
        let mut a = Address {
            socket: "127.0.0.1:4000".parse().unwrap(),
            id: 0x0123_4567_89ab_cdef,
            unreliable: false,
        };
        assert_eq!(a.to_bytes(), b"127.0.0.1:4000/0123456789abcdef");
        assert_eq!(Address::parse(&a.to_bytes()).unwrap(), a);
        a.unreliable = true;
        assert_eq!(a.to_bytes(), b"127.0.0.1:4000/0123456789abcdef?unreliable");
        assert_eq!(Address::parse(&a.to_bytes()).unwrap(), a);
        let v6 = Address {
            socket: "[::1]:9".parse().unwrap(),
            id: 1,
            unreliable: false,
        };
        assert_eq!(Address::parse(&v6.to_bytes()).unwrap(), v6);
        for bad in [
            &b""[..],
            b"127.0.0.1:4000",
            b"127.0.0.1:4000/",
            b"127.0.0.1:4000/0123456789ABCDEF",
            b"127.0.0.1:4000/123",
            b"127.0.0.1:4000/0123456789abcdef?reliable",
            b"127.0.0.1:4000/0123456789abcdef?unreliable?unreliable",
            b"127.0.0.1/0123456789abcdef",
            b"127.0.0.1:0/0123456789abcdef",
            b"0.0.0.0:4000/0123456789abcdef",
            b"host:4000/0123456789abcdef",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(Address::parse(bad), Err(TransportError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
