//! Endpoint addresses. An address names the host (kernel boot id, network namespace,
//! host name) and the endpoint (a random 64-bit id, which also names its Unix socket
//! in the abstract namespace), so that a peer elsewhere fails at once with a typed
//! error instead of reaching a stranger's socket of the same name:
//!
//! `shm1;<boot id>;<netns id>;<endpoint id: 16 hex>;<host name>` (UTF-8).

use ipl_transport_abi::TransportError;

/// Longest address accepted, in bytes (a peer's address is untrusted input).
pub const MAX_ADDRESS_LEN: usize = 512;

/// What identifies this host (and network namespace) for the shm transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostId {
    /// The boot id (`/proc/sys/kernel/random/boot_id`) in 32 hex digits: differs per
    /// machine and per boot.
    pub boot_id: String,
    /// The network namespace (abstract Unix sockets are per namespace).
    pub netns: String,
    /// The host name (for messages; the boot id already tells hosts apart).
    pub hostname: String,
}

fn clean(s: &str) -> String {
    s.trim()
        .chars()
        .filter(|c| !c.is_control() && *c != ';')
        .collect()
}

impl HostId {
    /// This host's identity: the one every transport uses
    /// ([`ipl_transport_kit::host::host_id`]: boot id and the network namespace's inode),
    /// written as the boot id in 32 hex digits and `net:[<inode>]`.
    pub fn local() -> Result<HostId, String> {
        let h = ipl_transport_kit::host::host_id()?;
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_else(|_| "localhost".into());
        Ok(HostId {
            boot_id: format!("{:032x}", h.boot),
            netns: format!("net:[{}]", h.netns),
            hostname: clean(&hostname),
        })
    }
}

/// A parsed endpoint address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The host the endpoint runs on.
    pub host: HostId,
    /// The endpoint's random id.
    pub id: u64,
}

impl Address {
    /// The address as bytes, as published.
    pub fn to_bytes(&self) -> Vec<u8> {
        format!(
            "shm1;{};{};{:016x};{}",
            self.host.boot_id, self.host.netns, self.id, self.host.hostname
        )
        .into_bytes()
    }

    /// Parses an address strictly; anything malformed is an `InvalidArgument`.
    pub fn parse(bytes: &[u8]) -> Result<Self, TransportError> {
        let bad = |why: &str| {
            TransportError::InvalidArgument(format!(
                "malformed shm address {:?}: {why}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(120)])
            ))
        };
        if bytes.len() > MAX_ADDRESS_LEN {
            return Err(bad("longer than 512 bytes"));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let parts: Vec<&str> = text.splitn(5, ';').collect();
        let [tag, boot, netns, id, host] = parts[..] else {
            return Err(bad("expected shm1;boot;netns;id;host"));
        };
        if tag != "shm1" {
            return Err(bad("not an shm1 address"));
        }
        if boot.is_empty() || netns.is_empty() {
            return Err(bad("empty host identity"));
        }
        if id.len() != 16 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad("id must be 16 lowercase hex digits"));
        }
        let id = u64::from_str_radix(id, 16).map_err(|_| bad("bad id"))?;
        Ok(Address {
            host: HostId {
                boot_id: boot.into(),
                netns: netns.into(),
                hostname: host.into(),
            },
            id,
        })
    }

    /// Fails with `Unavailable` unless the address is on `local`'s host and network
    /// namespace (so the IPL tries its next transport).
    pub fn check_reachable(&self, local: &HostId) -> Result<(), TransportError> {
        if self.host.boot_id != local.boot_id {
            return Err(TransportError::Unavailable(format!(
                "shm endpoint is on another host ({}, boot id {}); shared memory reaches \
                 only this host ({})",
                self.host.hostname, self.host.boot_id, local.hostname
            )));
        }
        if self.host.netns != local.netns {
            return Err(TransportError::Unavailable(format!(
                "shm endpoint is in another network namespace ({} here, {} there)",
                local.netns, self.host.netns
            )));
        }
        Ok(())
    }
}

/// The abstract socket name of endpoint `id`.
pub fn socket_name(id: u64) -> String {
    format!("ipl-shm/{id:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_strictness_and_reachability() {
        let here = HostId::local().unwrap();
        // The host identity of every transport: the same boot and namespace.
        let kit = ipl_transport_kit::host::host_id().unwrap();
        assert_eq!(here.boot_id, format!("{:032x}", kit.boot));
        assert_eq!(here.netns, format!("net:[{}]", kit.netns));
        let a = Address {
            host: here.clone(),
            id: 0x0123_4567_89ab_cdef,
        };
        assert_eq!(Address::parse(&a.to_bytes()).unwrap(), a);
        assert!(a.check_reachable(&here).is_ok());
        let mut far = a.clone();
        far.host.boot_id = "00000000-0000-0000-0000-000000000000".into();
        assert!(matches!(
            far.check_reachable(&here),
            Err(TransportError::Unavailable(_))
        ));
        let mut ns = a.clone();
        ns.host.netns = "net:[1]".into();
        assert!(matches!(
            ns.check_reachable(&here),
            Err(TransportError::Unavailable(_))
        ));
        let long = format!("shm1;b;n;0123456789abcdef;{}", "h".repeat(600));
        for bad in [
            &b""[..],
            b"shm1;b;n;0123456789abcdef",
            b"shm2;b;n;0123456789abcdef;h",
            b"shm1;;n;0123456789abcdef;h",
            b"shm1;b;n;0123456789ABCDEF;h",
            b"shm1;b;n;123;h",
            b"127.0.0.1:4000/0123456789abcdef",
            b"\xff",
            long.as_bytes(),
        ] {
            assert!(
                matches!(Address::parse(bad), Err(TransportError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
