//! Which host an endpoint runs on: [`HostId`], the kernel's boot id and the identity of
//! the network namespace. Two processes with the same `HostId` reach each other over
//! loopback and abstract Unix sockets; two network namespaces on one machine count as
//! two hosts (each has its own loopback and its own abstract socket names).
//!
//! ```
//! use ipl_transport_kit::host::{host_id, HostId};
//! let here = host_id().unwrap();
//! assert_eq!(here.to_string().parse::<HostId>().unwrap(), here);
//! assert_eq!(host_id().unwrap(), here);
//! ```

use std::fmt;
use std::str::FromStr;

/// The identity of a host (a machine's boot, and a network namespace on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostId {
    /// The boot id (`/proc/sys/kernel/random/boot_id`, a random UUID per boot).
    pub boot: u128,
    /// The network namespace: the inode of `/proc/self/ns/net`.
    pub netns: u64,
}

/// The length of a [`HostId`] written out: 32 hex digits, `.`, 16 hex digits.
pub const HOST_ID_LEN: usize = 49;

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}.{:016x}", self.boot, self.netns)
    }
}

fn hex<T>(
    s: &str,
    digits: usize,
    conv: fn(&str, u32) -> Result<T, std::num::ParseIntError>,
) -> Option<T> {
    if s.len() != digits || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    conv(s, 16).ok()
}

impl FromStr for HostId {
    type Err = &'static str;
    /// Parses `<32 lowercase hex>.<16 lowercase hex>` strictly.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const WHY: &str = "host id must be 32 hex digits, '.', 16 hex digits";
        let (b, n) = s.split_once('.').ok_or(WHY)?;
        Ok(HostId {
            boot: hex(b, 32, u128::from_str_radix).ok_or(WHY)?,
            netns: hex(n, 16, u64::from_str_radix).ok_or(WHY)?,
        })
    }
}

/// Parses the text of a boot id file: a UUID (`8-4-4-4-12` hex digits).
fn parse_boot_id(text: &str) -> Option<u128> {
    let t = text.trim();
    if t.len() != 36 {
        return None;
    }
    let digits: String = t.chars().filter(|&c| c != '-').collect();
    if digits.len() != 32 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(&digits, 16).ok()
}

/// This process's host: read from `/proc` each time (a process may move to another
/// network namespace). `Err` says what could not be read (e.g. not Linux).
pub fn host_id() -> Result<HostId, String> {
    const BOOT: &str = "/proc/sys/kernel/random/boot_id";
    const NETNS: &str = "/proc/self/ns/net";
    let text = std::fs::read_to_string(BOOT).map_err(|e| format!("cannot read {BOOT}: {e}"))?;
    let boot = parse_boot_id(&text).ok_or_else(|| format!("{BOOT} holds no UUID"))?;
    netns_inode(NETNS).map(|netns| HostId { boot, netns })
}

#[cfg(unix)]
fn netns_inode(path: &str) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .map(|m| m.ino())
        .map_err(|e| format!("cannot read {path}: {e}"))
}

#[cfg(not(unix))]
fn netns_inode(path: &str) -> Result<u64, String> {
    Err(format!("no {path} on this system"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_strict_parsing() {
        let h = HostId {
            boot: 0x1e58d258_27fe_4174_b1d9_90c8a059d799,
            netns: 4026531833,
        };
        let s = h.to_string();
        assert_eq!(s, "1e58d25827fe4174b1d990c8a059d799.00000000effffff9");
        assert_eq!(s.len(), HOST_ID_LEN);
        assert_eq!(s.parse::<HostId>().unwrap(), h);
        for bad in [
            "",
            ".",
            "1e58d25827fe4174b1d990c8a059d799",
            "1e58d25827fe4174b1d990c8a059d799.",
            "1E58D25827FE4174B1D990C8A059D799.00000000f0000000",
            "1e58d25827fe4174b1d990c8a059d79.00000000f0000000",
            "1e58d25827fe4174b1d990c8a059d799.0000000f0000000",
            "+e58d25827fe4174b1d990c8a059d799.00000000f0000000",
            "1e58d25827fe4174b1d990c8a059d799.00000000f0000000.",
        ] {
            assert!(bad.parse::<HostId>().is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_boot_id("1e58d258-27fe-4174-b1d9-90c8a059d799\n"),
            Some(0x1e58d258_27fe_4174_b1d9_90c8a059d799)
        );
        assert_eq!(parse_boot_id("1e58d258-27fe-4174-b1d9-90c8a059d79"), None);
        assert_eq!(parse_boot_id("1e58d258-27fe-4174-b1d9-90c8a059d79x"), None);
    }

    #[test]
    fn this_host_is_stable() {
        let a = host_id().unwrap();
        assert_eq!(host_id().unwrap(), a);
        assert_ne!(a.netns, 0);
    }
}
