//! Maps keyed by channel (transport slot, channel id): the hottest lookups of the IPL,
//! one or more per message. The keys are small integers chosen by this process's
//! transports, so a multiplicative hash serves them (SipHash, the default, cost about
//! 7% of a message's send and receive here).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by [`ChannelKey`](crate::ibis::ChannelKey).
pub(crate) type ChannelMap<V> = HashMap<crate::ibis::ChannelKey, V, BuildHasherDefault<KeyHasher>>;

/// Multiplicative hashing of integer keys (the constant is 2^64 / golden ratio).
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(K);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_differ_in_either_part_hash_apart_and_all_are_found() {
        let mut m: ChannelMap<u64> = ChannelMap::default();
        for slot in 0..4usize {
            for ch in 0..1000u64 {
                m.insert((slot, ch), slot as u64 * 10_000 + ch);
            }
        }
        assert_eq!(m.len(), 4000);
        for slot in 0..4usize {
            for ch in 0..1000u64 {
                assert_eq!(m[&(slot, ch)], slot as u64 * 10_000 + ch);
            }
        }
        let h = |k: (usize, u64)| {
            let mut s = KeyHasher::default();
            std::hash::Hash::hash(&k, &mut s);
            s.finish()
        };
        assert_ne!(h((0, 1)), h((1, 0)));
    }
}
