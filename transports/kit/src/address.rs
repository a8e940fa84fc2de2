//! The address of a network transport's endpoint: every `ip:port` where it listens, its
//! 64-bit random id as 16 lowercase hex digits, and the [`HostId`] of its host, UTF-8:
//!
//! `192.0.2.2:4000,[fd00::2]:4000,127.0.0.1:4000/0123456789abcdef/<host id>`
//!
//! (IPv6 addresses in brackets). The host id lets a peer on the same host dial loopback
//! first, and a peer elsewhere leave loopback out (see [`dial`](crate::dial)). The single
//! form of earlier versions, `ip:port/id`, still parses (no host: loopback is tried as
//! any address). The id tells a restarted endpoint on the same port apart from the one a
//! stale address names. A peer's address is untrusted input: parsing is strict and
//! bounded ([`MAX_ADDRESS_LEN`], [`MAX_SOCKETS`]).

use std::fmt;
use std::net::SocketAddr;

use ipl_transport_abi::TransportError;

use crate::host::HostId;

/// How many bytes of a malformed address an error message shows.
const SHOWN: usize = 100;
/// Most `ip:port` entries in an address.
pub const MAX_SOCKETS: usize = 16;
/// Longest address accepted, in bytes.
pub const MAX_ADDRESS_LEN: usize = 1024;

/// A parsed endpoint address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpEndpoint {
    /// Where the endpoint listens: 1 to [`MAX_SOCKETS`] distinct addresses.
    pub sockets: Vec<SocketAddr>,
    /// The endpoint's random id.
    pub id: u64,
    /// The endpoint's host, if the address names it.
    pub host: Option<HostId>,
}

impl fmt::Display for IpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.sockets.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{s}")?;
        }
        write!(f, "/{:016x}", self.id)?;
        if let Some(h) = &self.host {
            write!(f, "/{h}")?;
        }
        Ok(())
    }
}

impl IpEndpoint {
    /// The address of an endpoint listening at one socket address, host unnamed.
    pub fn single(socket: SocketAddr, id: u64) -> Self {
        IpEndpoint {
            sockets: vec![socket],
            id,
            host: None,
        }
    }

    /// The address as bytes, as published.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_string().into_bytes()
    }

    /// The first listed address that is loopback, else the first (for tests and
    /// messages).
    pub fn primary(&self) -> SocketAddr {
        self.sockets
            .iter()
            .find(|s| s.ip().is_loopback())
            .or(self.sockets.first())
            .copied()
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Parses the address of a `transport` endpoint strictly; anything malformed is an
    /// [`InvalidArgument`](TransportError::InvalidArgument) naming the transport.
    pub fn parse(transport: &str, bytes: &[u8]) -> Result<Self, TransportError> {
        if bytes.len() > MAX_ADDRESS_LEN {
            return Err(malformed(transport, bytes, "longer than 1024 bytes"));
        }
        let text =
            std::str::from_utf8(bytes).map_err(|_| malformed(transport, bytes, "not UTF-8"))?;
        Self::parse_str(text).map_err(|why| malformed(transport, bytes, why))
    }

    /// Parses `ip:port[,ip:port...]/id[/host]` strictly; `Err` says what is wrong.
    pub fn parse_str(text: &str) -> Result<Self, &'static str> {
        if text.len() > MAX_ADDRESS_LEN {
            return Err("longer than 1024 bytes");
        }
        let mut parts = text.split('/');
        let (Some(socks), Some(id)) = (parts.next(), parts.next()) else {
            return Err("expected ip:port/id");
        };
        let host = match parts.next() {
            None => None,
            Some(h) => Some(h.parse::<HostId>()?),
        };
        if parts.next().is_some() {
            return Err("expected ip:port/id/host");
        }
        let mut sockets = Vec::new();
        for s in socks.split(',') {
            if sockets.len() == MAX_SOCKETS {
                return Err("more than 16 ip:port entries");
            }
            let socket: SocketAddr = s.parse().map_err(|_| "bad ip:port")?;
            if socket.port() == 0 || socket.ip().is_unspecified() || socket.ip().is_multicast() {
                return Err("not a reachable ip:port");
            }
            if sockets.contains(&socket) {
                return Err("an ip:port listed twice");
            }
            sockets.push(socket);
        }
        let id = parse_id(id).ok_or("id must be 16 lowercase hex digits")?;
        Ok(IpEndpoint { sockets, id, host })
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
    use proptest::prelude::*;

    const HOST: &str = "1e58d25827fe4174b1d990c8a059d799.00000000effffff9";

    #[test]
    fn round_trip_and_strictness() {
        let a = IpEndpoint::single("127.0.0.1:4000".parse().unwrap(), 0x0123_4567_89ab_cdef);
        assert_eq!(a.to_bytes(), b"127.0.0.1:4000/0123456789abcdef");
        assert_eq!(IpEndpoint::parse("tcp", &a.to_bytes()).unwrap(), a);
        let v6 = IpEndpoint::single("[::1]:9".parse().unwrap(), 1);
        assert_eq!(IpEndpoint::parse("tcp", &v6.to_bytes()).unwrap(), v6);
        let list = IpEndpoint {
            sockets: vec![
                "192.0.2.2:4000".parse().unwrap(),
                "[fd00::2]:4001".parse().unwrap(),
                "127.0.0.1:4000".parse().unwrap(),
            ],
            id: 7,
            host: Some(HOST.parse().unwrap()),
        };
        let text = format!("192.0.2.2:4000,[fd00::2]:4001,127.0.0.1:4000/0000000000000007/{HOST}");
        assert_eq!(list.to_string(), text);
        assert_eq!(IpEndpoint::parse("tcp", text.as_bytes()).unwrap(), list);
        assert_eq!(list.primary(), "127.0.0.1:4000".parse().unwrap());
        let seventeen: Vec<String> = (1..=17).map(|p| format!("127.0.0.1:{p}")).collect();
        let seventeen = format!("{}/0000000000000001", seventeen.join(","));
        let long = format!("127.0.0.1:1/0000000000000001/{}", "a".repeat(2000));
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
            b"224.0.0.1:4000/0123456789abcdef",
            b"host:4000/0123456789abcdef",
            b",127.0.0.1:4000/0123456789abcdef",
            b"127.0.0.1:4000,/0123456789abcdef",
            b"127.0.0.1:4000,127.0.0.1:4000/0123456789abcdef",
            b"127.0.0.1:4000/0123456789abcdef/",
            b"127.0.0.1:4000/0123456789abcdef/xyz",
            b"127.0.0.1:4000/0123456789abcdef/1e58d25827fe4174b1d990c8a059d799.00000000effffff9/",
            seventeen.as_bytes(),
            long.as_bytes(),
            b"\xff\xfe",
        ] {
            let e = IpEndpoint::parse("tcp", bad).unwrap_err();
            assert!(matches!(e, TransportError::InvalidArgument(_)), "{bad:?}");
            assert!(e.detail().contains("malformed tcp address"), "{e}");
        }
    }

    proptest! {
        #[test]
        fn lists_round_trip(
            ports in proptest::collection::btree_set(1u16.., 1..=MAX_SOCKETS),
            v6 in any::<bool>(),
            id in any::<u64>(),
            host in proptest::option::of((any::<u128>(), any::<u64>())),
        ) {
            let sockets: Vec<SocketAddr> = ports
                .into_iter()
                .map(|p| if v6 { SocketAddr::from(([0xfd00, 0, 0, 0, 0, 0, 0, 2], p)) } else { SocketAddr::from(([10, 1, 2, 3], p)) })
                .collect();
            let a = IpEndpoint { sockets, id, host: host.map(|(boot, netns)| HostId { boot, netns }) };
            prop_assert_eq!(IpEndpoint::parse("tcp", &a.to_bytes()).unwrap(), a);
        }

        #[test]
        fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = IpEndpoint::parse("tcp", &bytes);
        }
    }
}
