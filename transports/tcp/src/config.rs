//! The endpoint's `key=value` configuration.

use std::time::Duration;

use ipl_transport_abi::TransportError;
use ipl_transport_kit::admission::DEFAULT_MAX_HANDSHAKES;
use ipl_transport_kit::config::{NetConfig, NetDefaults};

/// Default `max_message`: 1 GiB.
pub const DEFAULT_MAX_MESSAGE: u32 = 1 << 30;

/// Default `tcp.handshake_timeout_ms`: how long an accepted connection has to
/// authenticate, in all.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default `tcp.send_timeout_ms`: how long a send may make no progress at all (the
/// peer's process reads nothing: frozen, or stuck) before the connection is given up.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// Default `tcp.reader_spin_us`: how long a connection's reader thread reads on without
/// waiting after the last bytes of a frame that still misses 64 KiB or more (see
/// `stream_spin`).
pub const DEFAULT_READER_SPIN: Duration = Duration::from_micros(50);

/// A parsed configuration: the keys of every network transport, and the bounds on
/// connections that have not authenticated yet.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    net: NetConfig,
    /// `tcp.handshake_timeout_ms`: the deadline of an accepted connection's handshake.
    pub handshake_timeout: Duration,
    /// `tcp.max_handshakes`: accepted connections in the handshake at once.
    pub max_handshakes: usize,
    /// `tcp.send_timeout_ms`: the longest a send waits for the peer to take any data.
    pub send_timeout: Duration,
    /// `tcp.reader_spin_us`: how long a reader thread reads on without waiting after
    /// the last bytes of a frame that still misses 64 KiB or more (0: it always waits).
    pub reader_spin: Duration,
}

impl std::ops::Deref for Config {
    type Target = NetConfig;
    fn deref(&self) -> &NetConfig {
        &self.net
    }
}

/// `value` as a number in `min..=max`, or an error naming the key and the range.
fn number(key: &str, value: &str, min: u64, max: u64) -> Result<u64, TransportError> {
    ipl_transport_kit::config::fields::number("tcp", key, value, min, max)
}

impl Config {
    /// Parses `key=value` lines; blank lines and `#` comments are skipped, unknown keys
    /// ignored (the same configuration may serve several transports).
    pub fn parse(text: &str) -> Result<Self, TransportError> {
        let defaults = NetDefaults {
            transport: "tcp",
            max_message: DEFAULT_MAX_MESSAGE,
            max_message_limit: u32::MAX,
            secret_why: "",
        };
        let mut handshake_timeout = DEFAULT_HANDSHAKE_TIMEOUT;
        let mut max_handshakes = DEFAULT_MAX_HANDSHAKES;
        let mut send_timeout = DEFAULT_SEND_TIMEOUT;
        let mut reader_spin = DEFAULT_READER_SPIN;
        let net = NetConfig::parse(text, defaults, |key, value| {
            match key {
                "tcp.handshake_timeout_ms" => {
                    handshake_timeout = Duration::from_millis(number(key, value, 1, 3_600_000)?);
                }
                "tcp.max_handshakes" => max_handshakes = number(key, value, 1, 1 << 20)? as usize,
                "tcp.send_timeout_ms" => {
                    send_timeout = Duration::from_millis(number(key, value, 1, 86_400_000)?);
                }
                "tcp.reader_spin_us" => {
                    reader_spin = Duration::from_micros(number(key, value, 0, 1_000_000)?);
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(Config {
            net,
            handshake_timeout,
            max_handshakes,
            send_timeout,
            reader_spin,
        })
    }

    /// The auth context: `ipl-tcp/<pool>`.
    pub fn auth_context(&self) -> Vec<u8> {
        format!("{}{}", crate::wire::AUTH_CONTEXT_PREFIX, self.pool).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    const S: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn defaults_and_keys() {
        let c = Config::parse(&format!("secret={S}\n# comment\n\nfoo=bar\n")).unwrap();
        assert_eq!(c.bind, None);
        assert!(c.interfaces.is_all());
        assert_eq!(c.max_message, DEFAULT_MAX_MESSAGE);
        assert_eq!(c.handshake_timeout, DEFAULT_HANDSHAKE_TIMEOUT);
        assert_eq!(c.max_handshakes, DEFAULT_MAX_HANDSHAKES);
        assert_eq!(c.send_timeout, DEFAULT_SEND_TIMEOUT);
        assert_eq!(c.reader_spin, DEFAULT_READER_SPIN);
        assert_eq!(c.auth_context(), b"ipl-tcp/");
        let c = Config::parse(&format!(
            "secret={S}\ntcp.handshake_timeout_ms=300\ntcp.max_handshakes=4\ntcp.send_timeout_ms=700\ntcp.reader_spin_us=0"
        ))
        .unwrap();
        assert_eq!(c.send_timeout, Duration::from_millis(700));
        assert_eq!(c.reader_spin, Duration::ZERO);
        assert_eq!(c.handshake_timeout, Duration::from_millis(300));
        assert_eq!(c.max_handshakes, 4);
        let c = Config::parse(&format!(
            " secret = {S} \npool=p1\nbind=0.0.0.0:0\nmax_message=1024\n"
        ))
        .unwrap();
        assert_eq!(c.auth_context(), b"ipl-tcp/p1");
        assert_eq!(c.max_message, 1024);
        assert_eq!(c.bind, Some("0.0.0.0:0".parse().unwrap()));
        let c = Config::parse(&format!("secret={S}\nadvertise=10.1.2.3\ninterfaces=lo")).unwrap();
        assert_eq!(c.advertise, Some("10.1.2.3".parse::<IpAddr>().unwrap()));
        assert_eq!(c.interfaces.to_string(), "lo");
    }

    #[test]
    fn malformed_values_are_invalid_arguments() {
        for bad in [
            String::new(),
            "pool=x".to_string(),
            "secret=abc".to_string(),
            format!("secret={S}\nbind=localhost"),
            format!("secret={S}\nbind=1.2.3.4"),
            format!("secret={S}\nadvertise=0.0.0.0"),
            format!("secret={S}\nmax_message=0"),
            format!("secret={S}\nmax_message=99999999999"),
            format!("secret={S}\njunk"),
            format!("secret={S}\ninterfaces=eth0,,lo"),
            format!("secret={S}\ninterfaces=10.0.0.0/40"),
            format!("secret={S}\ntcp.handshake_timeout_ms=0"),
            format!("secret={S}\ntcp.max_handshakes=0"),
            format!("secret={S}\ntcp.max_handshakes=many"),
            format!("secret={S}\ntcp.send_timeout_ms=0"),
            format!("secret={S}\ntcp.reader_spin_us=1000001"),
        ] {
            let e = Config::parse(&bad).unwrap_err();
            assert!(
                matches!(e, TransportError::InvalidArgument(_)),
                "{bad:?}: {e:?}"
            );
        }
        let e = Config::parse("").unwrap_err();
        assert!(e.detail().contains("IPL_POOL_SECRET"), "{e}");
    }
}
