//! The endpoint's `key=value` configuration.

use std::time::Duration;

use ipl_auth::PoolSecret;
use ipl_transport_abi::TransportError;
use ipl_transport_kit::admission::DEFAULT_MAX_HANDSHAKES;
use ipl_transport_kit::config::fields;

use crate::layout::valid_capacity;

/// Default ring capacity per direction: 8 MiB (one slot carries up to a quarter).
pub const DEFAULT_RING_SIZE: usize = 8 << 20;
/// Default `max_message`: 1 GiB.
pub const DEFAULT_MAX_MESSAGE: usize = 1 << 30;
/// Default `spin_us`.
pub const DEFAULT_SPIN_US: u64 = 10;
/// Default `send_timeout_ms`: how long a sender waits for ring space.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `idle_check_ms`: how long the endpoint thread sleeps at most before it
/// looks at the rings again, wake-up or not.
pub const DEFAULT_IDLE_CHECK: Duration = Duration::from_secs(1);

/// How the endpoint's receiving thread waits when the rings are empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// Never sleeps: polls the rings continuously (burns a core; lowest latency).
    Spin,
    /// Sleeps as soon as the rings are empty; a sender that finds it asleep first
    /// spins up to `shm.spin_us` for a polling receiver (`progress`) to take its
    /// message, and wakes the thread only if nobody did.
    SpinBlock,
    /// Sleeps as soon as the rings are empty; a sender that finds it asleep wakes it
    /// at once.
    Block,
}

/// A parsed configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The pool's secret.
    pub secret: PoolSecret,
    /// The pool's name (part of the auth context).
    pub pool: String,
    /// Capacity of each ring of a connection this endpoint opens.
    pub ring_size: usize,
    /// Largest message sent or accepted.
    pub max_message: usize,
    /// How the receiving thread waits.
    pub wait: WaitMode,
    /// How long a sender spins for a polling receiver before it wakes the receiver's
    /// thread ([`WaitMode::SpinBlock`]), and for credits before it sleeps.
    pub spin: Duration,
    /// How long a send waits for ring space before it fails.
    pub send_timeout: Duration,
    /// How long the endpoint thread sleeps at most without a wake-up: a safety net
    /// that hides a lost wake-up as a delay of up to this long (tests raise it so
    /// that a lost wake-up shows).
    pub idle_check: Duration,
    /// `shm.handshake_timeout_ms`: how long an accepted connection has to complete the
    /// handshake, in all.
    pub handshake_timeout: Duration,
    /// `shm.max_handshakes`: accepted connections in the handshake at once; one beyond
    /// is closed at once.
    pub max_handshakes: usize,
}

fn invalid(msg: String) -> TransportError {
    TransportError::InvalidArgument(msg)
}

/// `value` as a number in `min..=max`, or an error naming the key and the range.
fn number(key: &str, value: &str, min: u64, max: u64) -> Result<u64, TransportError> {
    ipl_transport_kit::config::fields::number("shm", key, value, min, max)
}

impl Config {
    /// Parses `key=value` lines; blank lines and `#` comments are skipped, unknown keys
    /// ignored (the same configuration serves several transports).
    pub fn parse(text: &str) -> Result<Self, TransportError> {
        let mut secret = None;
        let mut c = Config {
            secret: PoolSecret::from_bytes([0; 32]),
            pool: String::new(),
            ring_size: DEFAULT_RING_SIZE,
            max_message: DEFAULT_MAX_MESSAGE,
            wait: WaitMode::SpinBlock,
            spin: Duration::from_micros(DEFAULT_SPIN_US),
            send_timeout: DEFAULT_SEND_TIMEOUT,
            idle_check: DEFAULT_IDLE_CHECK,
            handshake_timeout: crate::handshake::ACCEPT_TIMEOUT,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
        };
        for (key, value) in ipl_transport_kit::config::entries(text, "shm")? {
            match key {
                "secret" => secret = Some(fields::secret("shm", value)?),
                "pool" => c.pool = value.to_string(),
                "shm.ring_size" | "ring_size" => {
                    let n = number(key, value, 1, 1 << 30)?;
                    if !valid_capacity(n) {
                        return Err(invalid(format!(
                            "shm config: {key}={value} must be a power of two from 64 KiB to 1 GiB"
                        )));
                    }
                    c.ring_size = n as usize;
                }
                "max_message" => c.max_message = number(key, value, 1, u32::MAX as u64)? as usize,
                "shm.wait" => {
                    c.wait = match value {
                        "spin" => WaitMode::Spin,
                        "spin_block" => WaitMode::SpinBlock,
                        "block" => WaitMode::Block,
                        _ => {
                            return Err(invalid(format!(
                                "shm config: shm.wait={value:?} must be spin, spin_block or block"
                            )))
                        }
                    }
                }
                "shm.spin_us" => c.spin = Duration::from_micros(number(key, value, 0, 1_000_000)?),
                "shm.send_timeout_ms" => {
                    c.send_timeout = Duration::from_millis(number(key, value, 1, 86_400_000)?)
                }
                "shm.idle_check_ms" => {
                    c.idle_check = Duration::from_millis(number(key, value, 1, 86_400_000)?)
                }
                "shm.handshake_timeout_ms" => {
                    c.handshake_timeout = Duration::from_millis(number(key, value, 1, 3_600_000)?)
                }
                "shm.max_handshakes" => c.max_handshakes = number(key, value, 1, 1 << 20)? as usize,
                other => tracing::debug!(key = other, "shm config: ignoring unknown key"),
            }
        }
        c.secret = fields::require_secret("shm", secret, "")?;
        Ok(c)
    }

    /// The auth context: `ipl-shm/<pool>`.
    pub fn auth_context(&self) -> Vec<u8> {
        format!("ipl-shm/{}", self.pool).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn defaults_and_keys() {
        let c = Config::parse(&format!("secret={S}\nfoo=bar\n# x\n")).unwrap();
        assert_eq!(c.ring_size, DEFAULT_RING_SIZE);
        assert_eq!(c.wait, WaitMode::SpinBlock);
        assert_eq!(c.auth_context(), b"ipl-shm/");
        assert_eq!(c.handshake_timeout, crate::handshake::ACCEPT_TIMEOUT);
        assert_eq!(c.max_handshakes, DEFAULT_MAX_HANDSHAKES);
        let c = Config::parse(&format!(
            "secret={S}\nshm.handshake_timeout_ms=300\nshm.max_handshakes=4"
        ))
        .unwrap();
        assert_eq!(c.handshake_timeout, Duration::from_millis(300));
        assert_eq!(c.max_handshakes, 4);
        let c = Config::parse(&format!(
            "secret={S}\npool=p\nshm.ring_size=65536\nmax_message=10\nshm.wait=block\n\
             shm.spin_us=0\nshm.send_timeout_ms=5\nshm.idle_check_ms=7"
        ))
        .unwrap();
        assert_eq!(c.ring_size, 65536);
        assert_eq!(c.max_message, 10);
        assert_eq!(c.wait, WaitMode::Block);
        assert_eq!(c.spin, Duration::ZERO);
        assert_eq!(c.send_timeout, Duration::from_millis(5));
        assert_eq!(c.idle_check, Duration::from_millis(7));
        assert_eq!(c.auth_context(), b"ipl-shm/p");
    }

    #[test]
    fn malformed_values_are_invalid_arguments() {
        for bad in [
            String::new(),
            "pool=x".into(),
            format!("secret={S}\nshm.ring_size=100000"),
            format!("secret={S}\nshm.ring_size=1024"),
            format!("secret={S}\nshm.wait=sometimes"),
            format!("secret={S}\nmax_message=0"),
            format!("secret={S}\nshm.send_timeout_ms=x"),
            format!("secret={S}\nshm.idle_check_ms=0"),
            format!("secret={S}\nshm.handshake_timeout_ms=0"),
            format!("secret={S}\nshm.max_handshakes=0"),
            format!("secret={S}\njunk"),
        ] {
            let e = Config::parse(&bad).unwrap_err();
            assert!(
                matches!(e, TransportError::InvalidArgument(_)),
                "{bad:?}: {e:?}"
            );
        }
        assert!(Config::parse("").unwrap_err().detail().contains("secret="));
    }
}
