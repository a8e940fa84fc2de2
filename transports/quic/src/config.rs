//! The endpoint's `key=value` configuration.

use std::time::Duration;

use ipl_auth::PoolSecret;
use ipl_transport_abi::TransportError;
use ipl_transport_kit::admission::DEFAULT_MAX_HANDSHAKES;
use ipl_transport_kit::config::{NetConfig, NetDefaults};

/// Default `max_message`: 1 GiB.
pub const DEFAULT_MAX_MESSAGE: u32 = 1 << 30;

/// Default `idle_timeout`: a peer silent this long (no keep-alive either) is lost.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Default `linger_ms`: how long `shutdown` waits for sent data to be acknowledged.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(10);

/// Default `quic.handshake_timeout_ms`: how long an incoming connection has for the TLS
/// handshake and its hello, in all (as tcp's `tcp.handshake_timeout_ms`).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub secret: PoolSecret,
    pub pool: String,
    /// The shared keys (interfaces, bind, advertise), for the listen plan.
    pub net: NetConfig,
    pub max_message: u32,
    pub idle_timeout: Duration,
    pub linger: Duration,
    /// `quic.handshake_timeout_ms`: the deadline of an incoming connection's handshake
    /// (TLS and hello).
    pub handshake_timeout: Duration,
    /// `quic.max_handshakes`: incoming connections in the handshake at once.
    pub max_handshakes: usize,
}

fn invalid(msg: String) -> TransportError {
    TransportError::InvalidArgument(msg)
}

/// `value` as a number in `min..=max`, or an error naming the key and the range.
fn number(key: &str, value: &str, min: u64, max: u64) -> Result<u64, TransportError> {
    ipl_transport_kit::config::fields::number("quic", key, value, min, max)
}

impl Config {
    /// Parses `key=value` lines; blank lines and `#` comments are skipped, unknown keys
    /// ignored (the same configuration may serve several transports).
    pub fn parse(text: &str) -> Result<Self, TransportError> {
        let mut idle_timeout = DEFAULT_IDLE_TIMEOUT;
        let mut linger = DEFAULT_LINGER;
        let mut handshake_timeout = DEFAULT_HANDSHAKE_TIMEOUT;
        let mut max_handshakes = DEFAULT_MAX_HANDSHAKES;
        let defaults = NetDefaults {
            transport: "quic",
            max_message: DEFAULT_MAX_MESSAGE,
            max_message_limit: crate::wire::GOODBYE - 1,
            secret_why: "; the pool's TLS certificates are derived from it",
        };
        let net = NetConfig::parse(text, defaults, |key, value| {
            match key {
                "idle_timeout_ms" => {
                    idle_timeout = value
                        .parse::<u64>()
                        .ok()
                        .filter(|&n| (100..=3_600_000).contains(&n))
                        .map(Duration::from_millis)
                        .ok_or_else(|| {
                            invalid(format!(
                                "quic config: idle_timeout_ms={value:?} must be 100..=3600000"
                            ))
                        })?
                }
                "linger_ms" => {
                    linger = value
                        .parse::<u64>()
                        .ok()
                        .filter(|&n| n <= 3_600_000)
                        .map(Duration::from_millis)
                        .ok_or_else(|| {
                            invalid(format!(
                                "quic config: linger_ms={value:?} must be 0..=3600000"
                            ))
                        })?
                }
                "quic.handshake_timeout_ms" => {
                    handshake_timeout = Duration::from_millis(number(key, value, 1, 3_600_000)?);
                }
                "quic.max_handshakes" => max_handshakes = number(key, value, 1, 1 << 20)? as usize,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(Config {
            secret: net.secret.clone(),
            pool: net.pool.clone(),
            max_message: net.max_message,
            net,
            idle_timeout,
            linger,
            handshake_timeout,
            max_handshakes,
        })
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
        assert_eq!(c.net.bind, None);
        assert!(c.net.interfaces.is_all());
        assert_eq!(c.max_message, DEFAULT_MAX_MESSAGE);
        assert_eq!(c.idle_timeout, DEFAULT_IDLE_TIMEOUT);
        assert_eq!(c.linger, DEFAULT_LINGER);
        assert_eq!(c.handshake_timeout, DEFAULT_HANDSHAKE_TIMEOUT);
        assert_eq!(c.max_handshakes, DEFAULT_MAX_HANDSHAKES);
        let c = Config::parse(&format!(
            "secret={S}\nquic.handshake_timeout_ms=300\nquic.max_handshakes=4"
        ))
        .unwrap();
        assert_eq!(c.handshake_timeout, Duration::from_millis(300));
        assert_eq!(c.max_handshakes, 4);
        let c = Config::parse(&format!(
            " secret = {S} \npool=p1\nbind=0.0.0.0:0\nmax_message=1024\nidle_timeout_ms=500\nlinger_ms=0"
        ))
        .unwrap();
        assert_eq!(c.pool, "p1");
        assert_eq!(c.max_message, 1024);
        assert_eq!(c.idle_timeout, Duration::from_millis(500));
        assert_eq!(c.linger, Duration::ZERO);
        assert_eq!(c.net.bind, Some("0.0.0.0:0".parse().unwrap()));
        let c = Config::parse(&format!(
            "secret={S}\nadvertise=10.1.2.3\ninterfaces=lo,eth0"
        ))
        .unwrap();
        assert_eq!(c.net.advertise, Some("10.1.2.3".parse::<IpAddr>().unwrap()));
        assert_eq!(c.net.interfaces.to_string(), "lo,eth0");
    }

    #[test]
    fn malformed_values_are_invalid_arguments() {
        for bad in [
            String::new(),
            "pool=x".to_string(),
            "secret=abc".to_string(),
            format!("secret={S}\nbind=localhost"),
            format!("secret={S}\nadvertise=0.0.0.0"),
            format!("secret={S}\nmax_message=0"),
            format!("secret={S}\nmax_message=99999999999"),
            format!("secret={S}\nmax_message=4294967295"),
            format!("secret={S}\nidle_timeout_ms=5"),
            format!("secret={S}\nlinger_ms=-1"),
            format!("secret={S}\njunk"),
            format!("secret={S}\ninterfaces=,"),
            format!("secret={S}\nquic.handshake_timeout_ms=0"),
            format!("secret={S}\nquic.handshake_timeout_ms=3600001"),
            format!("secret={S}\nquic.handshake_timeout_ms=soon"),
            format!("secret={S}\nquic.max_handshakes=0"),
            format!("secret={S}\nquic.max_handshakes=-1"),
            format!("secret={S}\nquic.max_handshakes=many"),
        ] {
            let e = Config::parse(&bad).unwrap_err();
            assert!(
                matches!(e, TransportError::InvalidArgument(_)),
                "{bad:?}: {e:?}"
            );
        }
        let e = Config::parse(&format!("secret={S}\nquic.max_handshakes=0")).unwrap_err();
        assert!(e.detail().contains("quic.max_handshakes"), "{e}");
        assert!(e.detail().contains("1..=1048576"), "{e}");
        let e = Config::parse("pool=x").unwrap_err();
        assert!(e.detail().contains("IPL_POOL_SECRET"), "{e}");
        assert!(e.detail().contains("no pool secret"), "{e}");
    }
}
