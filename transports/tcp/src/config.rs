//! The endpoint's `key=value` configuration.

use ipl_transport_abi::TransportError;
use ipl_transport_kit::config::{NetConfig, NetDefaults};

/// Default `max_message`: 1 GiB.
pub const DEFAULT_MAX_MESSAGE: u32 = 1 << 30;

/// A parsed configuration: the keys of every network transport, nothing more.
#[derive(Debug, Clone)]
pub(crate) struct Config(NetConfig);

impl std::ops::Deref for Config {
    type Target = NetConfig;
    fn deref(&self) -> &NetConfig {
        &self.0
    }
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
        NetConfig::parse(text, defaults, |_, _| Ok(false)).map(Config)
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
        assert_eq!(c.auth_context(), b"ipl-tcp/");
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
