//! Maps keyed by channel id: looked up once per message sent (local id → route) and
//! once per message received (wire id → local id). The keys are small integers, so a
//! multiplicative hash serves them; SipHash, the default, cost more than the rest of
//! the lookup. Wire ids come from the peer, which authenticated with the pool secret;
//! a peer that chose colliding ids would only slow its own channels down.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by a channel id.
pub(crate) type ChanMap<V> = HashMap<u64, V, BuildHasherDefault<ChanHasher>>;

/// Multiplicative hashing of a `u64` key (the constant is 2^64 / golden ratio; the high
/// bits, which the table uses, depend on every bit of the key).
#[derive(Default, Clone, Copy)]
pub(crate) struct ChanHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for ChanHasher {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OPENED_BY_SENDER;

    #[test]
    fn local_and_wire_ids_are_all_found() {
        let mut m: ChanMap<u64> = ChanMap::default();
        for ch in 1..2000u64 {
            m.insert(ch, ch * 3);
            m.insert(ch | OPENED_BY_SENDER, ch * 5);
        }
        assert_eq!(m.len(), 3998);
        for ch in 1..2000u64 {
            assert_eq!(m[&ch], ch * 3);
            assert_eq!(m[&(ch | OPENED_BY_SENDER)], ch * 5);
        }
        assert!(!m.contains_key(&0));
    }
}
