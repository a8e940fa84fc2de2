//! Maps keyed by channel (transport slot, channel id): the hottest lookups of the IPL,
//! one or more per message, hashed by FxHash ([`rustc_hash`]; SipHash, the default, cost
//! about 7% of a message's send and receive here).

/// A `HashMap` keyed by [`ChannelKey`](crate::ibis::ChannelKey).
pub(crate) type ChannelMap<V> = rustc_hash::FxHashMap<crate::ibis::ChannelKey, V>;
