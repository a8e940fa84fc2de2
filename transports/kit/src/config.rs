//! The transport configuration text every plugin's `create` receives: `key=value` lines
//! (the user's lines, then `pool=`, `cluster=` and `secret=` from the IPL). Blank lines
//! and `#` comments are skipped; keys and values are trimmed. Unknown keys are for the
//! transport to ignore: the same text serves every transport of an Ibis instance.

use ipl_transport_abi::TransportError;

/// The length of a message made of `slices`, checked against `max_message` before it
/// is sent: an [`InvalidArgument`](TransportError::InvalidArgument) error if it is larger
/// (or does not fit the 32-bit length of a frame).
///
/// ```
/// use ipl_transport_kit::config::message_len;
/// assert_eq!(message_len(&[b"ab", b"cde"], 5).unwrap(), 5);
/// let e = message_len(&[b"abcdef"], 5).unwrap_err().to_string();
/// assert!(e.contains("message of 6 bytes exceeds max_message (5)"), "{e}");
/// ```
pub fn message_len(slices: &[&[u8]], max_message: u32) -> Result<u32, TransportError> {
    let total: u64 = slices.iter().map(|s| s.len() as u64).sum();
    u32::try_from(total)
        .ok()
        .filter(|&l| l <= max_message)
        .ok_or_else(|| {
            TransportError::InvalidArgument(format!(
                "message of {total} bytes exceeds max_message ({max_message})"
            ))
        })
}

/// The `(key, value)` pairs of a configuration text, in order; a line without `=` is an
/// [`InvalidArgument`](TransportError::InvalidArgument) error naming `transport` and
/// the line.
///
/// ```
/// use ipl_transport_kit::config::entries;
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
    use ipl_auth::PoolSecret;
    use ipl_transport_abi::TransportError;
    use std::net::{IpAddr, SocketAddr};

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
    /// use ipl_transport_kit::config::fields;
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

    /// `interfaces=`: an interface selection (see [`crate::interfaces`]).
    pub fn interfaces(
        transport: &str,
        value: &str,
    ) -> Result<crate::interfaces::InterfaceSpec, TransportError> {
        crate::interfaces::InterfaceSpec::parse(value)
            .map_err(|e| invalid(format!("{transport} config: {e}")))
    }

    /// A whole number in `min..=max` for `key`, or an error naming the transport, the
    /// key and the range.
    ///
    /// ```
    /// use ipl_transport_kit::config::fields::number;
    /// assert_eq!(number("tcp", "tcp.max_handshakes", "8", 1, 64).unwrap(), 8);
    /// let e = number("tcp", "tcp.max_handshakes", "0", 1, 64).unwrap_err().to_string();
    /// assert!(e.contains("tcp config: tcp.max_handshakes=\"0\" must be 1..=64"), "{e}");
    /// assert!(number("quic", "k", "-1", 0, 9).is_err());
    /// ```
    pub fn number(
        transport: &str,
        key: &str,
        value: &str,
        min: u64,
        max: u64,
    ) -> Result<u64, TransportError> {
        value
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                invalid(format!(
                    "{transport} config: {key}={value:?} must be {min}..={max}"
                ))
            })
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
}

/// The keys every network transport (tcp, quic) reads: `secret=` (required), `pool=`,
/// `interfaces=` (an [`InterfaceSpec`](crate::interfaces::InterfaceSpec); default all),
/// `bind=` (default: from the interfaces, see [`listen`](crate::listen)), `advertise=`
/// and `max_message=`.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// The pool secret.
    pub secret: ipl_auth::PoolSecret,
    /// The pool's name (empty if not given).
    pub pool: String,
    /// The interfaces to listen on and advertise (`interfaces=`).
    pub interfaces: crate::interfaces::InterfaceSpec,
    /// The local address to bind, if given (`bind=`).
    pub bind: Option<std::net::SocketAddr>,
    /// The IP peers should dial, if not the bound one.
    pub advertise: Option<std::net::IpAddr>,
    /// The largest message, in bytes.
    pub max_message: u32,
}

/// The transport-specific part of [`NetConfig::parse`].
#[derive(Debug, Clone, Copy)]
pub struct NetDefaults<'a> {
    /// The transport's name, for error messages.
    pub transport: &'a str,
    /// `max_message` when not given.
    pub max_message: u32,
    /// The largest `max_message` allowed.
    pub max_message_limit: u32,
    /// Appended to the error when the secret is missing (what else it is used for, or
    /// empty).
    pub secret_why: &'a str,
}

impl NetConfig {
    /// Parses a configuration text: the shared keys here, every other key through
    /// `other`, which returns whether it knew the key (an unknown key is ignored, as the
    /// same text serves every transport).
    ///
    /// ```
    /// use ipl_transport_kit::config::{NetConfig, NetDefaults};
    /// let d = NetDefaults { transport: "tcp", max_message: 1 << 30, max_message_limit: u32::MAX, secret_why: "" };
    /// let s = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    /// let mut extra = None;
    /// let c = NetConfig::parse(&format!("secret={s}\npool=p\nlinger=5"), d, |k, v| {
    ///     Ok(k == "linger" && extra.replace(v.to_string()).is_none())
    /// })
    /// .unwrap();
    /// assert_eq!((c.pool.as_str(), c.max_message), ("p", 1 << 30));
    /// assert_eq!(extra.as_deref(), Some("5"));
    /// assert!(NetConfig::parse("pool=p", d, |_, _| Ok(false)).is_err());
    /// ```
    pub fn parse(
        text: &str,
        defaults: NetDefaults<'_>,
        mut other: impl FnMut(&str, &str) -> Result<bool, TransportError>,
    ) -> Result<Self, TransportError> {
        let t = defaults.transport;
        let mut secret = None;
        let mut pool = String::new();
        let mut bind = None;
        let mut interfaces = crate::interfaces::InterfaceSpec::all();
        let mut advertise = None;
        let mut max_message = defaults.max_message;
        for (key, value) in entries(text, t)? {
            match key {
                "secret" => secret = Some(fields::secret(t, value)?),
                "pool" => pool = value.to_string(),
                "bind" => bind = Some(fields::bind(t, value)?),
                "interfaces" => interfaces = fields::interfaces(t, value)?,
                "advertise" => advertise = Some(fields::advertise(t, value)?),
                "max_message" => {
                    max_message = fields::max_message(t, value, defaults.max_message_limit)?
                }
                key => {
                    if !other(key, value)? {
                        tracing::debug!(key, "{t} config: ignoring unknown key");
                    }
                }
            }
        }
        let secret = fields::require_secret(t, secret, defaults.secret_why)?;
        Ok(NetConfig {
            secret,
            pool,
            interfaces,
            bind,
            advertise,
            max_message,
        })
    }

    /// Where to listen and what to advertise: the host's addresses that `interfaces=`
    /// selects (an interface, address or network this host lacks is an
    /// [`InvalidArgument`](TransportError::InvalidArgument) naming it), shaped by
    /// `bind=` and `advertise=` (see [`listen`](crate::listen)).
    pub fn listen_plan(
        &self,
        transport: &str,
    ) -> Result<crate::listen::ListenPlan, TransportError> {
        let selected = match crate::interfaces::local_addresses(&self.interfaces) {
            Ok(s) => s,
            // A fixed bind address needs no interface list.
            Err(e) if self.bind.is_some() && self.interfaces.is_all() => {
                tracing::debug!("{transport}: {e}");
                Vec::new()
            }
            Err(e) => {
                return Err(TransportError::InvalidArgument(format!(
                    "{transport} config: interfaces={}: {e}",
                    self.interfaces
                )))
            }
        };
        Ok(crate::listen::plan(&selected, self.bind, self.advertise))
    }
}
