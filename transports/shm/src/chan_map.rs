//! Maps keyed by channel id: looked up once per message sent (local id → route) and
//! once per message received (wire id → local id), hashed by the ABI crate's
//! multiplicative [`IntHasher`](ipl_transport_abi::int_hash::IntHasher).

/// A `HashMap` keyed by a channel id.
pub(crate) type ChanMap<V> = ipl_transport_abi::int_hash::IntMap<u64, V>;
