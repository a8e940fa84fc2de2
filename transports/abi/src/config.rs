//! The transport configuration text every plugin's `create` receives: `key=value` lines
//! (the user's lines, then `pool=`, `cluster=` and `secret=` from the IPL). Blank lines
//! and `#` comments are skipped; keys and values are trimmed. Unknown keys are for the
//! transport to ignore: the same text serves every transport of an Ibis instance.

use crate::TransportError;

/// The `(key, value)` pairs of a configuration text, in order; a line without `=` is an
/// [`InvalidArgument`](TransportError::InvalidArgument) error naming `transport` and
/// the line.
///
/// ```
/// use ipl_transport_abi::config::entries;
/// let e = entries("# comment\n pool = p1 \n\nmax_message=1024", "tcp").unwrap();
/// assert_eq!(e, vec![("pool", "p1"), ("max_message", "1024")]);
/// assert!(entries("oops", "tcp").unwrap_err().to_string().contains("tcp config"));
/// ```
pub fn entries<'a>(
    text: &'a str,
    transport: &str,
) -> Result<Vec<(&'a str, &'a str)>, TransportError> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').ok_or_else(|| {
            TransportError::InvalidArgument(format!(
                "{transport} config: line {line:?} is not key=value"
            ))
        })?;
        out.push((key.trim(), value.trim()));
    }
    Ok(out)
}

/// The values of the keys that several transports share, each parsed with an error that
/// names the transport and the key.
pub mod fields {
    use crate::TransportError;
    use ipl_auth::PoolSecret;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

    fn invalid(msg: String) -> TransportError {
        TransportError::InvalidArgument(msg)
    }

    /// `secret=`: the pool secret, 64 hex digits.
    pub fn secret(transport: &str, value: &str) -> Result<PoolSecret, TransportError> {
        PoolSecret::from_hex(value).map_err(|e| {
            invalid(format!(
                "{transport} config: secret: {e} (64 hex digits expected)"
            ))
        })
    }

    /// The secret a transport must have; `why` is appended to the error when it is
    /// missing (what the secret is used for beyond authentication, or empty).
    ///
    /// ```
    /// use ipl_transport_abi::config::fields;
    /// let e = fields::require_secret("tcp", None, "").unwrap_err().to_string();
    /// assert!(e.contains("tcp transport: no pool secret configured"), "{e}");
    /// ```
    pub fn require_secret(
        transport: &str,
        secret: Option<PoolSecret>,
        why: &str,
    ) -> Result<PoolSecret, TransportError> {
        secret.ok_or_else(|| {
            invalid(format!(
                "{transport} transport: no pool secret configured: add secret=<64 hex digits> \
                 to the transport configuration (the pool's secret, as in {}){why}",
                ipl_auth::SECRET_ENV
            ))
        })
    }

    /// `bind=`: the local address, `ip:port`.
    pub fn bind(transport: &str, value: &str) -> Result<SocketAddr, TransportError> {
        value
            .parse()
            .map_err(|_| invalid(format!("{transport} config: bind={value:?} is not ip:port")))
    }

    /// `advertise=`: the IP peers should dial; an unspecified address is refused.
    pub fn advertise(transport: &str, value: &str) -> Result<IpAddr, TransportError> {
        let ip: IpAddr = value.parse().map_err(|_| {
            invalid(format!(
                "{transport} config: advertise={value:?} is not an IP address"
            ))
        })?;
        if ip.is_unspecified() {
            return Err(invalid(format!(
                "{transport} config: advertise={value:?} cannot be reached by peers"
            )));
        }
        Ok(ip)
    }

    /// `max_message=`: bytes, from 1 to `limit`.
    pub fn max_message(transport: &str, value: &str, limit: u32) -> Result<u32, TransportError> {
        value
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0 && n <= limit)
            .ok_or_else(|| {
                invalid(format!(
                    "{transport} config: max_message={value:?} must be 1..={limit} bytes"
                ))
            })
    }

    /// The IP peers should dial: the advertised one, else the bound one, with an
    /// unspecified bound address replaced by loopback of its family.
    ///
    /// ```
    /// use ipl_transport_abi::config::fields::advertised_ip;
    /// let ip = advertised_ip(None, &"0.0.0.0:5".parse().unwrap());
    /// assert_eq!(ip, std::net::Ipv4Addr::LOCALHOST);
    /// ```
    pub fn advertised_ip(advertise: Option<IpAddr>, bound: &SocketAddr) -> IpAddr {
        match advertise {
            Some(ip) => ip,
            None => match bound.ip() {
                IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
                ip => ip,
            },
        }
    }
}
