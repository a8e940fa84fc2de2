//! The hasher of the maps keyed by channel id: looked up once per message sent (local
//! id → route) and once per message received (wire id → local id), FxHash
//! ([`rustc_hash`]).

/// Builds the FxHash hasher of a channel map.
pub(crate) type ChanHasher = rustc_hash::FxBuildHasher;
