//! Dialing an endpoint that listens at several addresses: the order to try them in
//! ([`order`]) and the loop that tries them within one connect timeout
//! ([`try_in_order`]).
//!
//! Order: a peer on the same host (same [`HostId`]) is dialed over loopback first; then
//! come the addresses on the same subnet as one of the dialer's own addresses; then the
//! rest, each group in the order the peer listed them. Loopback addresses of a peer on
//! another host are left out (they would reach this host). An address whose family the
//! dialer cannot use is left out by the transport (see [`try_in_order`]).
//!
//! ```
//! use ipl_transport_kit::dial::order;
//! use ipl_transport_kit::interfaces::LocalAddr;
//! use ipl_transport_kit::{host::HostId, IpEndpoint};
//! let here = HostId { boot: 1, netns: 2 };
//! let mut peer = IpEndpoint {
//!     sockets: vec!["192.0.2.9:5".parse().unwrap(), "10.0.0.9:5".parse().unwrap(), "127.0.0.1:5".parse().unwrap()],
//!     id: 1,
//!     host: Some(here),
//! };
//! let own = [LocalAddr::new("eth1", "10.0.0.1".parse().unwrap(), 24)];
//! let ports = |p: &ipl_transport_kit::dial::Plan| p.order.iter().map(|s| s.ip().to_string()).collect::<Vec<_>>();
//! assert_eq!(ports(&order(&peer, Some(here), &own)), ["127.0.0.1", "10.0.0.9", "192.0.2.9"]);
//! peer.host = Some(HostId { boot: 1, netns: 3 }); // another network namespace: another host
//! assert_eq!(ports(&order(&peer, Some(here), &own)), ["10.0.0.9", "192.0.2.9"]);
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ipl_transport_abi::TransportError;

use crate::address::IpEndpoint;
use crate::host::HostId;
use crate::interfaces::LocalAddr;

/// The addresses to try, and those left out with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The addresses to try, in order.
    pub order: Vec<SocketAddr>,
    /// Addresses left out, and why.
    pub skipped: Vec<(SocketAddr, &'static str)>,
}

/// The order to dial `peer` in, from host `here` (if known) with own addresses `own`.
pub fn order(peer: &IpEndpoint, here: Option<HostId>, own: &[LocalAddr]) -> Plan {
    let same_host = match (peer.host, here) {
        (Some(p), Some(h)) => Some(p == h),
        _ => None,
    };
    let mut ranked = Vec::new();
    let mut skipped = Vec::new();
    for &s in &peer.sockets {
        let ip = s.ip();
        let rank = if ip.is_loopback() {
            if same_host == Some(false) {
                skipped.push((s, "a loopback address of a peer on another host"));
                continue;
            }
            0
        } else if own.iter().any(|a| !a.ip.is_loopback() && a.same_subnet(ip)) {
            1
        } else {
            2
        };
        ranked.push((rank, s));
    }
    // Stable: each group keeps the peer's order.
    ranked.sort_by_key(|&(r, _)| r);
    Plan {
        order: ranked.into_iter().map(|(_, s)| s).collect(),
        skipped,
    }
}

/// The least time an attempt gets (unless less remains): a handshake on a loaded
/// machine must not fail over to the next address merely because the timeout was
/// shared among many.
pub const MIN_ATTEMPT: Duration = Duration::from_secs(1);

/// The time for one attempt when `left` addresses (this one included) share
/// `remaining`: an equal share, at least [`MIN_ATTEMPT`] (or all that remains), so
/// that one address that black-holes cannot use up the whole timeout; an attempt that
/// fails early leaves its time to the next.
pub fn attempt_budget(remaining: Duration, left: usize) -> Duration {
    let left = u32::try_from(left.max(1)).unwrap_or(u32::MAX);
    (remaining / left).max(MIN_ATTEMPT.min(remaining))
}

/// How telling an error is about the peer: one that reached it (refused) beats a
/// timeout, which beats the rest.
fn weight(e: &TransportError) -> u8 {
    match e {
        TransportError::Refused(_) => 3,
        TransportError::Timeout(_) => 2,
        _ => 1,
    }
}

/// Dials the addresses of `plan` in order with `attempt(address, budget)` until one
/// succeeds, all within `timeout`, logging why each failed. The error, when all fail,
/// lists every reason under the kind of the most telling one (refused, then timed out).
/// A [`Closed`](TransportError::Closed) error (the endpoint is shutting down) ends the
/// loop at once.
pub fn try_in_order<T>(
    transport: &str,
    peer: &IpEndpoint,
    plan: &Plan,
    timeout: Duration,
    mut attempt: impl FnMut(SocketAddr, Duration) -> Result<T, TransportError>,
) -> Result<T, TransportError> {
    for (s, why) in &plan.skipped {
        tracing::debug!(address = %s, "{transport}: not dialing {s}: {why}");
    }
    let deadline = Instant::now() + timeout;
    let n = plan.order.len();
    let mut failures: Vec<(SocketAddr, TransportError)> = Vec::new();
    for (i, &to) in plan.order.iter().enumerate() {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            failures.push((
                to,
                TransportError::Timeout(format!("{transport}: no time left to dial {to}")),
            ));
            continue;
        }
        match attempt(to, attempt_budget(remaining, n - i)) {
            Ok(t) => return Ok(t),
            Err(e @ TransportError::Closed(_)) => return Err(e),
            Err(e) => {
                if i + 1 < n {
                    tracing::debug!(address = %to, "{transport}: dialing {to} failed: {e}; trying the next address");
                }
                failures.push((to, e));
            }
        }
    }
    if failures.len() == 1 && plan.skipped.is_empty() {
        let (to, e) = failures.remove(0);
        tracing::debug!(address = %to, "{transport}: dialing {to} failed: {e}");
        return Err(e);
    }
    let mut why = format!(
        "{transport}: no address of endpoint {:016x} could be reached:",
        peer.id
    );
    for (s, e) in &failures {
        why.push_str(&format!(" {s}: {};", e.detail()));
    }
    for (s, reason) in &plan.skipped {
        why.push_str(&format!(" {s}: skipped, {reason};"));
    }
    why.pop();
    tracing::warn!("{why}");
    let kind = failures.iter().map(|(_, e)| e).max_by_key(|e| weight(e));
    Err(match kind {
        Some(TransportError::Refused(_)) => TransportError::Refused(why),
        Some(TransportError::Timeout(_)) => TransportError::Timeout(why),
        Some(TransportError::InvalidArgument(_)) => TransportError::InvalidArgument(why),
        _ => TransportError::Unavailable(why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: HostId = HostId { boot: 7, netns: 1 };

    fn peer(socks: &[&str], host: Option<HostId>) -> IpEndpoint {
        IpEndpoint {
            sockets: socks.iter().map(|s| s.parse().unwrap()).collect(),
            id: 9,
            host,
        }
    }

    fn own() -> Vec<LocalAddr> {
        vec![
            LocalAddr::new("lo", "127.0.0.1".parse().unwrap(), 8),
            LocalAddr::new("veth0", "10.231.0.1".parse().unwrap(), 24),
            LocalAddr::new("eth0", "fd00::1".parse().unwrap(), 64),
        ]
    }

    fn ips(p: &Plan) -> Vec<String> {
        p.order.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn orders_by_host_then_subnet_then_listing() {
        let socks = [
            "192.0.2.2:1",
            "[fd00::2]:2",
            "10.231.0.2:3",
            "127.0.0.1:4",
            "[::1]:5",
        ];
        let same = order(&peer(&socks, Some(HERE)), Some(HERE), &own());
        assert_eq!(
            ips(&same),
            [
                "127.0.0.1:4",
                "[::1]:5",
                "[fd00::2]:2",
                "10.231.0.2:3",
                "192.0.2.2:1"
            ]
        );
        assert!(same.skipped.is_empty());
        let other = HostId { boot: 7, netns: 2 };
        let far = order(&peer(&socks, Some(other)), Some(HERE), &own());
        assert_eq!(ips(&far), ["[fd00::2]:2", "10.231.0.2:3", "192.0.2.2:1"]);
        assert_eq!(far.skipped.len(), 2);
        // Unknown host (an old address, or no host id here): loopback stays, first.
        let unknown = order(&peer(&socks, None), Some(HERE), &own());
        assert_eq!(unknown.order.len(), 5);
        assert_eq!(ips(&unknown)[0], "127.0.0.1:4");
        assert_eq!(order(&peer(&socks, Some(HERE)), None, &[]).order.len(), 5);
        // Loopback of our own never counts as "same subnet".
        let p = order(
            &peer(&["10.0.0.1:1", "127.0.0.2:2"], Some(other)),
            Some(HERE),
            &own(),
        );
        assert_eq!(ips(&p), ["10.0.0.1:1"]);
    }

    #[test]
    fn budgets_share_the_remaining_time() {
        assert_eq!(
            attempt_budget(Duration::from_secs(6), 3),
            Duration::from_secs(2)
        );
        assert_eq!(
            attempt_budget(Duration::from_secs(6), 1),
            Duration::from_secs(6)
        );
        assert_eq!(
            attempt_budget(Duration::from_secs(6), 0),
            Duration::from_secs(6)
        );
        assert_eq!(attempt_budget(Duration::from_secs(2), 4), MIN_ATTEMPT);
        let little = Duration::from_millis(300);
        assert_eq!(attempt_budget(little, 4), little);
    }

    #[test]
    fn tries_in_order_and_reports_every_failure() {
        let p = peer(&["10.0.0.1:1", "10.0.0.2:2", "10.0.0.3:3"], None);
        let plan = order(&p, None, &[]);
        let mut tried = Vec::new();
        let got = try_in_order("tcp", &p, &plan, Duration::from_secs(9), |s, budget| {
            tried.push((s.port(), budget));
            match s.port() {
                1 => Err(TransportError::Timeout("black hole".into())),
                2 => Err(TransportError::Refused("closed port".into())),
                _ => Ok(s.port()),
            }
        });
        assert_eq!(got.unwrap(), 3);
        assert_eq!(tried.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(tried[0].1 <= Duration::from_secs(3));
        let all_fail = try_in_order::<()>("tcp", &p, &plan, Duration::from_secs(9), |s, _| {
            Err(if s.port() == 2 {
                TransportError::Refused("wrong secret".into())
            } else {
                TransportError::Timeout("silence".into())
            })
        });
        match all_fail {
            Err(TransportError::Refused(m)) => {
                for part in [
                    "10.0.0.1:1: silence",
                    "10.0.0.2:2: wrong secret",
                    "10.0.0.3:3",
                ] {
                    assert!(m.contains(part), "{m}");
                }
            }
            other => panic!("{other:?}"),
        }
        // Shutting down ends the loop.
        let mut n = 0;
        let closed = try_in_order::<()>("tcp", &p, &plan, Duration::from_secs(9), |_, _| {
            n += 1;
            Err(TransportError::Closed("shutting down".into()))
        });
        assert!(matches!(closed, Err(TransportError::Closed(_))));
        assert_eq!(n, 1);
        // A single address's error comes back as it is.
        let one = peer(&["10.0.0.1:1"], None);
        let e = try_in_order::<()>(
            "tcp",
            &one,
            &order(&one, None, &[]),
            Duration::from_secs(1),
            |_, _| Err(TransportError::Refused("no".into())),
        );
        assert_eq!(e.unwrap_err().detail(), "no");
    }

    #[test]
    fn nothing_to_try_is_an_error() {
        let p = peer(&["127.0.0.1:1"], Some(HostId { boot: 1, netns: 1 }));
        let plan = order(&p, Some(HERE), &own());
        assert!(plan.order.is_empty());
        let e = try_in_order::<()>("quic", &p, &plan, Duration::from_secs(1), |_, _| Ok(()));
        match e {
            Err(TransportError::Unavailable(m)) => assert!(m.contains("another host"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
