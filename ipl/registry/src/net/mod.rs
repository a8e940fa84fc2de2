//! The registry over the network: a [`RegistryServer`] owning a
//! [`RegistryCore`](crate::RegistryCore), and [`NetRegistry`], a
//! [`RegistryBackend`](crate::RegistryBackend) that talks to it.
//!
//! ```text
//!   member process                        registry server
//!   Registry ── NetRegistry ══ TCP ══ connection thread ─┐
//!   Registry ──┘   (cache, condvar,       (auth, requests)├─ RegistryCore (mutex)
//!                   wakers)           ══ connection thread ─┘
//! ```
//!
//! * Every connection first runs the `ipl_auth` mutual challenge-response
//!   with the server's pool secret (context [`protocol::AUTH_CONTEXT`]); a
//!   client without the secret gets [`RegistryError::Refused`](crate::RegistryError::Refused)
//!   and the server logs a warning with the peer's address (at most one per
//!   [`REFUSAL_LOG_INTERVAL`], with the number left out).
//! * Requests are round-trips; the server pushes each member's events (and
//!   its pool's status) as they happen, before the response of the request
//!   that caused them.
//! * A member whose connection closes without `leave` is declared dead
//!   (this is how a killed process is detected). A connection that stays
//!   open but goes silent (a cut link, a frozen host, a stopped process) is
//!   detected by [`heartbeat`]s: the server closes it after the heartbeat
//!   timeout and its members are declared dead; a client whose server went
//!   silent fails its calls with
//!   [`RegistryError::HeartbeatTimeout`](crate::RegistryError::HeartbeatTimeout).
//!   `maybe_dead` makes the server ping the suspect over its connection.
//! * One server serves any number of pools, by name; a pool whose members
//!   have all left or died is forgotten (a later pool of the same name starts
//!   fresh).
//!
//! The wire format is described in [`protocol`].
//!
//! ```
//! use std::time::Duration;
//! use ipl_auth::PoolSecret;
//! use ipl_registry::{Event, JoinRequest, NetRegistry, PoolConfig, RegistryError, RegistryServer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let secret = PoolSecret::generate()?;
//! let server = RegistryServer::bind("127.0.0.1:0", secret.clone())?.run_in_background()?;
//! let t = Duration::from_secs(5);
//! let a = NetRegistry::connect(server.local_addr(), &secret, t)?
//!     .join("pool", PoolConfig::closed_world(2), JoinRequest::new("c0"))?;
//! let b = NetRegistry::connect(server.local_addr(), &secret, t)?
//!     .join("pool", PoolConfig::closed_world(2), JoinRequest::new("c1"))?;
//! a.wait_until_pool_closed(Some(t))?;
//! assert_eq!(a.elect("master")?, b.elect("master")?);
//!
//! // A stranger is refused.
//! let stranger = PoolSecret::generate()?;
//! let refused = NetRegistry::connect(server.local_addr(), &stranger, t);
//! assert!(matches!(refused, Err(RegistryError::Refused(_))));
//!
//! b.leave()?;
//! assert_eq!(
//!     a.next_event(Some(t))?,
//!     Some(Event::Joined(a.identifier().clone()))
//! );
//! a.leave()?;
//! # Ok(())
//! # }
//! ```

pub mod client;
pub mod heartbeat;
pub mod protocol;
pub mod server;

pub use client::{NetRegistry, DEFAULT_REQUEST_TIMEOUT};
pub use heartbeat::{Heartbeat, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_TIMEOUT};
pub use ipl_auth::admission::{DEFAULT_MAX_HANDSHAKES, REFUSAL_LOG_INTERVAL};
pub use server::{RegistryServer, ServerHandle, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_PROBE_TIMEOUT};
