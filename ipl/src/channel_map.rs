//! Maps keyed by channel (transport slot, channel id): the hottest lookups of the IPL,
//! one or more per message, hashed by the ABI crate's multiplicative
//! [`IntHasher`](ipl_transport_abi::int_hash::IntHasher) (SipHash, the default, cost
//! about 7% of a message's send and receive here).

/// A `HashMap` keyed by [`ChannelKey`](crate::ibis::ChannelKey).
pub(crate) type ChannelMap<V> = ipl_transport_abi::int_hash::IntMap<crate::ibis::ChannelKey, V>;
