//! Endpoint addresses: the address of [`ipl_transport_kit::address`], UTF-8
//! `ip:port[,ip:port...]/id[/host]`, where `id` is the endpoint's 64-bit random id as 16
//! lowercase hex digits (IPv6 addresses in brackets: `[::1]:4000/…`) and `host` the
//! [`HostId`] of its host.
//!
//! A caller may append [`UNRELIABLE_SUFFIX`] (`?unreliable`) to an address before
//! passing it to `connect`: the channel then carries its messages as QUIC datagrams
//! (see the crate documentation). Published addresses never carry it.

use std::net::SocketAddr;

use ipl_transport_abi::TransportError;
use ipl_transport_kit::address::{malformed, IpEndpoint, MAX_ADDRESS_LEN};
use ipl_transport_kit::host::HostId;

/// Appended to an address, asks `connect` for a channel whose messages travel as QUIC
/// datagrams (unreliable, unordered) whenever they fit in one.
pub const UNRELIABLE_SUFFIX: &str = "?unreliable";

/// A parsed endpoint address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// Where the endpoint listens (UDP), every address a peer may use.
    pub sockets: Vec<SocketAddr>,
    /// The endpoint's random id; also the name in its TLS certificate, so a stale
    /// address never reaches a newer endpoint on the same port.
    pub id: u64,
    /// The endpoint's host, if the address names it.
    pub host: Option<HostId>,
    /// Whether a channel to this address should carry its messages as datagrams.
    pub unreliable: bool,
}

impl Address {
    /// The address of an endpoint listening at one socket address, host unnamed.
    pub fn single(socket: SocketAddr, id: u64) -> Self {
        Self::from_endpoint(IpEndpoint::single(socket, id), false)
    }

    fn from_endpoint(e: IpEndpoint, unreliable: bool) -> Self {
        Address {
            sockets: e.sockets,
            id: e.id,
            host: e.host,
            unreliable,
        }
    }

    /// The address without the `?unreliable` request.
    pub fn endpoint(&self) -> IpEndpoint {
        IpEndpoint {
            sockets: self.sockets.clone(),
            id: self.id,
            host: self.host,
        }
    }

    /// The first loopback address, else the first (for tests and messages).
    pub fn primary(&self) -> SocketAddr {
        self.endpoint().primary()
    }

    /// The address as bytes, with the `?unreliable` suffix when asked for.
    pub fn to_bytes(&self) -> Vec<u8> {
        let suffix = if self.unreliable {
            UNRELIABLE_SUFFIX
        } else {
            ""
        };
        format!("{}{suffix}", self.endpoint()).into_bytes()
    }

    /// Parses an address strictly; anything malformed is an `InvalidArgument`.
    pub fn parse(bytes: &[u8]) -> Result<Self, TransportError> {
        let bad = |why: &str| malformed("quic", bytes, why);
        if bytes.len() > MAX_ADDRESS_LEN + UNRELIABLE_SUFFIX.len() {
            return Err(bad("too long"));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let (text, unreliable) = match text.strip_suffix(UNRELIABLE_SUFFIX) {
            Some(t) => (t, true),
            None => (text, false),
        };
        let e = IpEndpoint::parse_str(text).map_err(bad)?;
        Ok(Self::from_endpoint(e, unreliable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strictness() {
        let mut a = Address::single("127.0.0.1:4000".parse().unwrap(), 0x0123_4567_89ab_cdef);
        assert_eq!(a.to_bytes(), b"127.0.0.1:4000/0123456789abcdef");
        assert_eq!(Address::parse(&a.to_bytes()).unwrap(), a);
        a.unreliable = true;
        assert_eq!(a.to_bytes(), b"127.0.0.1:4000/0123456789abcdef?unreliable");
        assert_eq!(Address::parse(&a.to_bytes()).unwrap(), a);
        let v6 = Address::single("[::1]:9".parse().unwrap(), 1);
        assert_eq!(Address::parse(&v6.to_bytes()).unwrap(), v6);
        let list = b"10.0.0.1:5,127.0.0.1:5/0000000000000001/1e58d25827fe4174b1d990c8a059d799.00000000effffff9?unreliable";
        let l = Address::parse(list).unwrap();
        assert_eq!(
            (l.sockets.len(), l.unreliable, l.host.is_some()),
            (2, true, true)
        );
        assert_eq!(l.to_bytes(), list);
        assert_eq!(l.primary(), "127.0.0.1:5".parse().unwrap());
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
            b"127.0.0.1:4000,127.0.0.1:4000/0123456789abcdef",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(Address::parse(bad), Err(TransportError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
