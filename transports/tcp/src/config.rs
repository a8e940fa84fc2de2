//! The endpoint's `key=value` configuration.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use ipl_auth::PoolSecret;
use ipl_transport_abi::config::fields;
use ipl_transport_abi::TransportError;

/// Default `max_message`: 1 GiB.
pub const DEFAULT_MAX_MESSAGE: u32 = 1 << 30;

/// A parsed configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub secret: PoolSecret,
    pub pool: String,
    pub bind: SocketAddr,
    pub advertise: Option<IpAddr>,
    pub max_message: u32,
}

impl Config {
    /// Parses `key=value` lines; blank lines and `#` comments are skipped, unknown keys
    /// ignored (the same configuration may serve several transports).
    pub fn parse(text: &str) -> Result<Self, TransportError> {
        let mut secret = None;
        let mut pool = String::new();
        let mut bind = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        let mut advertise = None;
        let mut max_message = DEFAULT_MAX_MESSAGE;
        for (key, value) in ipl_transport_abi::config::entries(text, "tcp")? {
            match key {
                "secret" => secret = Some(fields::secret("tcp", value)?),
                "pool" => pool = value.to_string(),
                "bind" => bind = fields::bind("tcp", value)?,
                "advertise" => advertise = Some(fields::advertise("tcp", value)?),
                "max_message" => max_message = fields::max_message("tcp", value, u32::MAX)?,
                other => tracing::debug!(key = other, "tcp config: ignoring unknown key"),
            }
        }
        let secret = fields::require_secret("tcp", secret, "")?;
        Ok(Config {
            secret,
            pool,
            bind,
            advertise,
            max_message,
        })
    }

    /// The auth context: `ipl-tcp/<pool>`.
    pub fn auth_context(&self) -> Vec<u8> {
        format!("{}{}", crate::wire::AUTH_CONTEXT_PREFIX, self.pool).into_bytes()
    }

    /// The IP peers should dial, given the address actually bound.
    pub fn advertised_ip(&self, bound: &SocketAddr) -> IpAddr {
        fields::advertised_ip(self.advertise, bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn defaults_and_keys() {
        let c = Config::parse(&format!("secret={S}\n# comment\n\nfoo=bar\n")).unwrap();
        assert_eq!(c.bind, "127.0.0.1:0".parse().unwrap());
        assert_eq!(c.max_message, DEFAULT_MAX_MESSAGE);
        assert_eq!(c.auth_context(), b"ipl-tcp/");
        let c = Config::parse(&format!(
            " secret = {S} \npool=p1\nbind=0.0.0.0:0\nmax_message=1024\n"
        ))
        .unwrap();
        assert_eq!(c.auth_context(), b"ipl-tcp/p1");
        assert_eq!(c.max_message, 1024);
        assert_eq!(
            c.advertised_ip(&"0.0.0.0:5".parse().unwrap()),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        let c = Config::parse(&format!("secret={S}\nadvertise=10.1.2.3")).unwrap();
        assert_eq!(
            c.advertised_ip(&"0.0.0.0:5".parse().unwrap()),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
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
