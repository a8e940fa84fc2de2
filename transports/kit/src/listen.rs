//! Where a network endpoint listens and which addresses it advertises, from the
//! interface selection ([`plan`]; the transports bind one socket each).
//!
//! - No `bind=`: the selected addresses are advertised, each with the port of one
//!   socket bound to the wildcard address of their families (`0.0.0.0`, or `[::]`
//!   accepting IPv4 too when both families are selected), or to the address itself when
//!   only one is selected. A selection of loopback addresses only binds and advertises
//!   one loopback address. One socket rather than one per address: QUIC moves all its
//!   datagrams through one socket, TCP needs one accept thread per listener, and the
//!   advertised list already says where peers should dial; the wildcard socket also
//!   answers on addresses outside the selection, which the pool secret guards like
//!   any other.
//! - `bind=ip:port` (tests, fixed ports): exactly that socket; advertised is its IP, or
//!   the selected addresses of its family when it is a wildcard.
//! - `advertise=ip` replaces the advertised list by that one IP (e.g. behind NAT).
//!
//! ```
//! use ipl_transport_kit::interfaces::LocalAddr;
//! use ipl_transport_kit::listen::plan;
//! let sel = [
//!     LocalAddr::new("eth0", "192.0.2.2".parse().unwrap(), 24),
//!     LocalAddr::new("lo", "127.0.0.1".parse().unwrap(), 8),
//! ];
//! let p = plan(&sel, None, None);
//! assert_eq!(p.bind, "0.0.0.0:0".parse().unwrap());
//! assert_eq!(p.advertise, ["192.0.2.2".parse::<std::net::IpAddr>().unwrap(), "127.0.0.1".parse().unwrap()]);
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::address::IpEndpoint;
use crate::host::HostId;
use crate::interfaces::LocalAddr;

/// What to bind and what to advertise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenPlan {
    /// The socket address to bind.
    pub bind: SocketAddr,
    /// Whether an IPv6 wildcard socket must accept IPv4 too (`IPV6_V6ONLY` off); for an
    /// IPv6 wildcard without it, `IPV6_V6ONLY` is set.
    pub dual_stack: bool,
    /// The IPs peers may dial, non-loopback ones first.
    pub advertise: Vec<IpAddr>,
    /// The selected addresses of this host (for "same subnet" when dialing).
    pub own: Vec<LocalAddr>,
}

fn wildcard(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}

/// Non-loopback first, each group in the given order, each IP once.
fn advertised(ips: impl IntoIterator<Item = IpAddr>) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = Vec::new();
    for ip in ips {
        if !v.contains(&ip) {
            v.push(ip);
        }
    }
    v.sort_by_key(|ip| ip.is_loopback());
    v
}

/// The plan for the `selected` addresses, an explicit `bind` and `advertise`.
pub fn plan(
    selected: &[LocalAddr],
    bind: Option<SocketAddr>,
    advertise: Option<IpAddr>,
) -> ListenPlan {
    let own = selected.to_vec();
    let (bind, dual_stack, ips) = match bind {
        Some(b) if !b.ip().is_unspecified() => (b, false, vec![b.ip()]),
        Some(b) => {
            let mut ips: Vec<IpAddr> = selected
                .iter()
                .map(|a| a.ip)
                .filter(|ip| ip.is_ipv6() == b.is_ipv6())
                .collect();
            if ips.is_empty() {
                ips.push(if b.is_ipv6() {
                    Ipv6Addr::LOCALHOST.into()
                } else {
                    Ipv4Addr::LOCALHOST.into()
                });
            }
            (b, false, ips)
        }
        None => {
            let ips: Vec<IpAddr> = selected.iter().map(|a| a.ip).collect();
            let only = if ips.iter().all(|ip| ip.is_loopback()) {
                ips.iter().find(|ip| ip.is_ipv4()).or(ips.first()).copied()
            } else if ips.len() == 1 {
                ips.first().copied()
            } else {
                None
            };
            match only {
                Some(ip) => (SocketAddr::new(ip, 0), false, vec![ip]),
                None => {
                    let v4 = ips.iter().any(|ip| ip.is_ipv4());
                    let v6 = ips.iter().any(|ip| ip.is_ipv6());
                    (SocketAddr::new(wildcard(v6), 0), v4 && v6, ips)
                }
            }
        }
    };
    ListenPlan {
        bind,
        dual_stack,
        advertise: match advertise {
            Some(ip) => vec![ip],
            None => advertised(ips),
        },
        own,
    }
}

impl ListenPlan {
    /// The plan for a host without IPv6 sockets: a dual-stack plan falls back to
    /// `0.0.0.0` and its IPv4 addresses (`None` if it is not dual-stack).
    pub fn ipv4_only(&self) -> Option<ListenPlan> {
        if !self.dual_stack {
            return None;
        }
        let mut p = self.clone();
        p.bind = SocketAddr::new(wildcard(false), self.bind.port());
        p.dual_stack = false;
        p.advertise.retain(|ip| ip.is_ipv4());
        p.own.retain(|a| a.ip.is_ipv4());
        Some(p)
    }

    /// Whether an IPv6 wildcard socket should be IPv6-only.
    pub fn only_v6(&self) -> Option<bool> {
        (self.bind.is_ipv6() && self.bind.ip().is_unspecified()).then_some(!self.dual_stack)
    }

    /// Whether the bound socket can send to `to`: its family, or IPv4 on a dual-stack
    /// socket; a socket bound to loopback reaches only loopback.
    pub fn can_reach(&self, bound: SocketAddr, to: SocketAddr) -> bool {
        let family = to.is_ipv4() == bound.is_ipv4() || (self.dual_stack && to.is_ipv4());
        family && (!bound.ip().is_loopback() || to.ip().is_loopback())
    }

    /// The endpoint's address: every advertised IP with the bound port. A host with
    /// more addresses than an address may list ([`MAX_SOCKETS`](crate::address::MAX_SOCKETS))
    /// keeps its loopback addresses and the first others (the rest is logged).
    pub fn endpoint(&self, port: u16, id: u64, host: Option<HostId>) -> IpEndpoint {
        let max = crate::address::MAX_SOCKETS;
        let loopback: Vec<IpAddr> = self
            .advertise
            .iter()
            .copied()
            .filter(|ip| ip.is_loopback())
            .take(2)
            .collect();
        let others = self
            .advertise
            .iter()
            .copied()
            .filter(|ip| !ip.is_loopback());
        let ips: Vec<IpAddr> = others.take(max - loopback.len()).chain(loopback).collect();
        if ips.len() < self.advertise.len() {
            tracing::warn!(
                "{} addresses selected, an address lists at most {max}; advertising {ips:?} \
                 (select fewer with interfaces=)",
                self.advertise.len()
            );
        }
        IpEndpoint {
            sockets: ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect(),
            id,
            host,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(list: &[(&str, &str)]) -> Vec<LocalAddr> {
        list.iter()
            .map(|(n, ip)| LocalAddr::new(*n, ip.parse().unwrap(), 24))
            .collect()
    }

    fn strs<T: ToString>(v: &[T]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn plans() {
        let all = sel(&[
            ("lo", "127.0.0.1"),
            ("eth0", "192.0.2.2"),
            ("lo", "::1"),
            ("eth0", "fd00::2"),
        ]);
        let p = plan(&all, None, None);
        assert_eq!(p.bind.to_string(), "[::]:0");
        assert!(p.dual_stack);
        assert_eq!(p.only_v6(), Some(false));
        assert_eq!(
            strs(&p.advertise),
            ["192.0.2.2", "fd00::2", "127.0.0.1", "::1"]
        );
        let q = p.ipv4_only().unwrap();
        assert_eq!(q.bind.to_string(), "0.0.0.0:0");
        assert_eq!(strs(&q.advertise), ["192.0.2.2", "127.0.0.1"]);
        assert_eq!(q.ipv4_only(), None);
        let e = p.endpoint(4000, 1, None);
        assert_eq!(e.sockets[0].to_string(), "192.0.2.2:4000");
        assert_eq!(e.sockets.len(), 4);

        let lo = plan(&sel(&[("lo", "127.0.0.1"), ("lo", "::1")]), None, None);
        assert_eq!(lo.bind.to_string(), "127.0.0.1:0");
        assert_eq!(strs(&lo.advertise), ["127.0.0.1"]);
        let one = plan(&sel(&[("eth0", "192.0.2.2")]), None, None);
        assert_eq!(one.bind.to_string(), "192.0.2.2:0");
        assert_eq!(one.only_v6(), None);
        let v4 = plan(
            &sel(&[("eth0", "192.0.2.2"), ("eth1", "10.0.0.1")]),
            None,
            None,
        );
        assert_eq!(
            (v4.bind.to_string(), v4.dual_stack),
            ("0.0.0.0:0".into(), false)
        );
        let v6 = plan(
            &sel(&[("eth0", "fd00::2"), ("eth1", "fd01::2")]),
            None,
            None,
        );
        assert_eq!(v6.only_v6(), Some(true));

        let b = plan(&all, Some("127.0.0.1:0".parse().unwrap()), None);
        assert_eq!(strs(&b.advertise), ["127.0.0.1"]);
        let b = plan(&all, Some("0.0.0.0:7000".parse().unwrap()), None);
        assert_eq!(b.bind.port(), 7000);
        assert_eq!(strs(&b.advertise), ["192.0.2.2", "127.0.0.1"]);
        let b = plan(&[], Some("0.0.0.0:0".parse().unwrap()), None);
        assert_eq!(strs(&b.advertise), ["127.0.0.1"]);
        let a = plan(
            &all,
            Some("0.0.0.0:0".parse().unwrap()),
            Some("10.1.2.3".parse().unwrap()),
        );
        assert_eq!(strs(&a.advertise), ["10.1.2.3"]);
    }

    #[test]
    fn a_host_with_many_addresses_keeps_loopback() {
        let mut many: Vec<LocalAddr> = (1..=40)
            .map(|i| LocalAddr::new("eth0", IpAddr::from([10, 0, 0, i]), 24))
            .collect();
        many.push(LocalAddr::new("lo", "127.0.0.1".parse().unwrap(), 8));
        let e = plan(&many, None, None).endpoint(9, 1, None);
        assert_eq!(e.sockets.len(), crate::address::MAX_SOCKETS);
        assert!(e.sockets.iter().any(|s| s.ip().is_loopback()));
        assert_eq!(e.sockets[0].to_string(), "10.0.0.1:9");
        // What it publishes parses.
        assert_eq!(IpEndpoint::parse("tcp", &e.to_bytes()).unwrap(), e);
    }

    #[test]
    fn reachability_by_family() {
        let all = sel(&[("lo", "127.0.0.1"), ("eth0", "fd00::2")]);
        let p = plan(&all, None, None);
        let bound: SocketAddr = "[::]:5".parse().unwrap();
        assert!(p.can_reach(bound, "10.0.0.1:1".parse().unwrap()));
        assert!(p.can_reach(bound, "[fd00::1]:1".parse().unwrap()));
        let q = p.ipv4_only().unwrap();
        let bound4: SocketAddr = "0.0.0.0:5".parse().unwrap();
        assert!(!q.can_reach(bound4, "[fd00::1]:1".parse().unwrap()));
        let lo: SocketAddr = "127.0.0.1:5".parse().unwrap();
        assert!(!q.can_reach(lo, "10.0.0.1:1".parse().unwrap()));
        assert!(q.can_reach(lo, "127.0.0.1:1".parse().unwrap()));
    }
}
