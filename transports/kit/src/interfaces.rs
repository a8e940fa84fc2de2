//! Which of the host's network interfaces a transport uses: an [`InterfaceSpec`] parsed
//! from a comma list as Open MPI's `btl_tcp_if_include` takes it, and the host's
//! addresses it selects ([`local_addresses`]).
//!
//! Each item of the list is an IP address (`10.0.0.5`, `fd00::2`), an interface name
//! (`eth0`, `lo`) or a network in CIDR form (`10.0.0.0/24`); an empty list or `all`
//! selects every interface. Naming an interface or an address this host does not have,
//! or a network none of its addresses is in, is an [`InterfaceError`] naming it.
//!
//! Parsing and selection are plain functions of their input ([`select`] takes the list
//! of addresses), so they are tested without touching the host.
//!
//! ```
//! use ipl_transport_kit::interfaces::{select, InterfaceSpec, LocalAddr};
//! let host = [
//!     LocalAddr::new("lo", "127.0.0.1".parse().unwrap(), 8),
//!     LocalAddr::new("eth0", "10.0.0.5".parse().unwrap(), 24),
//! ];
//! let spec: InterfaceSpec = "10.0.0.0/16".parse().unwrap();
//! assert_eq!(select(&spec, &host).unwrap(), vec![host[1].clone()]);
//! assert_eq!(select(&InterfaceSpec::all(), &host).unwrap().len(), 2);
//! let e = select(&"eth7".parse().unwrap(), &host).unwrap_err();
//! assert!(e.to_string().contains("eth7"), "{e}");
//! ```

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Longest interface selection accepted, in bytes.
pub const MAX_SPEC_LEN: usize = 4096;
/// Most items in an interface selection.
pub const MAX_ITEMS: usize = 64;
/// Longest interface name (Linux's `IFNAMSIZ` less the terminating NUL).
pub const MAX_NAME_LEN: usize = 15;

/// Why an interface selection is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceError {
    /// The selection text is malformed.
    #[error("interface selection {item:?}: {why}")]
    Malformed {
        /// The offending item (or the start of the text).
        item: String,
        /// What is wrong.
        why: &'static str,
    },
    /// No interface of that name has an IP address on this host.
    #[error("no network interface named {0:?} with an IP address on this host")]
    NoSuchInterface(String),
    /// No interface of this host has that address.
    #[error("no network interface of this host has the address {0}")]
    NoSuchAddress(IpAddr),
    /// No address of this host is in that network.
    #[error("no address of this host is in the network {0}")]
    NoAddressIn(Network),
    /// The selection chose nothing (no interface has an address).
    #[error("no network interface of this host has an IP address")]
    Nothing,
    /// The host's interfaces could not be listed.
    #[error("cannot list the network interfaces: {0}")]
    Enumerate(String),
}

/// A network in CIDR form: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Network {
    /// The network's address (host bits need not be zero).
    pub addr: IpAddr,
    /// The prefix length: at most 32 for IPv4, 128 for IPv6.
    pub prefix: u8,
}

impl Network {
    /// Whether `ip` is in this network (never across families).
    ///
    /// ```
    /// use ipl_transport_kit::interfaces::Network;
    /// let n: Network = "10.0.0.0/8".parse().unwrap();
    /// assert!(n.contains("10.2.3.4".parse().unwrap()));
    /// assert!(!n.contains("11.0.0.1".parse().unwrap()));
    /// ```
    pub fn contains(&self, ip: IpAddr) -> bool {
        same_prefix(self.addr, ip, self.prefix)
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Network {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, p) = s.split_once('/').ok_or("expected address/prefix")?;
        let addr: IpAddr = a.parse().map_err(|_| "not an IP address before the /")?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err("the prefix length must be a number");
        }
        let prefix: u8 = p.parse().map_err(|_| "the prefix length is too large")?;
        if prefix > max_prefix(addr) {
            return Err("the prefix length is too large for the address family");
        }
        Ok(Network { addr, prefix })
    }
}

fn max_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Whether `a` and `b` agree in their first `prefix` bits (never across families).
pub fn same_prefix(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    let (a, b, bits) = match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let prefix = u32::from(prefix).min(bits);
    if prefix == 0 {
        return true;
    }
    let shift = bits - prefix;
    (a >> shift) == (b >> shift)
}

/// One item of an interface selection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InterfaceItem {
    /// An address of this host.
    Addr(IpAddr),
    /// A network: every address of this host in it.
    Net(Network),
    /// An interface, by name: every address it has.
    Name(String),
}

impl fmt::Display for InterfaceItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterfaceItem::Addr(a) => a.fmt(f),
            InterfaceItem::Net(n) => n.fmt(f),
            InterfaceItem::Name(n) => f.write_str(n),
        }
    }
}

/// Which interfaces to use: a list of [`InterfaceItem`]s, or all of them (the empty
/// list). Parsed from a comma list (`"eth0,10.1.0.0/16"`); `""` and `"all"` mean all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceSpec {
    items: Vec<InterfaceItem>,
}

impl InterfaceSpec {
    /// Every interface.
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether this selects every interface.
    pub fn is_all(&self) -> bool {
        self.items.is_empty()
    }

    /// The items (empty for all).
    pub fn items(&self) -> &[InterfaceItem] {
        &self.items
    }

    /// Parses a comma list strictly (see the module documentation).
    ///
    /// ```
    /// use ipl_transport_kit::interfaces::{InterfaceItem, InterfaceSpec};
    /// let s = InterfaceSpec::parse(" eth0 , 10.0.0.0/24,::1").unwrap();
    /// assert_eq!(s.items().len(), 3);
    /// assert_eq!(s.items()[0], InterfaceItem::Name("eth0".into()));
    /// assert!(InterfaceSpec::parse("all").unwrap().is_all());
    /// assert!(InterfaceSpec::parse("eth0,,lo").is_err());
    /// assert!(InterfaceSpec::parse("10.0.0.0/33").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, InterfaceError> {
        let bad = |item: &str, why| InterfaceError::Malformed {
            item: item.chars().take(64).collect(),
            why,
        };
        if text.len() > MAX_SPEC_LEN {
            return Err(bad(text, "longer than 4096 bytes"));
        }
        let text = text.trim();
        if text.is_empty() || text == "all" {
            return Ok(Self::all());
        }
        let mut items = Vec::new();
        for (n, raw) in text.split(',').enumerate() {
            let item = raw.trim();
            if n == MAX_ITEMS {
                return Err(bad(text, "more than 64 items"));
            }
            let parsed = if item.is_empty() {
                return Err(bad(text, "empty item in the comma list"));
            } else if item == "all" {
                return Err(bad(item, "`all` cannot be combined with other items"));
            } else if let Ok(ip) = item.parse::<IpAddr>() {
                InterfaceItem::Addr(ip)
            } else if item.contains('/') {
                InterfaceItem::Net(item.parse().map_err(|why| bad(item, why))?)
            } else if item.len() > MAX_NAME_LEN {
                return Err(bad(item, "an interface name has at most 15 bytes"));
            } else if !item
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
            {
                return Err(bad(
                    item,
                    "neither an IP address, a network address/prefix nor an interface name",
                ));
            } else {
                InterfaceItem::Name(item.to_string())
            };
            if !items.contains(&parsed) {
                items.push(parsed);
            }
        }
        Ok(InterfaceSpec { items })
    }
}

impl FromStr for InterfaceSpec {
    type Err = InterfaceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for InterfaceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.items.is_empty() {
            return f.write_str("all");
        }
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            item.fmt(f)?;
        }
        Ok(())
    }
}

/// An address of one of this host's interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalAddr {
    /// The interface's name.
    pub interface: String,
    /// The address.
    pub ip: IpAddr,
    /// The prefix length of its network (which addresses are on the same subnet).
    pub prefix: u8,
}

impl LocalAddr {
    /// An address of interface `interface` in a network of prefix length `prefix`.
    pub fn new(interface: impl Into<String>, ip: IpAddr, prefix: u8) -> Self {
        LocalAddr {
            interface: interface.into(),
            ip,
            prefix: prefix.min(max_prefix(ip)),
        }
    }

    /// Whether `ip` is on this address's subnet.
    pub fn same_subnet(&self, ip: IpAddr) -> bool {
        same_prefix(self.ip, ip, self.prefix)
    }
}

/// The addresses of `host` that `spec` selects, in the order `host` lists them, each
/// once. Every item must select something: an interface, address or network that is not
/// there is an error naming it.
pub fn select(spec: &InterfaceSpec, host: &[LocalAddr]) -> Result<Vec<LocalAddr>, InterfaceError> {
    let matches = |item: &InterfaceItem, a: &LocalAddr| match item {
        InterfaceItem::Addr(ip) => a.ip == *ip,
        InterfaceItem::Net(n) => n.contains(a.ip),
        InterfaceItem::Name(n) => a.interface == *n,
    };
    for item in spec.items() {
        if !host.iter().any(|a| matches(item, a)) {
            return Err(match item {
                InterfaceItem::Addr(ip) => InterfaceError::NoSuchAddress(*ip),
                InterfaceItem::Net(n) => InterfaceError::NoAddressIn(*n),
                InterfaceItem::Name(n) => InterfaceError::NoSuchInterface(n.clone()),
            });
        }
    }
    let mut out: Vec<LocalAddr> = Vec::new();
    for a in host {
        let wanted = spec.is_all() || spec.items().iter().any(|i| matches(i, a));
        if wanted && !out.iter().any(|o| o.ip == a.ip) {
            out.push(a.clone());
        }
    }
    if out.is_empty() {
        return Err(InterfaceError::Nothing);
    }
    Ok(out)
}

/// Every IP address of this host's interfaces (IPv6 link-local addresses left out:
/// they need a scope that an address cannot carry to another host).
pub fn host_addresses() -> Result<Vec<LocalAddr>, InterfaceError> {
    let ifs = if_addrs::get_if_addrs().map_err(|e| InterfaceError::Enumerate(e.to_string()))?;
    Ok(ifs
        .into_iter()
        .filter_map(|i| {
            let (ip, prefix) = match &i.addr {
                if_addrs::IfAddr::V4(a) => (IpAddr::V4(a.ip), a.prefixlen),
                if_addrs::IfAddr::V6(a) => (IpAddr::V6(a.ip), a.prefixlen),
            };
            let link_local = matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
            (!link_local).then(|| LocalAddr::new(i.name, ip, prefix))
        })
        .collect())
}

/// The addresses of this host that `spec` selects (see [`select`]).
pub fn local_addresses(spec: &InterfaceSpec) -> Result<Vec<LocalAddr>, InterfaceError> {
    select(spec, &host_addresses()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn host() -> Vec<LocalAddr> {
        vec![
            LocalAddr::new("lo", "127.0.0.1".parse().unwrap(), 8),
            LocalAddr::new("eth0", "10.0.0.5".parse().unwrap(), 24),
            LocalAddr::new("eth0", "10.0.1.5".parse().unwrap(), 24),
            LocalAddr::new("ib0", "192.168.7.1".parse().unwrap(), 16),
            LocalAddr::new("lo", "::1".parse().unwrap(), 128),
            LocalAddr::new("eth0", "fd00::2".parse().unwrap(), 64),
        ]
    }

    fn ips(spec: &str) -> Vec<String> {
        select(&spec.parse().unwrap(), &host())
            .unwrap()
            .iter()
            .map(|a| a.ip.to_string())
            .collect()
    }

    #[test]
    fn selection_by_name_address_and_network() {
        assert_eq!(ips("").len(), 6);
        assert_eq!(ips("all").len(), 6);
        assert_eq!(ips("eth0"), ["10.0.0.5", "10.0.1.5", "fd00::2"]);
        assert_eq!(ips("lo"), ["127.0.0.1", "::1"]);
        assert_eq!(ips("10.0.1.5"), ["10.0.1.5"]);
        assert_eq!(
            ips("10.0.0.0/16,ib0"),
            ["10.0.0.5", "10.0.1.5", "192.168.7.1"]
        );
        assert_eq!(ips("fd00::/8"), ["fd00::2"]);
        assert_eq!(
            ips("0.0.0.0/0"),
            ["127.0.0.1", "10.0.0.5", "10.0.1.5", "192.168.7.1"]
        );
        // Overlapping items select each address once, in the host's order.
        assert_eq!(
            ips("ib0,eth0,10.0.0.5"),
            ["10.0.0.5", "10.0.1.5", "192.168.7.1", "fd00::2"]
        );
    }

    #[test]
    fn what_is_not_there_is_an_error_naming_it() {
        let err = |s: &str| select(&s.parse().unwrap(), &host()).unwrap_err();
        assert_eq!(err("eth7"), InterfaceError::NoSuchInterface("eth7".into()));
        assert_eq!(
            err("eth0,eth7"),
            InterfaceError::NoSuchInterface("eth7".into())
        );
        assert!(err("eth7").to_string().contains("\"eth7\""));
        assert_eq!(
            err("10.9.9.9"),
            InterfaceError::NoSuchAddress("10.9.9.9".parse().unwrap())
        );
        assert!(err("172.16.0.0/12").to_string().contains("172.16.0.0/12"));
        assert_eq!(
            select(&InterfaceSpec::all(), &[]),
            Err(InterfaceError::Nothing)
        );
    }

    #[test]
    fn malformed_selections() {
        let long = "x".repeat(MAX_SPEC_LEN + 1);
        let many = vec!["lo"; MAX_ITEMS + 1].join(",");
        let many_distinct: String = (0..=MAX_ITEMS)
            .map(|i| format!("10.0.0.{i}"))
            .collect::<Vec<_>>()
            .join(",");
        for bad in [
            ",",
            "eth0,",
            "eth0,,lo",
            "all,eth0",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/+8",
            "10.0.0/8",
            "host name",
            "eth0;rm",
            "averyveryverylongname",
            long.as_str(),
            many.as_str(),
            many_distinct.as_str(),
        ] {
            assert!(
                matches!(
                    InterfaceSpec::parse(bad),
                    Err(InterfaceError::Malformed { .. })
                ),
                "{bad:?}"
            );
        }
        assert_eq!(InterfaceSpec::parse("eth0:1").unwrap().items().len(), 1);
    }

    #[test]
    fn prefixes() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_prefix(ip("10.0.0.1"), ip("10.0.0.200"), 24));
        assert!(!same_prefix(ip("10.0.0.1"), ip("10.0.1.1"), 24));
        assert!(same_prefix(ip("10.0.0.1"), ip("99.0.0.1"), 0));
        assert!(!same_prefix(ip("10.0.0.1"), ip("::1"), 0));
        assert!(same_prefix(ip("fd00::1"), ip("fd00::ffff"), 64));
        assert!(!same_prefix(ip("fd00::1"), ip("fd01::1"), 16));
        assert!(same_prefix(ip("1.2.3.4"), ip("1.2.3.4"), 32));
    }

    proptest! {
        #[test]
        fn display_parses_back(items in proptest::collection::vec(
            prop_oneof![
                any::<u32>().prop_map(|a| InterfaceItem::Addr(std::net::Ipv4Addr::from(a).into())),
                any::<u128>().prop_map(|a| InterfaceItem::Addr(std::net::Ipv6Addr::from(a).into())),
                (any::<u32>(), 0u8..=32).prop_map(|(a, prefix)| InterfaceItem::Net(Network {
                    addr: std::net::Ipv4Addr::from(a).into(), prefix
                })),
                "[a-z][a-z0-9]{0,14}".prop_filter("all", |s| s != "all").prop_map(InterfaceItem::Name),
            ],
            1..8,
        )) {
            let mut dedup: Vec<InterfaceItem> = Vec::new();
            for i in items {
                if !dedup.contains(&i) {
                    dedup.push(i);
                }
            }
            let spec = InterfaceSpec { items: dedup };
            prop_assert_eq!(InterfaceSpec::parse(&spec.to_string()).unwrap(), spec);
        }

        #[test]
        fn parsing_never_panics(text in "\\PC{0,80}") {
            let _ = InterfaceSpec::parse(&text);
        }

        #[test]
        fn a_network_contains_its_own_address(a in any::<u32>(), prefix in 0u8..=32, b in any::<u32>()) {
            let n = Network { addr: std::net::Ipv4Addr::from(a).into(), prefix };
            prop_assert!(n.contains(n.addr));
            let shift = 32 - u32::from(prefix);
            let agree = prefix == 0 || (a >> shift) == (b >> shift);
            prop_assert_eq!(n.contains(std::net::Ipv4Addr::from(b).into()), agree);
        }
    }
}
