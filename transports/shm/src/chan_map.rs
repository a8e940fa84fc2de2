//! The hasher of the maps keyed by channel id: looked up once per message sent (local
//! id → route) and once per message received (wire id → local id), the ABI crate's
//! multiplicative [`IntHasher`](ipl_transport_abi::int_hash::IntHasher).

/// Builds the [`IntHasher`](ipl_transport_abi::int_hash::IntHasher) of a channel map.
pub(crate) type ChanHasher = std::hash::BuildHasherDefault<ipl_transport_abi::int_hash::IntHasher>;
