//! Addresses and the channel hello.
//!
//! A wan-emu address is `[n: u8][cluster: n bytes UTF-8][inner address]`: the peer's
//! cluster tells the connecting side which link its messages take. The connecting side
//! then sends the hello, `HELLO_MAGIC` followed by its own cluster, as the first message
//! on the new inner channel, so the accepting side knows the link back; the accepting
//! side tells its host about the channel only once the hello has arrived.

use ipl_transport_abi::TransportError;

/// What the channel hello starts with.
pub const HELLO_MAGIC: &[u8; 8] = b"IPLWAN1:";

/// Encodes an address. The cluster was checked (1..=255 bytes) by the configuration.
pub fn encode(cluster: &str, inner: &[u8]) -> Vec<u8> {
    let n = u8::try_from(cluster.len()).unwrap_or(u8::MAX);
    let mut a = Vec::with_capacity(1 + cluster.len() + inner.len());
    a.push(n);
    a.extend_from_slice(&cluster.as_bytes()[..usize::from(n)]);
    a.extend_from_slice(inner);
    a
}

/// Splits an address into the peer's cluster and the inner transport's address.
pub fn parse(address: &[u8]) -> Result<(&str, &[u8]), TransportError> {
    let bad = |why: &str| {
        TransportError::InvalidArgument(format!(
            "malformed wan-emu address ({} bytes): {why}",
            address.len()
        ))
    };
    let (&n, rest) = address.split_first().ok_or_else(|| bad("empty"))?;
    let n = usize::from(n);
    if n == 0 {
        return Err(bad("empty cluster name"));
    }
    if rest.len() < n {
        return Err(bad("cluster name runs past the end"));
    }
    let (cluster, inner) = rest.split_at(n);
    let cluster = std::str::from_utf8(cluster).map_err(|_| bad("cluster name is not UTF-8"))?;
    if inner.is_empty() {
        return Err(bad("no inner address"));
    }
    Ok((cluster, inner))
}

/// The hello a connecting endpoint in `cluster` sends first.
pub fn hello(cluster: &str) -> Vec<u8> {
    let mut h = HELLO_MAGIC.to_vec();
    h.extend_from_slice(cluster.as_bytes());
    h
}

/// The connecting side's cluster from a hello, or why it is not one.
pub fn parse_hello(msg: &[u8]) -> Result<&str, String> {
    let rest = msg
        .strip_prefix(HELLO_MAGIC.as_slice())
        .ok_or("first message is not a wan-emu hello (is the peer a wan-emu endpoint?)")?;
    if rest.is_empty() || rest.len() > crate::config::MAX_CLUSTER_LEN {
        return Err(format!("hello names a cluster of {} bytes", rest.len()));
    }
    std::str::from_utf8(rest).map_err(|_| "hello's cluster is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let a = encode("cluster-1", b"127.0.0.1:5/00");
        assert_eq!(parse(&a).unwrap(), ("cluster-1", &b"127.0.0.1:5/00"[..]));
        assert_eq!(parse_hello(&hello("x")).unwrap(), "x");
    }

    #[test]
    fn malformed() {
        for bad in [
            &b""[..],
            b"\x00abc",
            b"\x05abc",
            b"\x03abc",
            b"\x02\xff\xfeinner",
        ] {
            assert!(
                matches!(parse(bad), Err(TransportError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        for bad in [
            &b""[..],
            b"IPLWAN1:",
            b"IPLWAN2:x",
            b"hello",
            b"IPLWAN1:\xff",
        ] {
            assert!(parse_hello(bad).is_err(), "{bad:?}");
        }
        let long = [HELLO_MAGIC.as_slice(), &[b'a'; 256]].concat();
        assert!(parse_hello(&long).is_err());
    }
}
